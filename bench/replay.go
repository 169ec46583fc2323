package bench

// Replays: the publishes of a recorded trace (wire's trace format, written
// by `fibril serve --record-trace`) as the Planned publishes of a replay
// case.
//
// What a replay takes from a trace:
//
//   - every message of every inbound (client to node) publish frame, in
//     file order, one Planned publish each;
//   - its offset: the record's elapsed time minus that of the first publish
//     record, so the replay starts with its first publish; the messages of
//     one frame share their frame's offset, as they were sent together;
//   - its size: the recorded payload's length, raised to the benchmark's
//     header (PayloadHeaderBytes) when smaller, since every benchmark
//     message carries its sequence number and intended time. The contents
//     are not replayed.
//
// What it leaves out, and counts in the TraceSummary: every other frame
// (hello, declare, subscribe, settles, pings) and every outbound frame. The
// replay declares its own queue in the run's mode and consumes it with the
// benchmark's consumer, so the recorded queues, modes and consumers shape
// nothing but the publishing. All recorded queues are replayed into that
// one queue.
//
// A trace whose last record was cut short (the node was killed while
// recording) is read up to the cut, and the summary says so.

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// maxTraceBodyBytes bounds one recorded frame body when reading a trace: a
// node may be configured to accept bodies up to 1 GiB.
const maxTraceBodyBytes = 1 << 30

// TraceSummary describes a trace and the part of it a replay uses.
type TraceSummary struct {
	// File is the trace's path, when it was read from a file.
	File  string `json:"file,omitempty"`
	Label string `json:"label"`
	// Records counts every record; PublishFrames the inbound publish frames
	// among them and Publishes their messages.
	Records       uint64 `json:"records"`
	PublishFrames uint64 `json:"publish_frames"`
	Publishes     uint64 `json:"publishes"`
	// PayloadBytes sums the recorded payloads; Padded counts the payloads
	// smaller than the benchmark header, replayed at the header's size.
	PayloadBytes uint64 `json:"payload_bytes"`
	Padded       uint64 `json:"padded"`
	// MinPayloadBytes and MaxPayloadBytes are the smallest and largest
	// recorded payloads.
	MinPayloadBytes int `json:"min_payload_bytes"`
	MaxPayloadBytes int `json:"max_payload_bytes"`
	// PublishingConnections counts the connections that published; Queues
	// names the queues published to, in order of their first publish.
	PublishingConnections int      `json:"publishing_connections"`
	Queues                []string `json:"queues"`
	// Span is the time from the first to the last publish record.
	Span time.Duration `json:"span_ns"`
	// NotReplayed counts the inbound frames that are not publishes, by
	// frame name, and OutboundFrames the frames the node sent.
	NotReplayed    map[string]uint64 `json:"not_replayed"`
	OutboundFrames uint64            `json:"outbound_frames"`
	// Truncated is set when the trace ended inside a record.
	Truncated bool `json:"truncated"`
}

// ErrNoPublishes is returned for a trace that holds no publish.
var ErrNoPublishes = errors.New("bench: the trace holds no publish")

// ReadTracePublishes reads a trace and returns its publishes as Planned
// publishes for ReplayCase, with a summary of the trace.
func ReadTracePublishes(src io.Reader) ([]Planned, TraceSummary, error) {
	reader, err := wire.NewTraceReader(src, maxTraceBodyBytes)
	if err != nil {
		return nil, TraceSummary{}, fmt.Errorf("bench: read trace: %w", err)
	}
	t := traceTally{summary: TraceSummary{Label: reader.Header().Label, NotReplayed: map[string]uint64{}},
		connections: map[uint64]bool{}, queues: map[string]bool{}}
	for {
		record, err := reader.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, wire.ErrTruncated) {
			t.summary.Truncated = true
			break
		}
		if err != nil {
			return nil, t.summary, fmt.Errorf("bench: read trace record %d: %w", t.summary.Records+1, err)
		}
		if err := t.add(record); err != nil {
			return nil, t.summary, fmt.Errorf("bench: trace record %d: %w", t.summary.Records, err)
		}
	}
	if len(t.planned) == 0 {
		return nil, t.summary, ErrNoPublishes
	}
	t.summary.Span = t.planned[len(t.planned)-1].Offset
	t.summary.PublishingConnections = len(t.connections)
	return t.planned, t.summary, nil
}

// traceTally accumulates one trace's publishes.
type traceTally struct {
	summary      TraceSummary
	planned      []Planned
	firstElapsed time.Duration
	connections  map[uint64]bool
	queues       map[string]bool
	frame        wire.Publish // reused for every publish frame
}

func (t *traceTally) add(record wire.TraceRecord) error {
	t.summary.Records++
	if record.Direction == wire.DirectionOut {
		t.summary.OutboundFrames++
		return nil
	}
	if record.Tag != wire.TagPublish {
		t.summary.NotReplayed[record.Tag.Name()]++
		return nil
	}
	if err := t.frame.Decode(record.Body); err != nil {
		return err
	}
	if len(t.planned) == 0 {
		t.firstElapsed = record.Elapsed
	}
	t.summary.PublishFrames++
	t.connections[record.Conn] = true
	if queue := string(t.frame.Queue); !t.queues[queue] {
		t.queues[queue] = true
		t.summary.Queues = append(t.summary.Queues, queue)
	}
	for _, message := range t.frame.Messages {
		t.addMessage(record.Elapsed-t.firstElapsed, len(message.Payload))
	}
	return nil
}

func (t *traceTally) addMessage(offset time.Duration, payloadBytes int) {
	s := &t.summary
	if s.Publishes == 0 {
		s.MinPayloadBytes, s.MaxPayloadBytes = payloadBytes, payloadBytes
	}
	s.Publishes++
	s.PayloadBytes += uint64(payloadBytes)
	s.MinPayloadBytes, s.MaxPayloadBytes = min(s.MinPayloadBytes, payloadBytes), max(s.MaxPayloadBytes, payloadBytes)
	size := payloadBytes
	if size < PayloadHeaderBytes {
		size = PayloadHeaderBytes
		s.Padded++
	}
	t.planned = append(t.planned, Planned{Offset: offset, Paced: true, SizeBytes: size})
}
