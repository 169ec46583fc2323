package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
	"github.com/fibrilmq/fibril/wire"
)

func newNode(t *testing.T, ca *tlstest.CA, files tlstest.Files) *tlsconfig.Node {
	t.Helper()
	node, err := tlsconfig.NewNode(tlsconfig.NodeSettings{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func TestNodesOfOneCAVerifyEachOther(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	node1, node2 := newNode(t, ca, ca.Issue(t, "node1")), newNode(t, ca, ca.Issue(t, "node2"))
	address, results := listen(t, node1.ServerConfig())
	ctx, cancel := dialContext()
	defer cancel()
	conn, err := node2.DialContext(ctx, "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tag, _, err := helloRoundTrip(conn); err != nil || tag != wire.TagHelloOK {
		t.Fatalf("a frame over the link: %s %v", tag, err)
	}
	seen := <-results
	if seen.err != nil || seen.state.Version != tls.VersionTLS13 || !slices.Contains(tlsconfig.PeerNames(seen.state), "node2") {
		t.Fatalf("accepting end: %v, version %x, peer names %v", seen.err, seen.state.Version, tlsconfig.PeerNames(seen.state))
	}
	if names := tlsconfig.PeerNames(conn.ConnectionState()); !slices.Contains(names, "node1") {
		t.Fatalf("dialing end sees %v", names)
	}
}

func TestANodeWithACertificateFromAnotherCAIsRefused(t *testing.T) {
	dir := t.TempDir()
	cluster, rogueCA := tlstest.NewCA(t, dir, "cluster"), tlstest.NewCA(t, dir, "rogue")
	node1 := newNode(t, cluster, cluster.Issue(t, "node1"))
	rogueFiles := rogueCA.Issue(t, "node2")
	ctx, cancel := dialContext()
	defer cancel()

	// The rogue dials node1 knowing the cluster CA's certificate (it is
	// not secret) but holding a certificate of its own CA.
	address, results := listen(t, node1.ServerConfig())
	rogueCertificate, err := tls.LoadX509KeyPair(rogueFiles.CertFile, rogueFiles.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clusterPool := x509.NewCertPool()
	clusterPool.AddCert(cluster.Certificate)
	for name, config := range map[string]*tls.Config{
		// GetClientCertificate, not Certificates: crypto/tls would hold
		// back a certificate the server's CA list does not name, and a
		// rogue sends it anyway.
		"certificate from another CA": {MinVersion: tls.VersionTLS13, RootCAs: clusterPool, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogueCertificate, nil }},
		"no certificate": {MinVersion: tls.VersionTLS13, RootCAs: clusterPool, ServerName: "127.0.0.1"},
	} {
		raw, err := net.Dial("tcp", address)
		if err != nil {
			t.Fatal(err)
		}
		conn := tls.Client(raw, config)
		err = conn.HandshakeContext(ctx)
		if err == nil {
			_, _, err = helloRoundTrip(conn) // TLS 1.3: the refusal arrives at the first read
		}
		_ = conn.Close()
		if explained := tlsconfig.ExplainHandshakeError(err, address, false); !errors.Is(explained, tlsconfig.ErrCertificateRefused) {
			t.Errorf("%s: the rogue got %v", name, explained)
		}
		seen := <-results
		want := map[string]error{"certificate from another CA": tlsconfig.ErrUntrustedCertificate, "no certificate": tlsconfig.ErrCertificateRefused}[name]
		if !errors.Is(seen.err, want) {
			t.Errorf("%s: node1 accepted the link or did not say why: %v", name, seen.err)
		}
		t.Logf("%s: node1 says: %v", name, seen.err)
	}

	// node1 dials a rogue listener: the rogue's certificate does not
	// verify against the cluster CA.
	rogue, err := tlsconfig.NewNode(tlsconfig.NodeSettings{CAFile: rogueCA.CertFile, CertFile: rogueFiles.CertFile, KeyFile: rogueFiles.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	rogueAddress, rogueResults := listen(t, rogue.ServerConfig())
	if _, err := node1.DialContext(ctx, "tcp", rogueAddress); !errors.Is(err, tlsconfig.ErrUntrustedCertificate) {
		t.Fatalf("node1 dialing a rogue: %v", err)
	}
	<-rogueResults
}

func TestNewNodeRefusesFilesThatCannotMakeALink(t *testing.T) {
	dir := t.TempDir()
	cluster, other := tlstest.NewCA(t, dir, "cluster"), tlstest.NewCA(t, dir, "other")
	good, foreign := cluster.Issue(t, "node1"), other.Issue(t, "node2")
	notCA := dir + "/not-a-ca.pem"
	writeFile(t, notCA, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	empty := dir + "/empty.pem"
	writeFile(t, empty, nil)
	cases := map[string]tlsconfig.NodeSettings{
		"own certificate from another CA": {CAFile: cluster.CertFile, CertFile: foreign.CertFile, KeyFile: foreign.KeyFile},
		"key of another certificate":      {CAFile: cluster.CertFile, CertFile: good.CertFile, KeyFile: foreign.KeyFile},
		"CA file holding a key":           {CAFile: notCA, CertFile: good.CertFile, KeyFile: good.KeyFile},
		"empty CA file":                   {CAFile: empty, CertFile: good.CertFile, KeyFile: good.KeyFile},
		"missing CA file":                 {CAFile: dir + "/nope.pem", CertFile: good.CertFile, KeyFile: good.KeyFile},
		"no key file":                     {CAFile: cluster.CertFile, CertFile: good.CertFile},
	}
	for name, settings := range cases {
		if _, err := tlsconfig.NewNode(settings); !errors.Is(err, tlsconfig.ErrCertificateFile) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestNodeReloadPresentsTheRenewedCertificateOnBothEnds(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	files1, files2 := ca.Issue(t, "node1"), ca.Issue(t, "node2")
	node1, node2 := newNode(t, ca, files1), newNode(t, ca, files2)
	address, results := listen(t, node1.ServerConfig())
	link := func() (server, client string) {
		ctx, cancel := dialContext()
		defer cancel()
		conn, err := node2.DialContext(ctx, "tcp", address)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, _, err := helloRoundTrip(conn); err != nil {
			t.Fatal(err)
		}
		seen := <-results
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), seen.state.PeerCertificates[0].SerialNumber.String()
	}
	serverBefore, clientBefore := link()
	tlstest.Replace(t, ca.Issue(t, "node1", tlstest.IssueOptions{FileSuffix: "-renewed"}), files1)
	tlstest.Replace(t, ca.Issue(t, "node2", tlstest.IssueOptions{FileSuffix: "-renewed"}), files2)
	if err := node1.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := node2.Reload(); err != nil {
		t.Fatal(err)
	}
	serverAfter, clientAfter := link()
	if serverAfter == serverBefore || clientAfter == clientBefore {
		t.Fatalf("after the reload: the accepting end presents %s (was %s), the dialing end %s (was %s)", serverAfter, serverBefore, clientAfter, clientBefore)
	}
	// A broken file keeps the renewed certificate in use.
	writeFile(t, files1.CertFile, []byte("garbage"))
	if err := node1.Reload(); !errors.Is(err, tlsconfig.ErrCertificateFile) {
		t.Fatalf("broken reload: %v", err)
	}
	if server, _ := link(); server != serverAfter {
		t.Fatalf("the broken reload replaced the certificate in use")
	}
}

func TestWarningsAboutLooseKeyFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	files := ca.Issue(t, "node1")
	if warnings := newNode(t, ca, files).Warnings(); len(warnings) != 0 {
		t.Fatalf("a 0600 key warned: %v", warnings)
	}
	if err := os.Chmod(files.KeyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if warnings := newNode(t, ca, files).Warnings(); len(warnings) != 1 || !strings.Contains(warnings[0], "chmod 600") {
		t.Fatalf("a 0644 key: %v", warnings)
	}
}

func TestExplainLeavesOtherErrorsAlone(t *testing.T) {
	if tlsconfig.ExplainHandshakeError(nil, "x", false) != nil {
		t.Fatal("nil explained into an error")
	}
	other := errors.New("no route to host")
	err := tlsconfig.ExplainHandshakeError(other, "10.0.0.9:7420", false)
	if !errors.Is(err, other) || !strings.Contains(err.Error(), "10.0.0.9:7420") {
		t.Fatalf("%v", err)
	}
	var handshake *tlsconfig.HandshakeError
	if errors.As(err, &handshake) {
		t.Fatalf("an unknown error was given a reason: %v", err)
	}
	_ = context.Background
}
