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
// of each queue filesystem, wait for every publish outcome, end the lives
// of the queues that lost their serving copy, close the old brokers and
// nodes (what they write now goes nowhere; their errors are only logged),
// reset the Raft filesystems to what was synced, and start the members
// again on what is left, all together when several lost power. Nothing a
// client or a peer saw came after the image was taken.
//
// Corruption (class 8) damages the image of a member while it is down:
// bit flips in, or truncation of, its segment files of the test queues.

import (
	"bytes"
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
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/lni/dragonboat/v4/config"
	chantransport "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	lnivfs "github.com/lni/vfs"
)

// raftNetwork carries the Raft messages of one in-process cluster and
// drops those of members that are down.
type raftNetwork struct {
	mu   sync.Mutex
	down map[string]bool // by Raft address
}

var errPoweredOff = errors.New("acceptance: the member lost power")

func (n *raftNetwork) blocked(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.down[from] || n.down[to]
}

func (n *raftNetwork) setDown(address string, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[address] = down
}

// networkTransport is the channel transport of one member through the
// network.
type networkTransport struct {
	network *raftNetwork
	self    string
}

func (f *networkTransport) Create(nhConfig config.NodeHostConfig, handler raftio.MessageHandler,
	chunkHandler raftio.ChunkHandler) raftio.ITransport {
	self, network := f.self, f.network
	inner := chantransport.NewChanTransport(nhConfig,
		func(batch pb.MessageBatch) {
			if !network.blocked(batch.SourceAddress, self) {
				handler(batch)
			}
		},
		func(chunk pb.Chunk) bool {
			if network.blocked(self, self) {
				return false
			}
			return chunkHandler(chunk)
		})
	return &blockingTransport{ITransport: inner, network: network, self: self}
}

func (*networkTransport) Validate(string) bool { return true }

type blockingTransport struct {
	raftio.ITransport
	network *raftNetwork
	self    string
}

func (t *blockingTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	if t.network.blocked(t.self, target) {
		return nil, errPoweredOff
	}
	conn, err := t.ITransport.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &blockingConnection{IConnection: conn, transport: t, target: target}, nil
}

func (t *blockingTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	if t.network.blocked(t.self, target) {
		return nil, errPoweredOff
	}
	conn, err := t.ITransport.GetSnapshotConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &blockingSnapshotConnection{ISnapshotConnection: conn, transport: t, target: target}, nil
}

type blockingConnection struct {
	raftio.IConnection
	transport *blockingTransport
	target    string
}

func (c *blockingConnection) SendMessageBatch(batch pb.MessageBatch) error {
	if c.transport.network.blocked(c.transport.self, c.target) {
		return errPoweredOff
	}
	return c.IConnection.SendMessageBatch(batch)
}

type blockingSnapshotConnection struct {
	raftio.ISnapshotConnection
	transport *blockingTransport
	target    string
}

func (c *blockingSnapshotConnection) SendChunk(chunk pb.Chunk) error {
	if c.transport.network.blocked(c.transport.self, c.target) {
		return errPoweredOff
	}
	return c.ISnapshotConnection.SendChunk(chunk)
}

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
		RTT: cluster.Duration(10 * time.Millisecond), ElectionRTT: 10, HeartbeatRTT: 1}}
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
		if t.Failed() {
			c.dumpFilesystems()
			t.Logf("kept the members' logs and filesystems in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	c.startMembers(c.members)
	return c
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
	l.awaitOutcomes(30 * time.Second)
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
		fmt.Fprintf(m.logFile, "=== harness: power lost at %s\n", time.Now().Format(time.RFC3339Nano))
		c.closeMember(m, true)
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

// memTrial is one trial on an in-process cluster.
type memTrial struct {
	t      *testing.T
	random *rand.Rand
	class  string
	mc     *memCluster
	h      *History
	load   *clusterLoad
	admin  *client.Client
	queues []string
	roles  agreement
}

// startMemTrial starts three members, places the test queues on a member
// that is not the catalog leader and starts the traffic.
func startMemTrial(t *testing.T, class string, random *rand.Rand) *memTrial {
	t.Helper()
	mc := startMemCluster(t, class, 3)
	r := &memTrial{t: t, random: random, class: class, mc: mc, h: NewHistory()}
	traffic := clusterLoadConfig{payloadBytes: 128, ratePerQueue: 50, prefetch: 32, sampleEvery: 20 * time.Millisecond,
		pauseEvery: 200 * time.Millisecond, pauseFor: 150 * time.Millisecond, addresses: mc.addresses(), dial: mc.dial}
	r.admin = dialClient(t, traffic.clientOptions("admin", 0, &errorLog{}, &atomic.Int64{}))
	t.Cleanup(func() { _ = r.admin.Close() })
	roles := mc.converge(nil)
	var candidates []string
	for _, m := range mc.members {
		if m.config.ID != roles.leader {
			candidates = append(candidates, m.config.ID)
		}
	}
	target := candidates[random.IntN(len(candidates))]
	traffic.queues = placeQueuesOn(t, r.admin, target, clusterQueueSpecs, len(mc.members))
	for _, q := range traffic.queues {
		r.queues = append(r.queues, q.name)
	}
	r.roles = mc.converge(r.queues)
	r.load = startClusterLoad(t, r.h, traffic)
	time.Sleep(time.Second)
	return r
}

// ownerAndFollowers returns the member owning the test queues and the
// others.
func (r *memTrial) ownerAndFollowers() (*memMember, []*memMember) {
	r.roles = r.mc.converge(r.queues)
	owner := r.mc.member(r.roles.owners[r.queues[0]])
	var followers []*memMember
	for _, m := range r.mc.members {
		if m != owner {
			followers = append(followers, m)
		}
	}
	return owner, followers
}

// crashOptions keeps only synced bytes, or in one trial of four a random
// prefix of the unsynced writes with the last one torn.
func (r *memTrial) crashOptions() vfs.CrashOptions {
	if r.random.IntN(4) == 0 {
		return vfs.CrashOptions{Rand: r.random, TearLastWrite: true}
	}
	return vfs.CrashOptions{}
}

// powerLoss runs one power loss of victims as a recorded fault.
func (r *memTrial) powerLoss(name string, victims []*memMember, damage func(*memMember, *vfs.Mem)) {
	r.t.Helper()
	time.Sleep(time.Duration(300+r.random.IntN(700)) * time.Millisecond)
	var ids, failover []string
	for _, m := range victims {
		ids = append(ids, m.config.ID)
	}
	if len(victims) < len(r.mc.members) {
		for _, queue := range r.queues {
			if slices.Contains(ids, r.roles.owners[queue]) {
				failover = append(failover, queue)
			}
		}
	}
	index := r.h.FaultStarted(Fault{Class: r.class, Name: name, Nodes: ids, Failover: failover})
	downtime := time.Duration(200+r.random.IntN(800)) * time.Millisecond
	took := r.mc.powerLoss(r.load, victims, r.roles, r.crashOptions(), damage, downtime)
	r.roles = r.mc.converge(r.queues)
	r.h.FaultEnded(index)
	r.t.Logf("%s: %s; down %v, started again in %v", r.class, name, downtime.Round(time.Millisecond), took.Round(time.Millisecond))
}

// finish drains, checks and returns the verdict.
func (r *memTrial) finish() ClusterTrial {
	r.t.Helper()
	r.mc.converge(r.queues)
	time.Sleep(time.Second)
	r.load.drain(90 * time.Second)
	record := r.h.Record()
	trial := CheckCluster(record, r.load.modes())
	for _, result := range trial.Results {
		r.t.Logf("%s", result)
		if result.Confirmed == 0 {
			r.t.Errorf("queue %s: nothing was confirmed, so nothing was tested", result.Queue)
		}
	}
	for _, failover := range trial.Failovers {
		r.t.Logf("failover: %s", failover)
	}
	for _, err := range trial.Errs() {
		r.t.Error(err)
	}
	changes := r.load.ownerChanges()
	for _, queue := range r.queues {
		for _, change := range changes[queue] {
			explained := slices.ContainsFunc(record.Faults, func(f Fault) bool {
				return slices.Contains(f.Failover, queue) && !change.at.Before(f.Start)
			})
			if !explained && !failoverEnabled() {
				r.t.Errorf("%s: owner changed to %s at epoch %d with no fault on its owner", queue, change.owner, change.epoch)
			}
		}
	}
	r.load.close()
	return trial
}

// runMemoryClass runs trials of an in-process class, each a fresh cluster.
func runMemoryClass(t *testing.T, title, variable string, short, long int, waits string,
	body func(r *memTrial)) {
	if waits != "" {
		clusterSummary.Add(ClusterRow{Class: title, Waiting: waits})
		t.Skipf("%s: %s", title, waits)
	}
	if testing.Short() {
		t.Skip("starts in-process clusters")
	}
	seed := testSeed(t)
	row := ClusterRow{Class: title}
	for trial := range trials(t, variable, short, long) {
		trialSeed := seed + uint64(trial)
		ok := t.Run(fmt.Sprintf("trial-%d", trial), func(t *testing.T) {
			r := startMemTrial(t, fmt.Sprintf("%s trial %d", title, trial), newRandom(trialSeed))
			body(r)
			row.AddTrial(r.finish())
		})
		if !ok {
			t.Logf("trial %d failed; replay it alone with FIBRIL_SEED=%d %s=1", trial, trialSeed, variable)
		}
	}
	clusterSummary.Add(row)
}

func waitsUnlessFailover(reason string) string {
	if failoverEnabled() {
		return ""
	}
	return reason
}

// 6. Power loss of one node of the written set: nothing confirmed lost. A
// member that owns none of the queues today; the owner once another copy
// can take over.
func TestClusterPowerLossOfOneNode(t *testing.T) {
	runMemoryClass(t, "6. power loss of one node: a node owning none of the queues", "FIBRIL_CLUSTER_POWER_ONE_TRIALS",
		1, 20, "", func(r *memTrial) {
			_, followers := r.ownerAndFollowers()
			victim := followers[r.random.IntN(len(followers))]
			r.powerLoss("power loss of "+victim.config.ID+" (follower)", []*memMember{victim}, nil)
		})
}

func TestClusterPowerLossOfTheOwner(t *testing.T) {
	runMemoryClass(t, "6. power loss of one node: owner", "FIBRIL_CLUSTER_POWER_OWNER_TRIALS", 1, 20,
		waitsUnlessFailover(waitsForFailover), func(r *memTrial) {
			owner, _ := r.ownerAndFollowers()
			r.powerLoss("power loss of "+owner.config.ID+" (owner)", []*memMember{owner}, nil)
		})
}

// 7. Power loss of every node at once: durable queues lose nothing;
// buffered queues lose at most what was past the last completed sync on
// every copy, and the queue recovers and keeps serving (the drain and the
// calm after it need confirms and deliveries).
func TestClusterPowerLossOfEveryNode(t *testing.T) {
	runMemoryClass(t, "7. power loss of every node at once", "FIBRIL_CLUSTER_POWER_ALL_TRIALS", 1, 20, "",
		func(r *memTrial) {
			r.powerLoss("power loss of every node", r.mc.members, nil)
		})
}

// 8. On-disk corruption of a minority: bit flips in, or truncation of,
// one follower's segment files of the test queues while it is down; then
// the owner loses power, so the damaged copy is one of the two a new
// owner can recover from. It must be detected, not counted as evidence,
// and repaired from the other copy: nothing confirmed is lost, and the
// damaged copy catches up with the owner's.
func TestClusterCorruptionOfAMinority(t *testing.T) {
	runMemoryClass(t, "8. corruption of one follower's segment files", "FIBRIL_CLUSTER_CORRUPTION_TRIALS", 1, 20,
		waitsUnlessFailover(waitsForFailover), func(r *memTrial) {
			owner, followers := r.ownerAndFollowers()
			victim := followers[r.random.IntN(len(followers))]
			truncate := r.random.IntN(2) == 0
			how := "bit flips in"
			if truncate {
				how = "truncation of"
			}
			damaged := 0
			r.powerLoss(fmt.Sprintf("power loss of %s (follower), %s its segment files", victim.config.ID, how),
				[]*memMember{victim}, func(m *memMember, image *vfs.Mem) {
					for _, queue := range r.queues {
						damaged += damageSegments(r.t, r.random, image, queue, truncate)
					}
				})
			if damaged == 0 {
				r.t.Fatalf("%s holds no segment file of the test queues to damage", victim.config.ID)
			}
			r.powerLoss("power loss of "+owner.config.ID+" (owner), after the follower's damage", []*memMember{owner}, nil)
			for _, queue := range r.queues {
				awaitMemReplica(r, queue, victim.config.ID)
			}
		})
}

// damageSegments flips bits in, or truncates, one segment file of queue in
// image and returns how many files it damaged.
func damageSegments(t *testing.T, random *rand.Rand, image *vfs.Mem, queue string, truncate bool) int {
	t.Helper()
	files := segmentFiles(image, queue)
	if len(files) == 0 {
		return 0
	}
	name := files[random.IntN(len(files))]
	data, err := image.ReadFile(name)
	if err != nil || len(data) < 2 {
		return 0
	}
	if truncate {
		data = data[:random.IntN(len(data))]
	} else {
		data = bytes.Clone(data)
		for range 1 + random.IntN(8) {
			data[random.IntN(len(data))] ^= byte(1 << random.IntN(8))
		}
	}
	if err := image.WriteFile(name, data); err != nil {
		t.Fatal(err)
	}
	return 1
}

// awaitMemReplica waits until the owner reports node's copy of queue
// durable up to its own written frontier.
func awaitMemReplica(r *memTrial, queue, node string) {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		owner := r.mc.member(r.mc.converge([]string{queue}).owners[queue])
		if info, ok := owner.broker.QueueInfo(queue); ok {
			for _, replica := range info.Replicas {
				if replica.Node == node && replica.DurableNext >= info.WrittenNext {
					return
				}
				if replica.Node == node {
					last = fmt.Sprintf("durable %d of the owner's written %d", replica.DurableNext, info.WrittenNext)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Errorf("%s's copy of %s did not catch up: %s", node, queue, last)
}
