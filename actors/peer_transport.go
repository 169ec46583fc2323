package actors

// peerTransport owns one peer-link socket once its handshake is done
// (peer_handshake.go): a reader goroutine that decodes every frame and
// hands it to the link's handler, and a writer goroutine that drains a
// queue of frames already encoded, writing each batch with one writev.
//
// Frames are encoded by whoever sends them, on the sender's goroutine, so
// a push's records are copied once, out of the log's tail cache, into the
// frame that goes on the wire, and the queue counts exact bytes. The
// queue is bounded in bytes (peerQueueBytesMax): a send that would pass it
// is refused with errPeerQueueFull and the sender (a follower link) backs
// off; nothing blocks.
//
// Keepalive: the writer sends a ping when it wrote nothing for
// peerKeepaliveInterval; the reader gives up on a link that stays silent
// for peerIdleTimeout (a pong, or any frame, counts), so a dead peer is
// noticed without waiting for TCP.
//
// Closing: close(err) closes the socket at once (peer links carry no
// final error frame worth waiting for: the other side reconnects); both
// goroutines then end and done is closed. The first error is kept.
//
// Invariant: queuedBytes == the sum of len over queued, and
// queuedBytes <= peerQueueBytesMax.

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

const (
	// peerQueueBytesMax bounds the encoded frames waiting for one link's
	// writer: a follower link keeps at most its window in flight, which is
	// well below this.
	peerQueueBytesMax = 64 << 20
	// peerMaxBodyBytes is the largest frame body a node accepts on a peer
	// link: a page of 16 MiB of records plus its fields.
	peerMaxBodyBytes = 32 << 20
	// peerKeepaliveInterval is how long a link's writer stays silent
	// before it pings.
	peerKeepaliveInterval = 250 * time.Millisecond
	// peerIdleTimeout is how long a link's reader waits for any frame.
	peerIdleTimeout = 2 * time.Second
)

var (
	// errPeerQueueFull refuses a send that would pass the queue's bound.
	errPeerQueueFull = errors.New("actors: peer link send queue full")
	// errPeerClosed refuses a send on a closed link.
	errPeerClosed = errors.New("actors: peer link closed")
)

// peerFrameHandler handles one received frame on the reader goroutine;
// body is valid only during the call. An error closes the link.
type peerFrameHandler func(tag wire.Tag, body []byte) error

type peerTransport struct {
	conn   net.Conn
	reader *wire.Reader   // from the handshake, which may have read ahead
	remote wire.PeerHello // the other side's identity, from the handshake

	mu          sync.Mutex
	queued      [][]byte
	queuedBytes int
	closed      bool
	err         error
	kick        chan struct{} // capacity 1

	closeOnce sync.Once
	done      chan struct{} // closed when the socket is closed and both goroutines ended
	ended     sync.WaitGroup
	routines  *runtime.TaskGroup // the owner's count of peer goroutines, if any
}

// newPeerTransport wraps a socket whose handshake is done. routines, when
// not nil, counts the transport's goroutines until they end.
func newPeerTransport(conn net.Conn, reader *wire.Reader, remote wire.PeerHello, routines *runtime.TaskGroup) *peerTransport {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetNoDelay(true)
	}
	return &peerTransport{conn: conn, reader: reader, remote: remote, kick: make(chan struct{}, 1),
		done: make(chan struct{}), routines: routines}
}

// send queues one encoded frame (envelope included) for the writer.
func (t *peerTransport) send(frame []byte) error {
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return errPeerClosed
	case t.queuedBytes+len(frame) > peerQueueBytesMax:
		t.mu.Unlock()
		return errPeerQueueFull
	}
	t.queued = append(t.queued, frame)
	t.queuedBytes += len(frame)
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
	return nil
}

// sendFrame encodes frame and queues it.
func (t *peerTransport) sendFrame(frame wire.Frame) error { return t.send(frame.Encode(nil)) }

// alive reports whether the link is still open.
func (t *peerTransport) alive() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.closed
}

// start runs the reader and writer goroutines; handle sees every frame.
// onEnd runs once, after both ended and the socket is closed, with the
// first error.
func (t *peerTransport) start(handle peerFrameHandler, onEnd func(error)) {
	if t.routines != nil {
		t.routines.Add(1)
	}
	t.ended.Add(2)
	go func() { defer t.ended.Done(); t.readLoop(handle) }()
	go func() { defer t.ended.Done(); t.writeLoop() }()
	go func() {
		t.ended.Wait()
		close(t.done)
		if onEnd != nil {
			onEnd(t.closeError())
		}
		if t.routines != nil {
			t.routines.Done()
		}
	}()
}

// close closes the link; err (nil for a deliberate close) is kept if it is
// the first.
func (t *peerTransport) close(err error) {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		t.err = err
		t.queued, t.queuedBytes = nil, 0
	}
	t.mu.Unlock()
	t.closeOnce.Do(func() { _ = t.conn.Close() })
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *peerTransport) closeError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

func (t *peerTransport) readLoop(handle peerFrameHandler) {
	reader := t.reader
	for {
		_ = t.conn.SetReadDeadline(time.Now().Add(peerIdleTimeout))
		tag, body, err := reader.Next()
		if err != nil {
			t.close(fmt.Errorf("peer link to %s: read: %w", t.remote.NodeID, err))
			return
		}
		switch tag {
		case wire.TagPing:
			var ping wire.Ping
			if err := ping.Decode(body); err != nil {
				t.close(err)
				return
			}
			_ = t.sendFrame(&wire.Pong{RequestID: ping.RequestID})
			continue
		case wire.TagPong:
			continue
		}
		if err := handle(tag, body); err != nil {
			t.close(fmt.Errorf("peer link to %s: %s: %w", t.remote.NodeID, tag, err))
			return
		}
	}
}

func (t *peerTransport) writeLoop() {
	keepalive := time.NewTimer(peerKeepaliveInterval)
	defer keepalive.Stop()
	var pings uint64
	for {
		select {
		case <-t.kick:
		case <-keepalive.C:
			pings++
			_ = t.sendFrame(&wire.Ping{RequestID: pings})
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		batch := net.Buffers(t.queued)
		t.queued, t.queuedBytes = nil, 0
		t.mu.Unlock()
		if len(batch) > 0 {
			if _, err := batch.WriteTo(t.conn); err != nil {
				t.close(fmt.Errorf("peer link to %s: write: %w", t.remote.NodeID, err))
				return
			}
		}
		keepalive.Reset(peerKeepaliveInterval)
	}
}
