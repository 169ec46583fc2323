// Consume frames. Layouts:
//
//	FSB1 subscribe     request_id u64, queue string, prefetch u32
//	FSK1 subscribe-ok  request_id u64, subscription_id u64, prefetch u32
//	FDL1 deliver       subscription_id u64, deliveries (u32 list, at least one) of
//	                   {delivery_tag u64, incarnation u64, offset u64, attempt u32,
//	                    redelivered bool, publish_unix_nanos i64, message_id string,
//	                    headers, payload bytes}
//	FAK1 ack           subscription_id u64, delivery_tags (u32 list of u64, at least one)
//	FAK2 ack-sync      request_id u64, subscription_id u64, delivery_tags
//	FNK1 nack          subscription_id u64, requeue bool, delay_ms u32, delivery_tags
//	FRL1 release       subscription_id u64, delivery_tags
//	FDS1 discard       subscription_id u64, delivery_tags
//	FUS1 unsubscribe   request_id u64, subscription_id u64
//	FSE1 subscription-ended  subscription_id u64, code u16, message string
//
// Invariants a decoder enforces: subscription ids, delivery tags and
// attempts are never zero. Settles (ack, nack, release, discard) are
// fire-and-forget: the node sends no reply. Ack-sync is the one settle that
// is a request: the node answers FOK1 with its request id once the ack has
// applied at the queue's boundary, or FER1 with its request id. After subscription-ended the
// node sends nothing more for that subscription.
package wire

// Sizes of a deliver body's parts, for a node that must keep a deliver
// frame within its client's max_body_bytes: a body is DeliverHeadBytes plus
// each delivery's EncodedBytes.
const (
	// DeliverHeadBytes is the part of a deliver body outside its
	// deliveries: subscription_id u64 and the u32 count.
	DeliverHeadBytes = 8 + 4
	// DeliveryFixedBytes is the part of one delivery that does not depend
	// on the message: delivery_tag, incarnation, offset, attempt,
	// redelivered, publish_unix_nanos, and the length prefixes of
	// message_id (u16), headers (u16 count) and payload (u32).
	DeliveryFixedBytes = 8 + 8 + 8 + 4 + 1 + 8 + 2 + 2 + 4
)

// HeaderFieldBytes is the encoded size of one header with a key and a
// value of the given lengths: a u16-prefixed key and a u32-prefixed value.
func HeaderFieldBytes(keyBytes, valueBytes int) int { return 2 + keyBytes + 4 + valueBytes }

// Minimum encoded sizes of list elements, for bounding counts.
const (
	minDeliveryBytes = DeliveryFixedBytes
	deliveryTagBytes = 8
)

// Subscribe (FSB1) starts a subscription on a queue.
type Subscribe struct {
	RequestID uint64
	Queue     string
	Prefetch  uint32 // most unsettled deliveries at once; 0 asks for the node's default
}

func (*Subscribe) Tag() Tag { return TagSubscribe }

func (f *Subscribe) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSubscribe)
	dst = appendU64(dst, f.RequestID)
	dst = appendString(dst, "queue", f.Queue)
	dst = appendU32(dst, f.Prefetch)
	return endFrame(dst, start)
}

func (f *Subscribe) Decode(body []byte) error {
	d := newDecoder(TagSubscribe, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Queue = d.str("queue")
	f.Prefetch = d.u32("prefetch")
	return d.finish()
}

// SubscribeOK (FSK1) answers a subscribe with the subscription's id, which
// every deliver and settle of it names.
type SubscribeOK struct {
	RequestID      uint64
	SubscriptionID uint64
	Prefetch       uint32 // the prefetch in effect
}

func (*SubscribeOK) Tag() Tag { return TagSubscribeOK }

func (f *SubscribeOK) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSubscribeOK)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.SubscriptionID)
	dst = appendU32(dst, f.Prefetch)
	return endFrame(dst, start)
}

func (f *SubscribeOK) Decode(body []byte) error {
	d := newDecoder(TagSubscribeOK, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.SubscriptionID = d.nonZeroU64("subscription_id")
	f.Prefetch = d.u32("prefetch")
	return d.finish()
}

// Delivery is one message of a deliver frame. (Incarnation, Offset) is the
// message's place in its queue's log and MessageID the publisher's (or the
// node's) id: consumers deduplicate on them. Incarnation changes whenever
// the log may reuse offsets (after a cut back to the last sync), so an
// offset alone is not an identity.
type Delivery struct {
	DeliveryTag      uint64 // names this delivery in settles; valid only on this subscription and session
	Incarnation      uint64 // the queue log's incarnation
	Offset           uint64 // the publish record's offset in that incarnation
	Attempt          uint32 // 1 on the first delivery, counted up by every redelivery that counts
	Redelivered      bool   // the message may have been delivered before (possible duplicate)
	PublishUnixNanos int64  // when the node accepted the publish
	MessageID        []byte
	Headers          []Header
	Payload          []byte
}

// EncodedBytes is the number of bytes d takes in a deliver body.
func (d *Delivery) EncodedBytes() int {
	n := DeliveryFixedBytes + len(d.MessageID) + len(d.Payload)
	for i := range d.Headers {
		n += HeaderFieldBytes(len(d.Headers[i].Key), len(d.Headers[i].Value))
	}
	return n
}

// Deliver (FDL1) hands one or more messages to a subscription.
type Deliver struct {
	SubscriptionID uint64
	Deliveries     []Delivery
}

func (*Deliver) Tag() Tag { return TagDeliver }

func (f *Deliver) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagDeliver)
	dst = appendU64(dst, f.SubscriptionID)
	dst = appendCount32(dst, "deliveries", len(f.Deliveries))
	for i := range f.Deliveries {
		m := &f.Deliveries[i]
		dst = appendU64(dst, m.DeliveryTag)
		dst = appendU64(dst, m.Incarnation)
		dst = appendU64(dst, m.Offset)
		dst = appendU32(dst, m.Attempt)
		dst = appendBool(dst, m.Redelivered)
		dst = appendI64(dst, m.PublishUnixNanos)
		dst = appendStringBytes(dst, "message_id", m.MessageID)
		dst = appendHeaders(dst, m.Headers)
		dst = appendBytes(dst, "payload", m.Payload)
	}
	return endFrame(dst, start)
}

func (f *Deliver) Decode(body []byte) error {
	d := newDecoder(TagDeliver, body)
	f.SubscriptionID = d.nonZeroU64("subscription_id")
	n := d.count32("deliveries", minDeliveryBytes)
	if n == 0 && d.err == nil {
		d.failf("deliveries", "a deliver carries at least one delivery")
	}
	f.Deliveries = growSlice(f.Deliveries, n)
	for i := range f.Deliveries {
		m := &f.Deliveries[i]
		m.DeliveryTag = d.nonZeroU64("delivery_tag")
		m.Incarnation = d.u64("incarnation")
		m.Offset = d.u64("offset")
		attemptAt := d.off
		m.Attempt = d.u32("attempt")
		if m.Attempt == 0 && d.err == nil {
			d.off = attemptAt
			d.failf("attempt", "must not be zero")
		}
		m.Redelivered = d.boolean("redelivered")
		m.PublishUnixNanos = d.i64("publish_unix_nanos")
		m.MessageID = d.stringBytes("message_id")
		m.Headers = d.headers(m.Headers[:0])
		m.Payload = d.bytes("payload")
		if d.err != nil {
			break
		}
	}
	if d.err != nil {
		f.Deliveries = f.Deliveries[:0]
	}
	return d.finish()
}

// Settle is the body shared by ack, release and discard: a subscription
// and the delivery tags settled on it.
type Settle struct {
	SubscriptionID uint64
	DeliveryTags   []uint64 // at least one
}

func (s *Settle) encode(dst []byte, tag Tag) []byte {
	dst, start := beginFrame(dst, tag)
	dst = appendU64(dst, s.SubscriptionID)
	dst = s.appendTags(dst)
	return endFrame(dst, start)
}

func (s *Settle) appendTags(dst []byte) []byte {
	dst = appendCount32(dst, "delivery_tags", len(s.DeliveryTags))
	for _, deliveryTag := range s.DeliveryTags {
		dst = appendU64(dst, deliveryTag)
	}
	return dst
}

func (s *Settle) decode(tag Tag, body []byte) error {
	d := newDecoder(tag, body)
	s.SubscriptionID = d.nonZeroU64("subscription_id")
	s.readTags(&d)
	return d.finish()
}

func (s *Settle) readTags(d *decoder) {
	n := d.count32("delivery_tags", deliveryTagBytes)
	if n == 0 && d.err == nil {
		d.failf("delivery_tags", "a settle names at least one delivery tag")
	}
	s.DeliveryTags = growSlice(s.DeliveryTags, n)
	for i := range s.DeliveryTags {
		s.DeliveryTags[i] = d.nonZeroU64("delivery_tag")
	}
	if d.err != nil {
		s.DeliveryTags = s.DeliveryTags[:0]
	}
}

// Ack (FAK1): the consumer is done with the messages; they are removed.
type Ack struct{ Settle }

func (*Ack) Tag() Tag                   { return TagAck }
func (f *Ack) Encode(dst []byte) []byte { return f.encode(dst, TagAck) }
func (f *Ack) Decode(body []byte) error { return f.decode(TagAck, body) }

// AckSync (FAK2) is an ack the node answers: OK (FOK1) with the request
// id and count = the tags acked, sent once the ack has applied at the
// queue's boundary (fsynced for a durable queue, written for a buffered
// one), or an error (FER1) with the request id, in which case none of the
// tags was acked (for example unknown_delivery_tag: the subscription does
// not hold one of them, because its lease expired or it was settled).
type AckSync struct {
	RequestID uint64
	Settle
}

func (*AckSync) Tag() Tag { return TagAckSync }

func (f *AckSync) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagAckSync)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.SubscriptionID)
	dst = f.appendTags(dst)
	return endFrame(dst, start)
}

func (f *AckSync) Decode(body []byte) error {
	d := newDecoder(TagAckSync, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.SubscriptionID = d.nonZeroU64("subscription_id")
	f.readTags(&d)
	return d.finish()
}

// Release (FRL1): the consumer gives the messages back unprocessed (it is
// stopping); they are ready again at once and the attempt does not count
// toward max_deliveries.
type Release struct{ Settle }

func (*Release) Tag() Tag                   { return TagRelease }
func (f *Release) Encode(dst []byte) []byte { return f.encode(dst, TagRelease) }
func (f *Release) Decode(body []byte) error { return f.decode(TagRelease, body) }

// Discard (FDS1): the consumer drops the messages; they are removed
// without dead-lettering.
type Discard struct{ Settle }

func (*Discard) Tag() Tag                   { return TagDiscard }
func (f *Discard) Encode(dst []byte) []byte { return f.encode(dst, TagDiscard) }
func (f *Discard) Decode(body []byte) error { return f.decode(TagDiscard, body) }

// Nack (FNK1): processing failed; the attempt counts. With Requeue the
// messages are ready again after DelayMs (0: the queue's
// redelivery_delay_ms); without it they are dead-lettered (or dropped when
// the queue has no dead-letter queue).
type Nack struct {
	SubscriptionID uint64
	Requeue        bool
	DelayMs        uint32
	DeliveryTags   []uint64 // at least one
}

func (*Nack) Tag() Tag { return TagNack }

func (f *Nack) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagNack)
	dst = appendU64(dst, f.SubscriptionID)
	dst = appendBool(dst, f.Requeue)
	dst = appendU32(dst, f.DelayMs)
	settle := Settle{DeliveryTags: f.DeliveryTags}
	dst = settle.appendTags(dst)
	return endFrame(dst, start)
}

func (f *Nack) Decode(body []byte) error {
	d := newDecoder(TagNack, body)
	f.SubscriptionID = d.nonZeroU64("subscription_id")
	f.Requeue = d.boolean("requeue")
	f.DelayMs = d.u32("delay_ms")
	settle := Settle{DeliveryTags: f.DeliveryTags}
	settle.readTags(&d)
	f.DeliveryTags = settle.DeliveryTags
	return d.finish()
}

// Unsubscribe (FUS1) ends a subscription. Its unsettled deliveries are
// released; the reply is ok (FOK1) with the number released.
type Unsubscribe struct {
	RequestID      uint64
	SubscriptionID uint64
}

func (*Unsubscribe) Tag() Tag { return TagUnsubscribe }

func (f *Unsubscribe) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagUnsubscribe)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.SubscriptionID)
	return endFrame(dst, start)
}

func (f *Unsubscribe) Decode(body []byte) error {
	d := newDecoder(TagUnsubscribe, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.SubscriptionID = d.nonZeroU64("subscription_id")
	return d.finish()
}

// SubscriptionEnded (FSE1) tells the client the node ended one of its
// subscriptions on its own: the queue was deleted or fenced, its partition
// stopped, or a message cannot fit a deliver frame under the client's
// max_body_bytes. The node sends nothing more for the subscription; its
// unsettled deliveries are released and their tags are stale. Code and
// Message say why, as in an error frame.
type SubscriptionEnded struct {
	SubscriptionID uint64
	Code           Code
	Message        string // for people; never parse it
}

func (*SubscriptionEnded) Tag() Tag { return TagSubscriptionEnded }

func (f *SubscriptionEnded) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSubscriptionEnded)
	dst = appendU64(dst, f.SubscriptionID)
	dst = appendU16(dst, uint16(f.Code))
	dst = appendString(dst, "message", f.Message)
	return endFrame(dst, start)
}

func (f *SubscriptionEnded) Decode(body []byte) error {
	d := newDecoder(TagSubscriptionEnded, body)
	f.SubscriptionID = d.nonZeroU64("subscription_id")
	f.Code = Code(d.u16("code"))
	f.Message = d.str("message")
	return d.finish()
}
