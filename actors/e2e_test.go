package actors

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestPublishConsumeRoundTrip(t *testing.T) {
	for _, mode := range []wire.Mode{wire.ModeDurable, wire.ModeBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			b := startBroker(t, nil)
			c := connect(t, b)
			reply := c.mustDeclare("orders", mode, wire.QueueOptions{})
			declared := reply.(*wire.DeclareOKMode)
			if !declared.Created || declared.Mode != mode {
				t.Fatalf("declare reply %+v", declared)
			}
			boundary := wire.BoundaryDurable
			if mode == wire.ModeBuffered {
				boundary = wire.BoundaryWritten
				if len(declared.Warnings) != 1 {
					t.Fatalf("buffered declare without the warning: %+v", declared)
				}
			}
			c.mustConfirm("orders", boundary, "a", "b", "c")
			sub := c.subscribe("orders", 10)
			got := c.deliveries(sub, 3)
			for i, want := range []string{"a", "b", "c"} {
				if string(got[i].Payload) != want || got[i].Attempt != 1 || got[i].Redelivered {
					t.Fatalf("delivery %d: %+v", i, got[i])
				}
			}
			c.ack(sub, got[0].DeliveryTag, got[1].DeliveryTag, got[2].DeliveryTag)
			info := c.info("orders")
			for info.Leased != 0 {
				info = c.info("orders")
			}
			if info.Ready != 0 || info.Mode != mode || info.WrittenNext == 0 {
				t.Fatalf("info %+v", info)
			}
		})
	}
}

func TestConfirmRangesSplitAcrossQueues(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("left", wire.ModeBuffered, wire.QueueOptions{})
	c.mustDeclare("right", wire.ModeDurable, wire.QueueOptions{})
	// Interleave sequence numbers across two queues in one flight: each
	// confirm range must cover only its own queue's numbers.
	var frames []wire.Frame
	var all []uint64
	for i := 0; i < 6; i++ {
		queueName := "left"
		if i%2 == 1 {
			queueName = "right"
		}
		c.nextSeq++
		all = append(all, c.nextSeq)
		frames = append(frames, &wire.Publish{Queue: []byte(queueName),
			Messages: []wire.PublishMessage{{Seq: c.nextSeq, Payload: []byte{byte(i)}}}})
	}
	c.send(frames...)
	outcomes := c.awaitOutcomes(all)
	for i, seq := range all {
		want := wire.BoundaryWritten
		if i%2 == 1 {
			want = wire.BoundaryDurable
		}
		if out := outcomes[seq]; !out.confirmed || out.boundary != want {
			t.Fatalf("seq %d: %+v, want confirmed at %s", seq, out, want)
		}
	}
}

func TestCompetingConsumersShareAQueue(t *testing.T) {
	b := startBroker(t, nil)
	producer := connect(t, b)
	producer.mustDeclare("work", wire.ModeBuffered, wire.QueueOptions{})
	first, second := connect(t, b), connect(t, b)
	subFirst, subSecond := first.subscribe("work", 4), second.subscribe("work", 4)
	const total = 40
	payloads := make([]string, total)
	for i := range payloads {
		payloads[i] = fmt.Sprintf("m%02d", i)
	}
	producer.mustConfirm("work", wire.BoundaryWritten, payloads...)

	seen := map[string]string{}
	perConsumer := map[string]int{}
	for len(seen) < total {
		for _, consumer := range []struct {
			name string
			c    *testClient
			sub  uint64
		}{{"first", first, subFirst}, {"second", second, subSecond}} {
			if len(seen) >= total {
				break
			}
			if consumer.c.quietFor(20*time.Millisecond, isDeliverFor(consumer.sub)) {
				continue
			}
			for _, d := range consumer.c.nextDeliver(consumer.sub) {
				if previous, dup := seen[string(d.Payload)]; dup {
					t.Fatalf("%s delivered to %s and %s", d.Payload, previous, consumer.name)
				}
				seen[string(d.Payload)] = consumer.name
				perConsumer[consumer.name]++
				consumer.c.ack(consumer.sub, d.DeliveryTag)
			}
		}
	}
	if perConsumer["first"] == 0 || perConsumer["second"] == 0 {
		t.Fatalf("one consumer got everything: %v", perConsumer)
	}
}

func isDeliverFor(subscriptionID uint64) func(wire.Frame) bool {
	return func(frame wire.Frame) bool {
		deliver, ok := frame.(*wire.Deliver)
		return ok && deliver.SubscriptionID == subscriptionID
	}
}

func TestPrefetchBoundsUnsettledDeliveries(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("limited", wire.ModeBuffered, wire.QueueOptions{})
	c.mustConfirm("limited", wire.BoundaryWritten, "1", "2", "3", "4", "5")
	sub := c.subscribe("limited", 2)
	got := c.deliveries(sub, 2)
	if !c.quietFor(200*time.Millisecond, isDeliverFor(sub)) {
		t.Fatal("a third delivery arrived with prefetch 2 and nothing settled")
	}
	c.ack(sub, got[0].DeliveryTag)
	third := c.deliveries(sub, 1)
	if string(third[0].Payload) != "3" {
		t.Fatalf("after one ack got %q, want 3", third[0].Payload)
	}
	if !c.quietFor(200*time.Millisecond, isDeliverFor(sub)) {
		t.Fatal("more than one delivery followed a single ack")
	}
}

func TestLeaseExpiryRedeliversWithAttemptCount(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("leases", wire.ModeBuffered, wire.QueueOptions{LeaseTimeoutMs: 150})
	c.mustConfirm("leases", wire.BoundaryWritten, "slow")
	sub := c.subscribe("leases", 1)
	first := c.deliveries(sub, 1)[0]
	if first.Attempt != 1 || first.Redelivered {
		t.Fatalf("first delivery %+v", first)
	}
	second := c.deliveries(sub, 1)[0] // after the lease expired
	if second.Attempt != 2 || !second.Redelivered || second.Offset != first.Offset ||
		second.DeliveryTag == first.DeliveryTag {
		t.Fatalf("redelivery %+v after %+v", second, first)
	}
	// The expired tag no longer settles anything.
	c.ack(sub, first.DeliveryTag)
	errFrame := c.waitFor("unknown tag error", isErrorCode(wire.CodeUnknownDeliveryTag)).(*wire.ErrorFrame)
	if errFrame.RequestID != 0 {
		t.Fatalf("settle error tied to a request: %+v", errFrame)
	}
	c.ack(sub, second.DeliveryTag)
	waitForInfo(t, c, "leases", func(info wire.QueueInfo) bool { return info.Leased == 0 && info.Ready == 0 })
}

func isErrorCode(code wire.Code) func(wire.Frame) bool {
	return func(frame wire.Frame) bool {
		errFrame, ok := frame.(*wire.ErrorFrame)
		return ok && errFrame.Code == code
	}
}

// waitForInfo polls queue info until done accepts it (settles are
// fire-and-forget, so their effect shows up a moment later).
func waitForInfo(t *testing.T, c *testClient, queueName string, done func(wire.QueueInfo) bool) wire.QueueInfo {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		info := c.info(queueName)
		if done(info) {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue info never reached the expected state: %+v", info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeadLetteringAtMaxDeliveries(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("jobs", wire.ModeDurable, wire.QueueOptions{MaxDeliveries: 2, DeadLetterQueue: "jobs.dead"})
	c.mustConfirm("jobs", wire.BoundaryDurable, "poison")
	sub := c.subscribe("jobs", 1)
	for attempt := uint32(1); attempt <= 2; attempt++ {
		d := c.deliveries(sub, 1)[0]
		if d.Attempt != attempt {
			t.Fatalf("attempt %d delivered as %+v", attempt, d)
		}
		c.send(&wire.Nack{SubscriptionID: sub, Requeue: true, DeliveryTags: []uint64{d.DeliveryTag}})
	}
	dead := c.subscribe("jobs.dead", 1)
	d := c.deliveries(dead, 1)[0]
	if string(d.Payload) != "poison" {
		t.Fatalf("dead letter %+v", d)
	}
	headers := map[string]string{}
	for _, h := range d.Headers {
		headers[string(h.Key)] = string(h.Value)
	}
	if headers[headerDeadLetterSource] != "jobs" || headers[headerDeadLetterAttempts] != "2" {
		t.Fatalf("dead letter headers %v", headers)
	}
	info := waitForInfo(t, c, "jobs", func(info wire.QueueInfo) bool { return info.DeadLettered == 1 })
	if info.Ready != 0 || info.Leased != 0 {
		t.Fatalf("source after dead-lettering %+v", info)
	}
}

func TestModeIsFixedAtFirstDeclare(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("fixed", wire.ModeDurable, wire.QueueOptions{LeaseTimeoutMs: 5000})
	conflict := c.declare("fixed", wire.ModeBuffered, wire.QueueOptions{})
	if e, ok := conflict.(*wire.ErrorFrame); !ok || e.Code != wire.CodeModeConflict ||
		!strings.Contains(e.Message, "durable") {
		t.Fatalf("buffered re-declare of a durable queue: %+v", conflict)
	}
	kept := c.declare("fixed", wire.ModeUnset, wire.QueueOptions{})
	if ok, isOK := kept.(*wire.DeclareOKMode); !isOK || ok.Created || ok.Mode != wire.ModeDurable || ok.Policy != "" {
		t.Fatalf("re-declare without mode: %+v", kept)
	}
	same := c.declare("fixed", wire.ModeDurable, wire.QueueOptions{LeaseTimeoutMs: 5000})
	if ok, isOK := same.(*wire.DeclareOKMode); !isOK || ok.Created || ok.Mode != wire.ModeDurable || len(ok.Warnings) != 0 {
		t.Fatalf("same re-declare: %+v", same)
	}
	changed := c.declare("fixed", wire.ModeUnset, wire.QueueOptions{LeaseTimeoutMs: 100})
	if e, ok := changed.(*wire.ErrorFrame); !ok || e.Code != wire.CodeInvalidOptions {
		t.Fatalf("re-declare with another lease timeout: %+v", changed)
	}
	if info := c.info("fixed"); info.Mode != wire.ModeDurable || info.Options.LeaseTimeoutMs != 5000 {
		t.Fatalf("info after refused re-declares: %+v", info)
	}
}

// Acks a consumer sends right before it disconnects are applied: the
// session's end must not overtake its last settles at the partition.
func TestAcksSentJustBeforeDisconnectAreKept(t *testing.T) {
	b := startBroker(t, nil)
	producer := connect(t, b)
	producer.mustDeclare("tail", wire.ModeDurable, wire.QueueOptions{})
	payloads := make([]string, 200)
	for i := range payloads {
		payloads[i] = fmt.Sprint(i)
	}
	producer.mustConfirm("tail", wire.BoundaryDurable, payloads...)
	for round := 0; round < 5; round++ {
		consumer := connect(t, b)
		sub := consumer.subscribe("tail", 40)
		got := consumer.deliveries(sub, 40)
		tags := make([]uint64, len(got))
		for i, d := range got {
			tags[i] = d.DeliveryTag
		}
		consumer.ack(sub, tags...)
		consumer.conn.Close()
	}
	info := waitForInfo(t, producer, "tail", func(info wire.QueueInfo) bool {
		return info.Leased == 0 && info.Consumers == 0
	})
	if info.Ready != 0 {
		t.Fatalf("%d acked messages came back after their consumers disconnected", info.Ready)
	}
}

// mustPartitionDir is partitionDir for a valid name.
func mustPartitionDir(t testing.TB, dataDir, name string) string {
	t.Helper()
	dir, err := partitionDir(dataDir, name)
	if err != nil {
		t.Fatalf("partition dir of %q: %v", name, err)
	}
	return dir
}
