package actors

// Broker is one running node: the actor system, the supervision tree, the
// client listener. cmd/fibril starts it, the HTTP endpoint reads it, and
// the tests run it in process.
//
// Start order: open the data directory (locked against a second process),
// spawn the tree, wait until every queue found on disk has been recovered
// (opened, or recorded as failed), and only then accept clients, so a
// client never sees a recovered queue as unknown.
//
// Close order, all of it against one deadline (Config.ShutdownTimeout):
// stop accepting; drain the sessions (each finishes what it has in flight:
// its unanswered publishes get their confirms or refusals, new requests are
// refused as unavailable; then it closes with a shutting_down error frame)
// while the partitions refuse, as not stored, every publish they have not
// appended yet, so the drain waits only for appends already in flight;
// wait for their sockets; stop the tree (each partition closes its queue,
// which flushes and syncs what is written); wait for every log to close.
// A step that does not finish in time is named in Close's error, and the
// next step runs anyway, so Close always returns by the deadline (plus
// the time of a close that is already running).

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

// Broker is a running node. Its methods are safe for concurrent use.
type Broker struct {
	core     *brokerCore
	node     *actor.PID
	listener net.Listener
	unlock   func()

	fatalOnce sync.Once
	fatalErr  atomic.Pointer[error]
	fatal     chan struct{}

	closeOnce sync.Once
	closeErr  error
	accepting sync.WaitGroup
}

// Health is the node's health as the HTTP endpoint reports it.
type Health struct {
	// OK is false when a queue is fenced or failed, a queue this node
	// replicates has no serving owner, or a fatal failure happened.
	OK bool
	// Fatal is the failure the node could not contain, if any; the process
	// is stopping.
	Fatal string
	// Queues lists every queue that does not serve, with the reason.
	Queues []QueueHealth
	// Unowned lists, in a cluster, the queues this node replicates that no
	// node serves now, as this node sees it (cluster_health.go).
	Unowned []QueueHealth
	// Stuck lists, in a cluster, the queues this node owns whose quorum
	// frontier has not reached records written more than commitStuckAfter
	// ago: their confirms and deliveries cannot move (partition_commit.go).
	Stuck []QueueHealth
	// Lagging lists, in a cluster, the followers of queues this node owns
	// whose link is stalled, catching up or down: the queue may still
	// serve on the other copies, so they do not make the node unhealthy.
	Lagging []QueueHealth
	// Sessions is the number of open client sessions.
	Sessions int64
	// Restarts counts actor restarts since start.
	Restarts uint64
}

// QueueHealth is one queue that does not serve.
type QueueHealth struct {
	Name  string
	Error string
}

// Start starts a node and returns once it accepts clients.
func Start(config Config) (*Broker, error) {
	config, err := config.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := config.FS.MkdirAll(config.DataDir); err != nil {
		return nil, fmt.Errorf("actors: data directory %s: %w", config.DataDir, err)
	}
	unlock, err := lockDataDir(config)
	if err != nil {
		return nil, err
	}
	b := &Broker{unlock: unlock, fatal: make(chan struct{})}
	if config.Fatal == nil {
		config.Fatal = b.recordFatal
	} else {
		given := config.Fatal
		config.Fatal = func(err error) { b.recordFatal(err); given(err) }
	}
	system := runtime.NewActorSystem(config.Logger)
	registry := runtime.NewRegistry(config.Clock)
	metrics := newMetrics(registry.RestartsTotal)
	b.core = newBrokerCore(config, system, registry, metrics)
	metrics.setQueueInfos(b.Queues) // queue gauges are read from fresh infos at scrape time
	metrics.setBoundGauges(b.core)
	metrics.setStorage(b.core.budget, &b.core.syncs)
	if err := b.core.listenForPeers(); err != nil {
		unlock()
		return nil, err
	}
	if err := b.startTree(); err != nil {
		b.shutdownTree(time.Now().Add(config.ShutdownTimeout), &shutdownSteps{})
		unlock()
		return nil, err
	}
	listener, err := net.Listen("tcp", config.ListenAddr)
	if err != nil {
		b.shutdownTree(time.Now().Add(config.ShutdownTimeout), &shutdownSteps{})
		unlock()
		return nil, fmt.Errorf("actors: listen on %s: %w", config.ListenAddr, err)
	}
	if err := checkListenSecurity(config, listener.Addr()); err != nil {
		_ = listener.Close()
		b.shutdownTree(time.Now().Add(config.ShutdownTimeout), &shutdownSteps{})
		unlock()
		return nil, err
	}
	b.listener = listener
	b.accepting.Add(1)
	go b.acceptLoop()
	config.Logger.Info("client listener bound; accepting clients", "listen", listener.Addr().String(), "data", config.DataDir,
		"sync_interval", config.SyncInterval)
	return b, nil
}

// startTree spawns the root actor and waits until the queues on disk are
// recovered (or a fatal failure happens first).
func (b *Broker) startTree() error {
	core := b.core
	// The manager's id is fixed by the tree; every session reads it.
	core.queuesManager = actor.NewPID(core.system.Address(), "node/queues")
	guardian := &runtime.FatalGuardian{Fatal: core.config.Fatal}
	props := core.registry.Props("node", core.logger, func(entry *runtime.Entry) actor.Actor {
		return &node{entry: entry, core: core}
	}, actor.WithGuardian(guardian), actor.WithSupervisor(nodePolicy(core)))
	pid, err := core.system.Root.SpawnNamed(props, "node")
	if err != nil {
		return fmt.Errorf("actors: spawn node: %w", err)
	}
	b.node = pid
	select {
	case <-core.ready.C():
		return core.ready.Err()
	case <-b.fatal:
		return *b.fatalErr.Load()
	}
}

// recordFatal keeps the first fatal failure and says it in one log line.
func (b *Broker) recordFatal(err error) {
	b.fatalOnce.Do(func() {
		b.fatalErr.Store(&err)
		b.core.logger.Error("fatal failure; the node stops", "err", err)
		close(b.fatal)
	})
}

// Addr is the client listener's address.
func (b *Broker) Addr() net.Addr { return b.listener.Addr() }

// Config returns the configuration the node runs with (defaults applied).
func (b *Broker) Config() Config { return b.core.config }

// Registry returns the registry of live actors.
func (b *Broker) Registry() *runtime.Registry { return b.core.registry }

// Metrics returns the node's metrics.
func (b *Broker) Metrics() *Metrics { return b.core.metrics }

// Fatal is closed when a failure the node cannot contain happened;
// FatalError then returns it. cmd/fibril exits non-zero.
func (b *Broker) Fatal() <-chan struct{} { return b.fatal }

// FatalError returns the fatal failure, or nil.
func (b *Broker) FatalError() error {
	if err := b.fatalErr.Load(); err != nil {
		return *err
	}
	return nil
}

// SyncInterval is the background sync interval in force.
func (b *Broker) SyncInterval() time.Duration { return b.core.syncInterval() }

// SetSyncInterval changes the background sync interval of every queue log,
// live; 0 turns background sync off.
func (b *Broker) SetSyncInterval(interval time.Duration) error {
	if interval < 0 {
		return fmt.Errorf("%w: negative sync interval %v", ErrInvalidConfig, interval)
	}
	b.core.syncIntervalNanos.Store(int64(interval))
	b.core.system.Root.Send(b.core.queuesManager, setSyncInterval{interval: interval})
	return nil
}

// Queues returns every queue's info, sorted by name. It asks each
// partition and waits for the answers (at most a few seconds for a queue
// that does not answer, which is then reported fenced).
func (b *Broker) Queues() []wire.QueueInfo {
	return b.core.withClusterInfos(gatherInfos(b.core.system, b.core.directory.snapshot()))
}

// QueueInfo returns one queue's info.
func (b *Broker) QueueInfo(name string) (wire.QueueInfo, bool) {
	route, ok := b.core.directory.lookup(name)
	if !ok {
		return wire.QueueInfo{}, false
	}
	return b.core.withClusterInfo(gatherInfos(b.core.system, []queueRoute{route})[0]), true
}

// ReloadUsers reads the users file again (Config.Users); when it loads,
// its users and permissions are in force at once, and every session of a
// user it removed or gave a new token is closed with unauthorized. When
// it does not load, the users in force stay and the error says why.
func (b *Broker) ReloadUsers() error {
	users := b.core.config.Users
	if users == nil {
		return fmt.Errorf("%w: the node has no users file to reload", ErrInvalidConfig)
	}
	if _, err := users.Reload(); err != nil {
		return err
	}
	b.core.system.Root.Send(actor.NewPID(b.core.system.Address(), b.node.Id+"/sessions"), usersReloaded{})
	return nil
}

// injectedPanic makes the actor that receives it panic (fault injection).
type injectedPanic struct{ reason string }

// ErrNoSuchActor is returned by InjectPanic for a path no live actor has.
var ErrNoSuchActor = errors.New("actors: no live actor at that path")

// InjectPanic makes the partition, session or queues-manager actor at
// path (as the registry lists it, e.g. "node/queues/orders/0" or
// "node/queues") panic with reason, to exercise supervision: a partition
// restarts and reopens its queue, a session is stopped and its connection
// closed, the manager restarts and recovers every queue. Other kinds
// ignore it.
func (b *Broker) InjectPanic(path, reason string) error {
	if _, ok := b.core.registry.Lookup(path); !ok {
		return fmt.Errorf("%w: %s", ErrNoSuchActor, path)
	}
	b.core.system.Root.Send(actor.NewPID(b.core.system.Address(), path), injectedPanic{reason: reason})
	return nil
}

// Health reports fenced and failed queues and any fatal failure.
func (b *Broker) Health() Health {
	health := Health{
		Sessions: b.core.metrics.sessionsOpen.Load(),
		Restarts: b.core.registry.RestartsTotal(),
	}
	if err := b.FatalError(); err != nil {
		health.Fatal = err.Error()
	}
	for _, info := range b.Queues() {
		if info.Fenced {
			health.Queues = append(health.Queues, QueueHealth{Name: info.Name, Error: info.FenceError})
		}
		health.Stuck = append(health.Stuck, stuckQueues(info)...)
		health.Lagging = append(health.Lagging, laggingReplicas(info)...)
	}
	health.Unowned = b.unownedQueues()
	health.OK = health.Fatal == "" && len(health.Queues) == 0 && len(health.Unowned) == 0 && len(health.Stuck) == 0
	return health
}

// Close shuts the node down cleanly; see the file comment. It is safe to
// call more than once and returns the first call's result.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		began := time.Now()
		deadline := began.Add(b.core.config.ShutdownTimeout)
		_ = b.listener.Close()
		b.core.stopListening()
		b.accepting.Wait()
		var steps shutdownSteps
		b.closeErr = b.shutdownTree(deadline, &steps)
		b.unlock()
		b.core.logger.Info("node stopped", "took", time.Since(began), "drain", steps.drain,
			"connections", steps.connections, "actors", steps.actors, "storage", steps.storage,
			"clean", b.closeErr == nil)
	})
	return b.closeErr
}

// shutdownSteps is how long each step of a shutdown took, for its log line.
type shutdownSteps struct{ drain, connections, actors, storage time.Duration }

// shutdownTree drains the sessions, stops the tree and waits for storage,
// every step against deadline.
func (b *Broker) shutdownTree(deadline time.Time, steps *shutdownSteps) error {
	core := b.core
	var errs []error
	mark := time.Now()
	lap := func(step *time.Duration) {
		now := time.Now()
		*step, mark = now.Sub(mark), now
	}
	if b.node != nil {
		sessions := actor.NewPID(core.system.Address(), b.node.Id+"/sessions")
		core.draining.Store(true)
		core.system.Root.Send(sessions, drainSessions{})
		if !runtime.WaitBefore(core.sessionsDrained.C(), deadline) {
			errs = append(errs, fmt.Errorf("sessions did not finish their work in time (still open: %s)",
				b.livePaths("session")))
		}
		lap(&steps.drain)
		b.stopAndWait(sessions, deadline, &errs)
		if !runtime.WaitGroupUntil(&core.connections, deadline) {
			errs = append(errs, errors.New("client connections did not close in time"))
		}
		lap(&steps.connections)
		b.stopAndWait(b.node, deadline, &errs)
		lap(&steps.actors)
	}
	if core.peerListener != nil {
		_ = core.peerListener.Close() // also when the tree did not stop it
	}
	if !core.peerRoutines.WaitUntil(deadline) {
		errs = append(errs, errors.New("peer links did not close in time"))
	}
	if !core.storageClosers.WaitUntil(deadline) {
		errs = append(errs, errors.New("queue storage did not close in time (a log close or sync is still running)"))
	}
	lap(&steps.storage)
	core.system.Shutdown()
	return errors.Join(errs...)
}

// stopAndWait stops the actor at pid (for a shutdown) and waits until it
// and everything under it stopped, or deadline.
func (b *Broker) stopAndWait(pid *actor.PID, deadline time.Time, errs *[]error) {
	entry := b.core.registry.EntryAt(pid.Id)
	if entry == nil {
		return // never started, or stopped already
	}
	b.core.registry.StopActor(b.core.system.Root, pid, runtime.StopShutdown)
	if !runtime.WaitBefore(entry.Stopped(), deadline) {
		*errs = append(*errs, fmt.Errorf("stop %s: not stopped in time (still running: %s)", pid.Id, b.livePaths("")))
	}
}

// livePaths lists the actors of a kind ("" for every kind) still
// registered, for a shutdown step that ran out of time.
func (b *Broker) livePaths(kind string) string {
	var paths []string
	for _, info := range b.core.registry.Snapshot() {
		if kind == "" || info.Kind == kind {
			paths = append(paths, info.Path+" ("+info.Kind+": "+info.Summary+")")
		}
	}
	if len(paths) == 0 {
		return "none"
	}
	return strings.Join(paths, ", ")
}
