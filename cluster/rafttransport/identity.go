package rafttransport

// Who an accepted connection is (Factory.Peers). dragonboat's frames say
// which node sent them only inside a message batch, as its source
// address (the sender's Raft address), so the check has two steps:
//
//	after the TLS handshake   the verified certificate must name the host of
//	                          at least one node's Raft address: those
//	                          addresses are what the connection may claim
//	each message batch        its source address must be one of them
//
// Snapshot chunks carry no address; the connection's first step covers
// them. The host check is the peer links' own (tlsconfig.VerifyPeerHost).

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/fibrilmq/fibril/tlsconfig"
)

// ErrNotAPeer is the refusal of a connection, or of a batch, from a
// certificate that is not for the node it claims to be.
var ErrNotAPeer = errors.New("rafttransport: the connection is not from a node of the cluster config")

// addressClaims are the Raft addresses one connection may send batches
// from; nil when nothing is checked (plain text, or no Peers).
type addressClaims map[string]bool

// check refuses a batch whose source address the connection may not
// claim.
func (claims addressClaims) check(source string) error {
	if claims == nil || claims[source] {
		return nil
	}
	return fmt.Errorf("%w: a message batch from %q, which is not the Raft address of a node its certificate is for "+
		"(it may send from %v)", ErrNotAPeer, source, claims.list())
}

func (claims addressClaims) list() []string {
	addresses := make([]string, 0, len(claims))
	for address := range claims {
		addresses = append(addresses, address)
	}
	return addresses
}

// certifiedAddresses returns the Raft addresses an accepted connection
// may claim: the configured ones whose host its verified certificate
// names. A TLS connection whose certificate names none of them is
// refused; a plain one, or a transport without Peers, is not checked.
func (t *Transport) certifiedAddresses(conn net.Conn) (addressClaims, error) {
	secured, ok := conn.(*tls.Conn)
	if !ok || len(t.peers) == 0 {
		return nil, nil
	}
	state := secured.ConnectionState()
	claims := addressClaims{}
	var refusal error
	for _, address := range t.peers {
		err := tlsconfig.VerifyPeerHost(state, address)
		if err == nil {
			claims[address] = true
		} else if refusal == nil {
			refusal = err
		}
	}
	if len(claims) == 0 {
		return nil, fmt.Errorf("%w: its certificate is for the host of no node's raft_address %v: %w", ErrNotAPeer, t.peers, refusal)
	}
	return claims, nil
}
