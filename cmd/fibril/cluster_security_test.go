package main

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/cluster"
)

// A node's Raft and peer ports off loopback need tls files, or the
// explicit flag (which warns); on loopback plain is the default.
func TestNodeLinksOffLoopbackNeedTLS(t *testing.T) {
	node := func(peer, raft string, withTLS bool) cluster.NodeConfig {
		n := cluster.NodeConfig{ID: "node1", PeerAddress: peer, RaftAddress: raft}
		if withTLS {
			n.TLS = &cluster.NodeTLSFiles{CAFile: "ca.pem", CertFile: "node1.pem", KeyFile: "node1-key.pem"}
		}
		return n
	}
	cases := []struct {
		name    string
		self    cluster.NodeConfig
		allow   bool
		refused bool
	}{
		{"loopback, plain", node("127.0.0.1:7430", "127.0.0.1:7440", false), false, false},
		{"localhost and ::1, plain", node("localhost:7430", "[::1]:7440", false), false, false},
		{"a LAN address, plain", node("10.0.0.1:7430", "127.0.0.1:7440", false), false, true},
		{"every interface, plain", node("127.0.0.1:7430", ":7440", false), false, true},
		{"a host name, plain", node("node1.internal:7430", "node1.internal:7440", false), false, true},
		{"a LAN address, plain, allowed", node("10.0.0.1:7430", "10.0.0.1:7440", false), true, false},
		{"a LAN address with tls", node("10.0.0.1:7430", "10.0.0.1:7440", true), false, false},
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range cases {
		err := checkNodeLinkSecurity(tc.self, tc.allow, logger)
		if refused := errors.Is(err, actors.ErrInsecureListen); refused != tc.refused || (err != nil && !refused) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
