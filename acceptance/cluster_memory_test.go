package acceptance

// In-process clusters on crash-simulating filesystems, for the faults a
// process cannot simulate: power loss and on-disk corruption. Each member
// is a cluster node (dragonboat on an in-memory Raft filesystem that keeps
// what was synced, lni/vfs StrictMem) and a broker on top of it (queue
// logs on storage/vfs.Mem, whose CrashClone keeps only synced bytes),
// listening for clients on a real loopback port behind a plug
// (memnode_test.go). Raft messages go over dragonboat's channel transport
// through raftNetwork, which drops everything to and from a member that
// lost power.
//
// A power loss of a set of members is, in order: pull their plugs (no
// client sees anything new from them) and take them off the Raft network
// (no peer hears from them), make their Raft filesystems ignore syncs from
// now on, read the frontiers of the queues they own, make every write and
// sync of their queue filesystems fail from now on (so nothing written or
// synced after the image can be acknowledged to a peer: the broker's peer
// links, where they exist, are not cut by the plug), take the crash image
// of each queue filesystem, close the old brokers and nodes at once, as
// the power cut stops their processes (what they write now goes nowhere;
// their errors are only logged; their peer links close with them), wait
// for the outcome of every publish to the queues the victims owned (a
// publish to a surviving owner may wait for a victim's copy), end the
// lives of the queues that lost their serving copy, reset the Raft
// filesystems to what was synced, and start the members again on what is
// left, all together when several lost power. Nothing a client or a peer
// saw came after the image was taken.
//
// Each member logs to <trial dir>/<node>.log. dragonboat's logger is
// process-wide and follows the node started last, so Raft's own lines of
// every member land in that member's log (each names its replica).
//
// Corruption (class 8) damages the image of a member while it is down:
// bit flips in, or truncation of, its segment files of the test queues.
// The Raft network is in cluster_memnet_test.go, the trials and the
// classes in cluster_power_test.go.

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/vfs"
	lnivfs "github.com/lni/vfs"
)

// memMember is one member of an in-process cluster.
type memMember struct {
	c       *memCluster
	config  cluster.NodeConfig
	raftFS  *lnivfs.MemFS
	queueFS *vfs.Mem
	plug    *plug
	node    *cluster.Node
	broker  *actors.Broker
	logFile *os.File
}

// memCluster is an in-process cluster.
type memCluster struct {
	t       *testing.T
	dir     string // logs, and the filesystems of a failed trial
	config  *cluster.Config
	network *raftNetwork
	members []*memMember
}

// chanAddresses hands out distinct names for channel-transport addresses
// (the transport keeps one process-wide table of them).
var chanAddresses atomic.Int64

// startMemCluster starts n members and waits until every catalog answers.
func startMemCluster(t *testing.T, name string, n int) *memCluster {
	t.Helper()
	if os.Getenv("FIBRIL_TEST_LOG") == "" {
		log.SetOutput(io.Discard) // the Raft log store reports every disk-usage query it cannot make on memory
	}
	dir, err := os.MkdirTemp("", "fibril-faults-"+sanitize(name)+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &memCluster{t: t, dir: dir, network: &raftNetwork{down: map[string]bool{}}}
	settings := cluster.ClusterSettings{DefaultReplicas: min(3, n), Raft: cluster.RaftSettings{
		RTT: cluster.Duration(memClusterRTT(t)), ElectionRTT: 10, HeartbeatRTT: 1, LogLevel: raftLogLevel()}}
	if secret := reflect.ValueOf(&settings).Elem().FieldByName("Secret"); secret.IsValid() {
		secret.SetString(clusterSecret)
	}
	c.config = &cluster.Config{Cluster: settings}
	ports := freeAddresses(t, 2*n) // clients and peers listen for real
	for i := range n {
		base := 30000 + chanAddresses.Add(1)*2
		id := fmt.Sprintf("node%d", i+1)
		c.config.Nodes = append(c.config.Nodes, cluster.NodeConfig{ID: id, ClientAddress: ports[2*i],
			PeerAddress: ports[2*i+1], RaftAddress: fmt.Sprintf("chan-raft:%d", base),
			HTTPAddress: fmt.Sprintf("chan-http:%d", base+1), DataDir: "/" + id})
	}
	if err := c.config.Validate(); err != nil {
		t.Fatalf("in-process cluster config: %v", err)
	}
	for _, nodeConfig := range c.config.Nodes {
		logFile, err := os.Create(filepath.Join(dir, nodeConfig.ID+".log"))
		if err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, &memMember{c: c, config: nodeConfig, raftFS: lnivfs.NewStrictMem(),
			queueFS: vfs.NewMem(), plug: &plug{}, logFile: logFile})
	}
	t.Cleanup(func() {
		c.closeAll()
		if t.Failed() || os.Getenv("FIBRIL_KEEP_TRIALS") == "1" {
			c.dumpFilesystems()
			t.Logf("kept the members' logs and filesystems in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	c.startMembers(c.members)
	return c
}

// memClusterRTT is the Raft tick of in-process clusters:
// FIBRIL_MEM_CLUSTER_RTT or 50ms, the config's default. Three NodeHosts in
// one process under the race detector on a shared machine lose ticks at
// 10ms: after a power loss of every member, ticks arrived in batches of
// hundreds and the catalog went a minute without a leader.
func memClusterRTT(t *testing.T) time.Duration {
	if text := os.Getenv("FIBRIL_MEM_CLUSTER_RTT"); text != "" {
		d, err := time.ParseDuration(text)
		if err != nil || d < time.Millisecond {
			t.Fatalf("FIBRIL_MEM_CLUSTER_RTT=%q: want a duration of at least 1ms", text)
		}
		return d
	}
	return cluster.DefaultRaftRTT
}

// freeAddresses returns n distinct loopback addresses whose ports were free
// a moment ago (all held open until every one is chosen).
func freeAddresses(t *testing.T, n int) []string {
	t.Helper()
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
		out = append(out, l.Addr().String())
	}
	return out
}

func (m *memMember) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(m.logFile, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", m.config.ID)
}

// startMembers starts the nodes of members, then their brokers, then
// waits until their catalogs answer.
func (c *memCluster) startMembers(members []*memMember) {
	c.t.Helper()
	for _, m := range members {
		fmt.Fprintf(m.logFile, "=== harness: start at %s\n", time.Now().Format(time.RFC3339Nano))
		node, err := cluster.Start(c.config, m.config.ID, cluster.StartOptions{Logger: m.logger(), FS: m.raftFS,
			TransportFactory: &networkTransport{network: c.network, self: m.config.RaftAddress}})
		if err != nil {
			c.t.Fatalf("start cluster node %s: %v", m.config.ID, err)
		}
		m.node = node
	}
	for _, m := range members {
		config := actors.DefaultConfig()
		config.DataDir, config.ListenAddr, config.HTTPAddr = m.config.DataDir, m.config.ClientAddress, ""
		config.FS, config.Cluster, config.Logger = m.queueFS, m.node, m.logger()
		broker, err := actors.Start(config)
		if err != nil {
			c.t.Fatalf("start broker %s: %v", m.config.ID, err)
		}
		m.broker = broker
		m.plug.restore(broker.Addr().String())
	}
	for _, m := range members {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := m.node.WaitReady(ctx)
		cancel()
		if err != nil {
			c.t.Fatalf("%s: catalog not ready: %v", m.config.ID, err)
		}
	}
}

// closeMember closes a member's broker, then its node. A member that lost
// power has nothing to say at its close: its errors are only logged.
func (c *memCluster) closeMember(m *memMember, powerLost bool) {
	if m.broker != nil {
		err := m.broker.Close()
		switch {
		case err != nil && powerLost:
			fmt.Fprintf(m.logFile, "=== harness: closing the powered-off broker: %v\n", err)
		case err != nil:
			c.t.Errorf("close broker %s: %v", m.config.ID, err)
		}
		m.broker = nil
	}
	if m.node != nil {
		m.node.Close()
		m.node = nil
	}
}

func (c *memCluster) closeAll() {
	for _, m := range c.members {
		c.closeMember(m, false)
	}
}

// dial routes a client connection through the plug of the member whose
// client address it names.
func (c *memCluster) dial(ctx context.Context, address string) (net.Conn, error) {
	for _, m := range c.members {
		if m.config.ClientAddress == address {
			return m.plug.dial(ctx, address)
		}
	}
	var dialer net.Dialer
	return dialer.DialContext(ctx, "tcp", address)
}

func (c *memCluster) addresses() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.config.ClientAddress)
	}
	return out
}

func (c *memCluster) member(id string) *memMember {
	for _, m := range c.members {
		if m.config.ID == id {
			return m
		}
	}
	c.t.Fatalf("no member %s", id)
	return nil
}

// converge waits until every member names the same live catalog leader and
// the same owner and epoch for each queue, and returns that.
func (c *memCluster) converge(queues []string) agreement {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var problem string
	for time.Now().Before(deadline) {
		problem = ""
		a := agreement{owners: map[string]string{}, epochs: map[string]uint64{}}
		for i, m := range c.members {
			leader := m.node.Status().CatalogLeader
			if leader == "" || (i > 0 && leader != a.leader) {
				problem = fmt.Sprintf("%s names catalog leader %q, %s %q", m.config.ID, leader, c.members[0].config.ID, a.leader)
				break
			}
			a.leader = leader
			for _, queue := range queues {
				owner, err := m.node.Owner(queue, 0)
				switch {
				case err != nil:
					problem = fmt.Sprintf("%s: owner of %s: %v", m.config.ID, queue, err)
				case owner.NodeID == "":
					problem = fmt.Sprintf("%s: no owner of %s", m.config.ID, queue)
				case i > 0 && (owner.NodeID != a.owners[queue] || owner.Epoch != a.epochs[queue]):
					problem = fmt.Sprintf("%s: %s owned by %s at %d, elsewhere by %s at %d", m.config.ID, queue,
						owner.NodeID, owner.Epoch, a.owners[queue], a.epochs[queue])
				}
				a.owners[queue], a.epochs[queue] = owner.NodeID, owner.Epoch
			}
			if problem != "" {
				break
			}
		}
		if problem == "" {
			return a
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("the members did not agree within 60 s: %s", problem)
	return agreement{}
}

// sampleOwned records the frontiers of the queues members own, read from
// their brokers directly (after their plugs were pulled: nothing a client
// saw came after this).
func (c *memCluster) sampleOwned(h *History, members []*memMember, owners map[string]string) {
	for queue, owner := range owners {
		for _, m := range members {
			if m.config.ID != owner || m.broker == nil {
				continue
			}
			sent := h.Now()
			if info, ok := m.broker.QueueInfo(queue); ok {
				durable := info.DurableNext
				for _, replica := range info.Replicas {
					durable = max(durable, replica.DurableNext)
				}
				h.Sampled(queue, sent, info.WrittenNext, durable)
			}
		}
	}
}

// powerLoss cuts the power of victims as the file comment says, damages
// each victim's image with damage (when set), keeps them down for
// downtime, and starts them again. Queues whose owner lost power end
// their life: lossy (EndPowerLoss) when every member lost power, a
// failover otherwise.
func (c *memCluster) powerLoss(l *clusterLoad, victims []*memMember, roles agreement, options vfs.CrashOptions,
	damage func(m *memMember, image *vfs.Mem), downtime time.Duration) time.Duration {
	c.t.Helper()
	h := l.h
	for _, m := range victims {
		m.plug.pull()
		c.network.setDown(m.config.RaftAddress, true)
		m.raftFS.SetIgnoreSyncs(true)
	}
	c.sampleOwned(h, victims, roles.owners)
	images := make([]*vfs.Mem, len(victims))
	for i, m := range victims {
		m.queueFS.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite | vfs.FaultSync | vfs.FaultTruncate, Sticky: true})
		images[i] = m.queueFS.CrashClone(options)
		if damage != nil {
			damage(m, images[i])
		}
	}
	// The power is off: the victims' processes stop at once, their peer
	// links with them (a broker left running while the harness waited
	// kept its follower links' keepalives going, so its peers handed the
	// coordination leadership back to it and named it the owner for the
	// whole wait). Their plugs stay pulled: nothing they do on the way
	// down reaches a client, and their disks take no more writes.
	for _, m := range victims {
		fmt.Fprintf(m.logFile, "=== harness: power lost at %s\n", time.Now().Format(time.RFC3339Nano))
		c.closeMember(m, true)
	}
	var lostOwner []string // the queues whose serving copy lost power: their clients were unplugged
	for _, queue := range sortedKeys(roles.owners) {
		if slices.ContainsFunc(victims, func(m *memMember) bool { return m.config.ID == roles.owners[queue] }) {
			lostOwner = append(lostOwner, queue)
		}
	}
	// Their publishes end with the cut connections or are sent again to
	// the new owner, except on a queue that needs every copy (W = E): its
	// new owner holds them until the victim's copy is back, after this
	// wait, so the wait is bounded and what stays open is only logged.
	if open := l.settleOutcomes(10*time.Second, lostOwner...); open > 0 {
		c.t.Logf("%d publishes to %v still open after the power cut (held for a copy that is down)",
			open, lostOwner)
	}
	kind := EndFailover
	if len(victims) == len(c.members) {
		kind = EndPowerLoss
	}
	for _, queue := range sortedKeys(roles.owners) {
		if slices.ContainsFunc(victims, func(m *memMember) bool { return m.config.ID == roles.owners[queue] }) {
			h.QueueLifeEnded(queue, kind, time.Time{})
			if kind == EndFailover {
				h.QueueLifeStarted(queue) // another copy serves on
			}
		}
	}
	for i, m := range victims {
		m.plug.release()
		m.raftFS.ResetToSyncedState()
		m.raftFS.SetIgnoreSyncs(false)
		m.queueFS = images[i]
	}
	time.Sleep(downtime)
	for _, m := range victims {
		c.network.setDown(m.config.RaftAddress, false)
	}
	if kind == EndPowerLoss {
		// Before any broker accepts a client: whatever a client sees from
		// here on belongs to the new lives.
		for _, queue := range sortedKeys(roles.owners) {
			h.QueueLifeStarted(queue)
		}
	}
	began := time.Now()
	c.startMembers(victims)
	return time.Since(began)
}

// powerCycle cuts one member's power as powerLoss does, for a run that
// keeps no history (its clients judge for themselves), keeps it down for
// downtime and starts it again.
func (c *memCluster) powerCycle(m *memMember, options vfs.CrashOptions, downtime time.Duration) {
	c.t.Helper()
	m.plug.pull()
	c.network.setDown(m.config.RaftAddress, true)
	m.raftFS.SetIgnoreSyncs(true)
	m.queueFS.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite | vfs.FaultSync | vfs.FaultTruncate, Sticky: true})
	image := m.queueFS.CrashClone(options)
	m.plug.release()
	fmt.Fprintf(m.logFile, "=== harness: power lost at %s\n", time.Now().Format(time.RFC3339Nano))
	c.closeMember(m, true)
	m.raftFS.ResetToSyncedState()
	m.raftFS.SetIgnoreSyncs(false)
	m.queueFS = image
	time.Sleep(downtime)
	c.network.setDown(m.config.RaftAddress, false)
	c.startMembers([]*memMember{m})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// segmentFiles lists the segment files of queue in a member's filesystem.
func segmentFiles(fs *vfs.Mem, queue string) []string {
	var out []string
	for _, name := range fs.Names() {
		if strings.Contains(name, "/queues/"+queue+"/") && strings.HasSuffix(name, ".log") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// dumpFilesystems writes every member's queue filesystem under dir (the
// Raft filesystems are dragonboat's; their files are not kept).
func (c *memCluster) dumpFilesystems() {
	for _, m := range c.members {
		for _, name := range m.queueFS.Names() {
			data, err := m.queueFS.ReadFile(name)
			if err != nil {
				continue
			}
			target := filepath.Join(c.dir, m.config.ID+"-queues", filepath.FromSlash(name))
			if os.MkdirAll(filepath.Dir(target), 0o755) == nil {
				_ = os.WriteFile(target, data, 0o644)
			}
		}
		_ = m.logFile.Sync()
	}
}
