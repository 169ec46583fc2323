package admin

// Server lifecycle. Start refuses a non-loopback address unless the caller
// allows it, listens, and serves on one goroutine owned by the Server;
// Close stops accepting, waits (bounded) for requests in flight, and waits
// for that goroutine to return. Every resource the HTTP server uses is
// bounded: concurrent connections, request body size, header size and
// read, write and idle times.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// Limits of the HTTP server.
const (
	maxConnections       = 64
	maxRequestBodyBytes  = 64 << 10
	maxRequestHeaderSize = 16 << 10
	readTimeout          = 10 * time.Second
	writeTimeout         = 30 * time.Second
	idleTimeout          = 60 * time.Second
	closeTimeout         = 5 * time.Second
)

// ErrNotLoopback is returned by Start for an address that is not a
// loopback address when Options.AllowNonLoopback is false.
var ErrNotLoopback = errors.New("admin: address is not loopback")

// ErrInvalidOptions is returned by Start for options it refuses.
var ErrInvalidOptions = errors.New("admin: invalid options")

// Options configure a Server.
type Options struct {
	// Token, when set, must be presented by every write, as
	// "Authorization: Bearer <token>" or as an HTTP Basic password.
	Token string
	// ProtectReads makes reads need the Token too. It needs a Token.
	ProtectReads bool
	// AllowNonLoopback lets Start bind an address other than loopback.
	AllowNonLoopback bool
	// Logger receives the endpoint's log lines (nil means discard).
	Logger *slog.Logger
	// Clock is the time source for uptime (nil means time.Now).
	Clock func() time.Time
}

// Server is a running endpoint. Its methods are safe for concurrent use.
type Server struct {
	node     Node
	options  Options
	logger   *slog.Logger
	listener net.Listener
	http     *fasthttp.Server
	loopback bool                 // bound to loopback: enforce loopback Host headers
	process  *prometheus.Registry // the endpoint's own series (metrics.go)

	served    chan error // receives Serve's result once
	closeOnce sync.Once
	closeErr  error
}

// Start listens on addr (e.g. "127.0.0.1:7480"; port 0 picks a free one)
// and serves the endpoint for node until Close.
func Start(addr string, node Node, options Options) (*Server, error) {
	if node == nil {
		return nil, fmt.Errorf("%w: nil node", ErrInvalidOptions)
	}
	if options.ProtectReads && options.Token == "" {
		return nil, fmt.Errorf("%w: ProtectReads needs a Token", ErrInvalidOptions)
	}
	if options.Logger == nil {
		options.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if options.Clock == nil {
		options.Clock = time.Now
	}
	loopback, err := isLoopbackAddress(addr)
	if err != nil {
		return nil, err
	}
	if !loopback && !options.AllowNonLoopback {
		return nil, fmt.Errorf("%w: %q; bind 127.0.0.1 or allow non-loopback addresses explicitly",
			ErrNotLoopback, addr)
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s: %w", addr, err)
	}
	s := &Server{node: node, options: options, logger: options.Logger, listener: listener,
		loopback: loopback, served: make(chan error, 1), process: newProcessRegistry(node)}
	if !loopback {
		s.logger.Warn("admin endpoint bound to a non-loopback address", "addr", listener.Addr().String(),
			"writes_need_token", options.Token != "", "reads_need_token", options.ProtectReads)
	}
	s.http = &fasthttp.Server{
		Handler:               s.serve,
		Name:                  "fibril-admin",
		Concurrency:           maxConnections,
		MaxRequestBodySize:    maxRequestBodyBytes,
		ReadBufferSize:        maxRequestHeaderSize,
		ReadTimeout:           readTimeout,
		WriteTimeout:          writeTimeout,
		IdleTimeout:           idleTimeout,
		CloseOnShutdown:       true,
		NoDefaultServerHeader: true,
		Logger:                fasthttpLogger{logger: s.logger},
	}
	go func() { s.served <- s.http.Serve(listener) }()
	s.logger.Info("admin endpoint serving", "addr", listener.Addr().String())
	return s, nil
}

// Addr is the address the endpoint listens on.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Close stops the endpoint: no new connections, requests in flight get up
// to a few seconds to finish. It is safe to call more than once and returns
// the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		err := s.http.ShutdownWithContext(ctx)
		// Shutdown closes only the listeners Serve has registered; when
		// Close races a Serve that has not started yet, closing the
		// listener here is what makes Serve return.
		if closeErr := s.listener.Close(); closeErr != nil && !errors.Is(closeErr, net.ErrClosed) {
			err = errors.Join(err, closeErr)
		}
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		if serveErr := <-s.served; serveErr != nil && !errors.Is(serveErr, net.ErrClosed) {
			err = errors.Join(err, serveErr)
		}
		if err != nil {
			s.closeErr = fmt.Errorf("admin: close: %w", err)
		}
	})
	return s.closeErr
}

// isLoopbackAddress reports whether addr's host is a loopback IP literal
// or "localhost". An empty host (all interfaces) is not loopback; other
// names are not resolved and count as not loopback.
func isLoopbackAddress(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%w: address %q: %v", ErrInvalidOptions, addr, err)
	}
	return isLoopbackHost(host), nil
}

// isLoopbackHost reports whether host (no port; brackets allowed around an
// IPv6 literal) is a loopback IP literal or "localhost".
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// fasthttpLogger routes fasthttp's own messages (bad requests, connection
// limits) to the endpoint's logger.
type fasthttpLogger struct{ logger *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.logger.Warn("admin http: " + fmt.Sprintf(format, args...))
}
