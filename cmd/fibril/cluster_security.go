package main

// The links between nodes off loopback (docs/security.md, "Defaults"). A
// cluster node whose peer_address or raft_address is not a loopback
// address needs its tls files: without them Raft takes plain text from
// anyone who reaches its port (and could propose catalog entries), and
// the peer links carry queue data in the clear. Such a node does not
// start unless --allow-insecure-listen is given, and then it logs a
// warning.

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/cluster"
)

// checkNodeLinkSecurity applies the rule above to the node self.
func checkNodeLinkSecurity(self cluster.NodeConfig, allowInsecure bool, logger *slog.Logger) error {
	if self.TLS != nil {
		return nil
	}
	var exposed []string
	for _, address := range []string{self.PeerAddress, self.RaftAddress} {
		if !isLoopbackAddress(address) {
			exposed = append(exposed, address)
		}
	}
	if len(exposed) == 0 {
		return nil
	}
	if !allowInsecure {
		return fmt.Errorf("%w: node %s links to its peers on %v, not loopback, and has no tls files: give every node "+
			"tls in the cluster config (docs/security.md), bind 127.0.0.1, or allow it explicitly "+
			"(fibril serve --allow-insecure-listen)", actors.ErrInsecureListen, self.ID, exposed)
	}
	logger.Warn("the Raft and peer ports take plain text from the network (allowed explicitly): anyone who "+
		"reaches the Raft port can change the catalog", "node", self.ID, "addresses", fmt.Sprint(exposed))
	return nil
}

// isLoopbackAddress reports whether a host:port address names loopback:
// a loopback IP or "localhost". An empty host (every interface), another
// name or a malformed address counts as exposed.
func isLoopbackAddress(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
