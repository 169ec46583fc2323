package actors

// A fenced copy hands its partition on (the rule is replication.DecideRole,
// replication/roles.go): a cluster partition whose log latched after a
// storage failure, or whose queue failed to open, must not own, recover or
// keep the coordination leadership, since it can neither confirm nor seal
// itself.
//
// States: a cluster partition in the partition's fenced state
// (partition.go). An owner or a recovering copy that fences steps down at
// once, without reopening its queue (a reopen, the operator's, reopen.go,
// is what carries out the log's cut): it takes itself out of the
// directory, answers what it owed with not_owner (outcome_unknown for
// appended publishes: a new owner may hold them), ends its subscriptions
// with not_owner, stops its follower links, whose keepalives would keep
// vouching for it, and stops its recovery. From then on it is a replica
// that refuses pushes and seals. Whenever it finds itself leading the
// coordination shard it hands the leadership to a reachable replica
// (replication.Successors, asking each in turn), and looks again after
// handoverRetry while it still leads.
//
// Messages taken while fenced: coordinationView (manager),
// recheckCoordination (its own timer); recoveryClaimed, recoveryPlanned
// and recoveryFailed from a recovery it stopped are dropped.
// Sent: partitionNotServing (manager).

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

// handoverRetry is how long a fenced copy that handed the coordination
// leadership on waits before it looks again (and asks the next replica)
// while it still leads.
const handoverRetry = 200 * time.Millisecond

// handoverState is what a fenced cluster partition keeps while it hands
// the partition on.
type handoverState struct {
	// progress is the followers' last reports, kept from the moment the
	// copy stepped down (its follower links stop then), to choose whom to
	// hand the leadership to.
	progress map[string]replication.ReplicaProgress
	// transfers counts the leadership transfers asked for while fenced;
	// each asks the next successor in turn.
	transfers     int
	transferredAt time.Time
	recheckArmed  bool
}

// copyRole is the partition's part as the replication rules name it.
func (p *partition) copyRole() replication.CopyRole {
	if p.repl == nil {
		return replication.CopyReplica
	}
	switch p.repl.role {
	case roleOwner:
		return replication.CopyOwner
	case roleRecovering:
		return replication.CopyRecovering
	}
	return replication.CopyReplica
}

// handOverFenced runs when a cluster partition fences: it steps down if
// it owns or recovers, and hands the coordination leadership on if it
// leads.
func (p *partition) handOverFenced(ctx actor.Context, cause error) {
	if !p.isReplicated() {
		return
	}
	home := p.home.replication
	view, _ := home.node.Partition(home.shardID)
	decision := replication.DecideRole(replication.CopyStanding{Role: p.copyRole(), Fenced: true, Leads: view.SelfLeads})
	if decision.StepDown {
		p.stepDownFenced(ctx, fmt.Sprintf("this node's copy fenced after a storage failure: %s", storageCause(cause)))
	}
	if decision.HandOffLeadership {
		p.handOffLeadership(ctx)
	}
}

// stepDownFenced is stepDown (partition_cluster.go) for a copy whose disk
// failed: everything but the reopen as a replica.
func (p *partition) stepDownFenced(ctx actor.Context, reason string) {
	r := p.repl
	p.core.logger.Warn("partition steps down: a fenced copy does not own or recover", "queue", p.home.name,
		"epoch", r.epoch, "role", r.role.String(), "reason", reason)
	failure := requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
		"queue %q changed owner: %s; another copy takes it over", p.home.name, reason)}
	if r.serving {
		r.serving = false
		ctx.Send(p.home.manager, partitionNotServing{name: p.home.name, pid: ctx.Self(), failure: failure})
	}
	p.refuseOwedUnknown(ctx, failure)
	p.home.subscribers.endAll(ctx, failure)
	p.handover.progress = maps.Clone(r.followers)
	p.stopLinks(ctx)
	if r.recoveryPID != nil {
		p.core.registry.StopActor(ctx, r.recoveryPID, runtime.StopDone)
		r.recoveryPID = nil
	}
	r.role, r.stepDownNote, r.installEnd, r.promoted, r.installed = roleReplica, reason, 0, false, false
	r.recoveryStep = ""
}

// receiveFenced takes the cluster messages of a fenced partition; false
// for every other message, and for every message of a partition that is
// not a fenced cluster partition.
func (p *partition) receiveFenced(ctx actor.Context, message any) bool {
	if !p.isReplicated() || p.state != partitionFenced {
		return false
	}
	home := p.home.replication
	switch msg := message.(type) {
	case coordinationView:
		p.followFencedView(ctx, msg.view)
	case recheckCoordination:
		p.handover.recheckArmed = false
		if view, ok := home.node.Partition(home.shardID); ok {
			p.followFencedView(ctx, view)
		}
	case recoveryClaimed, recoveryPlanned, recoveryFailed:
		// From the recovery this copy stopped when it fenced: it neither
		// owns nor recovers.
	default:
		return false
	}
	return true
}

// followFencedView keeps the view a fenced copy is in and hands the
// leadership on when it leads.
func (p *partition) followFencedView(ctx actor.Context, view cluster.PartitionView) {
	if p.repl != nil {
		p.repl.view = view
	}
	decision := replication.DecideRole(replication.CopyStanding{Role: p.copyRole(), Fenced: true, Leads: view.SelfLeads})
	if decision.StepDown {
		p.stepDownFenced(ctx, "this node's copy is fenced after a storage failure")
		p.publishSummary()
	}
	if decision.HandOffLeadership {
		p.handOffLeadership(ctx)
	}
}

// handOffLeadership asks the coordination shard to move its leadership to
// the next successor (at most once per handoverRetry) and looks again
// after handoverRetry.
func (p *partition) handOffLeadership(ctx actor.Context) {
	h, home := &p.handover, p.home.replication
	if time.Since(h.transferredAt) >= handoverRetry {
		var candidates []replication.Successor
		for _, replica := range home.replicas {
			if replica != home.self && !p.core.peerUnreachable(replica) {
				candidates = append(candidates, replication.Successor{Node: replica, Reachable: true,
					Progress: h.progress[replica]})
			}
		}
		// With no replica reachable there is nobody to hand it to: the
		// next look tries again.
		if order := replication.Successors(candidates); len(order) > 0 {
			target := order[h.transfers%len(order)]
			h.transfers++
			h.transferredAt = time.Now()
			level := slog.LevelDebug
			if h.transfers == 1 {
				level = slog.LevelInfo // the first of a fence; the rest repeat it every handoverRetry
			}
			p.core.logger.Log(context.Background(), level, "a fenced copy hands the coordination leadership on",
				"queue", p.home.name, "to", target, "attempt", h.transfers)
			node, shardID := home.node, home.shardID
			go func() { _ = node.TransferLeadership(shardID, target) }()
		}
	}
	if !h.recheckArmed {
		h.recheckArmed = true
		self, system := ctx.Self(), ctx.ActorSystem()
		time.AfterFunc(handoverRetry, func() { system.Root.Send(self, recheckCoordination{}) })
	}
}
