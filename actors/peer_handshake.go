package actors

// The peer-link handshake (docs/protocol.md 8.1), run on the goroutine
// that dialed or accepted the socket, under one deadline, before any actor
// sees the link:
//
//	dialer                               acceptor
//	FXH1 hello (id, instance, nonce) --->
//	                                     checks version, cluster id, node id
//	                                <--- FXC1 challenge (id, instance, nonce, proof)
//	checks the acceptor's proof,
//	and that it is the node it dialed
//	FXA1 auth (proof)               --->
//	                                     checks the dialer's proof
//
// A failure closes the socket; the acceptor first answers with an error
// frame (unauthorized or unsupported_version) so a misconfigured node says
// why in its peer's log, without telling an intruder which check failed.

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// peerHandshakeTimeout bounds one handshake.
const peerHandshakeTimeout = 5 * time.Second

// errPeerRefused is wrapped by every handshake refusal.
var errPeerRefused = errors.New("actors: peer link refused")

// peerIdentity is what one side says about itself in a handshake.
type peerIdentity struct {
	clusterID uint64
	nodeID    string
	instance  uint64
	secret    []byte
}

func (id peerIdentity) hello() (wire.PeerHello, error) {
	nonce := make([]byte, wire.PeerNonceBytes)
	if _, err := rand.Read(nonce); err != nil {
		return wire.PeerHello{}, err
	}
	return wire.PeerHello{Version: wire.PeerProtocolVersion, ClusterID: id.clusterID, NodeID: id.nodeID,
		Instance: id.instance, Nonce: nonce, MaxBodyBytes: peerMaxBodyBytes}, nil
}

// dialHandshake opens a link as the dialer and returns the acceptor's
// identity and the reader to go on with (it may hold frames read ahead).
// want is the node the dialer meant to reach.
func dialHandshake(conn net.Conn, self peerIdentity, want string) (wire.PeerHello, *wire.Reader, error) {
	remote, reader, err := dialHandshakeSteps(conn, self, want)
	if err != nil {
		return wire.PeerHello{}, nil, err
	}
	return remote, reader, nil
}

func dialHandshakeSteps(conn net.Conn, self peerIdentity, want string) (wire.PeerHello, *wire.Reader, error) {
	_ = conn.SetDeadline(time.Now().Add(peerHandshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	hello, err := self.hello()
	if err != nil {
		return wire.PeerHello{}, nil, err
	}
	writer := wire.NewWriter(conn, peerMaxBodyBytes)
	if err := writeAndFlush(writer, &hello); err != nil {
		return wire.PeerHello{}, nil, err
	}
	reader := wire.NewReader(conn, peerMaxBodyBytes)
	tag, body, err := reader.Next()
	if err != nil {
		return wire.PeerHello{}, nil, fmt.Errorf("peer hello to %s: %w", want, err)
	}
	if tag == wire.TagError {
		var refusal wire.ErrorFrame
		_ = refusal.Decode(body)
		return wire.PeerHello{}, nil, fmt.Errorf("%w: %s answered %s: %s", errPeerRefused, want, refusal.Code, refusal.Message)
	}
	var challenge wire.PeerChallenge
	if tag != wire.TagPeerChallenge {
		return wire.PeerHello{}, nil, fmt.Errorf("%w: %s answered the hello with %s", errPeerRefused, want, tag)
	}
	if err := challenge.Decode(body); err != nil {
		return wire.PeerHello{}, nil, err
	}
	acceptor := challenge.PeerHello
	switch {
	case acceptor.ClusterID != self.clusterID:
		return wire.PeerHello{}, nil, fmt.Errorf("%w: %s belongs to cluster %d, not %d", errPeerRefused, want, acceptor.ClusterID, self.clusterID)
	case acceptor.NodeID != want:
		return wire.PeerHello{}, nil, fmt.Errorf("%w: dialed %s, reached %s", errPeerRefused, want, acceptor.NodeID)
	case !wire.CheckPeerProof(challenge.Proof, self.secret, wire.PeerProofAcceptor, &hello, &acceptor):
		return wire.PeerHello{}, nil, fmt.Errorf("%w: %s does not know the cluster secret", errPeerRefused, want)
	}
	auth := wire.PeerAuth{Proof: wire.PeerProof(self.secret, wire.PeerProofDialer, &hello, &acceptor)}
	if err := writeAndFlush(writer, &auth); err != nil {
		return wire.PeerHello{}, nil, err
	}
	return acceptor, reader, nil
}

// acceptHandshake answers a link as the acceptor and returns the dialer's
// identity and the reader to go on with. known says whether a node id is
// in the cluster config.
func acceptHandshake(conn net.Conn, self peerIdentity, known func(nodeID string) bool) (wire.PeerHello, *wire.Reader, error) {
	_ = conn.SetDeadline(time.Now().Add(peerHandshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	writer := wire.NewWriter(conn, peerMaxBodyBytes)
	refuse := func(code wire.Code, reason string) (wire.PeerHello, *wire.Reader, error) {
		_ = writeAndFlush(writer, &wire.ErrorFrame{Code: code, Message: "peer link refused"})
		return wire.PeerHello{}, nil, fmt.Errorf("%w: %s", errPeerRefused, reason)
	}
	reader := wire.NewReader(conn, peerHelloBodyBytesMax)
	tag, body, err := reader.Next()
	if err != nil {
		return wire.PeerHello{}, nil, fmt.Errorf("peer hello: %w", err)
	}
	var hello wire.PeerHello
	if tag != wire.TagPeerHello {
		return refuse(wire.CodeProtocolViolation, fmt.Sprintf("the first frame is %s, not a peer hello", tag))
	}
	if err := hello.Decode(body); err != nil {
		return refuse(wire.CodeMalformedFrame, err.Error())
	}
	switch {
	case hello.Version != wire.PeerProtocolVersion:
		return refuse(wire.CodeUnsupportedVersion, fmt.Sprintf("%s speaks peer protocol %d", hello.NodeID, hello.Version))
	case hello.ClusterID != self.clusterID:
		return refuse(wire.CodeUnauthorized, fmt.Sprintf("%s belongs to cluster %d, not %d", hello.NodeID, hello.ClusterID, self.clusterID))
	case !known(hello.NodeID) || hello.NodeID == self.nodeID:
		return refuse(wire.CodeUnauthorized, fmt.Sprintf("%q is not a peer in the cluster config", hello.NodeID))
	}
	acceptor, err := self.hello()
	if err != nil {
		return wire.PeerHello{}, nil, err
	}
	challenge := wire.PeerChallenge{PeerHello: acceptor,
		Proof: wire.PeerProof(self.secret, wire.PeerProofAcceptor, &hello, &acceptor)}
	if err := writeAndFlush(writer, &challenge); err != nil {
		return wire.PeerHello{}, nil, err
	}
	tag, body, err = reader.Next()
	if err != nil {
		return wire.PeerHello{}, nil, fmt.Errorf("peer auth from %s: %w", hello.NodeID, err)
	}
	var auth wire.PeerAuth
	if tag != wire.TagPeerAuth || auth.Decode(body) != nil ||
		!wire.CheckPeerProof(auth.Proof, self.secret, wire.PeerProofDialer, &hello, &acceptor) {
		return refuse(wire.CodeUnauthorized, fmt.Sprintf("%s does not know the cluster secret", hello.NodeID))
	}
	reader.SetMaxBodyBytes(peerMaxBodyBytes)
	return hello, reader, nil
}

// peerHelloBodyBytesMax bounds a peer hello's body before the dialer is
// known: a node id of at most 64 bytes and fixed fields.
const peerHelloBodyBytesMax = 1 << 10

func writeAndFlush(writer *wire.Writer, frame wire.Frame) error {
	if err := writer.WriteFrame(frame); err != nil {
		return err
	}
	return writer.Flush()
}
