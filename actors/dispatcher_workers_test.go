package actors

import (
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

// dispatcherWorkers counts the keep-alive workers alive in the process.
func dispatcherWorkers() int {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "(*KeepAliveDispatcher).work")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// The broker's actors run on keep-alive workers, and none is left once
// the broker is closed (stopped actors retire theirs; idle ones time out).
func TestBrokerCloseLeavesNoDispatcherWorkers(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("workers", wire.ModeBuffered, wire.QueueOptions{})
	subscription := c.subscribe("workers", 16)
	c.mustConfirm("workers", wire.BoundaryWritten, "a", "b", "c")
	c.deliveries(subscription, 3)
	if dispatcherWorkers() == 0 {
		t.Fatal("no keep-alive worker runs while the broker serves")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every keep-alive worker to exit", func() bool { return dispatcherWorkers() == 0 })
}

// A lazy summary is formatted on read, costs no allocation to publish, and
// a text summary replaces it.
func TestLazySummary(t *testing.T) {
	entry := &runtime.Entry{}
	entry.SetSummaryValues(&partitionSummary, int64(partitionOpen), 2, 3, 0, 1)
	if got := entry.Summary(); got != "open buffered tickets=3 busy=0 subscriptions=1" {
		t.Fatalf("summary %q", got)
	}
	allocations := testing.AllocsPerRun(100, func() {
		entry.SetSummaryValues(&partitionSummary, int64(partitionOpen), 1, 7, 0, 1)
	})
	if allocations != 0 {
		t.Fatalf("publishing a lazy summary allocated %.1f times", allocations)
	}
	if got := entry.Summary(); got != "open durable tickets=7 busy=0 subscriptions=1" {
		t.Fatalf("summary %q", got)
	}
	entry.SetSummary("fenced")
	if got := entry.Summary(); got != "fenced" {
		t.Fatalf("summary after SetSummary %q", got)
	}
	entry.SetSummaryValues(&syncSchedulerSummary, int64(100*time.Millisecond), 4, 2, 0)
	if got := entry.Summary(); !strings.HasPrefix(got, "interval 100ms, 4 ticks; 2 explicit syncs") {
		t.Fatalf("sync summary %q", got)
	}
}
