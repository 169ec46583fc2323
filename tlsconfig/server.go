package tlsconfig

// Server is the TLS side of the client listener: the node's certificate,
// and optionally client certificates verified against a client CA.
//
// Reload: Config returns one *tls.Config for the life of the listener;
// its GetConfigForClient hands each handshake the material in force, so a
// Reload (on SIGHUP) reaches live listeners at their next handshake.
// Connections already established keep their session.

import (
	"crypto/tls"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// ServerSettings name the client listener's files.
type ServerSettings struct {
	CertFile string // PEM certificate chain, leaf first
	KeyFile  string // PEM private key of the leaf
	// ClientCAFile, when set, holds the CAs that sign client
	// certificates; a certificate a client presents must verify against
	// them. Empty: clients are not asked for a certificate (they
	// authenticate with their token in hello).
	ClientCAFile string
	// RequireClientCert refuses clients without a certificate (with
	// ClientCAFile).
	RequireClientCert bool
}

// Server builds the client listener's *tls.Config and reloads its files.
// Its methods are safe for concurrent use.
type Server struct {
	settings ServerSettings
	current  atomic.Pointer[serverMaterial]
	now      func() time.Time
}

type serverMaterial struct {
	config   *tls.Config // handed to each handshake
	warnings []string
}

// NewServer reads the files named in settings.
func NewServer(settings ServerSettings) (*Server, error) {
	server := &Server{settings: settings, now: time.Now}
	material, err := server.load()
	if err != nil {
		return nil, err
	}
	server.current.Store(material)
	return server, nil
}

// Config returns the listener's configuration: TLS 1.2 or later, the
// material in force at each handshake.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current.Load().config, nil
		},
	}
}

// Reload reads the files again. When they load, new handshakes use them;
// when not, the material in force stays and the error says why.
func (s *Server) Reload() error {
	material, err := s.load()
	if err != nil {
		return reloadError(err)
	}
	s.current.Store(material)
	return nil
}

// Warnings returns what is allowed but unwise in the files in force.
func (s *Server) Warnings() []string { return slices.Clone(s.current.Load().warnings) }

func (s *Server) load() (*serverMaterial, error) {
	if s.settings.RequireClientCert && s.settings.ClientCAFile == "" {
		return nil, fmt.Errorf("%w: requiring client certificates needs a client CA file to verify them", ErrCertificateFile)
	}
	now := s.now()
	pair, err := loadKeyPair(s.settings.CertFile, s.settings.KeyFile, now)
	if err != nil {
		return nil, err
	}
	config := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*pair.certificate},
	}
	warnings := keyFileWarning(s.settings.KeyFile)
	if s.settings.ClientCAFile != "" {
		pool, poolWarnings, err := loadPool(s.settings.ClientCAFile)
		if err != nil {
			return nil, err
		}
		config.ClientCAs = pool
		config.ClientAuth = tls.VerifyClientCertIfGiven
		if s.settings.RequireClientCert {
			config.ClientAuth = tls.RequireAndVerifyClientCert
		}
		warnings = append(warnings, poolWarnings...)
	}
	return &serverMaterial{config: config, warnings: warnings}, nil
}
