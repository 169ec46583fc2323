package actors

// A tiny wire client for the end-to-end tests: raw frames over real TCP,
// with helpers for the request/reply shapes. Frames that arrive while a
// test waits for another kind are kept in order and offered to later
// waits, so confirms and deliveries may interleave freely.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

type testClient struct {
	t       *testing.T
	conn    net.Conn
	reader  *wire.Reader
	writer  *wire.Writer
	backlog []wire.Frame
	nextID  uint64
	nextSeq uint64
}

func dialBroker(t *testing.T, b *Broker) *testClient {
	t.Helper()
	conn, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return &testClient{t: t, conn: conn, reader: wire.NewReader(conn, 0), writer: wire.NewWriter(conn, 0)}
}

// connect dials and completes hello.
func connect(t *testing.T, b *Broker) *testClient {
	t.Helper()
	c := dialBroker(t, b)
	c.hello("", "")
	return c
}

func (c *testClient) id() uint64 {
	c.nextID++
	return c.nextID
}

func (c *testClient) send(frames ...wire.Frame) {
	c.t.Helper()
	for _, frame := range frames {
		if err := c.writer.WriteFrame(frame); err != nil {
			c.t.Fatalf("write %T: %v", frame, err)
		}
	}
	if err := c.writer.Flush(); err != nil {
		c.t.Fatalf("flush: %v", err)
	}
}

// sendRaw writes bytes as they are (for malformed input).
func (c *testClient) sendRaw(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("raw write: %v", err)
	}
}

// read returns the next frame from the socket, or an error.
// testWait bounds every wait in these tests; it is a safety net against a
// hang, never a latency assertion.
const testWait = 30 * time.Second

func (c *testClient) read() (wire.Frame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(testWait))
	tag, body, err := c.reader.Next()
	if err != nil {
		return nil, err
	}
	return decodeOwned(tag, body)
}

// decodeOwned decodes a frame into bytes of its own: a decoded frame's
// byte fields (a delivery's payload) alias the body, which the reader
// overwrites at its next frame, and the test client keeps frames in its
// backlog across reads.
func decodeOwned(tag wire.Tag, body []byte) (wire.Frame, error) {
	return wire.DecodeFrame(tag, bytes.Clone(body))
}

// waitFor returns the first frame (backlog first) that match accepts.
func (c *testClient) waitFor(what string, match func(wire.Frame) bool) wire.Frame {
	c.t.Helper()
	for i, frame := range c.backlog {
		if match(frame) {
			c.backlog = append(c.backlog[:i:i], c.backlog[i+1:]...)
			return frame
		}
	}
	for {
		frame, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v (backlog %s)", what, err, describeFrames(c.backlog))
		}
		if match(frame) {
			return frame
		}
		c.backlog = append(c.backlog, frame)
	}
}

func describeFrames(frames []wire.Frame) string {
	text := ""
	for _, frame := range frames {
		text += fmt.Sprintf("%T%+v ", frame, frame)
	}
	return text
}

// reply waits for the reply to request id: the expected kind or an error.
func (c *testClient) reply(requestID uint64) wire.Frame {
	c.t.Helper()
	return c.waitFor(fmt.Sprintf("reply to request %d", requestID), func(frame wire.Frame) bool {
		return requestIDOf(frame) == requestID
	})
}

func requestIDOf(frame wire.Frame) uint64 {
	switch f := frame.(type) {
	case *wire.HelloOK:
		return 0
	case *wire.DeclareOK:
		return f.RequestID
	case *wire.DeclareOKMode:
		return f.RequestID
	case *wire.SubscribeOK:
		return f.RequestID
	case *wire.QueueInfoReply:
		return f.RequestID
	case *wire.QueueList:
		return f.RequestID
	case *wire.OK:
		return f.RequestID
	case *wire.Pong:
		return f.RequestID
	case *wire.ModeChanged:
		return f.RequestID
	case *wire.ErrorFrame:
		return f.RequestID
	}
	return 0
}

func (c *testClient) hello(token, previous string) *wire.HelloOK {
	c.t.Helper()
	return c.helloWith(token, previous, wire.ProtocolVersion)
}

// helloWith is hello offering the given protocol versions.
func (c *testClient) helloWith(token, previous string, versions ...uint16) *wire.HelloOK {
	c.t.Helper()
	c.send(&wire.Hello{Versions: versions, ClientName: "test", AuthToken: []byte(token),
		PreviousSession: previous})
	frame := c.waitFor("hello-ok", func(frame wire.Frame) bool {
		_, ok := frame.(*wire.HelloOK)
		_, isErr := frame.(*wire.ErrorFrame)
		return ok || isErr
	})
	helloOK, ok := frame.(*wire.HelloOK)
	if !ok {
		c.t.Fatalf("hello answered with %+v", frame)
	}
	return helloOK
}

// declare sends a declare and returns its reply frame.
func (c *testClient) declare(name string, mode wire.Mode, options wire.QueueOptions) wire.Frame {
	c.t.Helper()
	id := c.id()
	c.send(&wire.Declare{RequestID: id, Queue: name, Mode: mode, Options: options})
	return c.reply(id)
}

// mustDeclare declares and fails the test on an error reply.
func (c *testClient) mustDeclare(name string, mode wire.Mode, options wire.QueueOptions) wire.Frame {
	c.t.Helper()
	frame := c.declare(name, mode, options)
	if errFrame, ok := frame.(*wire.ErrorFrame); ok {
		c.t.Fatalf("declare %s: %v", name, errFrame)
	}
	return frame
}

// publish sends payloads in one frame and returns their sequence numbers.
func (c *testClient) publish(queueName string, payloads ...string) []uint64 {
	c.t.Helper()
	frame := &wire.Publish{Queue: []byte(queueName)}
	var seqs []uint64
	for _, payload := range payloads {
		c.nextSeq++
		seqs = append(seqs, c.nextSeq)
		frame.Messages = append(frame.Messages, wire.PublishMessage{Seq: c.nextSeq, Payload: []byte(payload)})
	}
	c.send(frame)
	return seqs
}

// outcome is what the node answered for one sequence number.
type outcome struct {
	confirmed bool
	boundary  wire.Boundary
	code      wire.Code
	message   string
}

// awaitOutcomes waits until every seq is confirmed or rejected.
func (c *testClient) awaitOutcomes(seqs []uint64) map[uint64]outcome {
	c.t.Helper()
	want := make(map[uint64]bool, len(seqs))
	for _, seq := range seqs {
		want[seq] = true
	}
	got := make(map[uint64]outcome, len(seqs))
	for len(got) < len(want) {
		frame := c.waitFor("confirms", func(frame wire.Frame) bool {
			switch frame.(type) {
			case *wire.Confirm, *wire.NegativeConfirm:
				return true
			}
			return false
		})
		switch f := frame.(type) {
		case *wire.Confirm:
			for _, r := range f.Ranges {
				for seq := r.First; seq <= r.Last; seq++ {
					if !want[seq] {
						c.t.Fatalf("confirm for seq %d which was not published in this wait", seq)
					}
					got[seq] = outcome{confirmed: true, boundary: r.Boundary}
				}
			}
		case *wire.NegativeConfirm:
			for _, r := range f.Ranges {
				for seq := r.First; seq <= r.Last; seq++ {
					got[seq] = outcome{code: r.Code, message: r.Message}
				}
			}
		}
	}
	return got
}

// mustConfirm publishes and requires every message confirmed at boundary
// or a stronger one.
func (c *testClient) mustConfirm(queueName string, boundary wire.Boundary, payloads ...string) {
	c.t.Helper()
	seqs := c.publish(queueName, payloads...)
	for seq, out := range c.awaitOutcomes(seqs) {
		// A buffered queue confirms at written, or at durable when the
		// record was synced by then (docs/protocol.md 4.3): at least.
		if !out.confirmed || out.boundary < boundary {
			c.t.Fatalf("seq %d: %+v, want confirmed at %s or stronger", seq, out, boundary)
		}
	}
}

func (c *testClient) subscribe(queueName string, prefetch uint32) uint64 {
	c.t.Helper()
	id := c.id()
	c.send(&wire.Subscribe{RequestID: id, Queue: queueName, Prefetch: prefetch})
	frame := c.reply(id)
	ok, isOK := frame.(*wire.SubscribeOK)
	if !isOK {
		c.t.Fatalf("subscribe %s: %+v", queueName, frame)
	}
	return ok.SubscriptionID
}

// deliveries waits for n deliveries on a subscription.
func (c *testClient) deliveries(subscriptionID uint64, n int) []wire.Delivery {
	c.t.Helper()
	var out []wire.Delivery
	for len(out) < n {
		frame := c.waitFor(fmt.Sprintf("%d deliveries (have %d)", n, len(out)), func(frame wire.Frame) bool {
			deliver, ok := frame.(*wire.Deliver)
			return ok && deliver.SubscriptionID == subscriptionID
		})
		out = append(out, frame.(*wire.Deliver).Deliveries...)
	}
	if len(out) > n {
		c.t.Fatalf("got %d deliveries, want %d", len(out), n)
	}
	return out
}

// nextDeliver waits for the next deliver frame of a subscription.
func (c *testClient) nextDeliver(subscriptionID uint64) []wire.Delivery {
	c.t.Helper()
	return c.waitFor("a delivery", isDeliverFor(subscriptionID)).(*wire.Deliver).Deliveries
}

// quietFor reports whether nothing arrives for d (used to check that
// prefetch holds back deliveries; the wait is a bound, not a measurement).
func (c *testClient) quietFor(d time.Duration, match func(wire.Frame) bool) bool {
	c.t.Helper()
	for _, frame := range c.backlog {
		if match(frame) {
			return false
		}
	}
	deadline := time.Now().Add(d)
	for {
		_ = c.conn.SetReadDeadline(deadline)
		tag, body, err := c.reader.Next()
		if err != nil {
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				// The reader's error is final; start a fresh one on the same
				// stream (the timeout hit between frames or inside one).
				c.reader = wire.NewReader(c.conn, 0)
				return true
			}
			c.t.Fatalf("reading: %v", err)
		}
		frame, err := decodeOwned(tag, body)
		if err != nil {
			c.t.Fatalf("decode: %v", err)
		}
		if match(frame) {
			c.backlog = append(c.backlog, frame)
			return false
		}
		c.backlog = append(c.backlog, frame)
	}
}

func (c *testClient) ack(subscriptionID uint64, tags ...uint64) {
	c.send(&wire.Ack{Settle: wire.Settle{SubscriptionID: subscriptionID, DeliveryTags: tags}})
}

func (c *testClient) info(queueName string) wire.QueueInfo {
	c.t.Helper()
	id := c.id()
	c.send(&wire.GetQueueInfo{RequestID: id, Queue: queueName})
	frame := c.reply(id)
	reply, ok := frame.(*wire.QueueInfoReply)
	if !ok {
		c.t.Fatalf("info %s: %+v", queueName, frame)
	}
	return reply.Info
}

// settledInfo asks for a queue's info until the queue answers with it: a
// queue that is restarting answers unavailable (its counts went with the
// closed instance) and is asked again, for at most testWait.
func (c *testClient) settledInfo(queueName string) wire.QueueInfo {
	c.t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		id := c.id()
		c.send(&wire.GetQueueInfo{RequestID: id, Queue: queueName})
		switch frame := c.reply(id).(type) {
		case *wire.QueueInfoReply:
			return frame.Info
		case *wire.ErrorFrame:
			if frame.Code != wire.CodeUnavailable || time.Now().After(deadline) {
				c.t.Fatalf("info %s: %+v", queueName, frame)
			}
			time.Sleep(2 * time.Millisecond)
		default:
			c.t.Fatalf("info %s: %+v", queueName, frame)
		}
	}
}

// expectClosed reads until the node closes the connection and returns the
// error frames seen on the way.
func (c *testClient) expectClosed() []*wire.ErrorFrame {
	c.t.Helper()
	var errs []*wire.ErrorFrame
	for _, frame := range c.backlog {
		if e, ok := frame.(*wire.ErrorFrame); ok {
			errs = append(errs, e)
		}
	}
	for {
		frame, err := c.read()
		if err != nil {
			if errors.Is(err, io.EOF) || isReset(err) {
				return errs
			}
			c.t.Fatalf("waiting for the node to close: %v", err)
		}
		if e, ok := frame.(*wire.ErrorFrame); ok {
			errs = append(errs, e)
		}
	}
}

func isReset(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && !opErr.Timeout()
}

// startBroker starts a node on a temporary directory and a free port.
func startBroker(t *testing.T, mutate func(*Config)) *Broker {
	t.Helper()
	config := testConfig(t, t.TempDir())
	if mutate != nil {
		mutate(&config)
	}
	b, err := Start(config)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	closeOnCleanup(t, b)
	return b
}

// closeOnCleanup closes the broker when the test ends and fails the test
// when Close reports an error: a shutdown that is not clean is a defect.
func closeOnCleanup(t testing.TB, b *Broker) {
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
}

func testConfig(t *testing.T, dir string) Config {
	config := DefaultConfig()
	config.DataDir = dir
	config.ListenAddr = "127.0.0.1:0"
	config.FS = vfs.OS
	if os.Getenv("FIBRIL_TEST_LOG") != "" {
		config.Logger = testLogger(t)
	}
	return config
}
