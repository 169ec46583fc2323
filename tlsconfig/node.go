package tlsconfig

// Node is mutual TLS between the nodes of a cluster: every node holds a
// certificate signed by the cluster's CA, valid for both server and
// client authentication, and each end of a peer link verifies the other
// against that CA. A certificate from any other CA is refused, whichever
// end holds it. TLS 1.3 only: both ends are Fibril nodes.
//
// Identity: the CA says "a node of this cluster"; which node is for the
// peer handshake to say, and VerifyPeerHost checks that the other end's
// verified certificate is issued for the host of the node it says it is
// (PeerNames lists the names it carries).
//
// Reload: ServerConfig answers each handshake with the material in force
// (certificate and CA), and ClientConfig's certificate is taken at each
// handshake (GetClientCertificate). ClientConfig reads the CA pool when it
// is called, so a dialer calls it for each connection; links already
// established keep their session.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"
)

// NodeSettings name a node's files for peer links.
type NodeSettings struct {
	CAFile   string // the cluster CA (PEM); peers must chain to it
	CertFile string // this node's certificate chain (PEM, leaf first)
	KeyFile  string // this node's private key (PEM)
}

// Node builds the *tls.Config of both ends of a peer link and reloads its
// files. Its methods are safe for concurrent use.
type Node struct {
	settings NodeSettings
	current  atomic.Pointer[nodeMaterial]
	now      func() time.Time
}

type nodeMaterial struct {
	certificate *tls.Certificate
	leaf        *x509.Certificate
	pool        *x509.CertPool
	server      *tls.Config // handed to each accepted handshake
	warnings    []string
}

// NewNode reads the files named in settings. The node's own certificate
// must verify against the cluster CA for both server and client
// authentication, so a wrong file fails here and not at the first link.
func NewNode(settings NodeSettings) (*Node, error) {
	node := &Node{settings: settings, now: time.Now}
	material, err := node.load()
	if err != nil {
		return nil, err
	}
	node.current.Store(material)
	return node, nil
}

// ServerConfig is the accepting end of peer links: a client certificate
// is required and verified against the cluster CA.
func (n *Node) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return n.current.Load().server, nil
		},
	}
}

// ClientConfig is the dialing end of a peer link to serverName (the host
// of the peer's address: its certificate must name it): it verifies the
// peer against the cluster CA in force now, and presents this node's
// certificate in force at the handshake.
func (n *Node) ClientConfig(serverName string) *tls.Config {
	material := n.current.Load()
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		RootCAs:    material.pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return n.current.Load().certificate, nil
		},
	}
}

// DialContext dials a peer at address and completes the handshake within
// ctx. A handshake error comes back explained (ExplainHandshakeError).
func (n *Node) DialContext(ctx context.Context, network, address string) (*tls.Conn, error) {
	return dialTLS(ctx, network, address, n.ClientConfig(hostOf(address)))
}

// Reload reads the files again. When they load, new handshakes use them;
// when not, the material in force stays and the error says why.
func (n *Node) Reload() error {
	material, err := n.load()
	if err != nil {
		return reloadError(err)
	}
	n.current.Store(material)
	return nil
}

// Warnings returns what is allowed but unwise in the files in force.
func (n *Node) Warnings() []string { return slices.Clone(n.current.Load().warnings) }

// CheckNames returns an error naming every host the certificate in force
// does not carry (as a DNS name or an IP address): peers that dial this
// node at such a host would refuse it. A node checks the hosts of its own
// peer and Raft addresses at start.
func (n *Node) CheckNames(hosts ...string) error {
	leaf := n.current.Load().leaf
	var missing []string
	for _, host := range hosts {
		if err := leaf.VerifyHostname(host); err != nil && !slices.Contains(missing, host) {
			missing = append(missing, host)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s does not name %v, which peers dial; it names %s", ErrCertificateFile,
		n.settings.CertFile, missing, certificateNames(leaf))
}

func (n *Node) load() (*nodeMaterial, error) {
	now := n.now()
	pool, warnings, err := loadPool(n.settings.CAFile)
	if err != nil {
		return nil, err
	}
	pair, err := loadKeyPair(n.settings.CertFile, n.settings.KeyFile, now)
	if err != nil {
		return nil, err
	}
	if err := verifyChain(pair, pool, n.settings.CertFile, n.settings.CAFile, now,
		x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	server := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*pair.certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	warnings = append(warnings, keyFileWarning(n.settings.KeyFile)...)
	return &nodeMaterial{certificate: pair.certificate, leaf: pair.leaf, pool: pool, server: server, warnings: warnings}, nil
}

// PeerNames returns the names in the verified certificate of the other
// end of a link (DNS names, then IP addresses, then the common name), or
// nil when it presented none that verified.
func PeerNames(state tls.ConnectionState) []string {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := state.VerifiedChains[0][0]
	names := slices.Clone(leaf.DNSNames)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	if leaf.Subject.CommonName != "" {
		names = append(names, leaf.Subject.CommonName)
	}
	return names
}

// VerifyPeerHost checks that the verified certificate of the other end of
// a link names the host of address (a host:port, or a bare host) as a
// DNS name or an IP address: the check a dialer makes of the server
// name, made by the accepting end of a link between nodes once the other
// end says which node it is. The error wraps ErrCertificateName and lists
// the names the certificate carries; a link without a verified
// certificate fails too.
func VerifyPeerHost(state tls.ConnectionState, address string) error {
	host := hostOf(address)
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return fmt.Errorf("%w: the other end presented no verified certificate", ErrCertificateName)
	}
	if err := state.VerifiedChains[0][0].VerifyHostname(host); err != nil {
		return fmt.Errorf("%w: it names %v, not %s", ErrCertificateName, PeerNames(state), host)
	}
	return nil
}

// hostOf returns the host of a host:port address, or the address itself.
func hostOf(address string) string {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return address
	}
	return host
}
