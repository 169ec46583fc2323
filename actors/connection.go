package actors

// connection owns one client socket and its two goroutines.
//
//   - The reader goroutine reads frames with a wire.Reader, turns each into a
//     message (inbound.go) and sends it to the session actor. It is the only
//     reader of the socket. Before it reads past a publish it waits for
//     publish credit, so a client that publishes faster than the queue
//     confirms is slowed by TCP, not buffered without end; and before it
//     sends any frame it waits while the session holds heldFramesMax frames
//     behind a request that must be answered first (session.go, ordering),
//     so a client that pipelines without end behind a declare is slowed the
//     same way. It marks every frame heard, for the keepalive.
//   - The writer goroutine drains the outbox (outbox.go) and is the only
//     writer of the socket.
//
// Closing follows one order so a final error frame reaches the client:
// the writer flushes its last frames and half-closes the socket (FIN); the
// reader keeps reading, discarding, until the client closes its side or a
// linger deadline passes, and only then closes the socket. Reading on
// matters: closing a socket with unread input makes the kernel send a reset,
// which can destroy the error frame before the client reads it.

import (
	"errors"
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

// publishCreditMessages bounds the publishes a session has in flight
// (sent to partitions, not yet confirmed or rejected).
const publishCreditMessages = 1 << 15

// heldFramesMax bounds the client frames a session holds behind a request
// whose answer they must follow.
const heldFramesMax = 1024

type connection struct {
	id     uint64
	conn   net.Conn
	box    *outbox
	trace  *wire.TraceSwitch
	system *actor.ActorSystem

	maxBodyBytes uint32 // the node's limit for inbound bodies

	// inflightPublishes is publish credit: the reader adds before sending a
	// publish, the session subtracts when it is answered.
	inflightPublishes atomic.Int64
	// heldFrames counts the frames the session holds (it adds and
	// subtracts; the reader waits while it is at heldFramesMax).
	heldFrames atomic.Int64
	roomFreed  chan struct{} // capacity 1; kicks a waiting reader
	// heard is set by the reader on every frame and cleared by the
	// session's keepalive check.
	heard atomic.Bool

	linger      atomic.Int64 // nanoseconds; closeLinger unless set shorter
	closingOnce sync.Once
	closing     chan struct{} // closed when the session decided to close
	closeOnce   sync.Once
	closed      chan struct{} // closed when the socket is closed
	writerDone  chan struct{} // closed when the writer goroutine returned
}

func newConnection(id uint64, conn net.Conn, system *actor.ActorSystem, maxBodyBytes uint32,
	trace *wire.TraceSwitch) *connection {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetNoDelay(true) // Go's default, stated: replies must not wait for Nagle
	}
	return &connection{
		id: id, conn: conn, box: newOutbox(), trace: trace, system: system,
		maxBodyBytes: maxBodyBytes,
		roomFreed:    make(chan struct{}, 1),
		closing:      make(chan struct{}),
		closed:       make(chan struct{}),
		writerDone:   make(chan struct{}),
	}
}

// closeAfter queues last frames (an error, typically), then closes the
// connection in the order the file comment describes. The reader stops
// waiting for publish credit at once.
func (c *connection) closeAfter(frames ...wire.Frame) {
	c.closingOnce.Do(func() { close(c.closing) })
	c.box.closeAfter(frames...)
}

func (c *connection) lingerDuration() time.Duration {
	if linger := c.linger.Load(); linger > 0 {
		return time.Duration(linger)
	}
	return closeLinger
}

// closeNow closes the socket at once (shutdown, write failure).
func (c *connection) closeNow() {
	c.closeOnce.Do(func() {
		_ = c.conn.Close()
		close(c.closed)
	})
}

// returnCredit gives back publish credit and wakes a waiting reader.
func (c *connection) returnCredit(messages int) {
	if messages == 0 {
		return
	}
	c.inflightPublishes.Add(-int64(messages))
	c.kickReader()
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
// heldFramesMax frames and has credit for publishes more messages (0 for
// a frame that is not a publish), or the connection closes (false).
func (c *connection) awaitRoom(publishes int) bool {
	for !c.hasRoom(publishes) {
		select {
		case <-c.roomFreed:
		case <-c.closing:
			return false
		case <-c.closed:
			return false
		}
	}
	if publishes > 0 {
		c.inflightPublishes.Add(int64(publishes))
	}
	return true
}

func (c *connection) hasRoom(publishes int) bool {
	if c.heldFrames.Load() >= heldFramesMax {
		return false
	}
	inflight := c.inflightPublishes.Load()
	return publishes == 0 || inflight <= 0 || inflight+int64(publishes) <= publishCreditMessages
}

// readLoop is the reader goroutine: it sends every frame to session as a
// message, and a connectionEnded when the stream ends or breaks.
func (c *connection) readLoop(session *actor.PID) {
	reader := wire.NewReader(c.conn, c.maxBodyBytes)
	reader.SetTrace(c.trace, c.id)
	decoder := newInboundDecoder()
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
		if !c.awaitRoom(credit) {
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
		for _, frame := range batch {
			if err := writer.WriteFrame(frame); err != nil {
				var frameErr *wire.FrameError
				if !errors.As(err, &frameErr) {
					failed(err)
					c.closeNow()
					return
				}
				// An encoding refusal means the node built a frame over a
				// limit: a bug, reported; the stream itself is intact.
				failed(err)
			}
		}
		clear(batch)
		if err := writer.Flush(); err != nil {
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

// halfClose sends FIN after the last frame and lets the reader finish the
// close (see the file comment).
func (c *connection) halfClose() {
	if tcp, ok := c.conn.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
		_ = tcp.SetReadDeadline(time.Now().Add(c.lingerDuration()))
		return
	}
	c.closeNow()
}
