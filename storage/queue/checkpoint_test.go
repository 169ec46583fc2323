package queue

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// checkpointSetup builds a buffered queue whose captured checkpoint range
// holds records that are written but not synced: 4 synced publishes, then
// 4 unsynced publishes, a lease of 2 and an ack of 1, then the marker.
func checkpointSetup(t *testing.T) (*memQueue, *CheckpointTask, uint64) {
	t.Helper()
	m := openMemQueue(t, vfs.NewMem(), "/q", Options{Mode: Buffered})
	for i := range 4 {
		m.publish(Message{ID: fmt.Sprintf("s%d", i), Payload: []byte("synced")})
	}
	if err := m.q.log.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	synced := m.q.log.Frontiers().Durable
	for i := range 4 {
		m.publish(Message{ID: fmt.Sprintf("u%d", i), Payload: []byte("unsynced")})
	}
	d := m.lease(1, 2).Deliveries
	m.must(m.q.Ack(1, []uint64{d[0].Offset}))
	ticket, err := m.q.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	task := m.await(ticket).Checkpoint
	if task == nil {
		t.Fatal("no checkpoint captured")
	}
	if durable := m.q.log.Frontiers().Durable; durable != synced || durable >= task.Next {
		t.Fatalf("setup: durable %d, synced %d, captured %d: the captured range must hold unsynced records", durable, synced, task.Next)
	}
	return m, task, synced
}

func snapshotFiles(t *testing.T, fs vfs.FS) []string {
	names, err := fs.ReadDir("/q")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, snapshotPrefix) {
			out = append(out, n)
		}
	}
	return out
}

func TestCheckpointCrashBeforePublication(t *testing.T) {
	m, _, synced := checkpointSetup(t)
	m.reopen(m.crash(true))
	r := m.q.Recovery()
	if r.Snapshot != "" || r.LogEnd != synced || len(snapshotFiles(t, m.fs)) != 0 {
		t.Fatalf("recovery %+v, files %v", r, snapshotFiles(t, m.fs))
	}
	if c := m.q.Info().Counts; c.Published != 4 || c.Ready != 4 || c.Acked != 0 {
		t.Fatalf("after power loss %+v", c)
	}
}

func TestCheckpointCrashAfterWritingBeforeRename(t *testing.T) {
	m, task, synced := checkpointSetup(t)
	temporary := path.Join(task.dir, snapshotName(task.Next)+temporarySuffix)
	if err := writeAndSync(m.fs, temporary, task.data); err != nil {
		t.Fatal(err)
	}
	if err := m.fs.SyncDir(task.dir); err != nil {
		t.Fatal(err)
	}
	m.reopen(m.crash(true))
	if r := m.q.Recovery(); r.Snapshot != "" || r.LogEnd != synced {
		t.Fatalf("recovery %+v", r)
	}
	if names, _ := m.fs.ReadDir("/q"); strings.Contains(strings.Join(names, " "), temporarySuffix) {
		t.Fatalf("temporary snapshot left behind: %v", names)
	}
}

func TestCheckpointCrashAfterPublication(t *testing.T) {
	m, task, _ := checkpointSetup(t)
	if err := task.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.q.CheckpointDone(task, nil); err != nil {
		t.Fatal(err)
	}
	if durable := m.q.log.Frontiers().Durable; durable < task.Next {
		t.Fatalf("published with durable %d below %d", durable, task.Next)
	}
	m.publish(Message{ID: "after", Payload: []byte("after")}) // written, lost in the power loss
	m.reopen(m.crash(true))
	r := m.q.Recovery()
	if r.Snapshot != snapshotName(task.Next) || r.ReplayedFrom != task.Next || r.LogEnd != task.Next || r.ExpiredLeases != 1 {
		t.Fatalf("recovery %+v, want the snapshot at %d", r, task.Next)
	}
	if c := m.q.Info().Counts; c.Published != 8 || c.Acked != 1 || c.Ready != 7 || c.Leased != 0 {
		t.Fatalf("after power loss %+v", c)
	}
	d := m.lease(2, 10).Deliveries
	if len(d) != 7 || !d[0].Redelivered || d[0].Attempt != 2 || d[0].MessageID != "s1" {
		t.Fatalf("deliveries after recovery from the snapshot: %d, first %+v", len(d), d[0])
	}
}

// TestUnsyncedSnapshotIsIgnored publishes a snapshot without making the
// log durable first (the mistake the checkpoint rule prevents): after a
// power loss its marker is gone, and recovery replays the log instead.
func TestUnsyncedSnapshotIsIgnored(t *testing.T) {
	m, task, synced := checkpointSetup(t)
	task.barrier = lyingBarrier{}
	if err := task.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.reopen(m.crash(true))
	r := m.q.Recovery()
	if r.Snapshot != "" || len(r.SkippedSnapshots) != 1 || !errors.Is(r.SkippedSnapshots[0], ErrSnapshotStale) {
		t.Fatalf("recovery %+v", r)
	}
	if c := m.q.Info().Counts; c.Published != 4 || c.Ready != 4 || r.LogEnd != synced {
		t.Fatalf("after power loss %+v", c)
	}
}

type lyingBarrier struct{}

func (lyingBarrier) durableNext() uint64            { return ^uint64(0) }
func (lyingBarrier) sync(ctx context.Context) error { return nil }

func TestDamagedSnapshotFallsBackToOlder(t *testing.T) {
	m := openMemQueue(t, vfs.NewMem(), "/q", Options{})
	var tasks []*CheckpointTask
	for round := range 3 {
		m.publish(Message{Payload: []byte(fmt.Sprint("round ", round))})
		ticket, err := m.q.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		task := m.await(ticket).Checkpoint
		if err := m.q.CheckpointDone(task, task.Run(context.Background())); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	if files := snapshotFiles(t, m.fs); len(files) != snapshotsKept {
		t.Fatalf("snapshots kept: %v", files)
	}
	m.publish(Message{Payload: []byte("tail")})
	newest := path.Join("/q", snapshotName(tasks[2].Next))
	f, err := m.fs.OpenReadWrite(newest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 20); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	_ = f.Close()
	m.reopen(m.crash(false))
	r := m.q.Recovery()
	if r.Snapshot != snapshotName(tasks[1].Next) || len(r.SkippedSnapshots) != 1 ||
		!errors.Is(r.SkippedSnapshots[0], ErrSnapshotCorrupt) {
		t.Fatalf("recovery %+v", r)
	}
	if c := m.q.Info().Counts; c.Published != 4 || c.Ready != 4 {
		t.Fatalf("counts %+v", c)
	}
}

func TestCheckpointRefusesWhenSyncFails(t *testing.T) {
	m, task, _ := checkpointSetup(t)
	m.fs.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	err := task.Run(context.Background())
	if !errors.Is(err, ErrSnapshotNotDurable) {
		t.Fatalf("run with a failing sync: %v", err)
	}
	if files := snapshotFiles(t, m.fs); len(files) != 0 {
		t.Fatalf("snapshot published without a durable log: %v", files)
	}
	if err := m.q.CheckpointDone(task, err); !errors.Is(err, ErrSnapshotNotDurable) {
		t.Fatalf("done: %v", err)
	}
	if _, err := m.q.Advance(); !errors.Is(err, ErrFenced) {
		t.Fatalf("queue over a latched log: %v", err)
	}
	if _, err := m.q.Publish([]Message{{Payload: []byte("x")}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("publish after fencing: %v", err)
	}
	m.fs.ClearFaults()
	m.reopen(m.crash(false))
	if c := m.q.Info().Counts; c.Published != 4 {
		t.Fatalf("after reopen the log is cut to its last sync: %+v", c)
	}
}

// TestCompactionKeepsRestartIndependentOfHistory settles a long history,
// checkpoints, compacts, and checks that a restart replays nothing of it.
func TestCompactionKeepsRestartIndependentOfHistory(t *testing.T) {
	m := openMemQueue(t, vfs.NewMem(), "/q", Options{Mode: Buffered})
	for round := range 20 {
		batch := make([]Message, 20)
		for i := range batch {
			batch[i] = Message{Payload: []byte(fmt.Sprintf("round %d message %d", round, i))}
		}
		m.publish(batch...)
		d := m.lease(1, 20).Deliveries
		m.must(m.q.Ack(1, offsetsOf(d)))
	}
	m.publish(Message{ID: "survivor", Payload: []byte("keep me")})
	ticket, _ := m.q.Checkpoint()
	task := m.await(ticket).Checkpoint
	if err := m.q.CheckpointDone(task, task.Run(context.Background())); err != nil {
		t.Fatal(err)
	}
	first, err := m.q.Compact()
	if err != nil || first == 0 {
		t.Fatalf("compact: first %d, %v", first, err)
	}
	m.reopen(m.crash(false))
	r := m.q.Recovery()
	if r.Snapshot == "" || r.Replayed != 0 {
		t.Fatalf("recovery %+v", r)
	}
	if c := m.q.Info(); c.Counts.Acked != 400 || c.Counts.Ready != 1 || c.FirstOffset != first {
		t.Fatalf("info %+v", c)
	}
	if d := m.lease(2, 5).Deliveries; len(d) != 1 || d[0].MessageID != "survivor" {
		t.Fatalf("deliveries %+v", d)
	}
}
