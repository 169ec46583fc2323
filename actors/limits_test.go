package actors

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// The reader's credit: which bound stops a frame, from the counters alone.
func TestReadCreditBounds(t *testing.T) {
	limits, err := Limits{MaxPublishBytesInFlight: 1000, MaxPublishesInFlight: 10, MaxRequestsInFlight: 2}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := &connection{settings: connectionSettings{limits: limits}, roomFreed: make(chan struct{}, 1)}
	publish := func(messages, bytes int64) readCredit { return readCredit{publishes: messages, publishBytes: bytes} }
	// Nothing in flight: a frame over the byte credit still goes, alone.
	if full := c.fullBound(publish(1, 5000)); full != "" {
		t.Fatalf("an oversized frame with nothing in flight: %q", full)
	}
	c.inflightPublishes.Store(1)
	c.inflightPublishBytes.Store(5000)
	if full := c.fullBound(publish(1, 10)); full != limitPublishBytes {
		t.Fatalf("over the byte credit: %q", full)
	}
	c.returnCredit(publishCredit{messages: 1, bytes: 5000})
	c.inflightPublishes.Store(9)
	c.inflightPublishBytes.Store(100)
	if full := c.fullBound(publish(2, 10)); full != limitPublishes {
		t.Fatalf("over the message credit: %q", full)
	}
	if full := c.fullBound(publish(1, 10)); full != "" {
		t.Fatalf("within both: %q", full)
	}
	if full := c.fullBound(readCredit{}); full != "" {
		t.Fatalf("a frame that takes nothing: %q", full)
	}
	c.inflightRequests.Store(2)
	if full := c.fullBound(readCredit{requests: 1}); full != limitRequestsInFlight {
		t.Fatalf("over the request credit: %q", full)
	}
	c.releaseRequests(1)
	if full := c.fullBound(readCredit{requests: 1}); full != "" {
		t.Fatalf("after an answer: %q", full)
	}
	c.heldFrames.Store(heldFramesMax)
	if full := c.fullBound(readCredit{}); full != "held" {
		t.Fatalf("held frames: %q", full)
	}
	if _, err := (Limits{MaxPublishesInFlight: publishCreditMessages + 1}).withDefaults(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("more publish credit than a queue's wait holds: %v", err)
	}
	if _, err := (Limits{MaxQueues: -1}).withDefaults(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a negative limit: %v", err)
	}
}

// The outbox's accounting: the session bound counts what waits behind
// the batch being written, the node bound everything, and every byte
// counted comes back when written or discarded.
func TestOutboxBytesAccounting(t *testing.T) {
	var total atomic.Int64
	delivery := func(payload int) wire.Frame {
		return &wire.Deliver{SubscriptionID: 1, Deliveries: []wire.Delivery{{DeliveryTag: 1, Payload: make([]byte, payload)}}}
	}
	box := newOutbox(outboxBounds{maxBytes: 100 << 10, maxTotalBytes: 10 << 20, total: &total})
	if err := box.push(delivery(500 << 10)); err != nil {
		t.Fatalf("a burst into an empty outbox: %v", err)
	}
	frames, _ := box.take(nil)
	if len(frames) != 1 || total.Load() < 500<<10 {
		t.Fatalf("taken %d frames, total %d", len(frames), total.Load())
	}
	if err := box.push(delivery(60 << 10)); err != nil {
		t.Fatalf("behind the batch being written, under the bound: %v", err)
	}
	if err := box.push(delivery(60 << 10)); !errors.Is(err, errOutboxFull) {
		t.Fatalf("behind the batch being written, over the bound: %v", err)
	}
	box.written()
	box.discard()
	if total.Load() != 0 {
		t.Fatalf("%d bytes still counted after written and discard", total.Load())
	}

	// The node's bound: a session holding its fair share is refused once
	// the node is over; one holding less is not.
	total.Store(10 << 20)
	big := newOutbox(outboxBounds{maxBytes: 64 << 20, maxTotalBytes: 10 << 20, total: &total})
	if err := big.push(delivery(2 << 20)); err != nil {
		t.Fatalf("a session holding nothing: %v", err)
	}
	if err := big.push(delivery(1 << 10)); !errors.Is(err, errOutboxNodeBytes) {
		t.Fatalf("a session over its fair share while the node is over: %v", err)
	}
	small := newOutbox(outboxBounds{maxBytes: 64 << 20, maxTotalBytes: 10 << 20, total: &total})
	if err := small.push(delivery(1 << 10)); err != nil {
		t.Fatalf("a session under its fair share: %v", err)
	}
}

// The connection limits, per node and per address, and a slot given back
// twice counts once.
func TestConnectionLimiter(t *testing.T) {
	limiter := newConnectionLimiter(Limits{MaxConnections: 3, MaxConnectionsPerAddress: 2})
	a := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}
	b := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 1}
	first, _ := limiter.acquire(a)
	second, _ := limiter.acquire(&net.TCPAddr{IP: a.IP, Port: 2})
	if _, refused := limiter.acquire(a); refused != limitConnectionsAddress {
		t.Fatalf("a third from one address: %q", refused)
	}
	third, _ := limiter.acquire(b)
	if _, refused := limiter.acquire(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 3)}); refused != limitConnectionsNode {
		t.Fatalf("a fourth on the node: %q", refused)
	}
	first.release()
	first.release()
	if limiter.openConnections() != 2 {
		t.Fatalf("%d open after one release (twice)", limiter.openConnections())
	}
	if _, refused := limiter.acquire(a); refused != "" {
		t.Fatalf("after a release: %q", refused)
	}
	second.release()
	third.release()
}
