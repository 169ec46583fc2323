package main

// Tests of the bench command: every case in both modes, and the replay of
// the recorded mixed trace, against the real broker in process, with runs
// of a fraction of a second. They check counts and consistency only; the
// latencies they print are not judged (they run under the race detector on
// a shared machine).

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/bench"
	"github.com/fibrilmq/fibril/client"
)

// mixedTracePublishes is the number of publishes in
// testdata/traces/mixed.trace, by the recipe in record-mixed.sh.
const mixedTracePublishes = 575

const mixedTracePath = "../../testdata/traces/mixed.trace"

// benchAt runs the bench command against address and decodes its JSON
// report.
func benchAt(t *testing.T, address string, args ...string) (result, bench.Report) {
	t.Helper()
	jsonFile := filepath.Join(t.TempDir(), "report.json")
	r := fibrilctlAt(t, address, append(args, "--json", jsonFile, "--quiet")...)
	if r.code != exitOK {
		t.Fatalf("bench %v: %+v", args, r)
	}
	content, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var report bench.Report
	if err := json.Unmarshal(content, &report); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	return r, report
}

// checkCounts asserts that a run lost, doubled, refused and mislabelled
// nothing.
func checkCounts(t *testing.T, run bench.Result) {
	t.Helper()
	c := run.Counts
	if run.Error != "" || run.DrainTimedOut || c.Published == 0 || c.Measured == 0 || c.Measured > c.Published ||
		c.Confirmed != c.Published || c.Delivered != c.Published || c.PublishFailed != 0 || c.Unconfirmed != 0 ||
		c.Lost != 0 || c.Duplicated != 0 || c.Unexpected != 0 || c.BoundaryMismatch != 0 || c.ConfirmAnomalies != 0 {
		t.Errorf("run %d (%s, %s): error %q, drain timed out %v, counts %+v, notes %q",
			run.Ordinal, run.Case, run.Mode, run.Error, run.DrainTimedOut, c, run.Notes)
	}
	// The confirms' boundary comes from the node: a durable queue's are all
	// durable; a buffered queue's are written, or durable when the message
	// was already synced, but not all durable.
	if (run.Mode == bench.ModeDurable && c.AboveBoundary != 0) || (run.Mode == bench.ModeBuffered && c.AboveBoundary == c.Confirmed) {
		t.Errorf("run %d (%s, %s): %d of %d confirms above the mode's boundary", run.Ordinal, run.Case, run.Mode, c.AboveBoundary, c.Confirmed)
	}
	if run.Confirm.Count != int(c.Measured) || run.Delivery.Count != int(c.Measured) {
		t.Errorf("run %d (%s, %s): %d confirm and %d delivery samples for %d measured messages",
			run.Ordinal, run.Case, run.Mode, run.Confirm.Count, run.Delivery.Count, c.Measured)
	}
}

// checkCPU asserts that a run read the broker's CPU, which in these tests
// is this process, found by its listening port.
func checkCPU(t *testing.T, report bench.Report) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	if want := fmt.Sprintf("/proc/%d/stat", os.Getpid()); report.Settings.CPUSource != want {
		t.Errorf("CPU source %q, want %q", report.Settings.CPUSource, want)
	}
	for _, run := range report.Runs {
		if run.CPUSecondsPerMillion == nil || *run.CPUSecondsPerMillion < 0 {
			t.Errorf("run %d (%s, %s) has no broker CPU figure: %q", run.Ordinal, run.Case, run.Mode, run.Notes)
		}
	}
}

// checkSyncs asserts that every run counted the server's fsyncs, and that
// every durable run made some (each of its confirms needs one).
func checkSyncs(t *testing.T, report bench.Report) {
	t.Helper()
	if !strings.HasPrefix(report.Settings.SyncsSource, "fibril_fsyncs_total at ") {
		t.Errorf("syncs source %q", report.Settings.SyncsSource)
	}
	for _, run := range report.Runs {
		if run.ServerSyncs == nil || run.ServerSyncsPerMessage == nil {
			t.Errorf("run %d (%s, %s) has no server fsync figure: %q", run.Ordinal, run.Case, run.Mode, run.Notes)
			continue
		}
		if run.Mode == bench.ModeDurable && *run.ServerSyncs == 0 {
			t.Errorf("durable run %d (%s) made no fsync", run.Ordinal, run.Case)
		}
	}
}

func TestBenchRunsEveryCaseInBothModes(t *testing.T) {
	broker := startBroker(t, t.TempDir(), "127.0.0.1:0")
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		broker.Metrics().WritePrometheus(w)
	}))
	defer metrics.Close()
	r, report := benchAt(t, broker.Addr().String(), "bench", "--mode", "both", "--warmup", "100ms",
		"--duration", "300ms", "--size", "512", "--floor-samples", "100", "--data-dir", t.TempDir(),
		"--syncs", metrics.URL)
	cases := []string{bench.CaseSteady100, bench.CaseSteady10k, bench.CaseBurst200, bench.CaseSaturation}
	abba := []bench.Mode{bench.ModeDurable, bench.ModeBuffered, bench.ModeBuffered, bench.ModeDurable}
	if len(report.Runs) != len(cases)*len(abba) {
		t.Fatalf("%d runs, want %d", len(report.Runs), len(cases)*len(abba))
	}
	for i, run := range report.Runs {
		if run.Case != cases[i/4] || run.Mode != abba[i%4] || run.Ordinal != i+1 {
			t.Errorf("run %d is %s %s (ordinal %d), want %s %s", i+1, run.Case, run.Mode, run.Ordinal, cases[i/4], abba[i%4])
		}
		checkCounts(t, run)
	}
	checkCPU(t, report)
	checkSyncs(t, report)
	if report.Floors == nil || report.Floors.LoopbackRoundTrip.Count != 100 || report.Floors.Write.Count != 100 ||
		report.Floors.WriteSync.Count != 10 || report.Floors.IdleRoundTrip.Count != 2 || report.Settings.MessageBytes != 512 {
		t.Errorf("floors %+v, message size %d", report.Floors, report.Settings.MessageBytes)
	}
	for _, want := range []string{"| loopback TCP round trip | 100 |", "Publish to confirm", "Publish to delivery",
		"| steady-10k | durable | 2 |", "| saturation | buffered | 2 |"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the markdown report lacks %q:\n%s", want, r.stdout)
		}
	}
	t.Logf("\n%s", r.stdout)
}

func TestBenchReplaysTheMixedTrace(t *testing.T) {
	broker := startBroker(t, t.TempDir(), "127.0.0.1:0")
	r, report := benchAt(t, broker.Addr().String(), "bench", "replay", mixedTracePath, "--speed", "4",
		"--mode", "both", "--floors=false")
	if report.Settings.Trace == nil || report.Settings.Trace.Publishes != mixedTracePublishes ||
		report.Settings.Trace.Truncated || len(report.Runs) != 4 {
		t.Fatalf("trace %+v, %d runs", report.Settings.Trace, len(report.Runs))
	}
	for _, run := range report.Runs {
		checkCounts(t, run)
		if run.Counts.Published != mixedTracePublishes || run.Counts.Measured != mixedTracePublishes {
			t.Errorf("run %d (%s) published %d and measured %d, want the trace's %d", run.Ordinal, run.Mode,
				run.Counts.Published, run.Counts.Measured, mixedTracePublishes)
		}
	}
	checkCPU(t, report)
	if !strings.Contains(r.stdout, "replay of "+mixedTracePath) || !strings.Contains(r.stdout, "| replay | durable | 2 |") {
		t.Errorf("the markdown report does not describe the replay:\n%s", r.stdout)
	}
	t.Logf("\n%s", r.stdout)
}

func TestBenchCommandLineMistakes(t *testing.T) {
	const nowhere = "127.0.0.1:1" // every mistake is found before dialing
	for _, args := range [][]string{
		{"bench", "--case", "steady-1m"},
		{"bench", "--case", "steady-100,steady-100"},
		{"bench", "--mode", "fast"},
		{"bench", "--size", "10"},
		{"bench", "--duration", "0s"},
		{"bench", "--server-pid", "1", "--metrics", "http://127.0.0.1:1/metrics"},
		{"bench", "--floor-samples", "0"},
		{"bench", "extra"},
		{"bench", "replay"},
		{"bench", "replay", mixedTracePath, "--speed", "0"},
		{"bench", "replay", mixedTracePath, "--case", "steady-100"},
	} {
		if r := fibrilctlAt(t, nowhere, args...); r.code != exitUsage || !strings.HasPrefix(r.stderr, "fibrilctl bench: ") {
			t.Errorf("%v: %+v", args, r)
		}
	}
	r := fibrilctlAt(t, nowhere, "bench", "replay", filepath.Join(t.TempDir(), "missing.trace"))
	expectFailure(t, r, exitFailure, "missing.trace")
	r = fibrilctlAt(t, nowhere, "bench", "--floors=false")
	expectFailure(t, r, exitFailure, "connection refused")
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1CFC 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4711 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1CFC 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 4712 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1CFD 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4713 1 0000000000000000 100 0 0 10 0
   3: 00000000000000000000000001000000:1CFC 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4714 1 0000000000000000 100 0 0 10 0
`
	// Port 7420 is 1CFC: the listening IPv4 and IPv6 sockets, not the
	// established connection (state 01) nor the listener on 7421.
	if got := listeningInodes(table, 7420); fmt.Sprint(got) != "[4711 4714]" {
		t.Errorf("listeners on 7420: %v", got)
	}
	if got := listeningInodes(table, 7421); fmt.Sprint(got) != "[4713]" {
		t.Errorf("listeners on 7421: %v", got)
	}
	if got := listeningInodes(table, 80); len(got) != 0 {
		t.Errorf("listeners on 80: %v", got)
	}
}

func TestFindListenerPIDFindsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp here")
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	if pid, err := findListenerPID("/proc", address); err != nil || pid != os.Getpid() {
		t.Errorf("listener of %s: pid %d, %v; want %d", address, pid, err, os.Getpid())
	}
	listener.Close()
	if _, err := findListenerPID("/proc", address); err == nil {
		t.Errorf("a closed listener on %s was found", address)
	}
	if _, err := findListenerPID("/proc", "192.0.2.1:7420"); err == nil {
		t.Error("a remote address was looked up locally")
	}
}

func TestBenchBoundaryNames(t *testing.T) {
	for boundary, want := range map[uint8]bench.Boundary{1: bench.BoundaryWritten, 2: bench.BoundaryDurable, 9: "boundary_9"} {
		if got := benchBoundary(client.Boundary(boundary)); got != want {
			t.Errorf("boundary %d is named %q, want %q", boundary, got, want)
		}
	}
}
