// Package queue is a queue partition's state over its log (storage/log).
//
// The log holds one record per event: publish (message id, headers,
// payload, publish time; the payload is stored there once), lease (a
// delivery), ack, nack, release, discard, dead-letter marker, lease expiry,
// purge, checkpoint marker, reject (a nack without requeue), mode
// revision (mode.go) and sent mark (a replicated owner's deliveries left
// it); record.go states the format. State is a pure function of the log prefix it has
// applied: ready messages in offset order (plus delayed ones with their
// due time), leased messages with attempt counts, messages waiting for a
// dead-letter handoff, and counters of settled and dead-lettered ones.
// Only per-message metadata is kept in memory; payloads are read back from
// the log when a message is delivered.
//
// The package has a pure core and a thin shell:
//
//   - State (state.go, claims.go, dedup.go) applies records and admits
//     operations; on a queue with a dedup window it keeps the table of
//     recently stored producer pairs and message ids (dedup.go), and the
//     machine leaves duplicates out of a publish's append (machine_dedup.go);
//     snapshot.go encodes it; rebuild.go decides which snapshot to trust and
//     replays the suffix. All of it is driven by tests with an injected
//     clock and no I/O.
//   - machine (machine.go, progress.go) turns operations into log entries,
//     predicts their offsets and applies them once the mode's frontier
//     passes them.
//   - Queue (queue.go) owns the *log.Log and the queue directory's files
//     (through vfs), appends asynchronously and reports progress; epoch.go
//     chooses the epoch its records carry; replica.go is the replica mode.
//
// Using a Queue from its owner (one goroutine, typically the partition
// actor):
//
//	q, err := queue.Open(dir, opts, logOptions, clock) // or with queue.WithLogOpener(open)
//	q.SetNotify(func() { self.Send(appendsCompleted{}) }) // from log goroutines
//	ticket, claims, err := q.PublishLeasing(batch, offers) // appends publish + pipelined leases
//	ticket, n, err := q.Lease(64, holder)                  // claims ready (or pending) messages
//	// on appendsCompleted (or a timer):
//	progress, err := q.Advance()
//	//   progress.Confirmed:   publish tickets now applied, with their boundary
//	//   progress.Deliveries:  leased messages to send, payloads read from the log;
//	//                         q.Sent(offsets) of those sent, before sending them
//	//   progress.Lapsed:      leased messages not sent (the lease applied too late):
//	//                         the queue releases them; give their holder its credit back
//	//   progress.DeadLetters: messages to publish to their dead-letter queue,
//	//                         then confirm with q.DeadLettered(offsets)
//	//   progress.Checkpoint:  a snapshot to publish: go task.Run(ctx), then
//	//                         q.CheckpointDone(task, err) on the owner
//	q.Ack(holder, offsets); q.Nack(holder, offsets, delay); q.Release(...); q.Discard(...); q.Reject(...)
//	q.ExpireLeases(now); q.ExpireMessages(now)             // when NextDeadline passes
//	q.Checkpoint(); q.Compact(); q.Info(); q.Close()
//
// The queue reaches its log through a small seam (Log, shell.go): by
// default a standalone *log.Log; WithLogOpener lets the caller supply its
// own, such as the broker's log actor driving a direct-mode log, for every
// start mode.
//
// A replicated queue: the owner opens with OpenOwner(…, epoch) and calls
// SetApplyLimit(quorum frontier) and SetRetentionFloor(lowest durable
// progress) as followers report; a follower opens with OpenReplica, feeds
// AppendReplicated and calls Advance, TruncateAfter, Rebase,
// InstallSnapshot and Promote (replica.go).
//
// When records apply: Advance applies a record once the apply frontier
// passes it: the boundary frontier of the mode in force (durable for a
// durable queue, written for a buffered one), capped by the apply limit on
// a replicated queue. The mode in force is the declared one until a mode
// revision (ChangeMode) applies; a revision itself applies only at the
// durable frontier (SetApplyLimits names the quorum's written and durable
// frontiers), so every copy and every recovery rebuilds the same applied
// mode from its log, and a restart never runs weaker than the last
// revision applied (mode.go). Confirms, deliveries and settles are released against that one
// frontier. On a durable queue the appends whose application something
// waits for (publishes, leases, nacks, releases, expiries, markers, purges)
// ask the log for a sync; acks, discards and rejects without a dead-letter
// queue only for a write, and are applied by the next sync that covers
// them. A lease appended with its publish (PublishLeasing) or after it
// shares the publish's sync; deliveries are released only once their lease
// record is applied, so after any restart every message that may have been
// delivered comes back with its redelivered flag set and an attempt
// counted. On a replicated queue whose log holds sent marks, a promotion
// counts that attempt only for a lease a mark shows was sent, and releases
// the others flagged redelivered with none counted (record.go,
// machine.go). A lease that applies with a quarter of the lease timeout or less
// left is not delivered: the queue releases its messages with a record
// (no attempt counted) and leases them again later (machine.go).
//
// Message identity: (epoch of the publish record, offset), the same on
// every copy; epoch.go says why it never names two messages, and
// docs/durability.md what consumers deduplicate on. docs/queue.md
// describes the design and the measured figures.
package queue
