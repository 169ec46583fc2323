package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
	"github.com/fibrilmq/fibril/wire"
)

func TestPendingRequestsFailAtOnceWhenTheConnectionCloses(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "q", client.QueueConfig{})
	server.HoldConfirms(true)
	server.SetHook(func(conn *clienttest.Conn, frame wire.Frame) clienttest.Action {
		if _, ok := frame.(*wire.GetQueueInfo); ok {
			return clienttest.Ignore // never answered
		}
		return clienttest.Handle
	})
	// No deadline anywhere: only the connection's end can complete these.
	infoDone := make(chan error, 1)
	go func() {
		_, err := c.QueueInfo(context.Background(), "q")
		infoDone <- err
	}()
	future, err := c.PublishAsync(context.Background(), "q", client.Message{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	await(t, server, "the request and the publish", func(s clienttest.Stats) bool { return s.Published == 1 })
	if _, err := c.Ping(guardedContext(t)); err != nil { // the info request was written before the ping
		t.Fatal(err)
	}
	server.DropConnections()

	infoErr := waitResult(t, infoDone, "the pending info request")
	if !errors.Is(infoErr, client.ErrConnectionLost) || !client.IsRetryable(infoErr) {
		t.Fatalf("pending request: got %v, want a retryable ErrConnectionLost", infoErr)
	}
	confirm, err := future.Wait(context.Background())
	if !errors.Is(err, client.ErrConnectionLost) || !client.IsRetryable(err) || confirm.Err != err {
		t.Fatalf("pending publish: got %+v %v, want a retryable ErrConnectionLost", confirm, err)
	}
}

func TestReconnectsWithBackoffAndResubscribes(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	var refuse atomic.Int32
	var mu sync.Mutex
	var connects []client.Session
	var failedAttempts int
	dialer := &net.Dialer{}
	c := dial(t, client.Options{
		Dialer: func(ctx context.Context, address string) (net.Conn, error) {
			if refuse.Load() > 0 {
				refuse.Add(-1)
				return nil, errors.New("injected dial failure")
			}
			return dialer.DialContext(ctx, "tcp", address)
		},
		OnConnect: func(s client.Session) {
			mu.Lock()
			connects = append(connects, s)
			mu.Unlock()
		},
		OnDisconnect: func(address string, err error) {
			mu.Lock()
			failedAttempts++
			mu.Unlock()
		},
	}, server)
	declare(t, c, "q", client.QueueConfig{})
	publishN(t, c, "q", 4)
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, sub.Deliveries())

	refuse.Store(3)
	server.DropConnections()
	await(t, server, "the resubscribe", func(s clienttest.Stats) bool { return s.Subscribes == 2 })
	mu.Lock()
	attempts, sessions := failedAttempts, append([]client.Session(nil), connects...)
	mu.Unlock()
	if attempts != 4 { // the dropped connection, then three refused dials
		t.Fatalf("%d disconnect reports, want the drop and three failed attempts", attempts)
	}
	if len(sessions) != 2 || sessions[1].SessionID == sessions[0].SessionID || sessions[1].Resumed {
		t.Fatalf("sessions %+v: want a second, new session", sessions)
	}
	if err := held.Ack(); !errors.Is(err, client.ErrStaleDelivery) || !held.Stale() {
		t.Fatalf("ack of a delivery from before the reconnect: %v, want ErrStaleDelivery", err)
	}
	redelivered := 0
	for range 4 {
		d := receive(t, sub.Deliveries())
		if d.Redelivered {
			redelivered++
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if redelivered < 1 {
		t.Fatal("the message held when the connection dropped did not come back marked redelivered")
	}
	await(t, server, "acks", func(s clienttest.Stats) bool { return s.Acked == 4 })
	if _, err := c.Publish(guardedContext(t), "q", client.Message{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
}

func TestRequestsFailFastWhileReconnectingUnlessTheyMayWait(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	var refuse atomic.Bool
	dialer := &net.Dialer{}
	dialFunc := func(ctx context.Context, address string) (net.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("injected dial failure")
		}
		return dialer.DialContext(ctx, "tcp", address)
	}
	failFast := dial(t, client.Options{Dialer: dialFunc}, server)
	waiting := dial(t, client.Options{Dialer: dialFunc, WaitForReconnect: true}, server)
	declare(t, failFast, "q", client.QueueConfig{})
	refuse.Store(true)
	server.DropConnections()
	await(t, server, "both disconnected", func(s clienttest.Stats) bool { return s.Open == 0 })

	for {
		_, err := failFast.Publish(context.Background(), "q", client.Message{Payload: []byte("x")})
		if errors.Is(err, client.ErrConnectionLost) && client.IsRetryable(err) {
			break
		}
		if err != nil {
			t.Fatalf("publish while reconnecting: %v", err)
		}
		// The supervisor had not yet seen the drop; try again.
	}
	waited := make(chan error, 1)
	go func() {
		_, err := waiting.Publish(guardedContext(t), "q", client.Message{Payload: []byte("y")})
		waited <- err
	}()
	refuse.Store(false)
	if err := waitResult(t, waited, "the waiting publish"); err != nil {
		t.Fatalf("publish with WaitForReconnect: %v", err)
	}
}

func TestRestartedNodeReportsAResumedSession(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	resumed := make(chan bool, 4)
	c := dial(t, client.Options{OnConnect: func(s client.Session) { resumed <- s.Resumed }}, server)
	if waitResult(t, resumed, "first connect") {
		t.Fatal("the first session claims to be resumed")
	}
	server.Restart()
	if !waitResult(t, resumed, "reconnect") {
		t.Fatal("the session after a node restart is not reported resumed")
	}
	if session, _ := c.Session(); !session.Resumed {
		t.Fatalf("Session() = %+v, want Resumed", session)
	}
}

func TestKeepaliveClosesASilentConnection(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	var silent atomic.Bool
	server.SetHook(func(conn *clienttest.Conn, frame wire.Frame) clienttest.Action {
		if _, ok := frame.(*wire.Ping); ok && silent.Load() {
			return clienttest.Ignore
		}
		return clienttest.Handle
	})
	dial(t, client.Options{KeepaliveInterval: 10 * time.Millisecond}, server)
	await(t, server, "keepalive pings", func(s clienttest.Stats) bool { return s.Pings >= 2 })
	silent.Store(true)
	await(t, server, "a reconnect after an unanswered ping", func(s clienttest.Stats) bool { return s.Hellos >= 2 })
}

// A connection the keepalive closed (its node went silent: paused, cut
// off) is not tried again first: the reconnect goes to the next address.
// A silent node's kernel still accepts connections, so a round that began
// there waited out DialTimeout before it went on (2 s of a paused owner's
// failover in the cluster fault classes). Here the silent node answers a
// hello again (its hook ignores only pings): a reconnect to it would
// succeed, so the address the Client reconnects to shows which it tried
// first.
func TestAKeepaliveTimeoutReconnectsToTheNextAddressFirst(t *testing.T) {
	silent := startServer(t, clienttest.Config{NodeID: "silent"})
	other := startServer(t, clienttest.Config{NodeID: "other"})
	var quiet atomic.Bool
	silent.SetHook(func(_ *clienttest.Conn, frame wire.Frame) clienttest.Action {
		if _, ok := frame.(*wire.Ping); ok && quiet.Load() {
			return clienttest.Ignore
		}
		return clienttest.Handle
	})
	connected := make(chan string, 4)
	c := dial(t, client.Options{KeepaliveInterval: 20 * time.Millisecond, DialTimeout: hangGuard,
		OnConnect: func(s client.Session) { connected <- s.NodeID }}, silent, other)
	defer c.Close()
	if first := waitResult(t, connected, "the first connection"); first != "silent" {
		t.Fatalf("connected first to %s, want the first address", first)
	}
	quiet.Store(true)
	if next := waitResult(t, connected, "the reconnect after the keepalive timeout"); next != "other" {
		t.Fatalf("reconnected to %s, the node that went silent; want the next address", next)
	}
}

// A node that never answers the keepalive's ping but keeps sending other
// frames (its pong waits behind them, say) is there: the connection stays
// up through several intervals. Once the node falls silent too, the ping
// still unanswered closes it.
func TestKeepaliveKeepsAConnectionTheNodeKeepsTalkingOn(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	pinged := make(chan *clienttest.Conn, 1)
	pongs := make(chan uint64, 1)
	server.SetHook(func(conn *clienttest.Conn, frame wire.Frame) clienttest.Action {
		switch f := frame.(type) {
		case *wire.Ping:
			select {
			case pinged <- conn:
			default:
			}
			return clienttest.Ignore
		case *wire.Pong:
			pongs <- f.RequestID
			return clienttest.Ignore
		}
		return clienttest.Handle
	})
	const interval = 500 * time.Millisecond
	lost := make(chan error, 1)
	dial(t, client.Options{KeepaliveInterval: interval, OnConnectionLost: func(_ string, err error) {
		select {
		case lost <- err:
		default:
		}
	}}, server)
	conn := waitResult(t, pinged, "the first keepalive ping")
	// The node talks (pings of its own, each answered before the next)
	// for four intervals while the client's ping stays unanswered.
	for id, start := uint64(1), time.Now(); time.Since(start) < 4*interval; id++ {
		conn.Send(&wire.Ping{RequestID: id})
		select {
		case got := <-pongs:
			if got != id {
				t.Fatalf("pong %d, want %d", got, id)
			}
		case err := <-lost:
			t.Fatalf("the connection the node was sending on was closed: %v", err)
		case <-time.After(hangGuard):
			t.Fatal("the client's pong never came")
		}
	}
	await(t, server, "a reconnect once the node fell silent", func(s clienttest.Stats) bool { return s.Hellos >= 2 })
}

func TestCloseFailsEverythingPending(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{Confirms: true}, server)
	declare(t, c, "q", client.QueueConfig{})
	publishN(t, c, "q", 1)
	if first := waitResult(t, c.Confirms(), "the first confirm"); first.Err != nil {
		t.Fatal(first.Err)
	}
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	held := receive(t, sub.Deliveries())
	server.HoldConfirms(true)
	future, err := c.PublishAsync(guardedContext(t), "q", client.Message{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	await(t, server, "the publish", func(s clienttest.Stats) bool { return s.Published == 2 })
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()

	outcome := waitResult(t, c.Confirms(), "the confirm of the pending publish")
	if !errors.Is(outcome.Err, client.ErrClosed) || outcome.Seq != future.Seq() {
		t.Fatalf("confirm %+v, want ErrClosed for publish %d", outcome, future.Seq())
	}
	if err := waitResult(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	if _, open := <-c.Confirms(); open {
		t.Fatal("the confirms channel is open after Close")
	}
	if _, err := future.Wait(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("future after Close: %v", err)
	}
	if _, open := <-sub.Deliveries(); open || !errors.Is(sub.Err(), client.ErrClosed) {
		t.Fatalf("subscription after Close: open %v, err %v", open, sub.Err())
	}
	if err := held.Ack(); !errors.Is(err, client.ErrStaleDelivery) {
		t.Fatalf("ack after Close: %v", err)
	}
	if _, err := c.Publish(context.Background(), "q", client.Message{}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("publish after Close: %v", err)
	}
	if _, err := c.Declare(context.Background(), "q", client.QueueConfig{}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("declare after Close: %v", err)
	}
}

func TestPublishWaitsForRoomInTheWindow(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{MaxPendingPublishes: 2}, server)
	declare(t, c, "q", client.QueueConfig{})
	server.HoldConfirms(true)
	ctx := guardedContext(t)
	for range 2 {
		if _, err := c.PublishAsync(ctx, "q", client.Message{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.PublishAsync(short, "q", client.Message{Payload: []byte("x")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third publish with a full window: %v, want to wait (and see its context end)", err)
	}
	third := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "q", client.Message{Payload: []byte("x")})
		third <- err
	}()
	await(t, server, "two publishes", func(s clienttest.Stats) bool { return s.Published == 2 })
	server.ReleaseConfirms(false)
	await(t, server, "the third publish", func(s clienttest.Stats) bool { return s.Published == 3 })
	server.ReleaseConfirms(false)
	if err := waitResult(t, third, "the third publish"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCloseLeavesNoGoroutineBehind(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	owner := startServer(t, clienttest.Config{NodeID: "owner"})
	server.Redirect("far", "owner", owner.Addr())
	c, err := client.Dial(guardedContext(t), client.Options{Addresses: []string{server.Addr()}, Confirms: true,
		KeepaliveInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	declare(t, c, "near", client.QueueConfig{})
	declare(t, c, "far", client.QueueConfig{})
	for _, queue := range []string{"near", "far"} {
		if _, err := c.Subscribe(guardedContext(t), queue, client.SubscribeOptions{Handler: func(d *client.Delivery) { d.Ack() }}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PublishAsync(guardedContext(t), queue, client.Message{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for range c.Confirms() {
		}
	}()
	c.Close()
	awaitNoSDKGoroutines(t)
}

// A resubscribe that times out (the node never answers it) is retried
// with backoff until it succeeds: the subscription is not left stuck.
func TestResubscribeIsRetriedUntilItSucceeds(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{DialTimeout: 200 * time.Millisecond}, server)
	declare(t, c, "q", client.QueueConfig{})
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Int32
	server.SetHook(func(conn *clienttest.Conn, frame wire.Frame) clienttest.Action {
		if _, ok := frame.(*wire.Subscribe); ok && dropped.CompareAndSwap(0, 1) {
			return clienttest.Ignore // the first resubscribe is never answered
		}
		return clienttest.Handle
	})
	server.DropConnections()
	await(t, server, "the retried resubscribe", func(s clienttest.Stats) bool { return s.Subscribes == 2 })
	if dropped.Load() != 1 {
		t.Fatal("the hook never dropped a resubscribe")
	}
	publishN(t, c, "q", 1)
	d := receive(t, sub.Deliveries())
	if err := d.AckSync(guardedContext(t)); err != nil {
		t.Fatalf("ack after the retried resubscribe: %v", err)
	}
	if sub.Err() != nil {
		t.Fatalf("the subscription ended: %v", sub.Err())
	}
}

// A refusal that cannot succeed later ends the subscription with it.
func TestResubscribeRefusedForGoodEndsTheSubscription(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "q", client.QueueConfig{})
	sub, err := c.Subscribe(guardedContext(t), "q", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQueue(guardedContext(t), "q"); err != nil {
		t.Fatal(err)
	}
	server.DropConnections()
	select {
	case <-sub.Done():
	case <-time.After(hangGuard):
		t.Fatal("the subscription did not end")
	}
	if client.CodeOf(sub.Err()) != wire.CodeUnknownQueue {
		t.Fatalf("Err %v, want unknown_queue", sub.Err())
	}
}

// A lost connection and a failed reconnect attempt are told apart.
func TestConnectionLostAndReconnectFailedAreDistinctEvents(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	var refuse atomic.Int32
	var mu sync.Mutex
	var lost, failed []string
	var rounds []int
	dialer := &net.Dialer{}
	c := dial(t, client.Options{
		WaitForReconnect: true,
		Dialer: func(ctx context.Context, address string) (net.Conn, error) {
			if refuse.Load() > 0 {
				refuse.Add(-1)
				return nil, errors.New("injected dial failure")
			}
			return dialer.DialContext(ctx, "tcp", address)
		},
		OnConnectionLost: func(address string, err error) {
			mu.Lock()
			lost = append(lost, address)
			mu.Unlock()
			if !errors.Is(err, client.ErrConnectionLost) {
				t.Errorf("OnConnectionLost with %v, which does not match ErrConnectionLost", err)
			}
		},
		OnReconnectFailed: func(address string, round int, err error) {
			mu.Lock()
			failed, rounds = append(failed, address), append(rounds, round)
			mu.Unlock()
		},
	}, server)
	refuse.Store(2)
	server.DropConnections()
	await(t, server, "the reconnect", func(s clienttest.Stats) bool { return s.Hellos == 2 })
	if _, err := c.Ping(guardedContext(t)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lost) != 1 || lost[0] != server.Addr() {
		t.Fatalf("connection-lost events %v, want one for %s", lost, server.Addr())
	}
	if len(failed) != 2 || rounds[0] != 1 || rounds[1] != 2 {
		t.Fatalf("reconnect-failed events %v rounds %v, want two, rounds 1 and 2", failed, rounds)
	}
}
