package actors

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

type handshakeOutcome struct {
	remote wire.PeerHello
	reader *wire.Reader
	err    error
}

// runHandshake dials a loopback listener as dialer and answers as
// acceptor, returning both sides' outcomes and the sockets.
func runHandshake(t *testing.T, dialer, acceptor peerIdentity, want string, known func(string) bool) (handshakeOutcome, handshakeOutcome, net.Conn, net.Conn) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	accepted := make(chan handshakeOutcome, 1)
	acceptedConn := make(chan net.Conn, 1)
	go func() {
		conn, err := listener.Accept()
		if err != nil {
			accepted <- handshakeOutcome{err: err}
			acceptedConn <- nil
			return
		}
		remote, reader, err := acceptHandshake(conn, acceptor, known)
		acceptedConn <- conn
		accepted <- handshakeOutcome{remote: remote, reader: reader, err: err}
	}()
	conn, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	remote, reader, err := dialHandshake(conn, dialer, want)
	dialed := handshakeOutcome{remote: remote, reader: reader, err: err}
	if err != nil {
		conn.Close() // as the link actor does: the acceptor learns at once
	}
	other := <-acceptedConn
	t.Cleanup(func() {
		conn.Close()
		if other != nil {
			other.Close()
		}
	})
	return dialed, <-accepted, conn, other
}

func knownNodes(ids ...string) func(string) bool {
	return func(id string) bool {
		for _, known := range ids {
			if known == id {
				return true
			}
		}
		return false
	}
}

var (
	secretOne  = []byte("0123456789abcdef-one")
	node1Ident = peerIdentity{clusterID: 1, nodeID: "node1", instance: 11, secret: secretOne}
	node2Ident = peerIdentity{clusterID: 1, nodeID: "node2", instance: 22, secret: secretOne}
)

func TestPeerHandshakeAndTransport(t *testing.T) {
	dialed, accepted, dialerConn, acceptorConn := runHandshake(t, node1Ident, node2Ident, "node2", knownNodes("node1", "node2"))
	if dialed.err != nil || accepted.err != nil {
		t.Fatalf("handshake: dialer %v, acceptor %v", dialed.err, accepted.err)
	}
	if dialed.remote.NodeID != "node2" || dialed.remote.Instance != 22 || accepted.remote.NodeID != "node1" || accepted.remote.Instance != 11 {
		t.Fatalf("identities: dialer saw %+v, acceptor saw %+v", dialed.remote, accepted.remote)
	}
	// A frame the dialer sends right after the handshake reaches the
	// acceptor's transport even if the handshake's reader read it ahead.
	dialer := newPeerTransport(dialerConn, dialed.reader, dialed.remote, nil)
	acceptor := newPeerTransport(acceptorConn, accepted.reader, accepted.remote, nil)
	received := make(chan wire.Progress, 16)
	dialerEnded := make(chan error, 1)
	dialer.start(func(tag wire.Tag, body []byte) error {
		var progress wire.Progress
		if tag != wire.TagProgress {
			return errors.New("unexpected " + tag.String())
		}
		if err := progress.Decode(body); err != nil {
			return err
		}
		received <- progress
		return nil
	}, func(err error) { dialerEnded <- err })
	acceptor.start(func(tag wire.Tag, body []byte) error {
		var push wire.Push
		if err := push.Decode(body); err != nil {
			return err
		}
		return acceptor.sendFrame(&wire.Progress{Partition: push.Partition, Epoch: push.Epoch, Instance: 22,
			DurableNext: push.StartOffset + uint64(push.RecordCount)})
	}, nil)
	for i := range 5 {
		push := wire.Push{Partition: 1000, Epoch: 1, StartOffset: uint64(i), RecordCount: 1, Records: []byte{1}}
		if err := dialer.sendFrame(&push); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		select {
		case progress := <-received:
			if progress.DurableNext != uint64(i+1) {
				t.Fatalf("progress %d = %+v", i, progress)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no progress came back")
		}
	}
	// Silence longer than the keepalive keeps the link up: pings flow.
	time.Sleep(2 * peerKeepaliveInterval)
	if err := dialer.sendFrame(&wire.Push{Partition: 1000, Epoch: 1, StartOffset: 5, RecordCount: 1, Records: []byte{1}}); err != nil {
		t.Fatalf("send after an idle spell: %v", err)
	}
	<-received
	acceptor.close(nil)
	select {
	case err := <-dialerEnded:
		if err == nil {
			t.Fatal("the dialer's link ended without an error when its peer closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dialer did not notice its peer closed")
	}
	if err := dialer.sendFrame(&wire.Ping{RequestID: 1}); !errors.Is(err, errPeerClosed) {
		t.Fatalf("send on a closed link: %v", err)
	}
}

func TestPeerHandshakeRefusals(t *testing.T) {
	otherSecret := node1Ident
	otherSecret.secret = []byte("another-secret-of-16")
	otherCluster := node1Ident
	otherCluster.clusterID = 2
	stranger := node1Ident
	stranger.nodeID = "node9"
	cases := []struct {
		name           string
		dialer         peerIdentity
		acceptor       peerIdentity
		want           string
		dialerError    string
		acceptorRefuse bool
	}{
		{"wrong secret on the dialer", otherSecret, node2Ident, "node2", "does not know the cluster secret", false},
		{"another cluster", otherCluster, node2Ident, "node2", "unauthorized", true},
		{"a node outside the config", stranger, node2Ident, "node2", "unauthorized", true},
		{"dialed the wrong node", node1Ident, node2Ident, "node3", "dialed node3, reached node2", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dialed, accepted, _, _ := runHandshake(t, c.dialer, c.acceptor, c.want, knownNodes("node1", "node2", "node3"))
			if dialed.err == nil || !strings.Contains(dialed.err.Error(), c.dialerError) {
				t.Fatalf("dialer error = %v, want one containing %q", dialed.err, c.dialerError)
			}
			if accepted.err == nil && c.acceptorRefuse {
				t.Fatal("the acceptor took the link")
			}
		})
	}
	// The acceptor refuses a dialer whose proof does not check out: the
	// dialer knows the secret the acceptor shows, but signs with another.
	t.Run("wrong secret on the acceptor's side", func(t *testing.T) {
		acceptorOther := node2Ident
		acceptorOther.secret = []byte("another-secret-of-16")
		dialed, accepted, _, _ := runHandshake(t, node1Ident, acceptorOther, "node2", knownNodes("node1", "node2"))
		if dialed.err == nil || accepted.err == nil {
			t.Fatalf("mismatched secrets: dialer %v, acceptor %v; want both refused", dialed.err, accepted.err)
		}
	})
}

func TestPeerTransportQueueIsBounded(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	transport := newPeerTransport(client, wire.NewReader(client, 0), wire.PeerHello{NodeID: "node2"}, nil)
	big := make([]byte, peerQueueBytesMax/2+1)
	if err := transport.send(big); err != nil {
		t.Fatal(err)
	}
	if err := transport.send(big); !errors.Is(err, errPeerQueueFull) {
		t.Fatalf("second half-bound frame: %v, want errPeerQueueFull", err)
	}
	transport.close(nil)
}
