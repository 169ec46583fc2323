package actors

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// Every bad input gets a clear error; stream errors also close the
// connection. After each case another session must still work.

// checkAnotherSessionWorks declares, publishes, confirms and consumes on a
// fresh connection.
func checkAnotherSessionWorks(t *testing.T, b *Broker) {
	t.Helper()
	c := connect(t, b)
	c.mustDeclare("healthy", wire.ModeBuffered, wire.QueueOptions{})
	c.mustConfirm("healthy", wire.BoundaryWritten, "still-working")
	sub := c.subscribe("healthy", 1)
	d := c.nextDeliver(sub)[0]
	c.ack(sub, d.DeliveryTag)
	c.send(&wire.Unsubscribe{RequestID: c.id(), SubscriptionID: sub})
}

func rawFrame(tag wire.Tag, body []byte, declaredLength uint32) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(tag))
	out = binary.BigEndian.AppendUint32(out, declaredLength)
	return append(out, body...)
}

func TestStreamErrorsCloseTheConnection(t *testing.T) {
	b := startBroker(t, func(config *Config) { config.MaxBodyBytes = 1 << 16 })
	cases := []struct {
		name  string
		send  func(c *testClient)
		code  wire.Code
		hello bool
	}{
		{"malformed body", func(c *testClient) {
			c.sendRaw(rawFrame(wire.TagSubscribe, []byte{0, 0, 0}, 3))
		}, wire.CodeMalformedFrame, true},
		{"truncated frame", func(c *testClient) {
			c.sendRaw(rawFrame(wire.TagPing, []byte{0, 0}, 8))
			_ = c.conn.(*net.TCPConn).CloseWrite()
		}, wire.CodeMalformedFrame, true},
		{"oversized frame", func(c *testClient) {
			c.sendRaw(rawFrame(wire.TagPublish, nil, 1<<20))
		}, wire.CodeFrameTooLarge, true},
		{"unknown tag", func(c *testClient) {
			c.sendRaw(rawFrame(wire.Tag('Z'<<24|'Z'<<16|'Z'<<8|'9'), nil, 0))
		}, wire.CodeUnknownFrame, true},
		{"frame only a node sends", func(c *testClient) {
			c.send(&wire.Confirm{Ranges: []wire.ConfirmRange{{First: 1, Last: 1, Boundary: wire.BoundaryDurable}}})
		}, wire.CodeProtocolViolation, true},
		{"request before hello", func(c *testClient) {
			c.send(&wire.Ping{RequestID: 1})
		}, wire.CodeProtocolViolation, false},
		{"second hello", func(c *testClient) {
			c.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}})
		}, wire.CodeProtocolViolation, true},
		{"unsupported version", func(c *testClient) {
			c.send(&wire.Hello{Versions: []uint16{99}})
		}, wire.CodeUnsupportedVersion, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialBroker(t, b)
			if tc.hello {
				c.hello("", "")
			}
			tc.send(c)
			errs := c.expectClosed()
			if len(errs) != 1 || errs[0].Code != tc.code || errs[0].Message == "" {
				t.Fatalf("errors before close: %+v, want one with code %s", errs, tc.code)
			}
			checkAnotherSessionWorks(t, b)
		})
	}
}

func TestAuthToken(t *testing.T) {
	b := startBroker(t, func(config *Config) { config.AuthToken = "s3cret" })
	wrong := dialBroker(t, b)
	wrong.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, AuthToken: []byte("guess")})
	errs := wrong.expectClosed()
	if len(errs) != 1 || errs[0].Code != wire.CodeUnauthorized {
		t.Fatalf("wrong token: %+v", errs)
	}
	missing := dialBroker(t, b)
	missing.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}})
	if errs := missing.expectClosed(); len(errs) != 1 || errs[0].Code != wire.CodeUnauthorized {
		t.Fatalf("missing token: %+v", errs)
	}
	good := dialBroker(t, b)
	good.hello("s3cret", "")
	good.mustDeclare("authed", wire.ModeDurable, wire.QueueOptions{})
	good.mustConfirm("authed", wire.BoundaryDurable, "x")
}

func TestRequestErrorsKeepTheConnection(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("real", wire.ModeBuffered, wire.QueueOptions{})

	// Publish to an unknown queue and to an invalid name: negative confirms.
	outcomes := c.awaitOutcomes(c.publish("nowhere", "x"))
	for _, out := range outcomes {
		if out.confirmed || out.code != wire.CodeUnknownQueue {
			t.Fatalf("publish to unknown queue: %+v", out)
		}
	}
	for _, out := range c.awaitOutcomes(c.publish("bad/name", "x")) {
		if out.confirmed || out.code != wire.CodeInvalidName {
			t.Fatalf("publish to invalid name: %+v", out)
		}
	}
	// Requests naming unknown queues or invalid names.
	requests := []struct {
		frame func(id uint64) wire.Frame
		code  wire.Code
	}{
		{func(id uint64) wire.Frame { return &wire.Subscribe{RequestID: id, Queue: "nowhere"} }, wire.CodeUnknownQueue},
		{func(id uint64) wire.Frame { return &wire.GetQueueInfo{RequestID: id, Queue: "nowhere"} }, wire.CodeUnknownQueue},
		{func(id uint64) wire.Frame { return &wire.DeleteQueue{RequestID: id, Queue: "nowhere"} }, wire.CodeUnknownQueue},
		{func(id uint64) wire.Frame { return &wire.PurgeQueue{RequestID: id, Queue: "nowhere"} }, wire.CodeUnknownQueue},
		{func(id uint64) wire.Frame { return &wire.Declare{RequestID: id, Queue: "../escape"} }, wire.CodeInvalidName},
		{func(id uint64) wire.Frame { return &wire.Declare{RequestID: id, Queue: ""} }, wire.CodeInvalidName},
		{func(id uint64) wire.Frame {
			return &wire.Declare{RequestID: id, Queue: "q", Options: wire.QueueOptions{DeadLetterQueue: "q", MaxDeliveries: 1}}
		}, wire.CodeInvalidOptions},
		{func(id uint64) wire.Frame { return &wire.Unsubscribe{RequestID: id, SubscriptionID: 12345} }, wire.CodeUnknownSubscription},
	}
	for _, request := range requests {
		id := c.id()
		c.send(request.frame(id))
		reply := c.reply(id)
		if e, ok := reply.(*wire.ErrorFrame); !ok || e.Code != request.code {
			t.Fatalf("%T: %+v, want code %s", request.frame(id), reply, request.code)
		}
	}
	// Invalid declare options (an unknown key) keep the connection.
	id := c.id()
	body := (&wire.Declare{RequestID: id, Queue: "opts"}).Encode(nil)[wire.HeaderBytes:]
	body = append(body[:len(body)-4], 0, 0, 0, 4, 0x81, 0xa1, 'x', 0x01) // options: {"x": 1}
	c.sendRaw(rawFrame(wire.TagDeclare, body, uint32(len(body))))
	if e, ok := c.reply(id).(*wire.ErrorFrame); !ok || e.Code != wire.CodeInvalidOptions {
		t.Fatalf("unknown option key: %+v", e)
	}
	// Settles for a subscription or tags this session does not hold.
	c.ack(999, 1, 2)
	if e := c.waitFor("unknown subscription", isErrorCode(wire.CodeUnknownSubscription)); e == nil {
		t.Fatal("no error for a settle on an unknown subscription")
	}
	c.mustConfirm("real", wire.BoundaryWritten, "one")
	sub := c.subscribe("real", 1)
	d := c.nextDeliver(sub)[0]
	c.ack(sub, d.DeliveryTag+1000)
	e := c.waitFor("unknown tag", isErrorCode(wire.CodeUnknownDeliveryTag)).(*wire.ErrorFrame)
	if !strings.Contains(e.Message, "does not hold") {
		t.Fatalf("unknown tag message: %q", e.Message)
	}
	// The connection still works: the real tag settles, ping answers.
	c.ack(sub, d.DeliveryTag)
	waitForInfo(t, c, "real", func(info wire.QueueInfo) bool { return info.Leased == 0 && info.Ready == 0 })
	ping := c.id()
	c.send(&wire.Ping{RequestID: ping})
	if _, ok := c.reply(ping).(*wire.Pong); !ok {
		t.Fatal("no pong after request errors")
	}
	checkAnotherSessionWorks(t, b)
}
