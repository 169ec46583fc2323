package actors

// TLS on the client listener, end to end: the Go SDK over TLS, client
// certificates, a plain client meeting a TLS listener and the reverse,
// the hello deadline bounding the handshake, the listener address rule.

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
	"github.com/fibrilmq/fibril/wire"
)

// tlsNode is a broker whose client listener speaks TLS.
type tlsNode struct {
	broker *Broker
	ca     *tlstest.CA // signs the node's certificate
	server *tlsconfig.Server
}

func startTLSBroker(t *testing.T, settings func(ca *tlstest.CA, node tlstest.Files) tlsconfig.ServerSettings,
	mutate func(*Config)) *tlsNode {
	t.Helper()
	ca := tlstest.NewCA(t, t.TempDir(), "node CA")
	files := ca.Issue(t, "node1")
	serverSettings := tlsconfig.ServerSettings{CertFile: files.CertFile, KeyFile: files.KeyFile}
	if settings != nil {
		serverSettings = settings(ca, files)
	}
	server, err := tlsconfig.NewServer(serverSettings)
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, func(c *Config) {
		c.TLS = server
		if mutate != nil {
			mutate(c)
		}
	})
	return &tlsNode{broker: b, ca: ca, server: server}
}

func dialSDKWith(t *testing.T, b *Broker, options client.Options) (*client.Client, error) {
	t.Helper()
	options.Addresses = []string{b.Addr().String()}
	options.ClientName = "tls-test"
	options.Backoff = client.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}
	sdk, err := client.Dial(testContext(t), options)
	if err == nil {
		t.Cleanup(func() { _ = sdk.Close() })
	}
	return sdk, err
}

// The SDK over TLS: declare, publish, consume and ack, with the node's
// certificate verified against the CA file; the node's connections table
// says the session is TLS.
func TestTLSClientRoundTrip(t *testing.T) {
	node := startTLSBroker(t, nil, nil)
	sdk, err := dialSDKWith(t, node.broker, client.Options{TLS: &client.TLSOptions{CAFile: node.ca.CertFile}})
	if err != nil {
		t.Fatalf("dial over TLS: %v", err)
	}
	ctx := testContext(t)
	if _, err := sdk.Declare(ctx, "secure", client.QueueConfig{}); err != nil {
		t.Fatal(err)
	}
	if confirm, err := sdk.Publish(ctx, "secure", client.Message{Payload: []byte("over tls")}); err != nil || confirm.Err != nil {
		t.Fatalf("publish over TLS: %v %+v", err, confirm)
	}
	sub, err := sdk.Subscribe(ctx, "secure", client.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case delivery := <-sub.Deliveries():
		if string(delivery.Payload) != "over tls" {
			t.Fatalf("delivered %q", delivery.Payload)
		}
		if err := delivery.AckSync(ctx); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no delivery over TLS")
	}
	var sawTLS bool
	for _, row := range node.broker.Connections() {
		sawTLS = sawTLS || strings.HasPrefix(row.TLS, "TLS 1.")
	}
	if !sawTLS {
		t.Fatalf("the connections table shows no TLS session: %+v", node.broker.Connections())
	}
}

// A plain client meeting a TLS listener is refused with one clear plain
// error frame (and the SDK says so); a TLS client meeting a plain
// listener is told the node does not use TLS.
func TestPlainAndTLSMismatchesAreExplained(t *testing.T) {
	node := startTLSBroker(t, nil, nil)
	raw := dialBroker(t, node.broker)
	raw.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "plain"})
	errs := raw.expectClosed()
	if len(errs) != 1 || errs[0].Code != wire.CodeProtocolViolation || errs[0].Message != tlsconfig.PlainTextRefusal {
		t.Fatalf("a plain hello to a TLS listener got %+v", errs)
	}
	_, err := dialSDKWith(t, node.broker, client.Options{})
	if client.CodeOf(err) != wire.CodeProtocolViolation || !strings.Contains(err.Error(), "requires TLS") {
		t.Fatalf("the plain SDK against a TLS listener: %v", err)
	}

	plain := startBroker(t, nil)
	_, err = dialSDKWith(t, plain, client.Options{TLS: &client.TLSOptions{CAFile: node.ca.CertFile}})
	if !errors.Is(err, tlsconfig.ErrNotTLS) {
		t.Fatalf("the TLS SDK against a plain listener: %v", err)
	}
	t.Logf("the TLS SDK against a plain listener: %v", err)
}

// Client certificates: with a client CA and certificates required, a
// client without one, or with one from another CA, is refused with an
// explained error; one signed by the client CA connects.
func TestTLSClientCertificates(t *testing.T) {
	clientCA := tlstest.NewCA(t, t.TempDir(), "client CA")
	node := startTLSBroker(t, func(ca *tlstest.CA, files tlstest.Files) tlsconfig.ServerSettings {
		return tlsconfig.ServerSettings{CertFile: files.CertFile, KeyFile: files.KeyFile, ClientCAFile: clientCA.CertFile,
			RequireClientCert: true}
	}, nil)
	good := clientCA.Issue(t, "app")
	stranger := tlstest.NewCA(t, t.TempDir(), "stranger CA").Issue(t, "app")
	for name, c := range map[string]struct {
		options client.TLSOptions
		refused bool
	}{
		"no certificate":      {client.TLSOptions{CAFile: node.ca.CertFile}, true},
		"from another CA":     {client.TLSOptions{CAFile: node.ca.CertFile, CertFile: stranger.CertFile, KeyFile: stranger.KeyFile}, true},
		"from the client CA":  {client.TLSOptions{CAFile: node.ca.CertFile, CertFile: good.CertFile, KeyFile: good.KeyFile}, false},
		"server name checked": {client.TLSOptions{CAFile: node.ca.CertFile, CertFile: good.CertFile, KeyFile: good.KeyFile, ServerName: "node1"}, false},
	} {
		options := c.options
		sdk, err := dialSDKWith(t, node.broker, client.Options{TLS: &options})
		switch {
		case c.refused && !errors.Is(err, tlsconfig.ErrCertificateRefused):
			t.Errorf("%s: %v, want a refused certificate", name, err)
		case !c.refused && err != nil:
			t.Errorf("%s: %v", name, err)
		case !c.refused:
			if _, err := sdk.Ping(testContext(t)); err != nil {
				t.Errorf("%s: ping: %v", name, err)
			}
		}
	}
	options := client.TLSOptions{CAFile: node.ca.CertFile, ServerName: "elsewhere.example", CertFile: good.CertFile, KeyFile: good.KeyFile}
	if _, err := dialSDKWith(t, node.broker, client.Options{TLS: &options}); !errors.Is(err, tlsconfig.ErrCertificateName) {
		t.Errorf("a server name the certificate does not carry: %v", err)
	}
}

// The hello deadline runs from the accept: a client that connects to a
// TLS listener and never starts the handshake is closed when it passes,
// and counted.
func TestTLSHandshakeIsBoundedByTheHelloDeadline(t *testing.T) {
	node := startTLSBroker(t, nil, func(c *Config) { c.HelloTimeout = 200 * time.Millisecond })
	conn, err := net.Dial("tcp", node.broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(testWait))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the silent connection got data instead of a close")
	}
	waitUntil(t, "the deadline is counted", func() bool {
		return node.broker.Metrics().LimitReached(limitHelloDeadline) >= 1
	})
	if _, err := dialSDKWith(t, node.broker, client.Options{TLS: &client.TLSOptions{CAFile: node.ca.CertFile}}); err != nil {
		t.Fatalf("a well-behaved client after the silent one: %v", err)
	}
}

// A renewed certificate reaches the listener at the next handshake, with
// no restart; a broken file keeps the one in force.
func TestTLSReloadReachesTheListener(t *testing.T) {
	var nodeFiles tlstest.Files
	node := startTLSBroker(t, func(ca *tlstest.CA, files tlstest.Files) tlsconfig.ServerSettings {
		nodeFiles = files
		return tlsconfig.ServerSettings{CertFile: files.CertFile, KeyFile: files.KeyFile}
	}, nil)
	renewedCA := tlstest.NewCA(t, t.TempDir(), "renewed CA")
	tlstest.Replace(t, renewedCA.Issue(t, "node1"), nodeFiles)
	if err := node.server.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := dialSDKWith(t, node.broker, client.Options{TLS: &client.TLSOptions{CAFile: node.ca.CertFile}}); !errors.Is(err, tlsconfig.ErrUntrustedCertificate) {
		t.Fatalf("the old CA after the reload: %v", err)
	}
	if _, err := dialSDKWith(t, node.broker, client.Options{TLS: &client.TLSOptions{CAFile: renewedCA.CertFile}}); err != nil {
		t.Fatalf("the renewed certificate: %v", err)
	}
}

// A client listener off loopback needs TLS and authentication, or an
// explicit permission (then the node logs a warning).
func TestNonLoopbackListenerNeedsTLSAndAuthentication(t *testing.T) {
	for name, c := range map[string]struct {
		mutate func(*Config)
		err    bool
	}{
		"plain, no token":          {func(*Config) {}, true},
		"token without TLS":        {func(c *Config) { c.AuthToken = "some-long-shared-token" }, true},
		"allowed explicitly":       {func(c *Config) { c.AllowInsecureListen = true }, false},
		"loopback stays the norm ": {func(c *Config) { c.ListenAddr = "127.0.0.1:0" }, false},
	} {
		config := testConfig(t, t.TempDir())
		config.ListenAddr = "0.0.0.0:0"
		c.mutate(&config)
		b, err := Start(config)
		if c.err != errors.Is(err, ErrInsecureListen) {
			t.Errorf("%s: %v", name, err)
		}
		if err == nil {
			closeWithin(t, b)
		}
	}
}

func closeWithin(t *testing.T, b *Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("close: %v", err)
		}
	case <-ctx.Done():
		t.Error("close did not finish")
	}
}
