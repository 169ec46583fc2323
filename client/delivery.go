package client

// Deliveries and their settles. A delivery names its binding (the
// subscription on the connection it came on) and its tag. Settles are
// fire-and-forget on the wire; the SDK gathers them per binding and kicks
// the connection's writer, which sends everything gathered since its last
// turn as one frame per kind. Nothing waits on a timer: a settle leaves as
// soon as the writer is free, and settles made while it is busy share a
// frame.
//
// Invariant: binding.unsettled counts deliveries handed to the application
// and not yet settled by it, so it never exceeds what the node counts
// (the node learns of a settle later than the SDK), and never exceeds the
// prefetch unless the node breaks the protocol.

import (
	"math"
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
// with Ack, Nack, Release or Discard; a delivery not settled within the
// queue's lease timeout is delivered again.
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

	binding *binding
	tag     uint64
	settled atomic.Bool
}

// Ack reports the message processed; the node removes it.
func (d *Delivery) Ack() error { return d.settle(settleAck, false, 0) }

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
// subscription or its connection has ended, and the node will hand the
// message out again.
func (d *Delivery) Stale() bool { return d.binding == nil || d.binding.isStale() }

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
	if !d.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	b.add(kind, d.tag, requeue, delayMs)
	return nil
}

// newDelivery copies a decoded delivery out of the reader's buffer: the
// payload and header values share one allocation.
func newDelivery(b *binding, m *wire.Delivery) *Delivery {
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
		binding: b, tag: m.DeliveryTag,
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
	id           uint64 // the node's subscription id
	prefetch     uint32 // granted by subscribe-ok
	unsettled    atomic.Int64
	ended        atomic.Bool // unsubscribed or ended: deliveries dropped, settles refused

	mu      sync.Mutex
	pending settleBatch // settles not yet taken by the writer

	dirty bool // queued for the writer; guarded by conn.settleMu
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

func (b *binding) isStale() bool { return b.ended.Load() || b.conn.isDead() }

// add gathers a settle. The count drops first: once the settle is in the
// batch the writer may send it, and the node's next delivery may arrive
// before this goroutine runs again.
func (b *binding) add(kind settleKind, tag uint64, requeue bool, delayMs uint32) {
	b.unsettled.Add(-1)
	b.mu.Lock()
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
	b.mu.Unlock()
	b.conn.markDirty(b)
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
