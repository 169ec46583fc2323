package actors

// Mutual TLS on peer links (docs/security.md, "Peer links"). When the
// nodes' config names tls files (cluster.NodeConfig.TLS), every peer link
// runs inside TLS 1.3 built by the node's cluster.Node.PeerTLS:
//
//	dialer                                   acceptor
//	TCP connect, TLS client handshake  --->  TLS server handshake: a client
//	(the acceptor's certificate must          certificate is required and must
//	chain to the cluster CA and name          chain to the cluster CA
//	the host of the address dialed)
//	FXH1 hello (node id ...)           --->  the node id must be in the cluster
//	                                          config, and the dialer's verified
//	                                          certificate must name the host of
//	                                          that node's peer_address
//	... the peer handshake goes on (peer_handshake.go: the secret's proofs)
//
// So a peer link is accepted only from a holder of a certificate of the
// cluster's CA that is issued for the host the claimed node lives on, who
// also knows the cluster secret. Without tls files the links are plain
// TCP and the secret alone authenticates them (loopback and trusted
// networks only; fibril serve warns).
//
// A plain-text dialer reaching a TLS peer listener gets one plain FER1
// (tlsconfig.ServerHandshake) and the end of the connection; a TLS dialer
// reaching a plain listener fails its handshake.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/tlsconfig"
)

// dialPeer connects to a peer's address: plain TCP within peerDialTimeout,
// then, with peerTLS, the TLS handshake within peerHandshakeTimeout.
func dialPeer(ctx context.Context, peerTLS *tlsconfig.Node, address string) (net.Conn, error) {
	dialCtx, cancel := context.WithTimeout(ctx, peerDialTimeout)
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(dialCtx, "tcp", address)
	if err != nil || peerTLS == nil {
		return conn, err
	}
	host, _, splitErr := net.SplitHostPort(address)
	if splitErr != nil {
		host = address
	}
	secured := tls.Client(conn, peerTLS.ClientConfig(host))
	handshakeCtx, cancelHandshake := context.WithTimeout(ctx, peerHandshakeTimeout)
	defer cancelHandshake()
	if err := secured.HandshakeContext(handshakeCtx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: %w", errPeerRefused, tlsconfig.ExplainHandshakeError(err, address, false))
	}
	return secured, nil
}

// acceptPeerTLS runs the server side of the TLS handshake on an accepted
// peer socket, within peerHandshakeTimeout; without peerTLS it returns
// the socket as it is. On failure the socket is closed.
func acceptPeerTLS(conn net.Conn, peerTLS *tlsconfig.Node) (net.Conn, error) {
	if peerTLS == nil {
		return conn, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), peerHandshakeTimeout)
	defer cancel()
	secured, err := tlsconfig.ServerHandshake(ctx, conn, peerTLS.ServerConfig())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errPeerRefused, err)
	}
	return secured, nil
}

// checkPeerCertificate checks, on a TLS link, that the other end's
// verified certificate names the host of the peer_address config gives
// nodeID (the node it says it is), as a dialer checks the acceptor's. A
// plain link passes: it has no certificate.
func checkPeerCertificate(conn net.Conn, nodeID string, config cluster.Config) error {
	secured, ok := conn.(*tls.Conn)
	if !ok {
		return nil
	}
	node, err := config.Node(nodeID)
	if err != nil {
		return fmt.Errorf("%w: %q is not a peer in the cluster config", errPeerRefused, nodeID)
	}
	if err := tlsconfig.VerifyPeerHost(secured.ConnectionState(), node.PeerAddress); err != nil {
		return fmt.Errorf("%w: the certificate of the dialer that says it is %s is not for the host of its peer_address %s: %w",
			errPeerRefused, nodeID, node.PeerAddress, err)
	}
	return nil
}

// peerKnownAndCertified is the acceptor's check of a hello's node id (for
// acceptHandshake): a peer in config whose certificate, on a TLS link,
// names its host. A refusal for the certificate is kept in *refusal so
// the log says why.
func peerKnownAndCertified(conn net.Conn, config cluster.Config, self string, refusal *error) func(string) bool {
	return func(nodeID string) bool {
		if _, err := config.Node(nodeID); err != nil || nodeID == self {
			return false
		}
		*refusal = checkPeerCertificate(conn, nodeID, config)
		return *refusal == nil
	}
}
