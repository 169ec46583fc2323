package actors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// A panicking partition restarts by reopening its queue: what it owed is
// answered, held deliveries come back marked redelivered with the attempt
// counted, the sessions get an error frame, and the queue keeps serving.
func TestPartitionPanicRestartsAndReopens(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("fragile", wire.ModeDurable, wire.QueueOptions{})
	c.mustConfirm("fragile", wire.BoundaryDurable, "a", "b")
	sub := c.subscribe("fragile", 2)
	held := c.deliveries(sub, 2)

	if err := b.InjectPanic("node/queues/fragile/0", "test"); err != nil {
		t.Fatal(err)
	}
	notice := c.waitFor("restart notice", isErrorCode(wire.CodeInternal)).(*wire.ErrorFrame)
	if notice.RequestID != 0 || !strings.Contains(notice.Message, "restarted") {
		t.Fatalf("notice %+v", notice)
	}
	again := c.deliveries(sub, 2)
	for i, d := range again {
		if !d.Redelivered || d.Attempt != 2 || d.DeliveryTag == held[i].DeliveryTag {
			t.Fatalf("after restart: %+v (before: %+v)", d, held[i])
		}
	}
	// The old tags are stale; the new ones settle.
	c.ack(sub, held[0].DeliveryTag)
	c.waitFor("stale tag", isErrorCode(wire.CodeUnknownDeliveryTag))
	c.ack(sub, again[0].DeliveryTag, again[1].DeliveryTag)
	c.mustConfirm("fragile", wire.BoundaryDurable, "after")
	if d := c.nextDeliver(sub)[0]; string(d.Payload) != "after" {
		t.Fatalf("delivery after restart %+v", d)
	}
	info, ok := b.Registry().Lookup("node/queues/fragile/0")
	if !ok || info.Restarts != 1 || !strings.HasPrefix(info.Summary, "open") {
		t.Fatalf("registry after restart: %+v", info)
	}
	if b.Health().Restarts != 1 {
		t.Fatalf("health restarts %d", b.Health().Restarts)
	}
}

// A partition that keeps failing is stopped and reported, and every other
// queue keeps serving.
func TestPartitionPastRestartBudgetIsReportedFailed(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("doomed", wire.ModeBuffered, wire.QueueOptions{})
	for i := 0; i <= partitionRestartsMax; i++ {
		waitForActor(t, b, "node/queues/doomed/0", func(info runtime.ActorInfo) bool {
			return strings.HasPrefix(info.Summary, "open") && info.Restarts == uint64(i)
		})
		if err := b.InjectPanic("node/queues/doomed/0", "again"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the partition to stop", func() bool {
		_, ok := b.Registry().Lookup("node/queues/doomed/0")
		return !ok
	})
	waitFor(t, "the queue reported failed", func() bool {
		health := b.Health()
		return !health.OK && len(health.Queues) == 1 && strings.Contains(health.Queues[0].Error, "repeated internal failures")
	})
	for _, out := range c.awaitOutcomes(c.publish("doomed", "x")) {
		if out.confirmed || out.code != wire.CodeFenced || !strings.Contains(out.message, "repeated") {
			t.Fatalf("publish to a failed queue: %+v", out)
		}
	}
	checkAnotherSessionWorks(t, b)
}

// A failed fsync latches the log: the queue is fenced with the reason,
// health and metrics report it, and other queues keep serving.
func TestLatchedLogFencesOnlyItsQueue(t *testing.T) {
	mem := vfs.NewMem()
	b := startBroker(t, func(config *Config) {
		config.FS = mem
		config.DataDir = "/data"
	})
	c := connect(t, b)
	c.mustDeclare("bad", wire.ModeDurable, wire.QueueOptions{})
	c.mustDeclare("good", wire.ModeDurable, wire.QueueOptions{})
	c.mustConfirm("bad", wire.BoundaryDurable, "before")
	// Only the segments fail: a disk that refuses the cut file too stops the node.
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "/data/queues/bad/0/log/*.log", Sticky: true})

	for _, out := range c.awaitOutcomes(c.publish("bad", "lost-write")) {
		if out.confirmed || out.code != wire.CodeFenced || !strings.Contains(out.message, "fenced") {
			t.Fatalf("publish on a latched log: %+v", out)
		}
	}
	for _, out := range c.awaitOutcomes(c.publish("bad", "after-latch")) {
		if out.confirmed || out.code != wire.CodeFenced {
			t.Fatalf("publish on a fenced queue: %+v", out)
		}
	}
	c.mustConfirm("good", wire.BoundaryDurable, "unaffected")
	info := c.info("bad")
	if !info.Fenced || info.FenceError == "" {
		t.Fatalf("info of a fenced queue %+v", info)
	}
	health := b.Health()
	if health.OK || len(health.Queues) != 1 || health.Queues[0].Name != "bad" {
		t.Fatalf("health %+v", health)
	}
	var metrics bytes.Buffer
	b.Metrics().WritePrometheus(&metrics)
	for _, want := range []string{`fibril_log_latched{queue="bad"} 1`, `fibril_fenced_queues 1`, `fibril_latched_logs 1`} {
		if !strings.Contains(metrics.String(), want) {
			t.Fatalf("metrics lack %s:\n%s", want, metrics.String())
		}
	}
	sub := c.id()
	c.send(&wire.Subscribe{RequestID: sub, Queue: "bad"})
	if e, ok := c.reply(sub).(*wire.ErrorFrame); !ok || e.Code != wire.CodeFenced {
		t.Fatalf("subscribe to a fenced queue: %+v", e)
	}
	checkAnotherSessionWorks(t, b)
}

// A panicking session is stopped: its client gets an error and a closed
// connection, what it held is released, and other sessions keep working.
func TestSessionPanicClosesOnlyItsConnection(t *testing.T) {
	b := startBroker(t, nil)
	victim := connect(t, b)
	victim.mustDeclare("shared", wire.ModeBuffered, wire.QueueOptions{})
	victim.mustConfirm("shared", wire.BoundaryWritten, "held")
	sub := victim.subscribe("shared", 1)
	victim.nextDeliver(sub)
	var path string
	for _, info := range b.Registry().Snapshot() {
		if info.Kind == "session" {
			path = info.Path
		}
	}
	if err := b.InjectPanic(path, "test"); err != nil {
		t.Fatal(err)
	}
	errs := victim.expectClosed()
	if len(errs) == 0 {
		t.Fatal("the client of a failed session saw no error")
	}
	other := connect(t, b)
	otherSub := other.subscribe("shared", 1)
	if d := other.nextDeliver(otherSub)[0]; string(d.Payload) != "held" || !d.Redelivered {
		t.Fatalf("released delivery %+v", d)
	}
	waitFor(t, "the failed session to leave the registry", func() bool {
		_, ok := b.Registry().Lookup(path)
		return !ok
	})
}

func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitForActor(t *testing.T, b *Broker, path string, done func(runtime.ActorInfo) bool) {
	t.Helper()
	waitFor(t, "actor "+path, func() bool {
		info, ok := b.Registry().Lookup(path)
		return ok && done(info)
	})
}

// A failure the node cannot contain (here: the queues directory is not a
// directory, so no queue can be listed) reaches the fatal guardian: Start
// fails with it and the fatal hook runs, which cmd/fibril turns into a
// non-zero exit.
func TestUncontainableFailureIsFatal(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, queuesDirName), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	hooked := make(chan error, 1)
	config := testConfig(t, dir)
	config.Fatal = func(err error) { hooked <- err }
	b, err := Start(config)
	if err == nil {
		if closeErr := b.Close(); closeErr != nil {
			t.Errorf("close: %v", closeErr)
		}
		t.Fatal("start succeeded on an unusable data directory")
	}
	if !errors.Is(err, runtime.ErrFatal) || !strings.Contains(err.Error(), "cannot list the queues") {
		t.Fatalf("start error %v", err)
	}
	select {
	case got := <-hooked:
		if !errors.Is(got, runtime.ErrFatal) {
			t.Fatalf("fatal hook got %v", got)
		}
	case <-time.After(testWait):
		t.Fatal("the fatal hook never ran")
	}
	// The data directory lock was released: a second start is not refused
	// as "in use".
	again, err := Start(config)
	if errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("lock kept after a failed start: %v", err)
	}
	if err == nil {
		if closeErr := again.Close(); closeErr != nil {
			t.Errorf("close: %v", closeErr)
		}
	}
}

func TestSecondNodeOnTheSameDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	startBrokerOn(t, testConfig(t, dir))
	if b, err := Start(testConfig(t, dir)); !errors.Is(err, ErrDataDirInUse) {
		if b != nil {
			if closeErr := b.Close(); closeErr != nil {
				t.Errorf("close: %v", closeErr)
			}
		}
		t.Fatalf("second start on %s: %v", dir, err)
	}
}
