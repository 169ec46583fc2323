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
//	        ├── log            log actor: watches the log's frontiers and latch (log_watcher.go)
//	        └── sync           background sync scheduler (sync_scheduler.go)
//
// The log and sync children use the partition's *log.Log, which
// storage/queue exposes (queue.Queue.Log): logs open with external ticks,
// the sync scheduler drives their background sync and carries a live
// interval change to every open log, and the log actor reports a latch
// (a failed background sync) to the partition at once. A queue over
// another log implementation (none in this build) would fall back to the
// log's own ticker and a once-a-second metrics refresh (logOf,
// syncControlOf).
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
// partition's Receive are the ones storage/queue documents as bounded:
// reading delivered payloads (tail cache or page cache) and compaction's
// segment removal.
//
// The hot path batches: one publish frame becomes one queue.Publish (one
// append) of all its messages; one Advance answers every batch the log
// completed; a lease claims up to a subscription's credit at once; settles
// arrive as tag lists; a connection's writer flushes everything queued in
// one write. Sessions run on a synchronized dispatcher (their Receive runs
// on the sender's goroutine), which saves a goroutine handoff each way;
// every other actor runs on its own keep-alive dispatcher (dispatcher.go),
// which keeps one goroutine, and its grown stack, from one wake-up to the
// next.
//
// Supervision is explicit (supervision.go): the root runs under a guardian
// that turns any failure reaching it into a fatal stop of the process;
// each level has its own decider and restart budget; panics are logged with
// their stack before the library recovers them. No actor stops without its
// supervisor recording why, and no client is left waiting: every publish
// batch is answered once, every subscription that ends says so.
//
// Broker (broker.go) is the entry point for cmd/fibril, the HTTP endpoint
// and the tests.
package actors
