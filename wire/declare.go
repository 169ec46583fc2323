// Declare frames. Layouts:
//
//	FDC1 declare          request_id u64, queue string, options bytes (msgpack map, empty = none),
//	                      then mode u8 only when the declare sets a mode
//	FDK1 declare-ok       request_id u64, created bool
//	FDK2 declare-ok-mode  request_id u64, created bool, mode u8, policy string,
//	                      warnings (u16 list of string)
//
// The mode byte is the last byte of an FDC1 body and is present only when
// set: the options field's length tells where it ends, and exactly zero or
// one byte may follow. A node that predates modes refuses the trailing byte
// as malformed instead of silently making a durable queue. A node answers
// FDK2 exactly when the declare carried a mode byte, FDK1 otherwise.
package wire

import (
	"fmt"
	"math"
)

// Mode is a queue's durability mode: which boundary its promises stand on.
// On the wire it is one byte; in msgpack bodies it is the name.
type Mode uint8

const (
	ModeUnset    Mode = 0 // not named: a new queue gets durable, an existing one keeps its mode
	ModeDurable  Mode = 1 // confirms and deliveries wait for fsync on the required copies
	ModeBuffered Mode = 2 // confirms and deliveries wait for write(2) on the required copies
)

// String returns "durable", "buffered", or "" for ModeUnset.
func (m Mode) String() string {
	switch m {
	case ModeUnset:
		return ""
	case ModeDurable:
		return "durable"
	case ModeBuffered:
		return "buffered"
	}
	return fmt.Sprintf("mode_%d", uint8(m))
}

// ParseMode maps "durable" and "buffered" to their modes.
func ParseMode(name string) (Mode, error) {
	switch name {
	case "durable":
		return ModeDurable, nil
	case "buffered":
		return ModeBuffered, nil
	}
	return ModeUnset, fmt.Errorf("wire: unknown durability mode %q (want durable or buffered)", name)
}

// Overflow says what a full queue (max_length or max_bytes reached) does
// with a new publish.
type Overflow string

const (
	OverflowRejectNew  Overflow = "reject_new"  // negative-confirm it with code limit_reached
	OverflowDropOldest Overflow = "drop_oldest" // accept it and drop the oldest ready message
)

// QueueOptions are a declare's options. A zero field is not set: a new
// queue takes the node's default for it, a re-declare keeps the current
// value. On the wire they are a msgpack map holding only the set keys.
type QueueOptions struct {
	LeaseTimeoutMs    uint32   // lease_timeout_ms: how long a delivery is held before it is redelivered
	MaxDeliveries     uint32   // max_deliveries: attempts before dead-lettering; unset = unlimited
	DeadLetterQueue   string   // dead_letter_queue: where dead-lettered messages go; unset = dropped
	MessageTTLMs      uint64   // message_ttl_ms: ready messages older than this are dead-lettered
	MaxLength         uint64   // max_length: most ready+leased+delayed messages
	MaxBytes          uint64   // max_bytes: most payload bytes held
	Overflow          Overflow // overflow: reject_new (default) or drop_oldest
	RedeliveryDelayMs uint32   // redelivery_delay_ms: delay before a nacked or expired message is ready again
	Policy            string   // policy: replication policy, e.g. "replica_durable:2"
	Replicas          uint32   // replicas: copies including the owner
	// Dedup (dedup) turns deduplication on with the node's default window
	// when DedupWindowMs is not set; DedupWindowMs (dedup_window_ms) turns
	// it on with that window; DedupMaxEntries (dedup_max_entries) bounds
	// the table (docs/protocol.md 4.3, 6.1).
	Dedup           bool
	DedupWindowMs   uint32
	DedupMaxEntries uint32
}

// IsZero reports whether no option is set.
func (o QueueOptions) IsZero() bool { return o == QueueOptions{} }

// appendMsgpack appends the options as a msgpack map of the set keys, in
// the documented key order.
func (o QueueOptions) appendMsgpack(dst []byte) []byte {
	type entry struct {
		key    string
		number uint64
		text   string
		isText bool
		isBool bool // number 1 = true; false is not written
	}
	entries := [...]entry{
		{key: "lease_timeout_ms", number: uint64(o.LeaseTimeoutMs)},
		{key: "max_deliveries", number: uint64(o.MaxDeliveries)},
		{key: "dead_letter_queue", text: o.DeadLetterQueue, isText: true},
		{key: "message_ttl_ms", number: o.MessageTTLMs},
		{key: "max_length", number: o.MaxLength},
		{key: "max_bytes", number: o.MaxBytes},
		{key: "overflow", text: string(o.Overflow), isText: true},
		{key: "redelivery_delay_ms", number: uint64(o.RedeliveryDelayMs)},
		{key: "policy", text: o.Policy, isText: true},
		{key: "replicas", number: uint64(o.Replicas)},
		{key: "dedup", number: boolNumber(o.Dedup), isBool: true},
		{key: "dedup_window_ms", number: uint64(o.DedupWindowMs)},
		{key: "dedup_max_entries", number: uint64(o.DedupMaxEntries)},
	}
	set := 0
	for _, e := range entries {
		if e.number != 0 || e.text != "" {
			set++
		}
	}
	dst = appendMsgpackMapHeader(dst, set)
	for _, e := range entries {
		switch {
		case e.isText && e.text != "":
			dst = appendMsgpackString(appendMsgpackString(dst, e.key), e.text)
		case e.isBool && e.number != 0:
			dst = appendMsgpackBool(appendMsgpackString(dst, e.key), true)
		case !e.isText && !e.isBool && e.number != 0:
			dst = appendMsgpackUint(appendMsgpackString(dst, e.key), e.number)
		}
	}
	return dst
}

func boolNumber(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// parseQueueOptions decodes a declare's options map. Strict parsing (a
// node reading a declare) refuses unknown keys, repeated keys and unknown
// overflow values; lenient parsing (a client reading options inside a
// reply) skips unknown keys, since newer nodes may report more.
func parseQueueOptions(b []byte, strict bool) (QueueOptions, error) {
	if err := checkMsgpack(b); err != nil {
		return QueueOptions{}, err
	}
	reader := msgpackReader{b: b}
	return reader.queueOptions(strict)
}

func (r *msgpackReader) queueOptions(strict bool) (QueueOptions, error) {
	var options QueueOptions
	seen := make(map[string]bool)
	err := r.mapEntries(func(key string) error {
		if strict && seen[key] {
			return fmt.Errorf("appears twice")
		}
		seen[key] = true
		return readQueueOption(r, key, &options, strict)
	})
	return options, err
}

func readQueueOption(reader *msgpackReader, key string, o *QueueOptions, strict bool) error {
	var number uint64
	var err error
	switch key {
	case "lease_timeout_ms", "max_deliveries", "redelivery_delay_ms", "replicas", "dedup_window_ms", "dedup_max_entries":
		number, err = reader.uint(math.MaxUint32)
	case "message_ttl_ms", "max_length", "max_bytes":
		number, err = reader.uint(math.MaxUint64)
	}
	if err != nil {
		return err
	}
	switch key {
	case "lease_timeout_ms":
		o.LeaseTimeoutMs = uint32(number)
	case "max_deliveries":
		o.MaxDeliveries = uint32(number)
	case "redelivery_delay_ms":
		o.RedeliveryDelayMs = uint32(number)
	case "replicas":
		o.Replicas = uint32(number)
	case "dedup_window_ms":
		o.DedupWindowMs = uint32(number)
	case "dedup_max_entries":
		o.DedupMaxEntries = uint32(number)
	case "dedup":
		o.Dedup, err = reader.boolean()
	case "message_ttl_ms":
		o.MessageTTLMs = number
	case "max_length":
		o.MaxLength = number
	case "max_bytes":
		o.MaxBytes = number
	case "dead_letter_queue":
		o.DeadLetterQueue, err = reader.str()
	case "policy":
		o.Policy, err = reader.str()
	case "overflow":
		var text string
		text, err = reader.str()
		o.Overflow = Overflow(text)
		if err == nil && strict && o.Overflow != OverflowRejectNew && o.Overflow != OverflowDropOldest {
			err = fmt.Errorf("want %q or %q, found %q", OverflowRejectNew, OverflowDropOldest, text)
		}
	default:
		if strict {
			return fmt.Errorf("unknown option key")
		}
		return reader.skip()
	}
	return err
}

// Declare (FDC1) creates a queue, or checks and updates an existing one.
type Declare struct {
	RequestID uint64
	Queue     string
	Options   QueueOptions
	Mode      Mode // ModeUnset sends no mode byte
}

func (*Declare) Tag() Tag { return TagDeclare }

func (f *Declare) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagDeclare)
	dst = appendU64(dst, f.RequestID)
	dst = appendString(dst, "queue", f.Queue)
	if f.Options.IsZero() {
		dst = appendU32(dst, 0) // no options: an empty bytes field
	} else {
		dst = appendMsgpackBytes(dst, "options", f.Options.appendMsgpack)
	}
	if f.Mode != ModeUnset {
		dst = appendU8(dst, uint8(f.Mode))
	}
	return endFrame(dst, start)
}

// Decode decodes a declare. When the options map is invalid the error
// wraps ErrInvalidOptions and RequestID, Queue and Mode are still decoded.
func (f *Declare) Decode(body []byte) error {
	d := newDecoder(TagDeclare, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Queue = d.str("queue")
	optionsAt := d.off
	options := d.bytes("options")
	f.Mode = ModeUnset
	if d.err == nil && d.remaining() > 0 {
		f.Mode = Mode(d.enum("mode", uint8(ModeDurable), uint8(ModeBuffered)))
	}
	if err := d.finish(); err != nil {
		return err
	}
	f.Options = QueueOptions{}
	if len(options) > 0 {
		parsed, err := parseQueueOptions(options, true)
		if err != nil {
			return &FrameError{Tag: TagDeclare, Field: "options", Offset: optionsAt,
				Detail: err.Error(), Err: ErrInvalidOptions}
		}
		f.Options = parsed
	}
	return nil
}

// DeclareOK (FDK1) answers a declare that named no mode.
type DeclareOK struct {
	RequestID uint64
	Created   bool // this declare created the queue
}

func (*DeclareOK) Tag() Tag { return TagDeclareOK }

func (f *DeclareOK) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagDeclareOK)
	dst = appendU64(dst, f.RequestID)
	dst = appendBool(dst, f.Created)
	return endFrame(dst, start)
}

func (f *DeclareOK) Decode(body []byte) error {
	d := newDecoder(TagDeclareOK, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Created = d.boolean("created")
	return d.finish()
}

// DeclareOKMode (FDK2) answers a declare that named a mode: the queue's
// mode, its effective replication policy and any warnings (a buffered
// queue always carries the warning that confirmed messages can be lost on
// correlated power loss).
type DeclareOKMode struct {
	RequestID uint64
	Created   bool
	Mode      Mode     // durable or buffered, never unset
	Policy    string   // effective policy, e.g. "replica_buffered:2"; empty on a single node
	Warnings  []string // for people; may be empty
}

func (*DeclareOKMode) Tag() Tag { return TagDeclareOKMode }

func (f *DeclareOKMode) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagDeclareOKMode)
	dst = appendU64(dst, f.RequestID)
	dst = appendBool(dst, f.Created)
	dst = appendU8(dst, uint8(f.Mode))
	dst = appendString(dst, "policy", f.Policy)
	dst = appendCount16(dst, "warnings", len(f.Warnings))
	for _, warning := range f.Warnings {
		dst = appendString(dst, "warning", warning)
	}
	return endFrame(dst, start)
}

func (f *DeclareOKMode) Decode(body []byte) error {
	d := newDecoder(TagDeclareOKMode, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Created = d.boolean("created")
	f.Mode = Mode(d.enum("mode", uint8(ModeDurable), uint8(ModeBuffered)))
	f.Policy = d.str("policy")
	n := d.count16("warnings", minStringBytes)
	f.Warnings = growSlice(f.Warnings, n)
	for i := range f.Warnings {
		f.Warnings[i] = d.str("warning")
	}
	if d.err != nil {
		f.Warnings = f.Warnings[:0]
	}
	return d.finish()
}
