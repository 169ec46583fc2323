package client_test

// Per-publish options: a deadline (Options.PublishTimeout, per call, and
// Publish's context), a caller's tag and a callback.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
)

// A publish whose confirm does not come within its deadline fails with
// ErrPublishTimeout (retryable: outcome unknown) and leaves the window; a
// confirm arriving later completes nothing twice.
func TestPublishDeadlineFailsAPublishThatIsNotConfirmed(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{PublishTimeout: 30 * time.Millisecond, MaxPendingPublishes: 2}, server)
	declare(t, c, "q", client.QueueConfig{})
	server.HoldConfirms(true)
	byOption, err := c.PublishAsync(guardedContext(t), "q", client.Message{Payload: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	perCall, err := c.PublishAsync(guardedContext(t), "q", client.Message{Payload: []byte("b")},
		client.WithPublishTimeout(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, future := range []*client.PublishFuture{byOption, perCall} {
		if _, err := future.Wait(guardedContext(t)); !errors.Is(err, client.ErrPublishTimeout) || !client.IsRetryable(err) {
			t.Fatalf("publish %d past its deadline: %v, want a retryable ErrPublishTimeout", future.Seq(), err)
		}
	}
	// Both places are free again although no confirm came.
	if err := c.Flush(guardedContext(t)); err != nil {
		t.Fatal(err)
	}
	await(t, server, "both publishes stored", func(s clienttest.Stats) bool { return s.Published == 2 })
	server.ReleaseConfirms(false) // late: they find nothing to complete
	server.HoldConfirms(false)
	if confirm, err := c.Publish(guardedContext(t), "q", client.Message{Payload: []byte("c")}); err != nil ||
		confirm.Boundary != client.BoundaryDurable {
		t.Fatalf("a publish after the late confirms: %+v %v", confirm, err)
	}
}

// Publish ends at its context's deadline with ErrPublishTimeout, and the
// publish leaves the window.
func TestPublishTakesItsDeadlineFromTheContext(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{MaxPendingPublishes: 1}, server)
	declare(t, c, "q", client.QueueConfig{})
	server.HoldConfirms(true)
	ctx, cancel := context.WithTimeout(guardedContext(t), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Publish(ctx, "q", client.Message{Payload: []byte("a")}); !errors.Is(err, client.ErrPublishTimeout) {
		t.Fatalf("Publish past its context's deadline: %v, want ErrPublishTimeout", err)
	}
	// The one window place is free: another publish gets it at once.
	server.HoldConfirms(false)
	if _, err := c.Publish(guardedContext(t), "q", client.Message{Payload: []byte("b")}); err != nil {
		t.Fatal(err)
	}
}

// A tag comes back on the future and the Confirms channel; a callback
// gets the outcome instead of the Confirms channel, with its tag.
func TestTagsAndCallbacksCarryTheCallersOwnIdentity(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{Confirms: true}, server)
	declare(t, c, "q", client.QueueConfig{})
	type order struct{ id int }
	var mu sync.Mutex
	called := map[int]client.Confirm{}
	for i := range 10 {
		_, err := c.PublishAsync(guardedContext(t), "q", client.Message{Payload: []byte("x")},
			client.WithTag(order{i}), client.WithCallback(func(confirm client.Confirm) {
				mu.Lock()
				called[confirm.Tag.(order).id] = confirm
				mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
	}
	tagged, err := c.PublishAsync(guardedContext(t), "q", client.Message{Payload: []byte("y")}, client.WithTag("on the channel"))
	if err != nil {
		t.Fatal(err)
	}
	confirm := waitResult(t, c.Confirms(), "the channel's confirm")
	if confirm.Tag != "on the channel" || confirm.Seq != tagged.Seq() || tagged.Tag() != "on the channel" {
		t.Fatalf("the Confirms channel gave %+v (future seq %d)", confirm, tagged.Seq())
	}
	if err := c.Flush(guardedContext(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 10 {
		if got, ok := called[i]; !ok || got.Err != nil || got.Boundary != client.BoundaryDurable {
			t.Fatalf("callback of publish %d: %+v (called: %t)", i, got, ok)
		}
	}
	select {
	case extra := <-c.Confirms():
		t.Fatalf("a publish with a callback also reported on the Confirms channel: %+v", extra)
	default:
	}
}
