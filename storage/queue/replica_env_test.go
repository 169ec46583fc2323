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
// every released delivery comes back redelivered with its attempt counted,
// and (epoch, offset) never names two messages.

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

type pairEnv struct {
	t        testing.TB
	rng      *rand.Rand
	owner    *fakeEnv
	follower *fakeEnv
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
}

func newPairEnv(t testing.TB, rng *rand.Rand) *pairEnv {
	return &pairEnv{t: t, rng: rng, owner: newFakeEnv(rng), follower: newFakeEnv(rng)}
}

func (e *pairEnv) level() log.Durability {
	if e.opts.Mode == Buffered {
		return log.AfterFlush
	}
	return log.AfterFsync
}

func (e *pairEnv) open(opts Options, clock Clock) (*Queue, error) {
	e.opts, e.clock, e.epoch = opts, clock, 1
	q, err := e.openOwner(e.owner)
	if err != nil {
		return nil, err
	}
	if e.replica, err = e.openReplica(e.follower); err != nil {
		return nil, err
	}
	return q, nil
}

func (e *pairEnv) openOwner(env *fakeEnv) (*Queue, error) {
	if err := prepareDirectory(env.fs, testDir, e.opts); err != nil {
		return nil, err
	}
	return openWithLog(testDir, e.opts, env.fs, env.log, e.clock, quietLogger, defaultMaxInflight,
		startMode{role: roleOwner, epoch: e.epoch, replicated: true})
}

func (e *pairEnv) openReplica(env *fakeEnv) (*Queue, error) {
	if err := prepareDirectory(env.fs, testDir, e.opts); err != nil {
		return nil, err
	}
	return openWithLog(testDir, e.opts, env.fs, env.log, e.clock, quietLogger, defaultMaxInflight, startMode{role: roleReplica})
}

func (e *pairEnv) flush(q *Queue) { e.owner.flush(q) }
func (e *pairEnv) sync(q *Queue)  { e.owner.sync(q) }

// boundary is a copy's progress at the queue's boundary.
func (e *pairEnv) boundary(l *fakeLog) uint64 {
	f := l.Frontiers()
	if e.opts.Mode == Buffered {
		return f.Written
	}
	return f.Durable
}

// ship sends the replica some or all of the owner's written records it
// lacks; full sends all and makes the replica's copy reach the boundary.
func (e *pairEnv) ship(h *harness, full bool) {
	from, to := e.follower.log.Frontiers().Staged, e.owner.log.Frontiers().Written
	if from < to && !full {
		to = from + e.rng.Uint64N(to-from+1)
	}
	if from < to {
		if first := e.owner.log.FirstOffset(); from < first {
			h.fail("the owner removed records %d..%d the replica still needs", from, first)
		}
		encoded := encodeForTest(e.owner.log.recordsBetween(from, to))
		if err := e.replica.AppendReplicated(from, encoded, e.level(), func(r log.Result) {
			if r.Err != nil {
				h.t.Errorf("replicated append at %d: %v", from, r.Err)
			}
		}); err != nil {
			h.fail("append replicated %d..%d: %v", from, to, err)
		}
	}
	if full {
		e.follower.log.flush()
		e.follower.log.sync()
		return
	}
	switch e.rng.IntN(3) {
	case 0:
		e.follower.flush(e.replica)
	case 1:
		e.follower.flush(e.replica)
		e.follower.sync(e.replica)
	}
}

// quorum sets the owner's apply limit and retention floor from both
// copies' progress.
func (e *pairEnv) quorum(h *harness) {
	h.limit = min(e.boundary(e.owner.log), e.boundary(e.follower.log))
	h.q.SetApplyLimit(h.limit)
	h.q.SetRetentionFloor(e.follower.log.Frontiers().Durable)
}

// beforeStep replicates and sets the quorum frontier.
func (e *pairEnv) beforeStep(h *harness) {
	if e.rng.IntN(2) == 0 {
		e.ship(h, false)
	}
	e.quorum(h)
}

// afterStep lets the replica apply, run or drop its checkpoints, compact,
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
		e.replica.SetRetentionFloor(min(e.owner.log.Frontiers().Durable, e.follower.log.Frontiers().Durable))
		if _, err := e.replica.Compact(); err != nil {
			h.fail("replica compact: %v", err)
		}
	}
	progress, err := e.replica.Advance()
	if err != nil {
		h.fail("replica advance: %v", err)
	}
	if len(progress.Confirmed)+len(progress.Deliveries)+len(progress.DeadLetters)+len(progress.Applied) != 0 {
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

// restartReplica crashes the replica process and opens it again.
func (e *pairEnv) restartReplica(h *harness) {
	for _, task := range e.tasks {
		_ = e.replica.CheckpointDone(task, errTaskDropped)
	}
	e.tasks = nil
	_ = e.replica.Close()
	e.follower.log = e.follower.log.processCrash(e.rng)
	replica, err := e.openReplica(e.follower)
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
	for _, task := range e.tasks {
		_ = e.replica.CheckpointDone(task, errTaskDropped)
	}
	e.tasks = nil
	if powerLoss {
		e.owner.fs = e.owner.fs.CrashClone(vfs.CrashOptions{Rand: rng})
		e.owner.log = e.owner.log.powerLoss(rng)
	} else {
		e.owner.log = e.owner.log.processCrash(rng)
	}
	_ = q.Close()
	e.epoch++
	promoted := e.replica
	promotion, err := promoted.Promote(e.epoch)
	if err != nil {
		return nil, err
	}
	e.takeover = Recovery{LogEnd: promotion.LogEnd, ExpiredLeases: promotion.VoidedLeases, Epoch: e.epoch}
	e.owner, e.follower = e.follower, e.owner
	replica, err := e.openReplica(e.follower)
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
	e.owner.log.flush()
	e.owner.log.sync()
	e.ship(h, true)
	e.quorum(h)
}
