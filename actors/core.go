package actors

// brokerCore is what every actor of one broker shares: configuration, the
// actor system, the registry, the metrics, the queue directory and the id
// counters. Everything in it is either immutable after Start or safe for
// concurrent use on its own (atomics, its own lock); no actor state lives
// here.
//
// Ids. Session numbers, subscription ids and delivery tags come from one
// counter that starts at the process's start time in nanoseconds. A new
// process therefore starts above every id an earlier process could have
// issued (it would have had to issue more than one id per nanosecond of its
// life), so a settle that names a tag from before a restart can never match
// a delivery of the new process.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/netlimit"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

type brokerCore struct {
	config    Config
	logger    *slog.Logger
	system    *actor.ActorSystem
	registry  *runtime.Registry
	metrics   *Metrics
	directory *directory
	// queuesManager is the queues actor's PID; set before the tree starts.
	queuesManager *actor.PID
	incarnation   uint64 // process start, unix nanoseconds
	nextID        atomic.Uint64
	// syncIntervalNanos is the background sync interval queues open with;
	// Broker.SetSyncInterval changes it and tells the open ones.
	syncIntervalNanos atomic.Int64

	// storageClosers counts goroutines closing queue storage; Close waits
	// for them so every log is flushed, synced and closed before it returns.
	storageClosers runtime.TaskGroup
	// connections counts live client connections' goroutines.
	connections sync.WaitGroup
	// closing tracks queue directories whose storage is still closing, so
	// nothing opens a directory twice.
	closing closingDirs

	// ready fires once every queue found on disk at start has opened or
	// failed (or with the fatal error that prevented it); Start waits for
	// it. A restarted queues manager fires it again, which does nothing.
	ready *runtime.Signal
	// sessionsDrained fires once a shutdown's drain left no session.
	sessionsDrained *runtime.Signal
	// draining is set when a shutdown begins: partitions refuse, as not
	// stored, every publish they have not appended (one atomic load per
	// publish batch).
	draining atomic.Bool
	// sessionNumbers numbers sessions, across restarts of their supervisor.
	sessionNumbers atomic.Uint64
	// sessions lists the live client sessions (sessions_table.go).
	sessions sessionTable
	// limiter counts client connections against Config.Limits.
	limiter *connectionLimiter
	// outboxBytes is the estimate of the frames every session has waiting
	// for its client (outbox.go), against Limits.MaxOutboxBytesTotal.
	outboxBytes atomic.Int64
	// listening ends when Close begins (stopListening): TLS handshakes
	// still running give up.
	listening     context.Context
	stopListening context.CancelFunc

	// syncs counts every file and directory sync the node makes: config.FS
	// is wrapped in it once, in newBrokerCore (fibril_fsyncs_total).
	syncs vfs.SyncCounter
	// budget is the node's one log budget (tail-cache memory, descriptors
	// of sealed segments), shared by every queue log.
	budget *log.Budget
	// Cluster mode only: the peer listener (bound by Start), this node's
	// identity on peer links, and the partitions by coordination shard.
	peerListener net.Listener
	peerGate     *netlimit.Gate // the bounds of the peer listener (peers.go)
	peerIdentity peerIdentity
	shards       *shardDirectory
	// peerRoutines counts the goroutines of peer links (accepting, dialing,
	// handshakes, transports); Close waits for them after the tree stopped.
	peerRoutines runtime.TaskGroup
	// peersDown names the nodes whose outbound peer link is down (a dial
	// failed or the link ended) by node id; peer links write it, sessions
	// and the manager read it to hold requests for an owner that is gone
	// rather than redirect clients to it (peerUnreachable).
	peersDown sync.Map
	// timelines holds each replicated queue's failover timeline by queue
	// name (*failoverTimeline), for Broker.QueueFailovers; the manager
	// writes it, any goroutine reads it.
	timelines sync.Map
}

func newBrokerCore(config Config, system *actor.ActorSystem, registry *runtime.Registry, metrics *Metrics) *brokerCore {
	core := &brokerCore{
		config: config, logger: config.Logger, system: system, registry: registry, metrics: metrics,
		directory:   newDirectory(),
		shards:      newShardDirectory(),
		incarnation: uint64(config.Clock().UnixNano()),
		ready:       runtime.NewSignal(), sessionsDrained: runtime.NewSignal(),
		limiter: newConnectionLimiter(config.Limits),
	}
	core.listening, core.stopListening = context.WithCancel(context.Background())
	core.config.FS = vfs.CountSyncs(config.FS, &core.syncs)
	core.budget = log.NewBudget(log.BudgetOptions{TailCacheBytes: config.TailCacheBytes,
		OpenSegmentFiles: config.OpenSegmentFiles})
	core.nextID.Store(core.incarnation)
	core.syncIntervalNanos.Store(int64(config.SyncInterval))
	return core
}

// outboxBounds are the bounds of one session's outbox.
func (c *brokerCore) outboxBounds() outboxBounds {
	return outboxBounds{maxBytes: c.config.Limits.MaxOutboxBytes, maxTotalBytes: c.config.Limits.MaxOutboxBytesTotal,
		total: &c.outboxBytes}
}

// syncInterval is the background sync interval in force.
func (c *brokerCore) syncInterval() time.Duration { return time.Duration(c.syncIntervalNanos.Load()) }

// newID returns a fresh id, unique across this process's life and above
// every id of earlier processes.
func (c *brokerCore) newID() uint64 { return c.nextID.Add(1) }

// newIDBlock reserves n consecutive ids and returns the first.
func (c *brokerCore) newIDBlock(n uint64) uint64 { return c.nextID.Add(n) - n + 1 }

// sessionName formats a session id: the incarnation and a number.
func (c *brokerCore) sessionName(number uint64) string {
	return fmt.Sprintf("%016x-%d", c.incarnation, number)
}

// isEarlierIncarnation reports whether a session id names a process other
// than this one (a session from before a restart).
func (c *brokerCore) isEarlierIncarnation(sessionID string) bool {
	var incarnation, number uint64
	if _, err := fmt.Sscanf(sessionID, "%016x-%d", &incarnation, &number); err != nil {
		return false
	}
	return incarnation != c.incarnation
}

// now reads the broker's clock.
func (c *brokerCore) now() time.Time { return c.config.Clock() }

// directory maps queue names to their partition actors. The queues
// manager is its only writer; sessions read it on every publish, so a
// lookup takes a read lock and nothing else. A failed queue stays listed
// with the reason, so a client is told why instead of "not declared".
type directory struct {
	mu     sync.RWMutex
	queues map[string]queueRoute
}

// queueRoute is where a queue's requests go, or why they cannot.
type queueRoute struct {
	name    string
	pid     *actor.PID
	failure requestFailure // set when the queue failed
}

func newDirectory() *directory { return &directory{queues: make(map[string]queueRoute)} }

func (d *directory) lookup(name string) (queueRoute, bool) {
	d.mu.RLock()
	route, ok := d.queues[name]
	d.mu.RUnlock()
	return route, ok
}

func (d *directory) set(name string, pid *actor.PID) {
	d.mu.Lock()
	d.queues[name] = queueRoute{name: name, pid: pid}
	d.mu.Unlock()
}

func (d *directory) fail(name string, pid *actor.PID, failure requestFailure) {
	d.mu.Lock()
	d.queues[name] = queueRoute{name: name, pid: pid, failure: failure}
	d.mu.Unlock()
}

func (d *directory) remove(name string) {
	d.mu.Lock()
	delete(d.queues, name)
	d.mu.Unlock()
}

// failAll marks every route failed with the failure fn gives its name
// (the queues manager restarts: its partitions are stopping).
func (d *directory) failAll(fn func(name string) requestFailure) {
	d.mu.Lock()
	for name, route := range d.queues {
		route.failure = fn(name)
		d.queues[name] = route
	}
	d.mu.Unlock()
}

// keepOnly removes every route whose name keep rejects.
func (d *directory) keepOnly(keep func(name string) bool) {
	d.mu.Lock()
	for name := range d.queues {
		if !keep(name) {
			delete(d.queues, name)
		}
	}
	d.mu.Unlock()
}

// snapshot returns every route, sorted by name.
func (d *directory) snapshot() []queueRoute {
	d.mu.RLock()
	routes := make([]queueRoute, 0, len(d.queues))
	for _, route := range d.queues {
		routes = append(routes, route)
	}
	d.mu.RUnlock()
	sort.Slice(routes, func(i, j int) bool { return routes[i].name < routes[j].name })
	return routes
}

// closingDirs tracks the closes running on each queue directory. A
// partition registers its close from its own Receive (Restarting or
// Stopping), before any successor can start, and the successor's open
// waits for the closes registered before it began (only those: a close
// registered later may itself be waiting for that open to finish, when an
// instance fails while still opening).
type closingDirs struct {
	mu   sync.Mutex
	dirs map[string][]chan struct{}
}

// begin registers a close of dir; end must be called with the result.
func (c *closingDirs) begin(dir string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirs == nil {
		c.dirs = make(map[string][]chan struct{})
	}
	done := make(chan struct{})
	c.dirs[dir] = append(c.dirs[dir], done)
	return done
}

// end marks a close of dir finished.
func (c *closingDirs) end(dir string, done chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(done)
	running := c.dirs[dir]
	for i, ch := range running {
		if ch == done {
			running = append(running[:i:i], running[i+1:]...)
			break
		}
	}
	if len(running) == 0 {
		delete(c.dirs, dir)
		return
	}
	c.dirs[dir] = running
}

// pending returns the closes of dir running now; an open waits for each.
func (c *closingDirs) pending(dir string) []chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chan struct{}(nil), c.dirs[dir]...)
}

// all returns every close running now, on any directory.
func (c *closingDirs) all() []chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	var running []chan struct{}
	for _, dir := range c.dirs {
		running = append(running, dir...)
	}
	return running
}

// peerUnreachable reports whether this node's peer link to node is down.
func (c *brokerCore) peerUnreachable(node string) bool {
	_, down := c.peersDown.Load(node)
	return down
}
