package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// stepClock returns a clock that advances by step on every reading.
func stepClock(step time.Duration) func() time.Time {
	now := time.Unix(1700000000, 0)
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(step)
		return now
	}
}

func readTrace(t *testing.T, file []byte) []TraceRecord {
	t.Helper()
	reader, err := NewTraceReader(bytes.NewReader(file), 0)
	if err != nil {
		t.Fatal(err)
	}
	var records []TraceRecord
	for {
		record, err := reader.Next()
		if err == io.EOF {
			return records
		}
		if err != nil {
			t.Fatal(err)
		}
		record.Body = append([]byte(nil), record.Body...)
		records = append(records, record)
	}
}

func TestTraceSwitchRecordsReaderAndWriterFrames(t *testing.T) {
	var traceSwitch TraceSwitch
	inbound := append((&Ping{RequestID: 1}).Encode(nil), (&Ping{RequestID: 2}).Encode(nil)...)
	reader := NewReader(bytes.NewReader(inbound), 0)
	reader.SetTrace(&traceSwitch, 7)
	writer := NewWriter(io.Discard, 0)
	writer.SetTrace(&traceSwitch, 7)

	if _, _, err := reader.Next(); err != nil { // tracing off: not recorded
		t.Fatal(err)
	}
	var file bytes.Buffer
	recorder, err := NewRecorder(&file, RecorderOptions{Label: "test", Clock: stepClock(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if previous := traceSwitch.Start(recorder); previous != nil || !traceSwitch.Recording() {
		t.Fatal("switch did not start")
	}
	if _, _, err := reader.Next(); err != nil {
		t.Fatal(err)
	}
	if err := writer.WriteFrame(&Pong{RequestID: 2}); err != nil {
		t.Fatal(err)
	}
	if stopped := traceSwitch.Stop(); stopped != recorder || traceSwitch.Recording() {
		t.Fatal("switch did not stop")
	}
	if err := writer.WriteFrame(&Pong{RequestID: 3}); err != nil { // off again
		t.Fatal(err)
	}
	if err := recorder.Close(); err != nil {
		t.Fatal(err)
	}
	records := readTrace(t, file.Bytes())
	want := []TraceRecord{
		{Elapsed: time.Millisecond, Conn: 7, Direction: DirectionIn, Tag: TagPing, Body: (&Ping{RequestID: 2}).Encode(nil)[HeaderBytes:]},
		{Elapsed: 2 * time.Millisecond, Conn: 7, Direction: DirectionOut, Tag: TagPong, Body: (&Pong{RequestID: 2}).Encode(nil)[HeaderBytes:]},
	}
	if fmt.Sprint(records) != fmt.Sprint(want) {
		t.Fatalf("records\n got %v\nwant %v", records, want)
	}
	if err := recorder.Record(1, DirectionIn, TagPing, nil); !errors.Is(err, ErrRecorderClosed) {
		t.Fatalf("Record after Close: %v", err)
	}
	var nilSwitch *TraceSwitch
	if nilSwitch.Recording() {
		t.Fatal("nil switch records")
	}
	nilSwitch.record(1, DirectionIn, TagPing, nil) // must not panic
}

func TestRecorderIsSafeForConcurrentConnections(t *testing.T) {
	var file bytes.Buffer
	recorder, err := NewRecorder(&file, RecorderOptions{Label: "concurrent"})
	if err != nil {
		t.Fatal(err)
	}
	const connections, framesEach = 4, 200
	var group sync.WaitGroup
	for conn := uint64(1); conn <= connections; conn++ {
		group.Add(1)
		go func() {
			defer group.Done()
			for i := uint64(1); i <= framesEach; i++ {
				body := (&Ping{RequestID: i}).Encode(nil)[HeaderBytes:]
				if err := recorder.Record(conn, DirectionIn, TagPing, body); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	group.Wait()
	if err := recorder.Close(); err != nil {
		t.Fatal(err)
	}
	records := readTrace(t, file.Bytes())
	next := map[uint64]uint64{}
	for _, record := range records {
		var ping Ping
		if err := ping.Decode(record.Body); err != nil {
			t.Fatal(err)
		}
		next[record.Conn]++
		if ping.RequestID != next[record.Conn] {
			t.Fatalf("connection %d: ping %d out of order", record.Conn, ping.RequestID)
		}
	}
	if len(records) != connections*framesEach {
		t.Fatalf("%d records, want %d", len(records), connections*framesEach)
	}
}

func TestRecorderKeepsTimeMonotonic(t *testing.T) {
	readings := []time.Duration{0, 5 * time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond}
	start := time.Unix(1700000000, 0)
	clock := func() time.Time {
		reading := readings[0]
		readings = readings[1:]
		return start.Add(reading)
	}
	var file bytes.Buffer
	recorder, err := NewRecorder(&file, RecorderOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := recorder.Record(1, DirectionOut, TagPong, (&Pong{RequestID: 1}).Encode(nil)[HeaderBytes:]); err != nil {
			t.Fatal(err)
		}
	}
	if err := recorder.Close(); err != nil {
		t.Fatal(err)
	}
	var elapsed []time.Duration
	for _, record := range readTrace(t, file.Bytes()) {
		elapsed = append(elapsed, record.Elapsed)
	}
	want := []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 7 * time.Millisecond}
	if fmt.Sprint(elapsed) != fmt.Sprint(want) {
		t.Fatalf("elapsed %v, want %v", elapsed, want)
	}
}

func TestRecorderLatchesWriteErrors(t *testing.T) {
	destination := &failingWriter{accept: 100}
	recorder, err := NewRecorder(destination, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2*flushBufferBytes)
	if err := recorder.Record(1, DirectionIn, TagPush, big); !errors.Is(err, errWriteFailed) {
		t.Fatalf("Record: %v", err)
	}
	if err := recorder.Record(1, DirectionIn, TagPing, nil); !errors.Is(err, errWriteFailed) {
		t.Fatalf("Record after a failure: %v", err)
	}
	if err := recorder.Close(); !errors.Is(err, errWriteFailed) {
		t.Fatalf("Close: %v", err)
	}
}

func TestTraceReaderRefusesDamage(t *testing.T) {
	good, err := goldenTrace()
	if err != nil {
		t.Fatal(err)
	}
	headerEnd := 8 + int(beUint(good[4:8]))
	firstRecord := good[headerEnd:]
	withRecord := func(mutate func(record []byte)) []byte {
		file := append([]byte(nil), good...)
		mutate(file[headerEnd:])
		return file
	}
	cases := map[string]struct {
		file []byte
		want error
	}{
		"empty file":      {nil, ErrTruncated},
		"not a trace":     {(&Ping{RequestID: 1}).Encode(nil), ErrMalformed},
		"cut record":      {good[:len(good)-3], ErrTruncated},
		"cut envelope":    {good[:headerEnd+20], ErrTruncated},
		"direction 3":     {withRecord(func(r []byte) { r[16] = 3 }), ErrMalformed},
		"time goes back":  {append(append([]byte(nil), good...), firstRecord[:len(firstRecord)/2]...), ErrMalformed},
		"body over limit": {withRecord(func(r []byte) { r[21] = 0x7f }), ErrFrameTooLarge},
	}
	// The appended half record for "time goes back" starts with an elapsed
	// time below the last one only after the full records; make it so.
	back := cases["time goes back"].file
	copy(back[len(good):], []byte{0, 0, 0, 0, 0, 0, 0, 1})
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			reader, err := NewTraceReader(bytes.NewReader(c.file), 0)
			for err == nil {
				_, err = reader.Next()
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
}

// A trace never holds a credential: a hello is recorded with its auth
// token replaced, whichever direction it went, and a hello that does not
// decode is recorded without its body.
func TestRecorderRedactsHelloTokens(t *testing.T) {
	const secret = "billing:0123456789abcdef-secret"
	hello := &Hello{Versions: []uint16{ProtocolVersion}, ClientName: "app", AuthToken: []byte(secret),
		PreviousSession: "s-1", MaxBodyBytes: 1 << 20}
	tokenless := &Hello{Versions: []uint16{ProtocolVersion}, ClientName: "anonymous"}
	helloBody := hello.Encode(nil)[HeaderBytes:]
	malformed := append([]byte(nil), helloBody[:len(helloBody)-3]...) // cut inside max_body_bytes
	var file bytes.Buffer
	recorder, err := NewRecorder(&file, RecorderOptions{Label: "test"})
	if err != nil {
		t.Fatal(err)
	}
	inbound := NewReader(bytes.NewReader(hello.Encode(nil)), 0)
	var traceSwitch TraceSwitch
	traceSwitch.Start(recorder)
	inbound.SetTrace(&traceSwitch, 1)
	if _, _, err := inbound.Next(); err != nil {
		t.Fatal(err)
	}
	writer := NewWriter(io.Discard, 0)
	writer.SetTrace(&traceSwitch, 2)
	if err := writer.WriteFrame(hello); err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{tokenless.Encode(nil)[HeaderBytes:], malformed} {
		if err := recorder.Record(3, DirectionIn, TagHello, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := recorder.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(file.Bytes(), []byte("secret")) || bytes.Contains(file.Bytes(), []byte("0123456789abcdef")) {
		t.Fatalf("the trace file holds the token: %q", file.Bytes())
	}
	records := readTrace(t, file.Bytes())
	if len(records) != 4 {
		t.Fatalf("%d records, want 4", len(records))
	}
	for _, record := range records[:2] {
		var got Hello
		if err := got.Decode(record.Body); err != nil {
			t.Fatalf("redacted hello does not decode: %v", err)
		}
		want := *hello
		want.AuthToken = []byte(RedactedAuthToken)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("redacted hello %+v, want %+v", got, want)
		}
	}
	if !bytes.Equal(records[2].Body, tokenless.Encode(nil)[HeaderBytes:]) {
		t.Fatal("a hello without a token was changed")
	}
	if len(records[3].Body) != 0 {
		t.Fatalf("a malformed hello was recorded with %d body bytes", len(records[3].Body))
	}
}

// FuzzRedactHello: whatever a hello body holds, what a trace records of
// it never holds its auth token: nothing (a body that does not decode),
// the body itself (no token), or a hello that decodes to the same fields
// with the token replaced.
func FuzzRedactHello(f *testing.F) {
	f.Add((&Hello{Versions: []uint16{1}, ClientName: "app", AuthToken: []byte("user:secret-token-0001")}).Encode(nil)[HeaderBytes:])
	f.Add((&Hello{Versions: []uint16{1}}).Encode(nil)[HeaderBytes:])
	f.Add([]byte{0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, body []byte) {
		redacted := redactHello(body)
		var original Hello
		if err := original.Decode(body); err != nil {
			if redacted != nil {
				t.Fatalf("an undecodable hello recorded %d bytes", len(redacted))
			}
			return
		}
		if len(original.AuthToken) == 0 {
			if !bytes.Equal(redacted, body) {
				t.Fatal("a hello without a token was changed")
			}
			return
		}
		var got Hello
		if err := got.Decode(redacted); err != nil {
			t.Fatalf("the redacted hello does not decode: %v", err)
		}
		if string(got.AuthToken) != RedactedAuthToken {
			t.Fatalf("the redacted hello carries %q", got.AuthToken)
		}
		got.AuthToken = original.AuthToken
		if fmt.Sprint(got) != fmt.Sprint(original) {
			t.Fatalf("redaction changed other fields: %+v vs %+v", got, original)
		}
	})
}
