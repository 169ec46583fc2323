package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
)

// The whole cycle against an in-process fake node: declare, publish,
// consume, ack.
func Example() {
	node, err := clienttest.NewServer(clienttest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()

	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Addresses: []string{node.Addr()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	declared, err := c.Declare(ctx, "orders", client.QueueConfig{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mode:", declared.Mode)

	confirm, err := c.Publish(ctx, "orders", client.Message{Payload: []byte("order 1"), MessageID: "o-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("confirmed on the", confirm.Boundary, "boundary")

	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 10})
	if err != nil {
		log.Fatal(err)
	}
	d := <-sub.Deliveries()
	fmt.Printf("%s (id %s, attempt %d)\n", d.Payload, d.MessageID, d.Attempt)
	if err := d.Ack(); err != nil {
		log.Fatal(err)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// mode: durable
	// confirmed on the durable boundary
	// order 1 (id o-1, attempt 1)
}

// Dial one node of a cluster (or several, tried in order); the Client
// reconnects by itself and follows redirects to the owner of each queue.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{
		Addresses:  []string{"127.0.0.1:7420", "127.0.0.1:7421"},
		ClientName: "billing",
		OnConnect: func(s client.Session) {
			if s.Resumed {
				log.Printf("node %s restarted: unconfirmed publishes have an unknown outcome", s.NodeID)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// A buffered queue confirms once the message reached the OS on the
// required copies; the declare says so in a warning.
func ExampleClient_Declare() {
	var c *client.Client // from client.Dial
	ctx := context.Background()
	result, err := c.Declare(ctx, "clicks", client.QueueConfig{
		Mode:            client.ModeBuffered,
		MaxDeliveries:   5,
		DeadLetterQueue: "clicks.dead",
		LeaseTimeout:    30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result.Mode, result.Warnings)
}

// Pipelined publishing: send many, then collect the confirms. A publish
// that failed with ErrConnectionLost has an unknown outcome and is sent
// again.
func ExampleClient_PublishAsync() {
	var c *client.Client // from client.Dial
	ctx := context.Background()
	futures := make([]*client.PublishFuture, 0, 1000)
	for i := range 1000 {
		future, err := c.PublishAsync(ctx, "orders", client.Message{
			Payload: fmt.Appendf(nil, "order %d", i), MessageID: fmt.Sprintf("o-%d", i)})
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, future)
	}
	for _, future := range futures {
		confirm, err := future.Wait(ctx)
		switch {
		case err == nil:
			_ = confirm.Boundary // written or durable, as the queue's mode says
		case client.IsRetryable(err):
			// publish it again (same message id, so consumers can deduplicate)
		default:
			log.Printf("publish %d refused: %v", confirm.Seq, err)
		}
	}
}

// With Options.Confirms every asynchronous publish's outcome also arrives
// on one channel.
func ExampleClient_Confirms() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Addresses: []string{"127.0.0.1:7420"}, Confirms: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	go func() {
		for confirm := range c.Confirms() {
			if confirm.Err != nil {
				log.Printf("publish %d: %v", confirm.Seq, confirm.Err)
			}
		}
	}()
	for i := range 100 {
		if _, err := c.PublishAsync(ctx, "orders", client.Message{Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			log.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		log.Fatal(err)
	}
}

// A handler subscription: one goroutine calls the handler for each
// delivery in turn.
func ExampleClient_Subscribe() {
	var c *client.Client // from client.Dial
	ctx := context.Background()
	process := func([]byte) error { return nil }
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{
		Prefetch: 64,
		Handler: func(d *client.Delivery) {
			if d.Redelivered {
				// possibly a duplicate: check d.MessageID before acting
			}
			if err := process(d.Payload); err != nil {
				d.Nack(true, time.Second) // try again in a second; the attempt counts
				return
			}
			if err := d.Ack(); errors.Is(err, client.ErrStaleDelivery) {
				// the connection broke first: the message will come again
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	<-sub.Done()
}

// A worker that shuts down without repeating its work in progress: on
// SIGTERM, Drain stops new deliveries, lets the handler finish and settle
// what it holds, waits for outstanding confirms and closes.
func ExampleClient_Drain() {
	node, err := clienttest.NewServer(clienttest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Addresses: []string{node.Addr()}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Declare(ctx, "jobs", client.QueueConfig{}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Publish(ctx, "jobs", client.Message{Payload: []byte("resize image 7")}); err != nil {
		log.Fatal(err)
	}
	working := make(chan struct{})
	_, err = c.Subscribe(ctx, "jobs", client.SubscribeOptions{Handler: func(d *client.Delivery) {
		close(working)
		time.Sleep(10 * time.Millisecond) // the work
		fmt.Println("done:", string(d.Payload), "ack:", d.Ack())
	}})
	if err != nil {
		log.Fatal(err)
	}
	<-working // in a real worker: <-signalContext.Done()
	shutdown, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fmt.Println("drained:", c.Drain(shutdown))
	// Output:
	// done: resize image 7 ack: <nil>
	// drained: <nil>
}

// Subscription.Drain ends one consumer gracefully, leaving the Client
// open; a long handler can check IsDraining to wind down early.
func ExampleSubscription_Drain() {
	var sub *client.Subscription // from Client.Subscribe
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Drain(ctx); errors.Is(err, context.DeadlineExceeded) {
		log.Print("handlers did not finish in time: their messages will be delivered again")
	}
}

// AckSync returns once the node has applied the ack, for work whose
// completion must be known (here, before telling another system).
func ExampleDelivery_AckSync() {
	node, err := clienttest.NewServer(clienttest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Addresses: []string{node.Addr()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.Declare(ctx, "payments", client.QueueConfig{})
	c.Publish(ctx, "payments", client.Message{Payload: []byte("pay invoice 42")})
	sub, err := c.Subscribe(ctx, "payments", client.SubscribeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	d := <-sub.Deliveries()
	switch err := d.AckSync(ctx); {
	case err == nil:
		fmt.Println("acked and applied:", string(d.Payload))
	case errors.Is(err, client.ErrLeaseExpired):
		fmt.Println("too slow: the message will be delivered again")
	default:
		fmt.Println("outcome unknown:", err)
	}
	// Output:
	// acked and applied: pay invoice 42
}

// A per-publish callback with the caller's own tag: no table keyed by
// publish numbers is needed to match outcomes to messages.
func ExampleWithCallback() {
	node, err := clienttest.NewServer(clienttest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Addresses: []string{node.Addr()}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.Declare(ctx, "orders", client.QueueConfig{})
	type order struct{ id string }
	var mu sync.Mutex
	confirmed := []string{}
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		_, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte(id), MessageID: id},
			client.WithTag(order{id}),
			client.WithCallback(func(confirm client.Confirm) { // runs on the SDK's goroutine: keep it short
				mu.Lock()
				defer mu.Unlock()
				if confirm.Err == nil {
					confirmed = append(confirmed, confirm.Tag.(order).id)
				}
			}))
		if err != nil {
			log.Fatal(err)
		}
	}
	c.Flush(ctx)
	mu.Lock()
	sort.Strings(confirmed)
	fmt.Println(confirmed)
	mu.Unlock()
	// Output:
	// [o-1 o-2 o-3]
}

// A bound on how long a publish waits for its confirm: a stalled node
// fails it with ErrPublishTimeout (outcome unknown) instead of holding it
// until the connection's keepalive gives up.
func ExampleWithPublishTimeout() {
	var c *client.Client // from client.Dial, perhaps with Options.PublishTimeout for every publish
	ctx := context.Background()
	future, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte("o-9"), MessageID: "o-9"},
		client.WithPublishTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := future.Wait(ctx); errors.Is(err, client.ErrPublishTimeout) {
		// publish it again with the same message id; consumers deduplicate on it
	}
}

// Connection events: a lost connection and a failed attempt to get it back
// are reported apart.
func ExampleOptions_events() {
	c, err := client.Dial(context.Background(), client.Options{
		Addresses: []string{"127.0.0.1:7420"},
		OnConnectionLost: func(address string, err error) {
			log.Printf("lost %s: %v (pending requests failed; reconnecting)", address, err)
		},
		OnReconnectFailed: func(address string, round int, err error) {
			if round%10 == 0 {
				log.Printf("still cannot reach %s after %d rounds: %v", address, round, err)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
