package cluster

import (
	"context"
	"testing"

	"github.com/lni/vfs"
)

// A node whose data directory was lost rejoins as a new Raft replica: a
// live node replaces its old replica id everywhere, it starts joining, and
// it then follows the catalog and hosts its partitions' coordination
// shards again, under the new id.
func TestWipedNodeRejoinsAsANewReplica(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	shardID := declareOwned(t, cluster, "kept")
	oldReplicaID := cluster.node("node3").ReplicaID()

	// node3 loses everything.
	cluster.stop("node3")
	cluster.fs["node3"] = vfs.NewStrictMem()
	replacement := NewReplicaID()
	replaceCtx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	if err := cluster.node("node1").ReplaceReplica(replaceCtx, "node3", replacement); err != nil {
		t.Fatalf("ReplaceReplica: %v", err)
	}
	// A second call is a no-op: the catalog already names the new id.
	if err := cluster.node("node2").ReplaceReplica(replaceCtx, "node3", replacement); err != nil {
		t.Fatalf("second ReplaceReplica: %v", err)
	}
	initialized, recorded, err := cluster.node("node2").CatalogMember("node3")
	if err != nil || !initialized || recorded != replacement {
		t.Fatalf("catalog member node3 = %v, %d, %v; want the new id %d", initialized, recorded, err, replacement)
	}

	node3 := cluster.startJoining("node3", replacement)
	if err := node3.WaitReady(replaceCtx); err != nil {
		t.Fatalf("node3 not ready after rejoining: %v", err)
	}
	if node3.ReplicaID() != replacement || node3.ReplicaID() == oldReplicaID {
		t.Fatalf("node3 runs as replica %d", node3.ReplicaID())
	}
	waitFor(t, "node3 hosting the partition's coordination shard with its state", func() bool {
		view, found := node3.Partition(shardID)
		return found && view.State.Epoch >= 1 && view.Leader != ""
	})
	members, err := cluster.node("node1").shardMembers(replaceCtx, shardID)
	if err != nil {
		t.Fatal(err)
	}
	if _, old := members[oldReplicaID]; old || len(members) != 3 {
		t.Fatalf("coordination members = %v; want three, without the old id %d", members, oldReplicaID)
	}
	if _, found := members[replacement]; !found {
		t.Fatalf("coordination members = %v; want the new id %d", members, replacement)
	}
	// A queue declared after the rejoin names node3 by its new id, as an
	// initial member.
	later, _, err := node3.Declare(replaceCtx, QueueDecl{Name: "later", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := later.Partitions[0].Members["node3"]; got != replacement {
		t.Fatalf("a new partition records node3 as %d, want %d", got, replacement)
	}
	if _, err := node3.WaitOwner(replaceCtx, "later", 0); err != nil {
		t.Fatalf("the new queue found no owner: %v", err)
	}
}
