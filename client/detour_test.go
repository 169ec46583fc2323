package client_test

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
	"github.com/fibrilmq/fibril/wire"
)

// Publishes to a queue whose node answers unavailable (an owner cut off
// from its peers: it cannot confirm and does not redirect) are sent
// through another node the Client knows, which serves the queue or
// redirects to its owner; they are confirmed there within their deadlines
// and stored in the order they were made, and once the avoidance period
// has passed the first node is asked again. Seeded: the nodes (the second
// configured node serves; it redirects to a third; or it refuses too and
// a third configured node serves), how many publishes go out at once, and
// whether the Client waits for the first refusal before the rest.
func TestPublishesRefusedUnavailableGoThroughAnotherNode(t *testing.T) {
	random := rand.New(rand.NewPCG(testSeed(t), 0))
	for round := range 6 {
		shape := random.IntN(3)
		burst := 1 + random.IntN(40)
		total := burst + random.IntN(60)
		pause := random.IntN(2) == 0
		describe := "round " + strconv.Itoa(round) + " " + [...]string{"second serves", "second redirects",
			"second refuses too"}[shape]

		refusing := startServer(t, clienttest.Config{NodeID: "cut-off"})
		refusing.Refuse("orders", wire.CodeUnavailable, "queue \"orders\": too few replicas are reachable")
		second := startServer(t, clienttest.Config{NodeID: "second"})
		servers := []*clienttest.Server{refusing, second}
		serving := second
		switch shape {
		case 1:
			serving = startServer(t, clienttest.Config{NodeID: "new-owner"})
			second.RedirectAtEpoch("orders", "new-owner", serving.Addr(), 2)
		case 2:
			second.Refuse("orders", wire.CodeUnavailable, "queue \"orders\" has no owner yet")
			serving = startServer(t, clienttest.Config{NodeID: "third"})
			servers = append(servers, serving)
		}
		declare(t, dial(t, client.Options{}, serving), "orders", client.QueueConfig{})

		c := dial(t, client.Options{PublishTimeout: hangGuard / 2,
			Backoff: client.Backoff{Initial: time.Millisecond, Max: 200 * time.Millisecond}}, servers...)
		ctx := guardedContext(t)
		futures := make([]*client.PublishFuture, 0, total)
		for i := range total {
			if i == burst && pause {
				await(t, refusing, "the first refusal", func(s clienttest.Stats) bool { return s.Rejected > 0 })
			}
			future, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatalf("%s: publish %d: %v", describe, i, err)
			}
			futures = append(futures, future)
		}
		for i, future := range futures {
			if confirm, err := future.Wait(ctx); err != nil {
				t.Fatalf("%s: publish %d: %+v %v; want it confirmed by the node that serves the queue", describe, i, confirm, err)
			}
		}
		if refusing.Stats().Rejected == 0 {
			t.Fatalf("%s: the cut-off node refused nothing: the test did not detour", describe)
		}
		checkStored(t, describe, serving, 0, total)

		if shape == 1 {
			// The redirect named the queue's owner: the Client keeps that
			// route and has no reason to go back.
			c.Close()
			continue
		}
		// The cut-off node heals and serves the queue: once its avoidance
		// has passed, the queue's traffic goes back to it (home).
		refusing.Refuse("orders", 0, "")
		declare(t, dial(t, client.Options{}, refusing), "orders", client.QueueConfig{})
		next := total
		for {
			if _, err := c.Publish(ctx, "orders", client.Message{Payload: []byte(strconv.Itoa(next))}); err != nil {
				t.Fatalf("%s: publish %d after the heal: %v", describe, next, err)
			}
			next++
			if state, _ := refusing.Queue("orders"); len(state.Payloads) > 0 {
				break
			}
			time.Sleep(time.Millisecond) // not an assertion: paces the loop while the avoidance lasts
		}
		servedAfter, _ := serving.Queue("orders")
		checkStored(t, describe, serving, 0, len(servedAfter.Payloads))
		checkStored(t, describe, refusing, len(servedAfter.Payloads), next)
		c.Close()
	}
}

// checkStored fails the test unless the server's queue holds exactly the
// payloads from, from+1, ... up to (not including) to.
func checkStored(t *testing.T, describe string, server *clienttest.Server, from, to int) {
	t.Helper()
	state, _ := server.Queue("orders")
	if len(state.Payloads) != to-from {
		t.Fatalf("%s: %s stored %d messages (%s), want %d-%d", describe, server.Addr(), len(state.Payloads),
			summarize(state.Payloads), from, to-1)
	}
	for i, payload := range state.Payloads {
		if string(payload) != strconv.Itoa(from+i) {
			t.Fatalf("%s: %s stored %s, want %d-%d in order", describe, server.Addr(), summarize(state.Payloads), from, to-1)
		}
	}
}

// A publish refused with unavailable by every node the Client knows fails
// with that refusal (retryable: it was not stored) after one round, one
// refusal per node; it is not sent round again by itself. On a single
// node that is the first refusal, as before there were detours.
func TestAPublishRefusedByEveryNodeFailsAfterOneRound(t *testing.T) {
	for _, nodes := range []int{1, 2, 3} {
		var servers []*clienttest.Server
		for range nodes {
			server := startServer(t, clienttest.Config{})
			server.Refuse("orders", wire.CodeUnavailable, "queue \"orders\" has no owner yet")
			servers = append(servers, server)
		}
		// The avoidance outlasts the test: no node is asked twice.
		c := dial(t, client.Options{Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Hour}}, servers...)
		_, err := c.Publish(guardedContext(t), "orders", client.Message{Payload: []byte("x")})
		if client.CodeOf(err) != wire.CodeUnavailable || !client.IsRetryable(err) {
			t.Fatalf("%d nodes: publish: %v; want the unavailable refusal", nodes, err)
		}
		refusals := 0
		for i, server := range servers {
			if rejected := server.Stats().Rejected; rejected != 1 {
				t.Fatalf("%d nodes: node %d refused the publish %d times, want once", nodes, i, rejected)
			}
			refusals += server.Stats().Rejected
		}
		if refusals != nodes {
			t.Fatalf("%d nodes: %d refusals, want one per node", nodes, refusals)
		}
		c.Close()
	}
}

// A subscription whose node answers its resubscribe with unavailable is
// subscribed again through another node the Client knows, which serves
// the queue: after its node ended it (not_owner), and after its
// connection ended.
func TestASubscriptionRebindsThroughAnotherNodeWhenItsNodeIsUnavailable(t *testing.T) {
	for _, cause := range []string{"ended by its node", "connection ended"} {
		t.Run(cause, func(t *testing.T) {
			home := startServer(t, clienttest.Config{NodeID: "cut-off"})
			other := startServer(t, clienttest.Config{NodeID: "other"})
			declare(t, dial(t, client.Options{}, home), "orders", client.QueueConfig{})
			producer := dial(t, client.Options{}, other)
			declare(t, producer, "orders", client.QueueConfig{})
			c := dial(t, client.Options{}, home, other)
			ctx := guardedContext(t)
			subscription, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			await(t, home, "the subscription", func(s clienttest.Stats) bool { return s.Subscribes == 1 })
			home.Refuse("orders", wire.CodeUnavailable, "queue \"orders\": too few replicas are reachable")
			if cause == "ended by its node" {
				home.EndSubscriptions("orders", wire.CodeNotOwner, "the queue's owner stepped down")
			} else {
				home.DropConnections()
			}
			await(t, other, "the subscribe through the other node", func(s clienttest.Stats) bool { return s.Subscribes == 1 })
			if _, err := producer.Publish(ctx, "orders", client.Message{Payload: []byte("served elsewhere")}); err != nil {
				t.Fatal(err)
			}
			d := receive(t, subscription.Deliveries())
			if string(d.Payload) != "served elsewhere" {
				t.Fatalf("delivery %q, want the other node's message", d.Payload)
			}
			if err := d.AckSync(ctx); err != nil {
				t.Fatalf("ack through the other node: %v", err)
			}
			if home.Stats().Subscribes != 1 {
				t.Fatalf("the cut-off node took %d subscribes, want only the first", home.Stats().Subscribes)
			}
		})
	}
}

// An owner still taking a queue over refuses its publishes with
// unavailable while every other node already redirects to it (the case a
// power-cut owner's successor met: its own view of the queue lagged).
// The publish goes back and forth between the refusing owner and the
// nodes that name it; those redirects are not a disagreement between
// nodes and do not spend MaxRedirects, and the owner is asked again after
// a backoff, not at once. Here the owner refuses the first five times
// (with three nodes a round allows six refusals) and then serves: the
// publish is confirmed there, once. Before the rule it failed with
// ErrTooManyRedirects at the fifth redirect.
func TestAPublishWaitsForAnOwnerThatOtherNodesAlreadyName(t *testing.T) {
	const refusalsBeforeServing = 5
	owner := startServer(t, clienttest.Config{NodeID: "taking-over"})
	declare(t, dial(t, client.Options{}, owner), "orders", client.QueueConfig{})
	owner.Refuse("orders", wire.CodeUnavailable, "queue \"orders\" is not open on this node yet; retry")
	var publishes atomic.Int32
	owner.SetHook(func(_ *clienttest.Conn, frame wire.Frame) clienttest.Action {
		if publish, ok := frame.(*wire.Publish); ok && string(publish.Queue) == "orders" &&
			publishes.Add(1) == refusalsBeforeServing+1 {
			owner.Refuse("orders", 0, "") // it has taken the queue over
		}
		return clienttest.Handle
	})
	var others []*clienttest.Server
	for _, name := range []string{"second", "third"} {
		other := startServer(t, clienttest.Config{NodeID: name})
		other.RedirectAtEpoch("orders", "taking-over", owner.Addr(), 2)
		others = append(others, other)
	}
	c := dial(t, client.Options{PublishTimeout: hangGuard / 2,
		Backoff: client.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}}, owner, others[0], others[1])
	defer c.Close()
	if _, err := c.Publish(guardedContext(t), "orders", client.Message{Payload: []byte("0")}); err != nil {
		t.Fatalf("publish: %v; want it confirmed by the owner once it serves (%d publish frames reached it)",
			err, publishes.Load())
	}
	if rejected := owner.Stats().Rejected; rejected != refusalsBeforeServing {
		t.Fatalf("the owner refused %d times, want %d", rejected, refusalsBeforeServing)
	}
	checkStored(t, "owner", owner, 0, 1)
}
