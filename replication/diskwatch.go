package replication

// An owner judged by its progress, not by its keepalives. A follower link
// pushes keepalives from the owner's node whatever the owner's disk does,
// so a disk that stops answering without failing (a write or an fsync
// that never returns: a hung controller, a stuck network volume) leaves
// an owner that every follower hears and nobody replaces, while no
// publish of its queue confirms. DiskWatch is the owner's own check: it
// watches its log's frontiers and says when work has waited on the disk
// for DiskStallAfter with no frontier of the queue's boundary moving. The
// owner then steps down as a copy whose disk failed does (roles.go), so a
// healthy copy takes the partition over.
//
// What counts as work waiting, and as progress:
//
//   - writes: appends handed to the log and not yet done, or records
//     staged and not yet written (Staged > Written); any move of Written
//     or Durable is progress. This holds for every queue: nothing is
//     confirmed, pushed or delivered past a write that hangs.
//   - syncs, for a queue whose boundary is durable: a sync in flight with
//     records written past Durable; any move of Durable is progress. A
//     buffered queue confirms at the written frontier, so a slow sync of
//     its background flush holds back nothing it promised and is not a
//     stall (a hung sync stops its writes soon after, and that is).
//
// Invariant: Durable <= Written <= Staged (storage/log's frontiers).

import "time"

// DiskStallAfter is how long work may wait on an owner's disk with no
// progress before the owner steps down. It is longer than any fsync of a
// healthy disk under load measured here (tens of milliseconds, a few
// hundred at worst on a busy shared machine) and shorter than the time
// after which health calls the queue stuck (5 s), so the handover comes
// before the alarm.
const DiskStallAfter = 3 * time.Second

// DiskProgress is what an owner's log shows of itself at one moment.
type DiskProgress struct {
	Staged, Written, Durable uint64
	// AppendsPending says appends (or syncs) were handed to the log and
	// their completion has not come back.
	AppendsPending bool
	// SyncInFlight says a sync was submitted and has not returned.
	SyncInFlight bool
	// DurableBoundary says the queue confirms at the durable frontier.
	DurableBoundary bool
}

// DiskHealth is DiskWatch's verdict: whether work waits on the disk, and
// for how long none of it progressed.
type DiskHealth struct {
	Waiting    bool
	StalledFor time.Duration
}

// Stalled says the owner must step down.
func (h DiskHealth) Stalled(after time.Duration) bool { return h.Waiting && h.StalledFor >= after }

// DiskWatch remembers the last frontiers it saw and, for writes and for
// syncs apart, since when the work waiting has made no progress. The zero
// value is ready.
type DiskWatch struct {
	observed         bool
	written, durable uint64
	writesStuckSince time.Time // zero while no write waits or Written moves
	syncsStuckSince  time.Time // zero while no sync waits or Durable moves
}

// Observe takes the log's progress now and returns the verdict.
func (w *DiskWatch) Observe(progress DiskProgress, now time.Time) DiskHealth {
	if progress.Durable > progress.Written || progress.Written > progress.Staged {
		panic("replication: disk progress breaks durable <= written <= staged")
	}
	writesWait := progress.AppendsPending || progress.Staged > progress.Written
	syncWaits := progress.DurableBoundary && progress.SyncInFlight && progress.Written > progress.Durable
	writtenMoved := !w.observed || progress.Written != w.written
	durableMoved := !w.observed || progress.Durable != w.durable
	w.observed, w.written, w.durable = true, progress.Written, progress.Durable
	w.writesStuckSince = stuckSince(w.writesStuckSince, writesWait && !writtenMoved && !durableMoved, now)
	w.syncsStuckSince = stuckSince(w.syncsStuckSince, syncWaits && !durableMoved, now)
	health := DiskHealth{Waiting: writesWait || syncWaits}
	for _, since := range []time.Time{w.writesStuckSince, w.syncsStuckSince} {
		if !since.IsZero() {
			health.StalledFor = max(health.StalledFor, now.Sub(since))
		}
	}
	return health
}

// stuckSince keeps since while work stays stuck, starts it now when work
// first shows stuck, and clears it when the work moved or none waits.
func stuckSince(since time.Time, stuck bool, now time.Time) time.Time {
	switch {
	case !stuck:
		return time.Time{}
	case since.IsZero():
		return now
	}
	return since
}

// Reset forgets what the watch saw, as when the copy stops owning.
func (w *DiskWatch) Reset() { *w = DiskWatch{} }
