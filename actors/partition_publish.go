package actors

// The partition's publish path and the Advance that answers it. A batch
// from a session becomes one queue.Publish (one append); when the log
// reports the append done, Advance applies everything the queue's boundary
// has passed and the partition answers each batch with one publishResult.
// A batch refused with ErrBusy (too many appends in flight) waits in a
// bounded list and is retried after the next Advance. Every refusal of a
// batch goes through refuseBatch, which keeps the session's publish fence
// (publish_fence.go): once a batch of a session is refused so, its later
// batches sent before the session heard of it are refused too.

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// busyBatchesMax bounds the batches waiting for room in the append
// pipeline. Session credit already bounds each session's; this is the
// backstop against many sessions at once. It is at least one session's
// credit, so one connection alone never meets it (docs/protocol.md, "Flow
// control and overload").
const busyBatchesMax = publishCreditMessages

// checkpointEveryRecords is how many applied records trigger a checkpoint
// (and a compaction after it), so recovery replays a bounded tail, unless
// Config.CheckpointEveryRecords says otherwise.
const checkpointEveryRecords = DefaultCheckpointEveryRecords

// checkpointEvery is the checkpoint threshold in force.
func (p *partition) checkpointEvery() int {
	if every := p.core.config.CheckpointEveryRecords; every > 0 {
		return every
	}
	return checkpointEveryRecords
}

func (p *partition) publish(ctx actor.Context, batch publishBatch) {
	if failure, fenced := p.home.publishFences.refusing(batch.replyTo.Id, batch.generation); fenced {
		p.refuseBatch(ctx, batch, failure) // sent before its session heard of a refusal (publish_fence.go)
		p.metrics.rejects.Add(len(batch.messages))
		return
	}
	if p.state == partitionFenced {
		p.refuseBatch(ctx, batch, p.fencedFailure())
		p.metrics.rejects.Add(len(batch.messages))
		return
	}
	if p.core.draining.Load() {
		p.refuseDraining(ctx, batch)
		return
	}
	if admitted, failure := p.admitsPublishes(); !admitted {
		p.refuseBatch(ctx, batch, failure)
		p.metrics.rejects.Add(len(batch.messages))
		return
	}
	if len(p.busy) > 0 {
		p.queueBusy(ctx, batch) // keep the order of batches
		return
	}
	p.tryPublish(ctx, batch)
}

// tryPublish appends a batch; it reports false when the pipeline is full.
// Every subscription with credit is offered the batch in the same append
// (queue.PublishLeasing), so one write, and on a durable queue one fsync,
// covers the messages and the leases that deliver them, and the Advance
// that confirms the batch releases its deliveries too.
func (p *partition) tryPublish(ctx actor.Context, batch publishBatch) bool {
	ticket, claims, err := p.q.PublishLeasing(batch.messages, p.publishOffers())
	switch {
	case err == nil:
		p.tickets[ticket] = pendingPublish{replyTo: batch.replyTo, batchID: batch.batchID,
			count: len(batch.messages), bytes: batch.bytes, start: p.core.now()}
		p.metrics.publishes.Add(len(batch.messages))
		p.metrics.publishBytes.Add(batch.bytes)
		p.leased(claims)
		return true
	case errors.Is(err, queue.ErrBusy):
		p.queueBusy(ctx, batch)
		return false
	}
	p.metrics.rejects.Add(len(batch.messages))
	p.refuseBatch(ctx, batch, p.failureOf(err))
	p.maybeFence(ctx, err)
	return true
}

// publishOffers lists every subscription with credit, in round-robin order
// (subscriptionSet), for a publish to lease in its own append.
func (p *partition) publishOffers() []queue.Offer {
	p.offers = p.offers[:0]
	for _, sub := range p.home.subscribers.rotation {
		if credit := sub.credit(); credit > 0 {
			p.offers = append(p.offers, queue.Offer{Holder: sub.id, Max: min(credit, leaseBatchMax)})
		}
	}
	return p.offers
}

// leased counts the leases a publish made against their subscriptions'
// credit; the last one to claim moves the round-robin on.
func (p *partition) leased(claims []queue.Claim) {
	set := p.home.subscribers
	for _, claim := range claims {
		for index, sub := range set.order {
			if sub.id == claim.Holder {
				sub.leasing += claim.Count
				set.claimed(index)
				break
			}
		}
	}
}

func (p *partition) queueBusy(ctx actor.Context, batch publishBatch) {
	if len(p.busy) >= busyBatchesMax {
		p.metrics.rejects.Add(len(batch.messages))
		p.refuseBatch(ctx, batch, requestFailure{
			code: wire.CodeOverloaded, message: fmt.Sprintf("queue %q has %d publish batches waiting for its log; "+
				"retry once earlier publishes are answered", p.home.name, len(p.busy))})
		return
	}
	p.busy = append(p.busy, batch)
}

// retryBusy appends waiting batches until the pipeline is full again (or
// refuses them all when the node shuts down).
func (p *partition) retryBusy(ctx actor.Context) {
	if len(p.busy) > 0 && p.core.draining.Load() {
		for _, batch := range p.busy {
			p.refuseDraining(ctx, batch)
		}
		p.busy = nil
		return
	}
	for len(p.busy) > 0 && p.state == partitionOpen {
		batch := p.busy[0]
		p.busy = p.busy[1:]
		if !p.tryPublish(ctx, batch) {
			// tryPublish put it back at the end; move it to the front.
			last := len(p.busy) - 1
			p.busy = append([]publishBatch{p.busy[last]}, p.busy[:last]...)
			return
		}
	}
	if len(p.busy) == 0 {
		p.busy = nil
	}
}

// advance applies what the log completed and hands out the results.
func (p *partition) advance(ctx actor.Context) {
	if p.state != partitionOpen {
		return
	}
	p.maybeReplicationAdvance(ctx)
	progress, err := p.q.Advance()
	if err != nil {
		if !p.maybeFence(ctx, err) {
			panic(fmt.Errorf("actors: advance of queue %s: %w", p.home.name, err))
		}
		return
	}
	p.answerConfirms(ctx, progress.Confirmed)
	p.handOutDeliveries(ctx, progress.Deliveries)
	p.takeBackLapsed(progress.Lapsed)
	p.handOffDeadLetters(ctx, progress.DeadLetters)
	p.answerApplied(ctx, progress.Applied)
	p.modeAdvanced(ctx)
	if progress.Checkpoint != nil {
		p.checkpointRunning = runCheckpoint(ctx.ActorSystem(), ctx.Self(), p.q, progress.Checkpoint, &p.core.storageClosers)
	}
	p.retryBusy(ctx)
	p.dispatch(ctx)
	p.maybeCheckpoint(ctx)
	p.armDeadline(ctx)
	p.publishSummary()
	p.maybeStopDeleted(ctx)
}

func (p *partition) answerConfirms(ctx actor.Context, confirms []queue.Confirm) {
	if len(confirms) == 0 {
		return
	}
	now := p.core.now()
	for _, confirm := range confirms {
		pending, ok := p.tickets[confirm.Ticket]
		if !ok {
			continue // a dead-letter batch; see deadletter.go
		}
		delete(p.tickets, confirm.Ticket)
		boundary := wire.BoundaryWritten
		if confirm.Boundary == queue.BoundaryDurable {
			boundary = wire.BoundaryDurable
		}
		// Count first: a client that saw its confirm sees it counted.
		if boundary == wire.BoundaryDurable {
			p.metrics.confirmsDurable.Add(confirm.Count)
		} else {
			p.metrics.confirmsWritten.Add(confirm.Count)
		}
		p.metrics.duplicates.Add(len(confirm.Duplicates))
		p.metrics.confirmSeconds.observeSince(now, pending.start)
		p.appliedSinceSnapshot += uint64(confirm.Count)
		if pending.replyTo != nil {
			// Duplicates were stored before: the batch is confirmed whole.
			ctx.Send(pending.replyTo, publishResult{batchID: pending.batchID, confirmed: confirm.Count + len(confirm.Duplicates),
				duplicates: confirm.Duplicates, boundary: boundary})
		} else {
			p.deadLetterConfirmed(ctx, pending.batchID)
		}
	}
}

// answerApplied answers purges and ack-syncs whose record applied.
func (p *partition) answerApplied(ctx actor.Context, applied []queue.Ticket) {
	p.answerAckSyncs(ctx, applied)
	for _, ticket := range applied {
		if purge, ok := p.purges[ticket]; ok {
			delete(p.purges, ticket)
			ctx.Send(purge.replyTo, purgeResult{requestID: purge.requestID, removed: purge.removed})
		}
	}
}

func (p *partition) purge(ctx actor.Context, msg purgeRequest) {
	if p.state == partitionFenced {
		ctx.Send(msg.replyTo, purgeResult{requestID: msg.requestID, failure: p.fencedFailure()})
		return
	}
	counts := p.q.Info().Counts
	ticket, err := p.q.Purge()
	if err != nil {
		ctx.Send(msg.replyTo, purgeResult{requestID: msg.requestID, failure: p.failureOf(err)})
		p.maybeFence(ctx, err)
		return
	}
	p.purges[ticket] = pendingPurge{replyTo: msg.replyTo, requestID: msg.requestID, removed: counts.Ready + counts.Delayed}
}

// maybeCheckpoint starts a checkpoint after enough applied records.
func (p *partition) maybeCheckpoint(ctx actor.Context) {
	if p.checkpointing || p.appliedSinceSnapshot < uint64(p.checkpointEvery()) || p.q.IsReplica() {
		return // a replica checkpoints at the owner's markers (Advance)
	}
	if _, err := p.q.Checkpoint(); err != nil {
		p.maybeFence(ctx, err)
		return
	}
	p.checkpointing = true
	p.appliedSinceSnapshot = 0
}

func (p *partition) checkpointRan(ctx actor.Context, msg checkpointRan) {
	if msg.q != p.q {
		return // a task of a queue an earlier instance (or a reopen) closed
	}
	p.checkpointing = false
	p.checkpointRunning = nil
	if err := p.q.CheckpointDone(msg.task, msg.err); err != nil {
		p.core.logger.Warn("checkpoint failed", "queue", p.home.name, "err", err)
		return
	}
	if _, err := p.q.Compact(); err != nil {
		p.core.logger.Warn("compaction failed", "queue", p.home.name, "err", err)
		p.maybeFence(ctx, err)
	}
}

// info answers with the queue's state; every progress field names its
// boundary.
func (p *partition) info(ctx actor.Context, msg infoRequest) {
	if p.state == partitionOpen {
		// The queue fences itself when it finds its log latched (a failed
		// background sync) before the log actor's report arrives: follow
		// it now, so the answer and the partition agree.
		if fenced := p.q.Info().Fenced; fenced != nil {
			p.becomeFenced(ctx, fenced)
		}
	}
	p.answerInfo(ctx, msg, infoResult{requestID: msg.requestID, info: p.queueInfo()})
}

// answerInfo sends an info answer to the session or the future that asked.
func (p *partition) answerInfo(ctx actor.Context, msg infoRequest, result infoResult) {
	if msg.replyTo == nil {
		ctx.Respond(result)
		return
	}
	ctx.Send(msg.replyTo, result)
}

func (p *partition) queueInfo() wire.QueueInfo {
	info := wire.QueueInfo{
		Name: p.home.name, Mode: wireMode(p.home.options.Mode), Options: p.home.declared,
		Consumers:      uint32(p.home.subscribers.len()),
		SyncIntervalMs: uint32(p.syncInterval / time.Millisecond),
		Fenced:         p.state == partitionFenced,
	}
	if p.fenceErr != nil {
		info.FenceError = p.fenceErr.Error()
	}
	if p.q == nil {
		return info
	}
	state := p.q.Info()
	info.Ready, info.Leased, info.Delayed = state.Counts.Ready, state.Counts.Leased, state.Counts.Delayed
	info.DeadLettered = state.Counts.DeadLettered
	info.WrittenNext, info.DurableNext = state.Written, state.Durable
	info.UnsyncedRecords, info.UnsyncedBytes = state.UnsyncedRecords, state.UnsyncedBytes
	info.SyncPending = state.SyncPending
	// The log's own report: the interval it runs with, and its last error.
	info.SyncIntervalMs = uint32(state.SyncInterval / time.Millisecond)
	if state.LastError != nil {
		info.LastSyncError = state.LastError.Error()
	}
	if !state.LastSync.IsZero() {
		info.LastSyncUnixMs = state.LastSync.UnixMilli()
	}
	if state.Fenced != nil && info.FenceError == "" {
		info.Fenced, info.FenceError = true, state.Fenced.Error()
	}
	if d := state.Dedup; d.Window > 0 {
		info.Dedup = &wire.DedupStats{Entries: uint64(d.Entries), EvictedEarly: d.EvictedEarly, Refused: d.DuplicatesRefused}
		if !d.Oldest.IsZero() {
			info.Dedup.OldestUnixMs = d.Oldest.UnixMilli()
		}
	}
	p.addClusterInfo(&info)
	p.addModeInfo(&info)
	return info
}

func wireMode(mode queue.Mode) wire.Mode {
	if mode == queue.Buffered {
		return wire.ModeBuffered
	}
	return wire.ModeDurable
}

// drainingFailure answers a publish a draining node has not appended.
var drainingFailure = requestFailure{code: wire.CodeUnavailable,
	message: "the node is shutting down; the message was not stored"}

// refuseDraining refuses a publish the node has not appended while it
// shuts down (core.draining): the sessions' drain then waits only for the
// appends already in flight, which are confirmed as usual, instead of for
// every batch still queued in the partitions' mailboxes.
func (p *partition) refuseDraining(ctx actor.Context, batch publishBatch) {
	p.metrics.rejects.Add(len(batch.messages))
	p.refuseBatch(ctx, batch, drainingFailure)
}

// refuseBatch answers a batch the partition did not append with failure;
// a fencing refusal fences the batch's session here until its next
// generation (publish_fence.go). Every refusal of a session's batch goes
// through it.
func (p *partition) refuseBatch(ctx actor.Context, batch publishBatch, failure requestFailure) {
	if p.home.publishFences.refused(batch.replyTo.Id, batch.generation, failure) {
		ctx.Watch(batch.replyTo) // its end drops the fence (sessionGone)
	}
	ctx.Send(batch.replyTo, publishResult{batchID: batch.batchID, failure: failure})
}
