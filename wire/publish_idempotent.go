// Idempotent publish frames. Layouts:
//
//	FPB2 publish-idempotent  queue string, producer_id string, messages (u32
//	                         list, at least one) of {seq u64, producer_seq
//	                         u64, message_id string, headers, payload bytes}
//	FCF2 confirm-idempotent  ranges (u32 list, at least one) of
//	                         {first_seq u64, last_seq u64, boundary u8, duplicate bool}
//
// FPB2 is FPB1 with the publisher's name and its own number for each
// message: the keys a queue that deduplicates refuses to store twice
// (docs/protocol.md 4.3). FCF2 answers FPB2 publishes: FCF1's ranges with a
// flag that says the numbers were duplicates of messages the queue had
// already stored, so they were not stored again.
//
// Invariants a decoder enforces, besides FPB1's and FCF1's: a producer_seq
// other than 0 needs a non-empty producer_id. Producer sequence numbers
// need not increase: they name messages, and a retry may regroup them.
package wire

// Minimum encoded sizes of list elements, for bounding counts.
const (
	minIdempotentMessageBytes = 8 + 8 + 2 + 2 + 4
	idempotentRangeBytes      = 8 + 8 + 1 + 1
)

// PublishIdempotent (FPB2) publishes messages that carry the publisher's
// producer id and, per message, its producer sequence number (in
// PublishMessage.ProducerSeq; 0 for none).
type PublishIdempotent struct {
	Queue      []byte
	ProducerID []byte
	Messages   []PublishMessage
}

func (*PublishIdempotent) Tag() Tag { return TagPublishIdempotent }

func (f *PublishIdempotent) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPublishIdempotent)
	dst = appendStringBytes(dst, "queue", f.Queue)
	dst = appendStringBytes(dst, "producer_id", f.ProducerID)
	dst = appendCount32(dst, "messages", len(f.Messages))
	for i := range f.Messages {
		m := &f.Messages[i]
		dst = appendU64(dst, m.Seq)
		dst = appendU64(dst, m.ProducerSeq)
		dst = appendStringBytes(dst, "message_id", m.MessageID)
		dst = appendHeaders(dst, m.Headers)
		dst = appendBytes(dst, "payload", m.Payload)
	}
	return endFrame(dst, start)
}

func (f *PublishIdempotent) Decode(body []byte) error {
	d := newDecoder(TagPublishIdempotent, body)
	f.Queue = d.stringBytes("queue")
	f.ProducerID = d.stringBytes("producer_id")
	n := d.count32("messages", minIdempotentMessageBytes)
	if n == 0 && d.err == nil {
		d.failf("messages", "a publish carries at least one message")
	}
	f.Messages = growSlice(f.Messages, n)
	var previous uint64
	for i := range f.Messages {
		m := &f.Messages[i]
		seqAt := d.off
		m.Seq = d.nonZeroU64("seq")
		if m.Seq <= previous && d.err == nil {
			d.off = seqAt
			d.failf("seq", "%d does not increase on %d", m.Seq, previous)
		}
		previous = m.Seq
		producerAt := d.off
		m.ProducerSeq = d.u64("producer_seq")
		if m.ProducerSeq != 0 && len(f.ProducerID) == 0 && d.err == nil {
			d.off = producerAt
			d.failf("producer_seq", "%d needs a producer_id", m.ProducerSeq)
		}
		m.MessageID = d.stringBytes("message_id")
		m.Headers = d.headers(m.Headers[:0])
		m.Payload = d.bytes("payload")
		if d.err != nil {
			break
		}
	}
	if d.err != nil {
		f.Messages = f.Messages[:0]
	}
	return d.finish()
}

// IdempotentRange confirms every published sequence number from First to
// Last inclusive, on one boundary; Duplicate says the queue had stored
// these messages already (within its dedup window) and did not store them
// again.
type IdempotentRange struct {
	First     uint64
	Last      uint64
	Boundary  Boundary
	Duplicate bool
}

// ConfirmIdempotent (FCF2) confirms FPB2 publishes.
type ConfirmIdempotent struct {
	Ranges []IdempotentRange
}

func (*ConfirmIdempotent) Tag() Tag { return TagConfirmIdempotent }

func (f *ConfirmIdempotent) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagConfirmIdempotent)
	dst = appendCount32(dst, "ranges", len(f.Ranges))
	for _, r := range f.Ranges {
		dst = appendU64(dst, r.First)
		dst = appendU64(dst, r.Last)
		dst = appendU8(dst, uint8(r.Boundary))
		dst = appendBool(dst, r.Duplicate)
	}
	return endFrame(dst, start)
}

func (f *ConfirmIdempotent) Decode(body []byte) error {
	d := newDecoder(TagConfirmIdempotent, body)
	n := d.count32("ranges", idempotentRangeBytes)
	if n == 0 && d.err == nil {
		d.failf("ranges", "a confirm carries at least one range")
	}
	f.Ranges = growSlice(f.Ranges, n)
	for i := range f.Ranges {
		r := &f.Ranges[i]
		r.First, r.Last = d.sequenceRange()
		r.Boundary = Boundary(d.enum("boundary", uint8(BoundaryWritten), uint8(BoundaryDurable)))
		r.Duplicate = d.boolean("duplicate")
	}
	if d.err != nil {
		f.Ranges = f.Ranges[:0]
	}
	return d.finish()
}
