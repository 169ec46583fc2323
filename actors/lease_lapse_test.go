package actors

// A quorum loss longer than the lease timeout, on three in-process brokers
// (cluster_test.go has the harness, replication_test.go the gated one):
// the leases the owner stages while fewer than W copies count must not
// reach the consumer expired when the quorum returns.

import (
	"fmt"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

// A replica_durable:3 queue with a 2 s lease: one follower's fsyncs are
// held for 5 s while a consumer holds credit, so the lease of a message
// published before the hold (leased at subscribe) and the pipelined lease
// of one published during it are staged and cannot apply. When the
// follower's disk answers, each message is delivered once, attempt 1, not
// marked redelivered; its ack applies (it is not refused as an expired
// delivery) and nothing acked comes back, past another lease timeout.
func TestClusterLeaseStagedDuringAQuorumLossIsDeliveredFresh(t *testing.T) {
	const leaseTimeout = 2 * time.Second
	c, gates := gatedCluster(t)
	ctx := testContext(t)
	name := "lapse"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "replica_durable:3",
		LeaseTimeout: leaseTimeout, MaxDeliveries: 2})
	held := followers[0]
	sdk := c.dialSDK(owner)
	if _, err := sdk.Publish(ctx, name, client.Message{Payload: []byte("before the loss"), MessageID: "lapse-0"}); err != nil {
		t.Fatalf("publish: %v", err)
	}

	gates[held].hold(gateSyncs)
	subscription, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	during, err := sdk.PublishAsync(ctx, name, client.Message{Payload: []byte("during the loss"), MessageID: "lapse-1"})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	waitUntil(t, held+"'s log is held", func() bool { return gates[held].held() > 0 })
	time.Sleep(leaseTimeout * 5 / 2) // the quorum stays lost past the lease timeout
	select {
	case delivery := <-subscription.Deliveries():
		t.Fatalf("delivered %q while the quorum was lost", delivery.MessageID)
	default:
	}
	gates[held].release()
	if _, err := during.Wait(ctx); err != nil {
		t.Fatalf("confirm of the publish made during the loss: %v", err)
	}

	seen := map[string]int{}
	for len(seen) < 2 {
		select {
		case delivery := <-subscription.Deliveries():
			seen[delivery.MessageID]++
			if seen[delivery.MessageID] > 1 || delivery.Attempt != 1 || delivery.Redelivered {
				t.Fatalf("delivery %q: attempt %d, redelivered %v, delivery %d of it", delivery.MessageID,
					delivery.Attempt, delivery.Redelivered, seen[delivery.MessageID])
			}
			if err := delivery.AckSync(ctx); err != nil {
				t.Fatalf("ack of %q delivered after the quorum returned: %v", delivery.MessageID, err)
			}
		case <-ctx.Done():
			t.Fatalf("deliveries after the quorum returned: %v", seen)
		}
	}
	for i := range 2 {
		if id := fmt.Sprintf("lapse-%d", i); seen[id] != 1 {
			t.Fatalf("%s delivered %d times (%v)", id, seen[id], seen)
		}
	}
	select { // an acked message coming back would be an expired lease's redelivery
	case delivery := <-subscription.Deliveries():
		t.Fatalf("acked message %q came back: attempt %d, redelivered %v", delivery.MessageID, delivery.Attempt,
			delivery.Redelivered)
	case <-time.After(leaseTimeout * 3 / 2):
	}
	broker := c.members[owner].broker
	if lapses := metricValue(broker, `fibril_lease_lapses_total{queue="lapse"}`); lapses < 1 {
		t.Fatalf("%v leases lapsed: the leases staged during the loss never applied late", lapses)
	}
	if expiries := metricValue(broker, `fibril_lease_expiries_total{queue="lapse"}`); expiries != 0 {
		t.Fatalf("%v leases expired", expiries)
	}
	if info := c.copyAt(owner, name); info.Ready != 0 || info.Leased != 0 {
		t.Fatalf("after both acks: ready %d, leased %d", info.Ready, info.Leased)
	}
}
