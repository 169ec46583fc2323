package client

// One connection to one node, and the goroutine pair that serves it.
//
//   - The writer goroutine owns the socket's write side and the wire.Writer.
//     It takes frames from a bounded outbox, packs publishes to the same
//     queue into one frame, writes settle batches when kicked, and flushes
//     whenever the outbox runs dry, so a burst leaves in few writes.
//   - The reader goroutine owns the socket's read side, the wire.Reader and
//     the table of this connection's subscriptions. It completes requests
//     and publishes and hands deliveries to their subscriptions.
//
// Whoever first sees the connection end (reader, writer, keepalive, Close)
// calls fail: it records the reason, closes done and the socket, and fails
// every pending request and publish at once with the reason. Close goes
// through the writer first (closeGracefully), so the settles already made
// leave before the socket closes. Frames still
// in the outbox are failed by the writer as it exits, behind a gate that
// stops new ones from entering, so nothing sent to a dead connection waits.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/wire"
)

// outbound is one item of a connection's outbox.
type outbound struct {
	frame       wire.Frame     // a request, pong, release or error frame
	publish     *PublishFuture // a message to publish
	unsubscribe *binding       // write this binding's pending settles before frame
	closeAfter  error          // fail the connection with this after writing frame
}

type conn struct {
	client      *Client
	link        *link
	netConn     net.Conn
	session     Session
	peerMaxBody uint32 // the node's body limit, from hello-ok
	// fences: the session speaks protocol version 3, so a refused publish
	// fences its queue (fence.go); fenced holds the fenced queues, under
	// Client.lanes.mu.
	fences bool
	fenced map[string]bool

	outbox     chan outbound
	settleKick chan struct{} // capacity 1: some binding has settles to write
	gate       sync.RWMutex  // held shared while sending to the outbox
	gateClosed bool          // guarded by gate: the outbox takes nothing more
	pending    *pendingTable

	settleMu sync.Mutex
	dirty    []*binding // bindings with settles to write; guarded by settleMu

	done       chan struct{} // closed by fail
	failOnce   sync.Once
	failure    error // set once, before done is closed
	readerDone chan struct{}
	writerDone chan struct{}

	reading readerState // owned by the reader goroutine
	writing writerState // owned by the writer goroutine

	// heard counts the bytes read from the node: the keepalive takes any
	// of them, not only its pong, as a sign the node is there.
	heard *atomic.Uint64
}

// countingReader counts the bytes its reads return into n.
type countingReader struct {
	src io.Reader
	n   *atomic.Uint64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.src.Read(p)
	if n > 0 {
		r.n.Add(uint64(n))
	}
	return n, err
}

// connect dials address, exchanges hello and starts the goroutine pair.
func (c *Client) connect(ctx context.Context, l *link, address, previousSession string) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.options.DialTimeout)
	defer cancel()
	netConn, err := c.options.Dialer(ctx, address)
	if err != nil {
		return nil, err
	}
	interrupt := context.AfterFunc(ctx, func() { netConn.SetDeadline(time.Unix(1, 0)) })
	if deadline, ok := ctx.Deadline(); ok {
		netConn.SetDeadline(deadline)
	}
	heard := new(atomic.Uint64)
	reader := wire.NewReader(countingReader{src: netConn, n: heard}, c.options.MaxBodyBytes)
	writer := wire.NewWriter(netConn, 0)
	helloOK, err := c.hello(reader, writer, previousSession)
	if !interrupt() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		netConn.Close()
		if c.options.TLS != nil {
			err = explainTLS(err, address)
		}
		return nil, fmt.Errorf("hello with %s: %w", address, err)
	}
	netConn.SetDeadline(time.Time{})
	writer.SetMaxBodyBytes(helloOK.MaxBodyBytes)
	cn := &conn{
		client: c, link: l, netConn: netConn,
		session: Session{
			Address: address, NodeID: helloOK.NodeID, SessionID: helloOK.SessionID,
			Resumed:       helloOK.Session == wire.SessionResumedAfterRestart,
			ServerVersion: helloOK.ServerVersion, MaxBodyBytes: maxBody(helloOK.MaxBodyBytes),
		},
		peerMaxBody: maxBody(helloOK.MaxBodyBytes),
		fences:      helloOK.Version >= 3,
		outbox:      make(chan outbound, c.options.WriteQueueLength),
		settleKick:  make(chan struct{}, 1),
		pending:     newPendingTable(),
		done:        make(chan struct{}),
		readerDone:  make(chan struct{}),
		writerDone:  make(chan struct{}),
		heard:       heard,
	}
	cn.reading = readerState{reader: reader, bindings: make(map[uint64]*binding)}
	cn.writing = writerState{writer: writer}
	go cn.readLoop()
	go cn.writeLoop()
	return cn, nil
}

// explainTLS explains an error of the hello's first read that is a TLS
// failure: under TLS 1.3 a node's refusal of the client's certificate
// arrives there, after the handshake. Other errors come back unchanged.
func explainTLS(err error, address string) error {
	var alert *net.OpError
	if !errors.As(err, &alert) || alert.Op != "remote error" {
		return err // only an alert from the node is a TLS verdict here
	}
	var handshake *tlsconfig.HandshakeError
	if explained := tlsconfig.ExplainHandshakeError(err, address, false); errors.As(explained, &handshake) {
		return explained
	}
	return err
}

// spokenVersions lists every protocol version the client speaks, newest
// first, so a node that does not speak the newest chooses the next one.
func spokenVersions() []uint16 {
	versions := make([]uint16, 0, wire.ProtocolVersion-wire.MinProtocolVersion+1)
	for version := wire.ProtocolVersion; version >= wire.MinProtocolVersion; version-- {
		versions = append(versions, version)
	}
	return versions
}

func maxBody(limit uint32) uint32 {
	if limit == 0 {
		return wire.DefaultMaxBodyBytes
	}
	return limit
}

// hello sends hello and reads the node's answer.
func (c *Client) hello(reader *wire.Reader, writer *wire.Writer, previousSession string) (*wire.HelloOK, error) {
	hello := &wire.Hello{
		Versions: spokenVersions(), ClientName: c.options.ClientName,
		AuthToken: c.options.AuthToken, PreviousSession: previousSession, MaxBodyBytes: c.options.MaxBodyBytes,
	}
	if err := writer.WriteFrame(hello); err != nil {
		return nil, err
	}
	if err := writer.Flush(); err != nil {
		return nil, err
	}
	tag, body, err := reader.Next()
	if err != nil {
		return nil, err
	}
	switch tag {
	case wire.TagHelloOK:
		helloOK := new(wire.HelloOK)
		if err := helloOK.Decode(body); err != nil {
			return nil, err
		}
		if helloOK.Version < wire.MinProtocolVersion || helloOK.Version > wire.ProtocolVersion {
			return nil, fmt.Errorf("node chose protocol version %d, this client speaks %d to %d", helloOK.Version,
				wire.MinProtocolVersion, wire.ProtocolVersion)
		}
		return helloOK, nil
	case wire.TagError:
		refusal := new(wire.ErrorFrame)
		if err := refusal.Decode(body); err != nil {
			return nil, err
		}
		return nil, &ServerError{Code: refusal.Code, Message: refusal.Message}
	}
	return nil, fmt.Errorf("node answered hello with %s (%s)", tag, tag.Name())
}

// isDead reports whether the connection has ended.
func (c *conn) isDead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// fail ends the connection with err (the first call wins): pending
// requests and publishes fail at once with it.
func (c *conn) fail(err error) {
	c.failOnce.Do(func() {
		c.failure = err
		close(c.done)
		c.netConn.Close()
		requests, publishes := c.pending.failAll(err)
		for _, request := range requests {
			request.done <- reply{err: err}
		}
		slices.SortFunc(publishes, func(a, b *PublishFuture) int { return compareUint64(a.seq, b.seq) })
		publishes = c.client.splitRetries(c.link, publishes, err)
		for _, future := range publishes {
			c.client.finishPublish(future, Confirm{Err: err})
		}
		c.client.connectionEnded(c)
	})
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// closeGrace bounds how long Close waits for the writer to send the
// settles already made before it cuts the connection.
const closeGrace = time.Second

// closeGracefully lets the writer send what is queued and every settle
// already made, then ends the connection with reason; after closeGrace it
// ends it regardless (a node that stopped reading must not hold Close).
func (c *conn) closeGracefully(reason error) {
	c.gate.RLock()
	queued := false
	if !c.gateClosed {
		select {
		case c.outbox <- outbound{closeAfter: reason}:
			queued = true
		default:
		}
	}
	c.gate.RUnlock()
	if queued {
		timer := time.NewTimer(closeGrace)
		select {
		case <-c.done:
		case <-timer.C:
		}
		timer.Stop()
	}
	c.fail(reason)
}

// enqueue hands an item to the writer, waiting for room in the outbox.
func (c *conn) enqueue(ctx context.Context, item outbound) error {
	return c.enqueueUntil(ctx, item, nil)
}

// enqueueUntil is enqueue whose wait also ends, with errStopped, when stop
// closes (a publish's done: its deadline passed).
func (c *conn) enqueueUntil(ctx context.Context, item outbound, stop <-chan struct{}) error {
	c.gate.RLock()
	defer c.gate.RUnlock()
	if c.gateClosed {
		return c.failure
	}
	select {
	case c.outbox <- item:
		return nil
	case <-c.done:
		return c.failure
	case <-stop:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request sends a request and waits for its answer. A redirect is returned
// in the reply for the caller to follow.
func (c *conn) request(ctx context.Context, call call) (reply, error) {
	id := c.client.nextRequestID.Add(1)
	waiting := &pendingRequest{done: make(chan reply, 1), subscription: call.subscription, unsubscribe: call.unsubscribe}
	if err := c.pending.addRequest(id, waiting); err != nil {
		return reply{}, err
	}
	sendCtx := ctx
	if call.unsubscribe != nil {
		sendCtx = context.Background() // always say goodbye; only the wait is bounded
	}
	if err := c.enqueue(sendCtx, outbound{frame: call.build(id), unsubscribe: call.unsubscribe}); err != nil {
		if c.pending.takeRequest(id) == nil {
			answer := <-waiting.done // answered or failed meanwhile
			return answer, answer.err
		}
		return reply{}, err
	}
	select {
	case answer := <-waiting.done:
		return answer, answer.err
	case <-ctx.Done():
		if c.pending.takeRequest(id) == nil {
			answer := <-waiting.done // the answer won the race: use it
			return answer, answer.err
		}
		return reply{}, ctx.Err()
	}
}

// markDirty queues a binding whose settles the writer should send, and
// kicks the writer without ever blocking.
func (c *conn) markDirty(b *binding) {
	c.settleMu.Lock()
	if !b.dirty {
		b.dirty = true
		c.dirty = append(c.dirty, b)
	}
	c.settleMu.Unlock()
	select {
	case c.settleKick <- struct{}{}:
	default:
	}
}

// takeDirty returns the bindings with settles to write, into dst.
func (c *conn) takeDirty(dst []*binding) []*binding {
	c.settleMu.Lock()
	defer c.settleMu.Unlock()
	for _, b := range c.dirty {
		b.dirty = false
		dst = append(dst, b)
	}
	clear(c.dirty)
	c.dirty = c.dirty[:0]
	return dst
}

// isFrameError reports whether err is a codec refusal (the frame could not
// be encoded) rather than a failed write.
func isFrameError(err error) bool {
	var frameError *wire.FrameError
	return errors.As(err, &frameError)
}
