package actors

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
)

// withNodeTLS gives every node of the cluster config a certificate of ca
// (named for its node id, localhost and loopback).
func withNodeTLS(t *testing.T, ca *tlstest.CA) brokerClusterOption {
	return withClusterConfig(func(config *cluster.Config) {
		for i := range config.Nodes {
			files := ca.Issue(t, config.Nodes[i].ID)
			config.Nodes[i].TLS = &cluster.NodeTLSFiles{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile}
		}
	})
}

// peerLinksUp counts a node's outbound links that are up and its inbound
// links.
func peerLinksUp(broker *Broker) (up, inbound int) {
	for _, info := range broker.Registry().Snapshot() {
		switch {
		case info.Kind == "peer-link" && strings.HasPrefix(info.Summary, "up "):
			up++
		case info.Kind == "peer-inbound":
			inbound++
		}
	}
	return up, inbound
}

// Peer links run over mutual TLS when the nodes have tls files: the links
// come up, replication confirms on the policy's copies through them, and
// the peer listener refuses everything that is not a member: a plain-text
// dialer that knows the secret, a dialer without a client certificate, a
// dialer with a certificate of another CA, and a dialer with a
// certificate of the cluster's CA issued for a host the node it claims to
// be does not live on. None of them gets an inbound link.
func TestPeerLinksOverMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	c := startBrokerCluster(t, 3, withNodeTLS(t, ca))
	for _, id := range c.order {
		if c.members[id].node.PeerTLS() == nil {
			t.Fatalf("%s: no peer TLS built from its tls files", id)
		}
		broker := c.members[id].broker
		waitUntil(t, id+"'s peer links up over TLS", func() bool {
			up, inbound := peerLinksUp(broker)
			return up == 2 && inbound == 2
		})
	}
	ctx := testContext(t)
	owner, _ := c.declareServed("over-tls", client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, "over-tls", 5, 64)
	if info := c.copyAt(owner, "over-tls"); info.WrittenNext < 5 {
		t.Fatalf("the owner's log holds %d records after 5 confirmed publishes", info.WrittenNext)
	}
	consumeAndAck(t, ctx, sdk, "over-tls", 5)

	target := c.members["node1"]
	effective := target.node.Config()
	secret, err := effective.PeerSecret()
	if err != nil {
		t.Fatal(err)
	}
	// Everything a member's hello says, with the right secret: only the
	// transport differs between the attempts below.
	claim := peerIdentity{clusterID: effective.Cluster.DeploymentID, nodeID: "node2", instance: 77, secret: secret}
	_, inboundBefore := peerLinksUp(target.broker)
	address := target.config.PeerAddress

	// Plain text, with the right secret: the TLS listener answers with a
	// plain refusal and closes.
	plain, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dialHandshake(plain, claim, "node1"); err == nil || !strings.Contains(err.Error(), "requires TLS") {
		t.Fatalf("a plain-text peer hello to a TLS peer listener: %v", err)
	}
	plain.Close()

	attempts := map[string]*tlsconfig.Node{
		"no client certificate":            nil,
		"a certificate of another CA":      foreignNode(t, tlstest.NewCA(t, t.TempDir(), "rogue"), "node2", tlstest.IssueOptions{}),
		"a cluster certificate for a host": foreignNode(t, ca, "node2", tlstest.IssueOptions{DNSNames: []string{"elsewhere.example"}, IPs: []net.IP{net.IPv4(10, 9, 9, 9)}, FileSuffix: "-elsewhere"}),
	}
	for name, dialerTLS := range attempts {
		err := dialAsPeer(ctx, dialerTLS, ca, address, claim)
		if err == nil {
			t.Fatalf("%s: node1 accepted a peer link claiming to be node2", name)
		}
		t.Logf("%s: refused: %v", name, err)
	}
	if _, inbound := peerLinksUp(target.broker); inbound != inboundBefore {
		t.Fatalf("node1 has %d inbound links after the refused dialers, %d before", inbound, inboundBefore)
	}
	if up, _ := peerLinksUp(target.broker); up != 2 {
		t.Fatalf("node1's own links: %d up after the refused dialers", up)
	}
}

// foreignNode builds the peer TLS of a dialer holding a certificate of
// ca issued for name with options. The dialer trusts the cluster's CA
// through dialAsPeer, so only its own certificate is in question.
func foreignNode(t *testing.T, ca *tlstest.CA, name string, options tlstest.IssueOptions) *tlsconfig.Node {
	t.Helper()
	files := ca.Issue(t, name, options)
	node, err := tlsconfig.NewNode(tlsconfig.NodeSettings{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// dialAsPeer dials address with TLS, trusting the cluster CA, presenting
// the certificate of dialerTLS (none when nil), and runs the peer
// handshake claiming identity. It returns the first refusal.
func dialAsPeer(ctx context.Context, dialerTLS *tlsconfig.Node, clusterCA *tlstest.CA, address string, identity peerIdentity) error {
	trust, err := tlsconfig.NewClient(tlsconfig.ClientSettings{CAFile: clusterCA.CertFile})
	if err != nil {
		return err
	}
	config := trust.Config(address)
	if dialerTLS != nil {
		presented := dialerTLS.ClientConfig("127.0.0.1")
		config.GetClientCertificate = presented.GetClientCertificate
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", address)
	if err != nil {
		return err
	}
	defer conn.Close()
	secured := tls.Client(conn, config)
	if err := secured.HandshakeContext(ctx); err != nil {
		return err
	}
	_, _, err = dialHandshake(secured, identity, "node1")
	return err // nil: accepted
}

// The dialing end refuses an acceptor whose certificate comes from
// another CA, before it sends its hello, and a plain dialer's TLS
// counterpart refuses a plain listener: nothing of the peer handshake
// leaves the node unprotected.
func TestDialPeerRefusesAnAcceptorOutsideTheCluster(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	member := foreignNode(t, ca, "node1", tlstest.IssueOptions{})
	rogue := foreignNode(t, tlstest.NewCA(t, t.TempDir(), "rogue"), "node2", tlstest.IssueOptions{})
	listen := func(serve func(net.Conn)) string {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { listener.Close() })
		go func() {
			for {
				conn, err := listener.Accept()
				if err != nil {
					return
				}
				go serve(conn)
			}
		}()
		return listener.Addr().String()
	}
	heard := make(chan string, 4)
	rogueAddress := listen(func(conn net.Conn) {
		defer conn.Close()
		secured, err := acceptPeerTLS(conn, rogue)
		if err != nil {
			return
		}
		var buffer [8]byte
		if n, _ := secured.Read(buffer[:]); n > 0 {
			heard <- string(buffer[:n])
		}
	})
	ctx := testContext(t)
	_, err := dialPeer(ctx, member, rogueAddress)
	if !errors.Is(err, errPeerRefused) || !errors.Is(err, tlsconfig.ErrUntrustedCertificate) {
		t.Fatalf("dial an acceptor with another CA's certificate: %v", err)
	}
	plainAddress := listen(func(conn net.Conn) {
		defer conn.Close()
		var buffer [8]byte
		if n, _ := conn.Read(buffer[:]); n > 0 {
			heard <- string(buffer[:n])
		}
	})
	if _, err := dialPeer(ctx, member, plainAddress); err == nil {
		t.Fatal("a TLS dial to a plain listener succeeded")
	}
	select {
	case bytes := <-heard:
		if strings.HasPrefix(bytes, "FXH1") {
			t.Fatalf("a peer hello reached a listener outside the cluster: %q", bytes)
		}
	default:
	}
}

// A renewed certificate reaches the peer listener with Node.ReloadTLS
// (what SIGHUP calls): the next handshake presents it, while the links
// already up stay up.
func TestPeerListenerPresentsARenewedCertificateAfterReload(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	c := startBrokerCluster(t, 3, withNodeTLS(t, ca))
	target := c.members["node1"]
	for _, id := range c.order {
		broker := c.members[id].broker
		waitUntil(t, id+"'s peer links up over TLS", func() bool {
			up, inbound := peerLinksUp(broker)
			return up == 2 && inbound == 2
		})
	}
	ctx := testContext(t)
	presented := func() string {
		t.Helper()
		trust, err := tlsconfig.NewClient(tlsconfig.ClientSettings{CAFile: ca.CertFile})
		if err != nil {
			t.Fatal(err)
		}
		dialer := foreignNode(t, ca, "node2", tlstest.IssueOptions{FileSuffix: "-probe"})
		config := trust.Config(target.config.PeerAddress)
		config.GetClientCertificate = dialer.ClientConfig("127.0.0.1").GetClientCertificate
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", target.config.PeerAddress)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		secured := tls.Client(conn, config)
		if err := secured.HandshakeContext(ctx); err != nil {
			t.Fatal(err)
		}
		return secured.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := presented()
	files := target.config.TLS
	renewed := ca.Issue(t, "node1", tlstest.IssueOptions{FileSuffix: "-renewed"})
	tlstest.Replace(t, renewed, tlstest.Files{CertFile: files.CertFile, KeyFile: files.KeyFile})
	if after := presented(); after != before {
		t.Fatalf("the listener presented the renewed certificate before the reload (%s, was %s)", after, before)
	}
	if err := target.node.ReloadTLS(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	after := presented()
	if after == before {
		t.Fatalf("after the reload the peer listener still presents certificate %s", before)
	}
	if up, inbound := peerLinksUp(target.broker); up != 2 || inbound < 2 {
		t.Fatalf("after the reload node1 has %d links up and %d inbound", up, inbound)
	}
}
