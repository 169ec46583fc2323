package actors

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// scriptedConn is a net.Conn whose reads come from a fixed script and
// whose writes are counted and dropped: the acceptor's side of a peer
// link fed whatever a stranger sends.
type scriptedConn struct {
	script  *bytes.Reader
	written int
}

func (c *scriptedConn) Read(p []byte) (int, error)  { return c.script.Read(p) }
func (c *scriptedConn) Write(p []byte) (int, error) { c.written += len(p); return len(p), nil }
func (c *scriptedConn) Close() error                { return nil }
func (c *scriptedConn) LocalAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *scriptedConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
}
func (c *scriptedConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptedConn) SetWriteDeadline(time.Time) error { return nil }

// The acceptor's side of the peer handshake, fed arbitrary bytes: it
// never panics and never accepts. Whatever the input, the dialer's proof
// would have to cover the acceptor's fresh random nonce, which the input
// cannot know, so every run must end in a refusal.
func FuzzAcceptPeerHandshake(f *testing.F) {
	hello, err := node2Ident.hello()
	if err != nil {
		f.Fatal(err)
	}
	helloBytes := hello.Encode(nil)
	f.Add(helloBytes)
	f.Add(append(append([]byte{}, helloBytes...), (&wire.PeerAuth{Proof: make([]byte, 32)}).Encode(nil)...))
	f.Add((&wire.PeerAuth{Proof: make([]byte, 32)}).Encode(nil))
	f.Add(helloBytes[:len(helloBytes)/2])
	f.Add([]byte("FXH1\x7f\xff\xff\xff"))
	f.Add((&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "a client"}).Encode(nil))
	f.Add([]byte{})
	known := knownNodes("node1", "node2")
	f.Fuzz(func(t *testing.T, input []byte) {
		conn := &scriptedConn{script: bytes.NewReader(input)}
		remote, reader, err := acceptHandshake(conn, node1Ident, known)
		if err == nil || reader != nil || remote.NodeID != "" {
			t.Fatalf("accepted %q as %+v (err %v)", input, remote, err)
		}
		if errors.Is(err, errPeerRefused) && conn.written == 0 {
			t.Fatalf("refused without telling the dialer: %v", err)
		}
	})
}
