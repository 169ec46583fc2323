package cluster

import (
	"testing"
	"time"
)

// The same cluster over real loopback TCP ports with Raft logs on disk: a
// declaration made on one node is visible on all with the same owner, and
// a node restarted from its data dir catches up.
func TestLoopbackTCPCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts on loopback ports")
	}
	cluster := newTCPCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)

	queue, _, err := cluster.node("node3").Declare(ctx, QueueDecl{Name: "tcp", Mode: ModeDurable})
	if err != nil {
		t.Fatalf("declare: %v", err)
	}
	preferred := queue.Partitions[0].Replicas[0]
	for _, node := range cluster.running() {
		owner, err := node.WaitOwner(ctx, "tcp", 0)
		if err != nil || owner.NodeID != preferred {
			t.Fatalf("%s: owner %+v, %v; want %s", node.ID(), owner, err, preferred)
		}
	}

	cluster.stop("node2")
	if _, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "while-down"}); err != nil {
		t.Fatalf("declare with node2 down: %v", err)
	}
	restarted := cluster.start("node2")
	deadline := time.Now().Add(testTimeout)
	for {
		if _, err := restarted.LookupLocal("while-down"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("restarted node2 did not catch up from disk")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := restarted.Lookup(ctx, "tcp"); err != nil {
		t.Fatalf("restarted node2 lost queue tcp: %v", err)
	}
}
