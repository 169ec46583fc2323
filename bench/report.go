package bench

// Reports: the results of every run, as a markdown table for people and as
// JSON with every raw percentile and setting for tools.
//
// The markdown groups the runs of one case and one mode into one row and
// puts the rows of the two modes of a case next to each other. A grouped
// figure is never pooled: it is shown as "low-high", the lowest and highest
// of the per-run values (each computed from that run's raw samples), or as
// one value when the runs agree or there is one run. Runs that failed are
// left out of the figures and listed under the notes.
//
// Each p50 is also shown as a multiple of its floor: the median loopback TCP
// round trip plus the median storage floor of the mode (write+fdatasync for
// durable, write for buffered). A publish needs at least one round trip to
// be confirmed and one storage operation at the mode's boundary; a delivery
// needs the publish's way in, the delivery's way out (together about one
// round trip) and the same storage operation, since it is released at the
// same boundary. So both directions share that floor.
//
// The confirm table also shows the p99 of the sender's lag: how late paced
// publishes left the benchmark. A large lag means the client, not the
// broker, was behind (the latencies still count from the intended times).

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is the outcome of a benchmark.
type Report struct {
	Settings Settings `json:"settings"`
	Floors   *Floors  `json:"floors,omitempty"`
	Runs     []Result `json:"runs"`
}

// Settings record everything a run depended on.
type Settings struct {
	Server            string        `json:"server,omitempty"`
	DataDir           string        `json:"data_dir,omitempty"`
	Trace             *TraceSummary `json:"trace,omitempty"`
	Cases             []Case        `json:"cases"`
	Modes             []Mode        `json:"modes"`
	Order             string        `json:"order"`
	MessageBytes      int           `json:"message_bytes"`
	Warmup            time.Duration `json:"warmup_ns"`
	Duration          time.Duration `json:"duration_ns"`
	Prefetch          int           `json:"prefetch"`
	MaxMessagesPerRun int           `json:"max_messages_per_run"`
	DrainTimeout      time.Duration `json:"drain_timeout_ns"`
	QueuePrefix       string        `json:"queue_prefix"`
	CPUSource         string        `json:"cpu_source,omitempty"`
	SyncsSource       string        `json:"fsyncs_source,omitempty"`
	FlushesSource     string        `json:"device_flushes_source,omitempty"`
	Percentiles       string        `json:"percentiles"`
	StartedAt         time.Time     `json:"started_at"`
	GoVersion         string        `json:"go_version"`
	OS                string        `json:"os"`
	Arch              string        `json:"arch"`
	NumCPU            int           `json:"num_cpu"`
	GOMAXPROCS        int           `json:"gomaxprocs"`
	Hostname          string        `json:"hostname,omitempty"`
	// LoadAverageStart and LoadAverageEnd are /proc/loadavg's 1, 5 and 15
	// minute figures when the benchmark started and ended.
	LoadAverageStart string `json:"load_average_start,omitempty"`
	LoadAverageEnd   string `json:"load_average_end,omitempty"`
}

// Result is one run of one case in one mode.
type Result struct {
	Ordinal int    `json:"ordinal"`
	Case    string `json:"case"`
	Mode    Mode   `json:"mode"`
	Queue   string `json:"queue"`
	// Confirm and Delivery are latencies from the intended publish time;
	// SendLag is how late paced publishes left the sender.
	Confirm  Summary `json:"publish_to_confirm"`
	Delivery Summary `json:"publish_to_delivery"`
	SendLag  Summary `json:"send_lag"`
	Counts   Counts  `json:"counts"`
	// Rates count measured confirms and first deliveries per second from
	// the end of the warm-up to the end of the run (or the last of them,
	// if later); TargetPerSecond is the fixed rate asked for.
	ConfirmsPerSecond   float64 `json:"confirms_per_second"`
	DeliveriesPerSecond float64 `json:"deliveries_per_second"`
	TargetPerSecond     float64 `json:"target_per_second,omitempty"`
	// Broker CPU over the measured part of the run; absent without a meter.
	CPUSeconds           *float64 `json:"broker_cpu_seconds,omitempty"`
	CPUSecondsPerMillion *float64 `json:"broker_cpu_seconds_per_million,omitempty"`
	// The benchmark process's own CPU over the same span, when metered.
	ClientCPUSeconds           *float64 `json:"client_cpu_seconds,omitempty"`
	ClientCPUSecondsPerMillion *float64 `json:"client_cpu_seconds_per_million,omitempty"`
	// The server's fdatasyncs and directory fsyncs (fibril_fsyncs_total)
	// and the data disk's flushes over the whole run, warm-up included,
	// and per publish; absent without a meter.
	ServerSyncs             *uint64       `json:"server_fsyncs,omitempty"`
	ServerSyncsPerMessage   *float64      `json:"server_fsyncs_per_message,omitempty"`
	DeviceFlushes           *uint64       `json:"device_flushes,omitempty"`
	DeviceFlushesPerMessage *float64      `json:"device_flushes_per_message,omitempty"`
	RunFor                  time.Duration `json:"run_for_ns"`
	StopReason              StopReason    `json:"stop_reason"`
	DrainTimedOut           bool          `json:"drain_timed_out"`
	Notes                   []string      `json:"notes,omitempty"`
	Error                   string        `json:"error,omitempty"`
}

func (r *Result) failed(err error) (Result, error) {
	r.Error = err.Error()
	return *r, err
}

// fill copies the collector's tally into the result and notes anything a
// reader must know before trusting the figures.
func (r *Result) fill(t tally) {
	r.Counts, r.Confirm, r.Delivery, r.SendLag = t.counts, t.confirm, t.delivery, t.sendLag
	r.ConfirmsPerSecond, r.DeliveriesPerSecond = t.confirmPerSecond, t.deliveriesPerSecond
	c := t.counts
	notef := func(format string, args ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, args...)) }
	if r.StopReason == StopLimit {
		notef("stopped at the message limit after %d publishes; figures cover that prefix", c.Published)
	}
	if r.DrainTimedOut {
		notef("drain timed out with %d publishes unconfirmed and %d confirmed messages undelivered", c.Unconfirmed, c.Lost)
	}
	if overflow := t.confirm.Overflow + t.delivery.Overflow; overflow > 0 {
		notef("%d latency samples did not fit the recorders and are not in the figures", overflow)
	}
	for _, count := range []struct {
		value uint64
		what  string
	}{
		{c.Lost, "confirmed messages never delivered"},
		{c.Duplicated, "duplicate deliveries"},
		{c.DuplicatedUnflagged, "duplicate deliveries not marked redelivered"},
		{c.PublishFailed, "publishes failed"},
		{c.Unconfirmed, "publishes never confirmed"},
		{c.Unexpected, "deliveries that were not messages of this run"},
		{c.BoundaryMismatch, fmt.Sprintf("confirms below the %s boundary or at an unknown one", r.Mode.Boundary())},
		{c.AboveBoundary, fmt.Sprintf("confirms above the %s boundary (already synced when confirmed; not an error)", r.Mode.Boundary())},
		{c.ConfirmAnomalies, "confirms for an unknown or already confirmed publish"},
	} {
		if count.value > 0 {
			notef("%d %s", count.value, count.what)
		}
	}
}

// fillCounts sets the sync and flush figures when both readings of each
// worked and the run published.
func (r *Result) fillCounts(start, end counterReadings) {
	for _, counter := range []struct {
		what             string
		start, end       uint64
		startErr, endErr error
		count            **uint64
		per              **float64
	}{
		{"server fsyncs", start.syncs, end.syncs, start.syncsErr, end.syncsErr, &r.ServerSyncs, &r.ServerSyncsPerMessage},
		{"device flushes", start.flushes, end.flushes, start.flushesErr, end.flushesErr, &r.DeviceFlushes, &r.DeviceFlushesPerMessage},
	} {
		switch {
		case counter.endErr == errNoCountMeter:
		case counter.startErr != nil || counter.endErr != nil:
			r.Notes = append(r.Notes, fmt.Sprintf("%s not read: %v", counter.what, firstError(counter.startErr, counter.endErr)))
		case counter.end < counter.start:
			r.Notes = append(r.Notes, fmt.Sprintf("%s went back from %d to %d (a restart?); no figure", counter.what,
				counter.start, counter.end))
		case r.Counts.Published > 0:
			*counter.count, *counter.per = perMessage(counter.start, counter.end, r.Counts.Published)
		}
	}
}

// fillCPU sets the broker CPU figures when both readings worked.
func (r *Result) fillCPU(start time.Duration, startErr error, end time.Duration, endErr error, started bool) {
	if endErr == errNoCPUMeter {
		return // no meter configured: no figure and nothing to note
	}
	switch {
	case !started:
		r.Notes = append(r.Notes, "no measured publishes, so no broker CPU figure")
	case startErr != nil || endErr != nil:
		r.Notes = append(r.Notes, fmt.Sprintf("broker CPU not read: %v", firstError(startErr, endErr)))
	case r.Counts.Measured > 0:
		r.CPUSeconds, r.CPUSecondsPerMillion = perMillion(end-start, r.Counts.Measured)
	}
}

// perMillion returns a CPU time in seconds and in seconds per million of
// messages.
func perMillion(cpu time.Duration, messages uint64) (seconds, secondsPerMillion *float64) {
	total := cpu.Seconds()
	per := total / float64(messages) * 1e6
	return &total, &per
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// oneLine summarises the result for progress output.
func (r Result) oneLine() string {
	return fmt.Sprintf("confirm p50 %s p99 %s ms, delivery p50 %s p99 %s ms, %.1f confirms/s, lost %d, duplicated %d",
		milliseconds(r.Confirm.At(P50)), milliseconds(r.Confirm.At(P99)),
		milliseconds(r.Delivery.At(P50)), milliseconds(r.Delivery.At(P99)),
		r.ConfirmsPerSecond, r.Counts.Lost, r.Counts.Duplicated)
}

// WriteJSON writes the whole report, indented.
func (r *Report) WriteJSON(w io.Writer) error {
	encoder := json.NewEncoder(w)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(r); err != nil {
		return fmt.Errorf("bench: write JSON report: %w", err)
	}
	return nil
}

func milliseconds(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))
}

// WriteMarkdown writes the floors and the two latency tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	s := r.Settings
	if s.Trace != nil {
		writeReplaySettings(&b, s)
	} else {
		fmt.Fprintf(&b, "Settings: %d-byte messages, warm-up %v, %v measured per run, order: %s", s.MessageBytes, s.Warmup, s.Duration, s.Order)
	}
	if s.Server != "" {
		fmt.Fprintf(&b, ", server %s", s.Server)
	}
	if s.LoadAverageStart != "" {
		fmt.Fprintf(&b, ", load average %s at the start and %s at the end", s.LoadAverageStart, s.LoadAverageEnd)
	}
	fmt.Fprintf(&b, ".\nPercentiles: %s. A range low-high spans the per-run values of the runs of one mode.\n\n", s.Percentiles)
	if r.Floors != nil {
		r.Floors.writeMarkdown(&b)
	}
	groups := r.groups()
	b.WriteString("Publish to confirm, ms from the intended publish time\n\n")
	b.WriteString("| case | mode | runs | p50 | p99 | p99.9 | max | p50 / floor | confirms/s | broker CPU s per M msgs | client CPU s per M msgs | sender lag p99 | server fdatasyncs per msg | device flushes per msg |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range groups {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.caseName, g.mode, len(g.runs),
			g.latency(confirmOf, P50), g.latency(confirmOf, P99), g.latency(confirmOf, P999), g.max(confirmOf),
			g.multiple(confirmOf, r.Floors), g.figure(func(r Result) (float64, bool) { return r.ConfirmsPerSecond, true }, "%.1f"),
			g.figure(cpuOf, "%.2f"), g.figure(clientCPUOf, "%.2f"), g.latency(sendLagOf, P99),
			g.figure(syncsOf, "%.2f"), g.figure(flushesOf, "%.2f"))
	}
	b.WriteString("\nPublish to delivery, ms from the intended publish time (first deliveries)\n\n")
	b.WriteString("| case | mode | runs | p50 | p99 | p99.9 | max | p50 / floor | deliveries/s | lost | duplicated |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range groups {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.caseName, g.mode, len(g.runs),
			g.latency(deliveryOf, P50), g.latency(deliveryOf, P99), g.latency(deliveryOf, P999), g.max(deliveryOf),
			g.multiple(deliveryOf, r.Floors), g.figure(func(r Result) (float64, bool) { return r.DeliveriesPerSecond, true }, "%.1f"),
			g.figure(func(r Result) (float64, bool) { return float64(r.Counts.Lost), true }, "%.0f"),
			g.figure(func(r Result) (float64, bool) { return float64(r.Counts.Duplicated), true }, "%.0f"))
	}
	r.writeNotes(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeReplaySettings describes a replay's trace instead of a duration.
func writeReplaySettings(b *strings.Builder, s Settings) {
	t := s.Trace
	speed := 1.0
	if len(s.Cases) > 0 && s.Cases[0].Shape.ReplaySpeed > 0 {
		speed = s.Cases[0].Shape.ReplaySpeed
	}
	name := t.File
	if name == "" {
		name = "a trace"
	}
	fmt.Fprintf(b, "Settings: replay of %s (%q): %d publishes of %d-%d bytes in %d frames from %d connections over %v, at speed %g; warm-up %v, order: %s",
		name, t.Label, t.Publishes, max(t.MinPayloadBytes, PayloadHeaderBytes), max(t.MaxPayloadBytes, PayloadHeaderBytes),
		t.PublishFrames, t.PublishingConnections, t.Span, speed, s.Warmup, s.Order)
}

func (r *Report) writeNotes(b *strings.Builder) {
	var lines []string
	for _, run := range r.Runs {
		for _, note := range run.Notes {
			lines = append(lines, fmt.Sprintf("- run %d (%s, %s): %s", run.Ordinal, run.Case, run.Mode, note))
		}
		if run.Error != "" {
			lines = append(lines, fmt.Sprintf("- run %d (%s, %s) failed: %s", run.Ordinal, run.Case, run.Mode, run.Error))
		}
	}
	if len(lines) > 0 {
		b.WriteString("\nNotes\n\n" + strings.Join(lines, "\n") + "\n")
	}
}

// group is the successful runs of one case in one mode.
type group struct {
	caseName string
	mode     Mode
	runs     []Result
}

// groups returns one group per case and mode, cases in the settings' order
// and, within a case, modes in the settings' order.
func (r *Report) groups() []group {
	var groups []group
	for _, c := range r.Settings.Cases {
		for _, mode := range r.Settings.Modes {
			g := group{caseName: c.Name, mode: mode}
			for _, run := range r.Runs {
				if run.Case == c.Name && run.Mode == mode && run.Error == "" {
					g.runs = append(g.runs, run)
				}
			}
			groups = append(groups, g)
		}
	}
	return groups
}

func confirmOf(r Result) Summary  { return r.Confirm }
func deliveryOf(r Result) Summary { return r.Delivery }
func sendLagOf(r Result) Summary  { return r.SendLag }

func clientCPUOf(r Result) (float64, bool) {
	if r.ClientCPUSecondsPerMillion == nil {
		return 0, false
	}
	return *r.ClientCPUSecondsPerMillion, true
}

func syncsOf(r Result) (float64, bool) {
	if r.ServerSyncsPerMessage == nil {
		return 0, false
	}
	return *r.ServerSyncsPerMessage, true
}

func flushesOf(r Result) (float64, bool) {
	if r.DeviceFlushesPerMessage == nil {
		return 0, false
	}
	return *r.DeviceFlushesPerMessage, true
}

func cpuOf(r Result) (float64, bool) {
	if r.CPUSecondsPerMillion == nil {
		return 0, false
	}
	return *r.CPUSecondsPerMillion, true
}

// figure formats the range of a per-run value over the group's runs; runs
// without the value are skipped, and "-" means no run had it.
func (g group) figure(value func(Result) (float64, bool), format string) string {
	low, high, found := 0.0, 0.0, false
	for _, run := range g.runs {
		v, ok := value(run)
		if !ok {
			continue
		}
		if !found {
			low, high, found = v, v, true
		}
		low, high = min(low, v), max(high, v)
	}
	if !found {
		return "-"
	}
	lowText, highText := fmt.Sprintf(format, low), fmt.Sprintf(format, high)
	if lowText == highText {
		return lowText
	}
	return lowText + "-" + highText
}

func (g group) latency(of func(Result) Summary, q Quantile) string {
	return g.figure(func(r Result) (float64, bool) {
		s := of(r)
		return float64(s.At(q)) / float64(time.Millisecond), s.Count > 0
	}, "%.3f")
}

func (g group) max(of func(Result) Summary) string {
	return g.figure(func(r Result) (float64, bool) {
		s := of(r)
		return float64(s.Max) / float64(time.Millisecond), s.Count > 0
	}, "%.3f")
}

func (g group) multiple(of func(Result) Summary, floors *Floors) string {
	if floors == nil {
		return "-"
	}
	floor := floors.PathFloor(g.mode)
	if floor <= 0 {
		return "-"
	}
	text := g.figure(func(r Result) (float64, bool) {
		s := of(r)
		return float64(s.At(P50)) / float64(floor), s.Count > 0
	}, "%.1f")
	if text == "-" {
		return text
	}
	return text + "x"
}
