package actors

// The session rules of docs/protocol.md that the node enforces: one order
// per connection (4.2), publish sequence numbers (4.3), the hello deadline
// (4.1) and the keepalive (4.7); and fair competing consumers (4.4).

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// writeAll encodes frames into one buffer and sends it with one write.
func (c *testClient) writeAll(frames ...wire.Frame) {
	c.t.Helper()
	var buffer []byte
	for _, frame := range frames {
		buffer = frame.Encode(buffer)
	}
	c.sendRaw(buffer)
}

// Requests pipelined in one write take effect in the order sent: the
// publish sees the queue the declare before it made, the subscribe sees
// the publish (it is delivered), info and list see the queue. Then, in a
// second write: a publish after a delete finds no queue, and one after a
// second declare finds the fresh queue.
func TestPipelinedRequestsTakeEffectInOrder(t *testing.T) {
	for _, mode := range []wire.Mode{wire.ModeDurable, wire.ModeBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			b := startBroker(t, nil)
			c := connect(t, b)
			c.writeAll(
				&wire.Declare{RequestID: 1, Queue: "piped", Mode: mode},
				&wire.Publish{Queue: []byte("piped"), Messages: []wire.PublishMessage{{Seq: 1, Payload: []byte("first")}}},
				&wire.Subscribe{RequestID: 2, Queue: "piped", Prefetch: 8},
				&wire.GetQueueInfo{RequestID: 3, Queue: "piped"},
				&wire.ListQueues{RequestID: 4},
			)
			if reply, ok := c.reply(1).(*wire.DeclareOKMode); !ok || !reply.Created {
				t.Fatalf("declare: %+v", reply)
			}
			subscribed, ok := c.reply(2).(*wire.SubscribeOK)
			if !ok {
				t.Fatalf("subscribe after the publish: %+v", subscribed)
			}
			if info, ok := c.reply(3).(*wire.QueueInfoReply); !ok || info.Info.Name != "piped" {
				t.Fatalf("info after the declare: %+v", info)
			}
			if list, ok := c.reply(4).(*wire.QueueList); !ok || len(list.Queues) != 1 || list.Queues[0].Name != "piped" {
				t.Fatalf("list after the declare: %+v", list)
			}
			if out := c.awaitOutcomes([]uint64{1})[1]; !out.confirmed {
				t.Fatalf("publish after the declare: %+v", out)
			}
			if d := c.nextDeliver(subscribed.SubscriptionID); len(d) != 1 || string(d[0].Payload) != "first" {
				t.Fatalf("the subscribe after the publish got %+v", d)
			}

			c.writeAll(
				&wire.DeleteQueue{RequestID: 5, Queue: "piped"},
				&wire.Publish{Queue: []byte("piped"), Messages: []wire.PublishMessage{{Seq: 2, Payload: []byte("after delete")}}},
				&wire.GetQueueInfo{RequestID: 6, Queue: "piped"},
				&wire.Declare{RequestID: 7, Queue: "piped", Mode: mode},
				&wire.Publish{Queue: []byte("piped"), Messages: []wire.PublishMessage{{Seq: 3, Payload: []byte("fresh")}}},
				&wire.GetQueueInfo{RequestID: 8, Queue: "piped"},
			)
			if ok, isOK := c.reply(5).(*wire.OK); !isOK || ok.Count != 1 {
				t.Fatalf("delete: %+v, want ok counting the one message", ok)
			}
			if refused, ok := c.reply(6).(*wire.ErrorFrame); !ok || refused.Code != wire.CodeUnknownQueue {
				t.Fatalf("info after the delete: %+v, want unknown_queue", refused)
			}
			if reply, ok := c.reply(7).(*wire.DeclareOKMode); !ok || !reply.Created {
				t.Fatalf("second declare did not create a fresh queue: %+v", reply)
			}
			outcomes := c.awaitOutcomes([]uint64{2, 3})
			if outcomes[2].confirmed || outcomes[2].code != wire.CodeUnknownQueue {
				t.Fatalf("publish after the delete: %+v, want unknown_queue", outcomes[2])
			}
			if !outcomes[3].confirmed {
				t.Fatalf("publish after the second declare: %+v", outcomes[3])
			}
			if info, ok := c.reply(8).(*wire.QueueInfoReply); !ok || info.Info.WrittenNext > 1 {
				t.Fatalf("info of the fresh queue: %+v", info)
			}
		})
	}
}

// A publish pipelined right before a delete takes effect first: it is
// confirmed, and the delete's count includes it.
func TestPublishBeforeDeleteIsCountedByIt(t *testing.T) {
	for _, mode := range []wire.Mode{wire.ModeDurable, wire.ModeBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			b := startBroker(t, nil)
			c := connect(t, b)
			c.mustDeclare("short-lived", mode, wire.QueueOptions{})
			c.writeAll(
				&wire.Publish{Queue: []byte("short-lived"), Messages: []wire.PublishMessage{
					{Seq: 1, Payload: []byte("a")}, {Seq: 2, Payload: []byte("b")}}},
				&wire.DeleteQueue{RequestID: 9, Queue: "short-lived"},
			)
			for seq, out := range c.awaitOutcomes([]uint64{1, 2}) {
				if !out.confirmed {
					t.Fatalf("seq %d published before the delete: %+v", seq, out)
				}
			}
			if ok, isOK := c.reply(9).(*wire.OK); !isOK || ok.Count != 2 {
				t.Fatalf("delete: %+v, want ok counting the 2 messages published before it", ok)
			}
		})
	}
}

// A client that pipelines far more frames than the session holds behind a
// declare is slowed, not refused: every publish is confirmed, in order
// with the declare.
func TestPipelinedFramesBeyondTheHeldBound(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	frames := []wire.Frame{&wire.Declare{RequestID: 1, Queue: "deep", Mode: wire.ModeBuffered}}
	const publishes = 3 * heldFramesMax
	var seqs []uint64
	for seq := uint64(1); seq <= publishes; seq++ {
		frames = append(frames, &wire.Publish{Queue: []byte("deep"),
			Messages: []wire.PublishMessage{{Seq: seq, Payload: []byte("x")}}})
		seqs = append(seqs, seq)
	}
	done := make(chan struct{})
	go func() { // the write blocks while the node reads no further
		defer close(done)
		for _, frame := range frames {
			_ = c.writer.WriteFrame(frame)
		}
		_ = c.writer.Flush()
	}()
	c.reply(1)
	for seq, out := range c.awaitOutcomes(seqs) {
		if !out.confirmed {
			t.Fatalf("seq %d: %+v", seq, out)
		}
	}
	<-done
}

// Sequence numbers: within a frame they must increase (malformed_frame);
// a frame whose first number is not above every earlier one of the
// session is a protocol_violation. Both close the connection, and the
// violating frame's messages are not stored.
func TestPublishSequenceNumbersAreEnforced(t *testing.T) {
	b := startBroker(t, nil)
	setup := connect(t, b)
	setup.mustDeclare("seqs", wire.ModeDurable, wire.QueueOptions{})
	cases := []struct {
		name   string
		frames [][]uint64 // sequence numbers of each publish frame
		code   wire.Code
	}{
		{"repeated within a frame", [][]uint64{{1, 2, 2}}, wire.CodeMalformedFrame},
		{"decreasing within a frame", [][]uint64{{5, 4}}, wire.CodeMalformedFrame},
		{"reused by a later frame", [][]uint64{{1, 2}, {2, 3}}, wire.CodeProtocolViolation},
		{"lower in a later frame", [][]uint64{{10}, {7}}, wire.CodeProtocolViolation},
		{"equal to an earlier frame's last", [][]uint64{{3, 9}, {9}}, wire.CodeProtocolViolation},
	}
	stored := uint64(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t, b)
			for i, seqs := range tc.frames {
				frame := &wire.Publish{Queue: []byte("seqs")}
				for _, seq := range seqs {
					frame.Messages = append(frame.Messages, wire.PublishMessage{Seq: seq, Payload: []byte(tc.name)})
				}
				if i < len(tc.frames)-1 {
					c.send(frame)
					c.awaitOutcomes(seqs)
					stored += uint64(len(seqs))
					continue
				}
				c.sendRaw(frame.Encode(nil))
			}
			errs := c.expectClosed()
			if len(errs) != 1 || errs[0].Code != tc.code {
				t.Fatalf("errors %+v, want one %s", errs, tc.code)
			}
			if tc.code == wire.CodeProtocolViolation && !strings.Contains(errs[0].Message, "sequence number") {
				t.Fatalf("the error does not say what was wrong: %q", errs[0].Message)
			}
			if info := setup.info("seqs"); info.Ready != stored {
				t.Fatalf("ready %d, want %d: the violating frame was stored", info.Ready, stored)
			}
		})
	}
	checkAnotherSessionWorks(t, b)
}

// A connection that never sends hello is closed after the hello deadline
// with protocol_violation; others are unaffected.
func TestHelloDeadlineClosesSilentConnections(t *testing.T) {
	b := startBroker(t, func(config *Config) { config.HelloTimeout = 100 * time.Millisecond })
	silent := dialBroker(t, b)
	errs := silent.expectClosed()
	if len(errs) != 1 || errs[0].Code != wire.CodeProtocolViolation || !strings.Contains(errs[0].Message, "hello") {
		t.Fatalf("silent connection closed with %+v", errs)
	}
	late := dialBroker(t, b)
	late.hello("", "") // in time
	late.mustDeclare("on-time", wire.ModeBuffered, wire.QueueOptions{})
}

// An idle client is pinged; one that answers stays connected through many
// checks, one that answers nothing is closed after KeepaliveMissedMax
// unanswered pings.
func TestKeepaliveClosesClientsThatMissPongs(t *testing.T) {
	const missedMax = 2
	b := startBroker(t, func(config *Config) {
		config.KeepaliveInterval = 30 * time.Millisecond
		config.KeepaliveMissedMax = missedMax
	})
	answering, deaf := connect(t, b), connect(t, b)
	for pings := 0; pings < 3*missedMax+2; pings++ {
		ping := answering.waitFor("a ping", func(frame wire.Frame) bool { _, ok := frame.(*wire.Ping); return ok })
		answering.send(&wire.Pong{RequestID: ping.(*wire.Ping).RequestID})
	}
	// The answering client is still served: asked right after its last
	// pong, before the deaf client is read (which takes keepalive
	// intervals of its own on a loaded machine).
	answering.mustDeclare("still-here", wire.ModeBuffered, wire.QueueOptions{})
	var pings int
	for _, frame := range deaf.backlog {
		if _, ok := frame.(*wire.Ping); ok {
			pings++
		}
	}
	var errs []*wire.ErrorFrame
	for {
		frame, err := deaf.read()
		if err != nil {
			break
		}
		switch f := frame.(type) {
		case *wire.Ping:
			pings++
		case *wire.ErrorFrame:
			errs = append(errs, f)
		}
	}
	if pings != missedMax || len(errs) != 1 || errs[0].Code != wire.CodeProtocolViolation ||
		!strings.Contains(errs[0].Message, "pings unanswered") {
		t.Fatalf("deaf client: %d pings, errors %+v; want %d pings then a protocol_violation", pings, errs, missedMax)
	}
}

// A ping is answered while a delete holds the frames sent after it: the
// delete waits for a publish whose sync the disk holds, and the ping sent
// behind it is answered at once (docs/protocol.md 4.7, "as soon as it
// can"), not when the delete is. A client that pings to find a dead node
// must not take a long delete for one.
func TestPingIsAnsweredWhileADeleteWaits(t *testing.T) {
	gate := newGateFS(vfs.OS)
	b := startModeBroker(t, t.TempDir(), gate)
	c := connect(t, b)
	c.mustDeclare("slow-delete", wire.ModeDurable, wire.QueueOptions{})
	gate.hold(gateSyncs)
	defer gate.release()
	c.writeAll(
		&wire.Publish{Queue: []byte("slow-delete"), Messages: []wire.PublishMessage{{Seq: 1, Payload: []byte("a")}}},
		&wire.DeleteQueue{RequestID: 9, Queue: "slow-delete"},
		&wire.Ping{RequestID: 10},
	)
	c.reply(10)
	for _, frame := range c.backlog {
		if requestIDOf(frame) == 9 {
			t.Fatalf("the delete was answered (%+v) before the pong, with the sync of the publish before it held", frame)
		}
	}
	gate.release()
	if ok, isOK := c.reply(9).(*wire.OK); !isOK {
		t.Fatalf("delete: %+v, want ok", ok)
	}
}

// Competing consumers at a low rate (one message at a time) take turns:
// with 2 and with 4 consumers, each gets its share of 40 messages within
// one message. Each prefetch exceeds the 40 messages, so no consumer ever
// runs out of credit while its acks are on their way (under load they can
// lag by several messages, and a consumer without credit is rightly
// skipped): the turns are the round-robin's alone.
func TestCompetingConsumersTakeTurnsAtALowRate(t *testing.T) {
	for _, consumers := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d consumers", consumers), func(t *testing.T) {
			b := startBroker(t, nil)
			producer := connect(t, b)
			producer.mustDeclare("turns", wire.ModeBuffered, wire.QueueOptions{})
			received := make(chan int, 64)
			var wait sync.WaitGroup
			clients := make([]*testClient, consumers)
			for i := range consumers {
				clients[i] = connect(t, b)
				sub := clients[i].subscribe("turns", 64)
				wait.Add(1)
				go func(c *testClient, index int) {
					defer wait.Done()
					for {
						tag, body, err := c.reader.Next() // the test client's helpers are not for goroutines
						if err != nil {
							return
						}
						frame, err := wire.DecodeFrame(tag, body)
						if err != nil {
							return
						}
						if deliver, ok := frame.(*wire.Deliver); ok && deliver.SubscriptionID == sub {
							for _, d := range deliver.Deliveries {
								_ = c.writer.WriteFrame(&wire.Ack{Settle: wire.Settle{SubscriptionID: sub,
									DeliveryTags: []uint64{d.DeliveryTag}}})
								_ = c.writer.Flush()
								received <- index
							}
						}
					}
				}(clients[i], i)
			}
			const total = 40
			counts := make([]int, consumers)
			for i := range total {
				producer.mustConfirm("turns", wire.BoundaryWritten, fmt.Sprintf("m%d", i))
				select {
				case index := <-received:
					counts[index]++
				case <-time.After(testWait):
					t.Fatalf("message %d was not delivered", i)
				}
			}
			share := total / consumers
			for index, count := range counts {
				if count < share-1 || count > share+1 {
					t.Fatalf("consumer %d got %d of %d (counts %v); want %d±1 each", index, count, total, counts, share)
				}
			}
			for _, c := range clients {
				_ = c.conn.SetReadDeadline(time.Now())
			}
			wait.Wait()
		})
	}
}
