package actors

// Mode changes of an existing queue on one node, under load, with the
// log's fsyncs held by a gate so the tests can tell a written-only record
// from a durable one: a publish admitted before a switch keeps its promise,
// one admitted after a switch to durable is neither confirmed nor delivered
// while the fsyncs are held, every confirm of a publish sent after the
// switch stands on the durable boundary, and the revision survives a
// restart.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// modeLoad publishes continuously and records, for every confirm, whether
// the publish was sent after the switch to durable was reported applied.
type modeLoad struct {
	t      *testing.T
	sdk    *client.Client
	name   string
	mu     sync.Mutex
	after  bool // set once the switch to durable was reported applied
	sent   int
	broken []string
	stop   chan struct{}
	done   sync.WaitGroup
}

func startModeLoad(t *testing.T, sdk *client.Client, name string) *modeLoad {
	l := &modeLoad{t: t, sdk: sdk, name: name, stop: make(chan struct{})}
	l.done.Add(1)
	go l.run()
	return l
}

func (l *modeLoad) run() {
	defer l.done.Done()
	ctx := context.Background()
	var waits sync.WaitGroup
	defer waits.Wait()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		l.mu.Lock()
		after := l.after
		l.sent++
		l.mu.Unlock()
		future, err := l.sdk.PublishAsync(ctx, l.name, client.Message{Payload: []byte("load")})
		if err != nil {
			l.note("publish: " + err.Error())
			return
		}
		waits.Add(1)
		go func() {
			defer waits.Done()
			confirm, err := future.Wait(ctx)
			if err != nil {
				l.note("confirm: " + err.Error())
				return
			}
			if after && confirm.Boundary != wire.BoundaryDurable {
				l.note("a publish sent after the switch to durable was confirmed " + confirm.Boundary.String())
			}
		}()
		time.Sleep(200 * time.Microsecond)
	}
}

func (l *modeLoad) switched() {
	l.mu.Lock()
	l.after = true
	l.mu.Unlock()
}

func (l *modeLoad) note(problem string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.broken) < 10 {
		l.broken = append(l.broken, problem)
	}
}

func (l *modeLoad) finish() {
	l.t.Helper()
	close(l.stop)
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, problem := range l.broken {
		l.t.Error(problem)
	}
	if l.sent < 10 {
		l.t.Errorf("the load sent only %d publishes", l.sent)
	}
}

// expectHeld fails when a confirm of futures or a delivery of payload
// arrives within a moment; other deliveries are acked.
func expectHeld(t *testing.T, what string, futures []*client.PublishFuture, deliveries <-chan *client.Delivery, payload string) {
	t.Helper()
	deadline := time.After(150 * time.Millisecond) // room for a wrong confirm or delivery to show
	for waiting := true; waiting; {
		select {
		case delivery := <-deliveries:
			if string(delivery.Payload) == payload {
				t.Fatalf("%s: delivered %q while the log's fsyncs are held", what, delivery.Payload)
			}
			_ = delivery.Ack()
		case <-deadline:
			waiting = false
		}
	}
	for _, future := range futures {
		select {
		case <-future.Done():
			confirm, err := future.Wait(context.Background())
			t.Fatalf("%s: confirmed (%v, %v) while the log's fsyncs are held", what, confirm.Boundary, err)
		default:
		}
	}
}

func publishFutures(t *testing.T, ctx context.Context, sdk *client.Client, name, payload string, count int) []*client.PublishFuture {
	t.Helper()
	var futures []*client.PublishFuture
	for range count {
		future, err := sdk.PublishAsync(ctx, name, client.Message{Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, future)
	}
	return futures
}

func waitConfirms(t *testing.T, ctx context.Context, what string, futures []*client.PublishFuture, boundary wire.Boundary) {
	t.Helper()
	for _, future := range futures {
		confirm, err := future.Wait(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if boundary != 0 && confirm.Boundary != boundary {
			t.Fatalf("%s: confirmed %v, want %v", what, confirm.Boundary, boundary)
		}
	}
}

// drainDeliveries acks what arrives until want payloads of kind came.
func drainDeliveries(t *testing.T, ctx context.Context, deliveries <-chan *client.Delivery, payload string, want int) {
	t.Helper()
	for seen := 0; seen < want; {
		select {
		case delivery := <-deliveries:
			if string(delivery.Payload) == payload {
				seen++
			}
			_ = delivery.Ack()
		case <-ctx.Done():
			t.Fatalf("%d of %d %q deliveries", seen, want, payload)
		}
	}
}

func TestModeChangeOnOneNodeUnderLoad(t *testing.T) {
	gate := newGateFS(vfs.OS)
	dir := t.TempDir()
	b := startModeBroker(t, dir, gate)
	ctx := testContext(t)
	sdk, err := client.Dial(ctx, client.Options{Addresses: []string{b.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	const name = "switching"
	if _, err := sdk.Declare(ctx, name, client.QueueConfig{Mode: client.ModeBuffered}); err != nil {
		t.Fatal(err)
	}
	consumer, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 100})
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan *client.Delivery, 1<<16)
	go func() {
		for delivery := range consumer.Deliveries() {
			deliveries <- delivery
		}
	}()

	// Buffered: with the fsyncs held, publishes are confirmed written.
	gate.hold(gateSyncs)
	before := publishFutures(t, ctx, sdk, name, "before", 20)
	waitConfirms(t, ctx, "buffered publish with fsyncs held", before, wire.BoundaryWritten)
	drainDeliveries(t, ctx, deliveries, "before", 20)

	// The switch to durable cannot apply while the fsyncs are held; what
	// is published after the request waits for it, confirm and delivery.
	load := startModeLoad(t, sdk, name)
	type answer struct {
		change client.ModeChange
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		change, err := sdk.ChangeMode(ctx, name, client.ModeDurable)
		answered <- answer{change, err}
	}()
	waitUntil(t, "the change is pending", func() bool {
		info, _ := b.QueueInfo(name)
		return info.ModeChange != nil && info.ModeChange.State == "pending" && info.DesiredMode == wire.ModeDurable
	})
	info, _ := b.QueueInfo(name)
	if info.Mode != wire.ModeBuffered || info.ModeChange.Revision != 1 || info.ModeChange.Reason == "" {
		t.Fatalf("info while pending: mode %v change %+v", info.Mode, info.ModeChange)
	}
	if direct, err := b.ChangeMode(name, queue.Buffered, 0); !errors.Is(err, ErrModeChangePending) {
		t.Fatalf("a change back while one is pending: %+v, %v", direct, err)
	}
	after := publishFutures(t, ctx, sdk, name, "after", 20)
	expectHeld(t, "publish after the change request", after, deliveries, "after")
	select {
	case a := <-answered:
		t.Fatalf("the change answered %+v, %v with the fsyncs held", a.change, a.err)
	default:
	}
	gate.release()
	a := <-answered
	if a.err != nil || a.change.Outcome != wire.ModeApplied || a.change.Revision != 1 || a.change.Applied != client.ModeDurable {
		t.Fatalf("change to durable: %+v, %v", a.change, a.err)
	}
	load.switched()
	waitConfirms(t, ctx, "publish after the change request", after, wire.BoundaryDurable)
	drainDeliveries(t, ctx, deliveries, "after", 20)

	// Durable now: with the fsyncs held, nothing new is confirmed or
	// delivered.
	gate.hold(gateSyncs)
	held := publishFutures(t, ctx, sdk, name, "held", 10)
	expectHeld(t, "publish under the applied durable mode", held, deliveries, "held")
	gate.release()
	waitConfirms(t, ctx, "durable publish", held, wire.BoundaryDurable)
	load.finish()

	// The same request again is a no-op naming the same revision (a
	// client whose answer was lost asks again).
	if again, err := sdk.ChangeMode(ctx, name, client.ModeDurable); err != nil || again.Outcome != wire.ModeUnchanged || again.Revision != 1 {
		t.Fatalf("the same change again: %+v, %v", again, err)
	}

	// Back to buffered: applied at once on a node whose log syncs, and
	// then confirms come at the written boundary while fsyncs are held.
	back, err := sdk.ChangeMode(ctx, name, client.ModeBuffered)
	if err != nil || back.Outcome != wire.ModeApplied || back.Revision != 2 {
		t.Fatalf("change to buffered: %+v, %v", back, err)
	}
	gate.hold(gateSyncs)
	weak := publishFutures(t, ctx, sdk, name, "weak", 10)
	waitConfirms(t, ctx, "buffered again", weak, wire.BoundaryWritten)
	gate.release()
	_ = consumer.Unsubscribe(ctx)
	_ = sdk.Close()

	// A restart comes back at the applied revision.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = startModeBroker(t, dir, gate)
	waitUntil(t, "the queue reopens", func() bool { _, ok := b.QueueInfo(name); return ok })
	info, _ = b.QueueInfo(name)
	if info.Mode != wire.ModeBuffered || info.ModeRevision != 2 || info.ModeChange != nil {
		t.Fatalf("after a restart: mode %v revision %d change %+v", info.Mode, info.ModeRevision, info.ModeChange)
	}
	// Declare still refuses another mode than the one in force (the one
	// first declared, buffered, is in force again; durable is refused).
	again, err := client.Dial(ctx, client.Options{Addresses: []string{b.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := again.Declare(ctx, name, client.QueueConfig{Mode: client.ModeDurable}); serverErrorCode(err) != wire.CodeModeConflict {
		t.Fatalf("a re-declare naming durable after the switch back: %v", err)
	}
	if reply, err := again.Declare(ctx, name, client.QueueConfig{KeepMode: true}); err != nil || reply.Mode != client.ModeBuffered {
		t.Fatalf("a re-declare keeping the mode: %+v, %v", reply, err)
	}
}

// startModeBroker starts a node on dir over fs; the test closes it (or its
// cleanup does, once).
func startModeBroker(t *testing.T, dir string, fs vfs.FS) *Broker {
	t.Helper()
	config := testConfig(t, dir)
	config.FS = fs
	b, err := Start(config)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// changeModeFrame sends change-mode and returns its answer.
func (c *testClient) changeModeFrame(name string, mode wire.Mode, waitMs uint32) *wire.ModeChanged {
	c.t.Helper()
	id := c.id()
	c.send(&wire.ChangeMode{RequestID: id, Queue: name, Mode: mode, WaitMs: waitMs})
	frame := c.reply(id)
	answer, ok := frame.(*wire.ModeChanged)
	if !ok {
		c.t.Fatalf("change-mode %s to %v: %+v", name, mode, frame)
	}
	return answer
}

// A power loss of everything written but not synced (background sync
// off, so a buffered queue's confirms are only written) after a switch to
// durable loses no message confirmed after the switch, and the queue comes
// back at the applied revision; after a switch back to buffered, every
// message confirmed durable before it survives.
func TestModeChangePowerLossKeepsWhatEachConfirmPromised(t *testing.T) {
	seed := testSeed(t)
	random := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	mem := vfs.NewMem()
	config := testConfig(t, "/data")
	config.FS, config.SyncInterval = mem, 0
	first := startBrokerOn(t, config)
	c := connect(t, first)
	c.mustDeclare("events", wire.ModeBuffered, wire.QueueOptions{})
	var weak, strong []string
	for i := range 10 + random.IntN(20) {
		weak = append(weak, fmt.Sprintf("weak-%d", i))
	}
	c.mustConfirm("events", wire.BoundaryWritten, weak...)
	if answer := c.changeModeFrame("events", wire.ModeDurable, 10_000); answer.Outcome != wire.ModeApplied || answer.Revision != 1 {
		t.Fatalf("change to durable: %+v", answer)
	}
	for batch := range 5 {
		var payloads []string
		for i := range 1 + random.IntN(20) {
			payloads = append(payloads, fmt.Sprintf("strong-%d-%d", batch, i))
		}
		c.mustConfirm("events", wire.BoundaryDurable, payloads...)
		strong = append(strong, payloads...)
	}
	c.publish("events", "in-flight")

	clone := mem.CrashClone(vfs.CrashOptions{TearLastWrite: true, Rand: random})
	// Background sync on again: a durable queue's acks apply at the next
	// sync, and the drain below waits for them.
	config.FS, config.SyncInterval = clone, DefaultConfig().SyncInterval
	second := startBrokerOn(t, config)
	c2 := connect(t, second)
	if info := c2.info("events"); info.Mode != wire.ModeDurable || info.ModeRevision != 1 {
		t.Fatalf("after the power loss: mode %v revision %d", info.Mode, info.ModeRevision)
	}
	got := drain(t, c2, "events")
	for _, payload := range strong {
		if _, ok := got[payload]; !ok {
			t.Fatalf("%s, confirmed durable after the switch, was lost in a power loss (%d messages left)", payload, len(got))
		}
	}
	for _, payload := range weak {
		if _, ok := got[payload]; !ok {
			t.Fatalf("%s, confirmed before the switch, is gone: the switch made it durable before it applied", payload)
		}
	}

	// Back to buffered: the durable confirms before it keep their promise.
	if answer := c2.changeModeFrame("events", wire.ModeBuffered, 10_000); answer.Outcome != wire.ModeApplied || answer.Revision != 2 {
		t.Fatalf("change to buffered: %+v", answer)
	}
	c2.mustConfirm("events", wire.BoundaryWritten, "buffered-again")
	clone = clone.CrashClone(vfs.CrashOptions{Rand: random})
	config.FS = clone
	third := startBrokerOn(t, config)
	c3 := connect(t, third)
	if info := c3.info("events"); info.Mode != wire.ModeBuffered || info.ModeRevision != 2 {
		t.Fatalf("after the second power loss: mode %v revision %d", info.Mode, info.ModeRevision)
	}
}
