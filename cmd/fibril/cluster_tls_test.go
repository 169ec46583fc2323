package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
	"github.com/fibrilmq/fibril/wire"
)

// A cluster of the real binaries whose config gives every node tls
// files: the nodes, started at once on empty data directories, decide
// that the cluster is new over TLS peer links, form Raft over mutual TLS,
// and replicate a majority_durable queue through TLS peer links (a
// publish confirms only once a second copy holds it). A plain-text peer
// hello to a node's peer port is refused with the sentence that the
// listener requires TLS.
func TestBinaryClusterOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	ctl := buildBinary(t, dir, "./cmd/fibrilctl", "fibrilctl")
	configFile, nodes := writeClusterConfig(t, dir, 10*time.Millisecond)
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	var config map[string]any
	data, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &config); err != nil {
		t.Fatal(err)
	}
	var peerAddress string
	for _, entry := range config["nodes"].([]any) {
		node := entry.(map[string]any)
		files := ca.Issue(t, node["id"].(string))
		node["tls"] = map[string]any{"ca_file": ca.CertFile, "cert_file": files.CertFile, "key_file": files.KeyFile}
		if node["id"] == "node1" {
			peerAddress = node["peer_address"].(string)
		}
	}
	if data, err = json.Marshal(config); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &binaryCluster{t: t, binary: server, configFile: configFile, nodes: nodes}
	waits := make([]func(), len(nodes))
	for i, node := range nodes {
		waits[i] = c.launch(node)
	}
	for _, wait := range waits {
		wait()
	}
	// Every node decided its identity with its peers over TLS: a new
	// cluster, or, for a node whose peers formed it while it started (a
	// loaded machine), a join as a new replica. Both need the TLS links; a
	// refused handshake decides nothing and the node exits.
	decided := 0
	for _, node := range nodes {
		log := node.stderr.String()
		switch {
		case strings.Contains(log, "decided=\"new cluster\""):
			decided++
		case strings.Contains(log, "joined the cluster its peers formed while it started"):
			t.Logf("%s's peers formed the cluster while it started; it joined as a new replica", node.id)
		default:
			t.Fatalf("%s did not decide its identity with its peers:\n%s", node.id, log)
		}
	}
	if decided < 2 {
		t.Fatalf("only %d nodes decided a new cluster; a new cluster needs at least two", decided)
	}
	runCtl := func(node *clusterProcess, args ...string) string {
		t.Helper()
		output, err := exec.Command(ctl, append(args, "--server", node.clientAddress)...).CombinedOutput()
		if err != nil {
			t.Fatalf("fibrilctl %v on %s: %v\n%s", args, node.id, err, output)
		}
		return string(output)
	}
	if out := runCtl(c.node("node1"), "declare", "secured", "--policy", "majority_durable"); !strings.Contains(out, "created=true") {
		t.Fatalf("declare printed %q", out)
	}
	if out := runCtl(c.node("node2"), "publish", "secured", "--count", "50"); !strings.Contains(out, "confirmed 50") {
		t.Fatalf("publish printed %q", out)
	}
	if out := runCtl(c.node("node3"), "consume", "secured", "--count", "50", "--ack", "--quiet"); !strings.Contains(out, "received 50") {
		t.Fatalf("consume printed %q", out)
	}

	conn, err := net.DialTimeout("tcp", peerAddress, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a safety net
	hello := wire.PeerHello{Version: wire.PeerProtocolVersion, ClusterID: 1, NodeID: "node2", Instance: 1,
		Nonce: make([]byte, wire.PeerNonceBytes), MaxBodyBytes: 1 << 20}
	if _, err := conn.Write(hello.Encode(nil)); err != nil {
		t.Fatal(err)
	}
	tag, body, err := wire.NewReader(conn, 0).Next()
	var refusal wire.ErrorFrame
	if err != nil || tag != wire.TagError || refusal.Decode(body) != nil || !strings.Contains(refusal.Message, "requires TLS") {
		t.Fatalf("a plain peer hello to a TLS peer port: %s %q %v", tag, refusal.Message, err)
	}
}
