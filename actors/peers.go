package actors

// The peers supervisor ("peers" under node, in cluster mode only) owns the
// node's peer_address listener and the peer links (docs/protocol.md 8.1):
//
//	node/peers            the listener and its accept goroutine
//	├── <node id>         the link this node dials to that node (peer_link.go)
//	└── in-<n>            one link another node dialed here (peer_inbound.go)
//
// States: listening (from Started; the listener was bound by Broker.Start,
// so a taken port fails Start, not a later actor) and stopping (the
// listener is closed, so the accept goroutine ends; the children stop with
// the supervisor).
//
// Takes: peerAccepted (from the accept goroutine: a link that passed the
// acceptor's handshake). Sends nothing itself: it spawns one outbound link
// per other node of the cluster config at start, and one inbound actor per
// accepted link.
//
// The accept goroutine never waits for a handshake: it admits each
// connection to the listener's netlimit.Gate (peerLimits) and runs its
// handshake on a goroutine of its own. The gate holds at most
// peerLimits.Pending handshakes (PendingPerSource from one address) and
// closes the oldest to admit a newer one, so silent or slow dialers hold
// neither the accept loop nor a legitimate node's link; a connection
// sends its first byte within peerLimits.FirstByte or is dropped; at
// most peerLimits.Connections links are up at once. A handshake that
// fails closes its socket and is logged (at debug level when the gate
// dropped it, or it sent nothing). With tls files the handshake starts
// with mutual TLS (peer_tls.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/netlimit"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/tlsconfig"
)

// peerLimits bound the peer listener. A node has one inbound link per
// other node (a few more while links are redialled), so a legitimate
// cluster comes nowhere near them.
var peerLimits = netlimit.Limits{PendingPerSource: 16, Pending: 128, Connections: 256, FirstByte: time.Second}

// peerAccepted hands an authenticated inbound link to the supervisor.
type peerAccepted struct{ transport *peerTransport }

type peersSupervisor struct {
	entry    *runtime.Entry
	core     *brokerCore
	listener net.Listener
	identity peerIdentity
	accepted uint64
}

func newPeersSupervisor(entry *runtime.Entry, core *brokerCore) *peersSupervisor {
	return &peersSupervisor{entry: entry, core: core, listener: core.peerListener, identity: core.peerIdentity}
}

func (p *peersSupervisor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		p.spawnLinks(ctx)
		p.startAccepting(ctx)
	case peerAccepted:
		p.spawnInbound(ctx, msg.transport)
	case *actor.Stopping:
		_ = p.listener.Close()
	}
	p.entry.SetSummary(fmt.Sprintf("listening on %s, %d links accepted", p.listener.Addr(), p.accepted))
}

// spawnLinks starts one outbound link per other node of the config.
func (p *peersSupervisor) spawnLinks(ctx actor.Context) {
	node := p.core.config.Cluster
	for _, peer := range node.Config().Nodes {
		if peer.ID == node.ID() {
			continue
		}
		peer := peer
		props := p.core.registry.Props("peer-link", p.core.logger, func(entry *runtime.Entry) actor.Actor {
			return newPeerLink(entry, p.core, peer.ID, peer.PeerAddress)
		})
		if _, err := ctx.SpawnNamed(props, peer.ID); err != nil {
			panic(fmt.Errorf("actors: spawn peer link to %s: %w: %w", peer.ID, err, runtime.ErrFatal))
		}
	}
}

func (p *peersSupervisor) startAccepting(ctx actor.Context) {
	self, system, listener, identity := ctx.Self(), ctx.ActorSystem(), p.listener, p.identity
	node, logger, gate := p.core.config.Cluster, p.core.logger, p.core.peerGate
	peerTLS := node.PeerTLS() // nil: plain links (peer_tls.go)
	routines := &p.core.peerRoutines
	routines.Add(1)
	go func() {
		defer routines.Done()
		for {
			conn, err := listener.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					logger.Warn("peer listener stopped", "err", err)
				}
				return
			}
			admitted := gate.Admit(conn)
			routines.Add(1)
			go func() {
				defer routines.Done()
				transport, err := acceptPeer(admitted, peerTLS, node.Config(), node.ID(), identity, routines)
				if err != nil {
					level := slog.LevelWarn
					if admitted.Dropped() || errors.Is(err, netlimit.ErrNoFirstByte) {
						level = slog.LevelDebug // says nothing about who dialled: a flood would fill the log
					}
					logger.Log(context.Background(), level, "peer link refused", "remote", conn.RemoteAddr().String(), "err", err)
					return
				}
				system.Root.Send(self, peerAccepted{transport: transport})
			}()
		}
	}()
}

// acceptPeer runs the acceptor's side of one inbound link: the first
// byte, TLS with tls files, the peer handshake, and the gate's count of
// links. On failure the connection is closed.
func acceptPeer(admitted *netlimit.Conn, peerTLS *tlsconfig.Node, config cluster.Config, self string,
	identity peerIdentity, routines *runtime.TaskGroup) (*peerTransport, error) {
	if err := admitted.AwaitFirstByte(); err != nil {
		_ = admitted.Close()
		return nil, fmt.Errorf("%w: %w", errPeerRefused, err)
	}
	conn, err := acceptPeerTLS(admitted, peerTLS)
	if err != nil {
		return nil, err // acceptPeerTLS closed it
	}
	var certificateRefusal error
	known := peerKnownAndCertified(conn, config, self, &certificateRefusal)
	remote, reader, err := acceptHandshake(conn, identity, known)
	if err != nil {
		_ = conn.Close()
		if certificateRefusal != nil {
			return nil, certificateRefusal
		}
		return nil, err
	}
	if err := admitted.Established(); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: %s: %w", errPeerRefused, remote.NodeID, err)
	}
	return newPeerTransport(conn, reader, remote, routines), nil
}

func (p *peersSupervisor) spawnInbound(ctx actor.Context, transport *peerTransport) {
	p.accepted++
	props := p.core.registry.Props("peer-inbound", p.core.logger, func(entry *runtime.Entry) actor.Actor {
		return newPeerInbound(entry, p.core, transport)
	})
	if _, err := ctx.SpawnNamed(props, "in-"+strconv.FormatUint(p.accepted, 10)); err != nil {
		p.core.logger.Error("could not start an inbound peer link", "peer", transport.remote.NodeID, "err", err)
		transport.close(err)
	}
}

// peerLinkPID is the outbound link actor to a node.
func (c *brokerCore) peerLinkPID(nodeID string) *actor.PID {
	return actor.NewPID(c.system.Address(), "node/peers/"+nodeID)
}

// listenForPeers binds the peer listener and sets this node's peer
// identity, in cluster mode; a single node has neither.
func (c *brokerCore) listenForPeers() error {
	node := c.config.Cluster
	if node == nil {
		return nil
	}
	config := node.Config()
	secret, err := config.PeerSecret()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, warning := range config.SecretWarnings() {
		c.logger.Warn("cluster secret", "warning", warning)
	}
	self, err := config.Node(node.ID())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	listener, err := net.Listen("tcp", self.PeerAddress)
	if err != nil {
		return fmt.Errorf("actors: listen for peers on %s: %w", self.PeerAddress, err)
	}
	c.peerListener = listener
	if c.peerGate, err = netlimit.NewGate(peerLimits); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.peerIdentity = peerIdentity{clusterID: config.Cluster.DeploymentID, nodeID: node.ID(),
		instance: node.Instance(), secret: secret}
	return nil
}
