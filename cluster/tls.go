package cluster

// TLS between the nodes and on the client listener, as the config file
// names it (docs/cluster.md, docs/security.md):
//
//	nodes[i].tls         {"ca_file", "cert_file", "key_file"}: the cluster CA,
//	                     this node's certificate and key. Raft's transport and
//	                     the peer links of replication use them:
//	                     mutual TLS, a peer's certificate must chain to the CA.
//	nodes[i].client_tls  {"cert_file", "key_file", "client_ca_file",
//	                     "require_client_cert"}: the client listener's.
//	nodes[i].users_file  the users file of the client listener.
//
// Every node has tls or none: a node without it could not speak to the
// others. Relative paths are relative to the process's working directory.
//
// Raft's transport (rafttransport) and the peer links both use the
// *tlsconfig.Node that PeerTLS builds, which reloads on Node.ReloadTLS.

import (
	"fmt"
	"net"

	"github.com/fibrilmq/fibril/tlsconfig"
)

// NodeTLSFiles are a node's files for the links between nodes.
type NodeTLSFiles struct {
	CAFile   string `json:"ca_file"`   // the cluster CA (PEM); peers must chain to it
	CertFile string `json:"cert_file"` // this node's certificate chain (PEM, leaf first), for server and client auth
	KeyFile  string `json:"key_file"`  // its private key (PEM)
}

// ClientTLSFiles are the client listener's files.
type ClientTLSFiles struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
	// ClientCAFile, when set, verifies the certificates clients present;
	// RequireClientCert refuses clients without one.
	ClientCAFile      string `json:"client_ca_file,omitempty"`
	RequireClientCert bool   `json:"require_client_cert,omitempty"`
}

// Settings returns the client listener's tlsconfig settings.
func (f *ClientTLSFiles) Settings() tlsconfig.ServerSettings {
	return tlsconfig.ServerSettings{CertFile: f.CertFile, KeyFile: f.KeyFile, ClientCAFile: f.ClientCAFile,
		RequireClientCert: f.RequireClientCert}
}

// PeerTLS builds the mutual TLS of this node's links to the other nodes
// from its tls files: the cluster CA, its certificate and key. It checks
// the files now (the certificate matches its key, is valid, chains to
// the CA for both server and client authentication, and names the hosts
// of the node's peer and Raft addresses, which the others dial), so a
// wrong file stops the start with a sentence naming it. The peer links
// dial and accept with it (ClientConfig, ServerConfig); its Reload
// re-reads the files. Nil and no error when the node has no tls files.
func (n NodeConfig) PeerTLS() (*tlsconfig.Node, error) {
	if n.TLS == nil {
		return nil, nil
	}
	peerTLS, err := tlsconfig.NewNode(tlsconfig.NodeSettings{CAFile: n.TLS.CAFile, CertFile: n.TLS.CertFile,
		KeyFile: n.TLS.KeyFile})
	if err != nil {
		return nil, fmt.Errorf("cluster: node %s: tls: %w", n.ID, err)
	}
	if err := peerTLS.CheckNames(hostOf(n.RaftAddress), hostOf(n.PeerAddress)); err != nil {
		return nil, fmt.Errorf("cluster: node %s: tls: %w", n.ID, err)
	}
	return peerTLS, nil
}

// validateTLS checks the TLS fields: all files named, and tls on every
// node or none.
func (c *Config) validateTLS(report reportFunc) {
	withTLS := 0
	for index, node := range c.Nodes {
		prefix := fmt.Sprintf("nodes[%d]", index)
		if node.TLS != nil {
			withTLS++
			for _, file := range []struct{ name, value string }{
				{"ca_file", node.TLS.CAFile}, {"cert_file", node.TLS.CertFile}, {"key_file", node.TLS.KeyFile},
			} {
				if file.value == "" {
					report(prefix+".tls."+file.name, "required (tls needs the cluster CA, the node's certificate and its key)")
				}
			}
		}
		if tls := node.ClientTLS; tls != nil {
			if tls.CertFile == "" || tls.KeyFile == "" {
				report(prefix+".client_tls", "cert_file and key_file are both required")
			}
			if tls.RequireClientCert && tls.ClientCAFile == "" {
				report(prefix+".client_tls.require_client_cert", "needs client_ca_file, to verify the certificates")
			}
		}
	}
	if withTLS != 0 && withTLS != len(c.Nodes) {
		report("nodes[].tls", "%d of %d nodes have tls: every node needs it, or none (a node without it "+
			"cannot speak to the others)", withTLS, len(c.Nodes))
	}
}

// hostOf is the host of a host:port address.
func hostOf(address string) string {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return address
	}
	return host
}
