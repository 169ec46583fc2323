package client_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
	"github.com/fibrilmq/fibril/wire"
)

func publishN(t *testing.T, c *client.Client, queue string, count int) {
	t.Helper()
	ctx := guardedContext(t)
	var futures []*client.PublishFuture
	for i := range count {
		future, err := c.PublishAsync(ctx, queue, client.Message{Payload: fmt.Appendf(nil, "m%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, future)
	}
	for _, future := range futures {
		if _, err := future.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPrefetchBoundsWhatTheSubscriptionHolds(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "work", client.QueueConfig{})
	publishN(t, c, "work", 20)
	sub, err := c.Subscribe(guardedContext(t), "work", client.SubscribeOptions{Prefetch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Prefetch() != 3 || cap(sub.Deliveries()) != 3 {
		t.Fatalf("prefetch %d, channel capacity %d; want 3 and 3", sub.Prefetch(), cap(sub.Deliveries()))
	}
	await(t, server, "three deliveries", func(s clienttest.Stats) bool { return s.Delivered == 3 })
	// Nothing is settled, so the node may send nothing more; a ping round
	// trip proves it had the chance to.
	if _, err := c.Ping(guardedContext(t)); err != nil {
		t.Fatal(err)
	}
	if delivered := server.Stats().Delivered; delivered != 3 {
		t.Fatalf("%d delivered with prefetch 3 and nothing settled", delivered)
	}
	seen := make(map[string]bool)
	for range 20 {
		d := receive(t, sub.Deliveries())
		if seen[string(d.Payload)] {
			t.Fatalf("%s delivered twice", d.Payload)
		}
		seen[string(d.Payload)] = true
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	await(t, server, "twenty acks", func(s clienttest.Stats) bool { return s.Acked == 20 })
	if stats := server.Stats(); stats.MaxUnsettled != 3 || stats.Delivered != 20 {
		t.Fatalf("stats %+v: want at most 3 unsettled and 20 deliveries", stats)
	}
}

func TestZeroPrefetchTakesTheNodeDefault(t *testing.T) {
	server := startServer(t, clienttest.Config{DefaultPrefetch: 5})
	c := dial(t, client.Options{}, server)
	declare(t, c, "q", client.QueueConfig{})
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Prefetch() != 5 || cap(sub.Deliveries()) != 5 || server.Stats().LastPrefetchAsk != 0 {
		t.Fatalf("prefetch %d, capacity %d, asked %d; want the node's 5 after asking 0",
			sub.Prefetch(), cap(sub.Deliveries()), server.Stats().LastPrefetchAsk)
	}
}

func TestDeliveryCarriesMessageFieldsAndSettles(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "q", client.QueueConfig{})
	ctx := guardedContext(t)
	before := time.Now().Add(-time.Minute)
	_, err := c.Publish(ctx, "q", client.Message{Payload: []byte("body"), MessageID: "id-1",
		Headers: client.Headers{{Key: "k", Value: []byte("v")}, {Key: "k", Value: []byte("w")}}})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "q", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := receive(t, sub.Deliveries())
	value, ok := first.Headers.Get("k")
	if string(first.Payload) != "body" || first.MessageID != "id-1" || !ok || string(value) != "v" ||
		len(first.Headers) != 2 || first.Attempt != 1 || first.Redelivered || first.Queue != "q" ||
		first.Offset == 0 || first.PublishTime.Before(before) {
		t.Fatalf("first delivery %+v", first)
	}
	if err := first.Nack(true, 0); err != nil {
		t.Fatal(err)
	}
	if err := first.Ack(); !errors.Is(err, client.ErrAlreadySettled) {
		t.Fatalf("second settle: got %v, want ErrAlreadySettled", err)
	}
	second := receive(t, sub.Deliveries())
	if second.Attempt != 2 || !second.Redelivered || second.MessageID != "id-1" {
		t.Fatalf("after nack with requeue: %+v, want attempt 2, redelivered", second)
	}
	if err := second.Release(); err != nil {
		t.Fatal(err)
	}
	third := receive(t, sub.Deliveries())
	if third.Attempt != 2 || !third.Redelivered {
		t.Fatalf("after release: %+v, want attempt still 2 (a release does not count)", third)
	}
	if err := third.Discard(); err != nil {
		t.Fatal(err)
	}
	await(t, server, "settles", func(s clienttest.Stats) bool { return s.Nacked == 1 && s.Released == 1 && s.Discarded == 1 })
	if state, _ := server.Queue("q"); state.Ready != 0 || state.Leased != 0 {
		t.Fatalf("queue after discard: %+v", state)
	}
}

func TestNackWithoutRequeueDeadLetters(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "dead", client.QueueConfig{})
	declare(t, c, "q", client.QueueConfig{DeadLetterQueue: "dead"})
	publishN(t, c, "q", 1)
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := receive(t, sub.Deliveries()).Nack(false, time.Second); err != nil {
		t.Fatal(err)
	}
	await(t, server, "nack", func(s clienttest.Stats) bool { return s.Nacked == 1 })
	if state, _ := server.Queue("dead"); state.Ready != 1 {
		t.Fatalf("dead-letter queue %+v: want the message", state)
	}
}

func TestHandlerSubscription(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "q", client.QueueConfig{})
	publishN(t, c, "q", 10)
	received := make(chan string, 10)
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{Prefetch: 2, Handler: func(d *client.Delivery) {
		received <- string(d.Payload)
		d.Ack()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Deliveries() != nil {
		t.Fatal("a handler subscription exposes its channel")
	}
	for range 10 {
		waitResult(t, received, "handler call")
	}
	await(t, server, "acks", func(s clienttest.Stats) bool { return s.Acked == 10 })
	if err := sub.Unsubscribe(guardedContext(t)); err != nil {
		t.Fatal(err)
	}
	<-sub.Done()
}

func TestUnsubscribeSendsSettlesFirstAndReleasesTheRest(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "q", client.QueueConfig{})
	publishN(t, c, "q", 5)
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{Prefetch: 5})
	if err != nil {
		t.Fatal(err)
	}
	var held []*client.Delivery
	for range 5 {
		held = append(held, receive(t, sub.Deliveries()))
	}
	held[0].Ack()
	held[1].Ack()
	if err := sub.Unsubscribe(guardedContext(t)); err != nil {
		t.Fatal(err)
	}
	if stats := server.Stats(); stats.Acked != 2 || stats.Unsubscribes != 1 {
		t.Fatalf("stats %+v: the two acks must reach the node before the unsubscribe", stats)
	}
	if state, _ := server.Queue("q"); state.Ready != 3 || state.Leased != 0 {
		t.Fatalf("queue %+v: want the three unsettled released", state)
	}
	if err := held[2].Ack(); !errors.Is(err, client.ErrStaleDelivery) {
		t.Fatalf("ack after unsubscribe: got %v, want ErrStaleDelivery", err)
	}
	if _, open := <-sub.Deliveries(); open {
		t.Fatal("the deliveries channel is open after unsubscribe")
	}
	if !errors.Is(sub.Err(), client.ErrSubscriptionClosed) || !errors.Is(sub.Unsubscribe(guardedContext(t)), client.ErrSubscriptionClosed) {
		t.Fatalf("Err %v after unsubscribe", sub.Err())
	}
}

func TestSubscribeToUnknownQueueFails(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	if _, err := c.Subscribe(guardedContext(t), "missing", client.SubscribeOptions{}); client.CodeOf(err) != wire.CodeUnknownQueue {
		t.Fatalf("got %v, want unknown_queue", err)
	}
}

// A delivery beyond the prefetch can only come after the node expired a
// lease (the SDK counts a settle before it sends it): the oldest held
// delivery is then expired, its settle refused with ErrLeaseExpired, the
// new delivery is handed out, and the connection stays up.
func TestDeliveryBeyondPrefetchExpiresTheOldestHeld(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "q", client.QueueConfig{})
	publishN(t, c, "q", 1)
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	old := receive(t, sub.Deliveries())
	if !server.ExpireLease("q", old.Payload) {
		t.Fatal("the fake holds no lease to expire")
	}
	again := receive(t, sub.Deliveries())
	if !again.Redelivered || string(again.Payload) != string(old.Payload) {
		t.Fatalf("after the lease expired: %+v", again)
	}
	if err := old.Ack(); !errors.Is(err, client.ErrLeaseExpired) {
		t.Fatalf("ack of the expired delivery: %v, want ErrLeaseExpired", err)
	}
	if !old.Stale() {
		t.Fatal("an expired delivery does not report itself stale")
	}
	if err := again.AckSync(guardedContext(t)); err != nil {
		t.Fatalf("ack-sync of the live delivery: %v", err)
	}
	if stats := server.Stats(); stats.Hellos != 1 || stats.AckSyncs != 1 {
		t.Fatalf("stats %+v: want one connection and one ack-sync", stats)
	}
}

// When the node ends a subscription on its own, the SDK ends that
// Subscription with the node's error (and only that one), its held
// deliveries turn stale, and the client goes on working.
func TestSubscriptionEndedByTheNode(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	var unsolicited atomic.Int32
	c := dial(t, client.Options{OnError: func(error) { unsolicited.Add(1) }}, server)
	declare(t, c, "doomed", client.QueueConfig{})
	declare(t, c, "kept", client.QueueConfig{})
	publishN(t, c, "doomed", 2)
	ctx := guardedContext(t)
	doomed, err := c.Subscribe(ctx, "doomed", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := c.Subscribe(ctx, "kept", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, doomed.Deliveries())

	if n := server.EndSubscriptions("doomed", wire.CodeUnknownQueue, `queue "doomed" was deleted`); n != 1 {
		t.Fatalf("the server ended %d subscriptions", n)
	}
	select {
	case <-doomed.Done():
	case <-time.After(hangGuard):
		t.Fatal("the subscription did not end")
	}
	var serverError *client.ServerError
	if err := doomed.Err(); !errors.As(err, &serverError) || serverError.Code != wire.CodeUnknownQueue {
		t.Fatalf("ended subscription's error %v", err)
	}
	for range doomed.Deliveries() { // closed: whatever was buffered is dropped
	}
	if err := held.Ack(); !errors.Is(err, client.ErrStaleDelivery) {
		t.Fatalf("ack of a delivery from the ended subscription: %v", err)
	}
	if err := doomed.Unsubscribe(ctx); !errors.Is(err, client.ErrSubscriptionClosed) {
		t.Fatalf("unsubscribe after the node ended it: %v", err)
	}

	publishN(t, c, "kept", 1)
	if d := receive(t, kept.Deliveries()); string(d.Payload) != "m0" {
		t.Fatalf("the other subscription got %q", d.Payload)
	}
	if kept.Err() != nil {
		t.Fatalf("the other subscription ended: %v", kept.Err())
	}
	if unsolicited.Load() != 0 {
		t.Fatal("the end of a subscription was also reported as an unsolicited error")
	}
}
