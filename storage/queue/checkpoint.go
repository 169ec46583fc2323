package queue

// Checkpoints. A checkpoint appends a marker record with a random id; when
// the marker is applied, the state right after it is captured (every
// record below the marker is applied, none above). Publishing the snapshot
// is a separate task, so the owner can run the file I/O off its goroutine:
//
//  1. write snapshot-<next>.snap.tmp and sync it;
//  2. make the log durable up to next (sync when the durable frontier is
//     behind, as it is for a buffered queue) and check that the durable
//     frontier covers next; refuse to publish otherwise;
//  3. rename the file into place and sync the directory: from here on the
//     snapshot is recovery authority;
//  4. remove snapshots older than the newest snapshotsKept.
//
// A crash before step 3 leaves no snapshot (the .tmp is removed at open).
// Recovery also checks the marker at next-1 in the durable log, so even a
// snapshot published without step 2 would be ignored after a power loss.

import (
	"context"
	"fmt"
	"path"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// durabilityBarrier is what a checkpoint needs from the log.
type durabilityBarrier interface {
	durableNext() uint64
	sync(ctx context.Context) error
}

// CheckpointTask publishes one captured snapshot. Run touches only the
// filesystem and the log's thread-safe sync, so it may run on any
// goroutine; report its result to the queue's owner with CheckpointDone.
type CheckpointTask struct {
	// Ticket is the Checkpoint call this task finishes.
	Ticket Ticket
	// Next is the offset the snapshot covers: every record below it.
	Next uint64
	// firstLive is the snapshot state's lowest live message: every record
	// below it is settled history once the snapshot is published.
	firstLive uint64
	id        uint64
	data      []byte
	fs        vfs.FS
	dir       string
	barrier   durabilityBarrier
}

// Bytes is the snapshot's size.
func (t *CheckpointTask) Bytes() int { return len(t.data) }

// Run writes, makes durable and publishes the snapshot.
func (t *CheckpointTask) Run(ctx context.Context) error {
	name := snapshotName(t.Next)
	temporary := path.Join(t.dir, name+temporarySuffix)
	if err := writeAndSync(t.fs, temporary, t.data); err != nil {
		return fmt.Errorf("queue: checkpoint write: %w", err)
	}
	if err := t.ensureDurable(ctx); err != nil {
		_ = t.fs.Remove(temporary)
		return err
	}
	if err := t.fs.Rename(temporary, path.Join(t.dir, name)); err != nil {
		return fmt.Errorf("queue: checkpoint publish: %w", err)
	}
	if err := t.fs.SyncDir(t.dir); err != nil {
		return fmt.Errorf("queue: checkpoint publish: %w", err)
	}
	return removeOldSnapshots(t.fs, t.dir)
}

// ensureDurable syncs the log when its durable frontier is below Next and
// checks the frontier afterwards.
func (t *CheckpointTask) ensureDurable(ctx context.Context) error {
	if t.barrier.durableNext() >= t.Next {
		return nil
	}
	if err := t.barrier.sync(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotNotDurable, err)
	}
	if durable := t.barrier.durableNext(); durable < t.Next {
		return fmt.Errorf("%w: durable %d below %d", ErrSnapshotNotDurable, durable, t.Next)
	}
	return nil
}

// removeOldSnapshots keeps the newest snapshotsKept snapshots. An older one
// is only a fallback for a damaged newer one.
func removeOldSnapshots(fs vfs.FS, dir string) error {
	candidates, err := listSnapshots(fs, dir)
	if err != nil || len(candidates) <= snapshotsKept {
		return err
	}
	for _, old := range candidates[snapshotsKept:] {
		if err := fs.Remove(path.Join(dir, old.name)); err != nil {
			return err
		}
	}
	return fs.SyncDir(dir)
}
