package actors

// What a partition owes when it stops serving: every publish, purge and
// waiting request it still has is answered, a publish that reached the log
// with outcome_unknown where it may be stored (it may be in the log the
// queue reopens with, or on the copy that takes the queue over), and with
// the failure itself where it is known not to be.

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// refuseOwed answers every publish and purge this instance still owes
// with failure.
func (p *partition) refuseOwed(ctx actor.Context, failure requestFailure) {
	p.refuseOwedAs(ctx, failure, failure)
}

// refuseOwedUnknown is refuseOwed when the queue stays (it restarts, the
// node shuts down, or another node takes it over): a publish that reached
// the log (it has a ticket) gets outcome_unknown with failure's reason,
// since it may or may not be in the log the queue reopens with; the others
// were not stored and get failure itself.
func (p *partition) refuseOwedUnknown(ctx actor.Context, failure requestFailure) {
	p.refuseOwedAs(ctx, outcomeUnknown(failure), failure)
}

func (p *partition) refuseOwedAs(ctx actor.Context, appended, failure requestFailure) {
	p.refuseOwedSplit(ctx, failure, func(queue.Ticket) bool { return appended != failure })
}

// appendedDurableBeforeFence says, for a fenced queue, whether an appended
// publish's records begin below the log's durable frontier, which the
// reopen's cut keeps.
func (p *partition) appendedDurableBeforeFence() func(queue.Ticket) bool {
	if p.q == nil {
		return func(queue.Ticket) bool { return false }
	}
	q, durable := p.q, p.q.Log().Frontiers().Durable
	return func(ticket queue.Ticket) bool {
		first, pending := q.PendingFirst(ticket)
		return !pending || first < durable // not known: it may be stored
	}
}

// refuseOwedSplit is refuseOwedAs with the appended publishes answered
// outcome_unknown where unknown says so, and failure otherwise.
func (p *partition) refuseOwedSplit(ctx actor.Context, failure requestFailure, unknown func(queue.Ticket) bool) {
	for ticket, pending := range p.tickets {
		delete(p.tickets, ticket)
		p.metrics.rejects.Add(pending.count)
		appended := failure
		if unknown(ticket) {
			appended = outcomeUnknown(failure)
		}
		if pending.replyTo != nil {
			ctx.Send(pending.replyTo, publishResult{batchID: pending.batchID, failure: appended})
		} else if batch, ok := p.deadLetterBatches[pending.batchID]; ok {
			delete(p.deadLetterBatches, pending.batchID)
			ctx.Send(batch.source, deadLettersRefused{offsets: batch.offsets, failure: failure})
		}
	}
	for _, batch := range p.busy {
		p.refuseBatch(ctx, batch, failure)
	}
	p.busy = nil
	for _, message := range p.waiting {
		p.refuse(ctx, message, failure)
	}
	p.waiting = nil
	for ticket, purge := range p.purges {
		delete(p.purges, ticket)
		ctx.Send(purge.replyTo, purgeResult{requestID: purge.requestID, failure: failure})
	}
	p.refuseAckSyncs(ctx, failure)
	p.refuseModeWaiters(ctx, failure)
	p.deadline.stop()
}

// outcomeUnknown is the failure of a publish that reached the log and was
// not confirmed, for the reason failure says.
func outcomeUnknown(failure requestFailure) requestFailure {
	if failure.code == wire.CodeOutcomeUnknown {
		return failure
	}
	return requestFailure{code: wire.CodeOutcomeUnknown, message: fmt.Sprintf(
		"%s; this publish had reached the queue's log unconfirmed, so it may or may not have been stored: "+
			"publish again if it must arrive (a copy may then be delivered twice)", failure.message)}
}
