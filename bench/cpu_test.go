package bench

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// Fields 14 and 15 are 250 and 75; the command name has spaces and
	// parentheses, which is why parsing starts after the last ')'.
	line := "4242 (fibril (a) b) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 987 123456789 2345 18446744073709551615\n"
	stat, err := ParseProcStat(line)
	if err != nil || stat.UserTicks != 250 || stat.SystemTicks != 75 {
		t.Fatalf("parsed %+v, %v; want 250 and 75 ticks", stat, err)
	}
	if got := stat.CPUTime(100); got != 3250*time.Millisecond {
		t.Errorf("325 ticks at 100 Hz = %v, want 3.25s", got)
	}
	for _, bad := range []string{"", "12 fibril S 1", "12 (fibril) S 1 2 3", "12 (x) S 1 2 3 4 5 6 7 8 9 10 x 75 0"} {
		if _, err := ParseProcStat(bad); !errors.Is(err, ErrProcStat) {
			t.Errorf("%q: %v, want ErrProcStat", bad, err)
		}
	}
}

func processCPUByRusage(t *testing.T) time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		t.Skipf("getrusage: %v", err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// The test process reads its own CPU time from /proc, burns CPU, and reads
// it again: the reading must grow by about what getrusage saw.
func TestProcessCPUOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	meter := ProcessCPU{PID: os.Getpid()}
	before, err := meter.CPUTime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rusageBefore := processCPUByRusage(t)
	sink := 0
	for processCPUByRusage(t)-rusageBefore < 300*time.Millisecond {
		for i := 0; i < 1_000_000; i++ {
			sink += i % 7
		}
	}
	after, err := meter.CPUTime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// At least 300 ms were spent; allow two ticks of rounding either side.
	if grew := after - before; grew < 280*time.Millisecond {
		t.Errorf("/proc CPU grew %v while getrusage saw at least 300ms (sink %d)", grew, sink)
	}
	if procClockTicksPerSecond() <= 0 {
		t.Error("no clock tick rate")
	}
	if meter.String() != "/proc/"+strconv.Itoa(os.Getpid())+"/stat" {
		t.Errorf("meter name %q", meter.String())
	}
}

func TestProcessCPUFromProcRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "77"), 0o755); err != nil {
		t.Fatal(err)
	}
	line := "77 (fibril) S 1 77 77 0 -1 0 0 0 0 0 300 100 0 0 20 0 1 0 1 1 1 1\n"
	if err := os.WriteFile(filepath.Join(root, "77", "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ProcessCPU{PID: 77, ProcRoot: root, TicksPerSecond: 250}.CPUTime(context.Background())
	if err != nil || got != 1600*time.Millisecond {
		t.Errorf("400 ticks at 250 Hz: %v, %v; want 1.6s", got, err)
	}
	if _, err := (ProcessCPU{PID: 78, ProcRoot: root}).CPUTime(context.Background()); err == nil {
		t.Error("missing process did not fail")
	}
}

const metricsPage = `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total_extra 99
process_cpu_seconds_total 12.5
go_goroutines 42
`

func TestParseProcessCPUSeconds(t *testing.T) {
	got, err := ParseProcessCPUSeconds(strings.NewReader(metricsPage))
	if err != nil || got != 12500*time.Millisecond {
		t.Errorf("parsed %v, %v; want 12.5s", got, err)
	}
	if _, err := ParseProcessCPUSeconds(strings.NewReader("go_goroutines 1\n")); !errors.Is(err, ErrMetricMissing) {
		t.Errorf("missing metric: %v", err)
	}
}

func TestMetricsCPU(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(metricsPage))
	}))
	defer server.Close()
	got, err := MetricsCPU{URL: server.URL + "/metrics"}.CPUTime(context.Background())
	if err != nil || got != 12500*time.Millisecond {
		t.Errorf("metrics CPU %v, %v", got, err)
	}
	if _, err := (MetricsCPU{URL: server.URL + "/other"}).CPUTime(context.Background()); err == nil {
		t.Error("a 404 did not fail")
	}
}

func TestProcessesCPUSumsEveryProcess(t *testing.T) {
	root := t.TempDir()
	for pid, line := range map[string]string{
		"11": "11 (fibril) S 1 11 11 0 -1 0 0 0 0 0 300 100 0 0 20 0 1 0 1 1 1 1\n",
		"12": "12 (fibril) S 1 12 12 0 -1 0 0 0 0 0 50 50 0 0 20 0 1 0 1 1 1 1\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	both := ProcessesCPU{{PID: 11, ProcRoot: root, TicksPerSecond: 100}, {PID: 12, ProcRoot: root, TicksPerSecond: 100}}
	got, err := both.Meter().CPUTime(context.Background())
	if err != nil || got != 5*time.Second {
		t.Fatalf("sum of 4 s and 1 s: %v, %v", got, err)
	}
	if _, err := append(both, ProcessCPU{PID: 13, ProcRoot: root}).CPUTime(context.Background()); err == nil {
		t.Fatal("a missing process was summed as zero")
	}
	if ProcessesCPU(nil).Meter() != nil {
		t.Fatal("no process gave a meter")
	}
}
