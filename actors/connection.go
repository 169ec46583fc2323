package actors

// connection owns one client socket and its two goroutines.
//
//   - The reader goroutine reads frames with a wire.Reader, turns each into a
//     message (inbound.go) and sends it to the session actor. It is the only
//     reader of the socket. Until a hello is accepted it reads under
//     wire.MaxHelloBodyBytes, so a connection that has not authenticated
//     makes the node buffer at most one hello; it authenticates the hello
//     itself (off the session actor: a token's argon2id derivation takes
//     tens of milliseconds), within the hello deadline, and only then
//     raises the limit to the node's. Before it reads past a publish it
//     waits for publish credit (bytes and messages), and before it reads
//     past a request it waits for request credit, so a client that sends
//     faster than the node answers is slowed by TCP, not buffered without
//     end; and before it sends any frame it waits while the session holds
//     heldFramesMax frames behind a request that must be answered first
//     (session.go, ordering). It marks every frame heard, for the
//     keepalive.
//   - The writer goroutine drains the outbox (outbox.go) and is the only
//     writer of the socket.
//
// Closing follows one order so a final error frame reaches the client:
// the writer flushes its last frames and half-closes the socket (FIN); the
// reader keeps reading, discarding, until the client closes its side or a
// linger deadline passes, and only then closes the socket. Reading on
// matters: closing a socket with unread input makes the kernel send a reset,
// which can destroy the error frame before the client reads it. The close
// releases the connection's place in the node's connection limits.
//
// Invariant: 0 <= inflightPublishes, inflightPublishBytes and
// inflightRequests; each is added by the reader before it sends the frame
// and subtracted once by the session when the frame is answered.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/wire"
)

// closeLinger bounds how long a closing connection keeps draining input
// after a protocol error; shutdownLinger after the node's shutdown notice.
const (
	closeLinger    = 2 * time.Second
	shutdownLinger = 250 * time.Millisecond
)

// heldFramesMax bounds the client frames a session holds behind a request
// whose answer they must follow.
const heldFramesMax = 1024

// readCredit is what reading one frame takes from the session's credit.
type readCredit struct {
	publishes, publishBytes int64 // a publish frame: its messages and body bytes
	requests                int64 // a request with an id: 1
}

// connectionSettings are what a connection needs from the node's config.
type connectionSettings struct {
	maxBodyBytes uint32 // the node's limit for inbound bodies, after hello
	limits       Limits
	auth         authenticator
	acceptedAt   time.Time // the hello deadline runs from here
	helloTimeout time.Duration
	internal     bool // the node's own connection (Broker.DialInternal): no authentication, every permission
}

type connection struct {
	id       uint64
	conn     net.Conn
	box      *outbox
	trace    *wire.TraceSwitch
	system   *actor.ActorSystem
	settings connectionSettings
	slot     *connectionSlot // this connection's place in the limits
	metrics  *Metrics

	// Credit: the reader adds before sending a frame, the session
	// subtracts when it is answered.
	inflightPublishes    atomic.Int64
	inflightPublishBytes atomic.Int64
	inflightRequests     atomic.Int64
	// heldFrames counts the frames the session holds (it adds and
	// subtracts; the reader waits while it is at heldFramesMax).
	heldFrames atomic.Int64
	roomFreed  chan struct{} // capacity 1; kicks a waiting reader
	// heard is set by the reader on every frame and cleared by the
	// session's keepalive check.
	heard atomic.Bool

	// authContext bounds the hello's authentication: the hello deadline,
	// or the connection closing.
	authContext context.Context
	cancelAuth  context.CancelFunc

	linger      atomic.Int64 // nanoseconds; closeLinger unless set shorter
	closingOnce sync.Once
	closing     chan struct{} // closed when the session decided to close
	closeOnce   sync.Once
	closed      chan struct{} // closed when the socket is closed
	writerDone  chan struct{} // closed when the writer goroutine returned
}

func newConnection(id uint64, conn net.Conn, system *actor.ActorSystem, settings connectionSettings,
	bounds outboxBounds, trace *wire.TraceSwitch, slot *connectionSlot, metrics *Metrics) *connection {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetNoDelay(true) // Go's default, stated: replies must not wait for Nagle
	}
	if settings.acceptedAt.IsZero() {
		settings.acceptedAt = time.Now()
	}
	authContext, cancelAuth := context.WithDeadline(context.Background(),
		settings.acceptedAt.Add(settings.helloTimeout))
	return &connection{
		id: id, conn: conn, box: newOutbox(bounds), trace: trace, system: system, settings: settings,
		slot: slot, metrics: metrics,
		authContext: authContext, cancelAuth: cancelAuth,
		roomFreed:  make(chan struct{}, 1),
		closing:    make(chan struct{}),
		closed:     make(chan struct{}),
		writerDone: make(chan struct{}),
	}
}

// closeAfter queues last frames (an error, typically), then closes the
// connection in the order the file comment describes. The reader stops
// waiting for credit at once.
func (c *connection) closeAfter(frames ...wire.Frame) {
	c.closingOnce.Do(func() { close(c.closing) })
	c.cancelAuth()
	c.box.closeAfter(frames...)
}

func (c *connection) lingerDuration() time.Duration {
	if linger := c.linger.Load(); linger > 0 {
		return time.Duration(linger)
	}
	return closeLinger
}

// closeNow closes the socket at once (shutdown, write failure) and gives
// back the connection's place in the limits.
func (c *connection) closeNow() {
	c.closeOnce.Do(func() {
		c.cancelAuth()
		_ = c.conn.Close()
		c.box.discard()
		close(c.closed)
		c.slot.release()
	})
}

// returnCredit gives back publish credit and wakes a waiting reader.
func (c *connection) returnCredit(credit publishCredit) {
	if credit.messages == 0 && credit.bytes == 0 {
		return
	}
	c.inflightPublishes.Add(-credit.messages)
	c.inflightPublishBytes.Add(-credit.bytes)
	c.kickReader()
}

// releaseRequests gives back the credit of answered requests.
func (c *connection) releaseRequests(answered int) {
	if answered > 0 {
		c.inflightRequests.Add(-int64(answered))
		c.kickReader()
	}
}

// holdFrame and releaseFrames count the frames the session holds.
func (c *connection) holdFrame() { c.heldFrames.Add(1) }

func (c *connection) releaseFrames(frames int) {
	if frames > 0 {
		c.heldFrames.Add(-int64(frames))
		c.kickReader()
	}
}

func (c *connection) kickReader() {
	select {
	case c.roomFreed <- struct{}{}:
	default:
	}
}

// awaitRoom blocks the reader until the session holds fewer than
// heldFramesMax frames and has credit for what the frame takes, or the
// connection closes (false). A wait is counted once, under the bound
// that made it.
func (c *connection) awaitRoom(credit readCredit) bool {
	counted := false
	for {
		full := c.fullBound(credit)
		if full == "" {
			break
		}
		if !counted && full != "held" {
			c.metrics.limitReached(full)
			counted = true
		}
		select {
		case <-c.roomFreed:
		case <-c.closing:
			return false
		case <-c.closed:
			return false
		}
	}
	c.inflightPublishes.Add(credit.publishes)
	c.inflightPublishBytes.Add(credit.publishBytes)
	c.inflightRequests.Add(credit.requests)
	return true
}

// fullBound names the bound that stops the frame now, or "". A publish
// always passes when nothing is in flight, so a frame larger than the
// byte credit still goes, alone.
func (c *connection) fullBound(credit readCredit) string {
	limits := &c.settings.limits
	if c.heldFrames.Load() >= heldFramesMax {
		return "held"
	}
	if credit.publishes > 0 {
		if inflight := c.inflightPublishes.Load(); inflight > 0 && inflight+credit.publishes > int64(limits.MaxPublishesInFlight) {
			return limitPublishes
		}
		if inflight := c.inflightPublishBytes.Load(); inflight > 0 && inflight+credit.publishBytes > limits.MaxPublishBytesInFlight {
			return limitPublishBytes
		}
	}
	if credit.requests > 0 && c.inflightRequests.Load() >= int64(limits.MaxRequestsInFlight) {
		return limitRequestsInFlight
	}
	return ""
}

// refuseFramesClientsMayNotSend is the client reader's tag check: a
// frame kind only a node sends (a server frame, or a node-to-node frame
// of replication or the peer handshake) ends the connection with
// protocol_violation on its header, before its body is read. Unknown tags
// pass, for the decoder to answer with unknown_frame.
func refuseFramesClientsMayNotSend(tag wire.Tag) error {
	if tag.Known() && !tag.ClientMaySend() {
		return fmt.Errorf("%w: a client may not send %s (%s)", errProtocolViolation, tag, tag.Name())
	}
	return nil
}

// readLoop is the reader goroutine: it sends every frame to session as a
// message, and a connectionEnded when the stream ends or breaks.
func (c *connection) readLoop(session *actor.PID) {
	reader := wire.NewReader(c.conn, wire.MaxHelloBodyBytes)
	reader.SetTrace(c.trace, c.id)
	reader.SetTagCheck(refuseFramesClientsMayNotSend)
	decoder := newInboundDecoder()
	authenticated := false
	for {
		tag, body, err := reader.Next()
		if err != nil {
			c.system.Root.Send(session, connectionEnded{err: err})
			break
		}
		c.heard.Store(true)
		message, credit, err := decoder.decode(tag, body)
		if err != nil {
			c.system.Root.Send(session, connectionEnded{err: err, tag: tag})
			break
		}
		if hello, ok := message.(inHello); ok && !authenticated {
			authenticated = true // one try: a second hello is the session's to refuse
			if !c.settings.internal {
				hello.identity, hello.authErr = c.settings.auth.authenticate(c.authContext, hello.frame.AuthToken)
			}
			c.cancelAuth()
			if hello.authErr == nil {
				reader.SetMaxBodyBytes(c.settings.maxBodyBytes)
			}
			message = hello
		}
		if !c.awaitRoom(credit) {
			// The session is closing: it stops once the reader reports.
			c.system.Root.Send(session, connectionEnded{err: net.ErrClosed})
			break
		}
		c.system.Root.Send(session, message)
	}
	c.drainThenClose()
}

// drainThenClose discards input until the client closes its side or the
// linger deadline passes, lets the writer send its last frames, then
// closes the socket.
func (c *connection) drainThenClose() {
	deadline := time.Now().Add(c.lingerDuration())
	_ = c.conn.SetReadDeadline(deadline)
	_, _ = io.Copy(io.Discard, c.conn)
	select {
	case <-c.writerDone:
	case <-time.After(time.Until(deadline)):
	}
	c.closeNow()
}

// writeLoop is the writer goroutine. failed learns of write errors.
func (c *connection) writeLoop(writer *wire.Writer, failed func(error)) {
	defer close(c.writerDone)
	var batch []wire.Frame
	for {
		select {
		case <-c.box.kick:
		case <-c.closed:
			return
		}
		var closing bool
		batch, closing = c.box.take(batch[:0])
		err := c.writeBatch(writer, batch, failed)
		clear(batch)
		c.box.written()
		if err != nil {
			if isTimeout(err) {
				c.metrics.limitReached(limitWriteTimeout)
				err = fmt.Errorf("%w: the client read nothing for %v", err, c.settings.limits.WriteTimeout)
			}
			failed(err)
			c.closeNow()
			return
		}
		if closing {
			c.halfClose()
			return
		}
	}
}

// deadlineWriter is the socket as the writer's wire.Writer sees it: each
// write(2) it makes (one per 64 KiB gathered, or one per larger frame)
// must finish within Limits.WriteTimeout, plus a second per MiB it holds,
// so a client that stops reading is cut off, and one that reads at least
// 1 MiB/s never is.
type deadlineWriter struct {
	conn    net.Conn
	timeout time.Duration
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout + time.Duration(len(p)>>20)*time.Second))
	return w.conn.Write(p)
}

// socketWriter is what the session's wire.Writer writes to.
func (c *connection) socketWriter() io.Writer {
	return deadlineWriter{conn: c.conn, timeout: c.settings.limits.WriteTimeout}
}

// isTimeout reports whether a write failed on its deadline.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// writeBatch writes and flushes one batch; the error is a broken socket.
func (c *connection) writeBatch(writer *wire.Writer, batch []wire.Frame, failed func(error)) error {
	for _, frame := range batch {
		if err := writer.WriteFrame(frame); err != nil {
			var frameErr *wire.FrameError
			if !errors.As(err, &frameErr) {
				return err
			}
			// An encoding refusal means the node built a frame over a
			// limit: a bug, reported; the stream itself is intact.
			failed(err)
		}
	}
	return writer.Flush()
}

// halfCloser is a socket that can send FIN and keep reading (TCP, TLS).
type halfCloser interface {
	CloseWrite() error
	SetReadDeadline(time.Time) error
}

// halfClose sends FIN after the last frame and lets the reader finish the
// close (see the file comment).
func (c *connection) halfClose() {
	if socket, ok := c.conn.(halfCloser); ok {
		_ = socket.CloseWrite()
		_ = socket.SetReadDeadline(time.Now().Add(c.lingerDuration()))
		return
	}
	c.closeNow()
}
