package rafttransport

// The wire format, one frame after another on a connection, every integer
// big-endian:
//
//	magic    2 bytes  0xAE 0x7D; 0x00 0x00 instead is the end of a snapshot
//	                  stream (poison), answered by the same two bytes
//	method   2 bytes  100: a Raft message batch; 200: a snapshot chunk
//	size     8 bytes  payload length in bytes, at least 1
//	headCRC  4 bytes  CRC-32 (IEEE) of the 18 header bytes with this field 0
//	bodyCRC  4 bytes  CRC-32 (IEEE) of the payload; 0 and unchecked on TLS
//	payload  size bytes: raftpb.MessageBatch or raftpb.Chunk (protobuf)
//
// It is the format of dragonboat's own TCP transport, byte for byte, so
// both transports interoperate. A frame whose header checksum, method or
// payload checksum is wrong ends the connection (the sender reconnects);
// a size above maxPayloadBytes too. The reader's buffer grows as the
// payload's bytes arrive, readChunkBytes at a time, never to the size a
// header announces before them: a header that announces 1 GiB and is
// followed by nothing costs one chunk.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"
)

const (
	headerBytes = 18

	methodMessages uint16 = 100
	methodChunk    uint16 = 200

	// maxPayloadBytes bounds what a header may announce: a garbled or
	// hostile size never makes the receiver allocate more.
	maxPayloadBytes = 1 << 30

	// Deadlines: a frame's header must follow its magic within
	// headerTimeout, and each writeChunkBytes of payload must move within
	// payloadTimeout, so a stalled peer frees the connection.
	headerTimeout   = 2 * time.Second
	payloadTimeout  = 5 * time.Second
	writeChunkBytes = 2 << 20

	// readChunkBytes is the most the reader's buffer grows by ahead of
	// the bytes that arrived (and the step of the payload deadline).
	readChunkBytes = 256 << 10
)

var (
	magic  = [2]byte{0xAE, 0x7D}
	poison = [2]byte{0x00, 0x00}

	// ErrBadFrame is a frame that breaks the format: wrong magic, header
	// checksum, method, size or payload checksum.
	ErrBadFrame = errors.New("rafttransport: bad frame")
	// errPoison is the end of a snapshot stream.
	errPoison = errors.New("rafttransport: end of stream")
)

// header is a frame's header, decoded.
type header struct {
	method  uint16
	size    uint64
	bodyCRC uint32
}

func (h header) encode(buf *[headerBytes]byte) {
	binary.BigEndian.PutUint16(buf[0:], h.method)
	binary.BigEndian.PutUint64(buf[2:], h.size)
	binary.BigEndian.PutUint32(buf[10:], 0)
	binary.BigEndian.PutUint32(buf[14:], h.bodyCRC)
	binary.BigEndian.PutUint32(buf[10:], crc32.ChecksumIEEE(buf[:]))
}

func decodeHeader(buf [headerBytes]byte) (header, error) {
	sum := binary.BigEndian.Uint32(buf[10:])
	binary.BigEndian.PutUint32(buf[10:], 0)
	if crc32.ChecksumIEEE(buf[:]) != sum {
		return header{}, fmt.Errorf("%w: header checksum", ErrBadFrame)
	}
	h := header{method: binary.BigEndian.Uint16(buf[0:]), size: binary.BigEndian.Uint64(buf[2:]),
		bodyCRC: binary.BigEndian.Uint32(buf[14:])}
	if h.method != methodMessages && h.method != methodChunk {
		return header{}, fmt.Errorf("%w: method %d", ErrBadFrame, h.method)
	}
	if h.size == 0 || h.size > maxPayloadBytes {
		return header{}, fmt.Errorf("%w: payload of %d bytes", ErrBadFrame, h.size)
	}
	return h, nil
}

// writeFrame writes one frame. encrypted leaves the payload checksum out,
// as the format says.
func writeFrame(conn net.Conn, method uint16, payload []byte, encrypted bool) error {
	h := header{method: method, size: uint64(len(payload))}
	if !encrypted {
		h.bodyCRC = crc32.ChecksumIEEE(payload)
	}
	var buf [2 + headerBytes]byte
	copy(buf[:2], magic[:])
	var head [headerBytes]byte
	h.encode(&head)
	copy(buf[2:], head[:])
	if err := conn.SetWriteDeadline(time.Now().Add(headerTimeout)); err != nil {
		return err
	}
	if _, err := conn.Write(buf[:]); err != nil {
		return err
	}
	for sent := 0; sent < len(payload); {
		end := min(sent+writeChunkBytes, len(payload))
		if err := conn.SetWriteDeadline(time.Now().Add(payloadTimeout)); err != nil {
			return err
		}
		if _, err := conn.Write(payload[sent:end]); err != nil {
			return err
		}
		sent = end
	}
	return nil
}

// readMagic waits for the next frame's first two bytes until deadline
// (zero: as long as it takes, since an idle connection is normal);
// errPoison for the end of a stream.
func readMagic(conn net.Conn, deadline time.Time) error {
	var got [2]byte
	if err := conn.SetReadDeadline(deadline); err != nil {
		return err
	}
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		return err
	}
	switch got {
	case magic:
		return nil
	case poison:
		return errPoison
	}
	return fmt.Errorf("%w: magic %x", ErrBadFrame, got)
}

// readFrame reads the header and payload that follow a magic. buf is
// reused as far as it is large enough; beyond that the payload grows as
// its bytes arrive (growPayload).
func readFrame(conn net.Conn, buf []byte, encrypted bool) (header, []byte, error) {
	if err := conn.SetReadDeadline(time.Now().Add(headerTimeout)); err != nil {
		return header{}, nil, err
	}
	var head [headerBytes]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return header{}, nil, err
	}
	h, err := decodeHeader(head)
	if err != nil {
		return header{}, nil, err
	}
	size := int(h.size)
	payload := buf[:0]
	for len(payload) < size {
		step := min(size-len(payload), readChunkBytes)
		payload = growPayload(payload, step, size)
		if err := conn.SetReadDeadline(time.Now().Add(payloadTimeout)); err != nil {
			return header{}, nil, err
		}
		read := len(payload)
		if _, err := io.ReadFull(conn, payload[read:read+step]); err != nil {
			return header{}, nil, err
		}
		payload = payload[:read+step]
	}
	if !encrypted && crc32.ChecksumIEEE(payload) != h.bodyCRC {
		return header{}, nil, fmt.Errorf("%w: payload checksum", ErrBadFrame)
	}
	return h, payload, nil
}

// growPayload makes room for step more bytes after payload, which holds
// the bytes read so far of a payload of size bytes. The capacity at least
// doubles when it grows, so a payload costs O(size) copying, and never
// passes size: what is allocated is at most twice what arrived, plus one
// step.
func growPayload(payload []byte, step, size int) []byte {
	if cap(payload)-len(payload) >= step {
		return payload
	}
	grown := make([]byte, len(payload), min(max(2*cap(payload), len(payload)+step), size))
	copy(grown, payload)
	return grown
}
