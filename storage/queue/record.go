package queue

// Record format (part of the on-disk format; do not change). Every queue
// event is one log record; the log's Entry.Type byte is the Kind below and
// the body is:
//
//	Publish    flags u8 (bit 0: headers present; bit 1: producer present;
//	           bit 2: the message id is the publisher's) | publishMs uvarint |
//	           messageID (uvarint length, bytes) |
//	           [producer: producerID (uvarint length, bytes) | producerSeq uvarint, not 0] |
//	           [headers: uvarint count, count x (key, value), each uvarint length + bytes] |
//	           payload (the rest of the body; stored once, here only)
//	Lease      holder uvarint | deadlineMs uvarint | offsets
//	Ack        offsets
//	Nack       dueMs uvarint (0: ready at once) | offsets
//	Release    offsets
//	Discard    reason u8 | offsets
//	DeadLetter target (uvarint length, bytes) | offsets
//	Expire     reason u8 | offsets
//	Checkpoint id u64 little-endian
//	Purge      upTo uvarint
//	Reject     offsets
//	Mode       mode u8 (1 durable, 2 buffered) | revision uvarint (not 0)
//	Sent       offsets, or a single uvarint 0 (a mark that names nothing)
//
// "offsets" is a uvarint count (at least 1), the first offset as a uvarint,
// then each following offset as the uvarint (delta - 1) from the previous
// one: offsets in a record are strictly increasing. Times are unix
// milliseconds. A decoder refuses unknown flag bits, unknown reasons,
// trailing bytes and counts the body cannot hold.
//
// A lease that lapses (machine.go) is followed by a Release of its
// messages: no kind or field was added for it, so old logs replay the same
// and an older copy applies it.
//
// A sent mark (KindSent) says that the deliveries of the leases on the
// offsets it names left the owner: a replicated owner of a queue with
// MaxDeliveries appends one, without a sync, for the deliveries of one
// Advance before it hands them to their holders (Queue.Sent). Such an
// owner that leases in a log in which no mark applied yet first appends a
// mark that names nothing: from it on, marks are in force (State.marking),
// and a promotion counts an attempt only for a lease a mark names
// (replica.go). A log in which no mark ever applied (an older version's,
// or any other queue's) keeps the old rule: every lease counts. Only such
// an owner writes marks, so every other queue writes exactly the records
// of versions before marks existed; a version without type 13 refuses a
// log that holds one (unknown record type).
//
// Bits 1 and 2 of a publish carry the deduplication keys (dedup.go); the
// queue sets them only when it deduplicates, so a queue that does not
// writes exactly the records of versions before deduplication existed.

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Kind is a queue record's type, stored as the log entry's Type byte.
type Kind uint8

// Record kinds. Values are part of the on-disk format.
const (
	// KindPublish adds a message: id, headers, payload, publish time.
	KindPublish Kind = 1
	// KindLease hands messages to a holder until a deadline (a delivery).
	KindLease Kind = 2
	// KindAck settles leased messages as processed.
	KindAck Kind = 3
	// KindNack returns leased messages with an attempt counted, optionally
	// delayed; at max deliveries they are dead-lettered instead.
	KindNack Kind = 4
	// KindRelease returns leased messages without counting an attempt: a
	// consumer's release, or the owner's of a lease that lapsed (it
	// applied too late to be delivered, machine.go).
	KindRelease Kind = 5
	// KindDiscard drops messages: leased ones on a consumer's request, or
	// ready ones past their TTL.
	KindDiscard Kind = 6
	// KindDeadLetter marks messages as handed to the named dead-letter queue.
	KindDeadLetter Kind = 7
	// KindExpire returns leased messages whose lease ended (deadline or
	// process restart) with an attempt counted.
	KindExpire Kind = 8
	// KindCheckpoint marks the offset a snapshot captures; its id ties the
	// snapshot file to this exact record.
	KindCheckpoint Kind = 9
	// KindPurge drops every ready and delayed message below an offset.
	KindPurge Kind = 10
	// KindReject dead-letters leased messages at once with an attempt
	// counted (a consumer's nack without requeue); without a dead-letter
	// queue they are dropped, counted as dead-lettered.
	KindReject Kind = 11
	// KindMode is a revision of the queue's mode (mode.go): records after
	// it were admitted under the mode it names; it applies only at the
	// durable boundary, whatever the mode before it.
	KindMode Kind = 12
	// KindSent marks the leases of its offsets as sent: their deliveries
	// left the owner for their holders. Once a mark applied, a promotion
	// counts an attempt only for a lease with a mark (replica.go); the mark
	// applies only to a message that is leased and lasts until its lease
	// ends.
	KindSent Kind = 13

	// kindLast is the highest kind this version knows.
	kindLast = KindSent
)

var kindNames = [...]string{"", "publish", "lease", "ack", "nack", "release", "discard", "dead-letter", "expire",
	"checkpoint", "purge", "reject", "mode", "sent"}

// String names the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Reason says why a Discard or Expire record was written.
type Reason uint8

const (
	// ReasonConsumer: a consumer discarded a message it held.
	ReasonConsumer Reason = 1
	// ReasonTTL: a ready message outlived the queue's message TTL.
	ReasonTTL Reason = 2
	// ReasonDeadline: a lease reached its deadline.
	ReasonDeadline Reason = 3
	// ReasonRestart: a lease was held by a process that ended.
	ReasonRestart Reason = 4
)

// Header is one message header.
type Header struct {
	Key   string
	Value string
}

// Record is a decoded queue record. Slices decoded from a log body alias
// that body; copy them to keep them.
type Record struct {
	Kind Kind
	// Publish fields. PayloadBytes is len(Payload) after decoding; records
	// the queue builds for its own apply carry only PayloadBytes.
	MessageID    []byte
	PublishMs    int64
	Headers      []Header
	Payload      []byte
	PayloadBytes uint32
	// Publish dedup fields (dedup.go): the producer's id and its number for
	// the message (0: none), and whether MessageID is the publisher's own
	// (a deduplication key) rather than one the queue assigned.
	ProducerID  []byte
	ProducerSeq uint64
	IDGiven     bool
	// dedupKeys are the keys of ProducerID/ProducerSeq and IDGiven,
	// computed once by the owner that built the record (nil: State
	// computes them from those fields, as replay does).
	dedupKeys []dedupKey
	// Lease fields.
	Holder     uint64
	DeadlineMs int64
	// Nack field: when the message is ready again; 0 means at once.
	DueMs int64
	// Discard and Expire field.
	Reason Reason
	// DeadLetter field.
	Target []byte
	// Checkpoint field.
	CheckpointID uint64
	// Purge field: messages below this offset are dropped.
	UpTo uint64
	// Mode fields: the mode a revision switches to and its number.
	Mode     Mode
	Revision uint64
	// Offsets the record settles, leases or returns, strictly increasing.
	Offsets []uint64
}

const (
	publishFlagHeaders  = 1
	publishFlagProducer = 2
	publishFlagIDGiven  = 4
	publishFlagsKnown   = publishFlagHeaders | publishFlagProducer | publishFlagIDGiven
)

// publishDedup is what a publish record carries for deduplication.
type publishDedup struct {
	producerID  []byte
	producerSeq uint64 // 0: no producer
	idGiven     bool
}

// maxOffsetsPerRecord bounds one record's offset list; larger operations
// are split into several records of one append.
const maxOffsetsPerRecord = 4096

// appendPublishBody encodes a publish body.
func appendPublishBody(buf []byte, messageID []byte, publishMs int64, headers []Header, payload []byte, dedup publishDedup) []byte {
	flags := byte(0)
	if len(headers) > 0 {
		flags |= publishFlagHeaders
	}
	if dedup.producerSeq != 0 {
		flags |= publishFlagProducer
	}
	if dedup.idGiven {
		flags |= publishFlagIDGiven
	}
	buf = append(buf, flags)
	buf = binary.AppendUvarint(buf, uint64(publishMs))
	buf = appendLengthPrefixed(buf, messageID)
	if dedup.producerSeq != 0 {
		buf = appendLengthPrefixed(buf, dedup.producerID)
		buf = binary.AppendUvarint(buf, dedup.producerSeq)
	}
	if len(headers) > 0 {
		buf = binary.AppendUvarint(buf, uint64(len(headers)))
		for _, h := range headers {
			buf = binary.AppendUvarint(buf, uint64(len(h.Key)))
			buf = append(buf, h.Key...)
			buf = binary.AppendUvarint(buf, uint64(len(h.Value)))
			buf = append(buf, h.Value...)
		}
	}
	return append(buf, payload...)
}

// appendOffsets encodes a strictly increasing, non-empty offset list.
func appendOffsets(buf []byte, offsets []uint64) []byte {
	if len(offsets) == 0 || !isStrictlyIncreasing(offsets) {
		panic("queue: record offsets must be non-empty and strictly increasing")
	}
	buf = binary.AppendUvarint(buf, uint64(len(offsets)))
	buf = binary.AppendUvarint(buf, offsets[0])
	for i := 1; i < len(offsets); i++ {
		buf = binary.AppendUvarint(buf, offsets[i]-offsets[i-1]-1)
	}
	return buf
}

func isStrictlyIncreasing(offsets []uint64) bool {
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] {
			return false
		}
	}
	return true
}

// encodeRecord appends the body of rec (any kind but Publish, which
// appendPublishBody encodes) to buf.
func encodeRecord(buf []byte, rec *Record) []byte {
	switch rec.Kind {
	case KindLease:
		buf = binary.AppendUvarint(buf, rec.Holder)
		buf = binary.AppendUvarint(buf, uint64(rec.DeadlineMs))
	case KindNack:
		buf = binary.AppendUvarint(buf, uint64(rec.DueMs))
	case KindDiscard, KindExpire:
		buf = append(buf, byte(rec.Reason))
	case KindDeadLetter:
		buf = appendLengthPrefixed(buf, rec.Target)
	case KindCheckpoint:
		return binary.LittleEndian.AppendUint64(buf, rec.CheckpointID)
	case KindPurge:
		return binary.AppendUvarint(buf, rec.UpTo)
	case KindMode:
		buf = append(buf, byte(rec.Mode))
		return binary.AppendUvarint(buf, rec.Revision)
	case KindSent:
		if len(rec.Offsets) == 0 {
			return binary.AppendUvarint(buf, 0)
		}
	case KindAck, KindRelease, KindReject:
	default:
		panic(fmt.Sprintf("queue: encodeRecord of %v", rec.Kind))
	}
	return appendOffsets(buf, rec.Offsets)
}

// decodeRecord parses a log record of type kind into rec, reusing rec's
// offset slice. With full false a publish skips materializing headers
// (replay needs only the metadata).
func decodeRecord(kind uint8, body []byte, rec *Record, full bool) error {
	offsets := rec.Offsets[:0]
	*rec = Record{Kind: Kind(kind)}
	r := reader{buf: body}
	switch rec.Kind {
	case KindPublish:
		return decodePublish(&r, rec, full)
	case KindLease:
		rec.Holder = r.uvarint()
		rec.DeadlineMs = int64(r.uvarint())
	case KindNack:
		rec.DueMs = int64(r.uvarint())
	case KindDiscard, KindExpire:
		rec.Reason = Reason(r.byte())
		if !validReason(rec.Kind, rec.Reason) {
			return fmt.Errorf("%w: %v reason %d", ErrRecordCorrupt, rec.Kind, rec.Reason)
		}
	case KindDeadLetter:
		rec.Target = r.lengthPrefixed()
	case KindCheckpoint:
		rec.CheckpointID = r.uint64()
		return finishDecode(&r, rec)
	case KindPurge:
		rec.UpTo = r.uvarint()
		return finishDecode(&r, rec)
	case KindMode:
		rec.Mode = Mode(r.byte())
		rec.Revision = r.uvarint()
		if r.err == nil && ((rec.Mode != Durable && rec.Mode != Buffered) || rec.Revision == 0) {
			return fmt.Errorf("%w: mode %d revision %d", ErrRecordCorrupt, rec.Mode, rec.Revision)
		}
		return finishDecode(&r, rec)
	case KindSent:
		if len(body) == 1 && body[0] == 0 {
			return nil // names nothing
		}
	case KindAck, KindRelease, KindReject:
	default:
		return fmt.Errorf("%w: type %d", ErrUnknownRecord, kind)
	}
	rec.Offsets = decodeOffsets(&r, offsets)
	return finishDecode(&r, rec)
}

func finishDecode(r *reader, rec *Record) error {
	if r.err != nil || len(r.buf) != 0 || rec.DeadlineMs < 0 || rec.DueMs < 0 {
		return fmt.Errorf("%w: %v body", ErrRecordCorrupt, rec.Kind)
	}
	return nil
}

func validReason(kind Kind, reason Reason) bool {
	if kind == KindDiscard {
		return reason == ReasonConsumer || reason == ReasonTTL
	}
	return reason == ReasonDeadline || reason == ReasonRestart
}

func decodeOffsets(r *reader, offsets []uint64) []uint64 {
	count := r.uvarint()
	if r.err == nil && (count == 0 || count > uint64(len(r.buf))) {
		r.err = errShortBuffer
		return offsets
	}
	previous := r.uvarint()
	offsets = append(offsets, previous)
	for i := uint64(1); i < count && r.err == nil; i++ {
		delta := r.uvarint()
		if delta >= ^uint64(0)-previous {
			r.err = errShortBuffer
			break
		}
		previous += delta + 1
		offsets = append(offsets, previous)
	}
	return offsets
}

func decodePublish(r *reader, rec *Record, full bool) error {
	flags := r.byte()
	rec.PublishMs = int64(r.uvarint())
	rec.MessageID = r.lengthPrefixed()
	if r.err == nil && flags&^publishFlagsKnown != 0 {
		return fmt.Errorf("%w: publish flags %#x", ErrRecordCorrupt, flags)
	}
	rec.IDGiven = flags&publishFlagIDGiven != 0
	if flags&publishFlagProducer != 0 {
		rec.ProducerID = r.lengthPrefixed()
		rec.ProducerSeq = r.uvarint()
		if r.err == nil && rec.ProducerSeq == 0 {
			return fmt.Errorf("%w: publish producer sequence 0", ErrRecordCorrupt)
		}
	}
	if flags&publishFlagHeaders != 0 {
		count := r.uvarint()
		if r.err == nil && (count == 0 || count > uint64(len(r.buf))/2) {
			r.err = errShortBuffer
		}
		for i := uint64(0); i < count && r.err == nil; i++ {
			key, value := r.lengthPrefixed(), r.lengthPrefixed()
			if full {
				rec.Headers = append(rec.Headers, Header{Key: string(key), Value: string(value)})
			}
		}
	}
	if r.err != nil || rec.PublishMs < 0 {
		return fmt.Errorf("%w: publish body", ErrRecordCorrupt)
	}
	rec.Payload = r.buf
	rec.PayloadBytes = uint32(len(r.buf))
	return nil
}

// sortedUnique returns a sorted copy of offsets without duplicates.
func sortedUnique(offsets []uint64) []uint64 {
	out := slices.Clone(offsets)
	slices.Sort(out)
	return slices.Compact(out)
}
