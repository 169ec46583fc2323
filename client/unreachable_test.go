package client_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
)

// A node that has not yet heard that a queue's owner lost power keeps
// redirecting to it. Publishes it refuses so are sent, once the named node
// has failed a connection attempt, through the other node the Client
// knows, which serves the queue (it is the new owner, or heard of it); in
// the order they were made, with the publishes behind them, and without a
// deadline, although the Client waits for reconnects. Before, they went
// back to the node that redirected them (the queue's route: home) for as
// long as it named the node that is down, and waited there until their
// deadline. Seeded: how many are published before the rest and whether
// the rest wait for the first refusal.
func TestPublishesRedirectedToANodeThatIsDownGoThroughAnotherNode(t *testing.T) {
	random := rand.New(rand.NewPCG(testSeed(t), 0))
	for round := range 4 {
		first := 1 + random.IntN(20)
		total := first + random.IntN(80)
		pause := random.IntN(2) == 0
		stale := startServer(t, clienttest.Config{NodeID: "stale"})
		stale.Redirect("orders", "gone", deadAddress(t)) // it still names the owner that lost power
		serving := startServer(t, clienttest.Config{NodeID: "new-owner"})
		declare(t, dial(t, client.Options{}, serving), "orders", client.QueueConfig{})

		c := dial(t, client.Options{WaitForReconnect: true, Backoff: client.Backoff{Initial: time.Millisecond,
			Max: 20 * time.Millisecond}}, stale, serving)
		ctx := guardedContext(t)
		futures := make([]*client.PublishFuture, 0, total)
		for i := range total {
			if i == first && pause {
				await(t, stale, "the first refusal", func(s clienttest.Stats) bool { return s.Rejected > 0 })
			}
			future, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatalf("round %d: publish %d: %v", round, i, err)
			}
			futures = append(futures, future)
		}
		for i, future := range futures {
			if confirm, err := future.Wait(ctx); err != nil {
				t.Fatalf("round %d: publish %d: %+v %v; want it stored by the node that serves", round, i, confirm, err)
			}
		}
		state, _ := serving.Queue("orders")
		if len(state.Payloads) != total {
			t.Fatalf("round %d: the serving node stored %d messages, want %d", round, len(state.Payloads), total)
		}
		for i, payload := range state.Payloads {
			if string(payload) != strconv.Itoa(i) {
				t.Fatalf("round %d (%d first, pause %v): message %d is %s; order %s", round, first, pause, i, payload,
					summarize(state.Payloads))
			}
		}
		c.Close()
	}
}

// A subscription whose owner lost power, while the node it asks where the
// queue lives still names that owner, is subscribed again through the
// other node the Client knows; so is a new subscribe. Before, each attempt
// went to the node that redirected it and waited for the node that is
// down until the attempt's deadline, again and again.
func TestASubscriptionRebindsThroughAnotherNodeWhenItsRedirectNamesANodeThatIsDown(t *testing.T) {
	stale := startServer(t, clienttest.Config{NodeID: "stale"})
	owner := startServer(t, clienttest.Config{NodeID: "owner"})
	serving := startServer(t, clienttest.Config{NodeID: "new-owner"})
	declare(t, dial(t, client.Options{}, owner), "orders", client.QueueConfig{})
	producer := dial(t, client.Options{}, serving)
	declare(t, producer, "orders", client.QueueConfig{})
	stale.Redirect("orders", "owner", owner.Addr())
	c := dial(t, client.Options{WaitForReconnect: true, DialTimeout: time.Minute,
		Backoff: client.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}}, stale, serving)
	ctx := guardedContext(t)
	subscription, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	await(t, owner, "the subscription", func(s clienttest.Stats) bool { return s.Subscribes == 1 })
	owner.Close() // power lost: its address refuses connections now
	await(t, serving, "the subscribe through the other node", func(s clienttest.Stats) bool { return s.Subscribes == 1 })
	if _, err := producer.Publish(ctx, "orders", client.Message{Payload: []byte("served elsewhere")}); err != nil {
		t.Fatal(err)
	}
	d := receive(t, subscription.Deliveries())
	if string(d.Payload) != "served elsewhere" {
		t.Fatalf("delivery %q, want the new owner's message", d.Payload)
	}
	if err := d.AckSync(ctx); err != nil {
		t.Fatalf("ack through the other node: %v", err)
	}

	other, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("a new subscribe while the stale node names the node that is down: %v", err)
	}
	if err := other.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
}
