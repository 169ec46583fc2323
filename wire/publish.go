// Publish frames. Layouts:
//
//	FPB1 publish           queue string, messages (u32 list, at least one) of
//	                       {seq u64, message_id string, headers, payload bytes}
//	FCF1 confirm           ranges (u32 list, at least one) of
//	                       {first_seq u64, last_seq u64, boundary u8}
//	FNC1 negative-confirm  ranges (u32 list, at least one) of
//	                       {first_seq u64, last_seq u64, code u16, message string}
//
// Invariants a decoder enforces: sequence numbers are never zero; inside one
// publish frame they strictly increase; in a range first_seq <= last_seq.
// Every published sequence number gets exactly one confirm or one negative
// confirm; a range covers exactly the published numbers inside it.
package wire

import "fmt"

// Boundary says which progress a confirm stands on.
type Boundary uint8

const (
	// BoundaryWritten: the required copies handed the record to the OS
	// (buffered queues).
	BoundaryWritten Boundary = 1
	// BoundaryDurable: the required copies fsynced the record (durable
	// queues).
	BoundaryDurable Boundary = 2
)

func (b Boundary) String() string {
	switch b {
	case BoundaryWritten:
		return "written"
	case BoundaryDurable:
		return "durable"
	}
	return fmt.Sprintf("boundary_%d", uint8(b))
}

// Minimum encoded sizes of list elements, for bounding counts.
const (
	minPublishMessageBytes = 8 + 2 + 2 + 4
	confirmRangeBytes      = 8 + 8 + 1
	minRejectRangeBytes    = 8 + 8 + 2 + 2
)

// PublishMessage is one message of a publish frame.
type PublishMessage struct {
	Seq uint64 // the client's sequence number; confirms name it
	// ProducerSeq is the publisher's own number for the message (FPB2
	// only; FPB1 neither carries nor reads it): 0 for none.
	ProducerSeq uint64
	MessageID   []byte   // the publisher's id; empty asks the node to assign one
	Headers     []Header // may be empty
	Payload     []byte
}

// Publish (FPB1) publishes one or more messages to one queue. A single
// publish is a batch of one: one layout to implement, and the count costs
// four bytes.
type Publish struct {
	Queue    []byte
	Messages []PublishMessage
}

func (*Publish) Tag() Tag { return TagPublish }

func (f *Publish) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPublish)
	dst = appendStringBytes(dst, "queue", f.Queue)
	dst = appendCount32(dst, "messages", len(f.Messages))
	for i := range f.Messages {
		m := &f.Messages[i]
		dst = appendU64(dst, m.Seq)
		dst = appendStringBytes(dst, "message_id", m.MessageID)
		dst = appendHeaders(dst, m.Headers)
		dst = appendBytes(dst, "payload", m.Payload)
	}
	return endFrame(dst, start)
}

func (f *Publish) Decode(body []byte) error {
	d := newDecoder(TagPublish, body)
	f.Queue = d.stringBytes("queue")
	n := d.count32("messages", minPublishMessageBytes)
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

// ConfirmRange confirms every published sequence number from First to
// Last inclusive, on one boundary.
type ConfirmRange struct {
	First    uint64
	Last     uint64
	Boundary Boundary
}

// Confirm (FCF1) confirms publishes. Ranges may arrive in any order
// relative to the publishes (queues confirm independently).
type Confirm struct {
	Ranges []ConfirmRange
}

func (*Confirm) Tag() Tag { return TagConfirm }

func (f *Confirm) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagConfirm)
	dst = appendCount32(dst, "ranges", len(f.Ranges))
	for _, r := range f.Ranges {
		dst = appendU64(dst, r.First)
		dst = appendU64(dst, r.Last)
		dst = appendU8(dst, uint8(r.Boundary))
	}
	return endFrame(dst, start)
}

func (f *Confirm) Decode(body []byte) error {
	d := newDecoder(TagConfirm, body)
	n := d.count32("ranges", confirmRangeBytes)
	if n == 0 && d.err == nil {
		d.failf("ranges", "a confirm carries at least one range")
	}
	f.Ranges = growSlice(f.Ranges, n)
	for i := range f.Ranges {
		r := &f.Ranges[i]
		r.First, r.Last = d.sequenceRange()
		r.Boundary = Boundary(d.enum("boundary", uint8(BoundaryWritten), uint8(BoundaryDurable)))
	}
	if d.err != nil {
		f.Ranges = f.Ranges[:0]
	}
	return d.finish()
}

// RejectRange negative-confirms every published sequence number from First
// to Last inclusive: none of them was stored.
type RejectRange struct {
	First   uint64
	Last    uint64
	Code    Code
	Message string
}

// NegativeConfirm (FNC1) reports publishes that failed.
type NegativeConfirm struct {
	Ranges []RejectRange
}

func (*NegativeConfirm) Tag() Tag { return TagNegativeConfirm }

func (f *NegativeConfirm) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagNegativeConfirm)
	dst = appendCount32(dst, "ranges", len(f.Ranges))
	for i := range f.Ranges {
		r := &f.Ranges[i]
		dst = appendU64(dst, r.First)
		dst = appendU64(dst, r.Last)
		dst = appendU16(dst, uint16(r.Code))
		dst = appendString(dst, "message", r.Message)
	}
	return endFrame(dst, start)
}

func (f *NegativeConfirm) Decode(body []byte) error {
	d := newDecoder(TagNegativeConfirm, body)
	n := d.count32("ranges", minRejectRangeBytes)
	if n == 0 && d.err == nil {
		d.failf("ranges", "a negative confirm carries at least one range")
	}
	f.Ranges = growSlice(f.Ranges, n)
	for i := range f.Ranges {
		r := &f.Ranges[i]
		r.First, r.Last = d.sequenceRange()
		r.Code = Code(d.u16("code"))
		r.Message = d.str("message")
	}
	if d.err != nil {
		f.Ranges = f.Ranges[:0]
	}
	return d.finish()
}

// sequenceRange reads first_seq and last_seq and checks 0 < first <= last.
func (d *decoder) sequenceRange() (uint64, uint64) {
	first := d.nonZeroU64("first_seq")
	lastAt := d.off
	last := d.u64("last_seq")
	if last < first && d.err == nil {
		d.off = lastAt
		d.failf("last_seq", "%d is below first_seq %d", last, first)
	}
	return first, last
}
