package wire

import (
	"errors"
	"fmt"
	"io"
)

// Buffer sizes of Reader and TraceReader.
const (
	readBufferBytes   = 32 << 10 // initial buffer; also how much one read(2) may fetch ahead
	retainBufferBytes = 1 << 20  // a buffer grown past this for a large frame is dropped afterwards
)

// Reader reads frames from a stream into one reusable buffer.
//
// Next returns each frame's tag and body; the body aliases the buffer and
// is valid only until the next call to Next, so decode it (or copy what
// you keep) before reading on. The body length is checked against the
// limit before the body is read or any room is made for it. The first
// error is final: every later Next returns it again, because after a bad
// frame the stream position is no longer trustworthy.
//
// A Reader belongs to one goroutine.
type Reader struct {
	in           inputBuffer
	maxBodyBytes uint32
	err          error
	trace        *TraceSwitch
	traceConn    uint64
}

// NewReader returns a Reader over src that refuses bodies over
// maxBodyBytes (0 means DefaultMaxBodyBytes).
func NewReader(src io.Reader, maxBodyBytes uint32) *Reader {
	r := &Reader{in: inputBuffer{src: src}}
	r.SetMaxBodyBytes(maxBodyBytes)
	return r
}

// SetMaxBodyBytes changes the body limit (0 means DefaultMaxBodyBytes).
func (r *Reader) SetMaxBodyBytes(maxBodyBytes uint32) {
	if maxBodyBytes == 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	r.maxBodyBytes = maxBodyBytes
}

// SetTrace makes the Reader offer every frame it returns to the switch's
// recorder, if one is running, as inbound on connection conn. A nil switch
// turns tracing off for this Reader.
func (r *Reader) SetTrace(traceSwitch *TraceSwitch, conn uint64) {
	r.trace, r.traceConn = traceSwitch, conn
}

// Next reads the next frame. At a clean end of stream, between frames, it
// returns io.EOF. A stream that ends inside a frame yields a *FrameError
// wrapping ErrTruncated; a body over the limit one wrapping
// ErrFrameTooLarge. Read errors of the underlying stream are returned as
// they are. Next does not judge tags: a tag this package does not know is
// returned like any other, for the caller to answer with
// UnknownFrameError.
func (r *Reader) Next() (Tag, []byte, error) {
	if r.err != nil {
		return 0, nil, r.err
	}
	r.in.maybeShrink()
	tag, bodyBytes, err := r.in.readEnvelope()
	if err != nil {
		r.err = err
		return 0, nil, err
	}
	if bodyBytes > r.maxBodyBytes {
		r.err = &FrameError{Tag: tag, Err: ErrFrameTooLarge,
			Detail: fmt.Sprintf("body of %d bytes exceeds the limit of %d", bodyBytes, r.maxBodyBytes)}
		return tag, nil, r.err
	}
	body, err := r.in.take(int(bodyBytes))
	if err != nil {
		r.err = truncatedStream(tag, err)
		return tag, nil, r.err
	}
	if r.trace != nil {
		r.trace.record(r.traceConn, DirectionIn, tag, body)
	}
	return tag, body, nil
}

// truncatedStream turns an end of stream inside a frame into a FrameError.
func truncatedStream(tag Tag, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &FrameError{Tag: tag, Err: ErrTruncated, Detail: "the stream ended inside the frame"}
	}
	return err
}

// inputBuffer is a read-ahead buffer that hands out slices of itself.
// Unread bytes are buf[start:end].
type inputBuffer struct {
	src   io.Reader
	buf   []byte
	start int
	end   int
}

// readEnvelope reads a tag and body length. A stream that ends before the
// first byte gives io.EOF, one that ends after it a truncation error.
func (b *inputBuffer) readEnvelope() (Tag, uint32, error) {
	if err := b.fill(HeaderBytes); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, 0, &FrameError{Err: ErrTruncated, Detail: "the stream ended inside a frame envelope"}
		}
		return 0, 0, err
	}
	header := b.buf[b.start : b.start+HeaderBytes]
	b.start += HeaderBytes
	tag := Tag(uint32(header[0])<<24 | uint32(header[1])<<16 | uint32(header[2])<<8 | uint32(header[3]))
	bodyBytes := uint32(header[4])<<24 | uint32(header[5])<<16 | uint32(header[6])<<8 | uint32(header[7])
	return tag, bodyBytes, nil
}

// take returns the next n bytes, reading them first when needed. The slice
// aliases the buffer and its capacity ends with it, so an append by the
// caller cannot overwrite the bytes after it.
func (b *inputBuffer) take(n int) ([]byte, error) {
	if err := b.fill(n); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	out := b.buf[b.start : b.start+n : b.start+n]
	b.start += n
	return out, nil
}

// fill makes at least n unread bytes available. It grows the buffer to at
// most n plus the read-ahead; callers have checked n against their limit.
// It returns io.EOF when the stream ends with no unread bytes and
// io.ErrUnexpectedEOF when it ends with some, but fewer than n.
func (b *inputBuffer) fill(n int) error {
	if b.end-b.start >= n {
		return nil
	}
	if cap(b.buf)-b.start < n {
		b.makeRoom(n)
	}
	for emptyReads := 0; b.end-b.start < n; {
		read, err := b.src.Read(b.buf[b.end:cap(b.buf)])
		b.end += read
		if b.end-b.start >= n {
			return nil
		}
		switch {
		case err == io.EOF && b.end == b.start:
			return io.EOF
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		case read == 0:
			if emptyReads++; emptyReads > 100 {
				return io.ErrNoProgress
			}
		}
	}
	return nil
}

// makeRoom moves the unread bytes to the front, into a larger buffer when
// the current one cannot hold n bytes.
func (b *inputBuffer) makeRoom(n int) {
	unread := b.buf[b.start:b.end]
	if n > cap(b.buf) {
		grown := make([]byte, 0, n+readBufferBytes)
		b.buf = append(grown, unread...)
	} else {
		b.buf = b.buf[:cap(b.buf)]
		copy(b.buf, unread)
	}
	b.buf = b.buf[:cap(b.buf)]
	b.start, b.end = 0, len(unread)
}

// maybeShrink drops a buffer that grew past retainBufferBytes for one
// large frame, once its unread bytes fit a default-size buffer, so an idle
// connection does not keep a 16 MiB buffer. It also makes the first one.
func (b *inputBuffer) maybeShrink() {
	unread := b.end - b.start
	if b.buf == nil || (cap(b.buf) > retainBufferBytes && unread <= readBufferBytes) {
		fresh := make([]byte, readBufferBytes)
		copy(fresh, b.buf[b.start:b.end])
		b.buf, b.start, b.end = fresh, 0, unread
	}
}
