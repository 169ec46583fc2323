package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
	"github.com/fibrilmq/fibril/wire"
)

// handshakeBound keeps a broken test from hanging; nothing is timed.
const handshakeBound = 20 * time.Second

// accepted is what the server side of one connection saw.
type accepted struct {
	err   error
	state tls.ConnectionState
}

// listen serves TLS on 127.0.0.1:0 with config: each connection is
// handshaken with ServerHandshake and, when that works, answered with a
// hello-ok for its hello. Results arrive on the channel, one per
// connection.
func listen(t *testing.T, config *tls.Config) (string, <-chan accepted) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close() })
	results := make(chan accepted, 16)
	go func() {
		for {
			raw, err := listener.Accept()
			if err != nil {
				return
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), handshakeBound)
				defer cancel()
				conn, err := tlsconfig.ServerHandshake(ctx, raw, config)
				if err != nil {
					results <- accepted{err: err}
					return
				}
				defer conn.Close()
				results <- accepted{state: conn.ConnectionState()}
				answerHello(conn)
			}()
		}
	}()
	return listener.Addr().String(), results
}

// answerHello reads one hello and answers hello-ok.
func answerHello(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(handshakeBound))
	reader, writer := wire.NewReader(conn, wire.MaxHelloBodyBytes), wire.NewWriter(conn, 0)
	if tag, _, err := reader.Next(); err != nil || tag != wire.TagHello {
		return
	}
	_ = writer.WriteFrame(&wire.HelloOK{Version: 1, NodeID: "node1", SessionID: "s1"})
	_ = writer.Flush()
}

// helloRoundTrip sends a hello on conn and returns what answers it.
func helloRoundTrip(conn net.Conn) (wire.Tag, []byte, error) {
	_ = conn.SetDeadline(time.Now().Add(handshakeBound))
	writer := wire.NewWriter(conn, 0)
	if err := writer.WriteFrame(&wire.Hello{Versions: []uint16{1}, ClientName: "test"}); err != nil {
		return 0, nil, err
	}
	if err := writer.Flush(); err != nil {
		return 0, nil, err
	}
	return wire.NewReader(conn, 0).Next()
}

func dialContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), handshakeBound)
}

func newServer(t *testing.T, settings tlsconfig.ServerSettings) *tlsconfig.Server {
	t.Helper()
	server, err := tlsconfig.NewServer(settings)
	if err != nil {
		t.Fatal(err)
	}
	return server
}

func newClient(t *testing.T, settings tlsconfig.ClientSettings) *tlsconfig.Client {
	t.Helper()
	client, err := tlsconfig.NewClient(settings)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func TestClientAndServerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "fibril")
	node := ca.Issue(t, "node1")
	server := newServer(t, tlsconfig.ServerSettings{CertFile: node.CertFile, KeyFile: node.KeyFile})
	address, results := listen(t, server.Config())
	client := newClient(t, tlsconfig.ClientSettings{CAFile: ca.CertFile})
	ctx, cancel := dialContext()
	defer cancel()
	conn, err := client.DialContext(ctx, "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tag, body, err := helloRoundTrip(conn)
	var ok wire.HelloOK
	if err != nil || tag != wire.TagHelloOK || ok.Decode(body) != nil || ok.NodeID != "node1" {
		t.Fatalf("hello over TLS: %s %v", tag, err)
	}
	seen := <-results
	if seen.err != nil || seen.state.Version < tls.VersionTLS12 || !seen.state.HandshakeComplete {
		t.Fatalf("server side: %+v", seen)
	}
	state := conn.(*tls.Conn).ConnectionState()
	if len(state.VerifiedChains) == 0 || state.PeerCertificates[0].Subject.CommonName != "node1" {
		t.Fatalf("client side: %d verified chains, peer %q", len(state.VerifiedChains), state.PeerCertificates[0].Subject.CommonName)
	}
}

func TestPlainClientAgainstTLSListenerGetsAClearError(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "fibril")
	node := ca.Issue(t, "node1")
	address, results := listen(t, newServer(t, tlsconfig.ServerSettings{CertFile: node.CertFile, KeyFile: node.KeyFile}).Config())
	conn, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tag, body, err := helloRoundTrip(conn)
	var refusal wire.ErrorFrame
	if err != nil || tag != wire.TagError || refusal.Decode(body) != nil {
		t.Fatalf("a plain hello got %s, %v", tag, err)
	}
	if refusal.Code != wire.CodeProtocolViolation || refusal.Message != tlsconfig.PlainTextRefusal {
		t.Fatalf("refusal %+v", refusal)
	}
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the refusal: %v, want the connection closed", err)
	}
	seen := <-results
	t.Logf("client reads: FER1 %s %q; server logs: %v", refusal.Code, refusal.Message, seen.err)
	if !errors.Is(seen.err, tlsconfig.ErrNotTLS) || !strings.Contains(seen.err.Error(), "the client sent plain text") {
		t.Fatalf("server side: %v", seen.err)
	}
}

func TestTLSClientAgainstPlainListenerGetsAClearError(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "fibril")
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	go func() { // a plain node: a ClientHello is an unknown frame
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		tag, _, err := wire.NewReader(conn, 0).Next()
		if err != nil && !errors.Is(err, wire.ErrFrameTooLarge) {
			return
		}
		writer := wire.NewWriter(conn, 0)
		_ = writer.WriteFrame(wire.UnknownFrameError(tag))
		_ = writer.Flush()
	}()
	ctx, cancel := dialContext()
	defer cancel()
	_, err = newClient(t, tlsconfig.ClientSettings{CAFile: ca.CertFile}).DialContext(ctx, "tcp", listener.Addr().String())
	t.Logf("client: %v", err)
	if !errors.Is(err, tlsconfig.ErrNotTLS) || !strings.Contains(err.Error(), "does not use TLS") {
		t.Fatalf("TLS client against a plain listener: %v", err)
	}
}

func TestClientRefusesAServerFromAnotherCAOrForAnotherName(t *testing.T) {
	dir := t.TempDir()
	trusted, other := tlstest.NewCA(t, dir, "trusted"), tlstest.NewCA(t, dir, "other")
	stranger := other.Issue(t, "stranger")
	address, _ := listen(t, newServer(t, tlsconfig.ServerSettings{CertFile: stranger.CertFile, KeyFile: stranger.KeyFile}).Config())
	ctx, cancel := dialContext()
	defer cancel()
	_, err := newClient(t, tlsconfig.ClientSettings{CAFile: trusted.CertFile}).DialContext(ctx, "tcp", address)
	t.Logf("server from another CA: %v", err)
	if !errors.Is(err, tlsconfig.ErrUntrustedCertificate) {
		t.Fatalf("server from another CA: %v", err)
	}

	named := trusted.Issue(t, "node9", tlstest.IssueOptions{DNSNames: []string{"node9.example"}, IPs: []net.IP{}})
	address, _ = listen(t, newServer(t, tlsconfig.ServerSettings{CertFile: named.CertFile, KeyFile: named.KeyFile}).Config())
	_, err = newClient(t, tlsconfig.ClientSettings{CAFile: trusted.CertFile}).DialContext(ctx, "tcp", address)
	if !errors.Is(err, tlsconfig.ErrCertificateName) || !strings.Contains(err.Error(), "node9.example") {
		t.Fatalf("certificate for another name: %v", err)
	}
	conn, err := newClient(t, tlsconfig.ClientSettings{CAFile: trusted.CertFile, ServerName: "node9.example"}).DialContext(ctx, "tcp", address)
	if err != nil {
		t.Fatalf("with the server name set: %v", err)
	}
	_ = conn.Close()
}

func TestListenerThatRequiresClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, dir, "fibril"), tlstest.NewCA(t, dir, "other")
	node, member, outsider := ca.Issue(t, "node1"), ca.Issue(t, "app"), other.Issue(t, "intruder")
	server := newServer(t, tlsconfig.ServerSettings{CertFile: node.CertFile, KeyFile: node.KeyFile, ClientCAFile: ca.CertFile, RequireClientCert: true})
	address, results := listen(t, server.Config())
	ctx, cancel := dialContext()
	defer cancel()

	conn, err := newClient(t, tlsconfig.ClientSettings{CAFile: ca.CertFile, CertFile: member.CertFile, KeyFile: member.KeyFile}).DialContext(ctx, "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	if tag, _, err := helloRoundTrip(conn); err != nil || tag != wire.TagHelloOK {
		t.Fatalf("client with a certificate from the CA: %s %v", tag, err)
	}
	_ = conn.Close()
	if seen := <-results; seen.err != nil || len(tlsconfig.PeerNames(seen.state)) == 0 || tlsconfig.PeerNames(seen.state)[0] != "app" {
		t.Fatalf("server side: %v, names %v", seen.err, tlsconfig.PeerNames(seen.state))
	}

	for name, settings := range map[string]tlsconfig.ClientSettings{
		"no certificate":            {CAFile: ca.CertFile},
		"certificate of another CA": {CAFile: ca.CertFile, CertFile: outsider.CertFile, KeyFile: outsider.KeyFile},
	} {
		// Under TLS 1.3 the client's handshake completes before the
		// server judges its certificate; the refusal arrives at the
		// first read, which the SDK explains the same way.
		conn, err := newClient(t, settings).DialContext(ctx, "tcp", address)
		if err == nil {
			_, _, err = helloRoundTrip(conn)
			err = tlsconfig.ExplainHandshakeError(err, address, false)
			_ = conn.Close()
		}
		if !errors.Is(err, tlsconfig.ErrCertificateRefused) {
			t.Errorf("%s: client side %v", name, err)
		}
		seen := <-results
		t.Logf("%s: client: %v; server: %v", name, err, seen.err)
		if !errors.Is(seen.err, tlsconfig.ErrCertificateRefused) && !errors.Is(seen.err, tlsconfig.ErrUntrustedCertificate) {
			t.Errorf("%s: server side %v", name, seen.err)
		}
	}
}

// serialOf returns the serial number of the certificate the server
// presents at address.
func serialOf(t *testing.T, client *tlsconfig.Client, address string) *big.Int {
	t.Helper()
	ctx, cancel := dialContext()
	defer cancel()
	conn, err := client.DialContext(ctx, "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber
}

func TestServerReloadReachesTheLiveListenerAndKeepsTheOldCertificateOnABrokenFile(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "fibril")
	first := ca.Issue(t, "node1")
	server := newServer(t, tlsconfig.ServerSettings{CertFile: first.CertFile, KeyFile: first.KeyFile})
	address, _ := listen(t, server.Config())
	client := newClient(t, tlsconfig.ClientSettings{CAFile: ca.CertFile})
	firstSerial := serialOf(t, client, address)

	renewed := ca.Issue(t, "node1", tlstest.IssueOptions{FileSuffix: "-renewed"})
	tlstest.Replace(t, renewed, first)
	if err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	renewedSerial := serialOf(t, client, address)
	if renewedSerial.Cmp(firstSerial) == 0 {
		t.Fatal("the live listener still presents the first certificate after the reload")
	}

	broken := map[string]func(){
		"garbage certificate": func() { writeFile(t, first.CertFile, []byte("not a certificate")) },
		"mismatched key": func() {
			other := ca.Issue(t, "other")
			data, _ := os.ReadFile(other.KeyFile)
			writeFile(t, first.KeyFile, data)
		},
		"expired certificate": func() {
			tlstest.Replace(t, ca.Issue(t, "node1", tlstest.IssueOptions{FileSuffix: "-expired",
				NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}), first)
		},
		"missing file": func() { _ = os.Remove(first.CertFile) },
	}
	for name, breakIt := range broken {
		tlstest.Replace(t, renewed, first)
		breakIt()
		err := server.Reload()
		if !errors.Is(err, tlsconfig.ErrCertificateFile) || !strings.Contains(err.Error(), "stay in use") {
			t.Errorf("%s: reload gave %v", name, err)
		}
		if serial := serialOf(t, client, address); serial.Cmp(renewedSerial) != 0 {
			t.Errorf("%s: the listener lost the certificate in use", name)
		}
	}
}

func TestServerReloadsItsClientCA(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := tlstest.NewCA(t, dir, "old"), tlstest.NewCA(t, dir, "new")
	node, oldApp, newApp := oldCA.Issue(t, "node1"), oldCA.Issue(t, "app-old"), newCA.Issue(t, "app-new")
	clientCAFile := dir + "/client-ca.pem"
	copyFile(t, oldCA.CertFile, clientCAFile)
	server := newServer(t, tlsconfig.ServerSettings{CertFile: node.CertFile, KeyFile: node.KeyFile, ClientCAFile: clientCAFile, RequireClientCert: true})
	address, results := listen(t, server.Config())
	try := func(app tlstest.Files) error {
		ctx, cancel := dialContext()
		defer cancel()
		conn, err := newClient(t, tlsconfig.ClientSettings{CAFile: oldCA.CertFile, CertFile: app.CertFile, KeyFile: app.KeyFile}).DialContext(ctx, "tcp", address)
		if err == nil {
			_, _, err = helloRoundTrip(conn)
			_ = conn.Close()
		}
		<-results
		return err
	}
	if try(oldApp) != nil || try(newApp) == nil {
		t.Fatal("before the reload, the old CA's clients get in and the new CA's do not")
	}
	copyFile(t, newCA.CertFile, clientCAFile)
	if err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	if try(oldApp) == nil || try(newApp) != nil {
		t.Fatal("after the reload, the new CA's clients get in and the old CA's do not")
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, data)
}
