package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// flushBufferBytes is how much a Writer gathers before it writes on its own.
const flushBufferBytes = 64 << 10

// Writer encodes frames into one reusable buffer and writes them to a
// stream. WriteFrame only appends, and writes by itself only once 64 KiB
// are gathered; call Flush when there is nothing more to send right now,
// so many small frames leave in one write(2).
//
// A frame that cannot be encoded (a field too long, a body over the limit)
// is refused with an error and nothing of it is buffered; the Writer stays
// usable. A failed write of the stream is final: every later call returns
// it again.
//
// A Writer belongs to one goroutine.
type Writer struct {
	dst          io.Writer
	buf          []byte
	maxBodyBytes uint32
	err          error
	trace        *TraceSwitch
	traceConn    uint64
}

// NewWriter returns a Writer to dst that refuses bodies over maxBodyBytes
// (0 means DefaultMaxBodyBytes). Set it to the peer's limit once hello has
// told it.
func NewWriter(dst io.Writer, maxBodyBytes uint32) *Writer {
	w := &Writer{dst: dst}
	w.SetMaxBodyBytes(maxBodyBytes)
	return w
}

// SetMaxBodyBytes changes the body limit (0 means DefaultMaxBodyBytes).
func (w *Writer) SetMaxBodyBytes(maxBodyBytes uint32) {
	if maxBodyBytes == 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	w.maxBodyBytes = maxBodyBytes
}

// SetTrace makes the Writer offer every frame it accepts to the switch's
// recorder, if one is running, as outbound on connection conn. A nil
// switch turns tracing off for this Writer.
func (w *Writer) SetTrace(traceSwitch *TraceSwitch, conn uint64) {
	w.trace, w.traceConn = traceSwitch, conn
}

// WriteFrame encodes f into the buffer, flushing when the buffer is full.
func (w *Writer) WriteFrame(f Frame) error {
	if w.err != nil {
		return w.err
	}
	start := len(w.buf)
	buf, err := Append(w.buf, f, w.maxBodyBytes)
	if err != nil {
		w.buf = buf[:start]
		return err
	}
	w.buf = buf
	return w.accepted(start)
}

// WriteRaw buffers a frame given as tag and body, as a replay or a relay
// has it.
func (w *Writer) WriteRaw(tag Tag, body []byte) error {
	if w.err != nil {
		return w.err
	}
	if uint64(len(body)) > uint64(w.maxBodyBytes) {
		return &FrameError{Tag: tag, Err: ErrFrameTooLarge,
			Detail: fmt.Sprintf("body of %d bytes exceeds the limit of %d", len(body), w.maxBodyBytes)}
	}
	start := len(w.buf)
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(tag))
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(body)))
	w.buf = append(w.buf, body...)
	return w.accepted(start)
}

// accepted traces the frame that starts at start and flushes a full
// buffer.
func (w *Writer) accepted(start int) error {
	if w.trace != nil {
		frame := w.buf[start:]
		w.trace.record(w.traceConn, DirectionOut, Tag(binary.BigEndian.Uint32(frame)), frame[HeaderBytes:])
	}
	if len(w.buf) >= flushBufferBytes {
		return w.Flush()
	}
	return nil
}

// Flush writes every buffered frame.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.dst.Write(w.buf)
	if err != nil {
		w.err = err
		return err
	}
	if cap(w.buf) > retainBufferBytes {
		w.buf = nil // do not keep a buffer grown for one large frame
	} else {
		w.buf = w.buf[:0]
	}
	return nil
}

// Buffered returns the number of bytes waiting for Flush.
func (w *Writer) Buffered() int { return len(w.buf) }
