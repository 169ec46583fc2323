package actors

// Broker-level cluster tests: three brokers in this process, each on its
// own cluster node, Raft over loopback TCP and everything on disk in
// temporary directories. Clients connect to any node; requests for queues
// owned elsewhere are redirected, and the Go SDK follows. Raft runs at an
// RTT of 10 ms so elections take a fraction of a second.
//
// Set FIBRIL_TEST_LOG=1 to see the brokers' and Raft's log lines.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// clusterMember is one node of a test cluster: its cluster node and the
// broker on top of it.
type clusterMember struct {
	config cluster.NodeConfig
	node   *cluster.Node
	broker *Broker
}

type brokerCluster struct {
	t       *testing.T
	members map[string]*clusterMember
	order   []string
	// fs is the filesystem each node's broker runs on (default: the OS).
	fs map[string]vfs.FS
	// configure, when set, adjusts each broker's config before it starts.
	configure func(id string, config *Config)
	// configureCluster, when set, adjusts the cluster config before any
	// node starts.
	configureCluster func(config *cluster.Config)
	config           *cluster.Config
	logger           *slog.Logger
}

// brokerClusterOption adjusts a test cluster before it starts.
type brokerClusterOption func(*brokerCluster)

// withBrokerFS runs node id's broker on fs.
func withBrokerFS(id string, fs vfs.FS) brokerClusterOption {
	return func(c *brokerCluster) { c.fs[id] = fs }
}

// withBrokerConfig adjusts every broker's config.
func withBrokerConfig(configure func(id string, config *Config)) brokerClusterOption {
	return func(c *brokerCluster) { c.configure = configure }
}

// withClusterConfig adjusts the cluster config before the nodes start.
func withClusterConfig(configure func(config *cluster.Config)) brokerClusterOption {
	return func(c *brokerCluster) { c.configureCluster = configure }
}

// freeLoopbackAddresses returns n distinct loopback addresses whose ports
// were free a moment ago: all are held open until every one is chosen, so
// none is handed out twice.
//
// The ports come from below the kernel's ephemeral range (ephemeralPorts),
// not from a listen on port 0. A node of a test cluster gives its ports up
// while it is stopped, and restarts on the same ones; a port of the
// ephemeral range is meanwhile free for any process on the machine to be
// handed by the kernel, for a listen on port 0 (another package's test
// binary, run beside this one by go test ./..., does thousands) or as the
// local end of a connection. Then the restart failed with "address already
// in use". The kernel hands out no port outside that range by itself.
func freeLoopbackAddresses(t *testing.T, n int) []string {
	t.Helper()
	low, high := ephemeralPorts()
	from, to := 10000, low-1 // below 10000: the ports the repository's configs name (7420, ...)
	if to-from < 1000 {
		from, to = high+1, 65535
	}
	addresses := make([]string, 0, n)
	for tries := 0; len(addresses) < n; tries++ {
		address := "127.0.0.1:0" // no room outside the ephemeral range: let the kernel choose
		if to-from >= 1000 && tries < 100*n {
			address = net.JoinHostPort("127.0.0.1", strconv.Itoa(from+rand.IntN(to-from+1)))
		}
		listener, err := net.Listen("tcp", address)
		if err != nil && !strings.HasSuffix(address, ":0") {
			continue // taken: another one
		}
		if err != nil {
			t.Fatal(err)
		}
		defer listener.Close()
		addresses = append(addresses, listener.Addr().String())
	}
	return addresses
}

// ephemeralPorts is the range of ports the kernel chooses from for a
// listen on port 0 and for a connection's local end: Linux's
// ip_local_port_range, else the range IANA suggests (other systems' default).
func ephemeralPorts() (low, high int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if fields := strings.Fields(string(data)); len(fields) == 2 {
			low, errLow := strconv.Atoi(fields[0])
			high, errHigh := strconv.Atoi(fields[1])
			if errLow == nil && errHigh == nil && 0 < low && low <= high {
				return low, high
			}
		}
	}
	return 49152, 65535
}

func clusterTestLogger(t *testing.T) *slog.Logger {
	if os.Getenv("FIBRIL_TEST_LOG") != "" {
		return testLogger(t)
	}
	log.SetOutput(io.Discard) // the Raft log store writes a few lines through the standard logger
	return runtime.DiscardLogger()
}

// startBrokerCluster starts nodeCount nodes, each a cluster node plus a
// broker, and waits until every catalog answers.
func startBrokerCluster(t *testing.T, nodeCount int, options ...brokerClusterOption) *brokerCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a three-node cluster on loopback ports")
	}
	dir := t.TempDir()
	// The Raft timing is the default a deployment gets: shorter elections
	// made leaderships churn under -race on a loaded machine, and with them
	// claims and catalog writes timed out.
	config := &cluster.Config{Cluster: cluster.ClusterSettings{Secret: "test-cluster-secret"}}
	ports := freeLoopbackAddresses(t, 4*nodeCount)
	for i := 1; i <= nodeCount; i++ {
		id, port := fmt.Sprintf("node%d", i), ports[4*(i-1):]
		config.Nodes = append(config.Nodes, cluster.NodeConfig{
			ID: id, ClientAddress: port[0], PeerAddress: port[1], RaftAddress: port[2], HTTPAddress: port[3],
			DataDir: filepath.Join(dir, id),
		})
	}
	c := &brokerCluster{t: t, members: map[string]*clusterMember{}, fs: map[string]vfs.FS{}}
	for _, option := range options {
		option(c)
	}
	if c.configureCluster != nil {
		c.configureCluster(config)
	}
	logger := clusterTestLogger(t)
	c.config, c.logger = config, logger
	for _, nodeConfig := range config.Nodes {
		node, err := cluster.Start(config, nodeConfig.ID, cluster.StartOptions{Logger: logger})
		if err != nil {
			t.Fatalf("start cluster node %s: %v", nodeConfig.ID, err)
		}
		member := &clusterMember{config: nodeConfig, node: node}
		c.members[nodeConfig.ID], c.order = member, append(c.order, nodeConfig.ID)
		t.Cleanup(func() { c.stop(member.config.ID) })
	}
	for _, id := range c.order {
		c.startBroker(id)
	}
	c.dumpActorsOnFailure()
	ctx := testContext(t)
	for _, id := range c.order {
		if err := c.members[id].node.WaitReady(ctx); err != nil {
			t.Fatalf("%s: catalog not ready: %v", id, err)
		}
	}
	return c
}

func (c *brokerCluster) startBroker(id string) *Broker {
	c.t.Helper()
	member := c.members[id]
	config := DefaultConfig()
	config.DataDir, config.ListenAddr, config.FS = member.config.DataDir, member.config.ClientAddress, vfs.OS
	if fs, ok := c.fs[id]; ok {
		config.FS = fs
	}
	config.Cluster, config.Logger = member.node, clusterTestLogger(c.t)
	if c.configure != nil {
		c.configure(id, &config)
	}
	broker, err := Start(config)
	if err != nil {
		c.t.Fatalf("start broker %s: %v", id, err)
	}
	member.broker = broker
	return broker
}

// stop closes a member's broker, then its cluster node (both may be gone).
func (c *brokerCluster) stop(id string) {
	member := c.members[id]
	if member.broker != nil {
		if err := member.broker.Close(); err != nil {
			c.t.Errorf("close broker %s: %v", id, err)
		}
		member.broker = nil
	}
	if member.node != nil {
		member.node.Close()
		member.node = nil
	}
}

// restart starts a stopped member again on its data directory: a new
// cluster node (a new replica instance) and a broker on it.
func (c *brokerCluster) restart(id string) {
	c.t.Helper()
	member := c.members[id]
	node, err := cluster.Start(c.config, id, cluster.StartOptions{Logger: c.logger})
	if err != nil {
		c.t.Fatalf("restart cluster node %s: %v", id, err)
	}
	member.node = node
	c.startBroker(id)
}

// live lists the members whose broker runs.
func (c *brokerCluster) live() []string {
	var ids []string
	for _, id := range c.order {
		if c.members[id].broker != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// ownerOf waits until the catalog of every node names the same owner. A
// node learns an owner from its own replica of the coordination shard,
// which may trail another node's for a moment (a new epoch claimed just
// now): two nodes that name different owners are asked again, not taken
// for a split.
func (c *brokerCluster) ownerOf(queueName string) string {
	c.t.Helper()
	ctx := testContext(c.t)
	owner := ""
	waitUntil(c.t, "every node names one owner of "+queueName, func() bool {
		owner = ""
		for _, id := range c.live() {
			found, err := c.members[id].node.WaitOwner(ctx, queueName, 0)
			if err != nil {
				c.t.Fatalf("%s: owner of %s: %v", id, queueName, err)
			}
			if owner != "" && found.NodeID != owner {
				return false
			}
			owner = found.NodeID
		}
		return true
	})
	return owner
}

func (c *brokerCluster) others(id string) []string {
	var out []string
	for _, other := range c.order {
		if other != id {
			out = append(out, other)
		}
	}
	return out
}

// dialSDK connects the Go SDK to one node only.
func (c *brokerCluster) dialSDK(id string) *client.Client {
	c.t.Helper()
	sdk, err := client.Dial(testContext(c.t), client.Options{
		Addresses: []string{c.members[id].config.ClientAddress}, ClientName: "cluster-test"})
	if err != nil {
		c.t.Fatalf("dial %s: %v", id, err)
	}
	c.t.Cleanup(func() { _ = sdk.Close() })
	return sdk
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

func hasQueue(infos []wire.QueueInfo, name string) bool {
	return slices.ContainsFunc(infos, func(info wire.QueueInfo) bool { return info.Name == name })
}

func hasWarning(warnings []string, part string) bool {
	return slices.ContainsFunc(warnings, func(warning string) bool { return strings.Contains(warning, part) })
}

// A declaration made on one node is visible on all; the owner alone opens
// the partition; from every non-owner the SDK declares, publishes,
// consumes and reads info through redirects; info says the owner serves
// alone; the mode is fixed cluster-wide; delete goes through the catalog.
func TestClusterRedirectsFromEveryNonOwner(t *testing.T) {
	c := startBrokerCluster(t, 3)
	ctx := testContext(t)
	declaring := c.dialSDK("node2")
	result, err := declaring.Declare(ctx, "orders", client.QueueConfig{Mode: client.ModeDurable})
	if err != nil {
		t.Fatalf("declare through node2: %v", err)
	}
	if !result.Created || result.Mode != client.ModeDurable || result.Policy != "majority_durable" ||
		len(result.Warnings) != 0 {
		t.Fatalf("declare result %+v", result)
	}
	owner := c.ownerOf("orders")
	// Every replica opens its copy when its catalog shows the queue; the
	// owner alone serves it once its followers answered.
	waitUntil(t, owner+" serves orders", func() bool { return servesHere(c.members[owner].broker, "orders") })
	for _, id := range c.order {
		declared, err := c.members[id].node.LookupLocal("orders")
		if err != nil || declared.Mode != cluster.ModeDurable {
			t.Fatalf("%s: local catalog has %+v, %v", id, declared, err)
		}
		waitUntil(t, id+" opens its copy of orders", func() bool { return hasQueue(c.members[id].broker.Queues(), "orders") })
		if serves := servesHere(c.members[id].broker, "orders"); serves != (id == owner) {
			t.Fatalf("%s serves the partition: %v; the owner is %s", id, serves, owner)
		}
	}
	replicaSet, _ := c.members[owner].node.LookupLocal("orders")

	sent := 0
	for _, id := range c.others(owner) {
		sdk := c.dialSDK(id)
		again, err := sdk.Declare(ctx, "orders", client.QueueConfig{KeepMode: true})
		if err != nil || again.Created {
			t.Fatalf("re-declare through %s: %+v, %v", id, again, err)
		}
		for i := range 20 {
			confirm, err := sdk.Publish(ctx, "orders", client.Message{Payload: []byte(fmt.Sprintf("%s-%d", id, i))})
			if err != nil || confirm.Boundary != client.BoundaryDurable {
				t.Fatalf("publish through %s: %+v, %v", id, confirm, err)
			}
			sent++
		}
		info, err := sdk.QueueInfo(ctx, "orders")
		if err != nil {
			t.Fatalf("info through %s: %v", id, err)
		}
		if info.Owner != owner || info.Epoch == 0 || info.Policy != "majority_durable" || info.Ready != uint64(sent) {
			t.Fatalf("info through %s: %+v", id, info)
		}
		checkReplicaList(t, info, replicaSet.Partitions[0].Replicas, owner, 2)
		subscription, err := sdk.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 50})
		if err != nil {
			t.Fatalf("subscribe through %s: %v", id, err)
		}
		for range 20 {
			select {
			case delivery := <-subscription.Deliveries():
				if err := delivery.Ack(); err != nil {
					t.Fatalf("ack through %s: %v", id, err)
				}
			case <-ctx.Done():
				t.Fatalf("no delivery through %s", id)
			}
		}
		if err := subscription.Unsubscribe(ctx); err != nil {
			t.Fatalf("unsubscribe through %s: %v", id, err)
		}
		sent -= 20
	}

	_, err = declaring.Declare(ctx, "orders", client.QueueConfig{Mode: client.ModeBuffered})
	var refused *client.ServerError
	if !errors.As(err, &refused) || refused.Code != wire.CodeModeConflict {
		t.Fatalf("buffered re-declare of a durable queue: %v", err)
	}

	// A delete through a non-owner is redirected, and the queue leaves the
	// catalog of every node and the owner's disk.
	if _, err := c.dialSDK(c.others(owner)[1]).DeleteQueue(ctx, "orders"); err != nil {
		t.Fatalf("delete through a non-owner: %v", err)
	}
	for _, id := range c.order {
		waitUntil(t, id+" forgets orders", func() bool {
			_, err := c.members[id].node.LookupLocal("orders")
			return errors.Is(err, cluster.ErrQueueNotFound)
		})
	}
	waitUntil(t, "the owner closes orders and removes its files", func() bool {
		_, err := os.Stat(filepath.Join(c.members[owner].config.DataDir, queuesDirName, "orders"))
		return !hasQueue(c.members[owner].broker.Queues(), "orders") && os.IsNotExist(err)
	})
}

// checkReplicaList: every member of the replica set is listed in
// placement order with its state; the owner's copy and at least W-1
// followers' hold every record the quorum frontier covers, at the durable
// boundary (the queue is durable), and the frontier covers every confirm.
func checkReplicaList(t *testing.T, info client.QueueInfo, replicaSet []string, owner string, copies int) {
	t.Helper()
	if len(info.Replicas) != len(replicaSet) {
		t.Fatalf("replicas %+v, replica set %v", info.Replicas, replicaSet)
	}
	holding := 0
	for i, replica := range info.Replicas {
		if replica.Node != replicaSet[i] || replica.State == "" {
			t.Fatalf("replicas %+v, replica set %v", info.Replicas, replicaSet)
		}
		if (replica.Node == owner) != (replica.State == "owner") {
			t.Fatalf("replica %+v: the owner is %s", replica, owner)
		}
		if replica.DurableNext >= info.CommittedNext {
			holding++
		}
	}
	if info.CommittedNext == 0 || holding < copies {
		t.Fatalf("committed_next %d held durably by %d copies, want %d: %+v", info.CommittedNext, holding, copies, info.Replicas)
	}
}

// servesHere reports whether the broker serves the queue (its directory
// lists it without a failure).
func servesHere(broker *Broker, name string) bool {
	route, ok := broker.core.directory.lookup(name)
	return ok && !route.failure.failed()
}

func waitUntil(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The frames a non-owner sends: a redirect naming the owner's node id and
// client address for requests, not_owner plus a redirect for publishes;
// a queue declared without a mode is buffered, FDK2 carries the effective
// policy and the warnings, and dead-letter queues are refused.
func TestClusterNonOwnerAnswersWithRedirectFrames(t *testing.T) {
	c := startBrokerCluster(t, 3)
	raw := connectTo(t, c.members["node3"].config.ClientAddress)
	// D4: a declare without a mode is answered FDK2 naming what it made.
	if reply, ok := raw.mustDeclare("events", wire.ModeUnset, wire.QueueOptions{}).(*wire.DeclareOKMode); !ok ||
		!reply.Created || reply.Mode != wire.ModeBuffered || reply.Policy != "replica_buffered:2" {
		t.Fatalf("a declare without a mode in a cluster: %+v", reply)
	}
	declared, err := c.members["node1"].node.Lookup(testContext(t), "events")
	if err != nil || declared.Mode != cluster.ModeBuffered || declared.Policy != "replica_buffered:2" {
		t.Fatalf("a cluster queue declared without a mode: %+v, %v", declared, err)
	}
	owner := c.ownerOf("events")
	ownerAddress := c.members[owner].config.ClientAddress

	deadLetters := raw.declare("with-dead-letters", wire.ModeDurable, wire.QueueOptions{MaxDeliveries: 3, DeadLetterQueue: "dead"})
	if refused, ok := deadLetters.(*wire.ErrorFrame); !ok || refused.Code != wire.CodeInvalidOptions ||
		!strings.Contains(refused.Message, "dead_letter_queue") {
		t.Fatalf("a dead-letter queue in a cluster: %+v", deadLetters)
	}
	contradiction := raw.declare("audit", wire.ModeBuffered, wire.QueueOptions{Policy: "replica_accepted:2"})
	if refused, ok := contradiction.(*wire.ErrorFrame); !ok || refused.Code != wire.CodeInvalidOptions {
		t.Fatalf("a buffered mode with a durable policy: %+v", contradiction)
	}
	answer, ok := raw.mustDeclare("audit", wire.ModeDurable, wire.QueueOptions{Policy: "replica_accepted:2"}).(*wire.DeclareOKMode)
	if !ok || !answer.Created || answer.Policy != "replica_durable:2" || !hasWarning(answer.Warnings, "deprecated") ||
		len(answer.Warnings) != 1 {
		t.Fatalf("declare with a deprecated policy: %+v", answer)
	}

	// A version 2 session gets FRD2, with the owner's epoch; a version 1
	// session FRD1.
	epoch := connectTo(t, ownerAddress).info("events").Epoch
	if epoch == 0 {
		t.Fatal("the owner's info names no epoch")
	}
	redirectOf := func(frame wire.Frame, version uint16) (wire.Redirect, bool) {
		switch r := frame.(type) {
		case *wire.RedirectEpoch:
			return r.Redirect, version == 2 && r.Epoch == epoch
		case *wire.Redirect:
			return *r, version == 1
		}
		return wire.Redirect{}, false
	}
	for _, id := range c.others(owner) {
		for _, version := range []uint16{1, 2} {
			nonOwner := connectWithVersions(t, c.members[id].config.ClientAddress, version)
			requestID := nonOwner.id()
			nonOwner.send(&wire.GetQueueInfo{RequestID: requestID, Queue: "events"})
			frame := nonOwner.waitFor("redirect", func(frame wire.Frame) bool {
				_, failed := frame.(*wire.ErrorFrame)
				r, ok := redirectOf(frame, version)
				return failed || r.RequestID == requestID && (ok || r.Queue != "")
			})
			redirect, ok := redirectOf(frame, version)
			if !ok || redirect.NodeID != owner || redirect.Address != ownerAddress || redirect.Queue != "events" {
				t.Fatalf("info on %s (version %d) answered %+v; want a redirect to %s at %s, epoch %d",
					id, version, frame, owner, ownerAddress, epoch)
			}
			seqs := nonOwner.publish("events", "x")
			outcomes := nonOwner.awaitOutcomes(seqs)
			if got := outcomes[seqs[0]]; got.confirmed || got.code != wire.CodeNotOwner {
				t.Fatalf("publish on %s: %+v; want not_owner", id, got)
			}
			frame = nonOwner.waitFor("redirect", func(frame wire.Frame) bool {
				r, _ := redirectOf(frame, version)
				return r.Queue != "" && r.RequestID == 0
			})
			if unsolicited, ok := redirectOf(frame, version); !ok || unsolicited.NodeID != owner || unsolicited.Address != ownerAddress {
				t.Fatalf("publish redirect on %s (version %d): %+v", id, version, frame)
			}
		}
	}
	// A queue no catalog lists is unknown on every node, after the node
	// asked the catalog through Raft (its own replica may lag).
	for _, id := range c.order {
		anyNode := connectTo(t, c.members[id].config.ClientAddress)
		requestID := anyNode.id()
		anyNode.send(&wire.GetQueueInfo{RequestID: requestID, Queue: "missing"})
		if refused, ok := anyNode.reply(requestID).(*wire.ErrorFrame); !ok || refused.Code != wire.CodeUnknownQueue {
			t.Fatalf("info of a missing queue on %s: %+v", id, refused)
		}
		seqs := anyNode.publish("missing", "x")
		if got := anyNode.awaitOutcomes(seqs)[seqs[0]]; got.confirmed || got.code != wire.CodeUnknownQueue {
			t.Fatalf("publish to a missing queue on %s: %+v", id, got)
		}
	}
	ownerClient := connectTo(t, ownerAddress)
	ownerClient.mustConfirm("events", wire.BoundaryWritten, "on the owner")
	if info := ownerClient.info("events"); info.Owner != owner || info.Policy != "replica_buffered:2" || info.Ready != 1 {
		t.Fatalf("info on the owner: %+v", info)
	}
}

// connectTo dials a node by address and completes hello.
func connectTo(t *testing.T, address string) *testClient {
	t.Helper()
	return connectWithVersions(t, address, wire.ProtocolVersion)
}

// connectWithVersions is connectTo with a hello offering versions.
func connectWithVersions(t *testing.T, address string, versions ...uint16) *testClient {
	t.Helper()
	conn, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatalf("dial %s: %v", address, err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &testClient{t: t, conn: conn, reader: wire.NewReader(conn, 0), writer: wire.NewWriter(conn, 0)}
	c.helloWith("", "", versions...)
	return c
}

// A queue declared while its owner's broker was down is opened when the
// broker starts, and a request that reaches the owner before the partition
// is open waits for it instead of failing.
func TestClusterOwnerOpensQueuesDeclaredWhileItsBrokerWasDown(t *testing.T) {
	c := startBrokerCluster(t, 3)
	ctx := testContext(t)
	if _, _, err := c.members["node2"].node.Declare(ctx, cluster.QueueDecl{Name: "first", Mode: cluster.ModeDurable}); err != nil {
		t.Fatal(err)
	}
	owner := c.ownerOf("first")
	if err := c.members[owner].broker.Close(); err != nil {
		t.Fatal(err)
	}
	// The catalog stays up (the owner's cluster node still runs): declare
	// through it queues the stopped broker owns.
	var names []string
	for i := 0; len(names) < 2 && i < 30; i++ {
		name := fmt.Sprintf("late-%d", i)
		if _, _, err := c.members[c.others(owner)[0]].node.Declare(ctx, cluster.QueueDecl{Name: name, Mode: cluster.ModeDurable, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
		if c.ownerOf(name) == owner {
			names = append(names, name)
		}
	}
	if len(names) < 2 {
		t.Fatalf("placement gave %s no new queue", owner)
	}
	c.startBroker(owner)
	raw := connectTo(t, c.members[owner].config.ClientAddress)
	for _, name := range names {
		raw.mustConfirm(name, wire.BoundaryDurable, "after restart")
	}
	if _, err := c.dialSDK(c.others(owner)[1]).Publish(ctx, "first", client.Message{Payload: []byte("x")}); err != nil {
		t.Fatalf("publish to a recovered queue through a non-owner: %v", err)
	}
}

// dumpActorsOnFailure logs every actor's summary on every node when the
// test fails, so a stuck replication step shows where it stopped.
func (c *brokerCluster) dumpActorsOnFailure() {
	c.t.Cleanup(func() {
		if !c.t.Failed() {
			return
		}
		for _, id := range c.order {
			member := c.members[id]
			if member.broker == nil {
				continue
			}
			for _, info := range member.broker.Registry().Snapshot() {
				if strings.Contains(info.Path, "/queues/") || strings.Contains(info.Path, "peer") {
					c.t.Logf("%s %s [%s] mailbox=%d: %s", id, info.Path, info.Kind, info.MailboxDepth, info.Summary)
				}
			}
		}
	})
}
