package bench

// The runner runs cases against a Driver and builds a Report.
//
// Order: with one mode, each case runs once, in the order given. With both
// modes (A = durable, B = buffered) each case runs four times in ABBA order,
// A B B A, before the next case starts. Running the pair back to back keeps
// both modes of a case on the same machine state, and the mirrored order
// cancels a drift that is linear in time (a warming cache, a filling disk)
// instead of favouring whichever mode runs second. The mode is switched only
// by the queue's declaration: every run declares a fresh queue, so the
// broker binary and its settings are the same for both.
//
// One run: declare the queue with the mode; subscribe; pace the case's
// publishes for warm-up + duration; wait until every publish is confirmed
// and every confirmed message delivered, or the drain timeout; read the
// broker's CPU; stop the subscription; delete the queue. Broker CPU is read
// at the first measured publish and again after the drain, and divided by
// the measured publishes: CPU seconds per million messages.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Default options, used by DefaultOptions.
const (
	DefaultMessageBytes = 1024
	DefaultWarmup       = 2 * time.Second
	DefaultDuration     = 10 * time.Second
	DefaultPrefetch     = 1000
	// DefaultMaxMessages bounds each run: every per-message table and
	// latency recorder is allocated for this many messages (about 32 bytes
	// per message in all, so 64 MB at the default).
	DefaultMaxMessages  = 2_000_000
	DefaultDrainTimeout = 10 * time.Second

	// cleanupTimeout bounds stopping the subscription and deleting the
	// queue at the end of a run, even when the run's context is cancelled.
	cleanupTimeout = 10 * time.Second
)

// Options configure Run. Start from DefaultOptions.
type Options struct {
	Cases []Case
	// Modes is one mode, or durable and buffered for an ABBA comparison.
	Modes        []Mode
	MessageBytes int
	// Warmup is excluded from every figure; Duration is measured after it.
	Warmup   time.Duration
	Duration time.Duration
	Prefetch int
	// MaxMessages bounds the publishes of one run; see DefaultMaxMessages.
	MaxMessages  int
	DrainTimeout time.Duration
	// QueuePrefix starts every queue name; empty picks one from the time.
	QueuePrefix string
	// CPU reads the broker's CPU time; nil reports no CPU figure.
	CPU CPUMeter
	// ClientCPU reads the benchmark process's own CPU time, which shares
	// the machine with a local broker; nil reports no figure.
	ClientCPU CPUMeter
	// Syncs reads the server's fdatasync count (fibril_fsyncs_total) and
	// Flushes the data disk's flush count (/proc/diskstats), each before
	// and after every run (syncs.go); nil reports no figure.
	Syncs, Flushes CountMeter
	// Floors, when measured before the run, are copied into the report.
	Floors *Floors
	// Server and DataDir are recorded in the report's settings.
	Server  string
	DataDir string
	// Trace describes the trace a replay's case was read from.
	Trace *TraceSummary
	// Progress, when set, receives a line as each run starts and ends.
	Progress io.Writer
}

// DefaultOptions returns the options of `fibrilctl bench` with no flags:
// every built-in case, durable only, 1 KiB messages, 2 s warm-up, 10 s
// measured.
func DefaultOptions() Options {
	return Options{
		Cases:        BuiltinCases(),
		Modes:        []Mode{ModeDurable},
		MessageBytes: DefaultMessageBytes,
		Warmup:       DefaultWarmup,
		Duration:     DefaultDuration,
		Prefetch:     DefaultPrefetch,
		MaxMessages:  DefaultMaxMessages,
		DrainTimeout: DefaultDrainTimeout,
	}
}

// Validate reports whether the options can run.
func (o Options) Validate() error {
	switch {
	case len(o.Cases) == 0:
		return fmt.Errorf("%w: no cases", ErrInvalidOptions)
	case len(o.Modes) == 0 || len(o.Modes) > 2 || (len(o.Modes) == 2 && o.Modes[0] == o.Modes[1]):
		return fmt.Errorf("%w: modes %v (one mode, or two different ones)", ErrInvalidOptions, o.Modes)
	case o.MessageBytes < PayloadHeaderBytes:
		return fmt.Errorf("%w: message size %d is below the %d-byte header", ErrInvalidOptions, o.MessageBytes, PayloadHeaderBytes)
	case o.Warmup < 0 || o.Duration <= 0 || o.DrainTimeout <= 0:
		return fmt.Errorf("%w: warm-up %v, duration %v, drain timeout %v", ErrInvalidOptions, o.Warmup, o.Duration, o.DrainTimeout)
	case o.Prefetch <= 0 || o.MaxMessages <= 0:
		return fmt.Errorf("%w: prefetch %d, max messages %d", ErrInvalidOptions, o.Prefetch, o.MaxMessages)
	}
	for _, mode := range o.Modes {
		if mode != ModeDurable && mode != ModeBuffered {
			return fmt.Errorf("%w: %q", ErrUnknownMode, mode)
		}
	}
	for _, c := range o.Cases {
		if err := c.Shape.Validate(); err != nil {
			return fmt.Errorf("case %s: %w", c.Name, err)
		}
	}
	return nil
}

// RunSpec is one run of a case in one mode.
type RunSpec struct {
	// Ordinal is the 1-based position of the run in the whole benchmark.
	Ordinal int
	Case    Case
	Mode    Mode
}

// Order returns the runs in the order they happen: each case once with one
// mode, or A B B A with two modes (see the file comment).
func Order(cases []Case, modes []Mode) []RunSpec {
	var pattern []Mode
	switch len(modes) {
	case 1:
		pattern = modes
	case 2:
		pattern = []Mode{modes[0], modes[1], modes[1], modes[0]}
	default:
		panic(fmt.Sprintf("bench: order of %d modes", len(modes)))
	}
	specs := make([]RunSpec, 0, len(cases)*len(pattern))
	for _, c := range cases {
		for _, mode := range pattern {
			specs = append(specs, RunSpec{Ordinal: len(specs) + 1, Case: c, Mode: mode})
		}
	}
	return specs
}

// Run runs every case in every mode against driver. On an error it returns
// the report of the runs so far together with the error.
func Run(ctx context.Context, driver Driver, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.QueuePrefix == "" {
		opts.QueuePrefix = "bench-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-"
	}
	r := runner{driver: driver, opts: opts, clock: NewRealClock()}
	return r.run(ctx)
}

type runner struct {
	driver Driver
	opts   Options
	clock  Clock
	// cleanupTimeout overrides the package's for tests; 0 means the default.
	cleanupTimeout time.Duration
}

func (r runner) run(ctx context.Context) (*Report, error) {
	report := &Report{Settings: r.settings(), Floors: r.opts.Floors}
	specs := Order(r.opts.Cases, r.opts.Modes)
	for _, spec := range specs {
		r.progressf("bench: run %d/%d %s %s\n", spec.Ordinal, len(specs), spec.Case.Name, spec.Mode)
		result, err := r.runOne(ctx, spec)
		report.Runs = append(report.Runs, result)
		if err != nil {
			return report, err
		}
		r.progressf("bench: run %d/%d %s %s: %s\n", spec.Ordinal, len(specs), spec.Case.Name, spec.Mode, result.oneLine())
	}
	report.Settings.LoadAverageEnd = readLoadAverage()
	return report, nil
}

// readLoadAverage returns the 1, 5 and 15 minute load averages of
// /proc/loadavg, or "" where there is none: a busy machine makes for
// noisy tails, and the report says how busy it was.
func readLoadAverage() string {
	content, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(content))
	if len(fields) < 3 {
		return ""
	}
	return strings.Join(fields[:3], " ")
}

func (r runner) progressf(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, format, args...)
	}
}

func (r runner) settings() Settings {
	hostname, _ := os.Hostname()
	settings := Settings{
		Server: r.opts.Server, DataDir: r.opts.DataDir, Trace: r.opts.Trace,
		Cases: r.opts.Cases, Modes: r.opts.Modes, Order: "single",
		MessageBytes: r.opts.MessageBytes, Warmup: r.opts.Warmup, Duration: r.opts.Duration,
		Prefetch: r.opts.Prefetch, MaxMessagesPerRun: r.opts.MaxMessages, DrainTimeout: r.opts.DrainTimeout,
		QueuePrefix: r.opts.QueuePrefix, Percentiles: PercentileMethod,
		StartedAt: time.Now().UTC(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Hostname: hostname,
		LoadAverageStart: readLoadAverage(),
	}
	if len(r.opts.Modes) == 2 {
		settings.Order = "ABBA per case"
	}
	if r.opts.CPU != nil {
		settings.CPUSource = fmt.Sprint(r.opts.CPU)
	}
	if r.opts.Syncs != nil {
		settings.SyncsSource = fmt.Sprint(r.opts.Syncs)
	}
	if r.opts.Flushes != nil {
		settings.FlushesSource = fmt.Sprint(r.opts.Flushes)
	}
	return settings
}

// PercentileMethod describes how every percentile in a report is computed.
const PercentileMethod = "nearest-rank on the sorted raw samples of one run: x[ceil(q*N)]; never interpolated, bucketed or merged across runs"

// runLimits returns the most publishes a run may send, which is also the
// capacity of each of its latency recorders.
func (r runner) runLimits(shape Shape, runFor time.Duration) uint64 {
	limit := uint64(r.opts.MaxMessages)
	if expected, paced := shape.ExpectedPublishes(runFor); paced {
		limit = min(limit, expected)
	}
	return limit
}

// runOne runs one case in one mode; see the file comment. The results are
// named so the deferred queue deletion can add its note to the result.
func (r runner) runOne(ctx context.Context, spec RunSpec) (result Result, err error) {
	shape := spec.Case.Shape
	runFor := shape.RunFor(r.opts.Warmup, r.opts.Duration)
	limit := r.runLimits(shape, runFor)
	queue := r.opts.QueuePrefix + spec.Case.Name + "-" + string(spec.Mode) + "-" + strconv.Itoa(spec.Ordinal)
	result = Result{Ordinal: spec.Ordinal, Case: spec.Case.Name, Mode: spec.Mode, Queue: queue, RunFor: runFor}
	if shape.Kind == KindFixedRate {
		result.TargetPerSecond = float64(shape.RatePerSecond)
	}
	if err := r.driver.Declare(ctx, queue, spec.Mode); err != nil {
		return result.failed(fmt.Errorf("bench: declare %s: %w", queue, err))
	}
	defer func() {
		cleanup, cancel := r.cleanupContext(ctx)
		defer cancel()
		if err := r.driver.Delete(cleanup, queue); err != nil {
			result.Notes = append(result.Notes, fmt.Sprintf("delete %s: %v", queue, err))
		}
	}()

	ledger := newLedger(uint32(spec.Ordinal), time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), spec.Mode.Boundary(), limit, int(limit))
	col := newCollector(r.clock, ledger, shape.Window, r.opts.Prefetch)
	go col.loop()
	stop, err := r.driver.Subscribe(ctx, queue, r.opts.Prefetch, col.onDeliver)
	if err != nil {
		col.finish()
		return result.failed(fmt.Errorf("bench: subscribe %s: %w", queue, err))
	}
	countsStart := r.readCounts(ctx)
	publishing := r.publish(ctx, col, spec, queue, runFor, limit)
	result.StopReason = publishing.stop
	if publishing.err == nil {
		result.DrainTimedOut = r.waitDrained(ctx, col)
		publishing.err = ctx.Err()
	}
	finishing, cancelFinishing := r.cleanupContext(ctx)
	cpuEnd, cpuEndErr := r.readCPU(finishing)
	clientEnd, clientEndErr := readMeter(finishing, r.opts.ClientCPU)
	countsEnd := r.readCounts(finishing)
	if err := stop(finishing); err != nil {
		result.Notes = append(result.Notes, fmt.Sprintf("stop subscription: %v", err))
	}
	cancelFinishing()
	result.fill(col.finish())
	result.fillCounts(countsStart, countsEnd)
	result.fillCPU(publishing.cpuStart, publishing.cpuStartErr, cpuEnd, cpuEndErr, publishing.cpuStarted)
	if publishing.cpuStarted && publishing.clientStartErr == nil && clientEndErr == nil && result.Counts.Measured > 0 {
		result.ClientCPUSeconds, result.ClientCPUSecondsPerMillion = perMillion(clientEnd-publishing.clientStart, result.Counts.Measured)
	}
	if publishing.err != nil {
		return result.failed(publishing.err)
	}
	return result, nil
}

// cleanupContext bounds one step of a run's ending by cleanupTimeout from
// now, even when the run's context was cancelled. It is made when the step
// starts, never earlier, so a run longer than the timeout still gets it.
func (r runner) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := r.cleanupTimeout
	if timeout <= 0 {
		timeout = cleanupTimeout
	}
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// publishing is what the publishing phase of a run reports.
type publishing struct {
	stop        StopReason
	err         error
	cpuStarted  bool
	cpuStart    time.Duration
	cpuStartErr error
	// clientStart is the benchmark's own CPU time at the same moment.
	clientStart    time.Duration
	clientStartErr error
}

// publish paces the run's publishes through the collector and the driver.
func (r runner) publish(ctx context.Context, col *collector, spec RunSpec, queue string, runFor time.Duration, limit uint64) publishing {
	var outcome publishing
	start := r.clock.Now()
	measureFrom := start + r.opts.Warmup
	col.post(collectorEvent{kind: eventBegin, at: measureFrom, intended: start + runFor})
	buffer := make([]byte, r.opts.MessageBytes)
	send := func(seq uint64, planned Planned, intended, sentAt time.Duration) error {
		if !outcome.cpuStarted && intended >= measureFrom {
			outcome.cpuStarted = true
			outcome.cpuStart, outcome.cpuStartErr = r.readCPU(ctx)
			outcome.clientStart, outcome.clientStartErr = readMeter(ctx, r.opts.ClientCPU)
		}
		size := r.opts.MessageBytes
		if planned.SizeBytes > 0 {
			size = max(planned.SizeBytes, PayloadHeaderBytes)
		}
		if size > len(buffer) {
			buffer = make([]byte, size)
		}
		EncodePayloadHeader(buffer, PayloadHeader{RunTag: uint32(spec.Ordinal), Seq: seq, Intended: intended})
		col.post(collectorEvent{kind: eventSent, seq: seq, at: sentAt, intended: intended, paced: planned.Paced})
		if err := r.driver.Publish(ctx, queue, seq, buffer[:size], col.onConfirm); err != nil {
			col.release()
			return fmt.Errorf("bench: publish %d to %s: %w", seq, queue, err)
		}
		return nil
	}
	p := pacer{clock: r.clock, source: spec.Case.Shape.Source(runFor), start: start, runFor: runFor,
		limit: limit, acquire: col.acquire, send: send}
	_, outcome.stop, outcome.err = p.run(ctx)
	col.post(collectorEvent{kind: eventPublishingDone, at: r.clock.Now(), limitReached: outcome.stop == StopLimit})
	return outcome
}

// waitDrained waits until the collector has every confirm and delivery, the
// drain timeout passes (it returns true), or ctx ends.
func (r runner) waitDrained(ctx context.Context, col *collector) (timedOut bool) {
	timer := time.NewTimer(r.opts.DrainTimeout)
	defer timer.Stop()
	select {
	case <-col.drained:
		return false
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// counterReadings are the server's syncs and the disk's flushes at one
// moment, each with the error that kept it from being read.
type counterReadings struct {
	syncs, flushes       uint64
	syncsErr, flushesErr error
}

func (r runner) readCounts(ctx context.Context) counterReadings {
	var readings counterReadings
	readings.syncs, readings.syncsErr = readCount(ctx, r.opts.Syncs)
	readings.flushes, readings.flushesErr = readCount(ctx, r.opts.Flushes)
	return readings
}

func readCount(ctx context.Context, meter CountMeter) (uint64, error) {
	if meter == nil {
		return 0, errNoCountMeter
	}
	return meter.Count(ctx)
}

var errNoCountMeter = errors.New("bench: no counter")

func (r runner) readCPU(ctx context.Context) (time.Duration, error) {
	return readMeter(ctx, r.opts.CPU)
}

func readMeter(ctx context.Context, meter CPUMeter) (time.Duration, error) {
	if meter == nil {
		return 0, errNoCPUMeter
	}
	return meter.CPUTime(ctx)
}

var errNoCPUMeter = errors.New("bench: no CPU meter")
