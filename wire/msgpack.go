// Msgpack bodies. Slow, evolving bodies (declare options, queue info, queue
// lists) are msgpack maps with string keys carried in a bytes field. Before
// any msgpack body reaches a decoder it is walked once by checkMsgpack,
// which enforces:
//
//   - the bytes hold exactly one msgpack value, nothing after it;
//   - every string, binary, array and map length fits in the bytes that remain
//     (an array or map of n entries needs at least n or 2n more bytes),
//     so no decoder allocates for elements that are not there;
//   - nesting is at most maxMsgpackDepth deep;
//   - no extension types (the protocol defines none) and no reserved byte 0xc1.
//
// Integers may use any msgpack integer format; readers accept every width
// and check the value's range. Writers use the shortest format. The few
// bodies the protocol defines are read and written by hand, key by key, so
// each list can be capped and each value's type checked.
package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// maxMsgpackDepth bounds nesting so a hostile body cannot exhaust the stack.
const maxMsgpackDepth = 16

// checkMsgpack verifies that b is exactly one well-bounded msgpack value.
func checkMsgpack(b []byte) error {
	end, err := skipMsgpack(b, 0, 0)
	if err != nil {
		return err
	}
	if end != len(b) {
		return fmt.Errorf("%d bytes after the msgpack value", len(b)-end)
	}
	return nil
}

// skipMsgpack returns the offset just after the value that starts at off.
func skipMsgpack(b []byte, off int, depth int) (int, error) {
	if depth > maxMsgpackDepth {
		return 0, fmt.Errorf("msgpack nesting deeper than %d", maxMsgpackDepth)
	}
	if off >= len(b) {
		return 0, fmt.Errorf("msgpack value cut short at offset %d", off)
	}
	code := b[off]
	off++
	switch {
	case code <= 0x7f || code >= 0xe0: // positive and negative fixint
		return off, nil
	case code <= 0x8f: // fixmap
		return skipMsgpackEntries(b, off, 2*int(code&0x0f), depth)
	case code <= 0x9f: // fixarray
		return skipMsgpackEntries(b, off, int(code&0x0f), depth)
	case code <= 0xbf: // fixstr
		return skipMsgpackBytes(b, off, int(code&0x1f))
	}
	switch code {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return off, nil
	case 0xcc, 0xd0: // uint8, int8
		return skipMsgpackBytes(b, off, 1)
	case 0xcd, 0xd1: // uint16, int16
		return skipMsgpackBytes(b, off, 2)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return skipMsgpackBytes(b, off, 4)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return skipMsgpackBytes(b, off, 8)
	case 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb: // bin8/16/32, str8/16/32
		n, next, err := msgpackLength(b, off, code)
		if err != nil {
			return 0, err
		}
		return skipMsgpackBytes(b, next, n)
	case 0xdc, 0xdd: // array16/32
		n, next, err := msgpackLength(b, off, code)
		if err != nil {
			return 0, err
		}
		return skipMsgpackEntries(b, next, n, depth)
	case 0xde, 0xdf: // map16/32
		n, next, err := msgpackLength(b, off, code)
		if err != nil {
			return 0, err
		}
		return skipMsgpackEntries(b, next, 2*n, depth)
	}
	return 0, fmt.Errorf("msgpack type byte 0x%02x is not allowed", code)
}

// msgpackLength reads the length that follows an 8/16/32-bit sized code.
func msgpackLength(b []byte, off int, code byte) (int, int, error) {
	width := 1
	switch code {
	case 0xc5, 0xda, 0xdc, 0xde:
		width = 2
	case 0xc6, 0xdb, 0xdd, 0xdf:
		width = 4
	}
	if len(b)-off < width {
		return 0, 0, fmt.Errorf("msgpack length cut short at offset %d", off)
	}
	switch width {
	case 1:
		return int(b[off]), off + 1, nil
	case 2:
		return int(binary.BigEndian.Uint16(b[off:])), off + 2, nil
	}
	return int(binary.BigEndian.Uint32(b[off:])), off + 4, nil
}

func skipMsgpackBytes(b []byte, off int, n int) (int, error) {
	if n < 0 || len(b)-off < n {
		return 0, fmt.Errorf("msgpack value of %d bytes cut short at offset %d", n, off)
	}
	return off + n, nil
}

// skipMsgpackEntries skips n values; each takes at least one byte, which
// is checked before the loop.
func skipMsgpackEntries(b []byte, off int, n int, depth int) (int, error) {
	if n < 0 || len(b)-off < n {
		return 0, fmt.Errorf("msgpack container of %d values cut short at offset %d", n, off)
	}
	var err error
	for i := 0; i < n; i++ {
		if off, err = skipMsgpack(b, off, depth+1); err != nil {
			return 0, err
		}
	}
	return off, nil
}

// msgpackReader reads a checked msgpack body value by value.
type msgpackReader struct {
	b   []byte
	off int
}

func (r *msgpackReader) mapLen() (int, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("want a map, the body is empty")
	}
	code := r.b[r.off]
	switch {
	case code >= 0x80 && code <= 0x8f:
		r.off++
		return int(code & 0x0f), nil
	case code == 0xde || code == 0xdf:
		n, next, err := msgpackLength(r.b, r.off+1, code)
		r.off = next
		return n, err
	}
	return 0, fmt.Errorf("want a map, found type byte 0x%02x", code)
}

func (r *msgpackReader) str() (string, error) {
	if r.off >= len(r.b) {
		return "", fmt.Errorf("want a string, the body ended")
	}
	code := r.b[r.off]
	var n, next int
	switch {
	case code >= 0xa0 && code <= 0xbf:
		n, next = int(code&0x1f), r.off+1
	case code == 0xd9 || code == 0xda || code == 0xdb:
		var err error
		if n, next, err = msgpackLength(r.b, r.off+1, code); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("want a string, found type byte 0x%02x", code)
	}
	if len(r.b)-next < n {
		return "", fmt.Errorf("string cut short")
	}
	s := r.b[next : next+n]
	if !utf8.Valid(s) {
		return "", fmt.Errorf("string is not valid UTF-8")
	}
	r.off = next + n
	return string(s), nil
}

// uint reads a non-negative integer in any msgpack integer format and
// checks it against limit.
func (r *msgpackReader) uint(limit uint64) (uint64, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("want an integer, the body ended")
	}
	code := r.b[r.off]
	if code <= 0x7f {
		r.off++
		return uint64(code), nil
	}
	var width int
	switch code {
	case 0xcc, 0xd0:
		width = 1
	case 0xcd, 0xd1:
		width = 2
	case 0xce, 0xd2:
		width = 4
	case 0xcf, 0xd3:
		width = 8
	default:
		return 0, fmt.Errorf("want a non-negative integer, found type byte 0x%02x", code)
	}
	raw := r.b[r.off+1:]
	if len(raw) < width {
		return 0, fmt.Errorf("integer cut short")
	}
	var value uint64
	negative := false
	switch width {
	case 1:
		value, negative = uint64(raw[0]), code == 0xd0 && int8(raw[0]) < 0
	case 2:
		value = uint64(binary.BigEndian.Uint16(raw))
		negative = code == 0xd1 && int16(value) < 0
	case 4:
		value = uint64(binary.BigEndian.Uint32(raw))
		negative = code == 0xd2 && int32(value) < 0
	case 8:
		value = binary.BigEndian.Uint64(raw)
		negative = code == 0xd3 && int64(value) < 0
	}
	if negative {
		return 0, fmt.Errorf("want a non-negative integer, found a negative one")
	}
	if value > limit {
		return 0, fmt.Errorf("%d is above the limit of %d", value, limit)
	}
	r.off += 1 + width
	return value, nil
}

func (r *msgpackReader) arrayLen(limit int) (int, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("want an array, the body ended")
	}
	code := r.b[r.off]
	n := 0
	switch {
	case code >= 0x90 && code <= 0x9f:
		n = int(code & 0x0f)
		r.off++
	case code == 0xdc || code == 0xdd:
		var next int
		var err error
		if n, next, err = msgpackLength(r.b, r.off+1, code); err != nil {
			return 0, err
		}
		r.off = next
	default:
		return 0, fmt.Errorf("want an array, found type byte 0x%02x", code)
	}
	if n > limit {
		return 0, fmt.Errorf("array of %d entries is over the limit of %d", n, limit)
	}
	return n, nil
}

func (r *msgpackReader) boolean() (bool, error) {
	if r.off >= len(r.b) {
		return false, fmt.Errorf("want a bool, the body ended")
	}
	switch r.b[r.off] {
	case 0xc2:
		r.off++
		return false, nil
	case 0xc3:
		r.off++
		return true, nil
	}
	return false, fmt.Errorf("want a bool, found type byte 0x%02x", r.b[r.off])
}

// int reads a signed integer in any msgpack integer format; unsigned
// values above the int64 range are refused.
func (r *msgpackReader) int() (int64, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("want an integer, the body ended")
	}
	code := r.b[r.off]
	if code >= 0xe0 {
		r.off++
		return int64(int8(code)), nil
	}
	raw := r.b[r.off+1:]
	var value int64
	width := 0
	switch code {
	case 0xd0:
		width = 1
		if len(raw) >= width {
			value = int64(int8(raw[0]))
		}
	case 0xd1:
		width = 2
		if len(raw) >= width {
			value = int64(int16(binary.BigEndian.Uint16(raw)))
		}
	case 0xd2:
		width = 4
		if len(raw) >= width {
			value = int64(int32(binary.BigEndian.Uint32(raw)))
		}
	case 0xd3:
		width = 8
		if len(raw) >= width {
			value = int64(binary.BigEndian.Uint64(raw))
		}
	default:
		unsigned, err := r.uint(math.MaxInt64)
		return int64(unsigned), err
	}
	if len(raw) < width {
		return 0, fmt.Errorf("integer cut short")
	}
	r.off += 1 + width
	return value, nil
}

// mapEntries reads a map header, then calls visit once per key with the
// reader positioned at the value; visit must consume the value.
func (r *msgpackReader) mapEntries(visit func(key string) error) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		key, err := r.str()
		if err != nil {
			return fmt.Errorf("map key: %w", err)
		}
		if err := visit(key); err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
	}
	return nil
}

func (r *msgpackReader) skip() error {
	next, err := skipMsgpack(r.b, r.off, 1)
	if err != nil {
		return err
	}
	r.off = next
	return nil
}

func appendMsgpackMapHeader(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}

func appendMsgpackString(dst []byte, s string) []byte {
	switch n := len(s); {
	case n <= 31:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

// appendMsgpackUint appends v in the shortest msgpack unsigned format.
func appendMsgpackUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendMsgpackArrayHeader(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func appendMsgpackBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 0xc3)
	}
	return append(dst, 0xc2)
}

// appendMsgpackInt appends v in the shortest msgpack integer format.
func appendMsgpackInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendMsgpackUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(int8(v)))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(int8(v)))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(int16(v)))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(int32(v)))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}
