package bench

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const fsyncsPage = `# HELP fibril_fsyncs_total Every fdatasync.
# TYPE fibril_fsyncs_total counter
fibril_fsyncs_total 1234
fibril_log_fsyncs_total 1200
fibril_build_info{node="standalone",pid="4242",version="0.1.0"} 1
`

func TestParseCounterAndLabel(t *testing.T) {
	if got, err := ParseCounter(strings.NewReader(fsyncsPage), "fibril_fsyncs_total"); err != nil || got != 1234 {
		t.Fatalf("fibril_fsyncs_total %v, %v", got, err)
	}
	if _, err := ParseCounter(strings.NewReader(fsyncsPage), "fibril_absent_total"); !errors.Is(err, ErrCounterMissing) {
		t.Fatalf("absent counter: %v", err)
	}
	if _, err := ParseCounter(strings.NewReader("fibril_fsyncs_total -3\n"), "fibril_fsyncs_total"); !errors.Is(err, ErrCounterMissing) {
		t.Fatalf("negative counter: %v", err)
	}
	if pid, ok := ParseLabelValue(strings.NewReader(fsyncsPage), "fibril_build_info", "pid"); !ok || pid != "4242" {
		t.Fatalf("pid %q, %v", pid, ok)
	}
	if _, ok := ParseLabelValue(strings.NewReader(fsyncsPage), "fibril_build_info", "owner"); ok {
		t.Fatal("found a label that is not there")
	}
}

func TestMetricsCounterReadsTheServer(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(fsyncsPage))
	}))
	defer server.Close()
	count, err := MetricsCounter{URL: server.URL, Name: "fibril_fsyncs_total"}.Count(context.Background())
	if err != nil || count != 1234 {
		t.Fatalf("count %d, %v", count, err)
	}
}

// Two lines of a kernel 6.x /proc/diskstats: the flush count is the 16th
// figure after the name.
const diskstats = ` 254       0 vda 34711 5691 1449250 5260 12679771 1084932 136828136 1053430 0 471328 1306094 624960 286 134733152 49204 4066390 198199
 254       1 vda1 100 0 800 10 200 0 1600 20 0 30 30 0 0 0 0 0 0
   7       0 loop0 1 2 3 4 5 6 7 8 9 10 11
`

func TestParseDiskFlushes(t *testing.T) {
	if got, err := ParseDiskFlushes(strings.NewReader(diskstats), "vda"); err != nil || got != 4066390 {
		t.Fatalf("vda flushes %d, %v", got, err)
	}
	if _, err := ParseDiskFlushes(strings.NewReader(diskstats), "loop0"); !errors.Is(err, ErrCounterMissing) {
		t.Fatalf("an old kernel's line: %v", err)
	}
	if _, err := ParseDiskFlushes(strings.NewReader(diskstats), "sdz"); !errors.Is(err, ErrCounterMissing) {
		t.Fatalf("absent device: %v", err)
	}
}

// Counter readings become figures per publish only when both readings
// worked; a failed one or a counter that went back is noted instead.
func TestFillCounts(t *testing.T) {
	r := Result{Counts: Counts{Published: 200}}
	r.fillCounts(counterReadings{syncs: 100, flushes: 10}, counterReadings{syncs: 330, flushes: 500})
	if r.ServerSyncs == nil || *r.ServerSyncs != 230 || *r.ServerSyncsPerMessage != 1.15 {
		t.Fatalf("syncs %v per message %v", r.ServerSyncs, r.ServerSyncsPerMessage)
	}
	if *r.DeviceFlushes != 490 || *r.DeviceFlushesPerMessage != 2.45 || len(r.Notes) != 0 {
		t.Fatalf("flushes %v, notes %v", *r.DeviceFlushesPerMessage, r.Notes)
	}
	failed := errors.New("scrape refused")
	r = Result{Counts: Counts{Published: 200}}
	r.fillCounts(counterReadings{syncs: 100, flushesErr: errNoCountMeter},
		counterReadings{syncsErr: failed, flushesErr: errNoCountMeter})
	if r.ServerSyncsPerMessage != nil || r.DeviceFlushesPerMessage != nil || len(r.Notes) != 1 ||
		!strings.Contains(r.Notes[0], "scrape refused") {
		t.Fatalf("failed reading: %+v", r)
	}
	r = Result{Counts: Counts{Published: 200}}
	r.fillCounts(counterReadings{syncs: 100, flushesErr: errNoCountMeter}, counterReadings{syncs: 5, flushesErr: errNoCountMeter})
	if r.ServerSyncsPerMessage != nil || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "went back") {
		t.Fatalf("counter that went back: %+v", r)
	}
}
