package actors

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fibrilmq/fibril/cluster"
)

// A node that rejoined after losing its data restarts from its identity
// file as a joined replica, under its new id. Found by the cluster fault
// suite: the restart passed the initial members with join unset, which
// dragonboat refuses for a replica that joined, so the node never started
// again after a SIGKILL.
func TestIdentityFileKeepsJoined(t *testing.T) {
	dir := t.TempDir()
	config := &cluster.Config{Nodes: []cluster.NodeConfig{
		{ID: "node1", DataDir: filepath.Join(dir, "node1")},
		{ID: "node2", DataDir: filepath.Join(dir, "node2")},
	}}
	for _, joined := range []bool{false, true} {
		path := filepath.Join(dir, "node1", identityFileName)
		if err := writeIdentity(path, nodeIdentity{NodeID: "node1", ReplicaID: 77, Joined: joined}); err != nil {
			t.Fatal(err)
		}
		identity, err := PrepareClusterIdentity(context.Background(), config, "node1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if identity.ReplicaID != 77 || identity.Join != joined || identity.Decided != "identity file" {
			t.Fatalf("identity file with joined=%v: got %+v", joined, identity)
		}
	}
}
