package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// headerAtATimeReader serves src and counts the bytes read from it.
type headerAtATimeReader struct {
	src  *bytes.Reader
	read int
}

func (c *headerAtATimeReader) Read(p []byte) (int, error) {
	n, err := c.src.Read(p[:min(len(p), HeaderBytes)]) // at most one header per read
	c.read += n
	return n, err
}

// A tag check refuses a frame on its header: Next returns the check's
// error without reading any byte of the body, and keeps returning it.
func TestReaderTagCheckRefusesBeforeTheBody(t *testing.T) {
	var stream bytes.Buffer
	var header [HeaderBytes]byte
	binary.BigEndian.PutUint32(header[0:4], uint32(TagPush))
	binary.BigEndian.PutUint32(header[4:8], 1<<20)
	stream.Write(header[:])
	stream.Write(make([]byte, 1<<20))
	src := &headerAtATimeReader{src: bytes.NewReader(stream.Bytes())}
	reader := NewReader(src, DefaultMaxBodyBytes)
	refusal := errors.New("not from this side")
	var checked []Tag
	reader.SetTagCheck(func(tag Tag) error {
		checked = append(checked, tag)
		if !tag.ClientMaySend() {
			return refusal
		}
		return nil
	})
	tag, body, err := reader.Next()
	if !errors.Is(err, refusal) || tag != TagPush || body != nil {
		t.Fatalf("Next = %s, %d bytes, %v", tag, len(body), err)
	}
	if src.read != HeaderBytes {
		t.Fatalf("read %d bytes of the stream, want only the %d-byte header", src.read, HeaderBytes)
	}
	if _, _, err := reader.Next(); !errors.Is(err, refusal) {
		t.Fatalf("the second Next: %v", err)
	}
	if len(checked) != 1 {
		t.Fatalf("checked %v", checked)
	}
}

// ClientMaySend: client and either-side frames only; every node-to-node
// and server frame and unknown tags are not.
func TestClientMaySend(t *testing.T) {
	for _, k := range kinds {
		want := k.from == sentByClient || k.from == sentByEither
		if got := k.tag.ClientMaySend(); got != want {
			t.Errorf("%s (%s, %s): ClientMaySend = %v", k.tag, k.name, k.from, got)
		}
	}
	for _, tag := range []Tag{TagPush, TagPeerHello, TagReplaceMember, TagHelloOK, Tag(0x46585a39)} {
		if tag.ClientMaySend() {
			t.Errorf("%s: a client may send it", tag)
		}
	}
	for _, tag := range []Tag{TagHello, TagPublish, TagPublishIdempotent, TagPing, TagError} {
		if !tag.ClientMaySend() {
			t.Errorf("%s: a client may not send it", tag)
		}
	}
}
