// Package queue is a queue partition's state over its log (storage/log).
//
// The log holds one record per event: publish (message id, headers,
// payload, publish time; the payload is stored there once), lease (a
// delivery), ack, nack, release, discard, dead-letter marker, lease expiry,
// purge, checkpoint marker and reject (a nack without requeue); record.go
// states the format. State is a pure function of the log prefix it has
// applied: ready messages in offset order (plus delayed ones with their
// due time), leased messages with attempt counts, messages waiting for a
// dead-letter handoff, and counters of settled and dead-lettered ones.
// Only per-message metadata is kept in memory; payloads are read back from
// the log when a message is delivered.
//
// The package has a pure core and a thin shell:
//
//   - State (state.go, claims.go) applies records and admits operations;
//     snapshot.go encodes it; rebuild.go decides which snapshot to trust and
//     replays the suffix. All of it is driven by tests with an injected
//     clock and no I/O.
//   - machine (machine.go, progress.go) turns operations into log entries,
//     predicts their offsets and applies them once the mode's frontier
//     passes them.
//   - Queue (queue.go) owns the *log.Log and the queue directory's files
//     (through vfs), appends asynchronously and reports progress.
//
// Using a Queue from its owner (one goroutine, typically the partition
// actor):
//
//	q, err := queue.Open(dir, opts, logOptions, clock)
//	q.SetNotify(func() { self.Send(appendsCompleted{}) }) // from log goroutines
//	ticket, err := q.Publish(batch)                        // appends, returns at once
//	ticket, n, err := q.Lease(q.Ceiling(), 64, holder)     // claims ready messages
//	// on appendsCompleted (or a timer):
//	progress, err := q.Advance()
//	//   progress.Confirmed:   publish tickets now applied, with their boundary
//	//   progress.Deliveries:  leased messages to send, payloads read from the log
//	//   progress.DeadLetters: messages to publish to their dead-letter queue,
//	//                         then confirm with q.DeadLettered(offsets)
//	//   progress.Checkpoint:  a snapshot to publish: go task.Run(ctx), then
//	//                         q.CheckpointDone(task, err) on the owner
//	q.Ack(holder, offsets); q.Nack(holder, offsets, delay); q.Release(...); q.Discard(...); q.Reject(...)
//	q.ExpireLeases(now); q.ExpireMessages(now)             // when NextDeadline passes
//	q.Checkpoint(); q.Compact(); q.Info(); q.Close()
//
// Apply follows the append's boundary: a durable queue appends with
// AfterFsync and applies a record once the durable frontier passes it; a
// buffered queue appends with AfterFlush and applies at the written
// frontier. A confirm, a delivery and a settle therefore each stand on the
// queue's boundary. Deliveries are logged (lease records) and released only
// once applied, so after a restart every message that may have been
// delivered comes back with its redelivered flag set and, if it was leased,
// an attempt counted.
//
// Message identity: docs/durability.md says what consumers deduplicate on;
// incarnation.go says how (incarnation, offset) stays unique when a power
// loss lets new publishes reuse offsets. docs/queue.md describes the design
// and the measured figures.
package queue
