package cluster

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const testTimeout = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitLocal waits until every running node's local replica has the queue.
func waitLocal(t *testing.T, cluster *testCluster, name string) map[string]QueueInfo {
	t.Helper()
	found := map[string]QueueInfo{}
	deadline := time.Now().Add(testTimeout)
	for _, node := range cluster.running() {
		for {
			queue, err := node.LookupLocal(name)
			if err == nil {
				found[node.ID()] = queue
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never saw queue %q locally: %v", node.ID(), name, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return found
}

// placementOf strips owner fields, which may lag on some nodes.
func placementOf(queue QueueInfo) QueueInfo {
	for index := range queue.Partitions {
		queue.Partitions[index].Owner, queue.Partitions[index].Epoch = "", 0
	}
	return queue
}

func TestDeclarationIsVisibleOnAllNodes(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)

	declared, warnings, err := cluster.node("node2").Declare(ctx, QueueDecl{Name: "orders", Mode: ModeDurable, Partitions: 2})
	if err != nil || len(warnings) != 0 {
		t.Fatalf("declare: %v %v", err, warnings)
	}
	if declared.Mode != ModeDurable || declared.Policy != "majority_durable" || len(declared.Partitions) != 2 {
		t.Fatalf("declared = %+v", declared)
	}
	for _, node := range cluster.running() {
		queue, err := node.Lookup(ctx, "orders")
		if err != nil {
			t.Fatalf("%s: Lookup: %v", node.ID(), err)
		}
		if !reflect.DeepEqual(placementOf(queue), placementOf(declared)) {
			t.Fatalf("%s sees %+v, declared %+v", node.ID(), queue, declared)
		}
		queues, err := node.Queues(ctx)
		if err != nil || len(queues) != 1 || queues[0].Name != "orders" {
			t.Fatalf("%s: Queues = %v, %v", node.ID(), queues, err)
		}
	}
	for id, queue := range waitLocal(t, cluster, "orders") {
		if !reflect.DeepEqual(placementOf(queue), placementOf(declared)) {
			t.Fatalf("%s local copy %+v", id, queue)
		}
	}
	if _, err := cluster.node("node3").Lookup(ctx, "missing"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("Lookup(missing) = %v", err)
	}
}

func TestConflictingRedeclareIsRefusedOnEveryNode(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)

	if _, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "audit", Mode: ModeDurable}); err != nil {
		t.Fatalf("declare: %v", err)
	}
	for _, node := range cluster.running() {
		_, _, err := node.Declare(ctx, QueueDecl{Name: "audit", Mode: ModeBuffered})
		if !errors.Is(err, ErrModeConflict) {
			t.Fatalf("%s: buffered re-declare = %v, want ErrModeConflict", node.ID(), err)
		}
		_, _, err = node.Declare(ctx, QueueDecl{Name: "audit", Policy: "replica_buffered:1"})
		if !errors.Is(err, ErrDeclarationConflict) {
			t.Fatalf("%s: policy re-declare = %v, want ErrDeclarationConflict", node.ID(), err)
		}
		outcome, err := node.DeclareQueue(ctx, QueueDecl{Name: "audit"})
		if err != nil || outcome.Queue.Mode != ModeDurable || outcome.Created {
			t.Fatalf("%s: re-declare without a mode = %+v, %v", node.ID(), outcome, err)
		}
	}
	created, err := cluster.node("node2").DeclareQueue(ctx, QueueDecl{Name: "fresh"})
	if err != nil || !created.Created {
		t.Fatalf("first declare of fresh = %+v, %v; want created", created, err)
	}
	// A new queue declared without a mode is buffered in a cluster, and the
	// deprecated alias is accepted with a warning.
	queue, _, err := cluster.node("node3").Declare(ctx, QueueDecl{Name: "events"})
	if err != nil || queue.Mode != ModeBuffered || queue.Policy != "replica_buffered:2" {
		t.Fatalf("default declare = %+v, %v", queue, err)
	}
	queue, warnings, err := cluster.node("node2").Declare(ctx, QueueDecl{Name: "legacy", Policy: "replica_accepted:2"})
	if err != nil || queue.Policy != "replica_durable:2" || len(warnings) != 1 {
		t.Fatalf("alias declare = %+v, %v, %v", queue, warnings, err)
	}
}

// Every node gives the same owner for every partition, the owner is the
// placement's preferred owner, owners spread over the nodes, and nodes
// outside a replica set learn the owner from the catalog hint.
func TestOwnerIsConsistentFromEveryNode(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)

	decls := []QueueDecl{{Name: "a", Replicas: 1}, {Name: "b", Replicas: 3}, {Name: "c", Replicas: 2}}
	owners := map[string]bool{}
	for _, decl := range decls {
		queue, _, err := cluster.node("node1").Declare(ctx, decl)
		if err != nil {
			t.Fatalf("declare %s: %v", decl.Name, err)
		}
		preferred := queue.Partitions[0].Replicas[0]
		owners[preferred] = true
		for _, node := range cluster.running() {
			owner, err := node.WaitOwner(ctx, decl.Name, 0)
			if err != nil {
				t.Fatalf("%s: WaitOwner(%s): %v", node.ID(), decl.Name, err)
			}
			if owner.NodeID != preferred || owner.Epoch != 1 {
				t.Fatalf("%s: owner of %s = %+v, want %s at epoch 1", node.ID(), decl.Name, owner, preferred)
			}
			ownerConfig, _ := cluster.config.Node(preferred)
			if owner.ClientAddress != ownerConfig.ClientAddress || owner.IsSelf != (node.ID() == preferred) {
				t.Fatalf("%s: owner info %+v", node.ID(), owner)
			}
			inReplicaSet := false
			for _, replica := range queue.Partitions[0].Replicas {
				inReplicaSet = inReplicaSet || replica == node.ID()
			}
			if owner.FromCoordination != inReplicaSet {
				t.Fatalf("%s: FromCoordination = %v, in replica set %v", node.ID(), owner.FromCoordination, inReplicaSet)
			}
		}
	}
	if len(owners) != 3 {
		t.Fatalf("owners %v do not spread over the three nodes", owners)
	}
	if _, err := cluster.node("node2").Owner("a", 1); !errors.Is(err, ErrPartitionNotFound) {
		t.Fatalf("Owner(a, 1) = %v", err)
	}
	queue, err := cluster.node("node3").Lookup(ctx, "b")
	if err != nil || queue.Partitions[0].Owner == "" || queue.Partitions[0].Epoch != 1 || queue.Serving != ServingReplicated {
		t.Fatalf("queue info does not carry owner and epoch: %+v %v", queue, err)
	}
}

// When the preferred owner is down at declare time, another replica claims
// the partition after the grace period.
func TestAnotherReplicaClaimsWhenThePreferredOwnerIsDown(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	// node1 prefers the first partition placed in an empty catalog.
	cluster.stop("node1")
	queue, _, err := cluster.node("node2").Declare(ctx, QueueDecl{Name: "orphan"})
	if err != nil {
		t.Fatalf("declare: %v", err)
	}
	if queue.Partitions[0].Replicas[0] != "node1" {
		t.Fatalf("placement changed: %v", queue.Partitions[0].Replicas)
	}
	owner, err := cluster.node("node3").WaitOwner(ctx, "orphan", 0)
	if err != nil {
		t.Fatalf("WaitOwner: %v", err)
	}
	if owner.NodeID == "node1" || owner.Epoch != 1 {
		t.Fatalf("owner = %+v", owner)
	}
}

func TestRestartedNodeRejoinsAndCatchesUp(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	if _, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "before"}); err != nil {
		t.Fatal(err)
	}
	waitLocal(t, cluster, "before")

	cluster.stop("node3")
	for _, name := range []string{"while-down-1", "while-down-2"} {
		if _, _, err := cluster.node("node2").Declare(ctx, QueueDecl{Name: name, Replicas: 3}); err != nil {
			t.Fatalf("declare %s with node3 down: %v", name, err)
		}
	}
	if err := cluster.node("node1").SetSetting(ctx, SettingBackgroundSyncInterval, "250ms"); err != nil {
		t.Fatal(err)
	}
	cluster.start("node3")
	restarted := cluster.node("node3")
	for _, name := range []string{"before", "while-down-1", "while-down-2"} {
		waitLocal(t, cluster, name)
		// The owner may be known from the catalog hint first; wait until the
		// restarted node runs the coordination shard again and reads it.
		deadline := time.Now().Add(testTimeout)
		for {
			owner, err := restarted.Owner(name, 0)
			if err == nil && owner.FromCoordination && owner.Epoch == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("restarted node: owner of %s = %+v, %v", name, owner, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	local, err := restarted.LocalCatalog()
	if err != nil || local.Settings.BackgroundSyncIntervalMs != 250 {
		t.Fatalf("restarted node settings = %+v, %v", local.Settings, err)
	}
	leaderView, err := cluster.node("node1").Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if local.Revision != leaderView.Revision {
		// Owner hints may still be landing; a linearizable read settles it.
		local, err = restarted.Catalog(ctx)
		if err != nil || local.Revision < leaderView.Revision {
			t.Fatalf("restarted node at revision %d, cluster at %d (%v)", local.Revision, leaderView.Revision, err)
		}
	}
}

func TestStoppingTheCatalogLeaderElectsANewOne(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	if _, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "first"}); err != nil {
		t.Fatal(err)
	}
	oldLeader := cluster.catalogLeader(testTimeout)
	cluster.stop(oldLeader)
	for _, node := range cluster.running() {
		name := "after-" + node.ID()
		if _, _, err := node.Declare(ctx, QueueDecl{Name: name}); err != nil {
			t.Fatalf("declare on %s after stopping leader %s: %v", node.ID(), oldLeader, err)
		}
	}
	newLeader := cluster.catalogLeader(testTimeout)
	if newLeader == oldLeader {
		t.Fatalf("leader still %s", oldLeader)
	}
	for _, node := range cluster.running() {
		queues, err := node.Queues(ctx)
		if err != nil || len(queues) != 3 {
			t.Fatalf("%s: %d queues, %v", node.ID(), len(queues), err)
		}
	}
}

func TestDeleteQueueStopsItsCoordinationShard(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	node := cluster.node("node1")
	queue, _, err := node.Declare(ctx, QueueDecl{Name: "temp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.WaitOwner(ctx, "temp", 0); err != nil {
		t.Fatal(err)
	}
	if err := node.DeleteQueue(ctx, "temp"); err != nil {
		t.Fatal(err)
	}
	if err := node.DeleteQueue(ctx, "temp"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("second delete = %v", err)
	}
	shardID := queue.Partitions[0].ShardID
	deadline := time.Now().Add(testTimeout)
	for _, member := range cluster.running() {
		for hostsShard(member.Status(), shardID) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still hosts shard %d", member.ID(), shardID)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The name can be declared again, with a new coordination shard.
	again, _, err := node.Declare(ctx, QueueDecl{Name: "temp", Mode: ModeDurable})
	if err != nil || again.Partitions[0].ShardID == shardID || again.Mode != ModeDurable {
		t.Fatalf("re-declare after delete = %+v, %v", again, err)
	}
}

func hostsShard(status Status, shardID uint64) bool {
	for _, shard := range status.Shards {
		if shard.ShardID == shardID {
			return true
		}
	}
	return false
}

func TestStatusAndWatch(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	node := cluster.node("node2")
	watch := node.Watch()
	defer watch.Close()
	<-watch.C // the initial signal

	queue, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch.C:
	case <-ctx.Done():
		t.Fatal("no watch signal after a declare")
	}
	if _, err := node.WaitOwner(ctx, "watched", 0); err != nil {
		t.Fatal(err)
	}
	leader := cluster.catalogLeader(testTimeout)
	status := node.Status()
	if status.NodeID != "node2" || status.CatalogLeader != leader || !status.CatalogInitialized || status.CatalogRevision == 0 {
		t.Fatalf("status = %+v", status)
	}
	if len(status.Nodes) != 3 || status.Nodes[1].Liveness != LivenessSelf {
		t.Fatalf("nodes = %+v", status.Nodes)
	}
	if !hostsShard(status, CatalogShardID) || !hostsShard(status, queue.Partitions[0].ShardID) {
		t.Fatalf("shards = %+v", status.Shards)
	}
	// A shard's leader can be briefly unknown here: the first owner's
	// election moves the coordination leadership to the preferred owner,
	// and node2 learns the new leader with its next heartbeat.
	for leaderless := time.Now().Add(testTimeout); ; {
		unknown := -1
		for i, shard := range status.Shards {
			if shard.Leader == "" {
				unknown = i
			}
		}
		if unknown < 0 {
			break
		}
		if time.Now().After(leaderless) {
			t.Fatalf("shard %d has no known leader: %+v", status.Shards[unknown].ShardID, status.Shards)
		}
		time.Sleep(10 * time.Millisecond)
		status = node.Status()
	}
	// The leader streams to every follower, so it sees all of them.
	deadline := time.Now().Add(testTimeout)
	for {
		connected := 0
		for _, peer := range cluster.node(leader).Status().Nodes {
			if peer.Liveness == LivenessConnected {
				connected++
			}
		}
		if connected == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader %s sees %+v", leader, cluster.node(leader).Status().Nodes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	node.Close()
	drained := make(chan struct{})
	go func() {
		for range watch.C { // a signal may still be pending before the close
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
		t.Fatal("watch still open after Close")
	}
	if _, _, err := node.Declare(ctx, QueueDecl{Name: "late"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("declare after Close = %v", err)
	}
}

// Quiesce (idle shards stop heartbeating) comes from the config and leaves
// declares and owner election working.
func TestQuiescedCluster(t *testing.T) {
	cluster := newMemoryCluster(t, 3, func(c *Config) { c.Cluster.Raft.Quiesce = true })
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	if !cluster.node("node1").Config().Cluster.Raft.Quiesce {
		t.Fatal("quiesce setting not carried into the node")
	}
	queue, _, err := cluster.node("node3").Declare(ctx, QueueDecl{Name: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cluster.node("node2").WaitOwner(ctx, "quiet", 0)
	if err != nil || owner.NodeID != queue.Partitions[0].Replicas[0] {
		t.Fatalf("owner = %+v, %v", owner, err)
	}
}

// lockedBuffer is an io.Writer safe for the node's goroutines.
type lockedBuffer struct {
	mu   sync.Mutex
	text strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.text.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.text.String()
}

// A node whose config lists the nodes differently from the catalog says so.
func TestNodeListMismatchIsLogged(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.start("node1")
	cluster.start("node2")
	cluster.waitReady(testTimeout)

	changed := cluster.config.WithDefaults()
	changed.Nodes[0].HTTPAddress = "127.0.0.1:1"
	var logs lockedBuffer
	options := cluster.startOptions("node3")
	options.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	node3, err := Start(&changed, "node3", options)
	if err != nil {
		t.Fatal(err)
	}
	cluster.nodes["node3"] = node3
	deadline := time.Now().Add(testTimeout)
	for !strings.Contains(logs.String(), "node list differs") {
		if time.Now().After(deadline) {
			t.Fatalf("no mismatch logged; logs:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
