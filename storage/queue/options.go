package queue

// Declaration file format (part of the on-disk format; do not change):
//
//	magic "FQDC" | version u8 (1 or 2) | mode u8 | overflow u8 |
//	leaseTimeoutMs uvarint | maxDeliveries uvarint | deadLetterQueue (uvarint length, bytes) |
//	messageTtlMs uvarint | maxLength uvarint | maxBytes uvarint | redeliveryDelayMs uvarint |
//	[version 2: dedupWindowMs uvarint (not 0) | dedupMaxEntries uvarint (not 0)] |
//	crc32c u32 little-endian over everything before it
//
// Version 2 is written only for a queue that deduplicates, so every other
// queue keeps the version 1 file older versions read.
// Options are fixed at first declare: Open stores them in the queue
// directory and refuses different options later with ErrDeclarationMismatch.
// Durations are stored in whole milliseconds, which is also the precision
// the queue works in.

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Mode says which boundary a queue's confirms and deliveries stand on.
type Mode uint8

const (
	// Durable (the default) applies an event only after its append is
	// durable (fdatasync completed).
	Durable Mode = 1
	// Buffered applies an event once its append is written to the OS.
	Buffered Mode = 2
)

// String returns the declared name of the mode.
func (m Mode) String() string {
	switch m {
	case Durable:
		return "durable"
	case Buffered:
		return "buffered"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Overflow is what a queue does when a publish would exceed MaxLength or
// MaxBytes.
type Overflow uint8

const (
	// RejectPublish (the default) refuses the publish with ErrQueueFull.
	RejectPublish Overflow = 1
	// DropOldest accepts the publish and drops the oldest ready messages
	// until the queue fits again.
	DropOldest Overflow = 2
)

// String returns the declared name of the policy.
func (o Overflow) String() string {
	switch o {
	case RejectPublish:
		return "reject-publish"
	case DropOldest:
		return "drop-oldest"
	}
	return fmt.Sprintf("overflow(%d)", uint8(o))
}

// DefaultLeaseTimeout is the lease (ack) timeout when none is declared.
const DefaultLeaseTimeout = 30 * time.Second

// Options are a queue's declared settings. The zero value of a field means
// its default; WithDefaults fills them in.
type Options struct {
	// Mode is Durable (default) or Buffered.
	Mode Mode
	// LeaseTimeout is how long a delivery stays leased without a settle
	// before it expires and returns to ready; default 30 s.
	LeaseTimeout time.Duration
	// MaxDeliveries is the number of counted attempts (nacks and lease
	// expiries) after which a message is dead-lettered; 0 means unlimited.
	MaxDeliveries uint32
	// DeadLetterQueue names the queue that receives dead-lettered messages.
	// Empty means they are dropped. Requires MaxDeliveries.
	DeadLetterQueue string
	// MessageTTL drops a ready message this long after its publish; 0
	// means no limit. Leased messages do not expire while leased.
	MessageTTL time.Duration
	// MaxLength limits the number of ready (including delayed) messages; 0
	// means no limit.
	MaxLength uint64
	// MaxBytes limits the payload bytes of ready (including delayed)
	// messages; 0 means no limit.
	MaxBytes uint64
	// Overflow is applied when MaxLength or MaxBytes would be exceeded;
	// default RejectPublish.
	Overflow Overflow
	// RedeliveryDelay is the delay a nack gets when it names none; 0 means
	// a nacked message is ready again at once.
	RedeliveryDelay time.Duration
	// DedupWindow turns deduplication on (dedup.go): a publish whose
	// producer pair or publisher-given message id the queue stored less
	// than this long ago is not stored again. 0 means off.
	DedupWindow time.Duration
	// DedupMaxEntries bounds the keys the deduplication table holds; past
	// it the oldest leave before their window ends. 0 means
	// DefaultDedupMaxEntries when DedupWindow is set.
	DedupMaxEntries uint32
}

// Deduplication defaults and bounds.
const (
	// DefaultDedupWindow is the window of a queue that turns
	// deduplication on without naming one.
	DefaultDedupWindow = 2 * time.Minute
	// DefaultDedupMaxEntries is the bound on the deduplication table when
	// none is declared: about 10 MB of memory when full.
	DefaultDedupMaxEntries = 100_000
	// MaxDedupMaxEntries is the largest bound a queue may declare.
	MaxDedupMaxEntries = 10_000_000
)

// maxDeadLetterQueueName bounds the dead-letter queue name.
const maxDeadLetterQueueName = 255

// WithDefaults returns o with defaults filled in for zero fields.
func (o Options) WithDefaults() Options {
	if o.Mode == 0 {
		o.Mode = Durable
	}
	if o.LeaseTimeout == 0 {
		o.LeaseTimeout = DefaultLeaseTimeout
	}
	if o.Overflow == 0 {
		o.Overflow = RejectPublish
	}
	if o.DedupWindow > 0 && o.DedupMaxEntries == 0 {
		o.DedupMaxEntries = DefaultDedupMaxEntries
	}
	return o
}

// Validate checks o after defaults are applied.
func (o Options) Validate() error {
	o = o.WithDefaults()
	switch {
	case o.Mode != Durable && o.Mode != Buffered:
		return fmt.Errorf("%w: unknown mode %d", ErrInvalidOptions, o.Mode)
	case o.Overflow != RejectPublish && o.Overflow != DropOldest:
		return fmt.Errorf("%w: unknown overflow policy %d", ErrInvalidOptions, o.Overflow)
	case o.LeaseTimeout < time.Millisecond:
		return fmt.Errorf("%w: lease timeout %v is below 1ms", ErrInvalidOptions, o.LeaseTimeout)
	case o.MessageTTL < 0 || (o.MessageTTL > 0 && o.MessageTTL < time.Millisecond):
		return fmt.Errorf("%w: message TTL %v must be 0 or at least 1ms", ErrInvalidOptions, o.MessageTTL)
	case o.RedeliveryDelay < 0:
		return fmt.Errorf("%w: negative redelivery delay %v", ErrInvalidOptions, o.RedeliveryDelay)
	case o.DeadLetterQueue != "" && o.MaxDeliveries == 0:
		return fmt.Errorf("%w: a dead-letter queue needs max deliveries", ErrInvalidOptions)
	case len(o.DeadLetterQueue) > maxDeadLetterQueueName:
		return fmt.Errorf("%w: dead-letter queue name longer than %d bytes", ErrInvalidOptions, maxDeadLetterQueueName)
	case o.DedupWindow < 0 || (o.DedupWindow > 0 && o.DedupWindow < time.Millisecond):
		return fmt.Errorf("%w: dedup window %v must be 0 or at least 1ms", ErrInvalidOptions, o.DedupWindow)
	case o.DedupWindow == 0 && o.DedupMaxEntries != 0:
		return fmt.Errorf("%w: dedup max entries needs a dedup window", ErrInvalidOptions)
	case o.DedupMaxEntries > MaxDedupMaxEntries:
		return fmt.Errorf("%w: dedup max entries %d over %d", ErrInvalidOptions, o.DedupMaxEntries, MaxDedupMaxEntries)
	}
	return nil
}

func durationMs(d time.Duration) int64 { return int64(d / time.Millisecond) }

const (
	declarationMagic        = "FQDC"
	declarationVersion      = 1
	declarationVersionDedup = 2
)

// encodeDeclaration serializes o (defaults applied) in the declaration format.
func encodeDeclaration(o Options) []byte {
	o = o.WithDefaults()
	version := byte(declarationVersion)
	if o.DedupWindow > 0 {
		version = declarationVersionDedup
	}
	buf := append([]byte(declarationMagic), version, byte(o.Mode), byte(o.Overflow))
	buf = binary.AppendUvarint(buf, uint64(durationMs(o.LeaseTimeout)))
	buf = binary.AppendUvarint(buf, uint64(o.MaxDeliveries))
	buf = binary.AppendUvarint(buf, uint64(len(o.DeadLetterQueue)))
	buf = append(buf, o.DeadLetterQueue...)
	buf = binary.AppendUvarint(buf, uint64(durationMs(o.MessageTTL)))
	buf = binary.AppendUvarint(buf, o.MaxLength)
	buf = binary.AppendUvarint(buf, o.MaxBytes)
	buf = binary.AppendUvarint(buf, uint64(durationMs(o.RedeliveryDelay)))
	if version == declarationVersionDedup {
		buf = binary.AppendUvarint(buf, uint64(durationMs(o.DedupWindow)))
		buf = binary.AppendUvarint(buf, uint64(o.DedupMaxEntries))
	}
	return appendChecksum(buf)
}

// decodeDeclaration parses a declaration file.
func decodeDeclaration(data []byte) (Options, error) {
	body, ok := verifyChecksum(data)
	if !ok || len(body) < 7 || string(body[:4]) != declarationMagic ||
		(body[4] != declarationVersion && body[4] != declarationVersionDedup) {
		return Options{}, fmt.Errorf("%w: declaration header or checksum", ErrFileCorrupt)
	}
	o := Options{Mode: Mode(body[5]), Overflow: Overflow(body[6])}
	r := reader{buf: body[7:]}
	o.LeaseTimeout = time.Duration(r.uvarint()) * time.Millisecond
	o.MaxDeliveries = uint32(r.uvarint())
	o.DeadLetterQueue = string(r.bytes(int(r.uvarint())))
	o.MessageTTL = time.Duration(r.uvarint()) * time.Millisecond
	o.MaxLength = r.uvarint()
	o.MaxBytes = r.uvarint()
	o.RedeliveryDelay = time.Duration(r.uvarint()) * time.Millisecond
	if body[4] == declarationVersionDedup {
		o.DedupWindow = time.Duration(r.uvarint()) * time.Millisecond
		entries := r.uvarint()
		if r.err == nil && (o.DedupWindow == 0 || entries == 0 || entries > MaxDedupMaxEntries) {
			return Options{}, fmt.Errorf("%w: declaration dedup settings", ErrFileCorrupt)
		}
		o.DedupMaxEntries = uint32(entries)
	}
	if r.err != nil || len(r.buf) != 0 {
		return Options{}, fmt.Errorf("%w: declaration body", ErrFileCorrupt)
	}
	return o, o.Validate()
}

// sameDeclaration reports whether a and b declare the same queue, at the
// millisecond precision the declaration stores.
func sameDeclaration(a, b Options) bool {
	return string(encodeDeclaration(a)) == string(encodeDeclaration(b))
}
