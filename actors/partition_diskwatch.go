package actors

// An owner watches its own disk (the rule is replication.DiskWatch,
// replication/diskwatch.go): a follower link's keepalives come from this
// node whatever its disk does, so an owner whose write or fsync stopped
// returning would be heard by every follower, replaced by none, and
// confirm nothing. Every diskCheckInterval the owner of a cluster
// partition hands its log's frontiers to the watch; once work has waited
// Config.OwnerDiskStallAfter with no progress, it fences its copy with
// errDiskStalled, which steps it down and hands the partition on as a copy
// whose disk failed does (partition_handover.go).
//
// A copy fenced this way keeps looking: the log did not latch (no call
// failed, and nothing it holds is known bad), so once its disk answers
// again (no write waits and no sync is in flight) the copy reopens itself
// as the operator's reopen would (reopen.go) and comes back as a replica
// of whoever owns the partition now, which cuts what it appended and
// never confirmed.
//
// States: owner (the timer runs, the watch observes); fenced after a
// stall (the timer runs, looking for the disk's return); any other (the
// timer stops and the watch forgets).
//
// Takes: diskCheck (its own timer, handled in every partition state).
// Sends: nothing of its own (becomeFenced and reopen send theirs).

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/storage/queue"
)

// diskCheckInterval is how often an owner looks at its own log's progress.
const diskCheckInterval = 250 * time.Millisecond

// errDiskStalled is the cause of a fence after an owner's disk stopped
// answering.
var errDiskStalled = errors.New("the queue's disk stopped answering")

// diskCheck is the owner's disk-watch timer.
type diskCheck struct{}

// maybeArmDiskCheck starts the timer when it does not run.
func (p *partition) maybeArmDiskCheck(ctx actor.Context) {
	r := p.repl
	if r == nil || r.diskCheckArmed {
		return
	}
	r.diskCheckArmed = true
	self, system := ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(diskCheckInterval, func() { system.Root.Send(self, diskCheck{}) })
}

// checkDisk runs on the timer: see the file comment.
func (p *partition) checkDisk(ctx actor.Context) {
	r := p.repl
	if r == nil {
		return
	}
	r.diskCheckArmed = false
	switch {
	case p.state == partitionOpen && r.role == roleOwner && p.q != nil:
		health := r.diskWatch.Observe(p.diskProgress(), p.core.now())
		if health.Stalled(p.core.config.OwnerDiskStallAfter) {
			p.becomeStallFenced(ctx, health)
		}
	case p.state == partitionFenced && r.stallFenced && p.q != nil:
		if progress := p.diskProgress(); !progress.AppendsPending && progress.Staged == progress.Written && !progress.SyncInFlight {
			p.core.logger.Warn("the disk of a copy fenced after a stall answers again; it reopens as a replica",
				"queue", p.home.name)
			r.stallFenced = false
			r.diskWatch.Reset()
			p.reopen(ctx)
			return
		}
	default:
		r.diskWatch.Reset()
		return
	}
	p.maybeArmDiskCheck(ctx)
}

// becomeStallFenced fences an owner whose disk stalled.
func (p *partition) becomeStallFenced(ctx actor.Context, health replication.DiskHealth) {
	progress := p.diskProgress()
	cause := fmt.Errorf("%w: no progress for %v (written %d, durable %d, appends waiting %v, sync in flight %v)",
		errDiskStalled, health.StalledFor.Round(time.Millisecond), progress.Written, progress.Durable,
		progress.AppendsPending, progress.SyncInFlight)
	p.repl.stallFenced = true
	p.becomeFenced(ctx, cause)
}

// diskProgress is what the watch sees of this copy's log.
func (p *partition) diskProgress() replication.DiskProgress {
	status := p.q.Log().Status()
	f := status.Frontiers
	return replication.DiskProgress{Staged: f.Staged, Written: f.Written, Durable: f.Durable,
		AppendsPending: p.handle != nil && p.handle.AppendsPending(), SyncInFlight: status.SyncPending,
		DurableBoundary: p.appliedMode() != queue.Buffered}
}
