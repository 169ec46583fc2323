package log

// Record format. Every record in a segment's .log file is laid out as
// below, little-endian, records back to back with no padding. These
// constants are part of the on-disk format and must not change.
//
//	offset  size  field
//	0       4     length: bytes after the CRC field, 17 + len(body)
//	4       4     crc:    CRC-32C (Castagnoli) of the length bytes that follow
//	8       8     offset: the record's log offset
//	16      8     epoch:  the writer's epoch when it was appended
//	24      1     type:   caller-defined record type
//	25      n     body
//
// The CRC covers everything after it (offset, epoch, type, body); the length
// is checked by bounds (at least 17, at most recordLengthMax) and by the CRC
// failing when it is wrong. Offsets inside a segment are dense and start at
// the segment's base offset (its file name).

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

const (
	recordPrefixBytes = 8  // length + crc
	recordFixedBytes  = 17 // offset + epoch + type: the minimum length
	recordHeaderBytes = recordPrefixBytes + recordFixedBytes
	// recordBodyMax is the largest body the format accepts (64 MiB). An
	// append limit (Options.MaxRecordBytes) may be lower, never higher.
	recordBodyMax   = 64 << 20
	recordLengthMax = recordFixedBytes + recordBodyMax
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Decode failures. They are internal: recovery turns them into decisions
// and reads wrap them in ErrCorrupt.
var (
	errShortRecord = errors.New("record extends past the available bytes")
	errBadLength   = errors.New("record length out of bounds")
	errBadChecksum = errors.New("record checksum mismatch")
)

// encodedSize is the size on disk of a record with a body of n bytes.
func encodedSize(n int) int { return recordHeaderBytes + n }

// appendRecord appends the encoding of one record to dst.
func appendRecord(dst []byte, offset, epoch uint64, recordType uint8, body []byte) []byte {
	start := len(dst)
	var header [recordHeaderBytes]byte
	binary.LittleEndian.PutUint32(header[0:4], uint32(recordFixedBytes+len(body)))
	binary.LittleEndian.PutUint64(header[8:16], offset)
	binary.LittleEndian.PutUint64(header[16:24], epoch)
	header[24] = recordType
	dst = append(dst, header[:]...)
	dst = append(dst, body...)
	checksum := crc32.Checksum(dst[start+recordPrefixBytes:], castagnoli)
	binary.LittleEndian.PutUint32(dst[start+4:start+8], checksum)
	return dst
}

// recordLength reads and bounds-checks the length field of the record at
// the start of b (which must hold at least recordPrefixBytes) and returns
// the record's total size on disk.
func recordLength(b []byte) (int, error) {
	length := binary.LittleEndian.Uint32(b[0:4])
	if length < recordFixedBytes || length > recordLengthMax {
		return 0, errBadLength
	}
	return recordPrefixBytes + int(length), nil
}

// decodeRecord decodes the record at the start of b. It returns the record
// (Body aliases b) and its size on disk, or errShortRecord when b ends
// before the record does, errBadLength or errBadChecksum.
func decodeRecord(b []byte) (Record, int, error) {
	if len(b) < recordPrefixBytes {
		return Record{}, 0, errShortRecord
	}
	size, err := recordLength(b)
	if err != nil {
		return Record{}, 0, err
	}
	if len(b) < size {
		return Record{}, size, errShortRecord
	}
	want := binary.LittleEndian.Uint32(b[4:8])
	if crc32.Checksum(b[recordPrefixBytes:size], castagnoli) != want {
		return Record{}, size, errBadChecksum
	}
	return Record{
		Offset: binary.LittleEndian.Uint64(b[8:16]),
		Epoch:  binary.LittleEndian.Uint64(b[16:24]),
		Type:   b[24],
		Body:   b[recordHeaderBytes:size:size],
	}, size, nil
}
