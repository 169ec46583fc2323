package actors

// The Go SDK's graceful drain, acknowledged acks and lease expiries
// against a real broker: what the node ends up holding is checked through
// queue info, so nothing here trusts the SDK's own account.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

func dialSDK(t *testing.T, b *Broker) *client.Client {
	t.Helper()
	sdk, err := client.Dial(testContext(t), client.Options{Addresses: []string{b.Addr().String()}, ClientName: "sdk-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sdk.Close() })
	return sdk
}

// A handler mid-work when Drain starts settles successfully, and nothing
// it settled is delivered again: a second consumer gets exactly the
// messages the first never acked, none of them twice.
func TestSDKDrainSettlesWorkInProgressAndRedeliversNothingSettled(t *testing.T) {
	b := startBroker(t, nil)
	sdk := dialSDK(t, b)
	ctx := testContext(t)
	if _, err := sdk.Declare(ctx, "work", client.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"a", "b", "c", "d", "e", "f"} {
		if _, err := sdk.Publish(ctx, "work", client.Message{Payload: []byte(body), MessageID: body}); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan string, 6)
	proceed := make(chan struct{})
	acked := make(chan error, 6)
	sub, err := sdk.Subscribe(ctx, "work", client.SubscribeOptions{Prefetch: 3, Handler: func(d *client.Delivery) {
		started <- d.MessageID
		<-proceed
		acked <- d.AckSync(ctx)
	}})
	if err != nil {
		t.Fatal(err)
	}
	inProgress := <-started
	drained := make(chan error, 1)
	go func() { drained <- sub.Drain(ctx) }()
	for !sub.IsDraining() {
		time.Sleep(time.Millisecond)
	}
	close(proceed)
	if err := <-acked; err != nil {
		t.Fatalf("the ack of %s, in progress when Drain started: %v", inProgress, err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	// The unsubscribe's releases apply at the queue's boundary, a moment
	// after its answer.
	waitUntil(t, "the five others are ready again", func() bool {
		info, err := sdk.QueueInfo(ctx, "work")
		if err != nil {
			t.Fatal(err)
		}
		if info.Consumers != 0 || info.Ready+info.Leased != 5 {
			t.Fatalf("after Drain: %+v", info)
		}
		return info.Ready == 5
	})

	second, err := sdk.Subscribe(ctx, "work", client.SubscribeOptions{Prefetch: 5})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 5 {
		d := <-second.Deliveries()
		if d.MessageID == inProgress || seen[d.MessageID] {
			t.Fatalf("%s delivered again (settled during Drain: %s)", d.MessageID, inProgress)
		}
		seen[d.MessageID] = true
		if d.Attempt != 1 {
			t.Fatalf("%s has attempt %d: a release by Drain must not count", d.MessageID, d.Attempt)
		}
		if err := d.AckSync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := sdk.QueueInfo(ctx, "work"); err != nil || info.Ready != 0 || info.Leased != 0 {
		t.Fatalf("after acking the rest: %+v %v", info, err)
	}
}

// A handler slower than the queue's lease: its late ack says the lease
// expired (the message comes back), the connection stays up although the
// node delivered more than the prefetch while the SDK still held the
// expired delivery, and an AckSync of the redelivery applies.
func TestSDKAckOfAnExpiredDeliverySaysSo(t *testing.T) {
	b := startBroker(t, nil)
	sdk := dialSDK(t, b)
	ctx := testContext(t)
	if _, err := sdk.Declare(ctx, "slow", client.QueueConfig{LeaseTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.Publish(ctx, "slow", client.Message{Payload: []byte("job"), MessageID: "job-1"}); err != nil {
		t.Fatal(err)
	}
	sub, err := sdk.Subscribe(ctx, "slow", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sub.LeaseTimeout() != 100*time.Millisecond {
		t.Fatalf("lease timeout read at subscribe: %v", sub.LeaseTimeout())
	}
	first := <-sub.Deliveries()
	again := <-sub.Deliveries() // only after the lease expired at the node
	if !again.Redelivered || again.MessageID != first.MessageID || again.Attempt != 2 {
		t.Fatalf("redelivery %+v after %+v", again, first)
	}
	if err := first.Ack(); !errors.Is(err, client.ErrLeaseExpired) {
		t.Fatalf("late ack: %v, want ErrLeaseExpired", err)
	}
	if err := again.AckSync(ctx); err != nil {
		t.Fatalf("ack-sync of the redelivery: %v", err)
	}
	if session, ok := sdk.Session(); !ok || session.Resumed {
		t.Fatalf("session %+v, connected %t", session, ok)
	}
	if info, err := sdk.QueueInfo(ctx, "slow"); err != nil || info.Ready != 0 || info.Leased != 0 {
		t.Fatalf("after the ack-sync: %+v %v", info, err)
	}
}

// AckSync of a delivery the node expired, before the SDK's own clock says
// so, is refused with ErrLeaseExpired by the node's answer.
func TestSDKAckSyncRefusedByTheNodeIsLeaseExpired(t *testing.T) {
	b := startBroker(t, nil)
	sdk := dialSDK(t, b)
	ctx := testContext(t)
	if _, err := sdk.Declare(ctx, "short", client.QueueConfig{LeaseTimeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// Re-declaring with a longer lease after subscribing would be refused,
	// so the subscription's own view stays the queue's: here the node's
	// refusal must be what says it.
	if _, err := sdk.Publish(ctx, "short", client.Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	other, err := client.Dial(ctx, client.Options{Addresses: []string{b.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	sub, err := other.Subscribe(ctx, "short", client.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	first := <-sub.Deliveries()
	second := <-sub.Deliveries() // redelivered after the expiry
	if second.MessageID != first.MessageID {
		t.Fatalf("%+v then %+v", first, second)
	}
	shortCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := first.AckSync(shortCtx); !errors.Is(err, client.ErrLeaseExpired) {
		t.Fatalf("ack-sync of an expired delivery: %v", err)
	}
}
