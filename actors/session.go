package actors

// The session actor serializes one client connection's state: the hello
// handshake, publishes in flight, subscriptions, and the requests it is
// waiting on. Frames arrive already decoded from the reader goroutine
// (inbound.go); replies leave through the outbox to the writer goroutine
// (outbox.go). The session never touches the socket or storage.
//
// Rules it enforces: hello first and once, within the hello deadline; the
// hello's credentials, as the reader's authentication judged them, and
// each request against the user's permissions (access.go); queue names;
// the caps on subscriptions (the reader enforces publish and request
// credit, connection.go; the outbox its byte bounds); publish sequence numbers
// above every earlier one (checked by the reader, inbound.go);
// subscriptions are this session's own; one order per connection and the
// keepalive (session_order.go). A broken stream or a refused hello gets an
// error frame and a closed connection; a failed request gets an error
// frame and the connection stays.
//
// States, besides the lifecycle phases of every actor:
//
//	awaiting hello  only hello is taken; the hello deadline runs
//	open            requests are served in the order sent; the keepalive runs
//	draining        the node shuts down: what is in flight is finished, new
//	                requests are refused as unavailable, then the session
//	                closes with shutting_down
//	closing         the final error frame is queued; the session stops when
//	                the reader reports the end of the connection
//
// Messages taken: the reader's frames (in*), connectionEnded; the answers
// of the manager and the partitions (results, deliverBatch,
// subscriptionEnded, partitionNotice); drainSession (sessions
// supervisor); helloDeadline and keepaliveTick (its own timers); the
// Terminated of partitions it watches. Sent: requests to the manager and
// the partitions; frames to its outbox.
//
// Every publish batch is answered exactly once: by the partition's result,
// or, if the partition stops first (deleted, shut down, failed), by a
// negative confirm when the session learns of its end (it watches every
// partition it has publishes or subscriptions with).
//
// Every request with an id is answered exactly once, by a frame carrying
// that id; push counts those frames and gives the request credit back.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

type pendingBatch struct {
	partition  *actor.PID
	queue      string
	seqs       []uint64
	credit     publishCredit
	idempotent bool // published with FPB2: confirmed with FCF2
}

// partitionEnded is sent by the session to itself when a watched partition
// stopped.
type partitionEnded struct{ partition *actor.PID }

type sessionSubscription struct {
	id        uint64
	queue     string
	partition *actor.PID
	requestID uint64 // the subscribe's
	ready     bool   // subscribe-ok was sent
}

type session struct {
	entry  *runtime.Entry
	core   *brokerCore
	conn   *connection
	number uint64

	id         string
	helloDone  bool
	version    uint16          // the protocol version hello chose
	identity   access.Identity // the hello's user (empty without Config.Users)
	closing    bool
	clientName string
	// clientMaxBodyBytes is the largest body the client accepts, from its
	// hello (0 there means the protocol default).
	clientMaxBodyBytes uint32

	nextBatchID   uint64
	pending       map[uint64]pendingBatch
	subscriptions map[uint64]*sessionSubscription
	watched       map[string]*actor.PID // partitions watched, by PID id
	cluster       clusterSession        // cluster mode only (cluster_session.go)

	order    requestOrder  // session_order.go
	fences   sessionFences // publish_fence.go
	live     keepalive     // session_order.go
	draining bool
}

func newSession(entry *runtime.Entry, core *brokerCore, conn *connection, number uint64) *session {
	return &session{
		entry: entry, core: core, conn: conn, number: number,
		id:            core.sessionName(number),
		pending:       make(map[uint64]pendingBatch),
		subscriptions: make(map[uint64]*sessionSubscription),
		watched:       make(map[string]*actor.PID),
	}
}

func (s *session) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.start(ctx)
	case *actor.Stopping:
		s.stopping(ctx)
	case *actor.Terminated:
		// The partition's last answers may still be queued behind this
		// system message: handle its end after them.
		ctx.Send(ctx.Self(), partitionEnded{partition: msg.Who})
	case partitionEnded:
		s.partitionStopped(msg.partition)
	case connectionEnded:
		s.connectionEnded(ctx, msg)
	case injectedPanic:
		panic(fmt.Errorf("injected panic in session %s: %s", s.id, msg.reason))
	case helloDeadline:
		s.helloDeadlinePassed()
	case keepaliveTick:
		s.keepaliveTick(ctx)
	case drainSession:
		s.beginDrain()
	case usersReloaded:
		s.recheckAccess(ctx)
	default:
		if s.closing {
			s.returnCreditOf(msg)
			return
		}
		s.receiveInOrder(ctx, msg)
	}
	if s.draining {
		s.maybeFinishDrain()
	}
}

// stopping: the session failed or the node shuts down.
func (s *session) stopping(ctx actor.Context) {
	for _, partition := range s.watched {
		ctx.Unwatch(partition) // partitions outlive sessions: keep their watcher sets small
	}
	s.stopTimers()
	if s.entry.StopCause() != runtime.StopDone {
		// A session that ended by itself already queued its last frame;
		// cutting its linger could close the socket before the writer
		// sends it (under load, with many sessions closing at once).
		s.conn.linger.Store(int64(shutdownLinger))
	}
	message := "the node is shutting down: reconnect, possibly to another node"
	if s.entry.StopCause() == runtime.StopFailed {
		message = "the session failed after an internal error in the node: reconnect"
	}
	s.becomeClosing(&wire.ErrorFrame{Code: wire.CodeShuttingDown, Message: message})
	s.core.metrics.sessionsOpen.Add(-1)
	s.core.sessions.forget(s.id)
}

func (s *session) start(ctx actor.Context) {
	s.core.metrics.sessionsOpen.Add(1)
	s.core.metrics.SessionsOpened.Inc()
	s.publishSummary()
	writer := wire.NewWriter(s.conn.socketWriter(), s.core.config.MaxBodyBytes+deliverFrameSlackBytes)
	writer.SetTrace(s.core.config.Trace, s.conn.id)
	self := ctx.Self()
	s.core.connections.Add(2)
	go func() {
		defer s.core.connections.Done()
		s.conn.readLoop(self)
	}()
	go func() {
		defer s.core.connections.Done()
		s.conn.writeLoop(writer, func(err error) {
			s.core.logger.Debug("session write failed", "session", s.id, "err", err)
		})
	}()
	s.armHelloDeadline(ctx)
}

// receiveOpen handles a message while the connection is open.
func (s *session) receiveOpen(ctx actor.Context, message any) {
	if hello, ok := message.(inHello); ok {
		s.hello(ctx, hello)
		return
	}
	if !s.helloDone && isClientFrame(message) {
		s.refuse(wire.CodeProtocolViolation, "the first frame must be hello")
		return
	}
	switch msg := message.(type) {
	case inPublish:
		s.publish(ctx, msg)
	case publishResult:
		s.publishAnswered(msg)
	case inSettle:
		s.settle(ctx, msg)
	case inResume:
		s.resumePublishing(msg.frame.Queue)
	case deliverBatch:
		s.deliver(msg)
	case settleFailed:
		s.push(msg.failure.frame(msg.requestID))
	case ackSyncApplied:
		s.push(&wire.OK{RequestID: msg.requestID, Count: msg.count})
	default:
		s.receiveControl(ctx, message)
	}
}

// isClientFrame reports whether a message came from the reader (as opposed
// to an answer from another actor).
func isClientFrame(message any) bool {
	switch message.(type) {
	case inDeclare, inPublish, inSubscribe, inUnsubscribe, inSettle, inQueueInfo, inListQueues,
		inDeleteQueue, inPurgeQueue, inChangeMode, inPing, inPong, inPeerError, inResume:
		return true
	}
	return false
}

func (s *session) hello(ctx actor.Context, msg inHello) {
	frame := msg.frame
	identity, authErr := msg.identity, msg.authErr
	if s.helloDone {
		s.refuse(wire.CodeProtocolViolation, "a second hello on one connection")
		return
	}
	version := wire.ChooseVersion(frame.Versions)
	if version == 0 {
		s.refuse(wire.CodeUnsupportedVersion, fmt.Sprintf("the node speaks protocol versions %d to %d; hello offered %v",
			wire.MinProtocolVersion, wire.ProtocolVersion, frame.Versions))
		return
	}
	if frame.MaxBodyBytes != 0 && frame.MaxBodyBytes < wire.MinMaxBodyBytes {
		s.refuse(wire.CodeProtocolViolation, fmt.Sprintf("hello's max_body_bytes %d is below the minimum of %d "+
			"(0 means the default of %d)", frame.MaxBodyBytes, wire.MinMaxBodyBytes, wire.DefaultMaxBodyBytes))
		return
	}
	if authErr != nil {
		s.core.metrics.authFailed("hello")
		s.refuse(wire.CodeUnauthorized, authErr.Error())
		return
	}
	s.helloDone, s.version = true, version
	if version >= 3 {
		s.fences.enable() // the publish fence came with protocol version 3
	}
	s.identity = identity
	s.clientName = clipName(frame.ClientName)
	s.clientMaxBodyBytes = frame.MaxBodyBytes
	if s.clientMaxBodyBytes == 0 {
		s.clientMaxBodyBytes = wire.DefaultMaxBodyBytes
	}
	state := wire.SessionNew
	if frame.PreviousSession != "" && s.core.isEarlierIncarnation(frame.PreviousSession) {
		state = wire.SessionResumedAfterRestart
	}
	s.push(&wire.HelloOK{
		Version: version, NodeID: s.core.config.NodeID, SessionID: s.id, Session: state,
		MaxBodyBytes: s.core.config.MaxBodyBytes, ServerVersion: Version,
	})
	s.helloAccepted(ctx)
	s.publishSummary()
}

// refuse answers with a connection error and closes the connection.
func (s *session) refuse(code wire.Code, message string) {
	s.core.metrics.ProtocolErrors.Inc()
	s.core.logger.Info("closing session", "session", s.id, "code", code.String(), "reason", message)
	s.becomeClosing(&wire.ErrorFrame{Code: code, Message: message})
}

// becomeClosing sends a final error frame and closes the connection; the
// session stops when the reader reports the end.
func (s *session) becomeClosing(final *wire.ErrorFrame) {
	if s.closing {
		return
	}
	s.closing = true
	s.dropHeld()
	s.conn.closeAfter(final)
	s.publishSummary()
}

// connectionEnded: the reader stopped. A frame that broke the stream is
// answered before the connection closes.
func (s *session) connectionEnded(ctx actor.Context, msg connectionEnded) {
	if !s.closing {
		if !s.helloDone && errors.Is(msg.err, wire.ErrFrameTooLarge) {
			s.core.metrics.limitReached(limitHelloFrame)
		}
		if frame := endFrameFor(msg); frame != nil {
			s.core.metrics.ProtocolErrors.Inc()
			s.core.logger.Info("closing session", "session", s.id, "code", frame.Code.String(), "reason", frame.Message)
			s.closing = true
			s.conn.closeAfter(frame)
		} else {
			s.closing = true
			s.conn.closeAfter()
		}
	}
	s.stopTimers()
	s.core.registry.StopActor(ctx, ctx.Self(), runtime.StopDone)
}

// endFrameFor picks the error frame that answers a reader's end, or nil
// when the stream simply ended or the socket failed.
func endFrameFor(msg connectionEnded) *wire.ErrorFrame {
	var netErr net.Error
	switch {
	case errors.Is(msg.err, io.EOF), errors.Is(msg.err, net.ErrClosed), errors.As(msg.err, &netErr):
		return nil
	case errors.Is(msg.err, wire.ErrUnknownFrame):
		return wire.UnknownFrameError(msg.tag)
	case errors.Is(msg.err, errProtocolViolation):
		text := strings.TrimPrefix(msg.err.Error(), errProtocolViolation.Error()+": ")
		return &wire.ErrorFrame{Code: wire.CodeProtocolViolation, Message: text}
	}
	var frameErr *wire.FrameError
	if errors.As(msg.err, &frameErr) {
		return wire.ErrorFrameFor(0, msg.err)
	}
	return nil
}

// push queues frames for the client; a client that stopped reading is
// disconnected.
func (s *session) push(frames ...wire.Frame) {
	frames = s.fitToClient(frames)
	answered := 0
	for _, frame := range frames {
		// fibril_refusals_total and the request credit; other frames cost
		// a type switch.
		if s.core.metrics.countRefusal(frame) {
			answered++
		}
	}
	s.conn.releaseRequests(answered)
	if err := s.conn.box.push(frames...); err != nil {
		limit := limitOutboxSession
		if errors.Is(err, errOutboxNodeBytes) {
			limit = limitOutboxNode
		}
		s.core.metrics.limitReached(limit)
		s.core.logger.Warn("closing session", "session", s.id, "err", err, "held_bytes", s.conn.box.heldBytes())
		s.closing = true
		s.conn.closeNow()
	}
}

// watch makes the session learn when a partition stops.
func (s *session) watch(ctx actor.Context, partition *actor.PID) {
	if _, ok := s.watched[partition.Id]; !ok {
		s.watched[partition.Id] = partition
		ctx.Watch(partition)
	}
}

func (s *session) publishSummary() {
	state := "open"
	switch {
	case s.closing:
		state = "closing"
	case s.draining:
		state = "draining"
	case !s.helloDone:
		state = "awaiting hello"
	}
	s.entry.SetSummary(fmt.Sprintf("%s client=%q conn=%d subscriptions=%d", state, s.clientName,
		s.conn.id, len(s.subscriptions)))
	s.core.sessions.note(s, state) // GET /api/connections (sessions_table.go)
}
