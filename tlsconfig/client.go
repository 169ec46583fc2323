package tlsconfig

// Client is the TLS side of a client (the Go SDK, fibrilctl): the CAs
// that sign the node's certificate, optionally a client certificate, and
// the name the node's certificate must carry.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"sync/atomic"
	"time"
)

// ClientSettings name a client's files.
type ClientSettings struct {
	// CAFile holds the CAs that sign the node's certificate (PEM).
	// Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are a client certificate and key, for a node
	// that asks for one; both or neither.
	CertFile, KeyFile string
	// ServerName is the name the node's certificate must carry. Empty:
	// the host of the address dialed.
	ServerName string
}

// Client builds a client's *tls.Config and reloads its files. Its
// methods are safe for concurrent use.
type Client struct {
	settings ClientSettings
	current  atomic.Pointer[clientMaterial]
	now      func() time.Time
}

type clientMaterial struct {
	pool        *x509.CertPool // nil: the system's roots
	certificate *tls.Certificate
	warnings    []string
}

// NewClient reads the files named in settings.
func NewClient(settings ClientSettings) (*Client, error) {
	client := &Client{settings: settings, now: time.Now}
	material, err := client.load()
	if err != nil {
		return nil, err
	}
	client.current.Store(material)
	return client, nil
}

// Config returns the configuration for a connection to address
// (host:port): TLS 1.2 or later, the node verified against the CA file in
// force now under ServerName or the address's host, and the client
// certificate in force at the handshake. Call it for each connection.
func (c *Client) Config(address string) *tls.Config {
	material := c.current.Load()
	serverName := c.settings.ServerName
	if serverName == "" {
		serverName = hostOf(address)
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, RootCAs: material.pool}
	if material.certificate != nil {
		config.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.current.Load().certificate, nil
		}
	}
	return config
}

// DialContext dials address over network and completes the handshake
// within ctx; it fits the SDK's Options.Dialer:
//
//	options.Dialer = func(ctx context.Context, address string) (net.Conn, error) {
//		return tlsClient.DialContext(ctx, "tcp", address)
//	}
//
// A handshake error comes back explained (ExplainHandshakeError). Under
// TLS 1.3 a node that refuses the client's certificate says so after the
// client's handshake has completed: the error arrives at the first read
// (the hello-ok), and the caller passes it to ExplainHandshakeError too.
func (c *Client) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return dialTLS(ctx, network, address, c.Config(address))
}

// Reload reads the files again. When they load, new connections use
// them; when not, the material in force stays and the error says why.
func (c *Client) Reload() error {
	material, err := c.load()
	if err != nil {
		return reloadError(err)
	}
	c.current.Store(material)
	return nil
}

// Warnings returns what is allowed but unwise in the files in force.
func (c *Client) Warnings() []string { return slices.Clone(c.current.Load().warnings) }

func (c *Client) load() (*clientMaterial, error) {
	material := &clientMaterial{}
	if c.settings.CAFile != "" {
		pool, warnings, err := loadPool(c.settings.CAFile)
		if err != nil {
			return nil, err
		}
		material.pool, material.warnings = pool, warnings
	}
	if c.settings.CertFile != "" || c.settings.KeyFile != "" {
		pair, err := loadKeyPair(c.settings.CertFile, c.settings.KeyFile, c.now())
		if err != nil {
			return nil, err
		}
		material.certificate = pair.certificate
		material.warnings = append(material.warnings, keyFileWarning(c.settings.KeyFile)...)
	}
	return material, nil
}
