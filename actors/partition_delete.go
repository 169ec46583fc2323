package actors

// The delete of a partition's queue. The manager tells the partition with
// a user message (deleteQueue), not with a stop: the library's stop is a
// system message and would overtake the requests a client sent the
// partition before its delete, which must take effect first
// (docs/protocol.md 4.2). So the partition handles the delete in order:
// from then on it refuses new publishes, subscribes, settles and purges as
// unknown_queue; it finishes the publishes and purges it took before (they
// are confirmed as usual: they took effect, then the queue was deleted with
// them, as a broker that confirms a message routed to a queue deleted
// later does); then it stops itself with runtime.StopDelete. deleteDrainTimeout
// bounds the wait: a log that does not complete stops the partition
// anyway, and what it still owes is refused.
//
// The manager removes the files once the partition actor terminated and
// its queue is closed (queues.go, maybeRemoveFiles).

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

// deleteDrainTimeout bounds how long a deleted partition waits for the
// appends it took before the delete.
const deleteDrainTimeout = 10 * time.Second

type (
	// deleteQueue tells a partition its queue is deleted.
	deleteQueue struct{}
	// deleteCounted tells the manager what the delete removes; it reaches
	// the manager before the removal of the files is answered (it is sent
	// before the partition stops, and the removal waits for its close).
	deleteCounted struct {
		name    string
		removed uint64
	}
	// deleteDrainExpired is the partition's own timer.
	deleteDrainExpired struct{}
)

func (p *partition) beginDelete(ctx actor.Context) {
	if p.deleting {
		return
	}
	p.deleting = true
	self, system := ctx.Self(), ctx.ActorSystem()
	p.deleteTimer = time.AfterFunc(deleteDrainTimeout, func() { system.Root.Send(self, deleteDrainExpired{}) })
	p.maybeStopDeleted(ctx)
}

// maybeStopDeleted stops a deleted partition once it owes nothing.
func (p *partition) maybeStopDeleted(ctx actor.Context) {
	if p.deleting && len(p.tickets) == 0 && len(p.busy) == 0 && len(p.purges) == 0 {
		p.stopDeleted(ctx)
	}
}

// stopDeleted tells the manager what the delete removes (the publishes
// taken before it included) and stops the partition.
func (p *partition) stopDeleted(ctx actor.Context) {
	var removed uint64
	if p.q != nil {
		counts := p.q.Info().Counts
		removed = counts.Ready + counts.Leased + counts.Delayed + counts.DeadLettering
	}
	ctx.Send(p.home.manager, deleteCounted{name: p.home.name, removed: removed})
	p.core.registry.StopActor(ctx, ctx.Self(), runtime.StopDelete)
}

// refuseWhileDeleting refuses the requests a deleted partition no longer
// takes, and reports whether it did.
func (p *partition) refuseWhileDeleting(ctx actor.Context, message any) bool {
	switch message.(type) {
	case publishBatch, subscribeRequest, purgeRequest, deadLetterPublish, settleRequest, syncRequest:
		p.refuse(ctx, message, requestFailure{code: wire.CodeUnknownQueue,
			message: fmt.Sprintf("queue %q was deleted", p.home.name)})
		return true
	}
	return false
}
