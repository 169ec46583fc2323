package actors

// Message size rule (docs/protocol.md, "Message size"). Every frame body
// stays within its receiver's max_body_bytes, deliveries included:
//
//   - Publish: the node accepts a message only if one delivery of it fits a
//     deliver body within the node's own max body, counting what the node
//     may add on the way (an assigned message id, the two headers of a
//     dead-lettered copy). A larger one is negatively confirmed with
//     invalid_request and not stored.
//   - Deliver: deliveries are packed into frames within the subscribing
//     client's limit (partition_consume.go); a single message over it ends
//     that subscription with a subscription-ended frame and is released for
//     other consumers. It is never sent whole, and never split.

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// assignedIDMaxBytes bounds a message id the queue assigns: the hex
// incarnation (16 digits), '-', a decimal sequence (20 digits).
const assignedIDMaxBytes = 16 + 1 + 20

// deadLetterHeadersMaxBytes bounds the headers a dead-lettered copy adds:
// the source queue's name and the attempt count.
var deadLetterHeadersMaxBytes = wire.HeaderFieldBytes(len(headerDeadLetterSource), maxQueueNameBytes) +
	wire.HeaderFieldBytes(len(headerDeadLetterAttempts), len("4294967295"))

// acceptedDeliverBodyBytes is the deliver body one delivery of m can need:
// the message as published plus what the node may add to it.
func acceptedDeliverBodyBytes(m *queue.Message) int {
	size := wire.DeliverHeadBytes + wire.DeliveryFixedBytes + max(len(m.ID), assignedIDMaxBytes) +
		len(m.Payload) + deadLetterHeadersMaxBytes
	for _, header := range m.Headers {
		size += wire.HeaderFieldBytes(len(header.Key), len(header.Value))
	}
	return size
}

// withoutOversized negatively confirms the messages of a publish that the
// node could not deliver within its own max body, and returns the rest.
func (s *session) withoutOversized(msg inPublish) inPublish {
	limit := int(s.core.config.MaxBodyBytes)
	kept := 0
	for i := range msg.messages {
		m := &msg.messages[i]
		if size := acceptedDeliverBodyBytes(m); size > limit {
			msg.bytes -= len(m.Payload)
			msg.credit.messages--
			s.conn.returnCredit(publishCredit{messages: 1})
			s.push(&wire.NegativeConfirm{Ranges: rejectRanges(nil, msg.seqs[i:i+1], requestFailure{code: wire.CodeInvalidRequest, message: fmt.Sprintf(
				"message of %d payload bytes refused: delivering it can take a deliver body of %d bytes, over the "+
					"node's max_body_bytes of %d (the node reserves room for an assigned id and dead-letter headers)",
				len(m.Payload), size, limit)})})
			continue
		}
		msg.seqs[kept], msg.messages[kept] = msg.seqs[i], msg.messages[i]
		kept++
	}
	clear(msg.messages[kept:])
	msg.seqs, msg.messages = msg.seqs[:kept], msg.messages[:kept]
	if kept == 0 {
		s.conn.returnCredit(msg.credit) // the body's bytes: no message of it is left
		msg.credit = publishCredit{}
	}
	return msg
}

// endOversized ends a subscription that met a message its client cannot
// receive: the session is told (a subscription-ended frame), what the
// subscription held is released, and the caller releases the message.
func (p *partition) endOversized(ctx actor.Context, sub *subscription, offset uint64, bodyBytes int) {
	ctx.Send(sub.session, subscriptionEnded{subscriptionID: sub.id, failure: requestFailure{
		code: wire.CodeInvalidRequest, message: fmt.Sprintf(
			"the message at offset %d needs a deliver body of %d bytes, over the max_body_bytes of %d this "+
				"client accepts; it stays in queue %q for consumers that accept it",
			offset, bodyBytes, sub.clientMaxBodyBytes, p.home.name)}})
	p.dropSubscription(ctx, sub)
}
