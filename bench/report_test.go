package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func summaryOf(values ...time.Duration) Summary {
	samples := make([]int64, len(values))
	for i, v := range values {
		samples[i] = int64(v)
	}
	return Summarize(samples, 0)
}

func float(v float64) *float64 { return &v }

const (
	us = time.Microsecond
	ms = time.Millisecond
)

// handReport is an ABBA comparison of steady-100 with hand-picked samples,
// plus a failed fifth run whose figures must not appear.
func handReport() *Report {
	steady, _ := CaseByName(CaseSteady100)
	run := func(ordinal int, mode Mode, confirm, delivery Summary, rate, cpu float64, lost uint64) Result {
		return Result{Ordinal: ordinal, Case: CaseSteady100, Mode: mode, Confirm: confirm, Delivery: delivery,
			ConfirmsPerSecond: rate, DeliveriesPerSecond: rate, CPUSecondsPerMillion: float(cpu), Counts: Counts{Lost: lost}}
	}
	runs := []Result{
		run(1, ModeDurable, summaryOf(3*ms, 4*ms, 5*ms, 6*ms), summaryOf(5*ms, 6*ms, 7*ms, 8*ms), 100, 400, 0),
		run(2, ModeBuffered, summaryOf(1*ms, 1*ms, 2*ms), summaryOf(2*ms, 2*ms, 3*ms), 99.5, 300, 0),
		run(3, ModeBuffered, summaryOf(1500*us), summaryOf(2500*us), 100.5, 310, 1),
		run(4, ModeDurable, summaryOf(4*ms, 4*ms), summaryOf(6*ms, 6*ms), 100, 420, 0),
		run(5, ModeDurable, summaryOf(100*ms), summaryOf(100*ms), 1, 1, 0),
	}
	runs[2].Notes = []string{"1 confirmed messages never delivered"}
	// Sender lag p99: rank ceil(0.99*4) = 4 of {0, 0, 10 us, 250 us}; run 4
	// has one sample of 0.
	runs[0].SendLag = summaryOf(250*us, 0, 10*us, 0)
	runs[3].SendLag = summaryOf(0)
	runs[4].Error = "bench: publish 3: connection lost"
	// Client CPU on runs 1 and 2 only: durable shows one value, buffered
	// the one run that has it.
	runs[0].ClientCPUSecondsPerMillion = float(150)
	runs[1].ClientCPUSecondsPerMillion = float(120.5)
	// Server fdatasyncs on every run but 3; device flushes on the durable
	// runs only.
	runs[0].ServerSyncsPerMessage, runs[3].ServerSyncsPerMessage = float(1.05), float(1.1)
	runs[1].ServerSyncsPerMessage = float(0.125)
	runs[0].DeviceFlushesPerMessage, runs[3].DeviceFlushesPerMessage = float(2.4), float(2.4)
	return &Report{
		Settings: Settings{Cases: []Case{steady}, Modes: []Mode{ModeDurable, ModeBuffered}, Order: "ABBA per case",
			MessageBytes: 1024, Warmup: 2 * time.Second, Duration: 10 * time.Second, Percentiles: "nearest-rank", Server: "127.0.0.1:7420"},
		Floors: &Floors{Dir: "/data", MessageBytes: 1024,
			LoopbackRoundTrip: summaryOf(20*us, 30*us, 40*us),
			Write:             summaryOf(2*us, 4*us, 6*us),
			WriteSync:         summaryOf(1*ms, 2*ms, 3*ms)},
		Runs: runs,
	}
}

// Every figure below is worked out by hand from the samples above. Floors:
// durable 30 us + 2 ms = 2.030 ms, buffered 30 us + 4 us = 0.034 ms.
// Durable confirm p50 is 4 ms in both runs: 4/2.03 = 1.97, so 2.0x.
// Buffered confirm p50 1 and 1.5 ms: 29.4x and 44.1x. Durable delivery p50
// 6 ms: 2.96, so 3.0x; buffered 2 and 2.5 ms: 58.8x and 73.5x.
const handMarkdown = `Settings: 1024-byte messages, warm-up 2s, 10s measured per run, order: ABBA per case, server 127.0.0.1:7420.
Percentiles: nearest-rank. A range low-high spans the per-run values of the runs of one mode.

Floors of this machine, 1024-byte messages, files in /data

| floor | samples | p50 µs | p99 µs | p99.9 µs | max µs |
|---|---|---|---|---|---|
| loopback TCP round trip | 3 | 30.0 | 40.0 | 40.0 | 40.0 |
| write(2), appending | 3 | 4.0 | 6.0 | 6.0 | 6.0 |
| write(2) + fdatasync, appending | 3 | 2000.0 | 3000.0 | 3000.0 | 3000.0 |

Floor of a p50: durable 2.030 ms (round trip + write + fdatasync), buffered 0.034 ms (round trip + write).

Publish to confirm, ms from the intended publish time

| case | mode | runs | p50 | p99 | p99.9 | max | p50 / floor | confirms/s | broker CPU s per M msgs | client CPU s per M msgs | sender lag p99 | server fdatasyncs per msg | device flushes per msg |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| steady-100 | durable | 2 | 4.000 | 4.000-6.000 | 4.000-6.000 | 4.000-6.000 | 2.0x | 100.0 | 400.00-420.00 | 150.00 | 0.000-0.250 | 1.05-1.10 | 2.40 |
| steady-100 | buffered | 2 | 1.000-1.500 | 1.500-2.000 | 1.500-2.000 | 1.500-2.000 | 29.4-44.1x | 99.5-100.5 | 300.00-310.00 | 120.50 | - | 0.12 | - |

Publish to delivery, ms from the intended publish time (first deliveries)

| case | mode | runs | p50 | p99 | p99.9 | max | p50 / floor | deliveries/s | lost | duplicated |
|---|---|---|---|---|---|---|---|---|---|---|
| steady-100 | durable | 2 | 6.000 | 6.000-8.000 | 6.000-8.000 | 6.000-8.000 | 3.0x | 100.0 | 0 | 0 |
| steady-100 | buffered | 2 | 2.000-2.500 | 2.500-3.000 | 2.500-3.000 | 2.500-3.000 | 58.8-73.5x | 99.5-100.5 | 0-1 | 0 |

Notes

- run 3 (steady-100, buffered): 1 confirmed messages never delivered
- run 5 (steady-100, durable) failed: bench: publish 3: connection lost
`

func TestReportMarkdownHandComputed(t *testing.T) {
	var b bytes.Buffer
	if err := handReport().WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != handMarkdown {
		t.Errorf("markdown\n got:\n%s\nwant:\n%s", b.String(), handMarkdown)
	}
}

func TestReportMarkdownWithoutFloorsOrSamples(t *testing.T) {
	report := handReport()
	report.Floors = nil
	report.Runs = report.Runs[:1]
	report.Runs[0].Delivery = Summary{}
	report.Runs[0].CPUSecondsPerMillion, report.Runs[0].ClientCPUSecondsPerMillion = nil, nil
	var b bytes.Buffer
	if err := report.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| steady-100 | durable | 1 | 4.000 | 6.000 | 6.000 | 6.000 | - | 100.0 | - | - | 0.250 |",
		"| steady-100 | buffered | 0 | - | - | - | - | - | - | - | - |",
		"| steady-100 | durable | 1 | - | - | - | - | - | 100.0 | 0 | 0 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}

func TestReportJSONCarriesRawPercentilesAndSettings(t *testing.T) {
	var b bytes.Buffer
	if err := handReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(b.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	settings := decoded["settings"].(map[string]any)
	if settings["warmup_ns"] != float64(2*time.Second) || settings["message_bytes"] != float64(1024) {
		t.Errorf("settings %v", settings)
	}
	first := decoded["runs"].([]any)[0].(map[string]any)
	confirm := first["publish_to_confirm"].(map[string]any)
	percentiles := confirm["percentiles"].([]any)
	if len(percentiles) != len(SummaryQuantiles) {
		t.Fatalf("%d percentiles in JSON, want %d", len(percentiles), len(SummaryQuantiles))
	}
	p999 := percentiles[3].(map[string]any)
	if p999["label"] != "p99.9" || p999["quantile_ppm"] != float64(999_000) || p999["value_ns"] != float64(6*ms) {
		t.Errorf("p99.9 entry %v", p999)
	}
	if confirm["min_ns"] != float64(3*ms) || confirm["max_ns"] != float64(6*ms) || confirm["mean_ns"] != float64(4500*us) {
		t.Errorf("confirm summary %v", confirm)
	}
	if first["broker_cpu_seconds_per_million"] != float64(400) {
		t.Errorf("CPU %v", first["broker_cpu_seconds_per_million"])
	}
	if decoded["floors"].(map[string]any)["write_fdatasync"].(map[string]any)["count"] != float64(3) {
		t.Error("floors missing from JSON")
	}
	var typed Report
	if err := json.Unmarshal(b.Bytes(), &typed); err != nil || typed.Runs[3].Confirm.At(P99) != 4*ms ||
		typed.Settings.Cases[0].Shape.RatePerSecond != 100 {
		t.Errorf("typed round trip: %v", err)
	}
}

func TestResultNotes(t *testing.T) {
	r := Result{Mode: ModeDurable, StopReason: StopLimit, DrainTimedOut: true}
	r.fill(tally{counts: Counts{Published: 10, Confirmed: 8, Unconfirmed: 2, Lost: 1, BoundaryMismatch: 8},
		confirm: Summary{Overflow: 3}})
	want := []string{
		"stopped at the message limit after 10 publishes; figures cover that prefix",
		"drain timed out with 2 publishes unconfirmed and 1 confirmed messages undelivered",
		"3 latency samples did not fit the recorders and are not in the figures",
		"1 confirmed messages never delivered",
		"2 publishes never confirmed",
		"8 confirms below the durable boundary or at an unknown one",
	}
	if strings.Join(r.Notes, "\n") != strings.Join(want, "\n") {
		t.Errorf("notes\n got %q\nwant %q", r.Notes, want)
	}
	r.fillCPU(time.Second, nil, 3*time.Second, nil, true)
	if r.CPUSecondsPerMillion != nil {
		t.Error("CPU figure without measured publishes")
	}
	r.Counts.Measured = 4
	r.fillCPU(time.Second, nil, 3*time.Second, nil, true)
	if r.CPUSeconds == nil || *r.CPUSeconds != 2 || *r.CPUSecondsPerMillion != 500_000 {
		t.Errorf("CPU %v s, %v s per million; want 2 and 500000", *r.CPUSeconds, *r.CPUSecondsPerMillion)
	}
}
