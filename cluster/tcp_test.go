package cluster

import (
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
