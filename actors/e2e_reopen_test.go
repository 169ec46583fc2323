package actors

// Reopening a fenced or failed queue without restarting the node, and the
// texts that tell clients about it.

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// A queue fenced by a failed write is reopened on request: the log's
// recovery runs (the refused publish is cut away), every confirmed message
// is still there, and the queue serves again; other queues never noticed.
// The refusal names the storage error once and the action that recovers.
func TestReopenRecoversAFencedQueue(t *testing.T) {
	mem := vfs.NewMem()
	b := startBroker(t, func(config *Config) {
		config.FS = mem
		config.DataDir = "/data"
	})
	c := connect(t, b)
	c.mustDeclare("fragile", wire.ModeDurable, wire.QueueOptions{})
	c.mustDeclare("steady", wire.ModeDurable, wire.QueueOptions{})
	c.mustConfirm("fragile", wire.BoundaryDurable, "kept-1", "kept-2")
	sub := c.subscribe("steady", 8)

	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite, Pattern: "/data/queues/fragile/0/log/*", Err: syscall.EIO})
	var refusal outcome
	for _, out := range c.awaitOutcomes(c.publish("fragile", "refused")) {
		refusal = out
	}
	if refusal.confirmed || refusal.code != wire.CodeFenced {
		t.Fatalf("publish on the failing disk: %+v", refusal)
	}
	checkFenceText(t, refusal.message, "fragile", syscall.EIO.Error())
	info := c.info("fragile")
	if !info.Fenced {
		t.Fatalf("not fenced: %+v", info)
	}
	if err := b.ReopenQueue("steady"); !errors.Is(err, ErrQueueNotFenced) {
		t.Fatalf("reopen of a serving queue: %v", err)
	}
	if err := b.ReopenQueue("nowhere"); !errors.Is(err, ErrUnknownQueue) {
		t.Fatalf("reopen of an unknown queue: %v", err)
	}

	mem.ClearFaults()
	if err := b.ReopenQueue("fragile"); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if info := c.info("fragile"); info.Fenced || info.FenceError != "" {
		t.Fatalf("still fenced after the reopen: %+v", info)
	}
	if health := b.Health(); !health.OK {
		t.Fatalf("health after the reopen: %+v", health)
	}
	// The refusal fenced the queue on this connection: resume it first
	// (docs/protocol.md 4.3, "Order across a refusal").
	c.send(&wire.ResumePublishing{Queue: "fragile"})
	c.mustConfirm("fragile", wire.BoundaryDurable, "after-reopen")
	got := drain(t, c, "fragile")
	for _, payload := range []string{"kept-1", "kept-2", "after-reopen"} {
		if _, ok := got[payload]; !ok {
			t.Fatalf("%s missing after the reopen (have %v)", payload, keys(got))
		}
	}
	if _, ok := got["refused"]; ok {
		t.Fatal("the refused publish came back after the reopen")
	}
	c.mustConfirm("steady", wire.BoundaryDurable, "undisturbed")
	if d := c.nextDeliver(sub); string(d[0].Payload) != "undisturbed" {
		t.Fatalf("the other queue's subscription got %+v", d)
	}
}

// checkFenceText wants a fence refusal that says the queue is fenced after
// a storage failure, names cause exactly once, and names the reopen.
func checkFenceText(t *testing.T, message, queueName, cause string) {
	t.Helper()
	if !strings.Contains(message, "fenced after a storage failure") {
		t.Fatalf("refusal does not say the queue is fenced: %q", message)
	}
	if n := strings.Count(message, cause); n != 1 {
		t.Fatalf("refusal names the cause %q %d times: %q", cause, n, message)
	}
	for _, said := range []string{"fenced after a storage failure", "storage failure", "reopen the queue"} {
		if n := strings.Count(message, said); n > 1 {
			t.Fatalf("refusal says %q %d times: %q", said, n, message)
		}
	}
	if strings.Contains(message, "latched") || strings.Contains(message, "reopen to recover") {
		t.Fatalf("refusal repeats the storage layer's own words: %q", message)
	}
	if !strings.Contains(message, "fibrilctl reopen "+queueName) || !strings.Contains(message, "/api/queues/"+queueName+"/reopen") {
		t.Fatalf("refusal does not name the reopen: %q", message)
	}
}

// A reopened queue takes no latch report but its own log's: the report the
// old log sends as it latches may reach the partition after the reopen
// stopped that log (it overtakes nothing: the stop's termination notice
// does), and it fenced the reopened queue again with the cause the reopen
// had just recovered from.
func TestReopenedQueueIgnoresTheOldLogsLatch(t *testing.T) {
	mem := vfs.NewMem()
	b := startBroker(t, func(config *Config) {
		config.FS = mem
		config.DataDir = "/data"
	})
	c := connect(t, b)
	c.mustDeclare("fragile", wire.ModeDurable, wire.QueueOptions{})
	c.mustConfirm("fragile", wire.BoundaryDurable, "kept")
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite, Pattern: "/data/queues/fragile/0/log/*", Err: syscall.EIO})
	for _, out := range c.awaitOutcomes(c.publish("fragile", "refused")) {
		if out.confirmed || out.code != wire.CodeFenced {
			t.Fatalf("publish on the failing disk: %+v", out)
		}
	}
	mem.ClearFaults()
	if err := b.ReopenQueue("fragile"); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	route, ok := b.core.directory.lookup("fragile")
	if !ok {
		t.Fatal("no route to the reopened queue")
	}
	// The report of a log the partition no longer runs; the info request
	// after it comes from the same sender, so it is handled after it.
	b.core.system.Root.Send(route.pid, logLatched{handle: new(logHandle),
		err: fmt.Errorf("log latched: %w", syscall.EIO)})
	if info, _ := b.QueueInfo("fragile"); info.Fenced || info.FenceError != "" {
		t.Fatalf("the old log's latch fenced the reopened queue: %+v", info)
	}
	c.send(&wire.ResumePublishing{Queue: "fragile"}) // the refusal fenced the queue on this connection
	c.mustConfirm("fragile", wire.BoundaryDurable, "after")
}

// A partition that spent its restart budget is stopped and its queue
// failed; a reopen spawns it again and every confirmed message is back.
func TestReopenRevivesAQueueThatSpentItsRestartBudget(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("flaky", wire.ModeDurable, wire.QueueOptions{})
	c.mustConfirm("flaky", wire.BoundaryDurable, "survives")
	path := "node/queues/flaky/0"
	for i := 0; i <= partitionRestartsMax; i++ {
		waitFor(t, "the partition to serve", func() bool {
			info, ok := b.QueueInfo("flaky")
			return ok && !info.Fenced
		})
		if err := b.InjectPanic(path, fmt.Sprintf("failure %d", i)); err != nil {
			t.Fatal(err)
		}
		if i < partitionRestartsMax {
			waitForActor(t, b, path, func(info runtime.ActorInfo) bool { return info.Restarts == uint64(i+1) })
		}
	}
	waitFor(t, "the queue to fail", func() bool {
		route, ok := b.core.directory.lookup("flaky")
		return ok && route.failure.failed()
	})
	route, _ := b.core.directory.lookup("flaky")
	if !strings.Contains(route.failure.message, "fibrilctl reopen flaky") {
		t.Fatalf("the failure does not name the reopen: %q", route.failure.message)
	}
	if err := b.ReopenQueue("flaky"); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	c.mustConfirm("flaky", wire.BoundaryDurable, "after")
	got := drain(t, c, "flaky")
	if _, ok := got["survives"]; !ok {
		t.Fatalf("confirmed message lost (have %v)", keys(got))
	}
}

// storageCause keeps one copy of each cause and drops what the fence
// message already says.
func TestStorageCauseSaysEachCauseOnce(t *testing.T) {
	cases := []struct{ in, want string }{
		{"queue: fenced after a storage failure: log: latched after a storage failure; reopen to recover: write x.log: input/output error: write x.log: input/output error",
			"write x.log: input/output error"},
		{"log latched: sync d: no space left on device", "sync d: no space left on device"},
		{"a: b: a: b: c", "a: b: c"},
		{"open: log: index contradicts the log", "open: log: index contradicts the log"},
	}
	for _, tc := range cases {
		if got := storageCause(errors.New(tc.in)); got != tc.want {
			t.Errorf("storageCause(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
