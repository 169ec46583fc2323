package cluster

import (
	"context"
	"testing"

	"github.com/lni/vfs"
)

// A node that restarts after another node's replica was replaced starts
// its coordination shards again. Its replica's bootstrap record names the
// members the shard began with; the catalog now names the replacement's
// new id, so starting with the catalog's list is refused by dragonboat
// ("inconsistent node list") at every retry, and the shard stays down on
// that node: with the replaced node still catching up, the shard then
// lacks a quorum. A restart goes by the record.
func TestANodeRestartsItsShardsAfterAnotherWasReplaced(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	shardID := declareOwned(t, cluster, "kept")

	cluster.stop("node3") // node3 loses everything and rejoins under a new id
	cluster.fs["node3"] = vfs.NewStrictMem()
	replacement := NewReplicaID()
	replaceCtx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	if err := cluster.node("node1").ReplaceReplica(replaceCtx, "node3", replacement); err != nil {
		t.Fatalf("ReplaceReplica: %v", err)
	}
	node3 := cluster.startJoining("node3", replacement)
	waitFor(t, "node3 hosting the coordination shard under its new id", func() bool {
		view, found := node3.Partition(shardID)
		return found && view.State.Epoch >= 1 && view.Leader != ""
	})

	for _, id := range []string{"node2", "node1"} { // nodes whose own replica never changed
		cluster.stop(id)
		restarted := cluster.start(id)
		waitFor(t, id+" hosting the coordination shard again after its restart", func() bool {
			view, found := restarted.Partition(shardID)
			return found && view.State.Epoch >= 1 && view.Leader != ""
		})
	}
}

// declareOwned declares a three-replica queue through node1 and waits for
// its owner; it returns the coordination shard of its partition.
func declareOwned(t *testing.T, cluster *testCluster, name string) uint64 {
	t.Helper()
	ctx := testContext(t)
	queue, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: name, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.node("node1").WaitOwner(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	return queue.Partitions[0].ShardID
}

// startJoining starts node id as the new Raft replica replacement, joining
// (its data directory was lost and a peer replaced its replica).
func (c *testCluster) startJoining(id string, replacement uint64) *Node {
	c.t.Helper()
	options := c.startOptions(id)
	options.ReplicaID, options.Join = replacement, true
	node, err := Start(c.config, id, options)
	if err != nil {
		c.t.Fatalf("restart %s joining: %v", id, err)
	}
	c.nodes[id] = node
	return node
}
