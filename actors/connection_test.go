package actors

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// Sends to a client that does not read never block the sender: what the
// socket does not take at once is left to the writer goroutine, and every
// frame arrives, in the order sent, once the client reads; direct sends
// and queued ones interleave without reordering.
func TestSendNeverBlocksAndKeepsOrder(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	client, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := newConnection(1, server, nil, wire.DefaultMaxBodyBytes, nil)
	c.startWriting(wire.DefaultMaxBodyBytes, func(err error) { t.Errorf("write failed: %v", err) })
	if c.sink.raw == nil {
		t.Fatal("a TCP connection offers no raw socket: no direct sends")
	}
	go c.writeLoop()
	defer c.closeNow() // after every frame was read: the writer goroutine is idle

	const frames = 400 // 400 × 64 KiB: far more than the socket buffers hold
	payload := bytes.Repeat([]byte("x"), 64<<10)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range frames {
			deliver := &wire.Deliver{SubscriptionID: uint64(i + 1), Deliveries: []wire.Delivery{{DeliveryTag: 1, Attempt: 1, Payload: payload}}}
			if err := c.send(deliver); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}()
	select {
	case <-sent:
	case <-time.After(testWait):
		t.Fatal("send blocked on a client that does not read")
	}
	reader := wire.NewReader(client, 0)
	for i := range frames {
		tag, body, err := reader.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		frame, err := wire.DecodeFrame(tag, body)
		if err != nil {
			t.Fatal(err)
		}
		deliver, ok := frame.(*wire.Deliver)
		if !ok || deliver.SubscriptionID != uint64(i+1) || len(deliver.Deliveries[0].Payload) != len(payload) {
			t.Fatalf("frame %d is %T %+v", i, frame, deliver.SubscriptionID)
		}
	}
}
