package actors

// One order per connection, the hello deadline, the keepalive and the
// drain of a session.
//
// Ordering (docs/protocol.md 4.2). The requests of one connection take
// effect in the order the client sent them. Most of that order holds by
// itself: the reader hands the session frames in order, the session sends
// every request about one queue to that queue's partition, and the
// library keeps the messages one sender sends one receiver in order, so a
// partition sees one connection's publishes, subscribes, settles, purges
// and info requests in the order they were sent, and any message it
// receives later from another actor (a delete's stop, say) after them.
// What does not hold by itself is a request answered by the queues manager
// that changes where later requests go: a declare (the queue must exist
// before a publish looks it up) and a delete (a publish after it must not
// reach the old queue). While such a request (a barrier) waits for its
// answer, every later client frame waits in a list, in order; the answer
// replays the list until the next barrier. The hot path pays one branch
// for this: a publish with no barrier outstanding goes straight through,
// with no extra goroutine hop, lock or allocation. The list is bounded:
// the reader stops reading while it holds heldFramesMax frames
// (connection.go), so TCP slows a client that pipelines without end.
// Pings and pongs are not held (isKeepaliveFrame).
//
// Keepalive (docs/protocol.md 4.1, 4.7). A connection that has not sent
// hello within Config.HelloTimeout is closed with protocol_violation.
// After hello, every Config.KeepaliveInterval the session checks whether
// the reader heard any frame since the last check; when not, it sends a
// ping (the client answers pong, which is a frame). The check after
// Config.KeepaliveMissedMax silent checks in a row closes the connection
// with protocol_violation.
//
// Drain (Broker.Close). The session stops taking new work: publishes are
// negatively confirmed and requests refused as unavailable (settles still
// apply, pings are still answered), it waits for the answers of what it
// sent before (publishes, a barrier, cluster awaits), then closes with
// shutting_down.

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/wire"
)

// requestOrder is the session's barrier and the frames held behind it.
type requestOrder struct {
	awaiting string // the barrier waited for ("declare", "delete", "list"); "" when none
	held     []any  // client frames that arrived since, in order
}

// Messages of the session's own timers.
type (
	helloDeadline struct{}
	keepaliveTick struct{}
)

// keepalive is the session's hello deadline and keepalive state.
type keepalive struct {
	helloTimer   *time.Timer
	timer        *time.Timer
	silentChecks int
	nextPingID   uint64
}

// receiveInOrder holds a client frame while a barrier waits and handles
// everything else; an answer that ends the barrier replays what it held.
func (s *session) receiveInOrder(ctx actor.Context, message any) {
	if isClientFrame(message) {
		if s.draining {
			s.refuseDraining(ctx, message)
			return
		}
		if s.order.awaiting != "" && !isKeepaliveFrame(message) {
			s.order.held = append(s.order.held, message)
			s.conn.holdFrame()
			return
		}
	}
	s.receiveOpen(ctx, message)
	switch message.(type) {
	case declareResult, deleteResult, clusterDeclareAnswer:
		s.endBarrier(ctx)
	case listResult:
		if s.order.awaiting == "list" { // a list in cluster mode (cluster_list.go)
			s.endBarrier(ctx)
		}
	}
}

// isKeepaliveFrame reports whether message is a ping or a pong. They
// change nothing a later request could see, so they are never held behind
// a barrier: a ping is answered as soon as the frame arrives (docs/
// protocol.md 4.7), however long a declare or a delete before it waits (a
// delete waits for its queue's appends, a cluster one for the coordination
// shard). Held, a ping went unanswered for as long, and a client that pings
// to find a dead node closed a healthy connection with the delete on it.
func isKeepaliveFrame(message any) bool {
	switch message.(type) {
	case inPing, inPong:
		return true
	}
	return false
}

// beginBarrier marks a request whose answer later frames must follow.
func (s *session) beginBarrier(what string) { s.order.awaiting = what }

// endBarrier replays the held frames, in order, until the next barrier.
func (s *session) endBarrier(ctx actor.Context) {
	s.order.awaiting = ""
	for len(s.order.held) > 0 && s.order.awaiting == "" && !s.closing {
		message := s.order.held[0]
		s.order.held[0] = nil
		s.order.held = s.order.held[1:]
		s.conn.releaseFrames(1)
		s.receiveInOrder(ctx, message)
	}
	if len(s.order.held) == 0 {
		s.order.held = nil
	}
}

// dropHeld forgets the held frames of a session that closes.
func (s *session) dropHeld() {
	for _, message := range s.order.held {
		s.returnCreditOf(message)
	}
	s.conn.releaseFrames(len(s.order.held))
	s.order.held = nil
}

// armHelloDeadline starts the hello deadline.
func (s *session) armHelloDeadline(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	remaining := time.Until(s.conn.settings.acceptedAt.Add(s.core.config.HelloTimeout))
	s.live.helloTimer = time.AfterFunc(max(remaining, 0), func() { system.Root.Send(self, helloDeadline{}) })
}

func (s *session) helloDeadlinePassed() {
	if s.helloDone || s.closing {
		return
	}
	s.core.metrics.limitReached(limitHelloDeadline)
	s.refuse(wire.CodeProtocolViolation, fmt.Sprintf("no hello within %v of connecting", s.core.config.HelloTimeout))
}

// helloAccepted ends the hello deadline and starts the keepalive.
func (s *session) helloAccepted(ctx actor.Context) {
	if s.live.helloTimer != nil {
		s.live.helloTimer.Stop()
		s.live.helloTimer = nil
	}
	s.armKeepalive(ctx)
}

func (s *session) armKeepalive(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	s.live.timer = time.AfterFunc(s.core.config.KeepaliveInterval, func() { system.Root.Send(self, keepaliveTick{}) })
}

// keepaliveTick checks that the client was heard from since the last
// check; see the file comment.
func (s *session) keepaliveTick(ctx actor.Context) {
	if s.closing {
		return
	}
	if s.conn.heard.Swap(false) {
		s.live.silentChecks = 0
	} else {
		s.live.silentChecks++
		missedMax := s.core.config.KeepaliveMissedMax
		if s.live.silentChecks > missedMax {
			s.refuse(wire.CodeProtocolViolation, fmt.Sprintf(
				"nothing heard from the client in %d keepalive checks %v apart (%d pings unanswered)",
				s.live.silentChecks, s.core.config.KeepaliveInterval, missedMax))
			return
		}
		s.live.nextPingID++
		s.push(&wire.Ping{RequestID: s.live.nextPingID})
	}
	s.armKeepalive(ctx)
}

func (s *session) stopTimers() {
	for _, timer := range []*time.Timer{s.live.helloTimer, s.live.timer} {
		if timer != nil {
			timer.Stop()
		}
	}
	s.live.helloTimer, s.live.timer = nil, nil
}

// beginDrain starts the session's part of a shutdown.
func (s *session) beginDrain() {
	if s.draining {
		return
	}
	s.draining = true
	s.publishSummary()
	s.maybeFinishDrain()
}

// maybeFinishDrain closes a draining session once nothing it sent waits
// for an answer.
func (s *session) maybeFinishDrain() {
	if !s.draining || s.closing || len(s.pending) > 0 || s.order.awaiting != "" || len(s.cluster.stash) > 0 {
		return
	}
	s.stopTimers()
	s.conn.linger.Store(int64(shutdownLinger))
	s.becomeClosing(&wire.ErrorFrame{Code: wire.CodeShuttingDown,
		Message: "the node is shutting down: reconnect, possibly to another node"})
}

// refuseDraining answers a client frame that arrives while draining.
func (s *session) refuseDraining(ctx actor.Context, message any) {
	failure := requestFailure{code: wire.CodeUnavailable, message: "the node is shutting down; the request was not carried out"}
	switch msg := message.(type) {
	case inPublish:
		s.rejectPublish(msg, requestFailure{code: wire.CodeUnavailable,
			message: "the node is shutting down; the message was not stored"})
	case inSettle:
		s.settle(ctx, msg) // finishing work is what a drain is for
	case inResume:
		s.resumePublishing(msg.frame.Queue) // it has no answer to refuse it with
	case inPing, inPong, inPeerError:
		s.receiveSessionFrame(message)
	default:
		s.push(failure.frame(clientRequestID(message)))
	}
}

// clientRequestID is the request id of a client request frame (0 for the
// frames that have none).
func clientRequestID(message any) uint64 {
	switch msg := message.(type) {
	case inDeclare:
		return msg.frame.RequestID
	case inSubscribe:
		return msg.frame.RequestID
	case inUnsubscribe:
		return msg.frame.RequestID
	case inQueueInfo:
		return msg.frame.RequestID
	case inListQueues:
		return msg.frame.RequestID
	case inDeleteQueue:
		return msg.frame.RequestID
	case inPurgeQueue:
		return msg.frame.RequestID
	case inPing:
	case inChangeMode:
		return msg.frame.RequestID
	}
	return 0
}
