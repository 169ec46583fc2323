package actors

// The client listener's accept loop. For every accepted socket, in order:
//
//  1. the connection limits (limits.go): a socket over the node's limit or
//     its address's gets one FER1 connection_limit (107) and is closed, by
//     a bounded pool of refusers (over TLS when the listener speaks TLS; a
//     refusal that finds the pool busy is a bare close), so a flood costs
//     the node a bounded amount of work;
//  2. with Config.TLS, the TLS handshake, on its own goroutine, within the
//     hello deadline (the deadline runs from the accept, so the handshake
//     and the hello share it); a client that spoke plain text is told so
//     in one plain FER1 (tlsconfig.ServerHandshake);
//  3. the socket goes to the sessions supervisor, which starts a session.
//
// The listener address: Start refuses an address other than loopback
// unless the node speaks TLS and authenticates clients (a shared token
// or users), or Config.AllowInsecureListen says so, in which case it
// logs a warning (checkListenSecurity).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/wire"
)

// Refusals of connections over a limit.
const (
	maxRefusers        = 64                     // refusals answered at once; more are bare closes
	refusalWriteLinger = 250 * time.Millisecond // to write the refusal and let the client read it
	refusalHandshake   = time.Second            // a TLS handshake made only to refuse
)

// ErrInsecureListen is returned by Start for a client listener address
// other than loopback without TLS and authentication.
var ErrInsecureListen = errors.New("actors: the client listener would accept unauthenticated plain-text connections from the network")

func (b *Broker) acceptLoop() {
	defer b.accepting.Done()
	sessions := actor.NewPID(b.core.system.Address(), b.node.Id+"/sessions")
	refusers := make(chan struct{}, maxRefusers)
	for {
		conn, err := b.listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			b.core.logger.Warn("accept failed", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors: do not spin
			continue
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetNoDelay(true)
		}
		acceptedAt := time.Now()
		slot, refused := b.core.limiter.acquire(conn.RemoteAddr())
		if refused != "" {
			b.core.metrics.limitReached(refused)
			b.refuseConnection(conn, refused, refusers)
			continue
		}
		if b.core.config.TLS == nil {
			b.core.system.Root.Send(sessions, acceptedConnection{conn: conn, slot: slot, acceptedAt: acceptedAt})
			continue
		}
		b.core.connections.Add(1)
		go func() {
			defer b.core.connections.Done()
			b.handshake(sessions, conn, slot, acceptedAt)
		}()
	}
}

// handshake runs the TLS handshake of an accepted socket within the hello
// deadline, then hands the connection to the sessions supervisor.
func (b *Broker) handshake(sessions *actor.PID, conn net.Conn, slot *connectionSlot, acceptedAt time.Time) {
	ctx, cancel := context.WithDeadline(b.core.listening, acceptedAt.Add(b.core.config.HelloTimeout))
	defer cancel()
	secured, err := tlsconfig.ServerHandshake(ctx, conn, b.core.config.TLS.Config())
	if err != nil {
		slot.release()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			b.core.metrics.limitReached(limitHelloDeadline)
		}
		b.core.metrics.tlsHandshakeFailures.Inc()
		b.core.logger.Debug("TLS handshake failed", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	b.core.system.Root.Send(sessions, acceptedConnection{conn: secured, slot: slot, acceptedAt: acceptedAt})
}

// refuseConnection answers a connection over a limit with one FER1
// connection_limit and closes it, on a refuser when one is free.
func (b *Broker) refuseConnection(conn net.Conn, limit string, refusers chan struct{}) {
	b.core.logger.Debug("connection refused", "remote", conn.RemoteAddr().String(), "limit", limit)
	select {
	case refusers <- struct{}{}:
	default:
		_ = conn.Close()
		return
	}
	refusal := &wire.ErrorFrame{Code: wire.CodeConnectionLimit, Message: refusalText(limit, b.core.config.Limits)}
	config := b.core.config.TLS
	b.core.connections.Add(1)
	go func() {
		defer func() { <-refusers }()
		defer b.core.connections.Done()
		writeRefusal(conn, refusal, config)
	}()
}

// writeRefusal writes the refusal (after a short TLS handshake when the
// listener speaks TLS), half-closes, and lets the client read it before
// closing.
func writeRefusal(conn net.Conn, refusal *wire.ErrorFrame, config *tlsconfig.Server) {
	defer conn.Close()
	var socket net.Conn = conn
	if config != nil {
		ctx, cancel := context.WithTimeout(context.Background(), refusalHandshake)
		secured, err := tlsconfig.ServerHandshake(ctx, conn, config.Config())
		cancel()
		if err != nil {
			return
		}
		socket = secured
	}
	_ = socket.SetDeadline(time.Now().Add(refusalWriteLinger))
	if _, err := socket.Write(refusal.Encode(nil)); err != nil {
		return
	}
	if closer, ok := socket.(halfCloser); ok {
		_ = closer.CloseWrite()
	}
	var discard [512]byte
	for {
		if _, err := socket.Read(discard[:]); err != nil {
			return
		}
	}
}

// DialInternal opens a client connection to this node from inside the
// process (an in-memory pipe): the session it starts is the node's own,
// with every permission, no TLS and no token, and it does not count in
// the connection limits. The HTTP endpoint's queue actions use it, so
// they are authorized by the HTTP endpoint's rules (its token), not by
// the users file. It fits client.Options.Dialer.
func (b *Broker) DialInternal(ctx context.Context, _ string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-b.core.listening.Done():
		return nil, fmt.Errorf("actors: the node is shutting down: %w", net.ErrClosed)
	default:
	}
	local, remote := net.Pipe()
	sessions := actor.NewPID(b.core.system.Address(), b.node.Id+"/sessions")
	b.core.system.Root.Send(sessions, acceptedConnection{conn: remote, acceptedAt: time.Now(), internal: true})
	return local, nil
}

// checkListenSecurity refuses a listener address other than loopback that
// would take plain text or unauthenticated clients, unless allowed.
func checkListenSecurity(config Config, bound net.Addr) error {
	if isLoopbackAddr(bound) {
		return nil
	}
	var missing []string
	if config.TLS == nil {
		missing = append(missing, "TLS")
	}
	if config.AuthToken == "" && config.Users == nil {
		missing = append(missing, "authentication (a users file or a token)")
	}
	if len(missing) == 0 {
		return nil
	}
	if !config.AllowInsecureListen {
		return fmt.Errorf("%w: %s is not a loopback address and the node has no %v; configure them, bind 127.0.0.1, "+
			"or allow it explicitly (fibril serve --allow-insecure-listen)", ErrInsecureListen, bound, missing)
	}
	config.Logger.Warn("the client listener accepts connections from the network without TLS or authentication "+
		"(allowed explicitly): anyone who reaches it can read and change every queue", "listen", bound.String(),
		"missing", fmt.Sprint(missing))
	return nil
}

// isLoopbackAddr reports whether a bound address is a loopback IP.
func isLoopbackAddr(addr net.Addr) bool {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.IsLoopback()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tlsConnectionState returns the TLS state of a session's socket, if it
// is one (for the connections table).
func tlsConnectionState(conn net.Conn) (tls.ConnectionState, bool) {
	if secured, ok := conn.(*tls.Conn); ok {
		return secured.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}
