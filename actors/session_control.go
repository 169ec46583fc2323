package actors

// The session's request paths: declare, subscribe, unsubscribe, info,
// list, delete, purge, ping. Each request is checked here, forwarded to the
// actor that owns the answer, and answered with the request's id when the
// result comes back.

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/wire"
)

func (s *session) receiveControl(ctx actor.Context, message any) {
	switch msg := message.(type) {
	case inDeclare:
		s.declare(ctx, msg)
	case declareResult:
		s.declareAnswered(msg)
	case inSubscribe:
		s.subscribe(ctx, msg.frame)
	case subscribeResult:
		s.subscribeAnswered(msg)
	case inUnsubscribe:
		s.unsubscribe(ctx, msg.frame)
	case unsubscribeResult:
		s.unsubscribeAnswered(msg)
	case subscriptionEnded:
		if subscription, ok := s.subscriptions[msg.subscriptionID]; ok {
			s.forgetSubscription(subscription)
			s.push(&wire.SubscriptionEnded{SubscriptionID: msg.subscriptionID, Code: msg.failure.code,
				Message: fmt.Sprintf("subscription %d on queue %q ended: %s", msg.subscriptionID,
					subscription.queue, msg.failure.message)})
			s.publishSummary()
		}
	case partitionNotice:
		s.push(&wire.ErrorFrame{Code: msg.failure.code, Message: fmt.Sprintf("queue %q: %s", msg.queue, msg.failure.message)})
	case inQueueInfo:
		if ValidateQueueName(msg.frame.Queue) == nil && !s.permitVisible(msg.frame.RequestID, msg.frame.Queue) {
			return
		}
		if s.maybeClusterRoute(ctx, msg.frame.Queue, msg) {
			return
		}
		if partition, ok := s.route(msg.frame.RequestID, msg.frame.Queue); ok {
			ctx.Send(partition, infoRequest{replyTo: ctx.Self(), requestID: msg.frame.RequestID})
		}
	case infoResult:
		if msg.failure.failed() {
			s.push(msg.failure.frame(msg.requestID))
			return
		}
		s.push(&wire.QueueInfoReply{RequestID: msg.requestID, Info: s.core.withClusterInfo(msg.info)})
	case inListQueues:
		if users := s.core.config.Users; users != nil && !s.conn.settings.internal {
			if err := users.Revoked(s.identity); err != nil {
				s.becomeRevoked(err)
				return
			}
		}
		request := listRequest{replyTo: ctx.Self(), requestID: msg.frame.RequestID,
			prefix: msg.frame.Prefix, after: msg.frame.After, limit: int(msg.frame.Limit), visible: s.visibleFilter()}
		if !s.clusterList(ctx, request) {
			ctx.Send(s.core.queuesManager, request)
		}
	case listResult:
		if msg.failure.failed() {
			s.push(msg.failure.frame(msg.requestID))
			return
		}
		s.push(&wire.QueueList{RequestID: msg.requestID, More: msg.more, Queues: msg.queues})
	case inDeleteQueue:
		if err := ValidateQueueName(msg.frame.Queue); err != nil {
			s.push(&wire.ErrorFrame{RequestID: msg.frame.RequestID, Code: wire.CodeInvalidName, Message: err.Error()})
			return
		}
		if !s.permit(msg.frame.RequestID, access.Admin, msg.frame.Queue) {
			return
		}
		if s.clusterDelete(ctx, msg) {
			return
		}
		s.beginBarrier("delete")
		ctx.Send(s.core.queuesManager, deleteRequest{replyTo: ctx.Self(), requestID: msg.frame.RequestID, name: msg.frame.Queue})
	case deleteResult:
		s.answer(msg.requestID, msg.removed, msg.failure)
	case inPurgeQueue:
		if ValidateQueueName(msg.frame.Queue) == nil && !s.permit(msg.frame.RequestID, access.Admin, msg.frame.Queue) {
			return
		}
		if s.maybeClusterRoute(ctx, msg.frame.Queue, msg) {
			return
		}
		if partition, ok := s.route(msg.frame.RequestID, msg.frame.Queue); ok {
			ctx.Send(partition, purgeRequest{replyTo: ctx.Self(), requestID: msg.frame.RequestID})
		}
	case purgeResult:
		s.answer(msg.requestID, msg.removed, msg.failure)
	case inChangeMode:
		s.changeMode(ctx, msg) // mode_request.go
	case modeChangeResult:
		s.modeAnswered(msg)
	default:
		if !s.receiveCluster(ctx, message) {
			s.receiveSessionFrame(message)
		}
	}
}

// receiveSessionFrame handles ping, pong and a client's error frame.
func (s *session) receiveSessionFrame(message any) {
	switch msg := message.(type) {
	case inPing:
		s.push(&wire.Pong{RequestID: msg.frame.RequestID})
	case inPong:
	case inPeerError:
		s.core.logger.Info("client reported an error", "session", s.id, "code", msg.frame.Code.String(),
			"message", msg.frame.Message)
		if msg.frame.Code.ClosesConnection() {
			s.becomeClosing(&wire.ErrorFrame{Code: wire.CodeProtocolViolation,
				Message: "closing after the client's connection error"})
		}
	default:
		s.core.logger.Error("session got an unexpected message", "session", s.id, "type", fmt.Sprintf("%T", message))
	}
}

// route checks a queue name and finds its partition, answering the request
// with an error when it cannot.
func (s *session) route(requestID uint64, name string) (*actor.PID, bool) {
	if err := ValidateQueueName(name); err != nil {
		s.push(&wire.ErrorFrame{RequestID: requestID, Code: wire.CodeInvalidName, Message: err.Error()})
		return nil, false
	}
	route, ok := s.core.directory.lookup(name)
	if !ok {
		s.push(&wire.ErrorFrame{RequestID: requestID, Code: wire.CodeUnknownQueue,
			Message: fmt.Sprintf("queue %q is not declared", name)})
		return nil, false
	}
	if route.failure.failed() {
		s.push(route.failure.frame(requestID))
		return nil, false
	}
	return route.pid, true
}

// answer replies ok with a count, or the failure.
func (s *session) answer(requestID uint64, count uint64, failure requestFailure) {
	if failure.failed() {
		s.push(failure.frame(requestID))
		return
	}
	s.push(&wire.OK{RequestID: requestID, Count: count})
}

func (s *session) declare(ctx actor.Context, msg inDeclare) {
	frame := msg.frame
	if err := ValidateQueueName(frame.Queue); err != nil {
		s.push(&wire.ErrorFrame{RequestID: frame.RequestID, Code: wire.CodeInvalidName, Message: err.Error()})
		return
	}
	if !s.permit(frame.RequestID, access.Declare, frame.Queue) {
		return
	}
	if dlq := frame.Options.DeadLetterQueue; dlq != "" && ValidateQueueName(dlq) == nil &&
		!s.permit(frame.RequestID, access.Publish, dlq) {
		return // naming a dead-letter queue publishes to it
	}
	if msg.optionsErr != nil {
		s.push(&wire.ErrorFrame{RequestID: frame.RequestID, Code: wire.CodeInvalidOptions, Message: msg.optionsErr.Error()})
		return
	}
	s.beginBarrier("declare")
	ctx.Send(s.core.queuesManager, declareRequest{replyTo: ctx.Self(), requestID: frame.RequestID,
		name: frame.Queue, options: frame.Options, mode: frame.Mode})
}

// declareAnswered replies to a declare. Every declare, with or without a
// mode byte, is answered FDK2 naming the queue's effective mode, so a
// client never has to guess the mode a mode-less declare produced (the
// default differs between a single node and a cluster).
func (s *session) declareAnswered(msg declareResult) {
	if msg.failure.failed() {
		s.push(msg.failure.frame(msg.requestID))
		return
	}
	s.push(&wire.DeclareOKMode{RequestID: msg.requestID, Created: msg.created, Mode: msg.mode,
		Warnings: msg.warnings})
}

func (s *session) subscribe(ctx actor.Context, frame *wire.Subscribe) {
	if ValidateQueueName(frame.Queue) == nil && !s.permit(frame.RequestID, access.Consume, frame.Queue) {
		return
	}
	if limit := s.core.config.Limits.MaxSubscriptions; len(s.subscriptions) >= limit {
		s.core.metrics.limitReached(limitSubscriptions)
		s.push(&wire.ErrorFrame{RequestID: frame.RequestID, Code: wire.CodeResourceLimit, Message: fmt.Sprintf(
			"this session holds %d subscriptions, the node's limit per session; unsubscribe some first", limit)})
		return
	}
	if s.maybeClusterRoute(ctx, frame.Queue, inSubscribe{frame: frame}) {
		return
	}
	partition, ok := s.route(frame.RequestID, frame.Queue)
	if !ok {
		return
	}
	prefetch := frame.Prefetch
	if prefetch == 0 {
		prefetch = DefaultPrefetch
	}
	prefetch = min(prefetch, MaxPrefetch)
	subscription := &sessionSubscription{id: s.core.newID(), queue: frame.Queue, partition: partition,
		requestID: frame.RequestID}
	s.subscriptions[subscription.id] = subscription
	s.watch(ctx, partition)
	ctx.Send(partition, subscribeRequest{replyTo: ctx.Self(), sessionID: s.id, requestID: frame.RequestID,
		subscriptionID: subscription.id, prefetch: prefetch, maxFrameBytes: s.clientMaxBody()})
	s.publishSummary()
}

// clientMaxBody is the body limit deliveries are kept within: the client's
// own (from its hello), and never more than the node's writer takes.
func (s *session) clientMaxBody() uint32 {
	return min(s.clientMaxBodyBytes, s.core.config.MaxBodyBytes+deliverFrameSlackBytes)
}

func (s *session) subscribeAnswered(msg subscribeResult) {
	subscription, ok := s.subscriptions[msg.subscriptionID]
	if !ok {
		return // forgotten before its answer: forgetSubscription gave its credit back
	}
	if msg.failure.failed() {
		delete(s.subscriptions, msg.subscriptionID)
		s.push(msg.failure.frame(msg.requestID))
		s.publishSummary()
		return
	}
	subscription.ready = true
	s.push(&wire.SubscribeOK{RequestID: msg.requestID, SubscriptionID: msg.subscriptionID, Prefetch: msg.prefetch})
}

func (s *session) unsubscribe(ctx actor.Context, frame *wire.Unsubscribe) {
	subscription, ok := s.subscriptions[frame.SubscriptionID]
	if !ok {
		s.push(&wire.ErrorFrame{RequestID: frame.RequestID, Code: wire.CodeUnknownSubscription,
			Message: fmt.Sprintf("subscription %d is not held by this session", frame.SubscriptionID)})
		return
	}
	s.forgetSubscription(subscription)
	ctx.Send(subscription.partition, unsubscribeRequest{replyTo: ctx.Self(), requestID: frame.RequestID,
		subscriptionID: frame.SubscriptionID})
	s.publishSummary()
}

// forgetSubscription drops a subscription. One whose subscribe was not
// answered yet will not be (its answer is dropped when it comes), so its
// request credit is given back here.
func (s *session) forgetSubscription(subscription *sessionSubscription) {
	delete(s.subscriptions, subscription.id)
	if !subscription.ready {
		s.conn.releaseRequests(1)
	}
}

func (s *session) unsubscribeAnswered(msg unsubscribeResult) {
	if msg.requestID == 0 {
		return // the session's own (endSubscription): the client was told already
	}
	s.answer(msg.requestID, msg.released, msg.failure)
}
