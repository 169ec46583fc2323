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
// Admission: while fewer than W copies count (a follower is unreachable,
// latched, restarting), the owner refuses new publishes with unavailable
// (211): they are not appended, so the refusal is honest. Publishes
// appended before stay pending until the quorum returns (or the owner
// steps down, which answers them outcome_unknown).
//
// Retention: compaction never removes records above the lowest durable
// position among the followers (queue.SetRetentionFloor), so a follower
// that comes back can always be caught up from the owner's files.

import (
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/replication"
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
		props := p.core.registry.props("follower-link", p.core.logger, func(entry *Entry) actor.Actor {
			return newFollowerLink(entry, p.core, ctx.Self(), p.home.name, home.shardID, replica, epoch, l, shared)
		})
		pid, err := ctx.SpawnNamed(props, "links/"+replica)
		if err != nil {
			panic(fmt.Errorf("actors: spawn the follower link of %s to %s: %w", p.home.name, replica, err))
		}
		r.links[replica] = pid
		r.followers[replica] = replication.ReplicaProgress{}
		r.linkState[replica] = "starting"
	}
}

// stopLinks stops every follower link; their reports stop counting.
func (p *partition) stopLinks(ctx actor.Context) {
	r := p.repl
	for replica, pid := range r.links {
		p.core.registry.stopActor(ctx, pid, stopDone)
		delete(r.links, replica)
	}
	clear(r.followers)
	clear(r.linkState)
	r.committed = 0
}

// followerReported takes a follower link's report.
func (p *partition) followerReported(ctx actor.Context, msg linkProgress) {
	r := p.repl
	if _, ours := r.links[msg.node]; !ours {
		return // a link of an earlier epoch, already stopped
	}
	r.followers[msg.node], r.linkState[msg.node] = msg.progress, msg.state
	p.maybeAnnounceServing(ctx)
	if p.recomputeQuorum(ctx) {
		p.advance(ctx)
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
	floor := p.ownerPosition()
	for _, progress := range r.followers {
		followers = append(followers, progress)
		floor = min(floor, progress.DurableNext)
	}
	p.q.SetRetentionFloor(floor)
	frontier, ok := p.quorum().Frontier(p.ownerPosition(), followers)
	moved := ok && frontier > r.committed
	if moved {
		r.committed = frontier
		p.linkShared.committed.Store(frontier)
	}
	// Each record applies below the quorum frontier of its own mode's
	// boundary, a mode revision below the durable one (partition_mode.go).
	if p.applyQuorumLimits(followers) {
		moved = true
	}
	if r.role == roleRecovering && r.promoted && !r.installed && ok && frontier >= r.installEnd {
		r.installed = true
		if r.recoveryPID != nil {
			ctx.Send(r.recoveryPID, recoveryInstalled{end: r.installEnd})
		}
	}
	return moved
}

// admitsPublishes reports whether the owner may append new publishes: it
// serves and at least W copies count. failure says why not.
func (p *partition) admitsPublishes() (bool, requestFailure) {
	if !p.isReplicated() {
		return true, requestFailure{}
	}
	r := p.repl
	if r.role != roleOwner {
		return false, requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
			"queue %q is not served by this node (it is a %s here)", p.home.name, r.role)}
	}
	followers := make([]replication.ReplicaProgress, 0, len(r.followers))
	for _, progress := range r.followers {
		followers = append(followers, progress)
	}
	copies := replication.CountingCopies(followers)
	if need := p.home.replication.copies; copies < need {
		return false, requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q has %d of the %d copies its policy needs reachable (%s); retry shortly",
			p.home.name, copies, need, p.replicaStates())}
	}
	return true, requestFailure{}
}

// replicaStates names each follower's state, for messages.
func (p *partition) replicaStates() string {
	names := make([]string, 0, len(p.repl.linkState))
	for node := range p.repl.linkState {
		names = append(names, node)
	}
	slices.Sort(names)
	text := ""
	for i, node := range names {
		if i > 0 {
			text += ", "
		}
		text += node + " " + p.repl.linkState[node]
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
	props := p.core.registry.props("recovery", p.core.logger, func(entry *Entry) actor.Actor {
		return newRecovery(entry, p.core, self, home, expect)
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

// installPlan installs the chosen history on this node: cut what diverges,
// fetch what is missing from the chosen replica, then promote.
func (p *partition) installPlan(ctx actor.Context, msg recoveryPlanned) {
	r, home := p.repl, p.home.replication
	if r.role != roleRecovering {
		return
	}
	r.epoch, r.installEnd, r.recoveryStep = msg.epoch, msg.plan.End, "installing"
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
	home.timeline.stage(p.core.now(), "promoted", home.self, fmt.Sprintf("epoch %d", r.epoch))
	p.spawnLinks(ctx)
	p.recomputeQuorum(ctx)
	p.advance(ctx)
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
