// Trace file format. A trace records frames as a process saw them, with
// monotonic timestamps, so the bench can replay traffic. All integers are
// big-endian, strings are the protocol's string encoding.
//
//	file header   "FTF1" (4 bytes), u32 header body length, then the header body:
//	                start_unix_nanos i64   wall clock when recording started, for people
//	                label string           who recorded, e.g. "node-1 client listener"
//	record        elapsed_nanos u64        monotonic time since recording started
//	(repeated     connection u64           the recorder's id of the connection
//	 to the end)  direction u8             1 = in (received), 2 = out (sent)
//	              frame                    the frame exactly as on the wire: tag, u32 length, body
//
// A hello (FHL1) is recorded with its auth token replaced by
// RedactedAuthToken (and a hello that does not decode with an empty
// body), so a trace file never holds a credential.
//
// Invariant: elapsed_nanos never decreases from one record to the next.
// A file ends after its last complete record; a record cut short by a
// crash reads as a truncation error, which a replayer may treat as the end.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// TagTraceFile is the magic that opens a trace file. It is not a frame.
const TagTraceFile Tag = 'F'<<24 | 'T'<<16 | 'F'<<8 | '1'

// traceRecordHeaderBytes is the size of a record before its frame.
const traceRecordHeaderBytes = 8 + 8 + 1

// maxTraceHeaderBytes bounds the file header body (a label and a time).
const maxTraceHeaderBytes = 8 + 2 + MaxStringBytes

// ErrRecorderClosed is returned by Record after Close.
var ErrRecorderClosed = errors.New("wire: trace recorder closed")

// Direction says whether the recording process received or sent a frame.
type Direction uint8

const (
	DirectionIn  Direction = 1 // received
	DirectionOut Direction = 2 // sent
)

func (d Direction) String() string {
	switch d {
	case DirectionIn:
		return "in"
	case DirectionOut:
		return "out"
	}
	return fmt.Sprintf("direction_%d", uint8(d))
}

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	Label string           // who records; written into the file header
	Clock func() time.Time // nil means time.Now; its readings must carry a monotonic clock
}

// Recorder writes a trace file. Every connection's goroutine may call
// Record: a mutex serializes appends into one 64 KiB buffer, and a full
// buffer is written while the mutex is held, so a slow trace destination
// slows the frames being traced (tracing is a diagnostic mode). The first
// write error is kept and returned by every later call.
type Recorder struct {
	mu      sync.Mutex
	out     *bufio.Writer
	clock   func() time.Time
	started time.Time
	last    time.Duration // Invariant: never decreases.
	closed  bool
	err     error
	scratch [traceRecordHeaderBytes + HeaderBytes]byte
}

// NewRecorder writes a trace file header to w and returns a Recorder that
// appends records to it. Close flushes it; closing w stays the caller's job.
func NewRecorder(w io.Writer, options RecorderOptions) (*Recorder, error) {
	clock := options.Clock
	if clock == nil {
		clock = time.Now
	}
	r := &Recorder{out: bufio.NewWriterSize(w, flushBufferBytes), clock: clock, started: clock()}
	header, start := beginFrame(nil, TagTraceFile)
	header = appendI64(header, r.started.UnixNano())
	header = appendString(header, "label", clipMessage(options.Label))
	header = endFrame(header, start)
	if _, err := r.out.Write(header); err != nil {
		return nil, err
	}
	return r, nil
}

// RedactedAuthToken is the auth token a trace records for every hello
// that carried one.
const RedactedAuthToken = "<redacted>"

// redactHello returns a hello body without its credential: the token
// replaced by RedactedAuthToken, or nothing for a body that does not
// decode (its token cannot be found, so none of it is kept).
func redactHello(body []byte) []byte {
	var hello Hello
	if err := hello.Decode(body); err != nil {
		return nil
	}
	if len(hello.AuthToken) == 0 {
		return body
	}
	hello.AuthToken = []byte(RedactedAuthToken)
	return hello.Encode(nil)[HeaderBytes:]
}

// Record appends one frame. It is safe for concurrent use. A hello's auth
// token is never recorded (redactHello).
func (r *Recorder) Record(conn uint64, direction Direction, tag Tag, body []byte) error {
	if tag == TagHello {
		body = redactHello(body)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrRecorderClosed
	}
	if r.err != nil {
		return r.err
	}
	elapsed := r.clock().Sub(r.started)
	if elapsed < r.last {
		elapsed = r.last // the clock stepped back; keep the file monotonic
	}
	r.last = elapsed
	header := r.scratch[:0]
	header = appendU64(header, uint64(elapsed))
	header = appendU64(header, conn)
	header = appendU8(header, uint8(direction))
	header = appendU32(header, uint32(tag))
	header = appendU32(header, uint32(len(body)))
	if _, err := r.out.Write(header); err != nil {
		r.err = err
		return err
	}
	if _, err := r.out.Write(body); err != nil {
		r.err = err
		return err
	}
	return nil
}

// Flush writes buffered records to the destination.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if err := r.out.Flush(); err != nil {
		r.err = err
	}
	return r.err
}

// Close flushes and stops the recorder; later Records return
// ErrRecorderClosed.
func (r *Recorder) Close() error {
	err := r.Flush()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return err
}

// TraceSwitch turns tracing on and off for every Reader and Writer that
// holds it (see SetTrace). While it is off, a traced frame costs one atomic
// load. The zero TraceSwitch is off; a nil *TraceSwitch is always off.
type TraceSwitch struct {
	current atomic.Pointer[Recorder]
}

// Start makes rec receive every traced frame and returns the recorder it
// replaces, if any, for the caller to Close.
func (s *TraceSwitch) Start(rec *Recorder) (previous *Recorder) {
	return s.current.Swap(rec)
}

// Stop turns tracing off and returns the recorder that was running, if
// any, for the caller to Close.
func (s *TraceSwitch) Stop() *Recorder {
	return s.current.Swap(nil)
}

// Recording reports whether a recorder is running.
func (s *TraceSwitch) Recording() bool {
	return s != nil && s.current.Load() != nil
}

// record offers a frame to the running recorder. A recorder error is not
// the traffic's problem: it is kept by the recorder (Flush and Close
// report it) and the frame goes on.
func (s *TraceSwitch) record(conn uint64, direction Direction, tag Tag, body []byte) {
	if s == nil {
		return
	}
	if rec := s.current.Load(); rec != nil {
		_ = rec.Record(conn, direction, tag, body)
	}
}

// TraceHeader is a trace file's header.
type TraceHeader struct {
	StartUnixNanos int64
	Label          string
}

// TraceRecord is one recorded frame. Body aliases the TraceReader's buffer
// and is valid until the next call to Next.
type TraceRecord struct {
	Elapsed   time.Duration // monotonic time since recording started
	Conn      uint64
	Direction Direction
	Tag       Tag
	Body      []byte
}

// TraceReader reads a trace file. It enforces the same body limit as a
// Reader, and the format's invariants (known direction, non-decreasing
// time). Like a Reader, its first error is final.
type TraceReader struct {
	in           inputBuffer
	header       TraceHeader
	maxBodyBytes uint32
	last         time.Duration
	err          error
}

// NewTraceReader reads the file header from src and returns a reader of
// its records. maxBodyBytes bounds each frame body (0 means
// DefaultMaxBodyBytes).
func NewTraceReader(src io.Reader, maxBodyBytes uint32) (*TraceReader, error) {
	if maxBodyBytes == 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	t := &TraceReader{in: inputBuffer{src: src}, maxBodyBytes: maxBodyBytes}
	t.in.maybeShrink()
	tag, headerBytes, err := t.in.readEnvelope()
	if errors.Is(err, io.EOF) {
		err = &FrameError{Tag: TagTraceFile, Err: ErrTruncated, Detail: "the trace file is empty"}
	}
	if err != nil {
		return nil, err
	}
	if tag != TagTraceFile {
		return nil, &FrameError{Tag: tag, Err: ErrMalformed, Detail: "not a trace file (want the FTF1 magic)"}
	}
	if headerBytes > maxTraceHeaderBytes {
		return nil, &FrameError{Tag: tag, Err: ErrFrameTooLarge,
			Detail: fmt.Sprintf("trace header of %d bytes exceeds %d", headerBytes, maxTraceHeaderBytes)}
	}
	body, err := t.in.take(int(headerBytes))
	if err != nil {
		return nil, truncatedStream(tag, err)
	}
	d := newDecoder(TagTraceFile, body)
	t.header.StartUnixNanos = d.i64("start_unix_nanos")
	t.header.Label = d.str("label")
	if err := d.finish(); err != nil {
		return nil, err
	}
	return t, nil
}

// Header returns the file header.
func (t *TraceReader) Header() TraceHeader { return t.header }

// Next returns the next record, or io.EOF after the last one.
func (t *TraceReader) Next() (TraceRecord, error) {
	if t.err != nil {
		return TraceRecord{}, t.err
	}
	record, err := t.next()
	if err != nil {
		t.err = err
	}
	return record, err
}

func (t *TraceReader) next() (TraceRecord, error) {
	var record TraceRecord
	t.in.maybeShrink()
	if err := t.in.fill(traceRecordHeaderBytes); err != nil {
		return record, truncatedStream(TagTraceFile, err)
	}
	prefix := t.in.buf[t.in.start : t.in.start+traceRecordHeaderBytes]
	t.in.start += traceRecordHeaderBytes
	elapsed := binary.BigEndian.Uint64(prefix)
	record.Conn = binary.BigEndian.Uint64(prefix[8:])
	record.Direction = Direction(prefix[16])
	if elapsed > 1<<63-1 || time.Duration(elapsed) < t.last {
		return record, &FrameError{Tag: TagTraceFile, Err: ErrMalformed,
			Detail: fmt.Sprintf("elapsed_nanos %d goes back from %d", elapsed, t.last)}
	}
	record.Elapsed, t.last = time.Duration(elapsed), time.Duration(elapsed)
	if record.Direction != DirectionIn && record.Direction != DirectionOut {
		return record, &FrameError{Tag: TagTraceFile, Err: ErrMalformed,
			Detail: fmt.Sprintf("direction %d is not 1 or 2", prefix[16])}
	}
	tag, bodyBytes, err := t.in.readEnvelope()
	if err != nil {
		return record, truncatedStream(TagTraceFile, eofInside(err))
	}
	if bodyBytes > t.maxBodyBytes {
		return record, &FrameError{Tag: tag, Err: ErrFrameTooLarge,
			Detail: fmt.Sprintf("body of %d bytes exceeds the limit of %d", bodyBytes, t.maxBodyBytes)}
	}
	body, err := t.in.take(int(bodyBytes))
	if err != nil {
		return record, truncatedStream(tag, err)
	}
	record.Tag, record.Body = tag, body
	return record, nil
}

// eofInside reports a clean end of stream met inside a record as a cut.
func eofInside(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
