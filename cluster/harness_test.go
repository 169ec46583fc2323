package cluster

// An in-process cluster for tests. By default every node keeps its Raft
// logs in its own in-memory filesystem (vfs.NewStrictMem) and talks over
// dragonboat's channel transport, so a test needs no disk and no ports;
// a restarted node gets its old filesystem back. withTCP switches to real
// loopback ports and temporary directories.
//
// Set FIBRIL_CLUSTER_LOG=1 to see the nodes' and dragonboat's log lines.

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	chantransport "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/vfs"
)

// chanTransportFactory is the channel transport with an address validator
// that accepts anything (the upstream Validate panics).
type chanTransportFactory struct {
	chantransport.ChanTransportFactory
}

func (*chanTransportFactory) Validate(string) bool { return true }

// fakePorts hands out distinct port numbers for channel-transport addresses,
// which the channel transport uses as names only; distinct names keep tests
// in one process apart.
var fakePorts atomic.Int64

func init() { fakePorts.Store(20000) }

// TestMain silences the standard logger unless FIBRIL_CLUSTER_LOG is set:
// the Raft log store writes there directly, and on the in-memory
// filesystem it reports every failed disk-usage query (which only the real
// disk supports).
func TestMain(m *testing.M) {
	if os.Getenv("FIBRIL_CLUSTER_LOG") == "" {
		log.SetOutput(io.Discard)
	}
	os.Exit(m.Run())
}

type testCluster struct {
	t       *testing.T
	config  *Config
	useTCP  bool
	dataDir string
	fs      map[string]vfs.FS
	nodes   map[string]*Node
	// builtin names the nodes that run dragonboat's own TCP transport.
	builtin map[string]bool
}

type clusterOption func(*Config)

// withRaft sets the Raft timing.
func withRaft(rtt time.Duration, electionRTT uint64) clusterOption {
	return func(c *Config) {
		c.Cluster.Raft.RTT = Duration(rtt)
		c.Cluster.Raft.ElectionRTT = electionRTT
	}
}

func newMemoryCluster(t *testing.T, nodeCount int, options ...clusterOption) *testCluster {
	return newTestCluster(t, nodeCount, false, options...)
}

func newTCPCluster(t *testing.T, nodeCount int, options ...clusterOption) *testCluster {
	return newTestCluster(t, nodeCount, true, options...)
}

func newTestCluster(t *testing.T, nodeCount int, useTCP bool, options ...clusterOption) *testCluster {
	cluster := &testCluster{t: t, useTCP: useTCP, fs: map[string]vfs.FS{}, nodes: map[string]*Node{}}
	cfg := &Config{Cluster: ClusterSettings{Secret: testSecret, Raft: RaftSettings{RTT: Duration(10 * time.Millisecond), ElectionRTT: 10, CoordinationElectionRTT: 10}}}
	var addresses []string
	if useTCP {
		cluster.dataDir = t.TempDir()
		addresses = freePorts(t, 4*nodeCount)
	}
	for index := range nodeCount {
		id := fmt.Sprintf("node%d", index+1)
		node := NodeConfig{ID: id, DataDir: "/" + id}
		if useTCP {
			node.DataDir = filepath.Join(cluster.dataDir, id)
			own := addresses[4*index : 4*index+4]
			node.ClientAddress, node.PeerAddress = own[0], own[1]
			node.RaftAddress, node.HTTPAddress = own[2], own[3]
		} else {
			base := fakePorts.Add(4)
			node.ClientAddress = fmt.Sprintf("127.0.0.1:%d", base)
			node.PeerAddress = fmt.Sprintf("127.0.0.1:%d", base+1)
			node.RaftAddress = fmt.Sprintf("127.0.0.1:%d", base+2)
			node.HTTPAddress = fmt.Sprintf("127.0.0.1:%d", base+3)
			cluster.fs[id] = vfs.NewStrictMem()
		}
		cfg.Nodes = append(cfg.Nodes, node)
	}
	for _, option := range options {
		option(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	cluster.config = cfg
	t.Cleanup(cluster.closeAll)
	return cluster
}

// freePorts returns n distinct loopback addresses whose ports were free a
// moment ago. Every listener stays open until all are chosen: closing each
// at once let the kernel hand the same port out twice.
func freePorts(t testing.TB, n int) []string {
	t.Helper()
	addresses := make([]string, 0, n)
	for range n {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		defer listener.Close()
		addresses = append(addresses, listener.Addr().String())
	}
	return addresses
}

func testLogger() *slog.Logger {
	if os.Getenv("FIBRIL_CLUSTER_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (c *testCluster) startOptions(id string) StartOptions {
	options := StartOptions{Logger: testLogger()}
	if !c.useTCP {
		options.FS = c.fs[id]
		options.TransportFactory = &chanTransportFactory{}
	}
	options.BuiltinRaftTransport = c.builtin[id]
	return options
}

func (c *testCluster) start(id string) *Node {
	c.t.Helper()
	node, err := Start(c.config, id, c.startOptions(id))
	if err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	c.nodes[id] = node
	return node
}

func (c *testCluster) startAll() {
	for _, node := range c.config.Nodes {
		c.start(node.ID)
	}
}

func (c *testCluster) stop(id string) {
	if node := c.nodes[id]; node != nil {
		node.Close()
		delete(c.nodes, id)
	}
}

func (c *testCluster) closeAll() {
	for id := range c.nodes {
		c.stop(id)
	}
}

func (c *testCluster) node(id string) *Node {
	c.t.Helper()
	node := c.nodes[id]
	if node == nil {
		c.t.Fatalf("node %s is not running", id)
	}
	return node
}

// running lists the running nodes in config order.
func (c *testCluster) running() []*Node {
	var nodes []*Node
	for _, config := range c.config.Nodes {
		if node := c.nodes[config.ID]; node != nil {
			nodes = append(nodes, node)
		}
	}
	return nodes
}

func (c *testCluster) waitReady(timeout time.Duration) {
	c.t.Helper()
	for _, node := range c.running() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := node.WaitReady(ctx)
		cancel()
		if err != nil {
			c.t.Fatalf("%s not ready: %v", node.ID(), err)
		}
	}
}

// catalogLeader returns the catalog leader as the running nodes agree on it.
func (c *testCluster) catalogLeader(timeout time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		leader := ""
		agreed := true
		for _, node := range c.running() {
			seen := node.Status().CatalogLeader
			if seen == "" || (leader != "" && seen != leader) || c.nodes[seen] == nil {
				agreed = false
				break
			}
			leader = seen
		}
		if agreed && leader != "" {
			return leader
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("running nodes did not agree on a live catalog leader within %s", timeout)
	return ""
}

var _ config.TransportFactory = (*chanTransportFactory)(nil)

// testSecret is the peer-link secret of every test cluster.
const testSecret = "test-cluster-secret"

// waitFor polls done until it holds or testTimeout passes.
func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
