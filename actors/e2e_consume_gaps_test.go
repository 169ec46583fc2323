package actors

// End-to-end tests of the consume side: nack without requeue, the
// client's body limit, and the end of a subscription the node decides.

import (
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// A nack without requeue dead-letters at once on a queue with a
// dead-letter queue, long before max deliveries, with the attempt counted;
// without a dead-letter queue it drops the message.
func TestNackWithoutRequeueDeadLettersAtOnce(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("jobs", wire.ModeDurable, wire.QueueOptions{MaxDeliveries: 5, DeadLetterQueue: "jobs.dead"})
	c.mustDeclare("scratch", wire.ModeBuffered, wire.QueueOptions{MaxDeliveries: 5})
	c.mustConfirm("jobs", wire.BoundaryDurable, "poison")
	c.mustConfirm("scratch", wire.BoundaryWritten, "junk")

	sub := c.subscribe("jobs", 1)
	d := c.deliveries(sub, 1)[0]
	c.send(&wire.Nack{SubscriptionID: sub, Requeue: false, DeliveryTags: []uint64{d.DeliveryTag}})
	dead := c.subscribe("jobs.dead", 1)
	letter := c.deliveries(dead, 1)[0]
	headers := map[string]string{}
	for _, h := range letter.Headers {
		headers[string(h.Key)] = string(h.Value)
	}
	if string(letter.Payload) != "poison" || headers[headerDeadLetterSource] != "jobs" ||
		headers[headerDeadLetterAttempts] != "1" {
		t.Fatalf("dead letter %+v, headers %v", letter, headers)
	}
	info := waitForInfo(t, c, "jobs", func(info wire.QueueInfo) bool { return info.DeadLettered == 1 })
	if info.Ready != 0 || info.Leased != 0 || info.Delayed != 0 {
		t.Fatalf("source after the nack: %+v", info)
	}

	scratch := c.subscribe("scratch", 1)
	d = c.deliveries(scratch, 1)[0]
	c.send(&wire.Nack{SubscriptionID: scratch, Requeue: false, DeliveryTags: []uint64{d.DeliveryTag}})
	info = waitForInfo(t, c, "scratch", func(info wire.QueueInfo) bool { return info.Leased == 0 })
	if info.Ready != 0 || info.Delayed != 0 {
		t.Fatalf("a nack without requeue and no dead-letter queue kept the message: %+v", info)
	}
}

// isSubscriptionEnded matches the subscription-ended frame of one
// subscription.
func isSubscriptionEnded(subscriptionID uint64) func(wire.Frame) bool {
	return func(frame wire.Frame) bool {
		ended, ok := frame.(*wire.SubscriptionEnded)
		return ok && ended.SubscriptionID == subscriptionID
	}
}

// When the node ends a subscription (here: its queue is deleted), the
// frame names that subscription, and the session's other subscriptions go
// on.
func TestNodeEndedSubscriptionIsNamed(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("doomed", wire.ModeBuffered, wire.QueueOptions{})
	c.mustDeclare("kept", wire.ModeBuffered, wire.QueueOptions{})
	doomed := c.subscribe("doomed", 4)
	kept := c.subscribe("kept", 4)
	id := c.id()
	c.send(&wire.DeleteQueue{RequestID: id, Queue: "doomed"})
	if _, ok := c.reply(id).(*wire.OK); !ok {
		t.Fatal("delete was not answered ok")
	}
	ended := c.waitFor("the doomed subscription's end", isSubscriptionEnded(doomed)).(*wire.SubscriptionEnded)
	if ended.Code != wire.CodeUnknownQueue || !strings.Contains(ended.Message, "doomed") {
		t.Fatalf("subscription ended %+v", ended)
	}
	c.mustConfirm("kept", wire.BoundaryWritten, "still here")
	if d := c.nextDeliver(kept); string(d[0].Payload) != "still here" {
		t.Fatalf("delivery on the other subscription %+v", d)
	}
}

// helloWithLimit completes hello advertising a body limit.
func helloWithLimit(c *testClient, maxBodyBytes uint32) {
	c.t.Helper()
	c.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "small", MaxBodyBytes: maxBodyBytes})
	if _, ok := c.waitFor("hello-ok", func(frame wire.Frame) bool {
		_, ok := frame.(*wire.HelloOK)
		_, isErr := frame.(*wire.ErrorFrame)
		return ok || isErr
	}).(*wire.HelloOK); !ok {
		c.t.Fatal("hello refused")
	}
}

// A client that advertises a body limit below a stored message's delivery
// never gets it whole or in part: its subscription ends with a frame that
// names it and says why, the message is released for consumers that
// accept it, and the connection goes on.
func TestDeliveryOverTheClientLimitEndsTheSubscription(t *testing.T) {
	b := startBroker(t, nil)
	small := dialBroker(t, b)
	helloWithLimit(small, 4096)
	small.mustDeclare("blobs", wire.ModeBuffered, wire.QueueOptions{})
	small.mustConfirm("blobs", wire.BoundaryWritten, strings.Repeat("x", 6000), "tiny")
	sub := small.subscribe("blobs", 10)
	first := small.waitFor("a deliver or the end of the subscription", func(frame wire.Frame) bool {
		if deliver, ok := frame.(*wire.Deliver); ok {
			return deliver.SubscriptionID == sub
		}
		return isSubscriptionEnded(sub)(frame)
	})
	ended, ok := first.(*wire.SubscriptionEnded)
	if !ok {
		t.Fatalf("the small client got %T before its subscription ended", first)
	}
	if ended.Code != wire.CodeInvalidRequest || !strings.Contains(ended.Message, "4096") {
		t.Fatalf("subscription ended %+v", ended)
	}
	info := waitForInfo(t, small, "blobs", func(info wire.QueueInfo) bool { return info.Leased == 0 })
	if info.Ready != 2 || info.Consumers != 0 {
		t.Fatalf("after the end: %+v", info)
	}

	large := connect(t, b)
	got := large.deliveries(large.subscribe("blobs", 10), 2)
	if len(got[0].Payload) != 6000 || string(got[1].Payload) != "tiny" || got[0].Attempt != 1 {
		t.Fatalf("deliveries to a client that accepts them: %d bytes, %q, attempt %d",
			len(got[0].Payload), got[1].Payload, got[0].Attempt)
	}
}

// The node accepts a message only if one delivery of it fits its own body
// limit, with room for what the node may add; a larger one is refused with
// a clear error and not stored, a slightly smaller one is confirmed.
func TestPublishOverTheNodeDeliveryLimitIsRefused(t *testing.T) {
	const limit = 8192
	b := startBroker(t, func(config *Config) { config.MaxBodyBytes = limit })
	c := connect(t, b)
	c.mustDeclare("capped", wire.ModeBuffered, wire.QueueOptions{})
	// The publish frame fits the limit; its delivery, with the reserve,
	// does not.
	tooLarge := strings.Repeat("x", 8000)
	fits := strings.Repeat("y", limit-acceptedDeliverBodyBytes(&queue.Message{}))
	outcomes := c.awaitOutcomes(c.publish("capped", tooLarge))
	for seq, out := range c.awaitOutcomes(c.publish("capped", fits)) {
		outcomes[seq] = out
	}
	var refused, confirmed int
	for _, out := range outcomes {
		switch {
		case out.confirmed:
			confirmed++
		case out.code == wire.CodeInvalidRequest && strings.Contains(out.message, "max_body_bytes of 8192"):
			refused++
		default:
			t.Fatalf("outcome %+v", out)
		}
	}
	if refused != 1 || confirmed != 1 {
		t.Fatalf("%d refused, %d confirmed: %+v", refused, confirmed, outcomes)
	}
	if info := c.info("capped"); info.Ready != 1 {
		t.Fatalf("the refused message was stored: %+v", info)
	}
}
