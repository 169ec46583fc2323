package main

// Cluster tests on the real binaries: three `fibril serve --config FILE
// --node ID` processes from a config like testdata/cluster/three-nodes.json,
// but on free loopback ports and temporary data dirs.
//
// TestMeasureCatalogLeaderKill (FIBRIL_CLUSTER_MEASURE=1) measures the time
// from kill -9 of the catalog leader's process to a successful declare
// through another node; see docs/cluster.md.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

// clusterProcess is one running node of a cluster of binaries.
type clusterProcess struct {
	id, clientAddress, httpAddress string
	dataDir                        string
	cmd                            *exec.Cmd
	stderr                         *lockedBuffer
	// rejoinEmpty starts the node with --rejoin-empty (its data dir was
	// wiped on purpose).
	rejoinEmpty bool
}

type binaryCluster struct {
	t          *testing.T
	binary     string
	configFile string
	nodes      []*clusterProcess
}

// freeAddresses returns n distinct loopback addresses whose ports were
// free a moment ago: all are held open until every one is chosen, so the
// kernel cannot hand out the same port twice.
func freeAddresses(t *testing.T, n int) []string {
	t.Helper()
	addresses := make([]string, 0, n)
	for range n {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer listener.Close()
		addresses = append(addresses, listener.Addr().String())
	}
	return addresses
}

// writeClusterConfig writes a three-node config with free ports and data
// dirs under dir; rtt is the Raft tick (with elections of 10 ticks), or 0
// for the config's defaults.
func writeClusterConfig(t *testing.T, dir string, rtt time.Duration) (string, []*clusterProcess) {
	t.Helper()
	type nodeJSON struct {
		ID            string `json:"id"`
		ClientAddress string `json:"client_address"`
		PeerAddress   string `json:"peer_address"`
		RaftAddress   string `json:"raft_address"`
		HTTPAddress   string `json:"http_address"`
		DataDir       string `json:"data_dir"`
	}
	var nodes []nodeJSON
	var processes []*clusterProcess
	ports := freeAddresses(t, 12)
	for i := 1; i <= 3; i++ {
		port := ports[4*(i-1):]
		node := nodeJSON{ID: fmt.Sprintf("node%d", i), ClientAddress: port[0], PeerAddress: port[1],
			RaftAddress: port[2], HTTPAddress: port[3], DataDir: filepath.Join(dir, fmt.Sprintf("node%d", i))}
		nodes = append(nodes, node)
		processes = append(processes, &clusterProcess{id: node.ID, clientAddress: node.ClientAddress,
			httpAddress: node.HTTPAddress, dataDir: node.DataDir})
	}
	raft := map[string]any{"rtt": rtt.String(), "election_rtt": 10, "heartbeat_rtt": 1,
		"coordination_election_rtt": 10, "coordination_heartbeat_rtt": 1, "log_level": "error"}
	if rtt == 0 {
		raft = map[string]any{"log_level": "error"} // the defaults, as a deployment gets them
	}
	config := map[string]any{
		"cluster": map[string]any{
			"deployment_id": 1, "default_replicas": 3, "background_sync_interval": "100ms",
			"secret": "test-cluster-secret", "raft": raft,
		},
		"nodes": nodes,
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return file, processes
}

// startBinaryClusterWithCtl builds both binaries and starts three nodes
// (RTT 10 ms); it skips under -short.
func startBinaryClusterWithCtl(t *testing.T) (*binaryCluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	ctl := buildBinary(t, dir, "./cmd/fibrilctl", "fibrilctl")
	return startBinaryCluster(t, server, 10*time.Millisecond), ctl
}

func startBinaryCluster(t *testing.T, binary string, rtt time.Duration) *binaryCluster {
	t.Helper()
	dir := t.TempDir()
	configFile, nodes := writeClusterConfig(t, dir, rtt)
	c := &binaryCluster{t: t, binary: binary, configFile: configFile, nodes: nodes}
	// All at once: a new cluster's nodes ask each other whether the cluster
	// is new before any of them serves.
	waits := make([]func(), len(nodes))
	for i, node := range nodes {
		waits[i] = c.launch(node)
	}
	for _, wait := range waits {
		wait()
	}
	return c
}

// start runs one node and waits for its "serving clients" line.
func (c *binaryCluster) start(node *clusterProcess) {
	c.t.Helper()
	c.launch(node)()
}

// launch runs one node and returns the wait for its "serving clients" line.
func (c *binaryCluster) launch(node *clusterProcess) func() {
	c.t.Helper()
	node.stderr = &lockedBuffer{buffer: &bytes.Buffer{}}
	args := []string{"serve", "--config", c.configFile, "--node", node.id}
	if node.rejoinEmpty {
		args = append(args, "--rejoin-empty")
	}
	node.cmd = exec.Command(c.binary, args...)
	node.cmd.Stderr = node.stderr
	if dir := os.Getenv("FIBRIL_TEST_NODE_LOGS"); dir != "" {
		// Every start of every node appends its info log to <dir>/<node>.log.
		file, err := os.OpenFile(filepath.Join(dir, node.id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { _ = file.Close() })
		node.cmd = exec.Command(c.binary, append(args, "--log-level", "info")...)
		node.cmd.Stderr = io.MultiWriter(node.stderr, file)
	}
	stdout, err := node.cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := node.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	process := node.cmd
	c.t.Cleanup(func() { _ = process.Process.Kill(); _ = process.Wait() })
	return func() {
		c.t.Helper()
		lines := bufio.NewScanner(stdout)
		var seen []string
		for lines.Scan() && !strings.HasPrefix(lines.Text(), "fibril: serving clients on ") {
			seen = append(seen, lines.Text())
		}
		if !strings.HasPrefix(lines.Text(), "fibril: serving clients on "+node.clientAddress) {
			_ = process.Process.Kill()
			_ = process.Wait()
			c.t.Fatalf("%s: no ready line after %q; stderr:\n%s", node.id, seen, node.stderr.String())
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
	}
}

func (c *binaryCluster) node(id string) *clusterProcess {
	for _, node := range c.nodes {
		if node.id == id {
			return node
		}
	}
	c.t.Fatalf("no node %s", id)
	return nil
}

// getJSON reads an admin endpoint of a node.
func getJSON(t *testing.T, node *clusterProcess, path string, into any) {
	t.Helper()
	if err := tryGetJSON(node, path, into); err != nil {
		t.Fatal(err)
	}
}

func tryGetJSON(node *clusterProcess, path string, into any) error {
	response, err := http.Get("http://" + node.httpAddress + path)
	if err != nil {
		return fmt.Errorf("%s GET %s: %w", node.id, path, err)
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("%s GET %s: %s %s", node.id, path, response.Status, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("%s GET %s: %w in %s", node.id, path, err, body)
	}
	return nil
}

// clusterView is the part of GET /api/cluster the tests read.
type clusterView struct {
	NodeID          string `json:"node_id"`
	CatalogRevision uint64 `json:"catalog_revision"`
	CatalogLeader   string `json:"catalog_leader"`
	Serving         string `json:"serving"`
	Nodes           []struct {
		ID       string `json:"id"`
		Liveness string `json:"liveness"`
	} `json:"nodes"`
	Shards []struct {
		Kind   string `json:"kind"`
		Leader string `json:"leader"`
	} `json:"shards"`
	Queues []struct {
		Name       string `json:"name"`
		Partitions []struct {
			Replicas []string `json:"replicas"`
			Owner    string   `json:"owner"`
			Epoch    uint64   `json:"epoch"`
		} `json:"partitions"`
	} `json:"queues"`
}

// The real binaries, started from a config like the example: fibrilctl
// declares through one node, publishes and consumes 100 messages through a
// node that does not own the queue (the SDK follows the redirects), info
// names the owner and the replica set, /api/cluster and /api/queues/{name}
// report the cluster, and SIGTERM stops every node cleanly.
func TestBinaryClusterServesThroughANonOwner(t *testing.T) {
	c, ctl := startBinaryClusterWithCtl(t)
	runCtl := func(node *clusterProcess, args ...string) string {
		t.Helper()
		output, err := exec.Command(ctl, append(args, "--server", node.clientAddress)...).CombinedOutput()
		if err != nil {
			t.Fatalf("fibrilctl %v on %s: %v\n%s", args, node.id, err, output)
		}
		return string(output)
	}
	out := runCtl(c.node("node1"), "declare", "orders")
	if !strings.Contains(out, "mode=durable created=true policy=majority_durable") || strings.Contains(out, "warning") {
		t.Fatalf("declare printed %q", out)
	}
	var info struct {
		Owner    string `json:"owner"`
		Epoch    uint64 `json:"epoch"`
		Ready    uint64 `json:"ready"`
		Replicas []struct {
			Node string `json:"node"`
		} `json:"replicas"`
	}
	if err := json.Unmarshal([]byte(runCtl(c.node("node1"), "info", "orders", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Owner == "" || info.Epoch == 0 || len(info.Replicas) != 3 {
		t.Fatalf("info: %+v", info)
	}
	var nonOwners []*clusterProcess
	for _, node := range c.nodes {
		if node.id != info.Owner {
			nonOwners = append(nonOwners, node)
		}
	}
	nonOwner := nonOwners[0]
	if out := runCtl(nonOwner, "publish", "orders", "--count", "100"); !strings.Contains(out, "confirmed 100") {
		t.Fatalf("publish through %s printed %q", nonOwner.id, out)
	}
	// The owner reports every copy: at least two (majority_durable of
	// three) hold the 100 confirmed messages durably.
	var status struct {
		Owner         string `json:"owner"`
		Epoch         uint64 `json:"epoch"`
		CommittedNext uint64 `json:"committed_next"`
		Replicas      []struct {
			Node        string `json:"node"`
			DurableNext uint64 `json:"durable_next"`
			State       string `json:"state"`
		} `json:"replicas"`
	}
	getJSON(t, c.node(info.Owner), "/api/queues/orders", &status)
	holding := 0
	for _, replica := range status.Replicas {
		if replica.State == "" || (replica.State == "owner") != (replica.Node == info.Owner) {
			t.Fatalf("/api/queues/orders on the owner: replica %+v", replica)
		}
		if replica.DurableNext >= status.CommittedNext {
			holding++
		}
	}
	if status.Owner != info.Owner || status.Epoch != info.Epoch || len(status.Replicas) != 3 ||
		status.CommittedNext < 100 || holding < 2 {
		t.Fatalf("/api/queues/orders on the owner: %+v", status)
	}
	if out := runCtl(nonOwners[1], "consume", "orders", "--count", "100", "--ack", "--quiet"); !strings.Contains(out, "received 100") {
		t.Fatalf("consume through %s printed %q", nonOwners[1].id, out)
	}

	var view clusterView
	getJSON(t, nonOwner, "/api/cluster", &view)
	if view.NodeID != nonOwner.id || len(view.Nodes) != 3 || view.CatalogLeader == "" || view.CatalogRevision == 0 ||
		view.Serving != "replicated" || len(view.Queues) != 1 || view.Queues[0].Partitions[0].Owner != info.Owner {
		t.Fatalf("/api/cluster on %s: %+v", nonOwner.id, view)
	}
	for _, node := range c.nodes {
		if err := node.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range c.nodes {
		if err := node.cmd.Wait(); err != nil {
			t.Fatalf("%s exit after SIGTERM: %v\n%s", node.id, err, node.stderr.String())
		}
	}
}

// A config problem stops start-up with a message that names the field.
func TestBinaryClusterConfigErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	configFile, _ := writeClusterConfig(t, dir, 50*time.Millisecond)
	data, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, bytes.Replace(data, []byte(`"rtt": "50ms"`), []byte(`"rtt": "fast"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		text string
	}{
		{[]string{"serve", "--config", broken, "--node", "node1"}, "cluster.raft.rtt"},
		{[]string{"serve", "--config", configFile, "--node", "node9"}, `"node9" is not in the config`},
		{[]string{"serve", "--config", filepath.Join(dir, "missing.json"), "--node", "node1"}, "missing.json"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), tc.text) {
			t.Fatalf("%v: exit %d, stderr %q; want %d naming %q", tc.args, code, stderr.String(), exitError, tc.text)
		}
	}
}

// TestMeasureCatalogLeaderKill measures, over several runs, the time from
// kill -9 of the catalog leader's process to the first successful declare
// of a new queue through a surviving node (an SDK client connected before
// the kill). After each run the killed node is started again and rejoins.
//
//	FIBRIL_CLUSTER_MEASURE=1 [FIBRIL_MEASURE_RUNS=10] [FIBRIL_MEASURE_RTT=50ms] \
//	  go test -count=1 -run TestMeasureCatalogLeaderKill -v -timeout 10m ./cmd/fibril/
func TestMeasureCatalogLeaderKill(t *testing.T) {
	if os.Getenv("FIBRIL_CLUSTER_MEASURE") == "" {
		t.Skip("set FIBRIL_CLUSTER_MEASURE=1 to measure")
	}
	runs, _ := strconv.Atoi(os.Getenv("FIBRIL_MEASURE_RUNS"))
	if runs <= 0 {
		runs = 10
	}
	rtt := 50 * time.Millisecond
	if text := os.Getenv("FIBRIL_MEASURE_RTT"); text != "" {
		parsed, err := time.ParseDuration(text)
		if err != nil {
			t.Fatal(err)
		}
		rtt = parsed
	}
	server := buildBinary(t, t.TempDir(), "./cmd/fibril", "fibril")
	c := startBinaryCluster(t, server, rtt)
	var samples []time.Duration
	for run := range runs {
		leader := c.waitForStableLeader()
		var survivor *clusterProcess
		for _, node := range c.nodes {
			if node.id != leader.id {
				survivor = node
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sdk, err := client.Dial(ctx, client.Options{Addresses: []string{survivor.clientAddress}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		name := fmt.Sprintf("after-kill-%d", run)
		started := time.Now()
		if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		elected := make(chan time.Duration, 1)
		go func() { elected <- waitForNewLeader(survivor, leader.id, started) }()
		_, err = sdk.Declare(ctx, name, client.QueueConfig{})
		elapsed := time.Since(started)
		_ = sdk.Close()
		cancel()
		if err != nil {
			t.Fatalf("run %d: declare through %s after killing %s: %v", run, survivor.id, leader.id, err)
		}
		_ = leader.cmd.Wait()
		samples = append(samples, elapsed)
		t.Logf("run %d: killed catalog leader %s; %s named a new leader after %v, its declare succeeded after %v",
			run, leader.id, survivor.id, (<-elected).Round(time.Millisecond), elapsed.Round(time.Millisecond))
		c.start(leader)
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	t.Logf("rtt %v, %d runs: raw %v; min %v, p50 %v, max %v", rtt, runs, roundAll(samples),
		sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond),
		sorted[len(sorted)-1].Round(time.Millisecond))
}

// waitForStableLeader waits until every node names the same catalog
// leader and sees every other node connected or itself, then returns the
// leader's process.
func (c *binaryCluster) waitForStableLeader() *clusterProcess {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		leaders := map[string]bool{}
		for _, node := range c.nodes {
			var view clusterView
			if err := tryGetJSON(node, "/api/cluster", &view); err != nil {
				leaders[""] = true // not serving HTTP yet
				continue
			}
			leaders[view.CatalogLeader] = true
		}
		if len(leaders) == 1 && !leaders[""] {
			for leader := range leaders {
				return c.node(leader)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("the nodes did not agree on a catalog leader within a minute")
	return nil
}

// waitForNewLeader polls a survivor's /api/cluster every 10 ms until it
// names a catalog leader other than the killed node (diagnostic: it tells
// the election apart from the declare); -1 after ten seconds.
func waitForNewLeader(survivor *clusterProcess, killed string, started time.Time) time.Duration {
	for time.Since(started) < 10*time.Second {
		var view clusterView
		if tryGetJSON(survivor, "/api/cluster", &view) == nil && view.CatalogLeader != "" && view.CatalogLeader != killed {
			return time.Since(started)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

func roundAll(samples []time.Duration) []time.Duration {
	out := make([]time.Duration, len(samples))
	for i, sample := range samples {
		out[i] = sample.Round(time.Millisecond)
	}
	return out
}

// A node whose data directory is wiped while it is down does not start
// on it by itself: it exits 1 with a message that names the directory,
// the likely causes and the flag. Started with --rejoin-empty it comes
// back as a new Raft replica: it finds the cluster through its peers, a
// peer replaces its old replica, and it follows the catalog again (it
// sees a queue declared while it was gone) and serves.
func TestBinaryClusterNodeWithAWipedDataDirRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	ctl := buildBinary(t, dir, "./cmd/fibrilctl", "fibrilctl")
	c := startBinaryCluster(t, server, 10*time.Millisecond)
	runCtl := func(node *clusterProcess, args ...string) string {
		t.Helper()
		output, err := exec.Command(ctl, append(args, "--server", node.clientAddress)...).CombinedOutput()
		if err != nil {
			t.Fatalf("fibrilctl %v on %s: %v\n%s", args, node.id, err, output)
		}
		return string(output)
	}
	runCtl(c.node("node1"), "declare", "before")
	wiped := c.node("node3")
	if err := wiped.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = wiped.cmd.Wait()
	identity, err := os.ReadFile(filepath.Join(wiped.dataDir, "identity"))
	if err != nil {
		t.Fatalf("node3 kept no identity file: %v", err)
	}
	if err := os.RemoveAll(wiped.dataDir); err != nil {
		t.Fatal(err)
	}
	runCtl(c.node("node1"), "declare", "while-away")
	refusedCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused := exec.CommandContext(refusedCtx, c.binary, "serve", "--config", c.configFile, "--node", wiped.id)
	output, err := refused.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("node3 on its empty data dir without --rejoin-empty: %v, want exit status 1; output:\n%s", err, output)
	}
	for _, part := range []string{wiped.dataDir, "not mounted", "wrong path", "--rejoin-empty"} {
		if !strings.Contains(string(output), part) {
			t.Fatalf("the refusal does not say %q:\n%s", part, output)
		}
	}
	if entries, err := os.ReadDir(wiped.dataDir); err == nil && len(entries) > 0 {
		t.Fatalf("the refused start wrote into the data dir: %v", entries)
	}
	wiped.rejoinEmpty = true
	c.start(wiped)
	if !strings.Contains(wiped.stderr.String(), "rejoining as a new replica") {
		t.Fatalf("node3 did not say it rejoins; stderr:\n%s", wiped.stderr.String())
	}
	rejoined, err := os.ReadFile(filepath.Join(wiped.dataDir, "identity"))
	if err != nil || string(rejoined) == string(identity) || !strings.Contains(string(rejoined), `"joined":true`) {
		t.Fatalf("identity before %s, after %s (%v)", identity, rejoined, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var view clusterView
		err := tryGetJSON(wiped, "/api/cluster", &view)
		names := map[string]bool{}
		for _, queue := range view.Queues {
			names[queue.Name] = true
		}
		if err == nil && names["before"] && names["while-away"] && view.CatalogLeader != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node3 did not follow the catalog after rejoining: %+v, %v", view, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runCtl(wiped, "declare", "after")
}
