package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
)

// withNodeTLS gives every node a certificate from ca, named for its
// node id and loopback.
func withNodeTLS(t *testing.T, ca *tlstest.CA) clusterOption {
	return func(c *Config) {
		for index := range c.Nodes {
			files := ca.Issue(t, c.Nodes[index].ID)
			c.Nodes[index].TLS = &NodeTLSFiles{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile}
		}
	}
}

// Raft over dragonboat's TCP transport with mutual TLS: three nodes on
// loopback ports form the catalog, a declaration made on one is visible
// on all, and the Raft port speaks TLS only.
func TestRaftOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts on loopback ports")
	}
	ca := tlstest.NewCA(t, t.TempDir(), "cluster CA")
	cluster := newTCPCluster(t, 3, withNodeTLS(t, ca))
	cluster.startAll()
	cluster.waitReady(testTimeout)
	ctx := testContext(t)
	if _, _, err := cluster.node("node2").Declare(ctx, QueueDecl{Name: "over-tls", Mode: ModeDurable}); err != nil {
		t.Fatalf("declare over mutual TLS: %v", err)
	}
	for _, node := range cluster.running() {
		if _, err := node.Lookup(ctx, "over-tls"); err != nil {
			t.Fatalf("%s: %v", node.ID(), err)
		}
		if node.PeerTLS() == nil {
			t.Fatalf("%s: no peer TLS built from its tls files", node.ID())
		}
	}
	// The Raft port refuses plain text: a plain TCP write gets no Raft
	// service, only the end of the connection.
	raft := cluster.config.Nodes[0].RaftAddress
	conn, err := net.DialTimeout("tcp", raft, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	if _, err := conn.Write([]byte("plain text is not a TLS client hello\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	var reply [64]byte
	if n, err := conn.Read(reply[:]); err == nil && n > 0 && reply[0] != 0x15 {
		t.Fatalf("the Raft port answered plain text with %q (not a TLS alert)", reply[:n])
	}
}

// A node whose certificate comes from another CA is refused by its
// peers: the two good nodes form the catalog without it, and a handshake
// presenting its certificate to a good node's Raft port is refused.
func TestRaftRefusesACertificateFromAnotherCA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NodeHosts on loopback ports")
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster CA")
	rogueCA := tlstest.NewCA(t, t.TempDir(), "another CA")
	rogue := rogueCA.Issue(t, "node3")
	cluster := newTCPCluster(t, 3, withNodeTLS(t, ca), func(c *Config) {
		// node3's own files agree with each other, so it starts; its
		// certificate is not the cluster CA's.
		c.Nodes[2].TLS = &NodeTLSFiles{CAFile: rogueCA.CertFile, CertFile: rogue.CertFile, KeyFile: rogue.KeyFile}
	})
	cluster.start("node1")
	cluster.start("node2")
	cluster.start("node3")
	for _, id := range []string{"node1", "node2"} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		if err := cluster.node(id).WaitReady(ctx); err != nil {
			t.Fatalf("%s: the two nodes of the cluster CA have a quorum: %v", id, err)
		}
		cancel()
	}
	ctx := testContext(t)
	if _, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "without-node3"}); err != nil {
		t.Fatalf("declare on the good nodes: %v", err)
	}

	// What node3's transport does when it dials node1: its certificate
	// against node1's Raft port, trusting the cluster CA so that only
	// node1's verdict on node3's certificate can fail the connection.
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(ca.CertFile)
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("cluster CA: %v", err)
	}
	certificate, err := tls.LoadX509KeyPair(rogue.CertFile, rogue.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	target := cluster.config.Nodes[0].RaftAddress
	raw, err := net.DialTimeout("tcp", target, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(testTimeout))
	// GetClientCertificate presents the certificate whatever CAs the
	// server names (with Certificates, Go would send none, and the
	// refusal would be for a missing certificate).
	conn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certificate, nil }})
	err = conn.Handshake()
	if err == nil {
		// TLS 1.3: the server's refusal of the client's certificate
		// arrives after the client's side of the handshake.
		_, err = conn.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "remote error: tls:") || strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("node1 did not refuse node3's certificate itself: %v", err)
	}
	t.Logf("node1 refused node3's certificate: %v", err)
	if _, err := cluster.node("node3").LookupLocal("without-node3"); err == nil {
		t.Fatal("node3, outside the cluster CA, learned the catalog")
	}
}

// The config names every tls file, and tls is on every node or none; a
// node's own files that do not fit stop its start with a sentence naming
// the file, before Raft reads them.
func TestNodeTLSConfigChecks(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster CA")
	files := ca.Issue(t, "node1")
	base := func() *Config {
		return &Config{Cluster: ClusterSettings{Secret: testSecret}, Nodes: []NodeConfig{
			{ID: "node1", ClientAddress: "127.0.0.1:1", PeerAddress: "127.0.0.1:2", RaftAddress: "127.0.0.1:3",
				HTTPAddress: "127.0.0.1:4", DataDir: "d1",
				TLS: &NodeTLSFiles{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile}},
			{ID: "node2", ClientAddress: "127.0.0.1:5", PeerAddress: "127.0.0.1:6", RaftAddress: "127.0.0.1:7",
				HTTPAddress: "127.0.0.1:8", DataDir: "d2",
				TLS: &NodeTLSFiles{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile}},
		}}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for name, c := range map[string]struct {
		mutate func(*Config)
		field  string
	}{
		"one node without tls": {func(c *Config) { c.Nodes[1].TLS = nil }, "nodes[].tls"},
		"no key file":          {func(c *Config) { c.Nodes[0].TLS.KeyFile = "" }, "nodes[0].tls.key_file"},
		"client tls without a key": {func(c *Config) {
			c.Nodes[0].ClientTLS = &ClientTLSFiles{CertFile: files.CertFile}
		}, "nodes[0].client_tls"},
		"required client certificates without their CA": {func(c *Config) {
			c.Nodes[0].ClientTLS = &ClientTLSFiles{CertFile: files.CertFile, KeyFile: files.KeyFile, RequireClientCert: true}
		}, "nodes[0].client_tls.require_client_cert"},
	} {
		config := base()
		c.mutate(config)
		err := config.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.field)
		}
	}

	// The files themselves: a certificate that does not name the host
	// peers dial, and one from another CA.
	other := tlstest.NewCA(t, t.TempDir(), "other CA").Issue(t, "node1")
	unnamed := ca.Issue(t, "far", tlstest.IssueOptions{DNSNames: []string{"far.example"}, IPs: []net.IP{}, FileSuffix: "-far"})
	for name, c := range map[string]struct {
		tls      NodeTLSFiles
		fragment string
	}{
		"names another host": {NodeTLSFiles{CAFile: ca.CertFile, CertFile: unnamed.CertFile, KeyFile: unnamed.KeyFile},
			"does not name [127.0.0.1]"},
		"from another CA": {NodeTLSFiles{CAFile: ca.CertFile, CertFile: other.CertFile, KeyFile: other.KeyFile},
			other.CertFile},
	} {
		node := base().Nodes[0]
		node.TLS = &c.tls
		if _, err := node.PeerTLS(); err == nil || !strings.Contains(err.Error(), c.fragment) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.fragment)
		}
	}
	if peerTLS, err := base().Nodes[0].PeerTLS(); err != nil || peerTLS == nil {
		t.Fatalf("good files: %v", err)
	}
}
