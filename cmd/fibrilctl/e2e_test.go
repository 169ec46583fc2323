package main

// End-to-end checks of the CLI and the SDK against the real broker
// (package actors), in process, on a temporary data directory.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/client"
)

func startBroker(t *testing.T, dataDir, address string) *actors.Broker {
	t.Helper()
	config := actors.DefaultConfig()
	config.DataDir, config.ListenAddr = dataDir, address
	broker, err := actors.Start(config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := broker.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return broker
}

// ctl runs one command line against the broker.
func ctl(t *testing.T, broker *actors.Broker, args ...string) result {
	t.Helper()
	return fibrilctlAt(t, broker.Addr().String(), args...)
}

func fibrilctlAt(t *testing.T, address string, args ...string) result {
	t.Helper()
	var stdout, stderr strings.Builder
	code := run(append(args, "--server", address), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func TestCommandsAgainstTheBroker(t *testing.T) {
	broker := startBroker(t, t.TempDir(), "127.0.0.1:0")
	if r := ctl(t, broker, "declare", "orders", "--max-deliveries", "4"); r.code != exitOK || r.stdout != "orders mode=durable created=true\n" {
		t.Fatalf("declare: %+v", r)
	}
	if r := ctl(t, broker, "declare", "clicks", "--buffered"); r.code != exitOK ||
		!strings.HasPrefix(r.stdout, "clicks mode=buffered created=true\nwarning: ") {
		t.Fatalf("declare --buffered: %+v", r)
	}
	expectFailure(t, ctl(t, broker, "declare", "clicks"), exitFailure, "mode_conflict")
	if r := ctl(t, broker, "publish", "orders", "--count", "500", "--size", "48"); r.code != exitOK || r.stdout != "confirmed 500\n" {
		t.Fatalf("publish: %+v", r)
	}
	if r := ctl(t, broker, "publish", "clicks", "--count", "50", "--body", "click"); r.code != exitOK || r.stdout != "confirmed 50\n" {
		t.Fatalf("publish --body: %+v", r)
	}
	r := ctl(t, broker, "consume", "orders", "--count", "500", "--quiet", "--check")
	if r.code != exitOK || r.stdout != "received 500\ncheck: distinct=500 duplicates=0 missing=0 highest=500 unnumbered=0\n" {
		t.Fatalf("consume --check: %+v", r)
	}
	r = ctl(t, broker, "consume", "clicks", "--count", "3", "--nack", "--prefetch", "1")
	if r.code != exitOK || !strings.Contains(r.stdout, "attempt=2 redelivered id=") || !strings.Contains(r.stdout, " click\n") {
		t.Fatalf("consume --nack: %+v", r)
	}
	// Settles apply once they reach the queue's boundary, so the last acks
	// may still be on their way to the disk: read until they have landed.
	var info queueJSON
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r = ctl(t, broker, "info", "orders", "--json")
		info = queueJSON{}
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != exitOK {
			t.Fatalf("info --json: %+v: %v", r, err)
		}
		if info.Leased == 0 || time.Now().After(deadline) {
			break
		}
	}
	if info.Mode != "durable" || info.Ready != 0 || info.Leased != 0 || info.Options.MaxDeliveries != 4 ||
		info.DurableNext == 0 || info.DurableNext > info.WrittenNext {
		t.Fatalf("orders after consuming everything: %+v", info)
	}
	if r := ctl(t, broker, "queues"); r.code != exitOK || strings.Count(r.stdout, "\n") != 3 {
		t.Fatalf("queues: %+v", r)
	}
	if r := ctl(t, broker, "purge", "clicks"); r.code != exitOK || r.stdout != "purged clicks: 50 messages removed\n" {
		t.Fatalf("purge: %+v", r)
	}
	if r := ctl(t, broker, "delete", "orders"); r.code != exitOK || !strings.HasPrefix(r.stdout, "deleted orders: ") {
		t.Fatalf("delete: %+v", r)
	}
	expectFailure(t, ctl(t, broker, "info", "orders"), exitFailure, "unknown_queue")
}

func TestSDKAgainstTheBroker(t *testing.T) {
	dataDir := t.TempDir()
	broker := startBroker(t, dataDir, "127.0.0.1:0")
	address := broker.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var sessions []client.Session
	c, err := client.Dial(ctx, client.Options{
		Addresses: []string{address}, Backoff: client.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		OnConnect: func(s client.Session) { mu.Lock(); sessions = append(sessions, s); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for queue, mode := range map[string]client.Mode{"durable": client.ModeDurable, "buffered": client.ModeBuffered} {
		if result, err := c.Declare(ctx, queue, client.QueueConfig{Mode: mode}); err != nil || result.Mode != mode {
			t.Fatalf("declare %s: %+v %v", queue, result, err)
		}
	}
	// Pipelined publishes to both queues; each confirm names its queue's boundary.
	var futures []*client.PublishFuture
	for i := range 400 {
		queue := []string{"durable", "buffered"}[i%2]
		future, err := c.PublishAsync(ctx, queue, client.Message{Payload: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, future)
	}
	for _, future := range futures {
		confirm, err := future.Wait(ctx)
		want := map[string]client.Boundary{"durable": client.BoundaryDurable, "buffered": client.BoundaryWritten}[future.Queue()]
		// A buffered publish may also be confirmed durable, when the durable
		// frontier already covered it (storage/queue.Confirm).
		if future.Queue() == "buffered" && confirm.Boundary == client.BoundaryDurable {
			want = client.BoundaryDurable
		}
		if err != nil || confirm.Boundary != want {
			t.Fatalf("publish %d to %s: %+v %v; want boundary %s", future.Seq(), future.Queue(), confirm, err, want)
		}
	}

	// The broker holds back deliveries beyond the prefetch.
	sub, err := c.Subscribe(ctx, "durable", client.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	held := []*client.Delivery{<-sub.Deliveries(), <-sub.Deliveries()}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.QueueInfo(ctx, "durable"); err != nil || info.Leased != 2 || info.Ready != 198 {
		t.Fatalf("with prefetch 2 and nothing settled: %+v %v; want 2 leased, 198 ready", info, err)
	}
	if len(sub.Deliveries()) != 0 {
		t.Fatalf("%d deliveries beyond the prefetch arrived", len(sub.Deliveries()))
	}
	if err := held[0].Ack(); err != nil {
		t.Fatal(err)
	}

	// Restart the broker on the same address and data: requests fail
	// retryably while it is down, the subscription comes back, the
	// delivery held across the restart is stale and comes again marked
	// redelivered.
	if err := broker.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.Ping(ctx)
		if errors.Is(err, client.ErrConnectionLost) && client.IsRetryable(err) {
			break
		}
		if err != nil {
			t.Fatalf("ping while the broker is down: %v", err)
		}
	}
	startBroker(t, dataDir, address)
	for {
		_, err := c.Ping(ctx)
		if err == nil {
			break
		}
		if !client.IsRetryable(err) {
			t.Fatalf("ping while reconnecting: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := held[1].Ack(); !errors.Is(err, client.ErrStaleDelivery) {
		t.Fatalf("ack of a delivery held across the restart: %v, want ErrStaleDelivery", err)
	}
	redelivered := 0
	for range 199 {
		select {
		case d := <-sub.Deliveries():
			if d.Redelivered {
				redelivered++
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("deliveries stopped after the restart (got %d redelivered so far)", redelivered)
		}
	}
	if redelivered == 0 {
		t.Fatal("the delivery held across the restart did not come back marked redelivered")
	}
	mu.Lock()
	defer mu.Unlock()
	if last := sessions[len(sessions)-1]; len(sessions) < 2 || !last.Resumed || last.SessionID == sessions[0].SessionID {
		t.Fatalf("sessions %+v: want the one after the restart to be a new id, reported resumed", sessions)
	}
}
