package actors

// The root actor and the sessions supervisor.
//
// node spawns the two top-level supervisors, "queues" (queues.go) and
// "sessions", and supervises them with the node policy: a failure restarts
// the child (the queues manager then recovers every queue from disk again);
// more than nodeRestartsMax within a minute escalates, which reaches the
// fatal guardian and stops the process with a non-zero exit. The node has
// one state (running) besides the lifecycle phases every actor has.
//
// sessions spawns one session actor per accepted connection and never
// restarts them: a failed session is stopped, which closes its connection
// with an error frame, and the partitions it used release what it held
// (they watch it). Its states:
//
//	accepting  every accepted connection gets a session
//	draining   the node is shutting down (drainSessions): each session is
//	           told to finish what it has in flight and close; connections
//	           accepted meanwhile are closed with shutting_down; once the
//	           last session stopped, core.sessionsDrained fires
//
// Messages: node takes the lifecycle messages only. sessions takes
// acceptedConnection (from the accept loop), drainSessions (from
// Broker.Close) and its children's Terminated; it sends drainSession to
// each session.

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

// nodeRestartsMax is the restart budget of each top-level supervisor.
const nodeRestartsMax = 3

type node struct {
	entry *runtime.Entry
	core  *brokerCore
}

func (n *node) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		n.spawnChildren(ctx)
		n.entry.SetSummary(fmt.Sprintf("node %s, incarnation %016x", n.core.config.NodeID, n.core.incarnation))
	}
}

func (n *node) spawnChildren(ctx actor.Context) {
	core := n.core
	// Sessions first: the queues manager signals readiness, after which
	// the listener hands connections to the sessions supervisor.
	sessions := core.registry.Props("sessions", core.logger, func(entry *runtime.Entry) actor.Actor {
		return &sessionsSupervisor{entry: entry, core: core}
	}, actor.WithSupervisor(&runtime.FailurePolicy{
		Level: "sessions", MaxRestarts: 0, Window: time.Minute, Decide: runtime.AlwaysStop,
		Exhausted: actor.StopDirective, Logger: core.logger, Registry: core.registry,
	}))
	if _, err := ctx.SpawnNamed(sessions, "sessions"); err != nil {
		panic(fmt.Errorf("actors: spawn sessions supervisor: %w: %w", err, runtime.ErrFatal))
	}
	if core.peerListener != nil {
		// Peers before queues: a partition's follower links and replicas
		// talk through them from their first message.
		peers := core.registry.Props("peers", core.logger, func(entry *runtime.Entry) actor.Actor {
			return newPeersSupervisor(entry, core)
		})
		if _, err := ctx.SpawnNamed(peers, "peers"); err != nil {
			panic(fmt.Errorf("actors: spawn peers supervisor: %w: %w", err, runtime.ErrFatal))
		}
	}
	managerPID := core.queuesManager
	queues := core.registry.Props("queues", core.logger, func(entry *runtime.Entry) actor.Actor {
		return newQueuesManager(entry, core)
	}, actor.WithSupervisor(partitionPolicy(core, func() *actor.PID { return managerPID })))
	if _, err := ctx.SpawnNamed(queues, "queues"); err != nil {
		panic(fmt.Errorf("actors: spawn queues manager: %w: %w", err, runtime.ErrFatal))
	}
}

// nodePolicy supervises the top-level supervisors.
func nodePolicy(core *brokerCore) *runtime.FailurePolicy {
	return &runtime.FailurePolicy{
		Level: "node", MaxRestarts: nodeRestartsMax, Window: time.Minute,
		Decide: runtime.AlwaysRestart, Exhausted: actor.EscalateDirective, Logger: core.logger, Registry: core.registry,
	}
}

// acceptedConnection hands an accepted socket (after its TLS handshake,
// when the listener speaks TLS) to the sessions supervisor, with its place
// in the connection limits and the time it was accepted (the hello
// deadline runs from there).
type acceptedConnection struct {
	conn       net.Conn
	slot       *connectionSlot
	acceptedAt time.Time
	internal   bool // Broker.DialInternal: the node's own session
}

// drainSessions starts the sessions' part of a shutdown; drainSession is
// what each session gets.
type (
	drainSessions struct{}
	drainSession  struct{}
)

// sessionDispatcher runs a session's mailbox on the goroutine of whoever
// sends to it (its reader goroutine, or a partition answering it) instead
// of waking a goroutine per batch: a session's Receive never blocks (it
// only routes messages and pushes frames to its outbox), so this saves a
// goroutine handoff on each side of the hot path. The mailbox still runs
// one message at a time.
var sessionDispatcher = actor.NewSynchronizedDispatcher(300)

type sessionsSupervisor struct {
	entry    *runtime.Entry
	core     *brokerCore
	count    uint64
	draining bool
}

func (s *sessionsSupervisor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case acceptedConnection:
		if s.draining {
			s.refuseConnection(msg)
			break
		}
		s.spawnSession(ctx, msg)
	case usersReloaded:
		for _, session := range ctx.Children() {
			ctx.Send(session, msg)
		}
	case drainSessions:
		s.draining = true
		for _, session := range ctx.Children() {
			ctx.Send(session, drainSession{})
		}
		s.maybeDrained(ctx)
	case *actor.Terminated:
		s.maybeDrained(ctx)
	}
	state := "accepting"
	if s.draining {
		state = "draining"
	}
	s.entry.SetSummary(fmt.Sprintf("%s sessions=%d accepted=%d", state, len(ctx.Children()), s.count))
}

// ReceiveStopping closes connections that arrive while the supervisor stops.
func (s *sessionsSupervisor) ReceiveStopping(ctx actor.Context) {
	if msg, ok := ctx.Message().(acceptedConnection); ok {
		s.refuseConnection(msg)
	}
}

func (s *sessionsSupervisor) spawnSession(ctx actor.Context, accepted acceptedConnection) {
	s.count++
	number := s.core.sessionNumbers.Add(1) // unique across restarts of this supervisor
	config := &s.core.config
	settings := connectionSettings{maxBodyBytes: config.MaxBodyBytes, limits: config.Limits,
		auth:       authenticator{token: config.AuthToken, users: config.Users},
		acceptedAt: accepted.acceptedAt, helloTimeout: config.HelloTimeout, internal: accepted.internal}
	conn := newConnection(number, accepted.conn, ctx.ActorSystem(), settings, s.core.outboxBounds(), config.Trace,
		accepted.slot, s.core.metrics)
	props := s.core.registry.Props("session", s.core.logger, func(entry *runtime.Entry) actor.Actor {
		return newSession(entry, s.core, conn, number)
	}, actor.WithDispatcher(sessionDispatcher))
	if _, err := ctx.SpawnNamed(props, strconv.FormatUint(number, 10)); err != nil {
		s.core.logger.Error("could not start a session", "err", err)
		conn.closeAfter(&wire.ErrorFrame{Code: wire.CodeInternal, Message: "the node could not start a session"})
		conn.closeNow()
	}
}

// refuseConnection closes a connection accepted while the node shuts
// down, on its own goroutine (a write may wait on the network).
func (s *sessionsSupervisor) refuseConnection(accepted acceptedConnection) {
	socket := accepted.conn
	s.core.connections.Add(1)
	go func() {
		defer s.core.connections.Done()
		defer accepted.slot.release()
		writer := wire.NewWriter(socket, 0)
		_ = socket.SetWriteDeadline(time.Now().Add(shutdownLinger))
		_ = writer.WriteFrame(&wire.ErrorFrame{Code: wire.CodeShuttingDown, Message: "the node is shutting down"})
		_ = writer.Flush()
		_ = socket.Close()
	}()
}

// maybeDrained fires core.sessionsDrained once draining left no session.
func (s *sessionsSupervisor) maybeDrained(ctx actor.Context) {
	if s.draining && len(ctx.Children()) == 0 {
		s.core.sessionsDrained.Fire(nil)
	}
}
