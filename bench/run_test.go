package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// shortOptions are options for runs of a fraction of a second.
func shortOptions(cases []Case, modes []Mode) Options {
	opts := DefaultOptions()
	opts.Cases, opts.Modes = cases, modes
	opts.MessageBytes = 256
	opts.Warmup, opts.Duration = 50*time.Millisecond, 200*time.Millisecond
	opts.DrainTimeout = 5 * time.Second
	opts.QueuePrefix = "test-"
	return opts
}

func TestOrderABBA(t *testing.T) {
	cases := BuiltinCases()[:2]
	var got []string
	for _, spec := range Order(cases, []Mode{ModeDurable, ModeBuffered}) {
		got = append(got, spec.Case.Name+"/"+string(spec.Mode))
	}
	want := "steady-100/durable steady-100/buffered steady-100/buffered steady-100/durable " +
		"steady-10k/durable steady-10k/buffered steady-10k/buffered steady-10k/durable"
	if strings.Join(got, " ") != want {
		t.Errorf("order\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	single := Order(cases, []Mode{ModeBuffered})
	if len(single) != 2 || single[1].Ordinal != 2 || single[1].Mode != ModeBuffered {
		t.Errorf("single-mode order %+v", single)
	}
}

func TestOptionsValidate(t *testing.T) {
	base := shortOptions(BuiltinCases(), []Mode{ModeDurable})
	if err := base.Validate(); err != nil {
		t.Fatalf("short options: %v", err)
	}
	for name, change := range map[string]func(*Options){
		"no cases":        func(o *Options) { o.Cases = nil },
		"same mode":       func(o *Options) { o.Modes = []Mode{ModeDurable, ModeDurable} },
		"unknown mode":    func(o *Options) { o.Modes = []Mode{"fast"} },
		"tiny messages":   func(o *Options) { o.MessageBytes = PayloadHeaderBytes - 1 },
		"no duration":     func(o *Options) { o.Duration = 0 },
		"no prefetch":     func(o *Options) { o.Prefetch = 0 },
		"bad shape":       func(o *Options) { o.Cases = []Case{{Name: "x", Shape: Shape{Kind: KindFixedRate, Window: 1}}} },
		"negative warmup": func(o *Options) { o.Warmup = -time.Second },
	} {
		opts := base
		change(&opts)
		if err := opts.Validate(); err == nil {
			t.Errorf("%s: options validated", name)
		}
	}
}

// Every case in both modes against the fake broker: the end-to-end path of
// `fibrilctl bench --mode both`, in about four seconds.
func TestRunEveryCaseBothModes(t *testing.T) {
	fake := NewFakeDriver(FakeOptions{ConfirmDelay: time.Millisecond, DeliverDelay: 2 * time.Millisecond})
	opts := shortOptions(BuiltinCases(), []Mode{ModeDurable, ModeBuffered})
	opts.CPU = ProcessCPU{PID: os.Getpid()} // the fake broker runs in this process
	report, err := Run(context.Background(), fake, opts)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(report.Runs) != 16 {
		t.Fatalf("%d runs, want 16", len(report.Runs))
	}
	declares := fake.Declares()
	for i, spec := range Order(opts.Cases, opts.Modes) {
		if declares[i].Mode != spec.Mode || report.Runs[i].Mode != spec.Mode || report.Runs[i].Case != spec.Case.Name {
			t.Errorf("run %d declared %+v, want %s %s", i+1, declares[i], spec.Case.Name, spec.Mode)
		}
	}
	// Paced cases plan an exact count: 250 ms of run, the first 50 ms warm-up.
	wantPublished := map[string][2]uint64{CaseSteady100: {25, 20}, CaseSteady10k: {2500, 2000}, CaseBurst200: {600, 400}}
	for _, run := range report.Runs {
		checkCleanRun(t, run, wantPublished)
	}
	if fake.MaxUnconfirmed() > PacedWindow {
		t.Errorf("%d unconfirmed at once, above every window", fake.MaxUnconfirmed())
	}
	var markdown, encoded bytes.Buffer
	if err := report.WriteMarkdown(&markdown); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| steady-100 | durable | 2 |", "| saturation | buffered | 2 |", "Publish to delivery"} {
		if !strings.Contains(markdown.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, markdown.String())
		}
	}
	if testing.Verbose() {
		t.Logf("report:\n%s", markdown.String())
	}
	if err := report.WriteJSON(&encoded); err != nil {
		t.Fatal(err)
	}
	var decoded Report
	if err := json.Unmarshal(encoded.Bytes(), &decoded); err != nil || len(decoded.Runs) != 16 ||
		decoded.Runs[3].Confirm.At(P999) != report.Runs[3].Confirm.At(P999) {
		t.Errorf("JSON round trip: %v", err)
	}
}

func checkCleanRun(t *testing.T, run Result, wantPublished map[string][2]uint64) {
	t.Helper()
	c := run.Counts
	if run.Error != "" || run.DrainTimedOut || len(run.Notes) != 0 {
		t.Errorf("run %d %s %s: error %q, drain timed out %v, notes %v", run.Ordinal, run.Case, run.Mode, run.Error, run.DrainTimedOut, run.Notes)
	}
	if want, paced := wantPublished[run.Case]; paced && (c.Published != want[0] || c.Measured != want[1]) {
		t.Errorf("run %d %s: published %d measured %d, want %v", run.Ordinal, run.Case, c.Published, c.Measured, want)
	}
	if c.Published == 0 || c.Measured == 0 || c.Confirmed != c.Published || c.Delivered != c.Published ||
		c.Lost+c.Duplicated+c.Unexpected+c.BoundaryMismatch+c.PublishFailed+c.Unconfirmed != 0 {
		t.Errorf("run %d %s: counts %+v", run.Ordinal, run.Case, c)
	}
	// Every measured publish has exactly one sample of each latency.
	if uint64(run.Confirm.Count) != c.Measured || uint64(run.Delivery.Count) != c.Measured {
		t.Errorf("run %d %s: %d confirm and %d delivery samples for %d measured", run.Ordinal, run.Case, run.Confirm.Count, run.Delivery.Count, c.Measured)
	}
	// The fake confirms 1 ms and delivers 2 ms after arrival, and arrival
	// is after the intended time, so no latency can be below those.
	if run.Confirm.Min < time.Millisecond || run.Delivery.Min < 2*time.Millisecond {
		t.Errorf("run %d %s: confirm min %v, delivery min %v below the fake's delays", run.Ordinal, run.Case, run.Confirm.Min, run.Delivery.Min)
	}
	if run.CPUSecondsPerMillion == nil || *run.CPUSecondsPerMillion < 0 || run.ConfirmsPerSecond <= 0 {
		t.Errorf("run %d %s: CPU %v, rate %v", run.Ordinal, run.Case, run.CPUSecondsPerMillion, run.ConfirmsPerSecond)
	}
}

func fixedRateCase(rate, window int) Case {
	return Case{Name: "fixed", Shape: Shape{Kind: KindFixedRate, RatePerSecond: rate, Window: window}}
}

func TestRunCountsLossAndDuplicates(t *testing.T) {
	for _, unflagged := range []bool{false, true} {
		fake := NewFakeDriver(FakeOptions{DropDeliveryEvery: 10, DuplicateDeliveryEvery: 7, DuplicatesUnflagged: unflagged})
		opts := shortOptions([]Case{fixedRateCase(2000, PacedWindow)}, []Mode{ModeBuffered})
		opts.Warmup, opts.DrainTimeout = 0, 300*time.Millisecond
		report, err := Run(context.Background(), fake, opts)
		if err != nil {
			t.Fatal(err)
		}
		run := report.Runs[0]
		// 400 publishes; every 10th dropped (40); every 7th not also a
		// 10th is delivered twice: 57 - 5 = 52.
		want := Counts{Published: 400, Measured: 400, Confirmed: 400, Delivered: 360, Lost: 40, Duplicated: 52, Redelivered: 52}
		if unflagged {
			want.DuplicatedUnflagged, want.Redelivered = 52, 0
		}
		if run.Counts != want {
			t.Errorf("unflagged %v: counts\n got %+v\nwant %+v", unflagged, run.Counts, want)
		}
		if !run.DrainTimedOut || !strings.Contains(strings.Join(run.Notes, "\n"), "40 confirmed messages never delivered") {
			t.Errorf("drain timed out %v, notes %v", run.DrainTimedOut, run.Notes)
		}
	}
}

// A 100 ms broker pause after the 100th publish. With a wide window the
// sender keeps its schedule; with a window of 10 it blocks. Either way every
// publish has its sample and the pause shows in the latencies.
func TestRunStallIsNotHidden(t *testing.T) {
	for _, window := range []int{PacedWindow, 10} {
		fake := NewFakeDriver(FakeOptions{ConfirmDelay: time.Millisecond, DeliverDelay: time.Millisecond,
			Stall: FakeStall{AfterPublishes: 100, For: 100 * time.Millisecond}})
		opts := shortOptions([]Case{fixedRateCase(1000, window)}, []Mode{ModeDurable})
		opts.Warmup, opts.Duration = 0, 300*time.Millisecond
		report, err := Run(context.Background(), fake, opts)
		if err != nil {
			t.Fatal(err)
		}
		run := report.Runs[0]
		if run.Counts.Published != 300 || run.Confirm.Count != 300 || run.Delivery.Count != 300 {
			t.Errorf("window %d: published %d with %d confirm and %d delivery samples, want 300 each",
				window, run.Counts.Published, run.Confirm.Count, run.Delivery.Count)
		}
		if run.Confirm.Max < 100*time.Millisecond || run.Delivery.Max < 100*time.Millisecond {
			t.Errorf("window %d: max confirm %v, delivery %v hide the 100 ms pause", window, run.Confirm.Max, run.Delivery.Max)
		}
		// With 10 slots the 11th publish of the pause waits for its end:
		// it was due at most 11 ms after the pause began.
		if window == 10 && run.SendLag.Max < 89*time.Millisecond {
			t.Errorf("window 10: sender lag max %v, want at least 89 ms", run.SendLag.Max)
		}
		if window == 10 && fake.MaxUnconfirmed() > 10 {
			t.Errorf("window 10: %d publishes unconfirmed at once", fake.MaxUnconfirmed())
		}
	}
}

func TestRunSaturationRespectsWindow(t *testing.T) {
	fake := NewFakeDriver(FakeOptions{ConfirmDelay: 5 * time.Millisecond})
	saturation, _ := CaseByName(CaseSaturation)
	opts := shortOptions([]Case{saturation}, []Mode{ModeDurable})
	report, err := Run(context.Background(), fake, opts)
	if err != nil {
		t.Fatal(err)
	}
	if max := fake.MaxUnconfirmed(); max > SaturationWindow || max == 0 {
		t.Errorf("%d publishes unconfirmed at once, window is %d", max, SaturationWindow)
	}
	if run := report.Runs[0]; run.StopReason != StopDuration || run.Counts.Lost != 0 || run.Confirm.Min < 5*time.Millisecond {
		t.Errorf("saturation run %+v", run)
	}
}

func TestRunMessageLimit(t *testing.T) {
	fake := NewFakeDriver(FakeOptions{})
	opts := shortOptions([]Case{fixedRateCase(1000, PacedWindow)}, []Mode{ModeDurable})
	opts.MaxMessages, opts.Warmup = 30, 10*time.Millisecond
	report, err := Run(context.Background(), fake, opts)
	if err != nil {
		t.Fatal(err)
	}
	run := report.Runs[0]
	if run.StopReason != StopLimit || run.Counts.Published != 30 || len(run.Notes) != 1 {
		t.Errorf("stop %s, published %d, notes %v", run.StopReason, run.Counts.Published, run.Notes)
	}
	// 30 publishes at 1000 per second, intended at 0 to 29 ms, the first
	// 10 ms warm-up: 20 measured.
	if run.Counts.Measured != 20 || run.Confirm.Count != 20 {
		t.Errorf("measured %d with %d samples, want 20", run.Counts.Measured, run.Confirm.Count)
	}
}

func TestRunBoundaryMismatch(t *testing.T) {
	fake := NewFakeDriver(FakeOptions{WrongBoundary: true})
	opts := shortOptions([]Case{fixedRateCase(200, PacedWindow)}, []Mode{ModeDurable})
	report, err := Run(context.Background(), fake, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c := report.Runs[0].Counts; c.BoundaryMismatch != c.Confirmed || c.Confirmed != 50 {
		t.Errorf("counts %+v: every durable confirm at the written boundary must be counted", c)
	}
}

func TestRunCancelledCleansUp(t *testing.T) {
	fake := NewFakeDriver(FakeOptions{ConfirmDelay: time.Millisecond})
	opts := shortOptions([]Case{fixedRateCase(1000, PacedWindow)}, []Mode{ModeDurable})
	opts.Duration = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	report, err := Run(ctx, fake, opts)
	if !errors.Is(err, context.DeadlineExceeded) || len(report.Runs) != 1 || report.Runs[0].Error == "" {
		t.Fatalf("cancelled run: %v, %+v", err, report)
	}
	if _, err := fake.queue(report.Runs[0].Queue); !errors.Is(err, ErrFakeNoQueue) {
		t.Errorf("queue left behind: %v", err)
	}
}

// cleanupWatcher notes the state of the contexts a run ends with.
type cleanupWatcher struct {
	*FakeDriver
	mu       sync.Mutex
	seenErrs []error // ctx.Err() of every stop and Delete
}

func (w *cleanupWatcher) note(err error) {
	w.mu.Lock()
	w.seenErrs = append(w.seenErrs, err)
	w.mu.Unlock()
}

func (w *cleanupWatcher) Subscribe(ctx context.Context, queue string, prefetch int, onDeliver DeliverFunc) (StopFunc, error) {
	stop, err := w.FakeDriver.Subscribe(ctx, queue, prefetch, onDeliver)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { w.note(ctx.Err()); return stop(ctx) }, nil
}

func (w *cleanupWatcher) Delete(ctx context.Context, queue string) error {
	w.note(ctx.Err())
	return w.FakeDriver.Delete(ctx, queue)
}

// A run that lasts longer than the cleanup timeout must still stop its
// subscription and delete its queue with a live context.
func TestRunLongerThanTheCleanupTimeoutCleansUp(t *testing.T) {
	watcher := &cleanupWatcher{FakeDriver: NewFakeDriver(FakeOptions{})}
	opts := shortOptions([]Case{fixedRateCase(200, PacedWindow)}, []Mode{ModeBuffered})
	r := runner{driver: watcher, opts: opts, clock: NewRealClock(), cleanupTimeout: 20 * time.Millisecond}
	report, err := r.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if run := report.Runs[0]; len(run.Notes) != 0 {
		t.Errorf("notes %q", run.Notes)
	}
	if len(watcher.seenErrs) != 2 || watcher.seenErrs[0] != nil || watcher.seenErrs[1] != nil {
		t.Errorf("stop and delete saw context errors %v", watcher.seenErrs)
	}
	if _, err := watcher.queue(report.Runs[0].Queue); !errors.Is(err, ErrFakeNoQueue) {
		t.Errorf("queue left behind: %v", err)
	}
}

func TestRunDeclareConflict(t *testing.T) {
	fake := NewFakeDriver(FakeOptions{})
	opts := shortOptions([]Case{fixedRateCase(100, PacedWindow)}, []Mode{ModeDurable})
	if err := fake.Declare(context.Background(), "test-fixed-durable-1", ModeBuffered); err != nil {
		t.Fatal(err)
	}
	report, err := Run(context.Background(), fake, opts)
	if !errors.Is(err, ErrFakeModeConflict) || report.Runs[0].Error == "" {
		t.Fatalf("conflicting declare: %v", err)
	}
}

// The harness measuring itself: every case against the in-memory fake with
// no delay, so the figures are what the pacer, the callbacks and the
// collector add on this machine. Not a broker figure. About 25 s:
//
//	FIBRIL_BENCH_SELF=1 go test ./bench -run HarnessSelf -v
func TestHarnessSelfMeasurement(t *testing.T) {
	if os.Getenv("FIBRIL_BENCH_SELF") != "1" {
		t.Skip("set FIBRIL_BENCH_SELF=1 to measure the harness against the zero-delay fake")
	}
	floors, err := MeasureFloors(context.Background(), DefaultFloorOptions())
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Warmup, opts.Duration = time.Second, 5*time.Second
	opts.CPU, opts.Floors = ProcessCPU{PID: os.Getpid()}, floors
	report, err := Run(context.Background(), NewFakeDriver(FakeOptions{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := report.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, run := range report.Runs {
		if run.Counts.Lost+run.Counts.Duplicated != 0 || run.Confirm.Count == 0 {
			t.Errorf("run %d %s: counts %+v", run.Ordinal, run.Case, run.Counts)
		}
	}
	t.Logf("harness against the zero-delay fake:\n%s", b.String())
}

// failingDelete is a fake whose Delete fails, as a broker that lost the
// connection at the end of a run would.
type failingDelete struct{ *FakeDriver }

func (failingDelete) Delete(context.Context, string) error { return errors.New("connection reset") }

func TestRunNotesCleanupFailure(t *testing.T) {
	opts := shortOptions([]Case{fixedRateCase(100, PacedWindow)}, []Mode{ModeDurable})
	report, err := Run(context.Background(), failingDelete{NewFakeDriver(FakeOptions{})}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(report.Runs[0].Notes, "\n"); !strings.Contains(notes, "connection reset") {
		t.Errorf("notes %q lack the failed delete", notes)
	}
}
