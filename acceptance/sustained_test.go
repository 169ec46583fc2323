package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/wire"
)

const sustainedQueue = "sustained-buffered"

// lagWindow is one reporting interval of the sustained run.
type lagWindow struct {
	end                 time.Duration
	confirmed           int
	maxUnsyncedRecords  uint64
	maxUnsyncedBytes    uint64
	segments, snapshots int
}

// Sustained run: a buffered queue on the real filesystem under a paced
// publisher and an acking consumer, with background sync (100 ms), small
// segments (so rollover happens all the time) and the broker's
// checkpoints and retention (a checkpoint after every 100,000 confirms,
// then compaction). Every ten seconds (every second in the short run) it
// reports the confirms and the worst durable lag seen (unsynced records
// and bytes, sampled every 100 ms), and the segment and snapshot files on
// disk. At the end nothing confirmed may be lost, the durable lag must
// reach zero once the load stops, rollover must have happened, and, when
// a checkpoint was due, retention must have removed segments.
//
// Short run: 8 s at 2,000/s with 1 MiB segments. With FIBRIL_SOAK=1: ten
// minutes at 10,000/s with 16 MiB segments. FIBRIL_SUSTAINED_SECONDS and
// FIBRIL_SUSTAINED_RATE override duration and rate.
func TestSustainedLoadWithSyncCheckpointsRolloverRetention(t *testing.T) {
	seconds := trials(t, "FIBRIL_SUSTAINED_SECONDS", 8, 600)
	rate := trials(t, "FIBRIL_SUSTAINED_RATE", 2000, 10_000)
	segmentBytes := int64(1 << 20)
	report := time.Second
	if soak() {
		segmentBytes, report = 16<<20, 10*time.Second
	}
	dataDir := t.TempDir()
	config := actors.DefaultConfig()
	config.DataDir, config.ListenAddr, config.HTTPAddr = dataDir, "127.0.0.1:0", ""
	config.SegmentBytes = segmentBytes
	broker, err := actors.Start(config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := broker.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	queues := map[string]wire.Mode{sustainedQueue: wire.ModeBuffered}
	h := NewHistory()
	h.LifeStarted()
	l := startLoad(t, h, loadConfig{queues: queues, payloadBytes: 1024, ratePerQueue: float64(rate),
		window: 4096, prefetch: 512, addresses: []string{broker.Addr().String()}})
	logDir := filepath.Join(dataDir, "queues", sustainedQueue, "0", "log")
	queueDir := filepath.Dir(logDir)

	began := time.Now()
	var windows []lagWindow
	current := lagWindow{}
	seenSegments := map[string]bool{}
	lastConfirmed := 0
	for elapsed := time.Duration(0); elapsed < time.Duration(seconds)*time.Second; elapsed = time.Since(began) {
		time.Sleep(100 * time.Millisecond)
		if info, ok := broker.QueueInfo(sustainedQueue); ok {
			current.maxUnsyncedRecords = max(current.maxUnsyncedRecords, info.UnsyncedRecords)
			current.maxUnsyncedBytes = max(current.maxUnsyncedBytes, info.UnsyncedBytes)
		}
		for _, name := range listFiles(logDir, ".log") {
			seenSegments[name] = true
		}
		if time.Since(began) >= time.Duration(len(windows)+1)*report {
			confirmed := int(l.confirmed.Load())
			current.end = time.Since(began).Round(time.Second)
			current.confirmed, lastConfirmed = confirmed-lastConfirmed, confirmed
			current.segments = len(listFiles(logDir, ".log"))
			current.snapshots = len(listFiles(queueDir, ".snap"))
			windows = append(windows, current)
			current = lagWindow{}
		}
	}
	l.finishPublishing()
	waitUntil(t, "the durable lag to reach zero after the load", func() bool {
		info, ok := broker.QueueInfo(sustainedQueue)
		return ok && info.UnsyncedRecords == 0 && info.DurableNext == info.WrittenNext
	})
	t.Logf("sustained run: %d s at %d/s, payload 1 KiB, segments %d MiB, background sync %v\n%s",
		seconds, rate, segmentBytes>>20, config.SyncInterval, formatLagTable(windows, report))
	l.drain(2 * time.Minute)
	results := checkLoad(t, h, queues)
	segmentsLeft := len(listFiles(logDir, ".log"))
	snapshots := len(listFiles(queueDir, ".snap"))
	t.Logf("segments: %d created, %d left; snapshots on disk: %d; test process RSS %d MiB",
		len(seenSegments), segmentsLeft, snapshots, processRSS()>>20)
	if len(seenSegments) < 2 {
		t.Errorf("no segment rollover in the run (%d segment seen)", len(seenSegments))
	}
	if results[0].Confirmed >= checkpointAfterPublishes {
		if snapshots == 0 {
			t.Errorf("%d confirms and no snapshot on disk", results[0].Confirmed)
		}
		if segmentsLeft >= len(seenSegments) {
			t.Errorf("retention removed no segment: %d created, %d left", len(seenSegments), segmentsLeft)
		}
	}
	row := Row{Case: fmt.Sprintf("sustained %d s at %d/s, buffered", seconds, rate), Trials: 1}
	row.Add(results[0])
	summary.Add(row)
}

func listFiles(dir, suffix string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, entry := range entries {
		if strings.HasSuffix(entry.Name(), suffix) {
			names = append(names, entry.Name())
		}
	}
	sort.Strings(names)
	return names
}

func formatLagTable(windows []lagWindow, report time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| until | confirms/s | max unsynced records | max unsynced KiB | segments | snapshots |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|\n")
	for _, w := range windows {
		fmt.Fprintf(&b, "| %v | %.0f | %d | %d | %d | %d |\n", w.end, float64(w.confirmed)/report.Seconds(),
			w.maxUnsyncedRecords, w.maxUnsyncedBytes>>10, w.segments, w.snapshots)
	}
	return b.String()
}

// processRSS is this test process's resident set (clients and broker).
func processRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib uint64
			_, _ = fmt.Sscan(rest, &kib)
			return kib << 10
		}
	}
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.Sys
}
