package acceptance

// A cluster of real `fibril serve --config FILE --node ID` processes, one
// per test host (netns_test.go): node I runs in host fibI and binds every
// address on 10.77.0.I (clients 7420, peers 7430, Raft 7440, HTTP 7480;
// each host has its own port space). The test and its clients stay in the
// root namespace and reach every host over the bridge.
//
// Each trial gets a directory of its own: the generated config, each
// node's data dir and each node's log (every start of the node appends to
// it, after a line naming the start). The directory is removed when the
// trial passes (unless FIBRIL_KEEP_TRIALS=1) and kept, with its path and
// the seed in the test log, when it fails.
//
// Operations: startAll launches every node before waiting for any ready
// line (a new cluster's nodes must find each other while they start);
// kill (SIGKILL), pause (SIGSTOP) and resume (SIGCONT), restart on the same
// data dir, wipe (kill, remove the data dir, restart), stopAll (SIGTERM,
// every exit status checked). A watcher per process restarts a node that
// exited without the harness asking and records it (selfExits); the test
// fails on any.
//
// Every process started is registered (runningProcesses), so TestMain can
// prove that none outlives the tests.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/cluster"
)

// Ports every node binds on its host's address.
const (
	hostClientPort = 7420
	hostPeerPort   = 7430
	hostRaftPort   = 7440
	hostHTTPPort   = 7480
)

// runningProcesses registers every node process alive, by pid.
var runningProcesses = struct {
	mu   sync.Mutex
	pids map[int]string
}{pids: map[int]string{}}

func registerProcess(pid int, name string) {
	runningProcesses.mu.Lock()
	defer runningProcesses.mu.Unlock()
	runningProcesses.pids[pid] = name
}

func unregisterProcess(pid int) {
	runningProcesses.mu.Lock()
	defer runningProcesses.mu.Unlock()
	delete(runningProcesses.pids, pid)
}

// leftoverProcesses kills and lists every registered process still alive.
func leftoverProcesses() []string {
	runningProcesses.mu.Lock()
	defer runningProcesses.mu.Unlock()
	var left []string
	for pid, name := range runningProcesses.pids {
		if syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			left = append(left, fmt.Sprintf("%s (pid %d)", name, pid))
		}
	}
	return left
}

// procClusterOptions shape a cluster of processes.
type procClusterOptions struct {
	nodes int
	rtt   time.Duration // Raft tick
	// snapshotEntries and compactionOverhead, when set, make Raft
	// snapshot and compact often (a node cut off long enough then catches
	// up from a snapshot).
	snapshotEntries, compactionOverhead uint64
	// segmentBytes, checkpointRecords and followerRetentionHold, when
	// set, are passed to every node (fibril serve --segment-bytes,
	// --checkpoint-records, --follower-retention-hold): small values make
	// an owner checkpoint, compact, and stop holding its log for a
	// stopped follower within seconds.
	segmentBytes          int64
	checkpointRecords     int
	followerRetentionHold time.Duration
}

// procCluster is a running cluster of processes.
type procCluster struct {
	t       *testing.T
	hosts   *netHosts
	binary  string
	dir     string
	config  string
	options procClusterOptions
	nodes   []*procNode

	exitsMu   sync.Mutex
	selfExits []string
	// closed is set when the test's cleanup kills the nodes: a watcher
	// restarts nothing from then on.
	closed atomic.Bool
}

// procNode is one node: its addresses, its data dir and its process.
type procNode struct {
	c       *procCluster
	index   int // host number, from 1
	id      string
	host    string
	dataDir string
	logPath string

	mu      sync.Mutex // held across every change of the process
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	asked   bool // the harness asked it to exit
	paused  bool
	starts  int
	// rejoinEmpty says the harness wiped the data dir on purpose: the
	// next start passes --rejoin-empty (a node refuses to start on an
	// empty data dir the cluster knows without it).
	rejoinEmpty bool
}

func (n *procNode) clientAddress() string { return fmt.Sprintf("%s:%d", n.host, hostClientPort) }
func (n *procNode) httpAddress() string   { return fmt.Sprintf("%s:%d", n.host, hostHTTPPort) }

// newProcCluster writes the config of a new cluster on the hosts into a
// fresh trial directory; nothing runs yet.
func newProcCluster(t *testing.T, hosts *netHosts, name string, options procClusterOptions) *procCluster {
	t.Helper()
	if options.nodes == 0 {
		options.nodes = hosts.count
	}
	if options.rtt == 0 {
		options.rtt = clusterRTT(t)
	}
	if err := hosts.healAll(); err != nil { // a failed trial before may have left a cut
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fibril-faults-"+sanitize(name)+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &procCluster{t: t, hosts: hosts, binary: fibrilBinary(t), dir: dir, options: options}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("FIBRIL_KEEP_TRIALS") == "1" {
			t.Logf("kept the trial's config, data dirs and node logs in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	for i := 1; i <= options.nodes; i++ {
		c.nodes = append(c.nodes, &procNode{c: c, index: i, id: fmt.Sprintf("node%d", i), host: hosts.address(i),
			dataDir: filepath.Join(dir, fmt.Sprintf("node%d", i)), logPath: filepath.Join(dir, fmt.Sprintf("node%d.log", i))})
	}
	c.config = filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(c.config, c.configJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.killAll)
	return c
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, name)
}

// clusterRTT is the Raft tick of the clusters: FIBRIL_CLUSTER_RTT or 10ms.
func clusterRTT(t *testing.T) time.Duration {
	if text := os.Getenv("FIBRIL_CLUSTER_RTT"); text != "" {
		d, err := time.ParseDuration(text)
		if err != nil || d < time.Millisecond {
			t.Fatalf("FIBRIL_CLUSTER_RTT=%q: want a duration of at least 1ms", text)
		}
		return d
	}
	return 10 * time.Millisecond
}

// raftLogLevel is the level of dragonboat's lines in the node logs:
// FIBRIL_CLUSTER_RAFT_LOG (debug, info, warn, error) or error.
func raftLogLevel() string {
	if level := os.Getenv("FIBRIL_CLUSTER_RAFT_LOG"); level != "" {
		return level
	}
	return "error"
}

// clusterSecret is the peer-link secret the configs carry where the
// cluster config has one (it is required there).
const clusterSecret = "acceptance-cluster-secret"

// configHasSecret reports whether this build's cluster config takes a
// secret: the binaries under test are built from the same tree.
func configHasSecret() bool {
	_, has := reflect.TypeFor[cluster.ClusterSettings]().FieldByName("Secret")
	return has
}

func (c *procCluster) configJSON() []byte {
	type nodeJSON struct {
		ID            string `json:"id"`
		ClientAddress string `json:"client_address"`
		PeerAddress   string `json:"peer_address"`
		RaftAddress   string `json:"raft_address"`
		HTTPAddress   string `json:"http_address"`
		DataDir       string `json:"data_dir"`
	}
	var nodes []nodeJSON
	for _, n := range c.nodes {
		nodes = append(nodes, nodeJSON{ID: n.id, ClientAddress: n.clientAddress(),
			PeerAddress: fmt.Sprintf("%s:%d", n.host, hostPeerPort), RaftAddress: fmt.Sprintf("%s:%d", n.host, hostRaftPort),
			HTTPAddress: n.httpAddress(), DataDir: n.dataDir})
	}
	raft := map[string]any{"rtt": c.options.rtt.String(), "election_rtt": 10, "heartbeat_rtt": 1, "log_level": raftLogLevel()}
	if c.options.snapshotEntries > 0 {
		raft["snapshot_entries"], raft["compaction_overhead"] = c.options.snapshotEntries, c.options.compactionOverhead
	}
	settings := map[string]any{"deployment_id": 1, "default_replicas": min(3, len(c.nodes)),
		"background_sync_interval": "100ms", "raft": raft}
	if configHasSecret() {
		settings["secret"] = clusterSecret
	}
	data, err := json.MarshalIndent(map[string]any{"cluster": settings, "nodes": nodes}, "", "  ")
	if err != nil {
		panic(err)
	}
	return data
}

// electionTimeout is the Raft election timeout of the config.
func (c *procCluster) electionTimeout() time.Duration { return 10 * c.options.rtt }

func (c *procCluster) node(id string) *procNode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %s", id)
	return nil
}

func (c *procCluster) addresses() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.clientAddress())
	}
	return out
}

// startAll launches every node, then waits for each to serve.
func (c *procCluster) startAll() {
	c.t.Helper()
	ready := make([]<-chan struct{}, len(c.nodes))
	for i, n := range c.nodes {
		n.mu.Lock()
		var err error
		ready[i], err = n.launchLocked()
		n.mu.Unlock()
		if err != nil {
			c.t.Fatal(err)
		}
	}
	for i, n := range c.nodes {
		if err := n.awaitReady(ready[i]); err != nil {
			c.t.Fatal(err)
		}
	}
}

// launchLocked starts the process and returns a channel closed at its
// ready line. n.mu is held.
func (n *procNode) launchLocked() (<-chan struct{}, error) {
	n.starts++
	logFile, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "=== harness: start %d of %s at %s\n", n.starts, n.id, time.Now().Format(time.RFC3339Nano))
	args := []string{"serve", "--config", n.c.config, "--node", n.id,
		"--log-level", "info", "--http-allow-non-loopback", "--allow-insecure-listen"}
	if o := n.c.options; o.segmentBytes > 0 {
		args = append(args, "--segment-bytes", strconv.FormatInt(o.segmentBytes, 10))
	}
	if o := n.c.options; o.checkpointRecords > 0 {
		args = append(args, "--checkpoint-records", strconv.Itoa(o.checkpointRecords))
	}
	if o := n.c.options; o.followerRetentionHold > 0 {
		args = append(args, "--follower-retention-hold", o.followerRetentionHold.String())
	}
	if n.rejoinEmpty {
		args = append(args, "--rejoin-empty")
		n.rejoinEmpty = false // one start: from then on the data dir holds the node's identity
	}
	cmd := n.c.hosts.command(n.index, n.c.binary, args...)
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", n.id, err)
	}
	registerProcess(cmd.Process.Pid, n.id)
	exited := make(chan struct{})
	n.cmd, n.exited, n.waitErr, n.asked, n.paused = cmd, exited, nil, false, false
	ready := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(stdout)
		readyOnce := sync.OnceFunc(func() { close(ready) })
		for scanner.Scan() {
			fmt.Fprintln(logFile, scanner.Text())
			if strings.HasPrefix(scanner.Text(), "fibril: serving clients on ") {
				readyOnce()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		unregisterProcess(cmd.Process.Pid)
		fmt.Fprintf(logFile, "=== harness: %s exited at %s: %v\n", n.id, time.Now().Format(time.RFC3339Nano), err)
		_ = logFile.Close()
		n.watchExit(cmd, exited, err)
	}()
	return ready, nil
}

// watchExit records the exit; one the harness did not ask for is a self
// exit: recorded, and the node is started again on the same data dir.
func (n *procNode) watchExit(cmd *exec.Cmd, exited chan struct{}, err error) {
	n.mu.Lock()
	if n.cmd != cmd {
		n.mu.Unlock()
		return
	}
	n.waitErr = err
	close(exited)
	asked := n.asked
	n.mu.Unlock()
	if asked {
		return
	}
	n.c.exitsMu.Lock()
	n.c.selfExits = append(n.c.selfExits, fmt.Sprintf("%s exited on its own at %s (%v); log tail:\n%s",
		n.id, time.Now().Format(time.RFC3339Nano), err, n.logTail()))
	n.c.exitsMu.Unlock()
	time.Sleep(200 * time.Millisecond) // a crash loop must not starve the machine
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == cmd && !n.c.closed.Load() {
		// The watcher does not wait for the ready line: the next
		// operation on the node, or the convergence check, does.
		if _, err := n.launchLocked(); err != nil {
			n.c.exitsMu.Lock()
			n.c.selfExits = append(n.c.selfExits, fmt.Sprintf("%s: restart after its exit failed: %v", n.id, err))
			n.c.exitsMu.Unlock()
		}
	}
}

func (n *procNode) awaitReady(ready <-chan struct{}) error {
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("%s exited before serving (%v); log tail:\n%s", n.id, n.waitErr, n.logTail())
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s did not serve within 60 s; log tail:\n%s", n.id, n.logTail())
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (n *procNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.killLocked()
}

func (n *procNode) killLocked() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.exited:
		return
	default:
	}
	n.asked = true
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	exited := n.exited
	n.mu.Unlock()
	<-exited
	n.mu.Lock()
}

// pause sends SIGSTOP; resume SIGCONT.
func (n *procNode) pause() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		n.c.t.Errorf("SIGSTOP %s: %v", n.id, err)
	}
	n.paused = true
}

func (n *procNode) resume() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		n.c.t.Errorf("SIGCONT %s: %v", n.id, err)
	}
	n.paused = false
}

// restart starts the (dead) node again on its data dir and waits until it
// serves.
func (n *procNode) restart() error {
	n.mu.Lock()
	n.killLocked()
	ready, err := n.launchLocked()
	n.mu.Unlock()
	if err != nil {
		return err
	}
	return n.awaitReady(ready)
}

// wipe kills the node, removes its data dir and starts it again.
func (n *procNode) wipe() error {
	if err := n.killAndWipe(); err != nil {
		return err
	}
	return n.restart()
}

// killAndWipe kills the node and removes its data dir; its next start
// passes --rejoin-empty.
func (n *procNode) killAndWipe() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.killLocked()
	if err := os.RemoveAll(n.dataDir); err != nil {
		return err
	}
	n.rejoinEmpty = true
	return nil
}

// stop asks for a clean shutdown and returns the exit status's error.
func (n *procNode) stop() error {
	n.mu.Lock()
	if n.cmd == nil {
		n.mu.Unlock()
		return nil
	}
	select {
	case <-n.exited:
		n.mu.Unlock()
		return nil
	default:
	}
	n.asked = true
	if n.paused {
		_ = n.cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	exited := n.exited
	n.mu.Unlock()
	select {
	case <-exited:
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.waitErr
	case <-time.After(30 * time.Second):
		n.kill()
		return fmt.Errorf("%s did not stop within 30 s of SIGTERM", n.id)
	}
}

// running reports whether the process is alive (paused counts).
func (n *procNode) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (n *procNode) logTail() string {
	data, _ := os.ReadFile(n.logPath)
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(data)
}

// stopAll stops every node cleanly and fails the test on an exit status
// other than 0.
func (c *procCluster) stopAll() {
	c.t.Helper()
	var wait sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		wait.Add(1)
		go func() {
			defer wait.Done()
			errs[i] = n.stop()
		}()
	}
	wait.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Errorf("%s: clean stop: %v; log tail:\n%s", c.nodes[i].id, err, c.nodes[i].logTail())
		}
	}
}

// killAll kills whatever still runs (test cleanup).
func (c *procCluster) killAll() {
	c.closed.Store(true)
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.cmd != nil && n.paused {
			_ = n.cmd.Process.Signal(syscall.SIGCONT)
		}
		n.killLocked()
		n.mu.Unlock()
	}
}

// takeSelfExits returns the self exits recorded so far.
func (c *procCluster) takeSelfExits() []string {
	c.exitsMu.Lock()
	defer c.exitsMu.Unlock()
	out := c.selfExits
	c.selfExits = nil
	return out
}

// nodeView is the part of GET /api/cluster the harness reads.
type nodeView struct {
	NodeID          string `json:"node_id"`
	CatalogRevision uint64 `json:"catalog_revision"`
	CatalogLeader   string `json:"catalog_leader"`
	Queues          []struct {
		Name       string `json:"name"`
		Partitions []struct {
			Replicas []string `json:"replicas"`
			Owner    string   `json:"owner"`
			Epoch    uint64   `json:"epoch"`
		} `json:"partitions"`
	} `json:"queues"`
}

func (v nodeView) owner(queue string) (string, uint64) {
	for _, q := range v.Queues {
		if q.Name == queue && len(q.Partitions) > 0 {
			return q.Partitions[0].Owner, q.Partitions[0].Epoch
		}
	}
	return "", 0
}

var viewClient = &http.Client{Timeout: 2 * time.Second}

// view reads a node's /api/cluster.
func (n *procNode) view() (nodeView, error) {
	var view nodeView
	response, err := viewClient.Get("http://" + n.httpAddress() + "/api/cluster")
	if err != nil {
		return view, err
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusOK {
		return view, fmt.Errorf("%s /api/cluster: %s %s", n.id, response.Status, body)
	}
	if err := json.Unmarshal(body, &view); err != nil {
		return view, fmt.Errorf("%s /api/cluster: %w", n.id, err)
	}
	return view, nil
}

// agreement is what every node agreed on at one moment.
type agreement struct {
	leader string
	owners map[string]string // queue: owner
	epochs map[string]uint64
}

// converge waits until every node answers, names the same live catalog
// leader and revision, and the same owner and epoch for each queue, and
// returns that.
func (c *procCluster) converge(ctx context.Context, queues []string) (agreement, error) {
	var last string
	for {
		views := make([]nodeView, 0, len(c.nodes))
		var problem string
		for _, n := range c.nodes {
			view, err := n.view()
			if err != nil {
				problem = err.Error()
				break
			}
			views = append(views, view)
		}
		if problem == "" {
			problem = agreeOn(views, queues)
		}
		if problem == "" {
			a := agreement{leader: views[0].CatalogLeader, owners: map[string]string{}, epochs: map[string]uint64{}}
			for _, queue := range queues {
				a.owners[queue], a.epochs[queue] = views[0].owner(queue)
			}
			return a, nil
		}
		last = problem
		select {
		case <-ctx.Done():
			return agreement{}, fmt.Errorf("the nodes did not agree: %s", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// agreeOn returns "" when the views agree, else what differs.
func agreeOn(views []nodeView, queues []string) string {
	first := views[0]
	if first.CatalogLeader == "" || !slices.ContainsFunc(views, func(v nodeView) bool { return v.NodeID == first.CatalogLeader }) {
		return fmt.Sprintf("%s names catalog leader %q", first.NodeID, first.CatalogLeader)
	}
	for _, view := range views[1:] {
		if view.CatalogLeader != first.CatalogLeader || view.CatalogRevision != first.CatalogRevision {
			return fmt.Sprintf("%s: leader %q revision %d; %s: leader %q revision %d", first.NodeID, first.CatalogLeader,
				first.CatalogRevision, view.NodeID, view.CatalogLeader, view.CatalogRevision)
		}
	}
	for _, queue := range queues {
		owner, epoch := first.owner(queue)
		if owner == "" {
			return fmt.Sprintf("%s: no owner for %s", first.NodeID, queue)
		}
		for _, view := range views[1:] {
			if o, e := view.owner(queue); o != owner || e != epoch {
				return fmt.Sprintf("%s: %s owned by %s at epoch %d; %s: by %q at epoch %d", first.NodeID, queue, owner,
					epoch, view.NodeID, o, e)
			}
		}
	}
	return ""
}

// metric reads one series of a node's /metrics: the value of family with
// the label queue="queue" (0 when the node has no such series yet).
func (n *procNode) metric(family, queue string) (float64, error) {
	response, err := viewClient.Get("http://" + n.httpAddress() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		return 0, err
	}
	if response.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s /metrics: %s %s", n.id, response.Status, body)
	}
	label := fmt.Sprintf(`queue=%q`, queue)
	for _, line := range strings.Split(string(body), "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(series, family+"{") || !strings.Contains(series, label) {
			continue
		}
		parsed, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("%s /metrics: %q: %w", n.id, line, err)
		}
		return parsed, nil
	}
	return 0, nil
}

// firstRetained is the base offset of the oldest segment file of the
// node's copy of queue (<data_dir>/queues/NAME/0/log/<base>.log): every
// record below it is compacted away on that node.
func (n *procNode) firstRetained(queue string) (uint64, error) {
	dir := filepath.Join(n.dataDir, "queues", queue, "0", "log")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	first, found := uint64(0), false
	for _, entry := range entries {
		stem, ok := strings.CutSuffix(entry.Name(), ".log")
		if !ok || len(stem) != 20 {
			continue
		}
		base, err := strconv.ParseUint(stem, 10, 64)
		if err != nil {
			continue
		}
		if !found || base < first {
			first, found = base, true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s: no segment file in %s", n.id, dir)
	}
	return first, nil
}

// awaitReplicasOpened waits until the node's log says, since its last
// start, that it opened its copy of every queue named (at most timeout).
func (n *procNode) awaitReplicasOpened(queues []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(n.logPath)
		if err != nil {
			return err
		}
		text := string(data)
		if at := strings.LastIndex(text, "=== harness: start "); at >= 0 {
			text = text[at:]
		}
		var missing []string
		for _, queue := range queues {
			if !strings.Contains(text, fmt.Sprintf(`msg="opening this node's replica of a queue" queue=%s `, queue)) {
				missing = append(missing, queue)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not open its copies of %v within %v", n.id, missing, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
