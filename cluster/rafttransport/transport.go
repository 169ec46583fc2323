package rafttransport

// Transport is one node's end: a listener on the node's Raft address that
// hands every frame it reads to dragonboat, and the dialing side that
// opens message and snapshot connections to the other nodes.
//
// Goroutines: one accepts; one per accepted connection reads frames until
// the connection ends (at most the bounds of bounds.go); one per dialled
// message connection watches its socket for the peer's close
// (connection.go). Close stops the listener, closes every accepted
// connection and waits for their goroutines.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/netlimit"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

const (
	// DialTimeout bounds one connection attempt. A peer on the same
	// network answers a dial in well under a millisecond; a dial that
	// waits is a peer that is down or cut off, and returning early lets
	// the caller's backoff try again soon after it heals.
	DialTimeout = time.Second
	// handshakeTimeout bounds a TLS handshake, either side.
	handshakeTimeout = 5 * time.Second
	// keepAlivePeriod is the TCP keepalive of every connection, which
	// ends an accepted connection whose peer vanished without a word.
	keepAlivePeriod = 10 * time.Second
	// poisonAckTimeout bounds the wait for the answer to a snapshot
	// stream's end.
	poisonAckTimeout = 10 * time.Second
	// Name is the module's name, as dragonboat logs it.
	Name = "fibril-tcp"
)

// Factory builds the node's Transport for dragonboat. TLS nil means
// plain TCP; Logger nil means slog.Default().
//
// Peers are the Raft addresses of the cluster's nodes (host:port). With
// TLS and Peers, the accepting side checks who a connection is, as peer
// links do (docs/security.md): the dialer's verified certificate must
// name the host of one of them, and each message batch's source address
// must be one of those whose host it names; otherwise the connection
// ends. Empty Peers check nothing beyond the CA.
type Factory struct {
	TLS    *tlsconfig.Node
	Peers  []string
	Logger *slog.Logger
	// Limits bound the listener (bounds.go); the zero value means
	// DefaultLimits.
	Limits netlimit.Limits
}

var _ config.TransportFactory = (*Factory)(nil)

// Create implements config.TransportFactory.
func (f *Factory) Create(nodeHost config.NodeHostConfig, messages raftio.MessageHandler,
	chunks raftio.ChunkHandler) raftio.ITransport {
	logger := f.Logger
	if logger == nil {
		logger = slog.Default()
	}
	gate, err := netlimit.NewGate(f.limits())
	if err != nil {
		panic(fmt.Errorf("rafttransport: %w", err)) // the limits are constants or a test's
	}
	return &Transport{
		gate:          gate,
		listenAddress: nodeHost.GetListenAddress(),
		tls:           f.TLS,
		peers:         slices.Clone(f.Peers),
		messages:      messages,
		chunks:        chunks,
		logger:        logger.With("component", "raft-transport"),
		accepted:      map[net.Conn]struct{}{},
	}
}

// Validate implements config.TransportFactory: an address is host:port.
func (f *Factory) Validate(address string) bool { return ValidAddress(address) }

// ValidAddress reports whether address is host:port with a port number.
func ValidAddress(address string) bool {
	host, port, err := net.SplitHostPort(address)
	if err != nil || host == "" {
		return false
	}
	number, err := strconv.ParseUint(port, 10, 16)
	return err == nil && number > 0
}

// Transport implements raftio.ITransport.
type Transport struct {
	listenAddress string
	tls           *tlsconfig.Node
	peers         []string // the nodes' Raft addresses; identity.go
	messages      raftio.MessageHandler
	chunks        raftio.ChunkHandler
	logger        *slog.Logger

	listener net.Listener
	gate     *netlimit.Gate // bounds.go
	serving  sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	accepted map[net.Conn]struct{}
}

var _ raftio.ITransport = (*Transport)(nil)

// Name implements raftio.ITransport.
func (t *Transport) Name() string { return Name }

func (t *Transport) encrypted() bool { return t.tls != nil }

// Start listens on the node's Raft address and serves what arrives.
func (t *Transport) Start() error {
	listener, err := net.Listen("tcp", t.listenAddress)
	if err != nil {
		return fmt.Errorf("rafttransport: listen on %s: %w", t.listenAddress, err)
	}
	t.listener = listener
	t.serving.Add(1)
	go t.accept()
	return nil
}

// Close stops accepting, ends every accepted connection and waits for
// their readers. Dialled connections belong to dragonboat, which closes
// them.
func (t *Transport) Close() error {
	t.mu.Lock()
	t.closed = true
	for conn := range t.accepted {
		_ = conn.Close()
	}
	t.mu.Unlock()
	if t.listener != nil {
		_ = t.listener.Close()
	}
	t.serving.Wait()
	return nil
}

func (t *Transport) accept() {
	defer t.serving.Done()
	var pause time.Duration
	for {
		conn, err := t.listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or another passing failure: wait a
			// little (5 ms doubling to 1 s) and accept again, as long as
			// the transport is not closed.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			t.logger.Warn("raft listener: accept failed; trying again", "err", err, "in", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		setKeepAlive(conn)
		admitted := t.gate.Admit(conn) // never waits: the oldest pending connection makes room
		if !t.track(admitted) {
			_ = admitted.Close()
			return
		}
		t.serving.Add(1)
		go t.serve(admitted)
	}
}

// track records an accepted connection for Close; false once closed.
func (t *Transport) track(conn net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.accepted[conn] = struct{}{}
	return true
}

func (t *Transport) untrack(conn net.Conn) {
	t.mu.Lock()
	delete(t.accepted, conn)
	t.mu.Unlock()
	_ = conn.Close()
}

// serve reads frames from one accepted connection until it ends or a
// frame is bad. The connection is pending in the gate (bounds.go) until
// its first frame arrived, past the TLS handshake and the identity check,
// within handshakeTimeout of the accept.
func (t *Transport) serve(admitted *netlimit.Conn) {
	defer t.serving.Done()
	defer t.untrack(admitted)
	remote := admitted.RemoteAddr().String()
	if err := admitted.AwaitFirstByte(); err != nil {
		t.refused(admitted, err)
		return
	}
	deadline := time.Now().Add(handshakeTimeout)
	var conn net.Conn = admitted
	if t.tls != nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		tlsConn := tls.Server(admitted, t.tls.ServerConfig())
		err := tlsConn.HandshakeContext(ctx)
		cancel()
		if err != nil { // no answer in plain text: a Raft port speaks TLS only
			t.refused(admitted, tlsconfig.ExplainHandshakeError(err, remote, true))
			return
		}
		conn = tlsConn
	}
	claims, err := t.certifiedAddresses(conn)
	if err != nil {
		t.refused(admitted, err)
		return
	}
	var buf []byte
	for established := false; ; established = true {
		wait := time.Time{} // an established connection may idle
		if !established {
			wait = deadline
		}
		if err := readMagic(conn, wait); err != nil {
			if errors.Is(err, errPoison) {
				_ = conn.SetWriteDeadline(time.Now().Add(headerTimeout))
				_, _ = conn.Write(poison[:])
			} else if errors.Is(err, ErrBadFrame) {
				t.logger.Warn("raft connection ended", "remote", remote, "err", err)
			} else if !established {
				t.refused(admitted, fmt.Errorf("no frame within %v of the accept: %w", handshakeTimeout, err))
			}
			return
		}
		h, payload, err := readFrame(conn, buf, t.encrypted())
		if err != nil {
			if errors.Is(err, ErrBadFrame) {
				t.logger.Warn("raft connection ended", "remote", remote, "err", err)
			}
			return
		}
		if cap(payload) <= 4<<20 {
			buf = payload[:0] // keep a modest buffer for the next frame
		}
		if !established {
			if err := admitted.Established(); err != nil {
				t.refused(admitted, err)
				return
			}
		}
		if !t.deliver(h.method, payload, claims, remote) {
			return
		}
	}
}

// deliver hands one payload to dragonboat; false ends the connection (an
// undecodable payload, a batch from an address the connection's
// certificate is not for, or a chunk dragonboat refused).
func (t *Transport) deliver(method uint16, payload []byte, claims addressClaims, remote string) bool {
	switch method {
	case methodMessages:
		var batch pb.MessageBatch
		if err := batch.Unmarshal(payload); err != nil {
			t.logger.Warn("raft connection ended: undecodable message batch", "err", err)
			return false
		}
		if err := claims.check(batch.SourceAddress); err != nil {
			t.logger.Warn("raft connection ended", "remote", remote, "err", err)
			return false
		}
		t.messages(batch)
		return true
	default:
		var chunk pb.Chunk
		if err := chunk.Unmarshal(payload); err != nil {
			t.logger.Warn("raft connection ended: undecodable snapshot chunk", "err", err)
			return false
		}
		return t.chunks(chunk)
	}
}

// dial opens one connection to target: TCP, then TLS when configured.
func (t *Transport) dial(ctx context.Context, target string) (net.Conn, error) {
	dialer := net.Dialer{Timeout: DialTimeout, KeepAlive: keepAlivePeriod}
	conn, err := dialer.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	if t.tls == nil {
		return conn, nil
	}
	host, _, _ := net.SplitHostPort(target)
	tlsConn := tls.Client(conn, t.tls.ClientConfig(host))
	handshake, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if err := tlsConn.HandshakeContext(handshake); err != nil {
		_ = conn.Close()
		return nil, tlsconfig.ExplainHandshakeError(err, target, false)
	}
	return tlsConn, nil
}

// GetConnection implements raftio.ITransport: a message connection to
// target (connection.go).
func (t *Transport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	return newMessageConnection(ctx, t, target)
}

// GetSnapshotConnection implements raftio.ITransport.
func (t *Transport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	conn, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	return &snapshotConnection{conn: conn, encrypted: t.encrypted()}, nil
}

func setKeepAlive(conn net.Conn) {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetKeepAlive(true)
		_ = tcp.SetKeepAlivePeriod(keepAlivePeriod)
	}
}
