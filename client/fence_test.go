package client_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
	"github.com/fibrilmq/fibril/wire"
)

// The owner power-loss trial's order violation, with the fake node: the
// owner refuses one publish in the middle of a pipeline with unavailable
// (its admission turned off for a moment) and serves the next one. The
// Client sends the refused one through another node, which redirects it
// back to the owner; it must not be stored after the publishes made after
// it. The node fences the queue on the connection after the refusal
// (docs/protocol.md 4.3, "Order across a refusal"), so the later ones are
// refused too, and the Client resumes and sends them all again in order.
func TestARefusalInThePipelineKeepsThePublishOrder(t *testing.T) {
	owner := startServer(t, clienttest.Config{NodeID: "owner"})
	other := startServer(t, clienttest.Config{NodeID: "other"})
	other.Redirect("orders", "owner", owner.Addr())
	declare(t, dial(t, client.Options{}, owner), "orders", client.QueueConfig{})

	var refusedOnce atomic.Bool
	owner.SetHook(func(_ *clienttest.Conn, frame wire.Frame) clienttest.Action {
		publish, ok := frame.(*wire.Publish)
		if !ok {
			return clienttest.Handle
		}
		if string(publish.Messages[0].Payload) == "1" && refusedOnce.CompareAndSwap(false, true) {
			owner.Refuse("orders", wire.CodeUnavailable, "queue \"orders\" has 1 of the 2 copies its policy needs")
		} else {
			owner.Refuse("orders", 0, "") // the reason passed at once
		}
		return clienttest.Handle
	})

	const total = 40
	c := dial(t, client.Options{MaxBatchMessages: 1, PublishTimeout: hangGuard / 2}, owner, other)
	ctx := guardedContext(t)
	futures := make([]*client.PublishFuture, 0, total)
	for i := range total {
		future, err := c.PublishAsync(ctx, "orders", client.Message{Payload: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures = append(futures, future)
	}
	for i, future := range futures {
		if confirm, err := future.Wait(ctx); err != nil {
			t.Fatalf("publish %d: %+v %v; want it confirmed", i, confirm, err)
		}
	}
	if !refusedOnce.Load() {
		t.Fatal("the owner refused nothing: the test did not refuse in the pipeline")
	}
	checkStored(t, "after a refusal in the pipeline", owner, 0, total)
	if owner.Stats().Resumes == 0 {
		t.Fatal("the Client sent the owner no resume, yet the owner stored what it refused")
	}
}
