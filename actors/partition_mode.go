package actors

// Mode changes of an existing queue (docs/durability.md, "Changing the
// mode of an existing queue"): the partition's part. The storage rule is
// storage/queue/mode.go: a revision record in the log names the mode of
// every record after it and applies only once the durable frontier (on a
// cluster: W durable copies) passes it; every other record applies at the
// frontier of its own mode. The partition:
//
//   - owner: takes modeChangeRequest, records the revision
//     (queue.ChangeMode) and answers once the revision applied, or when
//     the request's wait ends with outcome pending and what it waits for;
//     feeds the queue both quorum frontiers (written and durable) so each
//     record applies at its own boundary (applyQuorumLimits).
//   - replica: when its log holds a revision not yet durable, asks its
//     sync scheduler for one sync so the owner's durable quorum reaches
//     the revision without waiting for the background interval, and
//     appends later pushes at the mode the revision names.
//   - every role: reports the applied mode, the desired one and the
//     pending change (addModeInfo); the owner derives each copy's applied
//     revision from that copy's durable position.
//
// Admission never pauses in the partition: a publish appended after the
// revision is admitted under the new mode and confirmed only after the
// revision applied (so buffered→durable is "close admission at the
// revision's offset, make W copies durable up to it, resume under the
// stronger rule"). A revision that cannot apply (too few copies) stays
// pending and is reported with the reason; it is never applied on fewer
// copies. A failover answers the waiters outcome-unknown style: the new
// owner's log either holds the revision (applied when it promotes, since
// promotion makes its whole history durable) or does not (abandoned: the
// queue keeps the applied mode), and asking again is idempotent.
//
// Messages taken: modeChangeRequest (Broker, sessions), modeWaitExpired,
// modeSynced (itself). Sent: modeChangeResult (the requester), syncNow
// (the sync scheduler, on a replica).
//
// Invariant: every waiter's revision is the pending revision or lower; a
// waiter is answered exactly once.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// modeChangeRequest asks the queue's owner to switch the queue to mode.
// replyTo nil answers the sender (a request future).
type modeChangeRequest struct {
	replyTo   *actor.PID
	requestID uint64
	mode      queue.Mode
	wait      time.Duration // 0: answer at once
}

// modeChangeResult answers a modeChangeRequest.
type modeChangeResult struct {
	requestID uint64
	outcome   wire.ModeOutcome
	mode      queue.Mode // asked for
	applied   queue.Mode // in force when answering
	revision  uint64
	message   string
	failure   requestFailure
}

type (
	modeWaitExpired struct{ id uint64 }
	modeSynced      struct{ revision uint64 }
)

// maxModeWait bounds how long a request may hold its answer.
const maxModeWait = 5 * time.Minute

// maxModeWaiters bounds the requests waiting for one queue's revision.
const maxModeWaiters = 1024

// modeState is the partition's mode-change bookkeeping.
type modeState struct {
	waiters    []modeWaiter
	nextWaiter uint64
	// seenRevision is the pending revision last reported, since when.
	seenRevision uint64
	seenAt       time.Time
	// appliedRevision is the applied revision last logged.
	appliedRevision uint64
	// syncing: a replica asked for a sync for this revision.
	syncingRevision uint64
	// failed is the last change that could not be recorded, with why.
	failed *wire.ModeChangeInfo
	// recordedRevision is the applied revision the catalog holds as far
	// as this owner knows; recordingRevision the one being proposed
	// (partition_mode_catalog.go).
	recordedRevision, recordingRevision uint64
}

type modeWaiter struct {
	id        uint64
	replyTo   *actor.PID
	requestID uint64
	mode      queue.Mode
	revision  uint64
	timer     *time.Timer
}

// receiveMode handles the mode-change messages; false for others.
func (p *partition) receiveMode(ctx actor.Context, message any) bool {
	switch msg := message.(type) {
	case modeChangeRequest:
		p.changeMode(ctx, msg)
	case modeWaitExpired:
		p.modeWaitExpired(ctx, msg)
	case modeSynced:
		if p.modes.syncingRevision == msg.revision {
			p.modes.syncingRevision = 0
		}
		p.advance(ctx)
	case modeRecorded:
		p.modeRecorded(ctx, msg)
	case modeRecordRetry:
		p.maybeRecordModeNow(ctx)
	default:
		return false
	}
	return true
}

func (p *partition) answerMode(ctx actor.Context, replyTo *actor.PID, result modeChangeResult) {
	if replyTo == nil {
		ctx.Respond(result)
		return
	}
	ctx.Send(replyTo, result)
}

// changeMode records a revision for the mode asked for.
func (p *partition) changeMode(ctx actor.Context, msg modeChangeRequest) {
	if msg.replyTo == nil {
		msg.replyTo = ctx.Sender()
	}
	fail := func(failure requestFailure) {
		p.answerMode(ctx, msg.replyTo, modeChangeResult{requestID: msg.requestID, mode: msg.mode, failure: failure})
	}
	switch {
	case p.state == partitionFenced:
		fail(p.fencedFailure())
		return
	case p.q == nil || p.state != partitionOpen:
		fail(requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf("queue %q is not open; retry shortly", p.home.name)})
		return
	case p.isReplicated() && (p.repl == nil || p.repl.role != roleOwner):
		fail(requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
			"queue %q is not served by this node; change its mode through its owner", p.home.name)})
		return
	case p.deleting:
		fail(requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf("queue %q is being deleted", p.home.name)})
		return
	}
	change, err := p.q.ChangeMode(msg.mode)
	if err != nil {
		if errors.Is(err, queue.ErrModeChangePending) {
			fail(requestFailure{code: wire.CodeModeChangePending, message: fmt.Sprintf(
				"queue %q: a change to %s (revision %d) is still pending: %s; ask again once it applied",
				p.home.name, p.q.Mode().Pending, change.Revision, p.modePendingReason())})
			return
		}
		p.modes.failed = &wire.ModeChangeInfo{Mode: wireMode(msg.mode), State: "failed", Reason: err.Error(),
			SinceUnixMs: p.core.now().UnixMilli()}
		if p.maybeFence(ctx, err) {
			fail(p.fencedFailure())
			return
		}
		fail(p.failureOf(err))
		return
	}
	p.modes.failed = nil
	if change.Unchanged {
		p.answerMode(ctx, msg.replyTo, modeChangeResult{requestID: msg.requestID, outcome: wire.ModeUnchanged,
			mode: msg.mode, applied: p.q.Mode().Applied, revision: change.Revision})
		return
	}
	if change.Ticket != 0 {
		p.core.logger.Info("mode change recorded", "queue", p.home.name, "to", msg.mode.String(),
			"revision", change.Revision, "offset", change.Offset)
	}
	wait := min(msg.wait, maxModeWait)
	if wait <= 0 || len(p.modes.waiters) >= maxModeWaiters {
		p.advance(ctx)
		p.answerModePending(ctx, msg.replyTo, msg.requestID, msg.mode, change.Revision)
		return
	}
	p.modes.nextWaiter++
	waiter := modeWaiter{id: p.modes.nextWaiter, replyTo: msg.replyTo, requestID: msg.requestID, mode: msg.mode,
		revision: change.Revision}
	self, system, id := ctx.Self(), ctx.ActorSystem(), waiter.id
	waiter.timer = time.AfterFunc(wait, func() { system.Root.Send(self, modeWaitExpired{id: id}) })
	p.modes.waiters = append(p.modes.waiters, waiter)
	p.advance(ctx) // the quorum may already cover it (a revision to buffered on a quiet queue)
}

// answerModePending answers a request whose revision has not applied,
// unless it has by now.
func (p *partition) answerModePending(ctx actor.Context, replyTo *actor.PID, requestID uint64, mode queue.Mode, revision uint64) {
	info := p.q.Mode()
	if info.Revision >= revision {
		p.answerMode(ctx, replyTo, modeChangeResult{requestID: requestID, outcome: wire.ModeApplied, mode: mode,
			applied: info.Applied, revision: revision})
		return
	}
	p.answerMode(ctx, replyTo, modeChangeResult{requestID: requestID, outcome: wire.ModePending, mode: mode,
		applied: info.Applied, revision: revision, message: p.modePendingReason()})
}

func (p *partition) modeWaitExpired(ctx actor.Context, msg modeWaitExpired) {
	i := slices.IndexFunc(p.modes.waiters, func(w modeWaiter) bool { return w.id == msg.id })
	if i < 0 {
		return
	}
	waiter := p.modes.waiters[i]
	p.modes.waiters = slices.Delete(p.modes.waiters, i, i+1)
	if p.q == nil {
		return
	}
	p.answerModePending(ctx, waiter.replyTo, waiter.requestID, waiter.mode, waiter.revision)
}

// modeAdvanced runs after every Advance: it answers the waiters whose
// revision applied, notes revisions seen and applied, and on a replica
// asks for the sync a pending revision needs.
func (p *partition) modeAdvanced(ctx actor.Context) {
	if p.q == nil {
		return
	}
	info := p.q.Mode()
	if info.Revision != p.modes.appliedRevision {
		if info.Revision > p.modes.appliedRevision && p.modes.seenRevision == info.Revision { // seen pending here, now applied
			p.core.logger.Info("mode revision applied", "queue", p.home.name, "mode", info.Applied.String(),
				"revision", info.Revision, "offset", info.RevisionOffset)
		}
		p.modes.appliedRevision = info.Revision
	}
	if info.Revision != 0 {
		p.home.appliedMode.Store(uint32(info.Applied))
	}
	if info.Pending != 0 && p.modes.seenRevision != info.PendingRevision {
		p.modes.seenRevision, p.modes.seenAt = info.PendingRevision, p.core.now()
	}
	kept := p.modes.waiters[:0]
	for _, waiter := range p.modes.waiters {
		if waiter.revision <= info.Revision {
			waiter.timer.Stop()
			p.answerMode(ctx, waiter.replyTo, modeChangeResult{requestID: waiter.requestID, outcome: wire.ModeApplied,
				mode: waiter.mode, applied: info.Applied, revision: waiter.revision})
			continue
		}
		kept = append(kept, waiter)
	}
	clear(p.modes.waiters[len(kept):])
	p.modes.waiters = kept
	p.maybeSyncForRevision(ctx, info)
	p.maybeRecordMode(ctx, info)
}

// maybeSyncForRevision asks a replica's log for one sync when it holds a
// revision that is not durable yet.
func (p *partition) maybeSyncForRevision(ctx actor.Context, info queue.ModeInfo) {
	if !p.q.IsReplica() || info.Pending == 0 || p.syncPID == nil || p.modes.syncingRevision == info.PendingRevision {
		return
	}
	revision := info.PendingRevision
	p.modes.syncingRevision = revision
	future := actor.NewFuture(ctx.ActorSystem(), explicitSyncTimeout)
	ctx.Send(p.syncPID, syncNow{replyTo: future.PID()})
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		_, _ = future.Result()
		system.Root.Send(self, modeSynced{revision: revision})
	}()
}

// refuseModeWaiters answers every waiting request with failure (the
// partition stops, restarts or steps down). The revision may or may not
// apply: the message says so, and asking again is idempotent.
func (p *partition) refuseModeWaiters(ctx actor.Context, failure requestFailure) {
	for _, waiter := range p.modes.waiters {
		waiter.timer.Stop()
		p.answerMode(ctx, waiter.replyTo, modeChangeResult{requestID: waiter.requestID, mode: waiter.mode,
			revision: waiter.revision, failure: requestFailure{code: failure.code, message: fmt.Sprintf(
				"%s; the mode change (revision %d) was recorded and may or may not apply: ask again (the same "+
					"request is answered with the same revision, or records it anew)", failure.message, waiter.revision)}})
	}
	p.modes.waiters = nil
}

// modePendingReason says what the pending revision waits for.
func (p *partition) modePendingReason() string {
	info := p.q.Mode()
	if info.Pending == 0 {
		return "nothing pending"
	}
	f := p.q.Log().Frontiers()
	need := info.PendingOffset + 1
	if !p.isReplicated() || p.repl == nil {
		return fmt.Sprintf("waiting for the log to sync past offset %d (durable to %d)", info.PendingOffset, f.Durable)
	}
	durable := 0
	if f.Durable >= need {
		durable++
	}
	for _, progress := range p.repl.followers {
		if progress.Counts && progress.DurableNext >= need {
			durable++
		}
	}
	return fmt.Sprintf("durable on %d of the %d copies it needs at offset %d (owner durable to %d; %s)",
		durable, p.home.replication.copies, info.PendingOffset, f.Durable, p.replicaStates())
}

// effectiveOptions are the declared options with the mode in force: a
// re-declare is compared with them, so after a change declare keeps
// refusing a mode other than the one the queue runs.
func (h *partitionHome) effectiveOptions() queue.Options {
	options := h.options
	if mode := queue.Mode(h.appliedMode.Load()); mode != 0 {
		options.Mode = mode
	}
	return options
}

// appliedMode is the mode in force: the declared one until a revision
// applied.
func (p *partition) appliedMode() queue.Mode {
	if p.q == nil {
		return p.home.options.Mode
	}
	return p.q.Mode().Applied
}

// admittedMode is the mode new appends are admitted under: the newest
// revision's (a replica appends pushes at it).
func (p *partition) admittedMode() queue.Mode {
	if p.q == nil {
		return p.home.options.Mode
	}
	return p.q.Mode().Desired()
}

// applyQuorumLimits gives the queue both quorum frontiers: W copies
// written and W copies durable. It reports whether either moved.
func (p *partition) applyQuorumLimits(followers []replication.ReplicaProgress) bool {
	f := p.q.Log().Frontiers()
	copies := p.home.replication.copies
	written, writtenOK := replication.Quorum{Copies: copies, Written: true}.Frontier(f.Written, followers)
	durable, durableOK := replication.Quorum{Copies: copies}.Frontier(f.Durable, followers)
	beforeWritten, beforeDurable := p.q.ApplyLimits()
	if !writtenOK {
		written = beforeWritten
	}
	if !durableOK {
		durable = beforeDurable
	}
	p.q.SetApplyLimits(written, durable)
	afterWritten, afterDurable := p.q.ApplyLimits()
	return afterWritten != beforeWritten || afterDurable != beforeDurable
}

// addModeInfo reports the applied and desired mode, the pending or failed
// change, and (on the owner) each copy's applied revision.
func (p *partition) addModeInfo(info *wire.QueueInfo) {
	if p.q == nil {
		return
	}
	m := p.q.Mode()
	info.Mode, info.ModeRevision = wireMode(m.Applied), m.Revision
	if m.Pending != 0 {
		info.DesiredMode = wireMode(m.Pending)
		since := p.modes.seenAt
		if p.modes.seenRevision != m.PendingRevision {
			since = p.core.now()
		}
		info.ModeChange = &wire.ModeChangeInfo{Revision: m.PendingRevision, Mode: wireMode(m.Pending),
			Offset: m.PendingOffset, State: "pending", Reason: p.modePendingReason(), SinceUnixMs: since.UnixMilli()}
	} else if p.modes.failed != nil {
		failed := *p.modes.failed
		info.ModeChange = &failed
	}
	for i := range info.Replicas {
		replica := &info.Replicas[i]
		switch {
		case m.Pending != 0 && replica.DurableNext > m.PendingOffset:
			replica.AppliedMode, replica.ModeRevision = wireMode(m.Pending), m.PendingRevision
		case m.Revision == 0 || replica.DurableNext > m.RevisionOffset:
			replica.AppliedMode, replica.ModeRevision = wireMode(m.Applied), m.Revision
		}
	}
}
