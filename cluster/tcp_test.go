package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
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

// A node on dragonboat's own TCP transport (as a node of an older version
// runs) and nodes on rafttransport form one cluster, in plain text and
// over mutual TLS: a declaration made through the old node reaches all,
// and with either new node stopped the other two still agree, so
// messages flow both ways between the two transports.
func TestRaftTransportsInteroperate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts on loopback ports")
	}
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			var options []clusterOption
			if secure {
				options = append(options, withNodeTLS(t, tlstest.NewCA(t, t.TempDir(), "cluster CA")))
			}
			cluster := newTCPCluster(t, 3, options...)
			cluster.builtin = map[string]bool{"node3": true}
			cluster.startAll()
			cluster.waitReady(testTimeout)
			ctx := testContext(t)
			if _, _, err := cluster.node("node3").Declare(ctx, QueueDecl{Name: "mixed"}); err != nil {
				t.Fatalf("declare through the node on the built-in transport: %v", err)
			}
			for _, node := range cluster.running() {
				if _, err := node.Lookup(ctx, "mixed"); err != nil {
					t.Fatalf("%s: %v", node.ID(), err)
				}
			}
			for _, stopped := range []string{"node1", "node2"} {
				cluster.stop(stopped)
				queue := "without-" + stopped
				if _, _, err := cluster.node("node3").Declare(ctx, QueueDecl{Name: queue}); err != nil {
					t.Fatalf("declare with %s stopped: %v", stopped, err)
				}
				for _, node := range cluster.running() {
					if _, err := node.Lookup(ctx, queue); err != nil {
						t.Fatalf("%s with %s stopped: %v", node.ID(), stopped, err)
					}
				}
				cluster.start(stopped)
				cluster.waitReady(testTimeout)
			}
		})
	}
}

// After a node restarted, the others reach it at once. node3 leads every
// shard, so node1 sends nothing to node2 while node2 is down and
// restarts; then node3 stops and node1 campaigns in every shard: none of
// its Raft streams to the restarted node2 may fail. (dragonboat's own
// transport keeps a connection per stream lane until a write to it
// fails: the lanes that sat idle while node2 restarted fail at their
// first use, and each failure drops every message to that live node for
// 250 ms to 1 s, which is what made elections after a failover slow.)
func TestARestartedNodeIsReachedWithoutAFailedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts on loopback ports")
	}
	cluster := newTCPCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	queue, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "lanes"})
	if err != nil {
		t.Fatal(err)
	}
	shards := []uint64{CatalogShardID, queue.Partitions[0].ShardID}
	ledByNode3 := func(node *Node) bool {
		for _, shard := range node.Status().Shards {
			if slices.Contains(shards, shard.ShardID) && shard.Leader != "node3" {
				return false
			}
		}
		return len(node.Status().Shards) == len(shards)
	}
	// The owner's node takes its coordination shard's leadership back
	// now and then; node3 asks for it again until all agree.
	leadFromNode3 := func(node *Node) bool {
		for _, shardID := range shards {
			_ = cluster.node("node3").TransferLeadership(shardID, "node3")
		}
		return ledByNode3(node)
	}
	waitFor(t, "node3 to lead every shard", func() bool { return leadFromNode3(cluster.node("node1")) })

	cluster.stop("node2")
	restarted := cluster.start("node2")
	waitFor(t, "the restarted node2 to follow node3 in every shard", func() bool {
		return leadFromNode3(restarted) && ledByNode3(cluster.node("node1"))
	})
	node2Raft := cluster.config.Nodes[1].RaftAddress
	failuresTo := func(id string) uint64 {
		for _, node := range cluster.node(id).Status().Nodes {
			if node.RaftAddress == node2Raft {
				return node.RaftConnectionFailures
			}
		}
		t.Fatalf("%s does not list node2", id)
		return 0
	}
	before := failuresTo("node1")

	cluster.stop("node3")
	waitFor(t, "node1 and node2 to elect a leader in every shard", func() bool {
		for _, shard := range cluster.node("node1").Status().Shards {
			if shard.Leader == "" || shard.Leader == "node3" {
				return false
			}
		}
		return true
	})
	if after := failuresTo("node1"); after != before {
		t.Fatalf("node1's Raft streams to the restarted node2 failed %d times while node2 was up", after-before)
	}
}
