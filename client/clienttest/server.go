package clienttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/fibrilmq/fibril/wire"
)

// Action is what a hook tells the server to do with a client frame.
type Action int

const (
	// Handle the frame normally.
	Handle Action = iota
	// Ignore the frame: no effect, no answer.
	Ignore
	// Drop hangs up (see Conn.HangUp) without handling the frame.
	Drop
	// HandleThenDrop handles the frame (answers included), then hangs up.
	HandleThenDrop
)

// Hook sees every decoded client frame after hello, before it is handled.
// It runs on the connection's goroutine without the server's lock.
type Hook func(conn *Conn, frame wire.Frame) Action

// Config configures a Server. Zero values take defaults.
type Config struct {
	NodeID          string // default "fake-1"
	AuthToken       []byte // when set, hello must carry it
	DefaultPrefetch uint32 // granted for prefetch 0; default 8
	MaxBodyBytes    uint32 // told in hello-ok; 0 means the protocol default
	// RedirectBeforeReject makes a publish to a redirected queue send the
	// redirect (request id 0) before the negative confirm; by default it
	// comes after.
	RedirectBeforeReject bool
	// DefaultMode is the mode a declare without a mode gives a new queue;
	// zero means durable (a single node). Set it to wire.ModeBuffered to
	// act like a cluster without a default policy.
	DefaultMode wire.Mode
	// LegacyDeclareOK answers declares without a mode byte with FDK1, as
	// nodes did before every declare was answered with FDK2.
	LegacyDeclareOK bool
}

// Stats counts what the server has seen. Counts of messages and tags are
// per message, frame counts per frame.
type Stats struct {
	Connections      int // accepted
	Hellos           int // answered with hello-ok
	Open             int // connections open now
	PublishFrames    int
	IdempotentFrames int // of PublishFrames, FPB2 frames
	Published        int // messages stored
	Rejected         int // messages negatively confirmed
	Resumes          int // resume-publishing frames (FRS1)
	Declares         int
	Subscribes       int // subscriptions created
	Unsubscribes     int
	Delivered        int // deliveries sent
	SettleFrames     int
	Acked            int
	AckSyncs         int // ack-sync frames (FAK2) answered
	Nacked           int
	Released         int
	Discarded        int
	MaxSettleTags    int // most tags one settle frame carried
	MaxUnsettled     int // most deliveries one subscription held unsettled
	Pings            int
	LastPrefetchAsk  uint32 // the prefetch the last subscribe asked for
}

// Server is a fake node listening on a loopback port.
type Server struct {
	config   Config
	listener net.Listener

	mu               sync.Mutex
	stats            Stats
	changed          chan struct{} // closed and replaced on every change
	queues           map[string]*queue
	conns            map[*Conn]struct{}
	redirects        map[string]redirectTarget
	refusals         map[string]refusal // queues whose requests and publishes are refused
	restartedBefore  map[string]bool    // session ids from before a Restart
	issuedSessions   []string
	holdConfirms     bool
	nextSession      uint64
	nextSubscription uint64
	nextTag          uint64
	hook             Hook
	closed           bool
	serving          sync.WaitGroup
}

// refusal is the error a refused queue's requests and publishes get.
type refusal struct {
	code    wire.Code
	message string
}

type redirectTarget struct {
	nodeID, address string
	epoch           uint64 // not 0: sent as FRD2 with this epoch
}

// frame is the redirect frame for the target.
func (target redirectTarget) frame(requestID uint64, queue string) wire.Frame {
	redirect := wire.Redirect{RequestID: requestID, Queue: queue, NodeID: target.nodeID, Address: target.address}
	if target.epoch != 0 {
		return &wire.RedirectEpoch{Redirect: redirect, Epoch: target.epoch}
	}
	return &redirect
}

// NewServer starts a fake node on 127.0.0.1 at a free port.
func NewServer(config Config) (*Server, error) {
	if config.NodeID == "" {
		config.NodeID = "fake-1"
	}
	if config.DefaultPrefetch == 0 {
		config.DefaultPrefetch = 8
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		config: config, listener: listener, changed: make(chan struct{}),
		queues: make(map[string]*queue), conns: make(map[*Conn]struct{}),
		redirects: make(map[string]redirectTarget), refusals: make(map[string]refusal),
		restartedBefore: make(map[string]bool),
	}
	s.serving.Add(1)
	go s.accept()
	return s, nil
}

// Addr returns the host:port clients dial.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Close stops listening, drops every connection and waits for the
// server's goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.listener.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.serving.Wait()
}

// SetHook installs a hook (nil removes it).
func (s *Server) SetHook(hook Hook) {
	s.mu.Lock()
	s.hook = hook
	s.mu.Unlock()
}

// Redirect makes requests about queue answer with a redirect to address,
// and publishes to it a not_owner negative confirm plus a redirect.
func (s *Server) Redirect(queue, nodeID, address string) {
	s.mu.Lock()
	s.redirects[queue] = redirectTarget{nodeID: nodeID, address: address}
	s.mu.Unlock()
}

// RedirectAtEpoch is Redirect with FRD2 frames naming the owner's epoch.
func (s *Server) RedirectAtEpoch(queue, nodeID, address string, epoch uint64) {
	s.mu.Lock()
	s.redirects[queue] = redirectTarget{nodeID: nodeID, address: address, epoch: epoch}
	s.mu.Unlock()
}

// Refuse makes requests about queue (subscribe, info, purge, delete)
// answer with an error frame of code, and publishes to it a negative
// confirm of code, as a node that cannot serve the queue does (code
// unavailable: an owner cut off from its peers); code 0 stops refusing. A
// redirect set for the queue comes first.
func (s *Server) Refuse(queue string, code wire.Code, message string) {
	s.mu.Lock()
	if code == 0 {
		delete(s.refusals, queue)
	} else {
		s.refusals[queue] = refusal{code: code, message: message}
	}
	s.mu.Unlock()
}

// HoldConfirms, when on, keeps confirms back until ReleaseConfirms.
func (s *Server) HoldConfirms(on bool) {
	s.mu.Lock()
	s.holdConfirms = on
	s.mu.Unlock()
}

// ReleaseConfirms sends every held confirm range, newest first when
// reverse is set, each in its own frame.
func (s *Server) ReleaseConfirms(reverse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		held := c.heldConfirms
		c.heldConfirms = nil
		for i := range held {
			r := held[i]
			if reverse {
				r = held[len(held)-1-i]
			}
			c.sendLocked(r.frame())
		}
	}
}

// DropConnections hangs up every connection (no error frame). Their
// leased deliveries become ready again, marked redelivered, once each
// client has closed its side.
func (s *Server) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.hangUpLocked()
	}
}

// Restart drops every connection and makes the sessions issued so far
// resumable: a hello naming one is answered "resumed after restart".
func (s *Server) Restart() {
	s.mu.Lock()
	for _, id := range s.issuedSessions {
		s.restartedBefore[id] = true
	}
	s.mu.Unlock()
	s.DropConnections()
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Await waits until cond holds for the stats, or ctx ends.
func (s *Server) Await(ctx context.Context, cond func(Stats) bool) error {
	for {
		s.mu.Lock()
		stats, changed := s.stats, s.changed
		s.mu.Unlock()
		if cond(stats) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("clienttest: condition not reached (stats %+v): %w", stats, ctx.Err())
		}
	}
}

// touchLocked wakes Await callers. The lock must be held.
func (s *Server) touchLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) accept() {
	defer s.serving.Done()
	for {
		netConn, err := s.listener.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			netConn.Close()
			return
		}
		c := &Conn{server: s, netConn: netConn, writer: wire.NewWriter(netConn, 0),
			subscriptions: make(map[uint64]*subscription)}
		s.conns[c] = struct{}{}
		s.stats.Connections++
		s.stats.Open++
		s.touchLocked()
		s.serving.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Conn is one client connection to the fake server.
type Conn struct {
	server        *Server
	netConn       net.Conn
	writer        *wire.Writer // guarded by server.mu
	closeOnce     sync.Once
	hungUp        bool   // guarded by server.mu: frames are ignored
	helloDone     bool   // guarded by server.mu
	sessionID     string // guarded by server.mu
	lastSeq       uint64 // guarded by server.mu
	heldConfirms  []heldConfirm
	subscriptions map[uint64]*subscription // guarded by server.mu
	fenced        map[string]wire.Code     // guarded by server.mu: queues whose publishes are refused until FRS1
}

// SessionID returns the session id hello-ok gave.
func (c *Conn) SessionID() string {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	return c.sessionID
}

// Close drops the connection abruptly: the socket is closed at once.
func (c *Conn) Close() {
	c.closeOnce.Do(func() { c.netConn.Close() })
}

// HangUp ends the connection without an error frame, after everything
// already sent: the client reads it all, then the end of the stream. The
// server ignores the client's later frames until the client closes.
func (c *Conn) HangUp() {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	c.hangUpLocked()
}

func (c *Conn) hangUpLocked() {
	c.hungUp = true
	if tcp, ok := c.netConn.(*net.TCPConn); ok {
		tcp.CloseWrite()
		return
	}
	c.Close()
}

// Send writes a frame to the client (for tests that need a frame the
// server would not send on its own).
func (c *Conn) Send(frame wire.Frame) {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	c.sendLocked(frame)
}

// sendLocked writes and flushes a frame; a failed write is left for the
// reading side to notice. The server lock must be held.
func (c *Conn) sendLocked(frame wire.Frame) {
	if err := c.writer.WriteFrame(frame); err == nil {
		c.writer.Flush()
	}
}

func (c *Conn) serve() {
	s := c.server
	defer s.serving.Done()
	defer c.ended()
	reader := wire.NewReader(c.netConn, 0)
	for {
		tag, body, err := reader.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				var frameError *wire.FrameError
				if errors.As(err, &frameError) {
					c.Send(wire.ErrorFrameFor(0, err))
				}
			}
			return
		}
		frame, err := wire.DecodeFrame(tag, body)
		if err != nil {
			if errors.Is(err, wire.ErrUnknownFrame) {
				c.Send(wire.UnknownFrameError(tag))
			} else {
				c.Send(wire.ErrorFrameFor(0, err))
			}
			return
		}
		if !c.dispatch(frame) {
			return
		}
	}
}

// dispatch runs the hook and handles the frame; false ends the connection.
func (c *Conn) dispatch(frame wire.Frame) bool {
	s := c.server
	s.mu.Lock()
	hook, helloDone, hungUp := s.hook, c.helloDone, c.hungUp
	s.mu.Unlock()
	if hungUp {
		return true // read on until the client closes its side
	}
	action := Handle
	if hook != nil && helloDone {
		action = hook(c, frame)
	}
	switch action {
	case Ignore:
		return true
	case Drop:
		c.HangUp()
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := c.handleLocked(frame)
	if action == HandleThenDrop {
		c.hangUpLocked()
	}
	s.touchLocked()
	return keep
}

// ended releases the connection's leases (marked redelivered) and forgets it.
func (c *Conn) ended() {
	c.Close()
	s := c.server
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range c.subscriptions {
		sub.queue.unsubscribeLocked(sub)
	}
	delete(s.conns, c)
	s.stats.Open--
	s.touchLocked()
}

// failLocked answers with a connection error and ends the connection.
func (c *Conn) failLocked(code wire.Code, message string) bool {
	c.sendLocked(&wire.ErrorFrame{Code: code, Message: message})
	c.Close()
	return false
}

func (c *Conn) handleLocked(frame wire.Frame) bool {
	s := c.server
	if hello, ok := frame.(*wire.Hello); ok {
		return c.helloLocked(hello)
	}
	if !c.helloDone {
		return c.failLocked(wire.CodeProtocolViolation, "a frame before hello")
	}
	switch f := frame.(type) {
	case *wire.Declare:
		s.stats.Declares++
		c.declareLocked(f)
	case *wire.Publish:
		return c.publishLocked(f)
	case *wire.PublishIdempotent:
		return c.publishIdempotentLocked(f)
	case *wire.Subscribe:
		c.subscribeLocked(f)
	case *wire.Unsubscribe:
		c.unsubscribeLocked(f)
	case *wire.Ack:
		c.settleLocked(f.SubscriptionID, f.DeliveryTags, func(q *queue, m *message) { q.ackLocked(m) })
		s.stats.Acked += len(f.DeliveryTags)
	case *wire.AckSync:
		c.ackSyncLocked(f)
	case *wire.Nack:
		c.settleLocked(f.SubscriptionID, f.DeliveryTags, func(q *queue, m *message) { q.nackLocked(m, f.Requeue) })
		s.stats.Nacked += len(f.DeliveryTags)
	case *wire.Release:
		c.settleLocked(f.SubscriptionID, f.DeliveryTags, func(q *queue, m *message) { q.releaseLocked(m) })
		s.stats.Released += len(f.DeliveryTags)
	case *wire.Discard:
		c.settleLocked(f.SubscriptionID, f.DeliveryTags, func(q *queue, m *message) { q.discardLocked(m) })
		s.stats.Discarded += len(f.DeliveryTags)
	case *wire.GetQueueInfo, *wire.ListQueues, *wire.DeleteQueue, *wire.PurgeQueue:
		c.adminLocked(f)
	case *wire.ResumePublishing:
		s.stats.Resumes++
		delete(c.fenced, f.Queue)
	case *wire.Ping:
		s.stats.Pings++
		c.sendLocked(&wire.Pong{RequestID: f.RequestID})
	case *wire.Pong:
	case *wire.ErrorFrame:
		if f.Code.ClosesConnection() {
			c.Close()
			return false
		}
	default:
		return c.failLocked(wire.CodeProtocolViolation, fmt.Sprintf("a client does not send %s", frame.Tag()))
	}
	return true
}

func (c *Conn) helloLocked(hello *wire.Hello) bool {
	s := c.server
	if c.helloDone {
		return c.failLocked(wire.CodeProtocolViolation, "a second hello")
	}
	speaksOne := false
	for _, version := range hello.Versions {
		speaksOne = speaksOne || version == wire.ProtocolVersion
	}
	if !speaksOne {
		return c.failLocked(wire.CodeUnsupportedVersion, "no common protocol version")
	}
	if s.config.AuthToken != nil && string(hello.AuthToken) != string(s.config.AuthToken) {
		return c.failLocked(wire.CodeUnauthorized, "auth token refused")
	}
	s.nextSession++
	c.sessionID = fmt.Sprintf("%s-session-%d", s.config.NodeID, s.nextSession)
	s.issuedSessions = append(s.issuedSessions, c.sessionID)
	state := wire.SessionNew
	if s.restartedBefore[hello.PreviousSession] {
		state = wire.SessionResumedAfterRestart
	}
	c.helloDone = true
	if hello.MaxBodyBytes != 0 {
		c.writer.SetMaxBodyBytes(hello.MaxBodyBytes)
	}
	c.sendLocked(&wire.HelloOK{Version: wire.ProtocolVersion, NodeID: s.config.NodeID, SessionID: c.sessionID,
		Session: state, MaxBodyBytes: s.config.MaxBodyBytes, ServerVersion: "clienttest"})
	s.stats.Hellos++
	return true
}

// redirectedLocked answers a request about a redirected or refused queue.
func (c *Conn) redirectedLocked(requestID uint64, queueName string) bool {
	if target, ok := c.server.redirects[queueName]; ok {
		c.sendLocked(target.frame(requestID, queueName))
		return true
	}
	if refused, ok := c.server.refusals[queueName]; ok {
		c.errorLocked(requestID, refused.code, "%s", refused.message)
		return true
	}
	return false
}

func (c *Conn) errorLocked(requestID uint64, code wire.Code, format string, args ...any) {
	c.sendLocked(&wire.ErrorFrame{RequestID: requestID, Code: code, Message: fmt.Sprintf(format, args...)})
}
