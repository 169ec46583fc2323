package bench

// The Driver is how the benchmark reaches a broker. The command-line tool
// implements it over the Go SDK; tests use FakeDriver. The contract each
// implementation MUST keep:
//
//   - Declare creates the queue with the mode, or fails. The runner always
//     declares a fresh queue name, so a conflict is a real error.
//   - Publish hands one message to the broker and returns without waiting
//     for its confirm. It may block for flow control. If it returns an
//     error, the message was not sent and onConfirm is never called. If it
//     returns nil, onConfirm is called exactly once for seq, later, from any
//     goroutine: with a nil error and the boundary the confirm reports, or
//     with the error that ended the publish (a refusal, a lost connection).
//     Publish MUST NOT retain payload after it returns: the runner reuses
//     the buffer for the next publish.
//   - Subscribe starts delivering the queue's messages with at most prefetch
//     of them unsettled. onDeliver is called once per delivery, from any
//     goroutine, possibly concurrently; payload is valid only during the
//     call. The driver settles (acks) the delivery after onDeliver returns;
//     the benchmark never settles. After the returned StopFunc returns,
//     onDeliver is not called again.
//   - Delete removes the queue and its messages.
//
// A driver's callbacks must not block on the runner: the runner's callbacks
// only stamp the time and hand the event to the run's collector goroutine.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Mode is a queue's durability mode, fixed by its declaration.
type Mode string

// The two modes. A durable queue confirms and delivers after fdatasync on the
// required copies; a buffered queue after write(2) on them.
const (
	ModeDurable  Mode = "durable"
	ModeBuffered Mode = "buffered"
)

// Boundary is the progress boundary a confirm reports.
type Boundary string

// The two boundaries: written reached the OS on a copy; durable completed
// fdatasync on a copy.
const (
	BoundaryWritten Boundary = "written"
	BoundaryDurable Boundary = "durable"
)

// Boundary returns the boundary at which the mode confirms.
func (m Mode) Boundary() Boundary {
	switch m {
	case ModeDurable:
		return BoundaryDurable
	case ModeBuffered:
		return BoundaryWritten
	}
	panic(fmt.Sprintf("bench: boundary of unknown mode %q", m))
}

// ParseModes parses the --mode flag: "durable", "buffered", or "both", which
// returns durable then buffered (A then B in the ABBA order).
func ParseModes(flag string) ([]Mode, error) {
	switch flag {
	case string(ModeDurable):
		return []Mode{ModeDurable}, nil
	case string(ModeBuffered):
		return []Mode{ModeBuffered}, nil
	case "both":
		return []Mode{ModeDurable, ModeBuffered}, nil
	}
	return nil, fmt.Errorf("%w: %q (durable, buffered or both)", ErrUnknownMode, flag)
}

// ConfirmFunc receives the confirm of publish seq.
type ConfirmFunc func(seq uint64, boundary Boundary, err error)

// DeliverFunc receives one delivery. payload is valid only during the call.
type DeliverFunc func(payload []byte, redelivered bool)

// StopFunc ends a subscription; no delivery callback runs after it returns.
type StopFunc func(ctx context.Context) error

// Driver reaches a broker; see the contract at the top of this file.
type Driver interface {
	Declare(ctx context.Context, queue string, mode Mode) error
	Publish(ctx context.Context, queue string, seq uint64, payload []byte, onConfirm ConfirmFunc) error
	Subscribe(ctx context.Context, queue string, prefetch int, onDeliver DeliverFunc) (StopFunc, error)
	Delete(ctx context.Context, queue string) error
}

// Payload format. Every benchmark message starts with a fixed header and is
// padded with zero bytes to the run's message size:
//
//	offset size field
//	0      4    magic "BNP1" (bench payload, version 1)
//	4      4    run tag, big-endian u32: the run's ordinal, so a message left
//	            over from another run is counted as unexpected, not delivered
//	8      8    sequence number, big-endian u64, 0-based within the run
//	16     8    intended publish time, big-endian i64 nanoseconds on the
//	            run's monotonic clock (the publisher and the consumer share
//	            one process, so they share the clock's origin)
//	24     -    padding
//
// The consumer computes delivery latency from the intended time in the
// payload and checks gaps and duplicates from the sequence number.
const PayloadHeaderBytes = 24

var payloadMagic = [4]byte{'B', 'N', 'P', '1'}

// PayloadHeader is the decoded header of a benchmark message.
type PayloadHeader struct {
	RunTag   uint32
	Seq      uint64
	Intended time.Duration
}

// EncodePayloadHeader writes the header into the first PayloadHeaderBytes of
// payload, which must be at least that long; the rest is left as it is.
func EncodePayloadHeader(payload []byte, header PayloadHeader) {
	if len(payload) < PayloadHeaderBytes {
		panic(fmt.Sprintf("bench: payload of %d bytes is shorter than its header", len(payload)))
	}
	copy(payload[0:4], payloadMagic[:])
	binary.BigEndian.PutUint32(payload[4:8], header.RunTag)
	binary.BigEndian.PutUint64(payload[8:16], header.Seq)
	binary.BigEndian.PutUint64(payload[16:24], uint64(header.Intended))
}

// DecodePayloadHeader reads the header of a benchmark message.
func DecodePayloadHeader(payload []byte) (PayloadHeader, error) {
	if len(payload) < PayloadHeaderBytes {
		return PayloadHeader{}, fmt.Errorf("%w: %d bytes", ErrMalformedPayload, len(payload))
	}
	if [4]byte(payload[0:4]) != payloadMagic {
		return PayloadHeader{}, fmt.Errorf("%w: magic %q", ErrMalformedPayload, payload[0:4])
	}
	return PayloadHeader{
		RunTag:   binary.BigEndian.Uint32(payload[4:8]),
		Seq:      binary.BigEndian.Uint64(payload[8:16]),
		Intended: time.Duration(binary.BigEndian.Uint64(payload[16:24])),
	}, nil
}

// Package errors.
var (
	// ErrUnknownCase is returned for a case name that is not built in.
	ErrUnknownCase = errors.New("bench: unknown case")
	// ErrUnknownMode is returned for a mode flag that is not a mode.
	ErrUnknownMode = errors.New("bench: unknown mode")
	// ErrMalformedPayload is returned for a delivery that is not a
	// benchmark message.
	ErrMalformedPayload = errors.New("bench: malformed payload")
	// ErrInvalidOptions is returned for run or floor options that cannot work.
	ErrInvalidOptions = errors.New("bench: invalid options")
)
