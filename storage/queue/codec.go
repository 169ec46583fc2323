package queue

// Shared binary helpers for the queue's formats: a bounds-checked reader of
// uvarints and length-prefixed bytes, and the CRC-32C trailer that every
// queue file (snapshot, declaration, epoch) ends with.

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errShortBuffer = errors.New("short or malformed buffer")

// appendChecksum appends the CRC-32C of buf, little-endian.
func appendChecksum(buf []byte) []byte {
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
}

// verifyChecksum splits data into body and trailer and reports whether the
// trailer matches.
func verifyChecksum(data []byte) ([]byte, bool) {
	if len(data) < 4 {
		return nil, false
	}
	body := data[:len(data)-4]
	want := binary.LittleEndian.Uint32(data[len(data)-4:])
	return body, crc32.Checksum(body, castagnoli) == want
}

// reader decodes from buf. The first failure sticks in err and every later
// call returns zero values, so a decoder checks err once at the end.
type reader struct {
	buf []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.err = errShortBuffer
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.buf) < 1 {
		r.err = errShortBuffer
		return 0
	}
	b := r.buf[0]
	r.buf = r.buf[1:]
	return b
}

func (r *reader) uint64() uint64 {
	if r.err != nil || len(r.buf) < 8 {
		r.err = errShortBuffer
		return 0
	}
	v := binary.LittleEndian.Uint64(r.buf)
	r.buf = r.buf[8:]
	return v
}

// bytes returns the next n bytes, aliasing buf.
func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.buf) {
		r.err = errShortBuffer
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

// lengthPrefixed reads a uvarint length and that many bytes.
func (r *reader) lengthPrefixed() []byte {
	n := r.uvarint()
	if n > uint64(len(r.buf)) {
		r.err = errShortBuffer
		return nil
	}
	return r.bytes(int(n))
}

func appendLengthPrefixed(buf []byte, b []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(b)))
	return append(buf, b...)
}
