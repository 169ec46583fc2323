package queue

// Replica mode: a copy of a queue partition that applies records another
// copy (the owner) produced. The replica's log receives the owner's
// records byte for byte at the owner's offsets (AppendReplicated), and
// Advance applies them to the same State the owner keeps, reading them back
// from the local log: a replica holds the owner's queue state and can be
// promoted without a replay.
//
// States and transitions:
//
//	OpenReplica ─► replica ──Promote(epoch)──► owner (replicated)
//	                 │  ▲
//	                 └──┘ AppendReplicated, Advance, TruncateAfter, Rebase, InstallSnapshot
//
// Rules:
//   - A replica appends nothing of its own: no restart expiry at open (its
//     leases are the owner's holders'), no epoch of its own, no dead-letter
//     handoffs, no lease expiries. Operations that append return ErrReplica.
//   - Advance applies replicated records up to the apply frontier: the
//     local boundary frontier (the owner's records are appended at the
//     queue's boundary level), capped by SetApplyLimit when the caller
//     supplies the owner's applied frontier.
//   - Checkpoints follow the owner's markers: when a replica applies a
//     checkpoint marker (and none of its own is in progress) it captures its
//     state there and returns a CheckpointTask, which publishes the snapshot
//     only once the local log is durable past it, as on the owner.
//   - TruncateAfter cuts a divergent suffix; when the cut lies below what is
//     applied, the state is rebuilt from the newest snapshot at or below the
//     cut plus a replay (snapshots above the cut are removed first).
//   - Rebase empties the log and restarts it at the owner's first retained
//     offset, for a replica that joins empty or fell behind the owner's
//     retained history. Such a replica (and any replica whose log starts
//     past offset 0 with no usable snapshot) awaits a snapshot: its own
//     replay lacks the history before its first offset, so Promote refuses
//     (ErrSnapshotNeeded) until InstallSnapshot has taken the owner's.
//   - Promote makes the replica the owner under a new epoch: every record
//     in its log is made durable and applied, and every lease in the state
//     is void (the holders belonged to the old owner). Once marks are in
//     force (record.go), a lease that a sent mark shows was sent is
//     expired with its attempt counted, reason restart (D5), and a lease
//     without one, whose delivery never left the old owner, is released
//     with no attempt counted (its message is still flagged redelivered at
//     its next delivery). Before, every lease is expired; the new owner
//     puts marks in force with its first lease (machine.go). All of it is
//     appended under the new epoch. Nothing is released until
//     SetApplyLimit names the quorum frontier.

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/fibrilmq/fibril/storage/log"
)

// OpenReplica opens (or creates) a replica of a queue partition in dir: its
// state is recovered from its own log (snapshot plus replay) and it applies
// only records appended with AppendReplicated. The log must be able to
// append encoded records (ErrNotReplica otherwise). A replica applies at
// its local boundary until SetApplyLimit caps it.
func OpenReplica(dir string, opts Options, logOptions log.Options, clock Clock, options ...OpenOption) (*Queue, error) {
	return open(dir, opts, logOptions, clock, startMode{role: roleReplica}, options)
}

// AppendReplicated appends records the owner's log encoded (whole records,
// offsets first, first+1, ...; first must be the local log's end) at level
// (the queue's boundary: AfterFlush buffered, AfterFsync durable). The log
// checks CRCs, bounds, record types, offset continuity and epoch order and
// refuses anything else with a named error (up front or through done),
// appending nothing of the batch. encoded must stay unchanged until done
// is called. done (may be nil) is called from a log goroutine once level
// is reached or the append failed, before the queue's notify function; the
// records apply at a later Advance. A refused append does not fence the
// replica; a latched log does (at Advance).
func (q *Queue) AppendReplicated(first uint64, encoded []byte, level log.Durability, done func(log.Result)) error {
	if err := q.replica(); err != nil {
		return err
	}
	wake := q.inbox.wake
	err := q.log.(replicaLog).AppendEncodedAsync(encoded, first, level, func(result log.Result) {
		if done != nil {
			done(result)
		}
		wake()
	})
	if err != nil {
		return fmt.Errorf("queue: append replicated records at %d: %w", first, err)
	}
	return nil
}

// replica returns the error a replica operation gets on this queue now.
func (q *Queue) replica() error {
	if err := q.usable(); err != nil {
		return err
	}
	if q.role != roleReplica {
		return ErrNotReplica
	}
	return nil
}

// advanceReplica applies replicated records up to the apply frontier.
func (q *Queue) advanceReplica() (Progress, error) {
	f := q.log.Frontiers()
	if f.Written < q.machine.state.Next() {
		if status := q.log.Status(); status.Latched {
			q.fenceOnLatch(status.LastError)
		} else {
			q.fence(fmt.Errorf("log written frontier %d fell below applied %d", f.Written, q.machine.state.Next()))
		}
		return Progress{}, q.fenced
	}
	var progress Progress
	captured, err := q.applyLogged(q.frontiers(f))
	if err != nil {
		q.fence(err)
		return Progress{}, q.fenced
	}
	if captured != nil {
		progress.Checkpoint = q.checkpointTask(q.machine.checkpointTicket, captured)
	}
	return progress, nil
}

// applyLogged applies the log's records from the state's next offset while
// the rule of mode.go lets them apply below the written and durable
// frontiers given, capturing a snapshot at the first checkpoint marker applied
// while no checkpoint is in progress.
func (q *Queue) applyLogged(written, durable uint64) (*capture, error) {
	m := q.machine
	state := m.state
	var captured *capture
	var rec Record
	var seen *Record // a mode revision the frontiers hold back
	through := max(written, durable)
	for from := state.Next(); from < through; {
		next, err := q.log.ScanWritten(from, scanBudgetBytes, func(r log.Record) error {
			if r.Offset >= through {
				return errStopScan
			}
			if err := decodeRecord(r.Type, r.Body, &rec, false); err != nil {
				return fmt.Errorf("replicated record %d: %w", r.Offset, err)
			}
			if r.Offset >= state.recordLimit(&rec, written, durable) {
				if rec.Kind == KindMode {
					seen = &Record{Kind: KindMode, Mode: rec.Mode, Revision: rec.Revision, UpTo: r.Offset}
				}
				return errStopScan
			}
			state.Apply(r.Offset, &rec, nil)
			if rec.Kind == KindCheckpoint && m.checkpointID == 0 {
				m.checkpointID, m.checkpointTicket = rec.CheckpointID, m.nextTicket
				m.nextTicket++
				captured = &capture{id: rec.CheckpointID, next: r.Offset + 1, firstLive: state.FirstLive(), data: state.EncodeSnapshot()}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return captured, err
		}
		if next == from || errors.Is(err, errStopScan) {
			break
		}
		from = next
	}
	state.handoffs = state.handoffs[:0] // the owner hands off; a replica only tracks the status
	m.nextOffset, m.leaseCursor = state.Next(), state.Next()
	m.resetTail() // a copy that applies another's records has no revision of its own pending
	if seen != nil && seen.Revision > state.modeRevision {
		// Reported as pending (ModeInfo), so the replica's owner can make it
		// durable promptly; it still applies only at the durable frontier.
		m.tailMode, m.tailRevision, m.tailOffset = seen.Mode, seen.Revision, seen.UpTo
	}
	return captured, nil
}

// TruncateAfter removes every replicated record at or after offset (a
// suffix that diverges from the owner's log) and, when some of them were
// applied, rebuilds the state from the newest snapshot at or below offset
// plus a replay. Snapshots covering records past the cut are removed.
// Appends in flight past the cut fail (their done gets the log's error).
// It refuses while a checkpoint is in progress (ErrCheckpointInProgress):
// finish it with CheckpointDone first. It blocks on the log's cut.
func (q *Queue) TruncateAfter(offset uint64) error {
	if err := q.replica(); err != nil {
		return err
	}
	if q.machine.checkpointID != 0 {
		return ErrCheckpointInProgress
	}
	if err := q.log.(replicaLog).TruncateAfter(offset); err != nil {
		if q.log.Status().Latched {
			q.fenceOnLatch(err)
			return q.fenced
		}
		return fmt.Errorf("queue: truncate after %d: %w", offset, err)
	}
	if offset >= q.machine.state.Next() {
		return nil
	}
	if err := removeSnapshotsAbove(q, offset); err != nil {
		q.fence(fmt.Errorf("remove snapshots past a cut: %w", err))
		return q.fenced
	}
	if err := q.rebuildReplica(); err != nil {
		q.fence(err)
		return q.fenced
	}
	return nil
}

// removeSnapshotsAbove removes snapshots covering records at or past offset.
func removeSnapshotsAbove(q *Queue, offset uint64) error {
	candidates, err := listSnapshots(q.fs, q.dir)
	if err != nil {
		return err
	}
	removed := false
	for _, c := range candidates {
		if c.next > offset {
			if err := q.fs.Remove(path.Join(q.dir, c.name)); err != nil {
				return err
			}
			removed = true
		}
	}
	if q.checkpointNext > offset {
		q.checkpointNext, q.checkpointLive = 0, 0
	}
	if !removed {
		return nil
	}
	return q.fs.SyncDir(q.dir)
}

// rebuildReplica recovers the state from the snapshots and the log, as
// OpenReplica does.
func (q *Queue) rebuildReplica() error {
	candidates, err := listSnapshots(q.fs, q.dir)
	if err != nil {
		return fmt.Errorf("queue: list snapshots: %w", err)
	}
	state, report, err := rebuild(q.opts, candidates, logSource{q.log})
	if err != nil {
		return fmt.Errorf("queue: replay: %w", err)
	}
	if next, ok := parseSnapshotName(report.snapshot); ok && next > q.checkpointNext {
		q.checkpointNext, q.checkpointLive = next, report.snapshotLive
	}
	if staged := q.log.Frontiers().Staged; staged != state.Next() {
		return fmt.Errorf("%w: log ends at %d after the cut, replay at %d", ErrLogContract, staged, state.Next())
	}
	q.awaitingSnapshot = report.snapshot == "" && q.log.FirstOffset() > 0
	state.handoffs = state.handoffs[:0]
	inflight := q.machine.maxInflight
	q.machine = newMachine(state)
	q.machine.maxInflight = inflight
	return nil
}

// Rebase empties the replica's log and restarts it at base, with the
// owner's epoch history below base (the log's Rebase), removes every
// snapshot (their markers are gone) and starts over from an empty state:
// the way in for a replica that joins empty, or fell behind, the owner's
// retained history (base is then the owner's first offset). The replica
// awaits a snapshot: AppendReplicated from base on, then InstallSnapshot
// with the owner's (LatestSnapshot). It refuses while a checkpoint is in
// progress (ErrCheckpointInProgress). It blocks on the log's rebase.
func (q *Queue) Rebase(base uint64, epochs []log.EpochStart) error {
	if err := q.replica(); err != nil {
		return err
	}
	if q.machine.checkpointID != 0 {
		return ErrCheckpointInProgress
	}
	if err := q.log.(replicaLog).Rebase(base, epochs); err != nil {
		if q.log.Status().Latched {
			q.fenceOnLatch(err)
			return q.fenced
		}
		return fmt.Errorf("queue: rebase at %d: %w", base, err)
	}
	if err := removeSnapshotsAbove(q, 0); err != nil {
		q.fence(fmt.Errorf("remove snapshots at a rebase: %w", err))
		return q.fenced
	}
	inflight := q.machine.maxInflight
	q.machine = newMachine(NewState(q.opts, base))
	q.machine.maxInflight = inflight
	q.awaitingSnapshot = base > 0
	return nil
}

// InstallSnapshot replaces a replica's state with the owner's snapshot
// (from LatestSnapshot) and replays the local log after it up to what was
// applied: the way in for a replica whose log starts past the owner's
// retained history (it joined empty at the owner's first offset, or fell
// behind it), whose own replay lacks the history before its first offset.
// The local log must hold the snapshot's checkpoint marker durably and every
// record from the snapshot's lowest live message on (ErrSnapshotStale);
// the snapshot is stored as this copy's own, durably, before it is used.
func (q *Queue) InstallSnapshot(data []byte) error {
	if err := q.replica(); err != nil {
		return err
	}
	if q.machine.checkpointID != 0 {
		return ErrCheckpointInProgress
	}
	next := snapshotNext(data)
	candidate := snapshotCandidate{name: snapshotName(next), next: next, load: func() ([]byte, error) { return data, nil }}
	src := logSource{q.log}
	s, err := loadCandidate(q.opts, candidate, src)
	if err != nil {
		return err
	}
	if live := s.FirstLive(); live < src.firstOffset() {
		return fmt.Errorf("%w: live message %d lies below the log's first offset %d", ErrSnapshotStale, live, src.firstOffset())
	}
	if err := writeFileAtomic(q.fs, q.dir, candidate.name, data); err != nil {
		return fmt.Errorf("queue: store installed snapshot: %w", err)
	}
	applied := q.machine.state.Next()
	q.machine.state = s
	q.checkpointNext, q.checkpointLive = next, s.FirstLive()
	q.awaitingSnapshot = false
	if _, err := q.applyLogged(applied, applied); err != nil {
		q.fence(err)
		return q.fenced
	}
	q.machine.finishCheckpoint() // a marker met by the catch-up replay captures nothing
	return nil
}

// snapshotNext reads the offset a snapshot covers without verifying it
// (loadCandidate verifies everything).
func snapshotNext(data []byte) uint64 {
	header := 5
	if len(data) > 4 && data[4] == snapshotVersionMarks {
		header++ // the sections byte
	}
	if len(data) < header {
		return 0
	}
	r := reader{buf: data[header:]}
	return r.uvarint()
}

// LatestSnapshot returns the newest published snapshot of this copy and
// the offset it covers (every record below it), for a replica that needs
// InstallSnapshot; ok is false when none is published.
func (q *Queue) LatestSnapshot() (next uint64, data []byte, ok bool, err error) {
	if err := q.usable(); err != nil {
		return 0, nil, false, err
	}
	if q.checkpointNext == 0 {
		return 0, nil, false, nil
	}
	data, exists, err := readFile(q.fs, path.Join(q.dir, snapshotName(q.checkpointNext)))
	if err != nil || !exists {
		return 0, nil, false, err
	}
	return q.checkpointNext, data, true, nil
}

// Promotion reports what Promote did.
type Promotion struct {
	// LogEnd is the end of the log the new owner took over; every record
	// below it is durable and applied.
	LogEnd uint64
	// VoidedLeases is the number of leases the old owner's holders held.
	VoidedLeases int
	// UnsentLeases is how many of them no sent mark shows were sent: a
	// release returns those without an attempt counted; an expiry (reason
	// restart) returns the others with one.
	UnsentLeases int
	// Ticket is the ticket of the last append Promote made (the release
	// when there is one), 0 when there was no lease.
	Ticket Ticket
}

// Promote makes a replica the owner under epoch, the cluster's new
// coordination epoch (above every epoch in the log and every epoch this
// copy stored, ErrEpochStale otherwise). It makes every record in the log
// durable and applies it, stores the epoch durably, and appends under the
// new epoch the end of every lease the state holds (machine.restartExpiry:
// the expiry of those a sent mark shows were sent, the release of the
// others, once marks are in force). From then on the
// queue is a replicated owner: nothing is released until SetApplyLimit
// names the quorum frontier (the apply limit starts at 0). It blocks on a
// sync and a small file write. A replica that joined past the owner's
// retained history must InstallSnapshot first.
func (q *Queue) Promote(epoch uint64) (Promotion, error) {
	if err := q.replica(); err != nil {
		return Promotion{}, err
	}
	if epoch == 0 {
		return Promotion{}, fmt.Errorf("%w: epoch 0", ErrEpochStale)
	}
	if q.awaitingSnapshot {
		return Promotion{}, fmt.Errorf("%w: the log starts at %d", ErrSnapshotNeeded, q.log.FirstOffset())
	}
	stored, exists, readErr := storedEpoch(q)
	if _, _, err := chooseEpoch(epoch, stored, exists, readErr, newestLogEpoch(q.log)); err != nil {
		return Promotion{}, err
	}
	if err := q.log.Sync(context.Background()); err != nil {
		q.fence(fmt.Errorf("sync at promotion: %w", err))
		return Promotion{}, q.fenced
	}
	f := q.log.Frontiers()
	if _, err := q.applyLogged(f.Durable, f.Durable); err != nil {
		q.fence(err)
		return Promotion{}, q.fenced
	}
	state := q.machine.state
	if state.Next() != f.Staged {
		return Promotion{}, fmt.Errorf("%w: log ends at %d, applied %d at promotion", ErrLogContract, f.Staged, state.Next())
	}
	if err := q.beginEpoch(epoch); err != nil {
		return Promotion{}, err
	}
	q.role, q.replicated, q.applyLimit, q.durableLimit = roleOwner, true, 0, 0
	q.machine.marksDeliveries = q.opts.MaxDeliveries > 0
	state.rebuildHandoffs()
	promotion := Promotion{LogEnd: state.Next()}
	group, entries := q.machine.restartExpiry(true)
	if len(group) == 0 {
		return promotion, nil
	}
	expired, released := restartCounts(group)
	promotion.VoidedLeases, promotion.UnsentLeases = expired+released, released
	promotion.Ticket = group[len(group)-1].ticket
	if err := q.submit(group, entries); err != nil {
		return Promotion{}, err
	}
	return promotion, nil
}
