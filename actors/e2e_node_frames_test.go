package actors

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// A client connection that sends a frame only a node may send (a
// replication or peer-handshake frame, or a server frame) is closed with
// protocol_violation on the frame's header: the node answers without
// waiting for the 1 MiB body the header announces, so it buffers none of
// it. Every other client keeps working.
func TestClientConnectionsRefuseNodeFramesOnTheirHeader(t *testing.T) {
	b := startBroker(t, nil)
	refused := 0
	for _, tag := range wire.Tags() {
		if tag.ClientMaySend() {
			continue
		}
		refused++
		conn, _ := rawSession(t, b)
		var header [wire.HeaderBytes]byte
		binary.BigEndian.PutUint32(header[0:4], uint32(tag))
		binary.BigEndian.PutUint32(header[4:8], 1<<20)
		if _, err := conn.Write(header[:]); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(testWait)) // a safety net: the answer needs no body
		reader := wire.NewReader(conn, 0)
		answer, body, err := reader.Next()
		if err != nil {
			t.Fatalf("%s (%s): no answer to its header: %v", tag, tag.Name(), err)
		}
		var frame wire.ErrorFrame
		if answer != wire.TagError || frame.Decode(body) != nil {
			t.Fatalf("%s (%s): answered with %s", tag, tag.Name(), answer)
		}
		if frame.Code != wire.CodeProtocolViolation || !strings.Contains(frame.Message, tag.String()) {
			t.Fatalf("%s (%s): answered %s %q", tag, tag.Name(), frame.Code, frame.Message)
		}
		if _, _, err := reader.Next(); err == nil {
			t.Fatalf("%s (%s): the connection stayed open", tag, tag.Name())
		}
		conn.Close()
	}
	if refused < 20 {
		t.Fatalf("only %d frame kinds are refused from clients", refused)
	}
	wellBehaved(t, b, "after-node-frames")
}
