// Package tlsconfig builds the *tls.Config of each link a node has, from
// PEM files named in settings, and reloads them on demand (SIGHUP):
//
//	client listener   Server: the node's certificate; client certificates
//	                  optional (ClientCAFile), or required
//	peer links        Node: mutual TLS, TLS 1.3; both ends present a
//	                  certificate signed by the cluster CA and verify the
//	                  other's against it
//	clients           Client: the CA that signs the node's certificate, an
//	                  optional client certificate, the server name
//
// Every file is checked when read: a certificate that does not match its
// key, has expired, or (for a node) does not chain to the cluster CA for
// both server and client authentication fails NewServer, NewNode or
// NewClient, and a later Reload keeps the material in force and says why.
// Reload reaches live listeners: the server side hands each handshake the
// material in force (GetConfigForClient), the dialing side presents the
// certificate in force (GetClientCertificate) and reads the CA pool each
// time its Config is called, so a dialer calls it per connection.
//
// Handshakes: ServerHandshake runs the accepting side within a context
// (the hello deadline) and answers a client that spoke plain text with a
// plain FER1 protocol_violation before closing; Client.DialContext and
// Node.DialContext dial and handshake. Their errors, and any handshake or
// first-read error passed to ExplainHandshakeError, say what is wrong
// (ErrNotTLS, ErrUntrustedCertificate, ErrCertificateName,
// ErrCertificateExpired, ErrCertificateRefused) in one sentence.
//
// Use on the client listener (the integration wires it):
//
//	server, err := tlsconfig.NewServer(tlsconfig.ServerSettings{CertFile: c, KeyFile: k})
//	...
//	raw, _ := listener.Accept()
//	conn, err := tlsconfig.ServerHandshake(helloCtx, raw, server.Config()) // closed on error
//	...
//	on SIGHUP: if err := server.Reload(); err != nil { log(err) }
//
// Raft's transport (dragonboat) takes file names, not a *tls.Config:
// docs/security.md says what it supports and how it reloads.
//
// Package tlstest makes throwaway CAs and certificates for tests.
package tlsconfig
