package client_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
)

// twoNodes starts a node that redirects the queue to a second node, which
// owns it.
func twoNodes(t *testing.T, config clienttest.Config) (home, owner *clienttest.Server) {
	home = startServer(t, config)
	owner = startServer(t, clienttest.Config{NodeID: "owner"})
	home.Redirect("orders", "owner", owner.Addr())
	return home, owner
}

func TestRequestsFollowARedirectToTheOwner(t *testing.T) {
	home, owner := twoNodes(t, clienttest.Config{})
	var mu sync.Mutex
	var sessions []client.Session
	c := dial(t, client.Options{OnConnect: func(s client.Session) {
		mu.Lock()
		sessions = append(sessions, s)
		mu.Unlock()
	}}, home)
	ctx := guardedContext(t)

	result := declare(t, c, "orders", client.QueueConfig{Mode: client.ModeBuffered})
	if !result.Created || result.Mode != client.ModeBuffered {
		t.Fatalf("declare through a redirect: %+v", result)
	}
	if _, ok := home.Queue("orders"); ok {
		t.Fatal("the redirecting node created the queue")
	}
	if state, ok := owner.Queue("orders"); !ok || state.Mode != client.ModeBuffered {
		t.Fatalf("the owner has %+v, %v; want the buffered queue", state, ok)
	}
	// The route is remembered: publishes and subscribes go straight to
	// the owner.
	confirm, err := c.Publish(ctx, "orders", client.Message{Payload: []byte("x")})
	if err != nil || confirm.Boundary != client.BoundaryWritten {
		t.Fatalf("publish: %+v %v", confirm, err)
	}
	sub, err := c.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := receive(t, sub.Deliveries()); string(d.Payload) != "x" || d.Ack() != nil {
		t.Fatalf("delivery %+v", d)
	}
	if info, err := c.QueueInfo(ctx, "orders"); err != nil || info.Name != "orders" {
		t.Fatalf("info: %+v %v", info, err)
	}
	if stats := home.Stats(); stats.PublishFrames != 0 || stats.Subscribes != 0 {
		t.Fatalf("the redirecting node saw %+v after the route was known", stats)
	}
	if owner.Stats().Hellos != 1 {
		t.Fatalf("the owner saw %d hellos; want one connection for everything", owner.Stats().Hellos)
	}
	// Queues owned by the home node still go home.
	declare(t, c, "local", client.QueueConfig{})
	if _, ok := home.Queue("local"); !ok {
		t.Fatal("a queue the home node owns was declared elsewhere")
	}
	mu.Lock()
	defer mu.Unlock()
	// One session each on home and on the owner; their OnConnect calls may
	// come in either order (each link reports from its own goroutine).
	if len(sessions) != 2 || (sessions[0].NodeID == "owner") == (sessions[1].NodeID == "owner") {
		t.Fatalf("sessions %+v: want one on home and one on the owner", sessions)
	}
}

func TestPublishRefusedWithNotOwnerIsSentToTheOwner(t *testing.T) {
	for _, redirectFirst := range []bool{false, true} {
		home, owner := twoNodes(t, clienttest.Config{RedirectBeforeReject: redirectFirst})
		setup := dial(t, client.Options{}, owner)
		declare(t, setup, "orders", client.QueueConfig{})

		c := dial(t, client.Options{}, home)
		ctx := guardedContext(t)
		var futures []*client.PublishFuture
		for range 5 {
			future, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			futures = append(futures, future)
		}
		for _, future := range futures {
			confirm, err := future.Wait(ctx)
			if err != nil || confirm.Boundary != client.BoundaryDurable {
				t.Fatalf("redirect first %v: publish %d: %+v %v", redirectFirst, future.Seq(), confirm, err)
			}
		}
		if home.Stats().Rejected == 0 || owner.Stats().Published != 5 {
			t.Fatalf("redirect first %v: home rejected %d, owner stored %d; want the owner to store all 5",
				redirectFirst, home.Stats().Rejected, owner.Stats().Published)
		}
	}
}

func TestRedirectLoopIsBounded(t *testing.T) {
	first := startServer(t, clienttest.Config{NodeID: "first"})
	second := startServer(t, clienttest.Config{NodeID: "second"})
	first.Redirect("orders", "second", second.Addr())
	second.Redirect("orders", "first", first.Addr())
	c := dial(t, client.Options{MaxRedirects: 3}, first)
	_, err := c.Declare(guardedContext(t), "orders", client.QueueConfig{})
	if !errors.Is(err, client.ErrTooManyRedirects) {
		t.Fatalf("got %v, want ErrTooManyRedirects", err)
	}
	_, err = c.Publish(guardedContext(t), "orders", client.Message{Payload: []byte("x")})
	if !errors.Is(err, client.ErrTooManyRedirects) {
		t.Fatalf("publish: got %v, want ErrTooManyRedirects", err)
	}
}

func TestRedirectToAnUnreachableNodeFailsRetryably(t *testing.T) {
	home := startServer(t, clienttest.Config{})
	gone := startServer(t, clienttest.Config{})
	goneAddress := gone.Addr()
	gone.Close()
	home.Redirect("orders", "gone", goneAddress)
	c := dial(t, client.Options{}, home)
	_, err := c.Declare(guardedContext(t), "orders", client.QueueConfig{})
	if !errors.Is(err, client.ErrConnectionLost) || !client.IsRetryable(err) {
		t.Fatalf("got %v, want a retryable ErrConnectionLost", err)
	}
}

// A redirect (FRD2) naming an older epoch than one the client already
// followed for the queue comes from a node that has not heard of the
// failover: the client keeps the newer owner and never dials the old one.
// A newer epoch is followed.
func TestARedirectOfAnOlderEpochIsNotFollowed(t *testing.T) {
	home := startServer(t, clienttest.Config{})
	current := startServer(t, clienttest.Config{NodeID: "current"})
	former := startServer(t, clienttest.Config{NodeID: "former"})
	home.RedirectAtEpoch("orders", "current", current.Addr(), 5)
	c := dial(t, client.Options{}, home)
	ctx := guardedContext(t)
	declare(t, c, "orders", client.QueueConfig{Mode: client.ModeBuffered})
	if _, ok := current.Queue("orders"); !ok {
		t.Fatal("the declare did not reach the owner of epoch 5")
	}
	// The owner of epoch 5 now names epoch 4's owner (it lags): not
	// followed; the request stays with the owner it knows.
	current.RedirectAtEpoch("orders", "former", former.Addr(), 4)
	if _, err := c.QueueInfo(ctx, "orders"); !errors.Is(err, client.ErrTooManyRedirects) {
		t.Fatalf("info while only stale redirects answer: %v; want ErrTooManyRedirects", err)
	}
	if stats := former.Stats(); stats.Connections != 0 {
		t.Fatalf("the client dialled the owner of an older epoch: %+v", stats)
	}
	// Epoch 6 names it again: followed.
	current.RedirectAtEpoch("orders", "former", former.Addr(), 6)
	if _, err := c.Declare(ctx, "orders", client.QueueConfig{Mode: client.ModeBuffered}); err != nil {
		t.Fatalf("declare through the redirect of epoch 6: %v", err)
	}
	if _, ok := former.Queue("orders"); !ok || former.Stats().Connections == 0 {
		t.Fatal("the redirect of a newer epoch was not followed")
	}
}
