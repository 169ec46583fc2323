package main

// The CLI's commands and flags as an operator runs them: built binaries
// (fibril and fibrilctl, built once per test run) against live nodes
// started with `fibril serve` on free loopback ports, one test per new
// command or flag.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce  sync.Once
	buildDir   string
	buildError error
)

// binaries builds fibril and fibrilctl once and returns their paths.
func binaries(t *testing.T) (server, ctl string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	buildOnce.Do(func() {
		buildDir, buildError = os.MkdirTemp("", "fibrilctl-binaries-")
		if buildError != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		for _, pkg := range []string{"fibril", "fibrilctl"} {
			build := exec.Command(goTool, "build", "-o", filepath.Join(buildDir, pkg), "./cmd/"+pkg)
			build.Dir = filepath.Join("..", "..")
			if output, err := build.CombinedOutput(); err != nil {
				buildError = fmt.Errorf("build %s: %v\n%s", pkg, err, output)
				return
			}
		}
	})
	if buildError != nil {
		t.Fatal(buildError)
	}
	return filepath.Join(buildDir, "fibril"), filepath.Join(buildDir, "fibrilctl")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// liveNode is a running `fibril serve`.
type liveNode struct {
	client, http string
	cmd          *exec.Cmd
	stderr       bytes.Buffer
}

// startLiveNode starts a node on a temporary data dir with extra flags.
func startLiveNode(t *testing.T, extra ...string) *liveNode {
	t.Helper()
	server, _ := binaries(t)
	args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, extra...)
	node := &liveNode{cmd: exec.Command(server, args...)}
	node.cmd.Stderr = &node.stderr
	stdout, err := node.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.cmd.Process.Kill(); _ = node.cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for node.client == "" || node.http == "" {
		if !lines.Scan() {
			t.Fatalf("fibril serve stopped before it served; stderr:\n%s", node.stderr.String())
		}
		line := lines.Text()
		if rest, ok := strings.CutPrefix(line, "fibril: serving clients on "); ok {
			node.client = strings.Fields(rest)[0]
		}
		if rest, ok := strings.CutPrefix(line, "fibril: HTTP endpoint on "); ok {
			node.http = strings.TrimSpace(rest)
		}
	}
	go func() {
		for lines.Scan() {
		}
	}()
	return node
}

// ctlRun is the outcome of one fibrilctl process.
type ctlRun struct {
	code           int
	stdout, stderr string
}

// ctlCommand runs the fibrilctl binary with env (KEY=VALUE, added to a
// clean environment) and stdin.
func ctlCommand(t *testing.T, env []string, stdin string, args ...string) ctlRun {
	t.Helper()
	_, ctl := binaries(t)
	cmd := exec.Command(ctl, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run fibrilctl %v: %v", args, err)
	}
	return ctlRun{code, stdout.String(), stderr.String()}
}

// ctlAt runs fibrilctl against node with --server after the command.
func ctlAt(t *testing.T, node *liveNode, args ...string) ctlRun {
	t.Helper()
	return ctlCommand(t, nil, "", append(args, "--server", node.client, "--http", node.http)...)
}

func mustSucceed(t *testing.T, r ctlRun, what string) ctlRun {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
	return r
}

func expectOneLineFailure(t *testing.T, r ctlRun, code int, contains ...string) {
	t.Helper()
	if r.code != code || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("exit %d, stderr %q; want exit %d and one line", r.code, r.stderr, code)
	}
	for _, part := range contains {
		if !strings.Contains(r.stderr, part) {
			t.Fatalf("stderr %q lacks %q", r.stderr, part)
		}
	}
	_, message, _ := strings.Cut(r.stderr, ": ") // after "fibrilctl COMMAND: "
	for _, prefix := range []string{"client:", "actors:", "wire:", "cluster:"} {
		if strings.Contains(message, prefix) {
			t.Fatalf("stderr %q leaks the package prefix %q", r.stderr, prefix)
		}
	}
}

// Global flags are taken anywhere on the line, and from FIBRIL_SERVER and
// FIBRIL_TOKEN when not given.
func TestBinaryGlobalFlagsAnywhereAndFromTheEnvironment(t *testing.T) {
	node := startLiveNode(t, "--auth-token", "s3cret")
	before := ctlCommand(t, nil, "", "--server", node.client, "--token", "s3cret", "declare", "orders")
	mustSucceed(t, before, "global flags before the command")
	middle := ctlCommand(t, nil, "", "--token=s3cret", "queues", "--server", node.client)
	if mustSucceed(t, middle, "global flags around the command"); !strings.Contains(middle.stdout, "orders") {
		t.Fatalf("queues: %q", middle.stdout)
	}
	env := []string{"FIBRIL_SERVER=" + node.client, "FIBRIL_TOKEN=s3cret"}
	if r := mustSucceed(t, ctlCommand(t, env, "", "info", "orders"), "address and token from the environment"); !strings.Contains(r.stdout, "mode:") {
		t.Fatalf("info: %q", r.stdout)
	}
	expectOneLineFailure(t, ctlCommand(t, []string{"FIBRIL_SERVER=" + node.client}, "", "queues"),
		exitFailure, "unauthorized", "--token or $FIBRIL_TOKEN")
}

// Every QueueConfig field has a declare flag, and the node gets them all.
func TestBinaryDeclareSetsEveryQueueOption(t *testing.T) {
	node := startLiveNode(t)
	mustSucceed(t, ctlAt(t, node, "declare", "orders", "--durable", "--lease", "45s", "--max-deliveries", "4",
		"--dead-letter", "orders.dead", "--ttl", "1h", "--max-length", "1000", "--max-bytes", "1048576",
		"--overflow", "drop_oldest", "--redelivery-delay", "2s"), "declare with every option")
	r := mustSucceed(t, ctlAt(t, node, "info", "orders", "--json"), "info")
	var info queueJSON
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		t.Fatal(err)
	}
	want := optionsJSON{LeaseTimeoutMs: 45000, MaxDeliveries: 4, DeadLetterQueue: "orders.dead", MessageTTLMs: 3600000,
		MaxLength: 1000, MaxBytes: 1048576, Overflow: "drop_oldest", RedeliveryDelayMs: 2000}
	if info.Mode != "durable" || info.Options != want {
		t.Fatalf("declared %+v, want %+v", info.Options, want)
	}
	if r := mustSucceed(t, ctlAt(t, node, "declare", "kept", "--keep-mode"), "--keep-mode"); !strings.HasPrefix(r.stdout, "kept mode=durable created=true") {
		t.Fatalf("--keep-mode on a single node: %q", r.stdout)
	}
	expectOneLineFailure(t, ctlAt(t, node, "declare", "spread", "--policy", "replica_durable:2"), exitFailure, "invalid_options", "cluster")
	expectOneLineFailure(t, ctlAt(t, node, "declare", "spread", "--replicas", "3"), exitFailure, "invalid_options")
	expectOneLineFailure(t, ctlAt(t, node, "declare", "x", "--buffered", "--durable"), exitUsage, "exclude")
	expectOneLineFailure(t, ctlAt(t, node, "declare", "x", "--overflow", "spill"), exitUsage, "reject_new")
}

// publish reads bodies from stdin one per line, or a whole file, with
// headers and message ids; consume --json shows all of it.
func TestBinaryPublishBodiesFromStdinAndFilesWithHeadersAndIDs(t *testing.T) {
	node := startLiveNode(t)
	mustSucceed(t, ctlAt(t, node, "declare", "events"), "declare")
	env := []string{"FIBRIL_SERVER=" + node.client}
	r := mustSucceed(t, ctlCommand(t, env, "first line\nsecond line\nthird\n", "publish", "events", "--body-file", "-",
		"--lines", "--header", "source=import", "--header", "k=v", "--id", "import"), "publish --lines from stdin")
	if r.stdout != "confirmed 3\n" {
		t.Fatalf("publish --lines: %q", r.stdout)
	}
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte("{\"whole\": true}\nwith a second line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, ctlCommand(t, env, "", "publish", "events", "--body-file", file, "--id", "doc-1"), "publish a whole file")
	r = mustSucceed(t, ctlCommand(t, env, "", "consume", "events", "--count", "4", "--json"), "consume --json")
	var got []deliveryJSON
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var d deliveryJSON
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("consume --json line %q: %v", line, err)
		}
		got = append(got, d)
	}
	if len(got) != 4 {
		t.Fatalf("consume --json printed %d objects:\n%s", len(got), r.stdout)
	}
	for i, want := range []string{"first line", "second line", "third"} {
		if got[i].Body == nil || *got[i].Body != want || got[i].MessageID != fmt.Sprintf("import-%d", i+1) ||
			got[i].Headers["source"] != "import" || got[i].Headers["k"] != "v" || got[i].Attempt != 1 ||
			got[i].PublishTime.IsZero() || got[i].Queue != "events" {
			t.Fatalf("delivery %d: %+v", i, got[i])
		}
	}
	if whole := got[3]; whole.Body == nil || *whole.Body != "{\"whole\": true}\nwith a second line\n" || whole.MessageID != "doc-1" {
		t.Fatalf("the whole-file message: %+v", whole)
	}
	expectOneLineFailure(t, ctlCommand(t, env, "", "publish", "events", "--lines"), exitUsage, "--body-file")
}

// peek shows the head of a queue and leaves it there.
func TestBinaryPeekLeavesMessagesInTheQueue(t *testing.T) {
	node := startLiveNode(t)
	mustSucceed(t, ctlAt(t, node, "declare", "jobs"), "declare")
	mustSucceed(t, ctlAt(t, node, "publish", "jobs", "--count", "5", "--body", "job"), "publish")
	r := mustSucceed(t, ctlAt(t, node, "peek", "jobs", "--count", "3"), "peek")
	if strings.Count(r.stdout, " job\n") != 3 || !strings.Contains(r.stdout, "peeked 3 of 5 ready") {
		t.Fatalf("peek: %q", r.stdout)
	}
	// The releases of the unsubscribe are records the queue appends: they
	// count as ready only once they reach its boundary, and info on another
	// connection is not ordered after them (docs/protocol.md 4.2).
	waitForQueue(t, node, "jobs", func(info queueJSON) bool { return info.Ready == 5 && info.Leased == 0 })
	r = mustSucceed(t, ctlAt(t, node, "peek", "jobs", "--count", "10", "--json"), "peek --json")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 5 {
		t.Fatalf("peek --json of 5 ready: %q", r.stdout)
	}
	// Still all there, with no attempt counted.
	r = mustSucceed(t, ctlAt(t, node, "consume", "jobs", "--count", "5", "--json"), "consume after peek")
	if strings.Count(r.stdout, `"attempt":1`) != 5 {
		t.Fatalf("after two peeks the attempts counted: %s", r.stdout)
	}
}

// requeue moves dead letters back to their source.
func TestBinaryRequeueMovesDeadLettersBack(t *testing.T) {
	node := startLiveNode(t)
	mustSucceed(t, ctlAt(t, node, "declare", "work", "--max-deliveries", "1", "--dead-letter", "work.dead"), "declare")
	mustSucceed(t, ctlAt(t, node, "publish", "work", "--count", "3", "--id", "w"), "publish")
	// A nack without requeue dead-letters at once: --nack requeues, so
	// use max-deliveries 1 and let the nacked attempt count.
	mustSucceed(t, ctlAt(t, node, "consume", "work", "--count", "3", "--nack", "--quiet"), "consume --nack")
	waitForQueue(t, node, "work.dead", func(info queueJSON) bool { return info.Ready == 3 })
	r := mustSucceed(t, ctlAt(t, node, "requeue", "work.dead"), "requeue")
	if !strings.HasPrefix(r.stdout, "requeued 3 from work.dead (3 to work)") {
		t.Fatalf("requeue: %q", r.stdout)
	}
	waitForQueue(t, node, "work", func(info queueJSON) bool { return info.Ready == 3 })
	waitForQueue(t, node, "work.dead", func(info queueJSON) bool { return info.Ready == 0 && info.Leased == 0 })
	r = mustSucceed(t, ctlAt(t, node, "consume", "work", "--count", "3", "--json"), "consume the requeued")
	for _, id := range []string{`"message_id":"w-1"`, `"message_id":"w-2"`, `"message_id":"w-3"`} {
		if !strings.Contains(r.stdout, id) || strings.Contains(r.stdout, "fibril-dead-letter-source") {
			t.Fatalf("requeued messages: %s", r.stdout)
		}
	}
}

func waitForQueue(t *testing.T, node *liveNode, name string, done func(queueJSON) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := ctlAt(t, node, "info", name, "--json")
		var info queueJSON
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &info) == nil && done(info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s never reached the state: %+v %s", name, r, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// version names both sides; typos get suggestions; failures say their
// cause once, without package prefixes, with a hint.
func TestBinaryVersionSuggestionsAndErrorTexts(t *testing.T) {
	node := startLiveNode(t)
	r := mustSucceed(t, ctlAt(t, node, "version"), "version")
	if !strings.HasPrefix(r.stdout, "fibrilctl "+cliVersion) || !strings.Contains(r.stdout, " at "+node.client+": fibril ") {
		t.Fatalf("version: %q", r.stdout)
	}
	expectOneLineFailure(t, ctlAt(t, node, "queus"), exitUsage, `did you mean "queues"`)
	expectOneLineFailure(t, ctlAt(t, node, "declare", "x", "--max-lenght", "5"), exitUsage, "did you mean --max-length")
	expectOneLineFailure(t, ctlAt(t, node, "info", "missing"), exitFailure, "unknown_queue", "fibrilctl declare")
	expectOneLineFailure(t, ctlAt(t, node, "declare", "bad name!"), exitFailure, "invalid_name")

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := listener.Addr().String()
	listener.Close()
	r = ctlCommand(t, nil, "", "queues", "--server", closed)
	expectOneLineFailure(t, r, exitFailure, "connection refused", "is `fibril serve` running at "+closed)
	if strings.Count(r.stderr, "connection refused") != 1 {
		t.Fatalf("the cause is said more than once: %q", r.stderr)
	}
	if r := ctlCommand(t, nil, "", "version", "--server", closed); r.code != 0 || !strings.Contains(r.stdout, "not reachable") {
		t.Fatalf("version with no node: %+v", r)
	}
	expectOneLineFailure(t, ctlAt(t, node, "cluster"), exitFailure, "does not run in a cluster")
}

// clusterNode is one `fibril serve --config --node` process.
type clusterNode struct {
	id, client, http string
}

// startLiveCluster starts three nodes from a config on free ports.
func startLiveCluster(t *testing.T) []clusterNode {
	t.Helper()
	server, _ := binaries(t)
	dir := t.TempDir()
	var listeners []net.Listener
	addresses := func() string {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, listener)
		return listener.Addr().String()
	}
	var nodes []clusterNode
	var configured []map[string]string
	for i := 1; i <= 3; i++ {
		node := clusterNode{id: fmt.Sprintf("node%d", i), client: addresses(), http: addresses()}
		nodes = append(nodes, node)
		configured = append(configured, map[string]string{"id": node.id, "client_address": node.client,
			"peer_address": addresses(), "raft_address": addresses(), "http_address": node.http,
			"data_dir": filepath.Join(dir, node.id)})
	}
	for _, listener := range listeners {
		listener.Close()
	}
	config, _ := json.Marshal(map[string]any{"cluster": map[string]any{"default_replicas": 3, "secret": "fibrilctl-test-cluster-secret",
		"raft": map[string]any{"rtt": "10ms", "election_rtt": 10, "heartbeat_rtt": 1}}, "nodes": configured})
	file := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(file, config, 0o644); err != nil {
		t.Fatal(err)
	}
	// Every node starts before any is waited for: a node with an empty
	// data directory asks its peers whether the cluster is new.
	type started struct {
		lines  *bufio.Scanner
		stderr *bytes.Buffer
	}
	var running []started
	for _, node := range nodes {
		cmd := exec.Command(server, "serve", "--config", file, "--node", node.id)
		stderr := new(bytes.Buffer)
		cmd.Stderr = stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		running = append(running, started{lines: bufio.NewScanner(stdout), stderr: stderr})
	}
	for i, node := range nodes {
		lines := running[i].lines
		for served := false; !served; {
			if !lines.Scan() {
				t.Fatalf("%s stopped before it served:\n%s", node.id, running[i].stderr.String())
			}
			served = strings.HasPrefix(lines.Text(), "fibril: HTTP endpoint on ")
		}
		go func() {
			for lines.Scan() {
			}
		}()
	}
	return nodes
}

// From any node: queues lists the whole cluster's queues with their owners'
// counts, and cluster shows every node up, the catalog leader and each
// queue's owner and replica set.
func TestBinaryClusterAndQueuesFromAnyNode(t *testing.T) {
	nodes := startLiveCluster(t)
	at := func(node clusterNode, args ...string) ctlRun {
		return ctlCommand(t, []string{"FIBRIL_SERVER=" + node.client, "FIBRIL_HTTP=" + node.http}, "", args...)
	}
	for i, name := range []string{"alpha", "beta", "gamma"} {
		mustSucceed(t, at(nodes[i], "declare", name, "--durable"), "declare "+name)
		// A queue just declared has no owner until its election ends; a
		// publish meanwhile is refused as unavailable (not stored), so it
		// is safe to repeat until the owner takes it.
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := at(nodes[(i+1)%3], "publish", name, "--count", fmt.Sprint(i+1))
			if r.code == 0 {
				break
			}
			if !strings.Contains(r.stderr, "unavailable") || time.Now().After(deadline) {
				mustSucceed(t, r, "publish to "+name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, node := range nodes {
		r := mustSucceed(t, at(node, "queues", "--json"), "queues through "+node.id)
		var listed []queueJSON
		if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 3 {
			t.Fatalf("queues through %s lists %d: %s", node.id, len(listed), r.stdout)
		}
		for i, q := range listed {
			if q.Ready != uint64(i+1) || q.Owner == "" || q.Policy != "majority_durable" {
				t.Fatalf("queues through %s: %+v (want ready %d from its owner)", node.id, q, i+1)
			}
		}
	}
	var r ctlRun
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = mustSucceed(t, at(nodes[2], "cluster"), "cluster")
		if strings.Count(r.stdout, " up ") == 3 && !strings.Contains(r.stdout, "none known") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never showed three nodes up and a leader:\n%s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{"catalog leader: node", "node3 (answering)", "alpha", "beta", "gamma", "majority_durable",
		"MEMORY", "MiB"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("cluster output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustSucceed(t, at(nodes[0], "cluster", "--json"), "cluster --json")
	var overview overviewJSON
	if err := json.Unmarshal([]byte(r.stdout), &overview); err != nil {
		t.Fatal(err)
	}
	if len(overview.Nodes) != 3 || len(overview.Queues) != 3 || overview.Queues[1].Counts == nil ||
		overview.Queues[1].Counts.Ready != 2 || len(overview.Queues[1].ReplicaSet) != 3 {
		t.Fatalf("overview: %s", r.stdout)
	}
}
