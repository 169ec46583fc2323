package wire

import (
	"errors"
	"fmt"
	"io"
)

// Buffer sizes of Reader and TraceReader.
//
// Invariant: the buffer holds at most max(its first size, 2.5 x the unread
// bytes) and never more than the frame being read plus readBufferBytes.
// It grows only when it is full of bytes that have arrived, so a peer
// that declares a large body and sends nothing costs the first buffer and
// no more; memory follows the bytes received, never the lengths declared.
const (
	readBufferBytes   = 32 << 10 // first buffer under a large limit; also how much one read(2) may fetch ahead
	retainBufferBytes = 1 << 20  // a buffer grown past this for a large frame is dropped afterwards
)

// Reader reads frames from a stream into one reusable buffer.
//
// Next returns each frame's tag and body; the body aliases the buffer and
// is valid only until the next call to Next, so decode it (or copy what
// you keep) before reading on. The body length is checked against the
// limit before the body is read or any room is made for it, and room is
// then made as the body's bytes arrive (doubling when full), never for
// the declared length up front. The first error is final: every later
// Next returns it again, because after a bad frame the stream position is
// no longer trustworthy.
//
// A node reads under a small limit until hello: NewReader(conn,
// MaxHelloBodyBytes), then SetMaxBodyBytes(limit) once hello is accepted.
// Until then the buffer is sized for a hello, and any larger frame is
// refused with ErrFrameTooLarge before its body is read.
//
// A Reader belongs to one goroutine.
type Reader struct {
	in           inputBuffer
	maxBodyBytes uint32
	err          error
	trace        *TraceSwitch
	traceConn    uint64
	// tagCheck, when set, judges each envelope's tag before its body is
	// read (SetTagCheck).
	tagCheck func(Tag) error
}

// NewReader returns a Reader over src that refuses bodies over
// maxBodyBytes (0 means DefaultMaxBodyBytes).
func NewReader(src io.Reader, maxBodyBytes uint32) *Reader {
	r := &Reader{in: inputBuffer{src: src}}
	r.SetMaxBodyBytes(maxBodyBytes)
	return r
}

// SetMaxBodyBytes changes the body limit (0 means DefaultMaxBodyBytes).
// It takes effect at the next call to Next; the buffer is resized there
// (to a hello's size under MaxHelloBodyBytes, to readBufferBytes under a
// limit of that size or more).
func (r *Reader) SetMaxBodyBytes(maxBodyBytes uint32) {
	if maxBodyBytes == 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	r.maxBodyBytes = maxBodyBytes
	r.in.firstBytes = firstBufferBytes(maxBodyBytes)
}

// MaxBodyBytes returns the body limit in force.
func (r *Reader) MaxBodyBytes() uint32 { return r.maxBodyBytes }

// firstBufferBytes is the buffer a Reader starts with under a limit: room
// for one envelope and one largest body, up to readBufferBytes.
func firstBufferBytes(maxBodyBytes uint32) int {
	return int(min(uint64(HeaderBytes)+uint64(maxBodyBytes), readBufferBytes))
}

// SetTagCheck makes Next call check with every envelope's tag as soon as
// its 8 header bytes are read, before the body length is judged or any
// byte of the body is read. An error check returns stops the Reader: Next
// returns it, now and afterwards. A node uses it to refuse a frame kind
// its peer may never send (a client sending a node-to-node frame) without
// buffering the body announced. Nil removes the check.
func (r *Reader) SetTagCheck(check func(Tag) error) { r.tagCheck = check }

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
	if r.tagCheck != nil {
		if err := r.tagCheck(tag); err != nil {
			r.err = err
			return tag, nil, err
		}
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
	// firstBytes is the size of the first buffer, and of the one that
	// replaces a buffer grown for a large frame; 0 means readBufferBytes.
	firstBytes int
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

// fill makes at least n unread bytes available; callers have checked n
// against their limit. It makes room only when the buffer is full
// (makeRoom), so the buffer follows the bytes that arrive. It returns
// io.EOF when the stream ends with no unread bytes and io.ErrUnexpectedEOF
// when it ends with some, but fewer than n.
func (b *inputBuffer) fill(n int) error {
	for emptyReads := 0; b.end-b.start < n; {
		if b.end == cap(b.buf) {
			b.makeRoom(n)
		}
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

// makeRoom is called on a full buffer that holds fewer than n unread
// bytes. Consumed bytes at the front are reclaimed first, by moving the
// unread ones there; a buffer that is all unread bytes grows (growBuffer),
// up to n plus the read-ahead. Within one frame the front is reclaimed at
// most once (start does not move until the frame is complete), so the
// copying stays linear in the frame's size.
func (b *inputBuffer) makeRoom(n int) {
	unread := b.buf[b.start:b.end]
	if b.start > 0 {
		b.buf = b.buf[:cap(b.buf)]
		copy(b.buf, unread)
	} else {
		b.buf = growBuffer(b.buf, n+readBufferBytes, b.first())
		copy(b.buf, unread)
	}
	b.start, b.end = 0, len(unread)
}

// growBuffer returns a buffer twice as large as full, at least first and
// at most limit; when twice full comes within a quarter of limit it
// returns limit at once, which saves one copy of the whole frame when a
// body is a little over a power of two (4 MiB and its header).
func growBuffer(full []byte, limit, first int) []byte {
	grown := max(2*cap(full), first)
	if grown+grown/4 >= limit {
		grown = limit
	}
	return make([]byte, grown)
}

// first returns the size of a fresh buffer.
func (b *inputBuffer) first() int {
	if b.firstBytes == 0 {
		return readBufferBytes
	}
	return b.firstBytes
}

// maybeShrink makes the first buffer, and resizes the buffer between
// frames: one grown past retainBufferBytes for a large frame is dropped
// once its unread bytes fit a fresh one, so an idle connection does not
// keep a 16 MiB buffer; one smaller than the current first size (a limit
// raised after hello) is replaced by a buffer of that size.
func (b *inputBuffer) maybeShrink() {
	unread := b.end - b.start
	first := b.first()
	shrink := cap(b.buf) > retainBufferBytes && unread <= first
	if b.buf == nil || shrink || cap(b.buf) < first {
		fresh := make([]byte, max(first, unread))
		copy(fresh, b.buf[b.start:b.end])
		b.buf, b.start, b.end = fresh, 0, unread
	}
}
