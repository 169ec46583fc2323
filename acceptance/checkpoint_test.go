package acceptance

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// checkpointQueue is the buffered queue the checkpoint cases load. The
// broker checkpoints a queue after 100,000 confirmed publishes in one life
// (a constant in actors, not a setting), so each trial publishes that many.
const (
	checkpointQueue          = "snap-buffered"
	checkpointAfterPublishes = 100_000
)

// crashPoint is where in a checkpoint the power goes.
type crashPoint int

const (
	// beforePublication: the snapshot file is written and synced under its
	// temporary name; the log records it captures are not synced yet.
	beforePublication crashPoint = iota
	// afterPublication: the snapshot is renamed into place and the
	// directory synced: it is recovery authority.
	afterPublication
)

func (p crashPoint) String() string {
	return [...]string{"before publication", "after publication"}[p]
}

// checkpointWatch is the filesystem the broker writes through: vfs.Mem,
// with a hook that runs once when a checkpoint reaches the crash point.
type checkpointWatch struct {
	*vfs.Mem
	point   crashPoint
	once    sync.Once
	reached func()
	mu      sync.Mutex
	renamed bool // a snapshot was renamed into place, its directory not yet synced
}

func (w *checkpointWatch) fire() { w.once.Do(w.reached) }

func (w *checkpointWatch) Create(name string) (vfs.File, error) {
	f, err := w.Mem.Create(name)
	if err != nil || w.point != beforePublication || !strings.HasSuffix(name, ".snap.tmp") {
		return f, err
	}
	return &syncHookFile{File: f, afterSync: w.fire}, nil
}

func (w *checkpointWatch) Rename(oldname, newname string) error {
	err := w.Mem.Rename(oldname, newname)
	if err == nil && strings.HasSuffix(newname, ".snap") {
		w.mu.Lock()
		w.renamed = true
		w.mu.Unlock()
	}
	return err
}

func (w *checkpointWatch) SyncDir(dir string) error {
	err := w.Mem.SyncDir(dir)
	w.mu.Lock()
	published := w.renamed && err == nil
	w.mu.Unlock()
	if published && w.point == afterPublication {
		w.fire()
	}
	return err
}

// syncHookFile runs afterSync after a successful Sync.
type syncHookFile struct {
	vfs.File
	afterSync func()
}

func (f *syncHookFile) Sync() error {
	err := f.File.Sync()
	if err == nil {
		f.afterSync()
	}
	return err
}

// Checkpoints: a buffered queue with background sync off, so every record
// in a checkpoint's captured range is unsynced when it is captured. The
// power goes once the checkpoint reaches the crash point:
//
//   - before publication, the snapshot must not be recovery authority (no
//     published snapshot in the image) and the queue recovers by replay,
//     losing only what the buffered promise allows;
//   - after publication, the log must already be durable up to the
//     offset the snapshot covers (the broker's own frontier, read after
//     the cut, says so), so no message seen below it may be lost.
//
// Each trial publishes 100,000 messages. FIBRIL_CHECKPOINT_ROUNDS sets
// the rounds of both points (1, or 3 with FIBRIL_SOAK=1).
func TestCheckpointCrashBeforeAndAfterPublication(t *testing.T) {
	rounds := trials(t, "FIBRIL_CHECKPOINT_ROUNDS", 1, 3)
	row := Row{Case: "checkpoint crash (before and after publication)"}
	for round := range rounds {
		for _, point := range []crashPoint{beforePublication, afterPublication} {
			t.Run(fmt.Sprintf("round-%d/%s", round, point), func(t *testing.T) {
				results, recovery := runCheckpointCrash(t, point)
				row.Trials++
				row.Recoveries = append(row.Recoveries, recovery)
				for _, result := range results {
					row.Add(result)
				}
			})
		}
	}
	summary.Add(row)
}

func runCheckpointCrash(t *testing.T, point crashPoint) ([]QueueResult, time.Duration) {
	queues := map[string]wire.Mode{checkpointQueue: wire.ModeBuffered}
	reached := make(chan struct{})
	release := make(chan struct{})
	watch := &checkpointWatch{Mem: vfs.NewMem(), point: point, reached: func() {
		close(reached)
		<-release // the checkpoint goes no further until the image is taken
	}}
	node := startMemNode(t, watch.Mem, watch, func(config *actors.Config) { config.SyncInterval = 0 })
	h := NewHistory()
	h.LifeStarted()
	l := startLoad(t, h, node.loadConfig(loadConfig{queues: queues, payloadBytes: 16, window: 2048,
		prefetch: 256, sampleEvery: 50 * time.Millisecond,
		pauseEvery: 100 * time.Millisecond, pauseFor: 50 * time.Millisecond}))
	select {
	case <-reached:
	case <-time.After(5 * time.Minute):
		t.Fatalf("no checkpoint reached %s; confirmed so far: %d", point,
			confirmedAfter(h.Record(), checkpointQueue, time.Time{}))
	}
	var snapshotNext uint64
	var published bool
	recovery := node.powerLoss(l, []string{checkpointQueue}, vfs.CrashOptions{}, func(image *vfs.Mem) {
		close(release)
		snapshotNext, published = publishedSnapshot(t, image)
	})
	record := h.Record()
	lastSample := record.Samples[len(record.Samples)-1]
	t.Logf("%s: confirmed %d before the cut; snapshot in the image: %v (covers below %d); durable frontier read after the cut: %d",
		point, confirmedAfter(record, checkpointQueue, time.Time{}), published, snapshotNext, lastSample.Durable)
	switch {
	case point == beforePublication && published:
		t.Errorf("the image holds a published snapshot though the power went before publication")
	case point == afterPublication && !published:
		t.Errorf("the image holds no snapshot though the power went after publication")
	case point == afterPublication && lastSample.Durable < snapshotNext:
		t.Errorf("snapshot covering below %d published while the log was durable only below %d", snapshotNext, lastSample.Durable)
	}
	time.Sleep(200 * time.Millisecond)
	l.drain(2 * time.Minute)
	results := checkLoad(t, h, queues)
	for _, result := range results {
		t.Logf("%s: the promise let %d confirmed messages go; %d went", point, result.Allowed, len(result.Gone))
	}
	return results, recovery
}

// publishedSnapshot returns the offset the newest published snapshot of
// the checkpoint queue covers in image, if it has one.
func publishedSnapshot(t *testing.T, image *vfs.Mem) (uint64, bool) {
	dir := path.Join(memDataDir, "queues", checkpointQueue, "0")
	names, err := image.ReadDir(dir)
	if err != nil {
		t.Fatalf("list %s in the image: %v", dir, err)
	}
	var newest uint64
	found := false
	for _, name := range names {
		digits, ok := strings.CutPrefix(name, "snapshot-")
		if digits, ok = strings.CutSuffix(digits, ".snap"); !ok {
			continue
		}
		next, err := strconv.ParseUint(digits, 10, 64)
		if err == nil && next >= newest {
			newest, found = next, true
		}
	}
	return newest, found
}
