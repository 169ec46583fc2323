package actors

// The session's hot paths: publishes out to partitions and their answers
// back as confirm frames; deliveries in from partitions and settles out.

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/wire"
)

// deliverFrameSlackBytes is added to the node's body limit for frames the
// node writes: a deliver frame carries a message as large as the largest
// publish body plus its delivery fields.
const deliverFrameSlackBytes = 64 << 10

func (s *session) publish(ctx actor.Context, msg inPublish) {
	if err := ValidateQueueName(msg.queue); err != nil {
		s.rejectPublish(msg, requestFailure{code: wire.CodeInvalidName, message: err.Error()})
		return
	}
	if s.core.config.Users != nil {
		if failure, ok := s.checkAccess(access.Publish, msg.queue); !ok {
			s.rejectPublish(msg, failure) // a revoked session is closing: the refusal is dropped
			return
		}
	}
	if failure, fenced := s.fences.refusing(msg.queue); fenced {
		s.refuseFenced(msg, failure)
		return
	}
	if msg = s.withoutOversized(msg); len(msg.seqs) == 0 {
		return
	}
	if s.maybeClusterRoute(ctx, msg.queue, msg) {
		return
	}
	route, ok := s.core.directory.lookup(msg.queue)
	if !ok {
		s.rejectPublish(msg, requestFailure{code: wire.CodeUnknownQueue,
			message: fmt.Sprintf("queue %q is not declared", msg.queue)})
		return
	}
	if route.failure.failed() {
		s.rejectPublish(msg, route.failure)
		return
	}
	partition := route.pid
	s.watch(ctx, partition)
	s.nextBatchID++
	s.pending[s.nextBatchID] = pendingBatch{partition: partition, queue: msg.queue, seqs: msg.seqs,
		credit: msg.credit, idempotent: msg.idempotent}
	ctx.Send(partition, publishBatch{replyTo: ctx.Self(), batchID: s.nextBatchID,
		generation: s.fences.generation(msg.queue), messages: msg.messages, bytes: msg.bytes})
}

// rejectPublish negatively confirms a batch the session could not route
// and returns its credit; a fencing refusal fences the queue
// (publish_fence.go).
func (s *session) rejectPublish(msg inPublish, failure requestFailure) {
	s.fences.refused(msg.queue, failure)
	s.push(&wire.NegativeConfirm{Ranges: rejectRanges(nil, msg.seqs, failure)})
	s.conn.returnCredit(msg.credit)
}

// refuseFenced refuses a publish to a fenced queue with the fence's code;
// a not_owner refusal comes with its redirect, as every one does
// (docs/protocol.md 4.6).
func (s *session) refuseFenced(msg inPublish, failure requestFailure) {
	var redirect wire.Frame
	if failure.code == wire.CodeNotOwner {
		failure, redirect = s.notOwnerRedirect(msg.queue, failure)
	}
	s.rejectPublish(msg, failure)
	if redirect != nil {
		s.push(redirect)
	}
}

// resumePublishing takes the client's FRS1: the queue's fence lifts. While
// publishes to the queue are held for it (cluster_session.go), the resume
// joins them, so it takes effect after the publishes sent before it.
func (s *session) resumePublishing(queue string) {
	if held, ok := s.cluster.stash[queue]; ok && len(held) < maxStashedPerQueue {
		s.cluster.stash[queue] = append(held, inResume{frame: &wire.ResumePublishing{Queue: queue}})
		return
	}
	s.fences.resume(queue)
}

func (s *session) publishAnswered(msg publishResult) {
	batch, ok := s.pending[msg.batchID]
	if !ok {
		return // answered already, when the partition stopped
	}
	delete(s.pending, msg.batchID)
	s.answerBatchDeduplicated(batch, msg.confirmed, msg.duplicates, msg.boundary, msg.failure)
}

// answerBatch sends the confirm and negative confirm of one batch and
// returns its credit.
func (s *session) answerBatch(batch pendingBatch, confirmed int, boundary wire.Boundary, failure requestFailure) {
	s.answerBatchDeduplicated(batch, confirmed, nil, boundary, failure)
}

// answerBatchDeduplicated is answerBatch for a batch some of whose
// confirmed messages were duplicates: an FPB2 batch is confirmed with
// FCF2, which marks them; an FPB1 batch with FCF1, as before (its
// publisher knows no other confirm).
func (s *session) answerBatchDeduplicated(batch pendingBatch, confirmed int, duplicates []int, boundary wire.Boundary, failure requestFailure) {
	confirmed = min(max(confirmed, 0), len(batch.seqs))
	switch {
	case confirmed > 0 && batch.idempotent:
		s.push(&wire.ConfirmIdempotent{Ranges: idempotentRanges(nil, batch.seqs[:confirmed], duplicates, boundary)})
	case confirmed > 0:
		s.push(&wire.Confirm{Ranges: confirmRanges(nil, batch.seqs[:confirmed], boundary)})
	}
	if rest := batch.seqs[confirmed:]; len(rest) > 0 {
		if !failure.failed() {
			failure = requestFailure{code: wire.CodeInternal, message: "the publish was neither confirmed nor refused"}
		}
		s.fences.refused(batch.queue, failure)
		var redirect wire.Frame
		if failure.code == wire.CodeNotOwner {
			failure, redirect = s.notOwnerRedirect(batch.queue, failure)
		}
		s.push(&wire.NegativeConfirm{Ranges: rejectRanges(nil, rest, failure)})
		if redirect != nil {
			s.push(redirect)
		}
	}
	s.conn.returnCredit(batch.credit)
}

// confirmRanges appends one range per run of consecutive sequence numbers:
// a range must cover exactly the published numbers inside it, and numbers
// between two runs may belong to another queue.
func confirmRanges(dst []wire.ConfirmRange, seqs []uint64, boundary wire.Boundary) []wire.ConfirmRange {
	for start := 0; start < len(seqs); {
		end := runEnd(seqs, start)
		dst = append(dst, wire.ConfirmRange{First: seqs[start], Last: seqs[end], Boundary: boundary})
		start = end + 1
	}
	return dst
}

// idempotentRanges is confirmRanges for FCF2: a range also ends where the
// duplicate flag changes. duplicates are indices into seqs, increasing.
func idempotentRanges(dst []wire.IdempotentRange, seqs []uint64, duplicates []int, boundary wire.Boundary) []wire.IdempotentRange {
	isDuplicate := make([]bool, len(seqs))
	for _, i := range duplicates {
		if i < len(seqs) {
			isDuplicate[i] = true
		}
	}
	for start := 0; start < len(seqs); {
		end := start
		for end+1 < len(seqs) && seqs[end+1] == seqs[end]+1 && isDuplicate[end+1] == isDuplicate[start] {
			end++
		}
		dst = append(dst, wire.IdempotentRange{First: seqs[start], Last: seqs[end], Boundary: boundary,
			Duplicate: isDuplicate[start]})
		start = end + 1
	}
	return dst
}

func rejectRanges(dst []wire.RejectRange, seqs []uint64, failure requestFailure) []wire.RejectRange {
	for start := 0; start < len(seqs); {
		end := runEnd(seqs, start)
		dst = append(dst, wire.RejectRange{First: seqs[start], Last: seqs[end], Code: failure.code,
			Message: failure.message})
		start = end + 1
	}
	return dst
}

// runEnd returns the index of the last element of the run of consecutive
// numbers that starts at start.
func runEnd(seqs []uint64, start int) int {
	end := start
	for end+1 < len(seqs) && seqs[end+1] == seqs[end]+1 {
		end++
	}
	return end
}

func (s *session) settle(ctx actor.Context, msg inSettle) {
	subscription, ok := s.subscriptions[msg.subscriptionID]
	if !ok {
		s.push(&wire.ErrorFrame{RequestID: msg.requestID, Code: wire.CodeUnknownSubscription,
			Message: fmt.Sprintf("%s of %d tags names subscription %d, which this session does not hold",
				msg.kind, len(msg.tags), msg.subscriptionID)})
		return
	}
	ctx.Send(subscription.partition, settleRequest{replyTo: ctx.Self(), requestID: msg.requestID, subscriptionID: msg.subscriptionID,
		kind: msg.kind, tags: msg.tags, requeue: msg.requeue, delay: msg.delay})
}

func (s *session) deliver(msg deliverBatch) {
	if _, ok := s.subscriptions[msg.subscriptionID]; !ok {
		return // unsubscribed: the partition releases what it held for it
	}
	s.push(&wire.Deliver{SubscriptionID: msg.subscriptionID, Deliveries: msg.deliveries})
}

// partitionStopped answers everything the session still expected from a
// partition that stopped.
func (s *session) partitionStopped(partition *actor.PID) {
	delete(s.watched, partition.Id)
	for batchID, batch := range s.pending {
		if batch.partition.Id != partition.Id {
			continue
		}
		delete(s.pending, batchID)
		s.answerBatch(batch, 0, 0, requestFailure{code: wire.CodeOutcomeUnknown,
			message: fmt.Sprintf("queue %q stopped (deleted, restarted, or the node is shutting down) before answering "+
				"the publish; it may or may not have been stored", batch.queue)})
	}
	for id, subscription := range s.subscriptions {
		if subscription.partition.Id != partition.Id {
			continue
		}
		delete(s.subscriptions, id)
		if !subscription.ready { // the client does not know the id yet: answer its subscribe
			s.push(&wire.ErrorFrame{RequestID: subscription.requestID, Code: wire.CodeUnknownQueue,
				Message: fmt.Sprintf("queue %q stopped before the subscription started", subscription.queue)})
			continue
		}
		s.push(&wire.SubscriptionEnded{SubscriptionID: id, Code: wire.CodeUnknownQueue,
			Message: fmt.Sprintf("subscription %d ended: queue %q stopped", id, subscription.queue)})
	}
	s.publishSummary()
}

// returnCreditOf returns the publish credit a message carried when the
// session drops it while closing.
func (s *session) returnCreditOf(message any) {
	s.returnStashedCredit(message)
	if publish, ok := message.(inPublish); ok {
		s.conn.returnCredit(publish.credit)
	}
	if result, ok := message.(publishResult); ok {
		if batch, ok := s.pending[result.batchID]; ok {
			delete(s.pending, result.batchID)
			s.conn.returnCredit(batch.credit)
		}
	}
}
