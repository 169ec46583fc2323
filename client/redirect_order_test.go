package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
)

// testSeed returns FIBRIL_SEED when set, a fresh seed otherwise, and
// prints it when the test fails.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if text := os.Getenv("FIBRIL_SEED"); text != "" {
		parsed, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			t.Fatalf("FIBRIL_SEED=%q: %v", text, err)
		}
		seed = parsed
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (replay with FIBRIL_SEED=%d)", seed, seed)
		}
	})
	return seed
}

// silentListener accepts connections and never answers on them (a node
// that hangs before hello); it closes them when the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		listener.Close()
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range held {
			conn.Close()
		}
	})
	return listener.Addr().String()
}

// deadAddress returns a loopback address where nothing listens.
func deadAddress(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	listener.Close()
	return address
}

// A publish refused with not_owner and redirected to a node that never
// answers ends at its own deadline with ErrPublishTimeout (outcome
// unknown), as do the publishes to its queue waiting behind it, even
// though the Client waits for reconnects and its dial timeout is far
// longer; Close then leaves nothing running.
func TestARedirectedPublishEndsAtItsDeadline(t *testing.T) {
	for _, owner := range []struct {
		name    string
		address func(*testing.T) string
	}{
		{"nothing listens", deadAddress},
		{"hello never answered", silentListener},
	} {
		t.Run(owner.name, func(t *testing.T) {
			home := startServer(t, clienttest.Config{})
			home.Redirect("orders", "owner", owner.address(t))
			c := dial(t, client.Options{WaitForReconnect: true, DialTimeout: time.Minute,
				PublishTimeout: 100 * time.Millisecond}, home)
			published := make(chan error, 1)
			go func() {
				_, err := c.Publish(context.Background(), "orders", client.Message{Payload: []byte("first")})
				published <- err
			}()
			var futures []*client.PublishFuture
			for i := range 3 {
				future, err := c.PublishAsync(guardedContext(t), "orders", client.Message{Payload: []byte{byte(i)}})
				if err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				futures = append(futures, future)
			}
			if err := waitResult(t, published, "the redirected publish"); !errors.Is(err, client.ErrPublishTimeout) ||
				!client.IsRetryable(err) {
				t.Fatalf("redirected publish: %v; want ErrPublishTimeout", err)
			}
			for i, future := range futures {
				confirm, err := future.Wait(guardedContext(t))
				if !errors.Is(err, client.ErrPublishTimeout) || confirm.Err != err {
					t.Fatalf("publish %d behind it: %+v %v; want ErrPublishTimeout", i, confirm, err)
				}
			}
			if home.Stats().Rejected == 0 {
				t.Fatal("the home node refused nothing: the test did not redirect")
			}
			// The window is free again: the timed-out publishes left it.
			if err := c.Flush(guardedContext(t)); err != nil {
				t.Fatal(err)
			}
			c.Close()
			awaitNoSDKGoroutines(t)

			// Without a deadline, such a publish waits until Close fails
			// it, and Close leaves nothing running either.
			refusedBefore := home.Stats().Rejected
			c = dial(t, client.Options{WaitForReconnect: true, DialTimeout: time.Minute}, home)
			future, err := c.PublishAsync(guardedContext(t), "orders", client.Message{Payload: []byte("no deadline")})
			if err != nil {
				t.Fatal(err)
			}
			await(t, home, "the second client's refusal", func(s clienttest.Stats) bool { return s.Rejected > refusedBefore })
			c.Close()
			if confirm, err := future.Wait(guardedContext(t)); !errors.Is(err, client.ErrClosed) {
				t.Fatalf("a redirected publish without a deadline at Close: %+v %v; want ErrClosed", confirm, err)
			}
			awaitNoSDKGoroutines(t)
		})
	}
}

// A publish refused with a redirect to a node that is down goes, once
// that node has failed to answer again, to wherever its queue is routed
// (the route to the node that is down is dropped: home, which after the
// failover redirects to the new owner), with the publishes behind it in
// order; without a deadline, and although the Client waits for
// reconnects.
func TestPublishesRedirectedToANodeThatIsDownFollowTheFailover(t *testing.T) {
	home := startServer(t, clienttest.Config{})
	owner := startServer(t, clienttest.Config{NodeID: "owner"})
	declare(t, dial(t, client.Options{}, owner), "orders", client.QueueConfig{})
	home.Redirect("orders", "gone", deadAddress(t))
	c := dial(t, client.Options{WaitForReconnect: true, Backoff: client.Backoff{Initial: 20 * time.Millisecond,
		Max: 20 * time.Millisecond}}, home)
	ctx := guardedContext(t)
	first, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	await(t, home, "the first refusal", func(s clienttest.Stats) bool { return s.Rejected == 1 })
	// The pong comes after the refusal and its redirect: once it is in,
	// the client holds the first publish for the node that is down.
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	later, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte("later")})
	if err != nil {
		t.Fatal(err)
	}
	home.Redirect("orders", "owner", owner.Addr()) // the queue failed over
	for _, future := range []*client.PublishFuture{first, later} {
		if confirm, err := future.Wait(ctx); err != nil {
			t.Fatalf("publish %d: %+v %v; want it stored by the new owner", future.Seq(), confirm, err)
		}
	}
	state, _ := owner.Queue("orders")
	if len(state.Payloads) != 2 || string(state.Payloads[0]) != "first" || string(state.Payloads[1]) != "later" {
		t.Fatalf("the new owner stored %q, want first, later", state.Payloads)
	}
}

// A publish that waits for its Client to reconnect (WaitForReconnect)
// ends at its deadline: Publish returns ErrPublishTimeout instead of
// waiting for the node.
func TestAPublishWaitingForAReconnectEndsAtItsDeadline(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	lost := make(chan struct{}, 1)
	c := dial(t, client.Options{WaitForReconnect: true, PublishTimeout: 100 * time.Millisecond,
		OnConnectionLost: func(string, error) { lost <- struct{}{} }}, server)
	declare(t, c, "q", client.QueueConfig{})
	server.Close()
	waitResult(t, lost, "the end of the connection")
	published := make(chan error, 1)
	go func() {
		_, err := c.Publish(context.Background(), "q", client.Message{Payload: []byte("x")})
		published <- err
	}()
	if err := waitResult(t, published, "the publish"); !errors.Is(err, client.ErrPublishTimeout) {
		t.Fatalf("publish while the node is gone: %v; want ErrPublishTimeout", err)
	}
	c.Close()
	awaitNoSDKGoroutines(t)
}

// Publishes to a queue whose route changed while earlier publishes were
// still unanswered on the old connection wait for those answers (any of
// them could still be refused and sent again): they do not reach the new
// owner before.
func TestPublishesWaitForTheOldConnectionsAnswersBeforeMoving(t *testing.T) {
	home := startServer(t, clienttest.Config{})
	owner := startServer(t, clienttest.Config{NodeID: "owner"})
	c := dial(t, client.Options{}, home)
	ctx := guardedContext(t)
	declare(t, c, "orders", client.QueueConfig{})
	declare(t, dial(t, client.Options{}, owner), "orders", client.QueueConfig{})
	home.HoldConfirms(true)
	var futures []*client.PublishFuture
	publish := func(payload string) {
		future, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, future)
	}
	for _, payload := range []string{"0", "1", "2"} {
		publish(payload)
	}
	await(t, home, "the first publishes", func(s clienttest.Stats) bool { return s.Published == 3 })
	// A request learns that the owner moved; the next publishes must wait.
	home.Redirect("orders", "owner", owner.Addr())
	if _, err := c.QueueInfo(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{"3", "4", "5"} {
		publish(payload)
	}
	// Anything sent to the owner before this request has been stored
	// when it is answered.
	if _, err := c.QueueInfo(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if stats := owner.Stats(); stats.Published != 0 {
		t.Fatalf("the owner stored %d publishes while earlier ones were unanswered on the old connection", stats.Published)
	}
	home.ReleaseConfirms(false)
	for i, future := range futures {
		if confirm, err := future.Wait(ctx); err != nil {
			t.Fatalf("publish %d: %+v %v", i, confirm, err)
		}
	}
	if state, _ := owner.Queue("orders"); len(state.Payloads) != 3 || string(state.Payloads[0]) != "3" {
		t.Fatalf("the owner stored %q, want 3, 4, 5", state.Payloads)
	}
}

// Publishes to one queue from one Client reach the owner in the order
// they were made, when the first ones went to a node that refused them
// with not_owner and the later ones could go straight to the owner the
// redirect named. Seeded: how many are published before the rest, whether
// the rest wait until the first refusal is sent, and whether the redirect
// comes before or after the refusal.
func TestPublishesKeepTheirOrderAcrossARedirect(t *testing.T) {
	random := rand.New(rand.NewPCG(testSeed(t), 0))
	for round := range 8 {
		redirectFirst := random.IntN(2) == 0
		refusedFirst := 1 + random.IntN(16) // published before the rest: they go to the node that refuses them
		pause := random.IntN(2) == 0        // the rest wait for the first refusal (the route is being learned)
		total := refusedFirst + 50 + random.IntN(150)
		home := startServer(t, clienttest.Config{RedirectBeforeReject: redirectFirst})
		owner := startServer(t, clienttest.Config{NodeID: "owner"})
		home.Redirect("orders", "owner", owner.Addr())
		declare(t, dial(t, client.Options{}, owner), "orders", client.QueueConfig{})

		c := dial(t, client.Options{}, home)
		ctx := guardedContext(t)
		futures := make([]*client.PublishFuture, 0, total)
		publish := func(i int) {
			future, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatalf("round %d: publish %d: %v", round, i, err)
			}
			futures = append(futures, future)
		}
		for i := range refusedFirst {
			publish(i)
		}
		if pause {
			await(t, home, "the first refusal", func(s clienttest.Stats) bool { return s.Rejected > 0 })
		}
		for i := refusedFirst; i < total; i++ {
			publish(i)
		}
		for i, future := range futures {
			if confirm, err := future.Wait(ctx); err != nil {
				t.Fatalf("round %d: publish %d: %+v %v", round, i, confirm, err)
			}
		}
		state, _ := owner.Queue("orders")
		if len(state.Payloads) != total {
			t.Fatalf("round %d: the owner stored %d messages, want %d", round, len(state.Payloads), total)
		}
		for i, payload := range state.Payloads {
			if string(payload) != strconv.Itoa(i) {
				t.Fatalf("round %d (redirect first %v, %d published first, pause %v, %d refused): the owner's message %d is %s; "+
					"order %s", round, redirectFirst, refusedFirst, pause, home.Stats().Rejected, i, payload, summarize(state.Payloads))
			}
		}
		c.Close()
	}
}

// summarize prints the stored order compactly: runs of consecutive
// numbers as first-last.
func summarize(payloads [][]byte) string {
	out := ""
	for i := 0; i < len(payloads); {
		first, _ := strconv.Atoi(string(payloads[i]))
		j := i + 1
		for j < len(payloads) {
			next, _ := strconv.Atoi(string(payloads[j]))
			if next != first+(j-i) {
				break
			}
			j++
		}
		if out != "" {
			out += " "
		}
		if j-i == 1 {
			out += strconv.Itoa(first)
		} else {
			out += fmt.Sprintf("%d-%d", first, first+j-i-1)
		}
		i = j
	}
	return out
}
