// Primitive encodings. Every body is a sequence of these; each has exactly
// one encoding, and they are part of the wire format:
//
//	u8, u16, u32, u64  unsigned, fixed width, big-endian
//	i64                signed, two's complement, 8 bytes big-endian
//	bool               one byte, 0 = false, 1 = true; any other value is malformed
//	string             u16 byte length, then that many bytes of UTF-8 (at most 65535 bytes)
//	bytes              u32 byte length, then that many bytes, uninterpreted
//	headers            u16 count, then count pairs of (key string, value bytes)
//	list               a u16 or u32 count (the layout says which), then count elements
//
// A decoder checks every length and count against the bytes that remain
// before it slices or allocates, so a body can never make it allocate more
// than a small multiple of the body's own length.
package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// MaxStringBytes is the longest string field (u16 length prefix).
const MaxStringBytes = 65535

// Minimum encoded sizes, used to bound a count before allocating for it.
const (
	minHeaderBytes = 2 + 4 // empty key, empty value
	minStringBytes = 2
)

// Header is one message header. Key is UTF-8; Value is opaque bytes. Both
// alias the frame body after a decode.
type Header struct {
	Key   []byte
	Value []byte
}

// beginFrame appends an envelope with a placeholder length and returns the
// offset where the frame starts; endFrame fills the length in.
func beginFrame(dst []byte, tag Tag) ([]byte, int) {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(tag))
	dst = binary.BigEndian.AppendUint32(dst, 0)
	return dst, start
}

func endFrame(dst []byte, start int) []byte {
	bodyBytes := len(dst) - start - HeaderBytes
	if uint64(bodyBytes) > 0xffffffff {
		panic(fieldTooLong{field: "body", length: bodyBytes, limit: 0xffffffff})
	}
	binary.BigEndian.PutUint32(dst[start+4:], uint32(bodyBytes))
	return dst
}

func appendU8(dst []byte, v uint8) []byte   { return append(dst, v) }
func appendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }
func appendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }
func appendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }
func appendI64(dst []byte, v int64) []byte  { return binary.BigEndian.AppendUint64(dst, uint64(v)) }

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// appendCount16 appends a u16 list count, panicking when n does not fit.
func appendCount16(dst []byte, field string, n int) []byte {
	if n > 0xffff {
		panic(fieldTooLong{field: field, length: n, limit: 0xffff})
	}
	return appendU16(dst, uint16(n))
}

// appendCount32 appends a u32 list count, panicking when n does not fit.
func appendCount32(dst []byte, field string, n int) []byte {
	if uint64(n) > 0xffffffff {
		panic(fieldTooLong{field: field, length: n, limit: 0xffffffff})
	}
	return appendU32(dst, uint32(n))
}

func appendString(dst []byte, field string, s string) []byte {
	if len(s) > MaxStringBytes {
		panic(fieldTooLong{field: field, length: len(s), limit: MaxStringBytes})
	}
	dst = appendU16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendStringBytes(dst []byte, field string, s []byte) []byte {
	if len(s) > MaxStringBytes {
		panic(fieldTooLong{field: field, length: len(s), limit: MaxStringBytes})
	}
	dst = appendU16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, field string, b []byte) []byte {
	dst = appendCount32(dst, field, len(b))
	return append(dst, b...)
}

func appendHeaders(dst []byte, headers []Header) []byte {
	dst = appendCount16(dst, "headers", len(headers))
	for i := range headers {
		dst = appendStringBytes(dst, "header key", headers[i].Key)
		dst = appendBytes(dst, "header value", headers[i].Value)
	}
	return dst
}

// decoder reads one body. The first failure is kept in err and every later
// read returns a zero value, so a decode function reads its whole layout
// and checks err once, through finish.
type decoder struct {
	tag  Tag
	body []byte
	off  int
	err  error
}

func newDecoder(tag Tag, body []byte) decoder {
	return decoder{tag: tag, body: body}
}

func (d *decoder) remaining() int { return len(d.body) - d.off }

func (d *decoder) fail(base error, field string, detail string) {
	if d.err == nil {
		d.err = &FrameError{Tag: d.tag, Field: field, Offset: d.off, Detail: detail, Err: base}
	}
}

// failf records a malformed-frame error at the current offset.
func (d *decoder) failf(field string, format string, args ...any) {
	if d.err == nil {
		d.fail(ErrMalformed, field, fmt.Sprintf(format, args...))
	}
}

// need reports whether n more bytes are present, recording a truncation
// when they are not.
func (d *decoder) need(n int, field string) bool {
	if d.err == nil && len(d.body)-d.off >= n {
		return true // the fast path is small enough to inline
	}
	return d.needSlow(n, field)
}

func (d *decoder) needSlow(n int, field string) bool {
	if d.err != nil {
		return false
	}
	d.fail(ErrTruncated, field, fmt.Sprintf("needs %d bytes, %d remain", n, d.remaining()))
	return false
}

func (d *decoder) u8(field string) uint8 {
	if !d.need(1, field) {
		return 0
	}
	v := d.body[d.off]
	d.off++
	return v
}

func (d *decoder) u16(field string) uint16 {
	if !d.need(2, field) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.body[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32(field string) uint32 {
	if !d.need(4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.body[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64(field string) uint64 {
	if !d.need(8, field) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.body[d.off:])
	d.off += 8
	return v
}

func (d *decoder) i64(field string) int64 { return int64(d.u64(field)) }

func (d *decoder) boolean(field string) bool {
	if !d.need(1, field) {
		return false
	}
	v := d.body[d.off]
	if v > 1 {
		d.failf(field, "bool byte is %d, want 0 or 1", v)
		return false
	}
	d.off++
	return v == 1
}

// enum reads a u8 whose defined values are lo..hi; any other value is
// malformed.
func (d *decoder) enum(field string, lo, hi uint8) uint8 {
	if !d.need(1, field) {
		return 0
	}
	v := d.body[d.off]
	if v < lo || v > hi {
		d.failf(field, "value %d is not defined (want %d to %d)", v, lo, hi)
		return 0
	}
	d.off++
	return v
}

// nonZeroU64 reads a u64 that the layout forbids to be zero (request ids,
// sequence numbers, delivery tags, subscription ids).
func (d *decoder) nonZeroU64(field string) uint64 {
	start := d.off
	v := d.u64(field)
	if v == 0 && d.err == nil {
		d.off = start
		d.failf(field, "must not be zero")
	}
	return v
}

// take returns the next n bytes, aliasing the body, or nil when n is zero
// or the bytes are missing.
func (d *decoder) take(n int, field string) []byte {
	if !d.need(n, field) || n == 0 {
		return nil
	}
	b := d.body[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

// stringBytes reads a string field and returns its bytes aliasing the body.
func (d *decoder) stringBytes(field string) []byte {
	start := d.off
	n := int(d.u16(field))
	b := d.take(n, field)
	if d.err == nil && !utf8.Valid(b) {
		d.off = start
		d.failf(field, "string is not valid UTF-8")
		return nil
	}
	return b
}

// str reads a string field into a new Go string.
func (d *decoder) str(field string) string {
	b := d.stringBytes(field)
	if len(b) == 0 {
		return ""
	}
	return string(b)
}

// bytes reads a bytes field, aliasing the body.
func (d *decoder) bytes(field string) []byte {
	n := d.u32(field)
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(d.remaining()) {
		d.fail(ErrTruncated, field, fmt.Sprintf("length %d exceeds the %d bytes that remain", n, d.remaining()))
		return nil
	}
	return d.take(int(n), field)
}

// count16 and count32 read a list count and check that the remaining body
// could hold that many elements of at least minElementBytes each, so no
// caller ever allocates for elements that are not there.
func (d *decoder) count16(field string, minElementBytes int) int {
	return d.checkCount(field, int(d.u16(field)), minElementBytes)
}

func (d *decoder) count32(field string, minElementBytes int) int {
	return d.checkCount(field, int(d.u32(field)), minElementBytes)
}

func (d *decoder) checkCount(field string, n int, minElementBytes int) int {
	if d.err != nil {
		return 0
	}
	// n < 2^32 and minElementBytes is small, so the product cannot overflow.
	if n < 0 || uint64(n)*uint64(minElementBytes) > uint64(d.remaining()) {
		d.fail(ErrTruncated, field, fmt.Sprintf("count %d needs at least %d bytes, %d remain",
			n, n*minElementBytes, d.remaining()))
		return 0
	}
	return n
}

// headers reads a headers field into dst's storage.
func (d *decoder) headers(dst []Header) []Header {
	n := d.count16("headers", minHeaderBytes)
	dst = growHeaders(dst, n)
	for i := 0; i < n && d.err == nil; i++ {
		dst[i].Key = d.stringBytes("header key")
		dst[i].Value = d.bytes("header value")
	}
	if d.err != nil {
		return dst[:0]
	}
	return dst
}

// finish reports the first error, or a malformed-frame error when bytes
// are left after the layout ended.
func (d *decoder) finish() error {
	if d.err == nil && d.remaining() != 0 {
		d.failf("", "%d trailing bytes after the layout", d.remaining())
	}
	return d.err
}

// growHeaders returns s resized to n elements, reusing its storage when it
// is large enough. Callers have bounded n by the body length.
func growHeaders(s []Header, n int) []Header {
	if cap(s) < n {
		return make([]Header, n)
	}
	return s[:n]
}

// growSlice returns s resized to n elements, reusing its storage when it is
// large enough. The elements keep their old contents, so nested slices are
// reused too; callers overwrite every field. Callers have bounded n by the
// body length.
func growSlice[T any](s []T, n int) []T {
	if cap(s) < n {
		grown := make([]T, n)
		copy(grown, s[:cap(s)])
		return grown
	}
	return s[:n]
}

// appendMsgpackBytes appends a bytes field whose content write appends: the
// length is reserved, then filled in.
func appendMsgpackBytes(dst []byte, field string, write func([]byte) []byte) []byte {
	lengthAt := len(dst)
	dst = write(appendU32(dst, 0))
	n := len(dst) - lengthAt - 4
	if uint64(n) > 0xffffffff {
		panic(fieldTooLong{field: field, length: n, limit: 0xffffffff})
	}
	binary.BigEndian.PutUint32(dst[lengthAt:], uint32(n))
	return dst
}
