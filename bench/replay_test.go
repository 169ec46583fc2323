package bench

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// traceWriter records frames into an in-memory trace at chosen times.
type traceWriter struct {
	t        *testing.T
	file     bytes.Buffer
	recorder *wire.Recorder
	now      time.Time
}

func newTraceWriter(t *testing.T) *traceWriter {
	w := &traceWriter{t: t, now: time.Unix(1_800_000_000, 0)}
	start := w.now
	recorder, err := wire.NewRecorder(&w.file, wire.RecorderOptions{Label: "test trace", Clock: func() time.Time { return w.now }})
	if err != nil {
		t.Fatal(err)
	}
	w.recorder, w.now = recorder, start
	return w
}

// record writes frame at elapsed from the start of the recording.
func (w *traceWriter) record(elapsed time.Duration, conn uint64, direction wire.Direction, frame wire.Frame) {
	w.t.Helper()
	w.now = time.Unix(1_800_000_000, 0).Add(elapsed)
	encoded := frame.Encode(nil)
	if err := w.recorder.Record(conn, direction, frame.Tag(), encoded[wire.HeaderBytes:]); err != nil {
		w.t.Fatal(err)
	}
}

func (w *traceWriter) bytes() []byte {
	w.t.Helper()
	if err := w.recorder.Close(); err != nil {
		w.t.Fatal(err)
	}
	return w.file.Bytes()
}

func publishOf(queue string, firstSeq uint64, payloadSizes ...int) *wire.Publish {
	frame := &wire.Publish{Queue: []byte(queue)}
	for i, size := range payloadSizes {
		frame.Messages = append(frame.Messages, wire.PublishMessage{Seq: firstSeq + uint64(i), Payload: make([]byte, size)})
	}
	return frame
}

// mixedTestTrace is a trace of three connections whose publishes are, by
// hand: at 10 ms payloads 100 and 10 to "a"; at 25 ms 2048 to "b"; at
// 70 ms 0, 500 and 24 to "a". Around them: a ping, an ack, a confirm.
func mixedTestTrace(t *testing.T) []byte {
	w := newTraceWriter(t)
	w.record(0, 1, wire.DirectionIn, &wire.Ping{RequestID: 1})
	w.record(10*time.Millisecond, 1, wire.DirectionIn, publishOf("a", 1, 100, 10))
	w.record(10*time.Millisecond, 1, wire.DirectionOut, &wire.Confirm{Ranges: []wire.ConfirmRange{{First: 1, Last: 2, Boundary: wire.BoundaryDurable}}})
	w.record(25*time.Millisecond, 2, wire.DirectionIn, publishOf("b", 1, 2048))
	w.record(40*time.Millisecond, 3, wire.DirectionIn, &wire.Ack{Settle: wire.Settle{SubscriptionID: 1, DeliveryTags: []uint64{1, 2}}})
	w.record(70*time.Millisecond, 1, wire.DirectionIn, publishOf("a", 3, 0, 500, 24))
	return w.bytes()
}

func TestReadTracePublishes(t *testing.T) {
	planned, summary, err := ReadTracePublishes(bytes.NewReader(mixedTestTrace(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := []Planned{
		{Offset: 0, Paced: true, SizeBytes: 100},
		{Offset: 0, Paced: true, SizeBytes: PayloadHeaderBytes}, // 10 bytes, raised to the header
		{Offset: 15 * time.Millisecond, Paced: true, SizeBytes: 2048},
		{Offset: 60 * time.Millisecond, Paced: true, SizeBytes: PayloadHeaderBytes}, // 0 bytes
		{Offset: 60 * time.Millisecond, Paced: true, SizeBytes: 500},
		{Offset: 60 * time.Millisecond, Paced: true, SizeBytes: 24},
	}
	if !reflect.DeepEqual(planned, want) {
		t.Errorf("planned\n got %+v\nwant %+v", planned, want)
	}
	wantSummary := TraceSummary{
		Label: "test trace", Records: 6, PublishFrames: 3, Publishes: 6,
		PayloadBytes: 100 + 10 + 2048 + 0 + 500 + 24, Padded: 2, MinPayloadBytes: 0, MaxPayloadBytes: 2048,
		PublishingConnections: 2, Queues: []string{"a", "b"}, Span: 60 * time.Millisecond,
		NotReplayed: map[string]uint64{"ping": 1, "ack": 1}, OutboundFrames: 1,
	}
	if !reflect.DeepEqual(summary, wantSummary) {
		t.Errorf("summary\n got %+v\nwant %+v", summary, wantSummary)
	}
	replay, err := ReplayCase("replay", planned, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n, paced := replay.Shape.ExpectedPublishes(0); n != 6 || !paced {
		t.Errorf("replay plans %d publishes", n)
	}
	// At speed 2 the last publish is intended at 30 ms.
	if runFor := replay.Shape.RunFor(time.Second, time.Hour); runFor != 30*time.Millisecond+1 {
		t.Errorf("replay at speed 2 runs for %v", runFor)
	}
}

func TestReadTracePublishesStopsAtACut(t *testing.T) {
	file := mixedTestTrace(t)
	planned, summary, err := ReadTracePublishes(bytes.NewReader(file[:len(file)-3]))
	if err != nil {
		t.Fatal(err)
	}
	if !summary.Truncated || len(planned) != 3 || summary.Records != 5 || summary.Span != 15*time.Millisecond {
		t.Errorf("cut trace: %d planned, summary %+v", len(planned), summary)
	}
}

func TestReadTracePublishesRefusesWhatItCannotReplay(t *testing.T) {
	w := newTraceWriter(t)
	w.record(0, 1, wire.DirectionIn, &wire.Ping{RequestID: 1})
	if _, _, err := ReadTracePublishes(bytes.NewReader(w.bytes())); !errors.Is(err, ErrNoPublishes) {
		t.Errorf("trace without publishes: %v", err)
	}
	if _, _, err := ReadTracePublishes(bytes.NewReader([]byte("not a trace file"))); err == nil {
		t.Error("a file that is not a trace was read")
	}
	// A publish frame whose body breaks the layout is an error, not a cut.
	w = newTraceWriter(t)
	if err := w.recorder.Record(1, wire.DirectionIn, wire.TagPublish, []byte{0, 1, 'q', 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if _, summary, err := ReadTracePublishes(bytes.NewReader(w.bytes())); err == nil || summary.Truncated {
		t.Errorf("malformed publish: %v, %+v", err, summary)
	}
}
