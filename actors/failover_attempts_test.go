package actors

// Delivery attempts across a failover, on three in-process brokers
// (cluster_test.go has the harness, replication_test.go the gated one): a
// lease whose delivery never left the dead owner costs no attempt; one
// that was sent keeps its attempt; both come back marked redelivered.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

// declareOwnedBy declares a queue whose owner is owner: placement spreads
// owners over the nodes, so it declares candidates named after name until
// one lands there, and returns its name (the others stay, unused).
func (c *brokerCluster) declareOwnedBy(owner, name string, config client.QueueConfig) string {
	c.t.Helper()
	for try := range 2 * len(c.order) {
		candidate := fmt.Sprintf("%s-%d", name, try)
		if got, _ := c.declareServed(candidate, config); got == owner {
			return candidate
		}
	}
	c.t.Fatalf("no queue declared after %s landed on %s", name, owner)
	return ""
}

// takeDeliveries reads count deliveries from a subscription.
func takeDeliveries(t *testing.T, ctx context.Context, subscription *client.Subscription, count int) []*client.Delivery {
	t.Helper()
	var out []*client.Delivery
	for len(out) < count {
		select {
		case d := <-subscription.Deliveries():
			out = append(out, d)
		case <-ctx.Done():
			t.Fatalf("%d of %d deliveries arrived", len(out), count)
		}
	}
	return out
}

// attemptQueue is one queue of the failover below and what its consumer
// saw on the old owner.
type attemptQueue struct {
	name          string
	maxDeliveries uint32
	sent          string // the payload delivered on the old owner, never settled
	leasedBefore  uint64 // the followers' written ends before the unsent lease
}

// Two majority_durable queues on one owner, max_deliveries 1 and 2, with
// 20 confirmed messages each. On the old owner a consumer takes one
// message of each and holds it (a delivery that left); then both
// followers' disks stop answering fsyncs and a second consumer's credit
// makes the owner lease ten more of each, whose lease record the
// followers write but the quorum never makes durable, so the owner never
// delivers them. The owner stops; the followers' disks answer again and
// one of them serves. There, the ten leased but never sent come back with
// attempt 1, marked redelivered (before: the failover counted an attempt
// on each and max_deliveries 1 dropped them unseen); the held message
// keeps its counted attempt: dead-lettered at max_deliveries 1, delivered
// again with attempt 2 and marked redelivered at max_deliveries 2; the
// others are first deliveries.
func TestFailoverCostsNoAttemptForLeasesNeverSent(t *testing.T) {
	const published, unsent = 20, 10
	c, gates := gatedCluster(t)
	ctx := testContext(t)
	owner, followers := c.declareServed("attempts-1", client.QueueConfig{Mode: client.ModeDurable,
		Policy: "majority_durable", MaxDeliveries: 1})
	queues := []*attemptQueue{
		{name: "attempts-1", maxDeliveries: 1},
		{name: c.declareOwnedBy(owner, "attempts-2", client.QueueConfig{Mode: client.ModeDurable,
			Policy: "majority_durable", MaxDeliveries: 2}), maxDeliveries: 2},
	}
	publisher := c.dialSDK(owner)
	holder := c.dialSDK(owner) // only the owner's address: it never resubscribes elsewhere
	for _, q := range queues {
		confirmedPayloads(t, ctx, publisher, q.name, "m", published)
		subscription, err := holder.Subscribe(ctx, q.name, client.SubscribeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		q.sent = string(takeDeliveries(t, ctx, subscription, 1)[0].Payload)
		// Appended after the delivery's sent mark and confirmed on W
		// copies: the history a recovery chooses holds the mark.
		confirmedPayloads(t, ctx, publisher, q.name, "after-the-mark", 1)
	}

	for _, id := range followers {
		gates[id].hold(gateSyncs)
	}
	for _, q := range queues {
		q.leasedBefore = c.copyAt(followers[0], q.name).WrittenNext
		subscription, err := holder.Subscribe(ctx, q.name, client.SubscribeOptions{Prefetch: unsent})
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "both followers write the lease of "+q.name, func() bool {
			return c.copyAt(followers[0], q.name).WrittenNext > q.leasedBefore &&
				c.copyAt(followers[1], q.name).WrittenNext > q.leasedBefore
		})
		select {
		case d := <-subscription.Deliveries():
			t.Fatalf("%s: %q delivered while no follower could make its lease durable", q.name, d.Payload)
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.stop(owner)
	for _, id := range followers {
		gates[id].release()
	}

	consumer := c.dialSDKHome(followers[0], "after-the-failover")
	for _, q := range queues {
		serving := c.servingOwner(q.name)
		want := published + 1 // the 20, and the one published after the mark
		if q.maxDeliveries == 1 {
			want-- // the held message's attempt reached max_deliveries
		}
		subscription, err := consumer.Subscribe(ctx, q.name, client.SubscribeOptions{Prefetch: 64})
		if err != nil {
			t.Fatal(err)
		}
		redeliveredFresh := 0
		for _, d := range takeDeliveries(t, ctx, subscription, want) {
			payload := string(d.Payload)
			switch {
			case payload == q.sent && (q.maxDeliveries == 1 || d.Attempt != 2 || !d.Redelivered):
				t.Fatalf("%s on %s: the message delivered on the old owner came back as attempt %d, redelivered %v",
					q.name, serving, d.Attempt, d.Redelivered)
			case payload != q.sent && d.Attempt != 1:
				t.Fatalf("%s on %s: %s came back as attempt %d: the failover counted an attempt for a delivery "+
					"that never left the old owner", q.name, serving, payload, d.Attempt)
			case payload != q.sent && d.Redelivered:
				redeliveredFresh++
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if redeliveredFresh != unsent {
			t.Fatalf("%s: %d messages came back redelivered with attempt 1, want the %d leased on the old owner",
				q.name, redeliveredFresh, unsent)
		}
		select {
		case d := <-subscription.Deliveries():
			t.Fatalf("%s: one delivery too many: %q attempt %d", q.name, d.Payload, d.Attempt)
		case <-time.After(200 * time.Millisecond):
		}
		info, err := consumer.QueueInfo(ctx, q.name)
		if err != nil {
			t.Fatal(err)
		}
		if wantDropped := uint64(2 - q.maxDeliveries); info.DeadLettered != wantDropped {
			t.Fatalf("%s: %d dead-lettered, want %d", q.name, info.DeadLettered, wantDropped)
		}
	}
}
