package actors

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/wire"
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
		identity, err := PrepareClusterIdentity(context.Background(), config, "node1", IdentityOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if identity.ReplicaID != 77 || identity.Join != joined || identity.Decided != "identity file" {
			t.Fatalf("identity file with joined=%v: got %+v", joined, identity)
		}
	}
}

// Identity files written before the pending mark existed load as they
// did; a pending one is not taken as decided: the node asks its peers
// again under the recorded id (here no peer answers, so it does not start).
func TestIdentityFileFormats(t *testing.T) {
	dir := t.TempDir()
	config := &cluster.Config{Nodes: []cluster.NodeConfig{
		{ID: "node1", DataDir: filepath.Join(dir, "node1"), PeerAddress: "127.0.0.1:0"},
		{ID: "node2", DataDir: filepath.Join(dir, "node2"), PeerAddress: "127.0.0.1:1"},
	}, Cluster: cluster.ClusterSettings{Secret: "test-cluster-secret"}}
	path := filepath.Join(dir, "node1", identityFileName)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"node_id":"node1","replica_id":77,"joined":true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	identity, err := PrepareClusterIdentity(context.Background(), config, "node1", IdentityOptions{})
	if err != nil || identity.ReplicaID != 77 || !identity.Join {
		t.Fatalf("an identity file without the pending mark: %+v, %v", identity, err)
	}
	if err := writeIdentity(path, nodeIdentity{NodeID: "node1", ReplicaID: 88, Joined: true, Pending: true}); err != nil {
		t.Fatal(err)
	}
	stored, found, err := readIdentity(path)
	if err != nil || !found || !stored.Pending || stored.ReplicaID != 88 {
		t.Fatalf("pending identity read back as %+v, %v, %v", stored, found, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if identity, err := PrepareClusterIdentity(ctx, config, "node1", IdentityOptions{}); !errors.Is(err, ErrIdentityUndecided) ||
		!strings.Contains(err.Error(), "88") {
		t.Fatalf("a pending identity without peers decided %+v, %v", identity, err)
	}
}

// A wiped node whose first replacement is interrupted half-way (the peer
// added the new id to every shard, the node gave up before the catalog
// recorded it, and the peer goes on later) asks again under the same id
// at its next start, and every shard ends with three voting members, each
// a running node. Before the pending id, the second start asked under
// another id and both new ids could be voting members of the same shards.
// Only the first start is told that the data is lost: the pending mark
// is the second's warrant.
func TestInterruptedReplacementEndsWithThreeMembers(t *testing.T) {
	c := startBrokerCluster(t, 3)
	ctx := testContext(t)
	queue, _, err := c.members["node2"].node.Declare(ctx, cluster.QueueDecl{Name: "kept", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.members["node2"].node.WaitOwner(ctx, "kept", 0); err != nil {
		t.Fatal(err)
	}
	// The first replacement, on whichever peer is asked, stops before the
	// catalog records its id and waits for resume; later ones go through.
	reached, resume := make(chan uint64, 1), make(chan struct{})
	var first, resumed sync.Once
	release := func() { resumed.Do(func() { close(resume) }) }
	t.Cleanup(release) // before the nodes stop (cleanups run last first)
	for _, id := range []string{"node2", "node3"} {
		c.members[id].node.SetBeforeReplaceRecorded(func(nodeID string, replicaID uint64) {
			held := false
			first.Do(func() { held = true })
			if held {
				reached <- replicaID
				<-resume
			}
		})
	}

	c.stop("node1")
	if err := os.RemoveAll(c.members["node1"].config.DataDir); err != nil {
		t.Fatal(err)
	}
	effective := c.config.WithDefaults() // as the fibril command passes it
	firstCtx, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := PrepareClusterIdentity(firstCtx, &effective, "node1", IdentityOptions{Logger: c.logger, RejoinEmpty: true})
		gaveUp <- err
	}()
	var firstReplicaID uint64
	select {
	case firstReplicaID = <-reached:
	case <-ctx.Done():
		t.Fatal("the first replacement never reached the catalog step")
	}
	giveUp()
	if err := <-gaveUp; err == nil {
		t.Fatal("the interrupted first start decided an identity")
	} else {
		t.Logf("the first start gave up: %v", err)
	}

	// The second start is not told again: the pending mark says the
	// first one was.
	identity, err := PrepareClusterIdentity(ctx, &effective, "node1", IdentityOptions{Logger: c.logger})
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	if identity.ReplicaID != firstReplicaID || !identity.Join {
		t.Fatalf("second start asked for %+v; the first asked for %d", identity, firstReplicaID)
	}
	release() // the first replacement goes on, after the second finished
	node, err := cluster.Start(c.config, "node1", cluster.StartOptions{Logger: c.logger, ReplicaID: identity.ReplicaID, Join: identity.Join})
	if err != nil {
		t.Fatalf("start node1 joining: %v", err)
	}
	c.members["node1"].node = node
	c.startBroker("node1")
	if err := node.WaitReady(ctx); err != nil {
		t.Fatalf("node1 not ready after rejoining: %v", err)
	}

	running := map[uint64]string{}
	for _, id := range c.order {
		running[c.members[id].node.ReplicaID()] = id
	}
	for _, shardID := range []uint64{cluster.CatalogShardID, queue.Partitions[0].ShardID} {
		waitUntil(t, fmt.Sprintf("shard %d: exactly the three running nodes vote", shardID), func() bool {
			members, err := c.members["node2"].node.ShardMembers(ctx, shardID)
			if err != nil {
				return false
			}
			for replicaID := range members {
				if running[replicaID] == "" {
					t.Logf("shard %d: member %d is no running node (members %v, running %v)", shardID, replicaID, members, running)
					return false
				}
			}
			return len(members) == 3
		})
	}
	initialized, recorded, err := c.members["node3"].node.CatalogMember("node1")
	if err != nil || !initialized || recorded != node.ReplicaID() {
		t.Fatalf("the catalog records node1 as %d (%v, %v); it runs as %d", recorded, initialized, err, node.ReplicaID())
	}
}

// A node whose data directory is empty while the cluster knows it (an
// unmounted volume, a wrong path, or data lost for good) does not start
// on it unless told that its data is lost: the refusal comes at once,
// names the directory and the likely causes and writes nothing there.
// Told so, it rejoins as a new replica and catches up on a queue it
// replicated before.
func TestEmptyDataDirOfAKnownNodeIsRefusedUnlessTold(t *testing.T) {
	c := startBrokerCluster(t, 3)
	ctx := testContext(t)
	name := "kept-while-away"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	confirmedPayloads(t, ctx, c.dialSDKHome(owner, "publisher"), name, "m", 20)
	emptied := followers[1]
	dataDir := c.members[emptied].config.DataDir
	c.stop(emptied)
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	effective := c.config.WithDefaults() // as the fibril command passes it
	refuseCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	started := time.Now()
	identity, err := PrepareClusterIdentity(refuseCtx, &effective, emptied, IdentityOptions{Logger: c.logger})
	if !errors.Is(err, ErrEmptyDataDir) {
		t.Fatalf("a start on the emptied data dir decided %+v, %v", identity, err)
	}
	if took := time.Since(started); took > 10*time.Second {
		t.Fatalf("the refusal took %v: it waited instead of refusing at once", took)
	}
	for _, part := range []string{dataDir, "not mounted", "wrong path", "lost for good"} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("the refusal does not say %q: %v", part, err)
		}
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start created or wrote its data dir: %v", err)
	}

	identity, err = PrepareClusterIdentity(ctx, &effective, emptied, IdentityOptions{Logger: c.logger, RejoinEmpty: true})
	if err != nil {
		t.Fatalf("a start told to rejoin: %v", err)
	}
	if !identity.Join || !strings.HasPrefix(identity.Decided, "rejoined after losing its data") {
		t.Fatalf("a start told to rejoin decided %+v", identity)
	}
	node, err := cluster.Start(c.config, emptied, cluster.StartOptions{Logger: c.logger, ReplicaID: identity.ReplicaID, Join: true})
	if err != nil {
		t.Fatalf("start %s joining: %v", emptied, err)
	}
	c.members[emptied].node = node
	c.startBroker(emptied)
	waitUntil(t, emptied+" catches up as a new replica", func() bool {
		replica, ok := replicaOf(c.copyAt(owner, name), emptied)
		return ok && replica.State == "in sync" && c.copyAt(emptied, name).DurableNext == c.copyAt(owner, name).DurableNext
	})
}

// The decision on initialised answers: a peer that knows the cluster
// without having asked this node refuses the start; when every peer that
// knows it asked (its peers formed it while this node started), the node
// waits until every peer has answered before it joins.
func TestIdentityDecisionOnInitialisedAnswers(t *testing.T) {
	dir := t.TempDir()
	config := &cluster.Config{Nodes: []cluster.NodeConfig{
		{ID: "node1", DataDir: filepath.Join(dir, "node1")},
		{ID: "node2", DataDir: filepath.Join(dir, "node2")},
		{ID: "node3", DataDir: filepath.Join(dir, "node3")},
	}}
	prober := &identityProber{config: config, self: config.Nodes[2], askedBy: map[string]bool{"node1": true}}
	known := map[string]wire.Member{"node1": {Initialized: true, ReplicaID: 5}}
	if decided, identity, err := prober.decideKnown(context.Background(), known, false); decided || err != nil {
		t.Fatalf("with node2 silent and node1 having asked, decided %v: %+v, %v", decided, identity, err)
	}
	known["node2"] = wire.Member{Initialized: true, ReplicaID: 7}
	decided, _, err := prober.decideKnown(context.Background(), known, true)
	if !decided || !errors.Is(err, ErrEmptyDataDir) || !strings.Contains(err.Error(), "node2") {
		t.Fatalf("node2 knows the cluster and never asked: decided %v, %v", decided, err)
	}
}
