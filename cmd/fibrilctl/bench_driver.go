package main

// sdkDriver runs the benchmark over the Go SDK: it implements bench.Driver
// with two Clients, one that declares, publishes and deletes, and one that
// consumes, so publishes and deliveries travel on separate connections as
// they do between separate producer and consumer processes.
//
// Confirms. Each publish carries its own callback (client.WithCallback),
// called once with its outcome, so the benchmark's sequence number and
// callback travel with the publish itself: there is no table keyed by the
// SDK's publish numbers, and no race with a confirm that arrives before
// PublishAsync returns. The boundary passed on is the one the node's
// confirm names (Confirm.Boundary), never the one the mode implies.
//
// Payloads. The SDK keeps a message's payload until its confirm (it may
// send it again after a redirect) while the runner reuses its buffer at
// once, so Publish copies the payload into a buffer from a pool; the
// buffer goes back to the pool once the publish is confirmed, and is left
// to the collector after a failure, whose frame may still be in flight.
//
// Deliveries. A subscription handler passes each delivery to the runner's
// callback and acks it afterwards. The stop function unsubscribes and then
// closes a gate that the handler passes under the same mutex, so no
// callback runs once it has returned.

import (
	"context"
	"fmt"
	"sync"

	"github.com/fibrilmq/fibril/bench"
	"github.com/fibrilmq/fibril/client"
)

// benchMaxPendingPublishes bounds the publishing Client's window. It is
// above bench.PacedWindow, so the benchmark's own window is what limits a
// run, not the SDK's.
const benchMaxPendingPublishes = 2 * bench.PacedWindow

type sdkDriver struct {
	publisher *client.Client
	consumer  *client.Client

	dedup bool // queues deduplicate; the publisher is idempotent

	buffers    sync.Pool
	closedOnce sync.Once
}

// dialBenchDriver connects the two Clients. With dedup, the queues it
// declares deduplicate and every publish carries a producer pair.
func dialBenchDriver(ctx context.Context, shared connection, dedup bool) (*sdkDriver, error) {
	publisher, err := shared.dial(ctx, client.Options{MaxPendingPublishes: benchMaxPendingPublishes, Idempotent: dedup})
	if err != nil {
		return nil, err
	}
	consumer, err := shared.dial(ctx, client.Options{})
	if err != nil {
		publisher.Close()
		return nil, err
	}
	return &sdkDriver{publisher: publisher, consumer: consumer, dedup: dedup}, nil
}

// Close closes both Clients; publishes still pending fail with ErrClosed
// (their callbacks run before Close returns).
func (d *sdkDriver) Close() {
	d.closedOnce.Do(func() {
		d.consumer.Close()
		d.publisher.Close()
	})
}

// Declare creates the queue in the mode and checks the mode the node reports.
func (d *sdkDriver) Declare(ctx context.Context, queue string, mode bench.Mode) error {
	want, err := sdkMode(mode)
	if err != nil {
		return err
	}
	result, err := d.publisher.Declare(ctx, queue, client.QueueConfig{Mode: want, Dedup: d.dedup})
	if err != nil {
		return err
	}
	if result.Mode != want {
		return fmt.Errorf("declared %s but the node reports mode %s", mode, result.Mode)
	}
	return nil
}

func sdkMode(mode bench.Mode) (client.Mode, error) {
	switch mode {
	case bench.ModeDurable:
		return client.ModeDurable, nil
	case bench.ModeBuffered:
		return client.ModeBuffered, nil
	}
	return 0, fmt.Errorf("%w: %q", bench.ErrUnknownMode, mode)
}

// benchBoundary names the SDK's boundary as the benchmark does. A boundary
// neither side knows keeps its number in the name, so the ledger counts it
// as a mismatch instead of it being mistaken for a known one.
func benchBoundary(boundary client.Boundary) bench.Boundary {
	switch boundary {
	case client.BoundaryWritten:
		return bench.BoundaryWritten
	case client.BoundaryDurable:
		return bench.BoundaryDurable
	}
	return bench.Boundary(boundary.String())
}

// Publish copies payload and publishes it without waiting for the
// confirm; the publish's callback hands the outcome to onConfirm.
func (d *sdkDriver) Publish(ctx context.Context, queue string, seq uint64, payload []byte, onConfirm bench.ConfirmFunc) error {
	buffer := d.takeBuffer(len(payload))
	copy(*buffer, payload)
	_, err := d.publisher.PublishAsync(ctx, queue, client.Message{Payload: *buffer},
		client.WithCallback(func(confirm client.Confirm) { d.complete(seq, buffer, onConfirm, confirm) }))
	return err
}

// complete passes an outcome on. The buffer goes back to the pool only
// after a confirm: after a failure the frame may still be in flight.
func (d *sdkDriver) complete(seq uint64, buffer *[]byte, onConfirm bench.ConfirmFunc, confirm client.Confirm) {
	if confirm.Err != nil {
		onConfirm(seq, "", confirm.Err)
		return
	}
	d.buffers.Put(buffer)
	onConfirm(seq, benchBoundary(confirm.Boundary), nil)
}

// takeBuffer returns a pooled buffer of exactly size bytes.
func (d *sdkDriver) takeBuffer(size int) *[]byte {
	if pooled, ok := d.buffers.Get().(*[]byte); ok && cap(*pooled) >= size {
		*pooled = (*pooled)[:size]
		return pooled
	}
	buffer := make([]byte, size)
	return &buffer
}

// Subscribe consumes the queue, acking each delivery after onDeliver.
func (d *sdkDriver) Subscribe(ctx context.Context, queue string, prefetch int, onDeliver bench.DeliverFunc) (bench.StopFunc, error) {
	var gate sync.Mutex
	stopped := false
	handler := func(delivery *client.Delivery) {
		gate.Lock()
		if !stopped {
			onDeliver(delivery.Payload, delivery.Redelivered)
		}
		gate.Unlock()
		_ = delivery.Ack() // fails only for a stale delivery, which the node hands out again
	}
	subscription, err := d.consumer.Subscribe(ctx, queue, client.SubscribeOptions{
		Prefetch: uint32(min(prefetch, 65535)), Handler: handler})
	if err != nil {
		return nil, err
	}
	stop := func(ctx context.Context) error {
		err := subscription.Unsubscribe(ctx)
		gate.Lock()
		stopped = true
		gate.Unlock()
		return err
	}
	return stop, nil
}

// Delete deletes the queue.
func (d *sdkDriver) Delete(ctx context.Context, queue string) error {
	_, err := d.publisher.DeleteQueue(ctx, queue)
	return err
}
