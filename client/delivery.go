package client

// Deliveries and their settles. A delivery names its binding (the
// subscription on the connection it came on) and its tag. Settles are
// fire-and-forget on the wire; the SDK gathers them per binding and kicks
// the connection's writer, which sends everything gathered since its last
// turn as one frame per kind. Nothing waits on a timer: a settle leaves as
// soon as the writer is free, and settles made while it is busy share a
// frame. AckSync is the exception: it is a request (FAK2), answered once
// the ack applied.
//
// A delivery's state moves once, from held to one of:
//
//	settled    the application settled it (Ack, Nack, Release, Discard, AckSync)
//	expired    its lease expired at the node: the node delivers the message
//	           again and refuses a settle of this tag, so the SDK refuses it
//	           at once with ErrLeaseExpired
//	withdrawn  taken back by Drain (or dropped because the channel was full)
//	           before the application saw it; the node releases it
//
// The SDK knows a lease expired in two ways. When the queue's lease
// timeout is known (read from queue info at subscribe), a delivery held
// longer than it, counted from its arrival, has certainly expired at the
// node, which started the lease earlier. And when a delivery arrives that
// would take the binding over its prefetch, the node freed a place it
// held without a settle from the SDK (the SDK counts a settle before it
// sends it), which only a lease expiry does; leases on one subscription
// expire in the order they were granted, so the oldest held delivery is
// the one that expired.
//
// Invariant: binding.live counts the binding's deliveries in state held,
// so it never exceeds what the node counts, and after each arrival it is
// at most the prefetch.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// Header is one message header. Keys need not be unique; order is kept.
type Header struct {
	Key   string
	Value []byte
}

// Headers are a message's headers, in order.
type Headers []Header

// Get returns the value of the first header with the key.
func (h Headers) Get(key string) ([]byte, bool) {
	for _, header := range h {
		if header.Key == key {
			return header.Value, true
		}
	}
	return nil, false
}

// Delivery is one message handed to a subscription. Settle it exactly once
// with Ack, AckSync, Nack, Release or Discard; a delivery not settled within
// the queue's lease timeout is delivered again, and settling it afterwards
// returns ErrLeaseExpired.
type Delivery struct {
	Queue       string
	Payload     []byte
	Headers     Headers
	MessageID   string    // the publisher's id, or the one the node assigned
	Attempt     uint32    // 1 on the first delivery; counts nacks, lease expiries and possible deliveries before a crash
	Redelivered bool      // the message may have been delivered before: treat it as a possible duplicate
	Incarnation uint64    // with Offset, identifies the stored message: deduplicate on (Queue, Incarnation, Offset) or MessageID
	Offset      uint64    // the message's offset in its queue's log incarnation
	PublishTime time.Time // when the node accepted the publish

	binding    *binding
	tag        uint64
	receivedAt time.Time // when the reader decoded it (monotonic)
	state      atomic.Uint32
}

// Delivery states; see the file comment.
const (
	deliveryHeld uint32 = iota
	deliverySettled
	deliveryExpired
	deliveryWithdrawn
)

// Ack reports the message processed; the node removes it. The ack is sent
// in the background: Ack returns before the node has applied it (AckSync
// waits). It returns ErrLeaseExpired when the delivery's lease has expired
// (the node hands the message out again), ErrStaleDelivery when its
// connection or subscription ended, ErrAlreadySettled on a second settle.
func (d *Delivery) Ack() error { return d.settle(settleAck, false, 0) }

// AckSync acks the message and returns once the node has applied the ack
// at the queue's boundary (fsynced for a durable queue, written for a
// buffered one): after a nil return the message will not be delivered
// again. An error matching ErrLeaseExpired means the node no longer held
// the delivery (its lease expired; the message is delivered again) and
// nothing was acked. An error matching ErrConnectionLost, or ctx's error,
// leaves the outcome unknown: the ack may have applied, or the message
// comes back marked redelivered.
func (d *Delivery) AckSync(ctx context.Context) error {
	b := d.binding
	if b == nil || b.isStale() {
		return ErrStaleDelivery
	}
	if err := d.claim(); err != nil {
		return err
	}
	_, err := b.conn.request(ctx, call{build: func(id uint64) wire.Frame {
		return &wire.AckSync{RequestID: id, Settle: wire.Settle{SubscriptionID: b.id, DeliveryTags: []uint64{d.tag}}}
	}})
	if CodeOf(err) == wire.CodeUnknownDeliveryTag {
		return fmt.Errorf("%w: %w", ErrLeaseExpired, err)
	}
	return err
}

// Nack reports that processing failed; the attempt counts. With requeue
// the message is ready again after delay (0: the queue's redelivery
// delay); without it the message is dead-lettered, or dropped when the
// queue has no dead-letter queue.
func (d *Delivery) Nack(requeue bool, delay time.Duration) error {
	delayMs, err := durationMs(delay, math.MaxUint32)
	if err != nil {
		return err
	}
	return d.settle(settleNack, requeue, uint32(delayMs))
}

// Release hands the message back unprocessed (for example, the consumer is
// stopping): it is ready again at once and the attempt does not count.
func (d *Delivery) Release() error { return d.settle(settleRelease, false, 0) }

// Discard drops the message without dead-lettering it.
func (d *Delivery) Discard() error { return d.settle(settleDiscard, false, 0) }

// Stale reports whether the delivery can no longer be settled: its
// subscription or its connection has ended, or its lease expired, and the
// node will hand the message out again.
func (d *Delivery) Stale() bool {
	return d.binding == nil || d.binding.isStale() || d.state.Load() == deliveryExpired || d.leaseOver()
}

type settleKind uint8

const (
	settleAck settleKind = iota
	settleNack
	settleRelease
	settleDiscard
)

func (d *Delivery) settle(kind settleKind, requeue bool, delayMs uint32) error {
	b := d.binding
	if b == nil || b.isStale() {
		return ErrStaleDelivery
	}
	// The claim and the pending settle are one step under b.mu: a Drain
	// woken by the claim unsubscribes through the writer, which takes the
	// pending settles under b.mu before it writes the unsubscribe, so it
	// always finds this settle and sends it first.
	b.mu.Lock()
	if err := d.claim(); err != nil {
		b.mu.Unlock()
		return err
	}
	b.addLocked(kind, d.tag, requeue, delayMs)
	b.mu.Unlock()
	b.conn.markDirty(b)
	return nil
}

// leaseOver reports whether the delivery has been held longer than its
// queue's lease timeout (when the SDK knows it).
func (d *Delivery) leaseOver() bool {
	lease := d.binding.leaseTimeout
	return lease > 0 && time.Since(d.receivedAt) > lease
}

// claim moves the delivery from held to settled, or says why it cannot.
func (d *Delivery) claim() error {
	b := d.binding
	if d.leaseOver() {
		b.leave(d, deliveryExpired)
	}
	if b.leave(d, deliverySettled) {
		return nil
	}
	switch d.state.Load() {
	case deliveryExpired:
		return fmt.Errorf("%w: delivery of message %q (attempt %d) was held longer than its lease",
			ErrLeaseExpired, d.MessageID, d.Attempt)
	case deliverySettled:
		return ErrAlreadySettled
	}
	return ErrStaleDelivery
}

// newDelivery copies a decoded delivery out of the reader's buffer: the
// payload and header values share one allocation.
func newDelivery(b *binding, m *wire.Delivery, now time.Time) *Delivery {
	size := len(m.Payload)
	for _, header := range m.Headers {
		size += len(header.Value)
	}
	buffer := make([]byte, 0, size)
	buffer = append(buffer, m.Payload...)
	d := &Delivery{
		Queue: b.subscription.queue, Payload: buffer[:len(m.Payload):len(m.Payload)],
		MessageID: string(m.MessageID), Attempt: m.Attempt, Redelivered: m.Redelivered,
		Incarnation: m.Incarnation, Offset: m.Offset, PublishTime: time.Unix(0, m.PublishUnixNanos),
		binding: b, tag: m.DeliveryTag, receivedAt: now,
	}
	if len(m.Headers) > 0 {
		d.Headers = make(Headers, len(m.Headers))
		for i, header := range m.Headers {
			start := len(buffer)
			buffer = append(buffer, header.Value...)
			d.Headers[i] = Header{Key: string(header.Key), Value: buffer[start:len(buffer):len(buffer)]}
		}
	}
	return d
}

// binding is a subscription on one connection.
type binding struct {
	subscription *Subscription
	conn         *conn
	id           uint64        // the node's subscription id
	prefetch     uint32        // granted by subscribe-ok
	leaseTimeout time.Duration // the queue's, when known; 0 = unknown
	live         atomic.Int64  // deliveries in state held
	ended        atomic.Bool   // unsubscribed or ended: deliveries dropped, settles refused

	heldMu sync.Mutex
	held   []*Delivery // arrival order; may still list deliveries that left state held

	mu      sync.Mutex
	pending settleBatch // settles not yet taken by the writer

	dirty bool // queued for the writer; guarded by conn.settleMu
}

func (b *binding) isStale() bool { return b.ended.Load() || b.conn.isDead() }

// track counts a delivery that just arrived (reader goroutine) and expires
// the oldest held ones while the binding holds more than its prefetch.
func (b *binding) track(d *Delivery) {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	b.live.Add(1)
	b.held = append(b.held, d)
	for i := 0; b.prefetch != 0 && b.live.Load() > int64(b.prefetch) && i < len(b.held); i++ {
		b.leave(b.held[i], deliveryExpired)
	}
	first := 0
	for first < len(b.held) && b.held[first].state.Load() != deliveryHeld {
		first++
	}
	b.held = b.held[first:]
	if len(b.held) > 2*int(max(b.prefetch, 8)) {
		b.held = slices.DeleteFunc(b.held, func(d *Delivery) bool { return d.state.Load() != deliveryHeld })
	}
}

// leave moves d from held to state; false when it had left already.
func (b *binding) leave(d *Delivery, state uint32) bool {
	if !d.state.CompareAndSwap(deliveryHeld, state) {
		return false
	}
	b.live.Add(-1)
	if s := b.subscription; s != nil {
		s.noteSettled()
	}
	return true
}

// addLocked gathers a settle for the writer; b.mu is held.
func (b *binding) addLocked(kind settleKind, tag uint64, requeue bool, delayMs uint32) {
	switch kind {
	case settleAck:
		b.pending.acks = append(b.pending.acks, tag)
	case settleRelease:
		b.pending.releases = append(b.pending.releases, tag)
	case settleDiscard:
		b.pending.discards = append(b.pending.discards, tag)
	case settleNack:
		b.pending.addNack(tag, requeue, delayMs)
	}
}

// settleBatch holds delivery tags by settle kind.
type settleBatch struct {
	acks, releases, discards []uint64
	nacks                    []nackGroup
}

// nackGroup holds the tags nacked with the same requeue and delay.
type nackGroup struct {
	requeue bool
	delayMs uint32
	tags    []uint64
}

func (s *settleBatch) addNack(tag uint64, requeue bool, delayMs uint32) {
	for i := range s.nacks {
		if s.nacks[i].requeue == requeue && s.nacks[i].delayMs == delayMs {
			s.nacks[i].tags = append(s.nacks[i].tags, tag)
			return
		}
	}
	s.nacks = append(s.nacks, nackGroup{requeue: requeue, delayMs: delayMs, tags: []uint64{tag}})
}

// takeSettles moves the gathered settles into dst (the writer's scratch),
// keeping both sides' slices for reuse.
func (b *binding) takeSettles(dst *settleBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dst.acks = append(dst.acks[:0], b.pending.acks...)
	dst.releases = append(dst.releases[:0], b.pending.releases...)
	dst.discards = append(dst.discards[:0], b.pending.discards...)
	dst.nacks = dst.nacks[:0]
	for _, group := range b.pending.nacks {
		dst.nacks = append(dst.nacks, nackGroup{requeue: group.requeue, delayMs: group.delayMs,
			tags: append([]uint64(nil), group.tags...)})
	}
	b.pending.acks = b.pending.acks[:0]
	b.pending.releases = b.pending.releases[:0]
	b.pending.discards = b.pending.discards[:0]
	b.pending.nacks = b.pending.nacks[:0]
}
