// Package actors runs Fibril's broker: the supervised actors that own the
// storage and wire logic, the supervision tree that restarts or fences them,
// and the registry of live actors that the debug endpoint reads.
//
// The tree (see DESIGN.md, "Actors"), as registry paths:
//
//	node                       root; runs under the fatal guardian (node.go)
//	├── sessions               spawns one session per accepted connection (node.go)
//	│   └── <n>                session: one client connection (session*.go)
//	└── queues                 queues manager: declare, delete, list, dead-letter routing (queues*.go)
//	    └── <name>/0           queue partition: owns a storage/queue.Queue (partition*.go)
//	        ├── sync           sync scheduler: the log's one background-sync timer, explicit syncs (sync_scheduler.go)
//	        └── log            log actor: owns the queue log's appender, writes and syncs it (log_writer.go)
//
// Every queue log runs in direct mode (storage/log.OpenDirect): the
// queue's seam (log_handle.go) hands each append to the log actor in
// order; one wake-up of the log actor stages everything handed over and
// writes it as one group, its completions are its messages, and fsyncs
// run on the log's own sync goroutine. The sync
// scheduler arms a timer only while the log has written records that are
// not yet durable, so an idle queue costs no timer and no wake-up.
//
// Every actor is a thin shell: the logic it serializes lives in
// storage/log, storage/queue and wire, and each Receive only turns messages
// into calls on that logic and results into messages. Nothing in Receive
// waits on the network or on a lock held across I/O: sockets are read and
// written by one goroutine each per connection (connection.go, outbox.go),
// queues open and close on their own goroutines, log appends complete
// through callbacks that send messages, and timers are time.AfterFunc
// callbacks that send messages (never ReceiveTimeout, which races at the
// pinned library version). The storage calls that do touch files in a
// Receive are the ones storage documents as bounded: in a partition,
// reading delivered payloads (tail cache or page cache) and compaction's
// segment removal; in a log actor, the write(2) of each group (never an
// fsync, except for a suffix cut or a rebase; at a segment's rollover it
// waits for the sync goroutine to finish the outgoing segment).
//
// One order per connection (docs/protocol.md 4.2) costs the hot path one
// branch: see session_order.go.
//
// The hot path batches: one publish frame becomes one queue.Publish (one
// append) of all its messages; one Advance answers every batch the log
// completed; a lease claims up to a subscription's credit at once; settles
// arrive as tag lists; a connection's writer flushes everything queued in
// one write. Sessions run on a synchronized dispatcher (their Receive runs
// on the sender's goroutine), which saves a goroutine handoff each way;
// every other actor runs on its own keep-alive dispatcher (runtime/dispatcher.go),
// which keeps one goroutine, and its grown stack, from one wake-up to the
// next.
//
// Supervision is explicit (runtime/supervision.go): the root runs under a guardian
// that turns any failure reaching it into a fatal stop of the process;
// each level has its own decider and restart budget; panics are logged with
// their stack before the library recovers them. No actor stops without its
// supervisor recording why, and no client is left waiting: every publish
// batch is answered once, every subscription that ends says so.
//
// # Lifecycle
//
// These rules hold for every actor of the tree, today's (node, sessions,
// session, queues manager, partition, log, sync) and the ones to come
// (log writers, follower links, replicas, failover drivers). The mechanism
// that enforces them is in runtime/lifecycle.go; an actor gets it by being spawned
// through runtime.Registry.Props, which every spawn in this package is.
//
//  1. Every actor has explicit states. The lifecycle phases are common to
//     all (starting, running, restarting, stopping, stopped, kept on the
//     actor's registry Entry); each actor's file header lists its own
//     states within running (a partition: opening, open, fenced, stopping)
//     and the messages it takes and sends.
//  2. Once stopping, an actor never touches what it closed. After its
//     Stopping handler ran, its Receive sees only Stopped; every other
//     message goes to its ReceiveStopping, which answers requests (with
//     the reason: deleted, shutting down, restarting) or drops the
//     message, and is dropped when the actor has none. Stopping hands
//     every blocking close to a goroutine the broker counts
//     (core.storageClosers) and answers everything the actor owed.
//  3. A supervisor never restarts a child that is stopping, was asked to
//     stop, or sits under an ancestor that is stopping or restarting: such
//     a failure is answered with Stop (a fatal reason still escalates).
//     Stops are asked for with Registry.StopActor, never the library's
//     Stop directly, so the reason is recorded (Entry.StopCause) and no
//     restart decided later can overtake the stop.
//  4. A stop always completes. Stopping, Stopped and Restarting handlers
//     must not block and must not fail; a panic in one is logged and the
//     stop goes on. A stopping actor spawns nothing (its Receive no longer
//     runs). Broker.Close stops the whole tree against one deadline
//     (Config.ShutdownTimeout), storage closes included, and names what is
//     still running if it passes.
//  5. Readiness signals fire once (runtime.Signal): a restarted actor that fires
//     again does nothing, so nothing is closed twice.
//  6. An actor that owns durable state rebuilds it from disk when it
//     restarts (the manager rescans the data directory after the old
//     partitions closed; a partition reopens its log, which recovers); a
//     restart never serves from what the failed instance held in memory.
//  7. Effects that must follow a client's requests in order are sent as
//     user messages, never as the library's stop: system messages overtake
//     user messages, so a stop would take effect before requests sent
//     earlier (the delete of a queue is a deleteQueue message; the
//     partition stops itself once it has finished what it took before).
//  8. Only a failure the node cannot contain (wrapping runtime.ErrFatal, or a spent
//     restart budget at the top) stops the process: the guardian calls
//     Config.Fatal, the broker logs it in one line, and cmd/fibril exits
//     non-zero.
//
// # Security and bounds
//
// The client listener (accept.go) applies the connection limits and,
// with Config.TLS, the TLS handshake within the hello deadline; the
// connection's reader authenticates the hello (Config.Users or
// Config.AuthToken) before it reads past it under more than a hello's
// size; the session checks every request against the user's permissions
// (access.go). Every buffer a client can fill is bounded, in bytes where
// bytes run out (limits.go lists them, their settings and what a client
// sees at each; docs/security.md says it for operators). Broker.DialInternal
// gives the HTTP endpoint a session of the node's own.
//
// Broker (broker.go) is the entry point for cmd/fibril, the HTTP endpoint
// and the tests.
package actors
