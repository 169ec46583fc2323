package rafttransport

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

const waitTimeout = 10 * time.Second

// receiver is one node's end under test: its transport and what reached it.
type receiver struct {
	transport *Transport
	batches   chan pb.MessageBatch
	chunks    chan pb.Chunk
}

func startReceiver(t *testing.T, address string, tls *tlsconfig.Node) *receiver {
	t.Helper()
	return startReceiverOf(t, address, &Factory{TLS: tls})
}

// startReceiverOf is startReceiver with the whole factory given.
func startReceiverOf(t *testing.T, address string, factory *Factory) *receiver {
	t.Helper()
	r := &receiver{batches: make(chan pb.MessageBatch, 64), chunks: make(chan pb.Chunk, 64)}
	r.transport = factory.Create(config.NodeHostConfig{RaftAddress: address},
		func(batch pb.MessageBatch) { r.batches <- batch },
		func(chunk pb.Chunk) bool { r.chunks <- chunk; return true }).(*Transport)
	if err := r.transport.Start(); err != nil {
		t.Fatalf("start transport on %s: %v", address, err)
	}
	t.Cleanup(func() { _ = r.transport.Close() })
	return r
}

func freeAddress(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().String()
}

func batch(term uint64) pb.MessageBatch {
	return pb.MessageBatch{DeploymentId: 7, SourceAddress: "a", Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: 3, To: 2, From: 1, Term: term}}}
}

func (r *receiver) expectTerm(t *testing.T, term uint64) {
	t.Helper()
	select {
	case got := <-r.batches:
		if len(got.Requests) != 1 || got.Requests[0].Term != term || got.DeploymentId != 7 {
			t.Fatalf("received %+v, want one heartbeat of term %d", got, term)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("the batch of term %d never arrived", term)
	}
}

// The bytes on the wire are those of dragonboat's own TCP transport: a
// header checked against a frame built by hand from its format.
func TestFrameHeaderMatchesTheFormat(t *testing.T) {
	var head [headerBytes]byte
	header{method: methodMessages, size: 0x0102, bodyCRC: 0xA1B2C3D4}.encode(&head)
	// method 100, size 258, header CRC (computed over the header with
	// this field 0; computed apart from this code), payload CRC.
	want := "0064" + "0000000000000102" + "f4a63a6a" + "a1b2c3d4"
	if got := hex.EncodeToString(head[:]); got != want {
		t.Fatalf("header %s, want %s", got, want)
	}
	decoded, err := decodeHeader(head)
	if err != nil || decoded != (header{method: methodMessages, size: 0x0102, bodyCRC: 0xA1B2C3D4}) {
		t.Fatalf("decode: %+v, %v", decoded, err)
	}
}

func TestBadFramesAreRefused(t *testing.T) {
	var good [headerBytes]byte
	header{method: methodChunk, size: 10}.encode(&good)
	cases := map[string]func(h *[headerBytes]byte){
		"header checksum": func(h *[headerBytes]byte) { h[5] ^= 1 },
		"method":          func(h *[headerBytes]byte) { header{method: 7, size: 10}.encode(h) },
		"empty payload":   func(h *[headerBytes]byte) { header{method: methodChunk, size: 0}.encode(h) },
		"huge payload":    func(h *[headerBytes]byte) { header{method: methodChunk, size: 1 << 40}.encode(h) },
	}
	for name, damage := range cases {
		h := good
		damage(&h)
		if _, err := decodeHeader(h); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", name, err)
		}
	}
	// A payload whose checksum does not match ends the read.
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go func() {
		var frame bytes.Buffer
		var h [headerBytes]byte
		header{method: methodMessages, size: 3, bodyCRC: 1}.encode(&h)
		frame.Write(magic[:])
		frame.Write(h[:])
		frame.WriteString("abc")
		_, _ = client.Write(frame.Bytes())
	}()
	if err := readMagic(server, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readFrame(server, nil, false); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("payload with a wrong checksum: %v, want ErrBadFrame", err)
	}
}

// A message connection to a peer that restarted on the same address
// delivers to the new process, with no error for dragonboat to count
// against the peer: the failure that made elections after a failover
// wait for dragonboat's circuit breaker.
func TestAConnectionReachesAPeerThatRestarted(t *testing.T) {
	address := freeAddress(t)
	sender := startReceiver(t, freeAddress(t), nil)
	first := startReceiver(t, address, nil)
	conn, err := sender.transport.GetConnection(t.Context(), address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(batch(1)); err != nil {
		t.Fatalf("send to the first process: %v", err)
	}
	first.expectTerm(t, 1)

	_ = first.transport.Close() // the peer's process ends
	second := startReceiver(t, address, nil)
	for term := uint64(2); term <= 4; term++ {
		if err := conn.SendMessageBatch(batch(term)); err != nil {
			t.Fatalf("send %d after the peer restarted: %v", term, err)
		}
		second.expectTerm(t, term)
	}
}

// A peer that is down is an error at once, so dragonboat backs off.
func TestAConnectionToADownPeerFails(t *testing.T) {
	address := freeAddress(t)
	sender := startReceiver(t, freeAddress(t), nil)
	peer := startReceiver(t, address, nil)
	conn, err := sender.transport.GetConnection(t.Context(), address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = peer.transport.Close()
	var sendErr error
	for i := 0; i < 3 && sendErr == nil; i++ {
		sendErr = conn.SendMessageBatch(batch(uint64(i)))
	}
	if sendErr == nil {
		t.Fatal("three sends to a peer that is down all succeeded")
	}
	if _, err := sender.transport.GetConnection(t.Context(), address); err == nil {
		t.Fatal("dialled a peer that is down")
	}
}

func TestSnapshotChunksArriveBeforeTheStreamEnds(t *testing.T) {
	address := freeAddress(t)
	sender := startReceiver(t, freeAddress(t), nil)
	peer := startReceiver(t, address, nil)
	stream, err := sender.transport.GetSnapshotConnection(t.Context(), address)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 3; i++ {
		if err := stream.SendChunk(pb.Chunk{ShardID: 3, ReplicaID: 2, ChunkId: i, ChunkCount: 3, Data: bytes.Repeat([]byte{byte(i)}, 1000)}); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	stream.Close() // waits for the receiver's answer to the stream's end
	for i := uint64(0); i < 3; i++ {
		select {
		case chunk := <-peer.chunks:
			if chunk.ChunkId != i || len(chunk.Data) != 1000 || chunk.Data[0] != byte(i) {
				t.Fatalf("chunk %d: got id %d, %d bytes", i, chunk.ChunkId, len(chunk.Data))
			}
		default:
			t.Fatalf("chunk %d had not arrived when the stream closed", i)
		}
	}
}

func tlsNode(t *testing.T, ca *tlstest.CA, name string) *tlsconfig.Node {
	t.Helper()
	files := ca.Issue(t, name)
	node, err := tlsconfig.NewNode(tlsconfig.NodeSettings{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	address := freeAddress(t)
	peer := startReceiver(t, address, tlsNode(t, ca, "peer"))
	sender := startReceiver(t, freeAddress(t), tlsNode(t, ca, "sender"))
	conn, err := sender.transport.GetConnection(t.Context(), address)
	if err != nil {
		t.Fatalf("dial with a certificate of the cluster CA: %v", err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(batch(9)); err != nil {
		t.Fatal(err)
	}
	peer.expectTerm(t, 9)

	stranger := startReceiver(t, freeAddress(t), tlsNode(t, tlstest.NewCA(t, t.TempDir(), "other"), "stranger"))
	if conn, err := stranger.transport.GetConnection(t.Context(), address); err == nil {
		// TLS 1.3: the server's refusal of the client certificate
		// arrives after the client's side of the handshake.
		_ = conn.SendMessageBatch(batch(10))
		conn.Close()
	}
	select {
	case got := <-peer.batches:
		t.Fatalf("a peer of another CA got a batch through: %+v", got)
	case <-time.After(300 * time.Millisecond):
	}

	plain := startReceiver(t, freeAddress(t), nil)
	if conn, err := plain.transport.GetConnection(t.Context(), address); err == nil {
		_ = conn.SendMessageBatch(batch(11))
		conn.Close()
	}
	select {
	case got := <-peer.batches:
		t.Fatalf("a plain-text peer got a batch through: %+v", got)
	case <-time.After(300 * time.Millisecond):
	}
}

// With Peers, the accepting side checks who a connection is, as peer
// links do: a certificate of the cluster CA that names the host of no
// node's Raft address is refused, and a node's connection may send
// batches only from its own address.
func TestMutualTLSChecksTheNodesIdentity(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	address := freeAddress(t)
	peers := []string{"node-a.test:7440", "node-b.test:7440"} // only their hosts are checked, never dialled
	peer := startReceiverOf(t, address, &Factory{TLS: tlsNode(t, ca, "peer"), Peers: peers})
	fromB := func(term uint64, source string) pb.MessageBatch {
		b := batch(term)
		b.SourceAddress = source
		return b
	}

	nodeB := startReceiver(t, freeAddress(t), issuedNode(t, ca, "node-b.test"))
	conn, err := nodeB.transport.GetConnection(t.Context(), address)
	if err != nil {
		t.Fatalf("dial with node-b's certificate: %v", err)
	}
	if err := conn.SendMessageBatch(fromB(1, "node-b.test:7440")); err != nil {
		t.Fatal(err)
	}
	peer.expectTerm(t, 1)
	_ = conn.SendMessageBatch(fromB(2, "node-a.test:7440")) // node-b speaking as node-a
	conn.Close()
	select {
	case got := <-peer.batches:
		t.Fatalf("a batch claiming another node's address got through: %+v", got)
	case <-time.After(300 * time.Millisecond):
	}

	intruder := startReceiver(t, freeAddress(t), issuedNode(t, ca, "intruder.test"))
	if conn, err := intruder.transport.GetConnection(t.Context(), address); err == nil {
		_ = conn.SendMessageBatch(fromB(3, "node-b.test:7440"))
		conn.Close()
	}
	select {
	case got := <-peer.batches:
		t.Fatalf("a certificate of the cluster CA for no node got a batch through: %+v", got)
	case <-time.After(300 * time.Millisecond):
	}
	claims, err := peer.transport.certifiedAddresses(tlsClientOf(t, ca, address, "intruder.test"))
	if !errors.Is(err, ErrNotAPeer) || !errors.Is(err, tlsconfig.ErrCertificateName) || claims != nil {
		t.Fatalf("the intruder's certificate: %v, %v; want ErrNotAPeer naming the certificate's names", claims, err)
	}
}

// tlsClientOf is the accepting end of a TLS connection to address whose
// dialer presents a certificate of ca for dnsName, for checks on it.
func tlsClientOf(t *testing.T, ca *tlstest.CA, address, dnsName string) net.Conn {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	server, client := tlsNode(t, ca, "acceptor-"+dnsName), issuedNode(t, ca, dnsName)
	accepted := make(chan net.Conn, 1)
	go func() {
		raw, err := listener.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		conn := tls.Server(raw, server.ServerConfig())
		if conn.HandshakeContext(t.Context()) != nil {
			accepted <- nil
			return
		}
		accepted <- conn
	}()
	dialled, err := client.DialContext(t.Context(), "tcp", listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialled.Close() })
	conn := <-accepted
	if conn == nil {
		t.Fatal("the test handshake failed")
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// issuedNode is a node whose certificate names dnsName only.
func issuedNode(t *testing.T, ca *tlstest.CA, dnsName string) *tlsconfig.Node {
	t.Helper()
	files := ca.Issue(t, dnsName, tlstest.IssueOptions{DNSNames: []string{dnsName}, IPs: []net.IP{}})
	node, err := tlsconfig.NewNode(tlsconfig.NodeSettings{CAFile: ca.CertFile, CertFile: files.CertFile, KeyFile: files.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// Close ends every goroutine the transport started, the watchers of its
// connections with them.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	address := freeAddress(t)
	peer := startReceiver(t, address, nil)
	sender := startReceiver(t, freeAddress(t), nil)
	conn, err := sender.transport.GetConnection(t.Context(), address)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.SendMessageBatch(batch(1)); err != nil {
		t.Fatal(err)
	}
	peer.expectTerm(t, 1)
	conn.Close()
	_ = sender.transport.Close()
	_ = peer.transport.Close()
	deadline := time.Now().Add(waitTimeout)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines before, %d after Close", before, after)
	}
}

// A reload of the node's files reaches the accepting side: a certificate
// that does not name the address is refused by dialers; after the files
// are renewed and reloaded, without a restart, they connect.
func TestTheAcceptingSideUsesReloadedCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	wrong := ca.Issue(t, "peer", tlstest.IssueOptions{DNSNames: []string{"elsewhere.invalid"}, IPs: []net.IP{}})
	node, err := tlsconfig.NewNode(tlsconfig.NodeSettings{CAFile: ca.CertFile, CertFile: wrong.CertFile, KeyFile: wrong.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	address := freeAddress(t)
	peer := startReceiver(t, address, node)
	sender := startReceiver(t, freeAddress(t), tlsNode(t, ca, "sender"))
	if conn, err := sender.transport.GetConnection(t.Context(), address); err == nil {
		conn.Close()
		t.Fatal("dialled a peer whose certificate does not name its address")
	}
	tlstest.Replace(t, ca.Issue(t, "peer", tlstest.IssueOptions{FileSuffix: "-renewed"}), wrong)
	if err := node.Reload(); err != nil {
		t.Fatal(err)
	}
	conn, err := sender.transport.GetConnection(t.Context(), address)
	if err != nil {
		t.Fatalf("dial after the peer reloaded a certificate that names it: %v", err)
	}
	defer conn.Close()
	if err := conn.SendMessageBatch(batch(5)); err != nil {
		t.Fatal(err)
	}
	peer.expectTerm(t, 5)
}

// Whatever bytes arrive, the reader returns a frame or an error, never
// panics, never allocates beyond the bound, and a frame it accepts is one
// the writer would have written.
func FuzzReadFrame(f *testing.F) {
	var good bytes.Buffer
	var head [headerBytes]byte
	header{method: methodMessages, size: 3, bodyCRC: 0x352441c2}.encode(&head)
	good.Write(head[:])
	good.WriteString("abc")
	f.Add(good.Bytes(), false)
	f.Add(good.Bytes(), true)
	f.Add([]byte{0, 0x64, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false)
	f.Fuzz(func(t *testing.T, data []byte, encrypted bool) {
		client, server := net.Pipe()
		defer server.Close()
		go func() {
			_, _ = client.Write(data)
			client.Close()
		}()
		h, payload, err := readFrame(server, nil, encrypted)
		if err != nil {
			return
		}
		if uint64(len(payload)) != h.size || h.size > maxPayloadBytes {
			t.Fatalf("accepted a frame of %d bytes announcing %d", len(payload), h.size)
		}
		var again bytes.Buffer
		var check [headerBytes]byte
		h.encode(&check)
		again.Write(check[:])
		again.Write(payload)
		if !bytes.HasPrefix(data, again.Bytes()) {
			t.Fatalf("accepted a frame the writer would not write: %x", data)
		}
	})
}
