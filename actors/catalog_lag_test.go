package actors

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	raftvfs "github.com/lni/vfs"
)

// syncGate holds every sync of a Raft filesystem while closed, the way a slow disk would: the node cannot save the entries it
// receives, so it applies nothing new, while its state machine stays
// readable (an apply held inside the state machine would hold its reads
// too).
type syncGate struct {
	mu      sync.Mutex
	closed  bool
	opened  chan struct{}
	waiting chan struct{} // closed at the first Sync held
	once    sync.Once
}

func newSyncGate() *syncGate {
	return &syncGate{opened: make(chan struct{}), waiting: make(chan struct{})}
}

func (g *syncGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
}

func (g *syncGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.opened)
	}
}

func (g *syncGate) pass() {
	g.mu.Lock()
	closed, opened := g.closed, g.opened
	g.mu.Unlock()
	if closed {
		g.once.Do(func() { close(g.waiting) })
		<-opened
	}
}

// MaybeError makes the gate an injector of the Raft filesystem
// (raftvfs.Wrap): it holds syncs, and fails nothing.
func (g *syncGate) MaybeError(op raftvfs.Op) error {
	if op == raftvfs.OpSync {
		g.pass()
	}
	return nil
}

// A list, an info and a delete through a node whose catalog replica has
// not applied a declare confirmed through another node yet see the
// queue: the list waits for a linearizable read of the catalog instead of
// answering from the lagging replica (it once named 7 of 15 queues); the
// info and the delete go through the catalog when the local replica
// misses the queue.
func TestListThroughALaggingNodeNamesAConfirmedDeclare(t *testing.T) {
	c := startBrokerCluster(t, 3)
	ctx := testContext(t)
	// node1 again, on a Raft filesystem whose syncs can be held.
	gate := newSyncGate()
	t.Cleanup(gate.open) // before the nodes stop (cleanups run last first)
	c.stop("node1")
	node, err := cluster.Start(c.config, "node1", cluster.StartOptions{Logger: c.logger,
		FS: raftvfs.Wrap(raftvfs.Default, gate)})
	if err != nil {
		t.Fatal(err)
	}
	c.members["node1"].node = node
	c.startBroker("node1")
	if err := node.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	declaring, lagging := c.dialSDK("node2"), c.dialSDK("node1")
	if _, err := lagging.ListQueues(ctx, ""); err != nil { // connected before node1 lags
		t.Fatal(err)
	}

	gate.close()
	if _, err := declaring.Declare(ctx, "fresh", client.QueueConfig{Mode: client.ModeDurable}); err != nil {
		t.Fatalf("declare through node2: %v", err)
	}
	select {
	case <-gate.waiting: // node1 cannot save what it receives
	case <-ctx.Done():
		t.Fatal("node1 never synced its Raft log")
	}
	if _, err := node.LookupLocal("fresh"); err == nil {
		t.Fatal("node1's replica applied the declare while its log could not sync; the test shows nothing")
	}
	// node1's disk comes back a moment after the list is asked: a list
	// answered from its replica before then misses the queue.
	time.AfterFunc(500*time.Millisecond, gate.open)
	listed, err := lagging.ListQueues(ctx, "")
	if err != nil {
		t.Fatalf("list through node1: %v", err)
	}
	if !slices.ContainsFunc(listed, func(info client.QueueInfo) bool { return info.Name == "fresh" }) {
		t.Fatalf("list through node1 names %d queues, without the one declared through node2", len(listed))
	}
	if _, err := infoOnceOwned(ctx, lagging, "fresh"); err != nil {
		t.Fatalf("info through node1: %v", err)
	}
	if _, err := lagging.DeleteQueue(ctx, "fresh"); err != nil {
		t.Fatalf("delete through node1: %v", err)
	}
}
