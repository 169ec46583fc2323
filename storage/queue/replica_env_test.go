package queue

// pairEnv runs the model harness on a replicated queue of two copies
// (W = 2): the harness drives the owner, and before every step the
// environment ships the owner's written records to a replica, moves the
// replica's frontiers, and sets the owner's apply limit to the quorum
// frontier (the lower of the two copies' progress at the queue's boundary)
// and its retention floor to the replica's durable progress. After every
// step the replica applies what it holds and, whenever it has applied as
// far as the owner, must hold exactly the owner's state. A restart is a
// failover: the owner crashes (or loses power), the replica is promoted
// under a new epoch, and the old owner's directory comes back as the new
// replica, cut back to the new owner's log and caught up. The harness then
// checks what it checks after any restart: nothing confirmed is lost,
// every released delivery comes back redelivered, with its attempt counted
// exactly when its sent mark reached the replica, and (epoch, offset)
// never names two messages.
//
// Each copy's storage is a copyStore: the fake log (every step
// deterministic) or the real log on vfs.Mem, whose power loss keeps only
// what a completed sync covered (and sometimes a torn tail).

import (
	"context"
	"errors"
	"math/rand/v2"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// copyStore is one copy's log and files.
type copyStore interface {
	open(opts Options, clock Clock, start startMode) (*Queue, error)
	frontiers() log.Frontiers
	firstOffset() uint64
	// encoded returns the records [from, to) in the replication encoding.
	encoded(from, to uint64) []byte
	// settle moves the frontiers: some of the way, or (full) until every
	// append is durable.
	settle(q *Queue, full bool)
	// crash closes q as a crash leaves it; powerLoss also drops what no
	// completed sync covered.
	crash(q *Queue, powerLoss bool)
}

type pairEnv struct {
	t        testing.TB
	rng      *rand.Rand
	owner    copyStore
	follower copyStore
	replica  *Queue
	opts     Options
	clock    Clock
	epoch    uint64
	tasks    []*CheckpointTask
	// takeover describes the last failover, for the harness's checks.
	takeover   Recovery
	failovers  int
	compared   int
	replicaRun int
	// published counts replica checkpoints published; fromSnapshot the
	// replica opens that started from one.
	published, fromSnapshot int
	// expiredCounted and releasedUnsent count the leases failovers expired
	// with an attempt counted and released without one.
	expiredCounted, releasedUnsent int
}

func newPairEnv(t testing.TB, rng *rand.Rand, newStore func(*rand.Rand) copyStore) *pairEnv {
	return &pairEnv{t: t, rng: rng, owner: newStore(rng), follower: newStore(rng)}
}

func (e *pairEnv) level() log.Durability {
	if e.opts.Mode == Buffered {
		return log.AfterFlush
	}
	return log.AfterFsync
}

func (e *pairEnv) open(opts Options, clock Clock) (*Queue, error) {
	e.opts, e.clock, e.epoch = opts, clock, 1
	q, err := e.owner.open(opts, clock, startMode{role: roleOwner, epoch: e.epoch, replicated: true})
	if err != nil {
		return nil, err
	}
	if e.replica, err = e.follower.open(opts, clock, startMode{role: roleReplica}); err != nil {
		return nil, err
	}
	return q, nil
}

func (e *pairEnv) flush(q *Queue) { e.owner.settle(q, false) }
func (e *pairEnv) sync(q *Queue)  { e.owner.settle(q, false) }

// boundary is a copy's progress at the queue's boundary.
func (e *pairEnv) boundary(c copyStore) uint64 {
	f := c.frontiers()
	if e.opts.Mode == Buffered {
		return f.Written
	}
	return f.Durable
}

// ship sends the replica some or all of the owner's written records it
// lacks; full sends all and makes the replica's copy reach the boundary.
func (e *pairEnv) ship(h *harness, full bool) {
	from, to := e.follower.frontiers().Staged, e.owner.frontiers().Written
	if from < to && !full {
		to = from + e.rng.Uint64N(to-from+1)
	}
	if from < to {
		if first := e.owner.firstOffset(); from < first {
			h.fail("the owner removed records %d..%d the replica still needs", from, first)
		}
		if err := e.replica.AppendReplicated(from, e.owner.encoded(from, to), e.level(), func(r log.Result) {
			if r.Err != nil {
				h.t.Errorf("replicated append at %d: %v", from, r.Err)
			}
		}); err != nil {
			h.fail("append replicated %d..%d: %v", from, to, err)
		}
	}
	if full || e.rng.IntN(3) != 0 {
		e.follower.settle(e.replica, full)
	}
}

// quorum sets the owner's apply limit and retention floor from both
// copies' progress.
func (e *pairEnv) quorum(h *harness) {
	h.limit = min(e.boundary(e.owner), e.boundary(e.follower))
	h.q.SetApplyLimit(h.limit)
	h.q.SetRetentionFloor(e.follower.frontiers().Durable)
}

// beforeStep replicates and sets the quorum frontier.
func (e *pairEnv) beforeStep(h *harness) {
	if e.rng.IntN(2) == 0 {
		e.ship(h, false)
	}
	e.quorum(h)
}

// afterStep lets the replica apply, run its checkpoints, compact,
// sometimes restart, and compares its state with the owner's.
func (e *pairEnv) afterStep(h *harness) {
	switch roll := e.rng.IntN(20); {
	case roll == 0:
		e.restartReplica(h)
	case roll < 3 && len(e.tasks) > 0:
		task := e.tasks[0]
		e.tasks = e.tasks[1:]
		if err := e.replica.CheckpointDone(task, task.Run(context.Background())); err != nil {
			h.fail("replica checkpoint at %d: %v", task.Next, err)
		}
		e.published++
		// The lowest durable progress across the copies, as on the owner:
		// this copy may have to repair the other after a failover.
		e.replica.SetRetentionFloor(min(e.owner.frontiers().Durable, e.follower.frontiers().Durable))
		if _, err := e.replica.Compact(); err != nil {
			h.fail("replica compact: %v", err)
		}
	}
	progress, err := e.replica.Advance()
	if err != nil {
		h.fail("replica advance: %v", err)
	}
	if len(progress.Confirmed)+len(progress.Deliveries)+len(progress.Lapsed)+len(progress.DeadLetters)+len(progress.Applied) != 0 {
		h.fail("a replica released %+v", progress)
	}
	if progress.Checkpoint != nil {
		e.tasks = append(e.tasks, progress.Checkpoint)
	}
	e.compare(h)
}

var errTaskDropped = errors.New("checkpoint task dropped by a restart")

// compare checks the replica's state against the owner's when both have
// applied the same records.
func (e *pairEnv) compare(h *harness) {
	replicaState, ownerState := e.replica.machine.state, h.q.machine.state
	if err := replicaState.checkInvariants(); err != nil {
		h.fail("replica state: %v", err)
	}
	if replicaState.Next() != ownerState.Next() {
		return
	}
	replicaState.promoteDue(h.nowMs)
	ownerState.promoteDue(h.nowMs)
	if string(replicaState.EncodeSnapshot()) != string(ownerState.EncodeSnapshot()) {
		h.fail("replica state at %d differs from the owner's:\n replica %+v\n owner   %+v",
			ownerState.Next(), replicaState.Counts(), ownerState.Counts())
	}
	e.compared++
}

func (e *pairEnv) dropTasks() {
	for _, task := range e.tasks {
		_ = e.replica.CheckpointDone(task, errTaskDropped)
	}
	e.tasks = nil
}

// restartReplica crashes the replica process and opens it again.
func (e *pairEnv) restartReplica(h *harness) {
	e.dropTasks()
	e.follower.crash(e.replica, false)
	replica, err := e.follower.open(e.opts, e.clock, startMode{role: roleReplica})
	if err != nil {
		h.fail("replica reopen: %v", err)
	}
	e.replica = replica
	e.replicaRun++
	if replica.Recovery().Snapshot != "" {
		e.fromSnapshot++
	}
	h.note("replica restarted at %d", replica.machine.state.Next())
}

// restart is a failover: the owner goes (a crash or a power loss), the
// replica becomes the owner under the next epoch, and the old owner's copy
// comes back as the replica, cut back to the new owner's log.
func (e *pairEnv) restart(q *Queue, opts Options, clock Clock, powerLoss bool, rng *rand.Rand) (*Queue, error) {
	e.dropTasks()
	e.owner.crash(q, powerLoss)
	e.epoch++
	promoted := e.replica
	promotion, err := promoted.Promote(e.epoch)
	if err != nil {
		return nil, err
	}
	e.takeover = Recovery{LogEnd: promotion.LogEnd, ExpiredLeases: promotion.VoidedLeases - promotion.UnsentLeases,
		ReleasedLeases: promotion.UnsentLeases, Epoch: e.epoch}
	e.owner, e.follower = e.follower, e.owner
	replica, err := e.follower.open(e.opts, e.clock, startMode{role: roleReplica})
	if err != nil {
		return nil, err
	}
	if err := replica.TruncateAfter(promotion.LogEnd); err != nil {
		return nil, err
	}
	e.replica = replica
	e.failovers++
	return promoted, nil
}

// afterTakeover catches the new replica up so the quorum frontier passes
// the new owner's lease expiry.
func (e *pairEnv) afterTakeover(h *harness) {
	e.owner.settle(h.q, true)
	e.ship(h, true)
	e.quorum(h)
}

// fakeStore is a copy over the fake log.
type fakeStore struct{ *fakeEnv }

func newFakeStore(rng *rand.Rand) copyStore { return fakeStore{newFakeEnv(rng)} }

func (s fakeStore) open(opts Options, clock Clock, start startMode) (*Queue, error) {
	if err := prepareDirectory(s.fs, testDir, opts); err != nil {
		return nil, err
	}
	return openWithLog(testDir, opts, s.fs, s.log, clock, quietLogger, defaultMaxInflight, start)
}

func (s fakeStore) frontiers() log.Frontiers { return s.log.Frontiers() }
func (s fakeStore) firstOffset() uint64      { return s.log.FirstOffset() }
func (s fakeStore) encoded(from, to uint64) []byte {
	return encodeForTest(s.log.recordsBetween(from, to))
}

func (s fakeStore) settle(q *Queue, full bool) {
	switch {
	case full:
		s.log.flush()
		s.log.sync()
	case s.rng.IntN(2) == 0:
		s.fakeEnv.flush(q)
	default:
		s.fakeEnv.flush(q)
		s.fakeEnv.sync(q)
	}
}

func (s fakeStore) crash(q *Queue, powerLoss bool) {
	if powerLoss {
		s.fakeEnv.fs = s.fakeEnv.fs.CrashClone(vfs.CrashOptions{Rand: s.rng})
		s.fakeEnv.log = s.fakeEnv.log.powerLoss(s.rng)
	} else {
		s.fakeEnv.log = s.fakeEnv.log.processCrash(s.rng)
	}
	_ = q.Close()
}

// memStore is a copy over the real log on vfs.Mem; replicated appends go
// through encodedLog.
type memStore struct {
	rng    *rand.Rand
	fs     *vfs.Mem
	log    *log.Log
	enc    *encodedLog
	notify chan struct{}
}

func newMemStore(rng *rand.Rand) copyStore {
	return &memStore{rng: rng, fs: vfs.NewMem(), notify: make(chan struct{}, 1)}
}

func (s *memStore) open(opts Options, clock Clock, start startMode) (*Queue, error) {
	if err := prepareDirectory(s.fs, testDir, opts); err != nil {
		return nil, err
	}
	l, err := log.Open(path.Join(testDir, logDirName), log.Options{
		FS: s.fs, SegmentBytes: 2048, ExternalTicks: true, Logger: quietLogger, ValidType: validRecordType,
	})
	if err != nil {
		return nil, err
	}
	s.log, s.enc = l, newEncodedLog(l)
	q, err := openWithLog(testDir, opts, s.fs, s.enc, clock, quietLogger, defaultMaxInflight, start)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	q.SetNotify(func() {
		select {
		case s.notify <- struct{}{}:
		default:
		}
	})
	return q, nil
}

// frontiers reports the log's, with staged counting the replicated appends
// the log has not published yet.
func (s *memStore) frontiers() log.Frontiers {
	f := s.log.Frontiers()
	f.Staged = max(f.Staged, s.enc.expectedEnd())
	return f
}
func (s *memStore) firstOffset() uint64 { return s.log.FirstOffset() }

func (s *memStore) encoded(from, to uint64) []byte {
	var records []log.Record
	for next := from; next < to; {
		n, err := s.log.ScanWritten(next, 1<<20, func(r log.Record) error {
			if r.Offset < to {
				r.Body = slices.Clone(r.Body)
				records = append(records, r)
			}
			return nil
		})
		if err != nil || n == next {
			panic("memStore: read for shipping failed")
		}
		next = n
	}
	return encodeForTest(records[:to-from])
}

// written waits until everything the queue appended is written.
func (s *memStore) written(q *Queue) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.log.Frontiers().Written >= max(s.enc.expectedEnd(), q.machine.nextOffset) {
			return
		}
		select {
		case <-s.notify:
		case <-time.After(time.Millisecond):
		}
	}
	panic("memStore: appends not written in 10 s")
}

func (s *memStore) settle(q *Queue, full bool) {
	if full || s.rng.IntN(2) == 0 {
		s.written(q)
	}
	if full || s.rng.IntN(2) == 0 {
		_ = s.log.Sync(context.Background())
	}
}

func (s *memStore) crash(q *Queue, powerLoss bool) {
	s.written(q)
	if powerLoss {
		clone := s.fs.CrashClone(vfs.CrashOptions{Rand: s.rng, TearLastWrite: s.rng.IntN(2) == 0})
		_ = q.Close()
		s.fs = clone
		return
	}
	_ = q.Close()
}
