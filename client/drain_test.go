package client_test

// Drain: a handler mid-work when Drain starts settles successfully, the
// deliveries the application never saw are released, and nothing it
// settled is delivered again.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
)

func TestDrainLetsTheHandlerFinishAndSettle(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "jobs", client.QueueConfig{})
	publishN(t, c, "jobs", 5)
	started := make(chan string, 5)
	proceed := make(chan struct{})
	settled := make(chan error, 5)
	sub, err := c.Subscribe(guardedContext(t), "jobs", client.SubscribeOptions{Prefetch: 3, Handler: func(d *client.Delivery) {
		started <- string(d.Payload)
		<-proceed // mid-work
		settled <- d.Ack()
	}})
	if err != nil {
		t.Fatal(err)
	}
	first := waitResult(t, started, "the first handler call")
	// The other two prefetched deliveries wait in the SDK, unseen.
	await(t, server, "three deliveries", func(s clienttest.Stats) bool { return s.Delivered == 3 })

	drained := make(chan error, 1)
	go func() { drained <- sub.Drain(guardedContext(t)) }()
	awaitDraining(t, sub)
	// Had Drain unsubscribed without waiting, the ack below would be
	// refused as stale.
	close(proceed)
	if err := waitResult(t, settled, "the handler's ack"); err != nil {
		t.Fatalf("the ack of the delivery in progress when Drain started: %v", err)
	}
	if err := waitResult(t, drained, "Drain"); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	select {
	case other := <-started:
		t.Fatalf("the handler was given %q after Drain started", other)
	default:
	}
	if !errors.Is(sub.Err(), client.ErrSubscriptionClosed) {
		t.Fatalf("Err after Drain: %v", sub.Err())
	}
	stats := server.Stats()
	state, _ := server.Queue("jobs")
	if stats.Acked != 1 || stats.Unsubscribes != 1 || state.Leased != 0 || state.Ready != 4 {
		t.Fatalf("stats %+v, queue %+v: want %s acked and the other four ready", stats, state, first)
	}
	for _, payload := range state.Payloads {
		if string(payload) == first {
			t.Fatalf("%s, acked by the handler during Drain, is in the queue again", first)
		}
	}
}

// A channel consumer: Drain takes back what the application has not
// received and waits for what it has.
func TestDrainWaitsForDeliveriesTheApplicationReceived(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "jobs", client.QueueConfig{})
	publishN(t, c, "jobs", 4)
	sub, err := c.Subscribe(guardedContext(t), "jobs", client.SubscribeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, sub.Deliveries())
	await(t, server, "four deliveries", func(s clienttest.Stats) bool { return s.Delivered == 4 })
	drained := make(chan error, 1)
	go func() { drained <- sub.Drain(guardedContext(t)) }()
	awaitDraining(t, sub)
	// Drain took the buffered three back: nothing more reaches the
	// application, and the channel closes once Drain is done.
	select {
	case d := <-sub.Deliveries():
		t.Fatalf("the application received %q after Drain started", d.Payload)
	default:
	}
	if err := held.Nack(true, 0); err != nil {
		t.Fatalf("nack of the delivery the application held: %v", err)
	}
	if err := waitResult(t, drained, "Drain"); err != nil {
		t.Fatal(err)
	}
	if d, open := <-sub.Deliveries(); open {
		t.Fatalf("after Drain the channel still delivers %q", d.Payload)
	}
	if stats := server.Stats(); stats.Nacked != 1 || stats.Acked != 0 {
		t.Fatalf("stats %+v: want the one nack", stats)
	}
}

// awaitDraining waits until Drain has taken back what the application had
// not received.
func awaitDraining(t *testing.T, sub *client.Subscription) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !sub.IsDraining() {
		if time.Now().After(deadline) {
			t.Fatal("Drain never started")
		}
		time.Sleep(time.Millisecond)
	}
}

// Drain bounded by its context: a handler that never returns does not
// hold it forever; its delivery is released and its late ack is stale.
func TestDrainGivesUpAtItsDeadline(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "jobs", client.QueueConfig{})
	publishN(t, c, "jobs", 1)
	held := make(chan *client.Delivery, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sub, err := c.Subscribe(guardedContext(t), "jobs", client.SubscribeOptions{Handler: func(d *client.Delivery) {
		held <- d
		<-release
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := waitResult(t, held, "the handler call")
	ctx, cancel := context.WithTimeout(guardedContext(t), 20*time.Millisecond)
	defer cancel()
	if err := sub.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain past its deadline: %v", err)
	}
	if err := d.Ack(); !errors.Is(err, client.ErrStaleDelivery) {
		t.Fatalf("ack after Drain gave up: %v, want ErrStaleDelivery", err)
	}
	if state, _ := server.Queue("jobs"); state.Ready != 1 {
		t.Fatalf("queue %+v: the unsettled delivery was not released", state)
	}
}

// Client.Drain drains every subscription, waits for outstanding confirms,
// then closes.
func TestClientDrainSettlesThenWaitsForConfirmsThenCloses(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "in", client.QueueConfig{})
	declare(t, c, "out", client.QueueConfig{})
	publishN(t, c, "in", 1)
	proceed := make(chan struct{})
	working := make(chan struct{})
	var forwarded *client.PublishFuture
	_, err := c.Subscribe(guardedContext(t), "in", client.SubscribeOptions{Handler: func(d *client.Delivery) {
		close(working)
		<-proceed
		forwarded, _ = c.PublishAsync(context.Background(), "out", client.Message{Payload: d.Payload})
		d.Ack()
	}})
	if err != nil {
		t.Fatal(err)
	}
	<-working
	server.HoldConfirms(true)
	drained := make(chan error, 1)
	go func() { drained <- c.Drain(guardedContext(t)) }()
	close(proceed)
	await(t, server, "the forwarded publish", func(s clienttest.Stats) bool { return s.Published == 2 })
	server.ReleaseConfirms(false)
	if err := waitResult(t, drained, "Client.Drain"); err != nil {
		t.Fatal(err)
	}
	if confirm, err := forwarded.Wait(guardedContext(t)); err != nil || confirm.Boundary != client.BoundaryDurable {
		t.Fatalf("the publish made during Drain: %+v %v", confirm, err)
	}
	if _, err := c.Ping(guardedContext(t)); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after Client.Drain the client is not closed: %v", err)
	}
	if stats := server.Stats(); stats.Acked != 1 {
		t.Fatalf("stats %+v", stats)
	}
}
