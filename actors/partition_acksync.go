package actors

// Ack-sync (FAK2): an ack the node answers once it has applied. The path
// is the plain ack's with two differences:
//
//   - all or nothing: when the subscription does not hold every tag (a
//     lease expired, a tag was settled already), no tag is acked and the
//     session answers FER1 unknown_delivery_tag with the request id;
//   - the answer waits for the ack's record: the ticket q.Ack returns is
//     kept in ackSyncs until Advance lists it as applied (at the queue's
//     boundary: fsynced for a durable queue, written for a buffered one),
//     and only then does the session send FOK1 with count = tags acked.
//
// Messages: settleRequest with requestID != 0 in; ackSyncApplied or
// settleFailed (with the request id) out, to the session.
//
// Invariant: every entry of ackSyncs is answered exactly once, by
// answerAckSyncs when its ticket applies or by refuseAckSyncs when the
// partition stops owing it (fenced, stopped, restarted).

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// pendingAckSync is an ack-sync whose record is appended, not yet applied.
type pendingAckSync struct {
	replyTo   *actor.PID
	requestID uint64
	count     int
}

// ackSyncApplied tells the session an ack-sync applied: answer FOK1.
type ackSyncApplied struct {
	requestID uint64
	count     uint64
}

// decodeAckSync turns an FAK2 frame into the session's settle message.
func decodeAckSync(body []byte) (any, error) {
	frame := new(wire.AckSync)
	if err := frame.Decode(body); err != nil {
		return nil, err
	}
	return inSettle{kind: settleAck, subscriptionID: frame.SubscriptionID, tags: frame.DeliveryTags,
		requestID: frame.RequestID}, nil
}

// ackSync acks every tag of msg, or none, and answers once applied.
func (p *partition) ackSync(ctx actor.Context, msg settleRequest) {
	refuse := func(failure requestFailure) {
		ctx.Send(msg.replyTo, settleFailed{requestID: msg.requestID, subscriptionID: msg.subscriptionID,
			tags: msg.tags, failure: failure})
	}
	if p.state == partitionFenced {
		refuse(p.fencedFailure())
		return
	}
	sub, ok := p.home.subscribers.byID[msg.subscriptionID]
	if !ok {
		refuse(requestFailure{code: wire.CodeUnknownSubscription,
			message: fmt.Sprintf("subscription %d is not on queue %q", msg.subscriptionID, p.home.name)})
		return
	}
	var unknown []uint64
	for _, tag := range msg.tags {
		if _, held := sub.held[tag]; !held {
			unknown = append(unknown, tag)
		}
	}
	if len(unknown) > 0 {
		refuse(requestFailure{code: wire.CodeUnknownDeliveryTag, message: fmt.Sprintf(
			"ack-sync: subscription %d does not hold delivery tags %v (the lease expired, or it was settled "+
				"already); none of the %d tags was acked", msg.subscriptionID, clipTags(unknown), len(msg.tags))})
		return
	}
	offsets := make([]uint64, 0, len(msg.tags))
	for _, tag := range msg.tags {
		offsets = append(offsets, sub.held[tag].offset)
		delete(sub.held, tag)
	}
	ticket, err := p.q.Ack(sub.id, offsets)
	if err != nil {
		refuse(p.failureOf(err))
		p.maybeFence(ctx, err)
		return
	}
	p.metrics.settle(settleAck, len(offsets))
	if p.ackSyncs == nil {
		p.ackSyncs = make(map[queue.Ticket]pendingAckSync)
	}
	p.ackSyncs[ticket] = pendingAckSync{replyTo: msg.replyTo, requestID: msg.requestID, count: len(offsets)}
	p.dispatch(ctx)
}

// answerAckSyncs answers the ack-syncs whose record applied.
func (p *partition) answerAckSyncs(ctx actor.Context, applied []queue.Ticket) {
	if len(p.ackSyncs) == 0 {
		return
	}
	for _, ticket := range applied {
		if pending, ok := p.ackSyncs[ticket]; ok {
			delete(p.ackSyncs, ticket)
			ctx.Send(pending.replyTo, ackSyncApplied{requestID: pending.requestID, count: uint64(pending.count)})
		}
	}
}

// refuseAckSyncs answers every ack-sync still owed with failure. Whether
// such an ack reached the log is unknown to the client, as for a publish
// refused the same way.
func (p *partition) refuseAckSyncs(ctx actor.Context, failure requestFailure) {
	for ticket, pending := range p.ackSyncs {
		delete(p.ackSyncs, ticket)
		ctx.Send(pending.replyTo, settleFailed{requestID: pending.requestID, failure: failure})
	}
}
