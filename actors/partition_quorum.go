package actors

// The owner side of a cluster partition (partition_cluster.go): its
// follower links, the quorum frontier they feed, admission, retention, and
// the installation steps of a recovery.
//
// The quorum frontier (replication.Quorum.Frontier) is the smaller of the
// owner's own position at the queue's boundary (written for a buffered
// queue, durable for a durable one) and the (W-1)-th highest position of
// the followers whose reports count. It is the queue's apply limit
// (queue.SetApplyLimit): confirms, deliveries and settles all apply only
// below it, so a delivered message is never weaker than a confirmed one,
// and a confirm stands on W copies at the queue's boundary. It never moves
// back.
//
// Admission: while fewer than W copies count toward it (a follower is
// unreachable, latched, restarting, or stalled past
// replication.LinkLimits.AdmitStallMax), the owner refuses new publishes
// with unavailable (211): they are not appended, so the refusal is honest. Publishes
// appended before stay pending until the quorum returns (or the owner
// steps down, which answers them outcome_unknown).
//
// Retention: compaction never removes records above the lowest durable
// position a follower holds (queue.SetRetentionFloor,
// replication.Link.RetentionHold): a counting follower's, and the last one
// of a follower that stopped counting less than RetentionHoldMax ago, so a
// follower that comes back within that bound is caught up from the
// owner's files, and one gone for good does not fill the owner's disk.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// spawnLinks starts one follower link per other replica for the epoch.
func (p *partition) spawnLinks(ctx actor.Context) {
	r, home := p.repl, p.home.replication
	if p.linkShared == nil {
		p.linkShared = &linkShared{}
	}
	l := p.q.Log()
	for _, replica := range home.replicas {
		if replica == home.self {
			continue
		}
		if _, running := r.links[replica]; running {
			continue
		}
		replica, epoch, shared := replica, r.epoch, p.linkShared
		props := p.core.registry.Props("follower-link", p.core.logger, func(entry *runtime.Entry) actor.Actor {
			return newFollowerLink(entry, p.core, ctx.Self(), p.home.name, home.shardID, replica, epoch, l, shared)
		})
		pid, err := ctx.SpawnNamed(props, "links/"+replica)
		if err != nil {
			panic(fmt.Errorf("actors: spawn the follower link of %s to %s: %w", p.home.name, replica, err))
		}
		r.links[replica] = pid
		r.followers[replica] = replication.ReplicaProgress{}
		r.linkReports[replica] = linkProgress{node: replica, state: "starting", holdsRetention: true}
	}
}

// stopLinks stops every follower link; their reports stop counting.
func (p *partition) stopLinks(ctx actor.Context) {
	r := p.repl
	for replica, pid := range r.links {
		p.core.registry.StopActor(ctx, pid, runtime.StopDone)
		delete(r.links, replica)
	}
	clear(r.followers)
	clear(r.linkReports)
	r.committed = 0
	r.commitWait.reset()
}

// followerReported takes a follower link's report.
func (p *partition) followerReported(ctx actor.Context, msg linkProgress) {
	r := p.repl
	if _, ours := r.links[msg.node]; !ours {
		return // a link of an earlier epoch, already stopped
	}
	r.followers[msg.node], r.linkReports[msg.node] = msg.progress, msg
	p.maybeAnnounceServing(ctx)
	if p.recomputeQuorum(ctx) {
		p.advance(ctx)
	}
	p.maybeFinishInstall(ctx)
	p.maybeStepDownCutOff(ctx)
}

// maybeStepDownCutOff steps an owner down once it has been cut off for
// replication.CutOffAfter: it does not lead the coordination shard and
// fewer than a majority of copies keep up with it. Its clients then get
// what it owed answered (outcome_unknown) and go elsewhere, instead of
// waiting on an owner a recovery on the other side has replaced.
func (p *partition) maybeStepDownCutOff(ctx actor.Context) {
	r := p.repl
	if r.role != roleOwner {
		r.cutOffSince = time.Time{}
		return
	}
	keepingUp, now := 0, time.Now()
	for _, report := range r.linkReports {
		if report.admits && !report.stalled && report.freshAt(now) {
			keepingUp++
		}
	}
	wasCutOff := !r.cutOffSince.IsZero()
	stepDown, since := replication.OwnerCutOff(keepingUp, len(p.home.replication.replicas), r.view.SelfLeads,
		r.cutOffSince, now)
	r.cutOffSince = since
	switch {
	case stepDown:
		r.cutOffSince = time.Time{}
		p.stepDownWith(ctx, fmt.Sprintf("cut off for %v: %d of %d copies keep up and this node does not lead the coordination shard (%s)",
			replication.CutOffAfter, keepingUp+1, len(p.home.replication.replicas), p.replicaStates()), true)
	case !since.IsZero() && !wasCutOff:
		p.core.logger.Info("the owner looks cut off; it steps down unless that changes", "queue", p.home.name,
			"epoch", r.epoch, "after", replication.CutOffAfter, "copies_keeping_up", keepingUp+1,
			"replicas", len(p.home.replication.replicas), "followers", p.replicaStates())
		self, system := ctx.Self(), ctx.ActorSystem()
		time.AfterFunc(replication.CutOffAfter, func() { system.Root.Send(self, recheckCoordination{}) })
	case since.IsZero() && wasCutOff:
		p.core.logger.Info("the owner is no longer cut off", "queue", p.home.name, "epoch", r.epoch,
			"copies_keeping_up", keepingUp+1, "leads_coordination", r.view.SelfLeads)
	}
}

// ownerPosition is the owner's own position at the queue's boundary (of
// the applied mode, partition_mode.go).
func (p *partition) ownerPosition() uint64 {
	f := p.q.Log().Frontiers()
	if p.appliedMode() == queue.Buffered {
		return f.Written
	}
	return f.Durable
}

// quorum is the partition's write threshold.
func (p *partition) quorum() replication.Quorum {
	return replication.Quorum{Copies: p.home.replication.copies, Written: p.appliedMode() == queue.Buffered}
}

// recomputeQuorum moves the apply limit to the quorum frontier; it reports
// whether the frontier moved.
func (p *partition) recomputeQuorum(ctx actor.Context) bool {
	r := p.repl
	if p.q == nil || p.q.IsReplica() || (r.role != roleOwner && r.role != roleRecovering) {
		return false
	}
	followers := make([]replication.ReplicaProgress, 0, len(r.followers))
	for _, progress := range r.followers {
		followers = append(followers, progress)
	}
	p.q.SetRetentionFloor(p.retentionFloor())
	p.linkShared.writtenBoundary.Store(p.appliedMode() == queue.Buffered)
	every, everyOK := p.quorum().Frontier(p.ownerPosition(), followers)
	if r.role == roleRecovering && r.promoted && !r.installed && everyOK && every >= r.installEnd {
		r.installed = true // maybeFinishInstall serves
	}
	// Only the copies of recorded voters count (replication.CountVoters):
	// the owner records the others before their copies count, and nothing
	// applies before the shard knows the partition confirms.
	counted, ownerCounts, unrecorded := replication.CountVoters(p.home.replication.self, r.followers, p.voterRecorded)
	if len(unrecorded) > 0 && everyOK && every > 0 {
		p.maybeRecordVoters(ctx, unrecorded)
	}
	if !ownerCounts {
		r.commitWait.note(time.Now(), p.ownerPosition(), r.committed)
		return false
	}
	frontier, ok := p.quorum().Frontier(p.ownerPosition(), counted)
	moved := ok && frontier > r.committed
	if moved {
		r.committed = frontier
		p.linkShared.committed.Store(frontier)
	}
	r.commitWait.note(time.Now(), p.ownerPosition(), r.committed)
	// Each record applies below the quorum frontier of its own mode's
	// boundary, a mode revision below the durable one (partition_mode.go).
	if p.applyQuorumLimits(counted) {
		moved = true
	}
	return moved
}

// voterRecorded reports whether the coordination shard records node as a
// voter of the partition (cluster.CoordState.MayHaveCounted), in this
// partition's view or in the answer to its last proposal.
func (p *partition) voterRecorded(node string) bool {
	r := p.repl
	return r.view.State.MayHaveCounted(node) || r.recorded.MayHaveCounted(node)
}

// maybeRecordVoters proposes that the coordination shard record nodes as
// voters (and that the partition confirms, the first time): a copy counts
// toward the quorum frontier only once its node is recorded, so a copy
// created empty on a node that was never recorded lost nothing a confirm
// stood on (docs/cluster.md, "A copy earns its vote"). It proposes once
// for the copies counting at the partition's first frontier and once more
// per node whose copy starts counting later; one proposal runs at a time,
// on a goroutine, and its answer (confirmedResult) recomputes the quorum.
func (p *partition) maybeRecordVoters(ctx actor.Context, nodes []string) {
	r := p.repl
	if r.recording {
		return
	}
	r.recording = true
	node, shardID, epoch := p.home.replication.node, p.home.replication.shardID, r.epoch
	voters := slices.Clone(nodes)
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		proposeCtx, cancel := context.WithTimeout(context.Background(), recoveryRaftTimeout)
		defer cancel()
		state, _, err := node.RecordConfirmed(proposeCtx, shardID, epoch, voters)
		system.Root.Send(self, confirmedResult{epoch: epoch, state: state, voters: voters, err: err})
	}()
}

// confirmedResult answers maybeRecordVoters' proposal: the shard's state
// after it.
type confirmedResult struct {
	epoch  uint64
	state  cluster.CoordState
	voters []string
	err    error
}

// confirmedAnswered takes the proposal's answer: once the shard records
// the voters, their copies count; otherwise they are proposed again at
// the next recompute after recoveryRetry (so a shard without a leader is
// not hammered).
func (p *partition) confirmedAnswered(ctx actor.Context, msg confirmedResult) {
	r := p.repl
	if msg.err == nil && len(msg.state.Voters) >= len(r.recorded.Voters) {
		r.recorded = msg.state
	}
	recorded := msg.err == nil
	for _, node := range msg.voters {
		recorded = recorded && msg.state.MayHaveCounted(node)
	}
	if recorded {
		r.recording = false
		if p.recomputeQuorum(ctx) {
			p.advance(ctx)
		}
		p.maybeFinishInstall(ctx)
		return
	}
	if msg.err != nil {
		p.core.logger.Warn("could not record the partition's voters; retrying", "queue", p.home.name,
			"epoch", msg.epoch, "voters", msg.voters, "err", msg.err)
	}
	self, system := ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(recoveryRetry, func() { system.Root.Send(self, confirmedRetry{}) })
}

// confirmedRetry recomputes the quorum after a failed maybeRecordVoters
// proposal, which proposes again.
type confirmedRetry struct{}

// maybeFinishInstall makes a recovering partition the owner once W copies
// hold the chosen history (its epoch is already active in the shard).
func (p *partition) maybeFinishInstall(ctx actor.Context) {
	r := p.repl
	if r.role != roleRecovering || !r.installed {
		return
	}
	p.home.replication.timeline.stage(p.core.now(), "installed", "",
		fmt.Sprintf("end %d on %d copies", r.installEnd, p.home.replication.copies))
	p.becomeOwner(ctx, r.activated)
}

// retentionFloor is the lowest durable position a follower holds the
// owner's retention at (replication.Link.RetentionHold): counting
// followers at their durable position, one that stopped counting at its
// last one for a bounded time; never above the owner's own position.
func (p *partition) retentionFloor() uint64 {
	floor := p.ownerPosition()
	for _, report := range p.repl.linkReports {
		if report.holdsRetention {
			floor = min(floor, report.retention)
		}
	}
	return floor
}

// admitsPublishes reports whether the owner may append new publishes: it
// serves and at least W copies count toward admission (a follower stalled
// for long does not, nor one whose link stopped reporting). failure says
// why not.
func (p *partition) admitsPublishes() (bool, requestFailure) {
	if !p.isReplicated() {
		return true, requestFailure{}
	}
	r := p.repl
	if r.role != roleOwner {
		return false, requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
			"queue %q is not served by this node (it is a %s here)", p.home.name, r.role)}
	}
	copies, now := 1, time.Now()
	for _, report := range r.linkReports {
		if report.admits && report.freshAt(now) {
			copies++
		}
	}
	if need := p.home.replication.copies; copies < need {
		return false, requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q has %d of the %d copies its policy needs reachable (%s); retry shortly",
			p.home.name, copies, need, p.replicaStates())}
	}
	return true, requestFailure{}
}

// replicaStates names each follower's state, for messages.
func (p *partition) replicaStates() string {
	names := make([]string, 0, len(p.repl.linkReports))
	for node := range p.repl.linkReports {
		names = append(names, node)
	}
	slices.Sort(names)
	text, now := "", time.Now()
	for i, node := range names {
		if i > 0 {
			text += ", "
		}
		text += node + " " + p.repl.linkReports[node].stateAt(now)
	}
	return text
}

// startRecovery spawns the recovery child.
func (p *partition) startRecovery(ctx actor.Context) {
	r, home := p.repl, p.home.replication
	if r.recoveryPID != nil || r.view.State.Epoch == 0 {
		return // one at a time; epoch 0 waits for the first owner's claim
	}
	r.role, r.recoveryStep = roleRecovering, "claiming"
	expect, self := r.view.State.Epoch, ctx.Self()
	r.epoch = expect // until the claim names the new one (recoveryClaimed)
	// The node that served the epoch being replaced: for a durable queue
	// its complete seal alone is enough (replication.SealsNeededNow). The
	// claim of expect+1 only wins while the shard is still at expect.
	last := lastOwner{durable: p.appliedMode() == queue.Durable && p.admittedMode() == queue.Durable}
	if r.view.State.Phase == cluster.PhaseActive {
		last.node = r.view.State.Owner
		last.silent = !p.ownerAlive(r.view.State)
	}
	props := p.core.registry.Props("recovery", p.core.logger, func(entry *runtime.Entry) actor.Actor {
		return newRecovery(entry, p.core, self, home, expect, last)
	})
	pid, err := ctx.SpawnNamed(props, fmt.Sprintf("recovery-%d", expect+1))
	if err != nil {
		p.core.logger.Warn("could not start a recovery", "queue", p.home.name, "err", err)
		r.role = roleReplica
		return
	}
	r.recoveryPID = pid
	p.core.logger.Info("partition recovers", "queue", p.home.name, "after_epoch", expect,
		"old_owner", r.view.State.Owner)
}

// installPlan installs the chosen history on this node, once the shard
// activated the recovery's epoch: cut what diverges, fetch what is missing
// from the chosen replica, then promote.
func (p *partition) installPlan(ctx actor.Context, msg recoveryPlanned) {
	r, home := p.repl, p.home.replication
	if r.role != roleRecovering {
		return
	}
	r.recoveryPID = nil // it stopped once it handed the plan over
	r.epoch, r.installEnd, r.recoveryStep, r.activated = msg.epoch, msg.plan.End, "installing", msg.state
	own := slices.IndexFunc(msg.reports, func(report replication.SealReport) bool { return report.Node == home.self })
	keep := msg.plan.Keep[own]
	if end, _ := p.replicaLogView(); keep < end {
		if err := p.q.TruncateAfter(keep); err != nil {
			p.recoveryFailed(ctx, recoveryFailed{reason: fmt.Sprintf("cutting the divergent suffix at %d: %v", keep, err)})
			return
		}
		home.timeline.stage(p.core.now(), "truncated", home.self, fmt.Sprintf("kept %d of %d", keep, end))
	}
	if keep < msg.plan.End {
		source := msg.reports[msg.plan.Source].Node
		home.timeline.stage(p.core.now(), "transfer", source, fmt.Sprintf("%d..%d", keep, msg.plan.End))
		p.startFetch(ctx, &fetchState{source: source, epoch: msg.epoch, next: keep, until: msg.plan.End, recovery: true})
		return
	}
	p.installFetched(ctx)
}

// installFetched promotes the queue under the recovery's epoch once it
// holds the chosen history, and starts pushing it to the followers.
func (p *partition) installFetched(ctx actor.Context) {
	r, home := p.repl, p.home.replication
	if r.role != roleRecovering {
		return
	}
	if _, err := p.q.Promote(r.epoch); err != nil {
		p.recoveryFailed(ctx, recoveryFailed{reason: fmt.Sprintf("promoting under epoch %d: %v", r.epoch, err)})
		return
	}
	r.fence, r.promoted = max(r.fence, r.epoch), true
	p.becomeComplete() // it holds the chosen history
	home.timeline.stage(p.core.now(), "promoted", home.self, fmt.Sprintf("epoch %d", r.epoch))
	p.spawnLinks(ctx)
	p.recomputeQuorum(ctx)
	p.advance(ctx)
	p.maybeFinishInstall(ctx)
}

// recoveryFailed puts the partition back to being a replica; a new view
// starts another recovery if this node still leads.
func (p *partition) recoveryFailed(ctx actor.Context, msg recoveryFailed) {
	r := p.repl
	p.core.logger.Warn("recovery ended without serving", "queue", p.home.name, "reason", msg.reason)
	p.home.replication.timeline.finish(p.core.now(), r.epoch, "failed: "+msg.reason)
	if r.role == roleRecovering {
		p.stepDown(ctx, "recovery failed: "+msg.reason)
	}
	r.recoveryPID = nil
	r.fetch = nil
	self, system := ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(recoveryRetry, func() { system.Root.Send(self, recheckCoordination{}) })
}

// recheckCoordination makes the partition read its coordination view again.
type recheckCoordination struct{}
