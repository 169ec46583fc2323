package tlsconfig

// Handshakes and what their failures mean. crypto/tls reports a failed
// handshake in terms of records and alerts ("tls: first record does not
// look like a TLS handshake", "remote error: tls: bad certificate");
// ExplainHandshakeError says instead what is wrong and what to change,
// and wraps one of the package's errors (ErrNotTLS,
// ErrUntrustedCertificate, ...) over the original, so callers test with
// errors.Is and people read one sentence.
//
// A plain-text Fibril client that reaches a TLS listener sends a hello in
// the clear. ServerHandshake answers it with one plain FER1 error frame,
// protocol_violation, saying that the listener requires TLS, and closes:
// the client gets a protocol error it can show, not a reset.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// plainRefusalTimeout bounds the write of the plain-text refusal.
const plainRefusalTimeout = time.Second

// PlainTextRefusal is the message of the FER1 frame a TLS listener sends
// a client that spoke plain text.
const PlainTextRefusal = "this listener requires TLS: connect with TLS, trusting the CA that signed the node's certificate"

// ServerHandshake runs the server side of the handshake on conn with
// config within ctx (the hello deadline bounds it). On failure it closes
// conn, first answering a plain-text client with a plain FER1
// protocol_violation, and returns the explained error.
func ServerHandshake(ctx context.Context, conn net.Conn, config *tls.Config) (*tls.Conn, error) {
	server := tls.Server(conn, config)
	err := server.HandshakeContext(ctx)
	if err == nil {
		return server, nil
	}
	var header tls.RecordHeaderError
	if errors.As(err, &header) && header.Conn != nil {
		refusal := (&wire.ErrorFrame{Code: wire.CodeProtocolViolation, Message: PlainTextRefusal}).Encode(nil)
		_ = header.Conn.SetWriteDeadline(time.Now().Add(plainRefusalTimeout))
		_, _ = header.Conn.Write(refusal)
	}
	_ = conn.Close()
	return nil, ExplainHandshakeError(err, conn.RemoteAddr().String(), true)
}

// dialTLS dials and completes the client side of the handshake in ctx.
func dialTLS(ctx context.Context, network, address string, config *tls.Config) (*tls.Conn, error) {
	var dialer net.Dialer
	raw, err := dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, config)
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, ExplainHandshakeError(err, address, false)
	}
	return conn, nil
}

// ExplainHandshakeError turns a TLS handshake error into one that says
// what is wrong. peer names the other end (an address); asServer says
// which end this side is. Errors it does not recognise come back wrapped
// with the peer's name only. nil stays nil.
func ExplainHandshakeError(err error, peer string, asServer bool) error {
	if err == nil {
		return nil
	}
	cause, advice := explain(err, asServer)
	if cause == nil {
		return fmt.Errorf("TLS handshake with %s: %w", peer, err)
	}
	return &HandshakeError{Peer: peer, Advice: advice, Reason: cause, Err: err}
}

// HandshakeError is an explained handshake failure.
type HandshakeError struct {
	Peer   string // the other end
	Advice string // what is wrong and what to change
	Reason error  // ErrNotTLS, ErrUntrustedCertificate, ErrCertificateName, ErrCertificateExpired or ErrCertificateRefused
	Err    error  // what crypto/tls reported
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("TLS handshake with %s: %s (%v)", e.Peer, e.Advice, e.Err)
}

// Unwrap gives both the reason and the original error to errors.Is.
func (e *HandshakeError) Unwrap() []error { return []error{e.Reason, e.Err} }

// explain maps an error to a reason and advice, or nil.
func explain(err error, asServer bool) (error, string) {
	var header tls.RecordHeaderError
	if errors.As(err, &header) {
		return ErrNotTLS, notTLSAdvice(header, asServer)
	}
	var unknownAuthority x509.UnknownAuthorityError
	if errors.As(err, &unknownAuthority) {
		if asServer {
			return ErrUntrustedCertificate, "the peer's certificate is not signed by a CA in this side's CA file; issue it from that CA"
		}
		return ErrUntrustedCertificate, "the server's certificate is not signed by a CA in the CA file; give the CA that signed it"
	}
	var hostname x509.HostnameError
	if errors.As(err, &hostname) {
		return ErrCertificateName, fmt.Sprintf("the server's certificate is for %s, not %q; dial a name it carries or set the server name",
			certificateNames(hostname.Certificate), hostname.Host)
	}
	var invalid x509.CertificateInvalidError
	if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
		return ErrCertificateExpired, "the peer's certificate has expired or is not valid yet (or this machine's clock is wrong)"
	}
	if alert, ok := remoteAlert(err); ok {
		switch alert {
		case tls.AlertError(116): // certificate required
			return ErrCertificateRefused, "the peer requires a client certificate and this side sent none; give one signed by its CA"
		case tls.AlertError(42), tls.AlertError(46), tls.AlertError(48):
			// bad certificate, certificate unknown, unknown CA
			return ErrCertificateRefused, "the peer refused this side's certificate (" + alert.Error() +
				"): it wants one signed by its CA; for a node, one issued by the cluster CA"
		case tls.AlertError(45):
			return ErrCertificateRefused, "the peer says this side's certificate has expired; renew it and reload"
		}
	}
	if strings.Contains(err.Error(), "client didn't provide a certificate") {
		return ErrCertificateRefused, "the client presented no certificate, and this listener requires one"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		if !asServer {
			return ErrNotTLS, "the server closed the connection during the handshake: it may not speak TLS on this port, or may require a client certificate"
		}
	}
	return nil, ""
}

func notTLSAdvice(header tls.RecordHeaderError, asServer bool) string {
	if asServer {
		return fmt.Sprintf("the client sent plain text (%q), not TLS: this listener requires TLS", header.RecordHeader[:])
	}
	if string(header.RecordHeader[:4]) == wire.TagError.String() {
		return "the server answered with a plain-text Fibril error frame: its listener does not use TLS; connect without TLS, or enable TLS on the node"
	}
	return fmt.Sprintf("the server answered in plain text (%q), not TLS: it does not use TLS on this port", header.RecordHeader[:])
}

// remoteAlert returns the alert the peer sent, if err is one.
func remoteAlert(err error) (tls.AlertError, bool) {
	var opError *net.OpError
	if !errors.As(err, &opError) || opError.Op != "remote error" || opError.Err == nil {
		return 0, false
	}
	message := opError.Err.Error()
	for code := 0; code < 256; code++ {
		if tls.AlertError(code).Error() == message {
			return tls.AlertError(code), true
		}
	}
	return 0, false
}

func certificateNames(certificate *x509.Certificate) string {
	if certificate == nil {
		return "other names"
	}
	var names []string
	names = append(names, certificate.DNSNames...)
	for _, ip := range certificate.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no name (" + certificate.Subject.CommonName + ")"
	}
	return strings.Join(names, ", ")
}

// reloadError says that the material in force stays.
func reloadError(err error) error {
	return fmt.Errorf("%w (the certificates loaded before stay in use)", err)
}
