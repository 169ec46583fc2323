package actors

// The recovery of a partition ("queues/<name>/<part>/recovery"): run by
// the node that leads the partition's coordination shard but is not its
// serving owner (the owner died, paused, was cut off, or restarted as a
// new instance). The plan is replication/recovery.go's; this actor carries out
// its network and Raft steps, the partition its storage steps.
//
// States, in order:
//
//	claiming    compare-and-set of the next epoch on the coordination shard
//	            (cluster.Node.ClaimEpoch, on a goroutine), retried while it
//	            fails for a transient reason
//	sealing     a seal (FQS1) to every replica, this one included (through
//	            the partition); it waits for E-W+1 sealed answers from
//	            copies that earned their vote (an incomplete copy's seal is
//	            kept but does not count, unless the claim's shard state
//	            names no voter on its node: replication.SealCounts), asking
//	            again those that failed, and then up to sealGrace more for
//	            every other replica whose peer link is up: after a power loss
//	            of every copy, a confirm's W copies may each have kept only
//	            their synced prefix, and the longest of them is the one to
//	            keep (a replica known down is not waited for, so the common
//	            failover pays nothing)
//	activating  the plan is chosen (replication.Plan); the new epoch and its
//	            first offset, the chosen history's end, are recorded in the
//	            coordination shard (cluster.Node.ActivateEpoch) before any
//	            copy cuts anything
//	done        the plan went to the partition (recoveryPlanned), which cuts
//	            what diverges, fetches what it lacks from the chosen
//	            replica, promotes its queue under the new epoch, pushes the
//	            history to the followers and serves once W copies hold it;
//	            the actor stops itself
//
// A claim another node won, a refused activation or the partition's loss
// of leadership end the recovery (recoveryFailed); the partition goes back
// to being a replica, and the next coordination view decides again.
//
// Takes: claimResult, activateResult (its goroutines), peerAnswer and
// peerRequestFailed (seals, from peer links and from the partition through
// localReply), recoveryTick (its timer). Sends: peerRequest (seals) to
// peer links; recoveryClaimed, sealRequest, recoveryPlanned,
// recoveryFailed to the partition.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

const (
	// recoveryRetry is the pause before a failed step is tried again.
	recoveryRetry = 100 * time.Millisecond
	// recoverySealResend is how long an unanswered seal waits before it is
	// sent again.
	recoverySealResend = 500 * time.Millisecond
	// recoveryRaftTimeout bounds one claim or activation.
	recoveryRaftTimeout = 5 * time.Second
)

// Messages of a recovery.
type (
	claimResult struct {
		state cluster.CoordState
		won   bool
		err   error
	}
	activateResult struct {
		state cluster.CoordState
		won   bool
		err   error
	}
	recoveryTick struct{ generation uint64 }
	// recoveryClaimed tells the partition the epoch it recovers under.
	recoveryClaimed struct{ epoch uint64 }
	// recoveryPlanned gives the partition the plan to install, once the
	// shard recorded it (state: the activated epoch).
	recoveryPlanned struct {
		epoch   uint64
		plan    replication.RecoveryPlan
		reports []replication.SealReport
		state   cluster.CoordState
	}
	// recoveryFailed tells the partition the recovery ended without serving.
	recoveryFailed struct{ reason string }
)

type recoveryState uint8

const (
	recoveryClaiming recoveryState = iota + 1
	recoverySealing
	recoveryActivating
	recoveryDone
)

func (s recoveryState) String() string {
	switch s {
	case recoveryClaiming:
		return "claiming"
	case recoverySealing:
		return "sealing"
	case recoveryActivating:
		return "activating"
	case recoveryDone:
		return "done"
	}
	return "?"
}

// localReply delivers a frame the partition answers a local request with
// to a local actor, as a peer link would.
type localReply struct {
	system *actor.ActorSystem
	pid    *actor.PID
	node   string
}

func (r localReply) alive() bool { return true }

func (r localReply) sendFrame(frame wire.Frame) error {
	var requestID uint64
	switch f := frame.(type) {
	case *wire.SealedVote:
		requestID = f.RequestID
	case *wire.Sealed:
		requestID = f.RequestID
	case *wire.ErrorFrame:
		requestID = f.RequestID
	case *wire.PageAfter:
		requestID = f.RequestID
	case *wire.Page:
		requestID = f.RequestID
	}
	r.system.Root.Send(r.pid, peerAnswer{node: r.node, requestID: requestID, frame: frame})
	return nil
}

type recovery struct {
	entry     *runtime.Entry
	core      *brokerCore
	partition *actor.PID
	home      *replicaHome
	expect    uint64 // the epoch the view showed when the recovery began
	timeline  *failoverTimeline

	state   recoveryState
	epoch   uint64
	needed  int
	sealed  map[string]replication.SealReport
	pending map[uint64]string    // seal request id -> replica
	sentAt  map[string]time.Time // the last seal sent to each replica
	tickGen uint64
	end     uint64
	note    string
	// refused names the replicas that refused their seal (not waited for);
	// graceUntil is set once E-W+1 sealed: the end of the wait for the
	// other reachable replicas.
	refused    map[string]bool
	graceUntil time.Time
	// last served the epoch this recovery replaces.
	last lastOwner
	// claimState is the coordination shard's state the winning claim
	// returned: its voters are final for every earlier epoch (the shard
	// records none once the epoch moved), so a copy created empty on a node
	// it does not name lost nothing a confirm stood on, and its seal counts
	// (replication.SealCounts), whatever the copy could learn when it
	// opened.
	claimState cluster.CoordState
	// chosen and reports, once planned, go to the partition when the shard
	// activated the epoch.
	chosen  replication.RecoveryPlan
	reports []replication.SealReport
}

// sealGrace bounds how long a recovery that has its E-W+1 seals waits for
// the other reachable replicas' seals (a longer history keeps more of the
// unconfirmed suffix). It never waits for a last owner that fell silent.
const sealGrace = 500 * time.Millisecond

// lastOwner is the node that served the epoch a recovery replaces, whether
// the queue is durable (replication.SealsNeededNow), and whether this node
// found it silent (no word for ownerSilenceMax: the recovery began for
// that reason). A silent owner is not waited for within sealGrace: a
// paused one never answers, and its peer link stays up until the link's
// own timeout, so the wait only delayed service by the whole grace.
type lastOwner struct {
	node    string
	durable bool
	silent  bool
}

func newRecovery(entry *runtime.Entry, core *brokerCore, partition *actor.PID, home *replicaHome, expect uint64,
	last lastOwner) *recovery {
	return &recovery{entry: entry, core: core, partition: partition, home: home, expect: expect, last: last,
		timeline: home.timeline, sealed: map[string]replication.SealReport{}, pending: map[uint64]string{},
		refused: map[string]bool{},
		sentAt:  map[string]time.Time{}, needed: replication.SealsNeeded(len(home.replicas), home.copies)}
}

func (r *recovery) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		r.timeline.begin(r.core.now(), r.expect+1)
		r.claim(ctx)
	case claimResult:
		r.claimed(ctx, msg)
	case peerAnswer:
		r.answered(ctx, msg)
	case peerRequestFailed:
		if replica, ok := r.pending[msg.requestID]; ok {
			delete(r.pending, msg.requestID)
			r.timeline.stage(r.core.now(), "seal failed", replica, msg.err.Error())
		}
	case recoveryTick:
		if msg.generation == r.tickGen {
			r.tick(ctx)
		}
	case activateResult:
		r.activated(ctx, msg)
	}
	r.entry.SetSummary(fmt.Sprintf("%s epoch %d: %d of %d sealed%s", r.state, r.epoch, len(r.sealed), r.needed,
		reasonSuffix(r.note)))
}

// claim proposes the next epoch on a goroutine.
func (r *recovery) claim(ctx actor.Context) {
	r.state = recoveryClaiming
	node, shardID, expect := r.home.node, r.home.shardID, r.expect
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		claimCtx, cancel := context.WithTimeout(context.Background(), recoveryRaftTimeout)
		defer cancel()
		state, won, err := node.ClaimEpoch(claimCtx, shardID, expect)
		system.Root.Send(self, claimResult{state: state, won: won, err: err})
	}()
}

func (r *recovery) claimed(ctx actor.Context, msg claimResult) {
	switch {
	case msg.err != nil:
		r.note = "claim failed: " + msg.err.Error()
		r.after(ctx, recoveryRetry)
		return
	case !msg.won:
		r.fail(ctx, fmt.Sprintf("another claim of epoch %d won (owner %s)", msg.state.Epoch, msg.state.Owner))
		return
	}
	r.epoch, r.claimState = msg.state.Epoch, msg.state
	r.timeline.stage(r.core.now(), "claimed", "", fmt.Sprintf("epoch %d", r.epoch))
	ctx.Send(r.partition, recoveryClaimed{epoch: r.epoch}) // before its own seal, on the same mailbox order
	r.state = recoverySealing
	for _, replica := range r.home.replicas {
		r.sendSeal(ctx, replica)
	}
	r.after(ctx, recoverySealResend)
}

// sendSeal asks one replica to seal at the new epoch.
func (r *recovery) sendSeal(ctx actor.Context, replica string) {
	requestID := r.core.newID()
	r.pending[requestID] = replica
	r.sentAt[replica] = time.Now()
	seal := wire.Seal{RequestID: requestID, Partition: r.home.shardID, Epoch: r.epoch, Owner: r.home.self}
	if replica == r.home.self {
		reply := localReply{system: ctx.ActorSystem(), pid: ctx.Self(), node: r.home.self}
		ctx.Send(r.partition, sealRequest{from: r.home.self, seal: seal, reply: reply})
		return
	}
	ctx.Send(r.core.peerLinkPID(replica), peerRequest{requestID: requestID, frame: seal.Encode(nil), replyTo: ctx.Self()})
}

func (r *recovery) answered(ctx actor.Context, msg peerAnswer) {
	replica, ok := r.pending[msg.requestID]
	if !ok || r.state != recoverySealing {
		return
	}
	delete(r.pending, msg.requestID)
	switch frame := msg.frame.(type) {
	case *wire.SealedVote:
		r.takeSeal(ctx, replica, &frame.Sealed, frame.Incomplete)
		if r.state != recoverySealing {
			return
		}
	case *wire.Sealed:
		r.takeSeal(ctx, replica, frame, false) // a node of an earlier version: its copies always counted
		if r.state != recoverySealing {
			return
		}
	case *wire.ErrorFrame:
		r.timeline.stage(r.core.now(), "seal refused", replica, frame.Code.String()+": "+frame.Message)
		r.refused[replica] = true
		if replica == r.home.self {
			// The plan is installed on this copy first: a recovery whose own
			// seal is refused can never plan. It ends; the partition goes
			// back to being a replica and the next view decides again (a
			// fenced copy hands the leadership on).
			r.fail(ctx, "this copy refused its own seal: "+frame.Code.String()+": "+frame.Message)
			return
		}
	}
	r.maybePlan(ctx)
}

// takeSeal records a replica's seal; an incomplete copy's is kept (it is
// fenced, and the plan says what it keeps) but does not count.
func (r *recovery) takeSeal(ctx actor.Context, replica string, frame *wire.Sealed, incomplete bool) {
	if frame.Epoch > r.epoch {
		r.fail(ctx, fmt.Sprintf("%s is sealed at epoch %d, newer than %d", replica, frame.Epoch, r.epoch))
		return
	}
	history := make([]replication.HistoryEntry, len(frame.History))
	for i, entry := range frame.History {
		history[i] = replication.HistoryEntry{Epoch: entry.Epoch, FirstOffset: entry.FirstOffset}
	}
	incomplete = !replication.SealCounts(incomplete, r.claimState.MayHaveCounted(replica))
	r.sealed[replica] = replication.SealReport{Node: replica, Instance: frame.Instance, Incomplete: incomplete,
		FirstOffset: frame.FirstOffset, DurableNext: frame.DurableNext, History: history}
	detail := fmt.Sprintf("end %d", frame.DurableNext)
	if incomplete {
		detail += "; incomplete: the copy opened empty and has not caught up, its seal does not count"
	}
	r.timeline.stage(r.core.now(), "sealed", replica, detail)
}

// neededNow is how many eligible seals the recovery waits for with the
// seals it holds: E-W+1, or one once the last owner of a durable queue
// sealed its complete copy.
func (r *recovery) neededNow() int {
	return replication.SealsNeededNow(slices.Collect(maps.Values(r.sealed)), r.needed, r.last.node, r.last.durable)
}

// eligibleSeals counts the seals that count toward E-W+1.
func (r *recovery) eligibleSeals() int {
	return replication.EligibleSeals(slices.Collect(maps.Values(r.sealed)))
}

// maybePlan plans once E-W+1 replicas that earned their vote sealed and
// every other reachable replica sealed too, refused, or had sealGrace to
// answer.
func (r *recovery) maybePlan(ctx actor.Context) {
	if r.state != recoverySealing || r.eligibleSeals() < r.neededNow() {
		return
	}
	now := time.Now()
	if r.graceUntil.IsZero() {
		r.graceUntil = now.Add(sealGrace)
		r.after(ctx, sealGrace)
	}
	if now.Before(r.graceUntil) {
		for _, replica := range r.home.replicas {
			_, sealed := r.sealed[replica]
			if !sealed && !r.refused[replica] && replica != r.home.self && !r.core.peerUnreachable(replica) &&
				!(r.last.silent && replica == r.last.node) {
				return // a reachable replica may still answer with a longer history
			}
		}
	}
	r.plan(ctx)
}

// plan chooses the history once enough replicas sealed; this node's own
// seal is required (it installs the history on itself first).
func (r *recovery) plan(ctx actor.Context) {
	if _, own := r.sealed[r.home.self]; !own {
		return
	}
	reports := make([]replication.SealReport, 0, len(r.sealed))
	for _, replica := range r.home.replicas {
		if report, ok := r.sealed[replica]; ok {
			reports = append(reports, report)
		}
	}
	plan, err := replication.Plan(reports, r.neededNow(), r.home.self)
	if err != nil {
		r.fail(ctx, err.Error())
		return
	}
	source := reports[plan.Source]
	r.timeline.stage(r.core.now(), "source chosen", source.Node, fmt.Sprintf("end %d, last epoch %d", plan.End, source.LastEpoch()))
	// The plan is recorded before anything is cut: no copy destroys a
	// suffix on the strength of a recovery the shard has not accepted.
	r.chosen, r.reports, r.end = plan, reports, plan.End
	r.activate(ctx)
}

// tick resends seals that went unanswered, and retries a failed step.
func (r *recovery) tick(ctx actor.Context) {
	switch r.state {
	case recoveryClaiming:
		r.claim(ctx)
	case recoverySealing:
		if !r.graceUntil.IsZero() && !time.Now().Before(r.graceUntil) {
			r.maybePlan(ctx)
			if r.state != recoverySealing {
				return
			}
		}
		for _, replica := range r.home.replicas {
			if _, done := r.sealed[replica]; done {
				continue
			}
			if time.Since(r.sentAt[replica]) >= recoverySealResend || !slices.Contains(mapValues(r.pending), replica) {
				r.sendSeal(ctx, replica)
			}
		}
		r.after(ctx, recoverySealResend)
	case recoveryActivating:
		r.activate(ctx)
	}
}

func mapValues(m map[uint64]string) []string {
	values := make([]string, 0, len(m))
	for _, value := range m {
		values = append(values, value)
	}
	return values
}

func (r *recovery) after(ctx actor.Context, delay time.Duration) {
	r.tickGen++
	generation, self, system := r.tickGen, ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(delay, func() { system.Root.Send(self, recoveryTick{generation: generation}) })
}

// activate records the new epoch and its first offset.
func (r *recovery) activate(ctx actor.Context) {
	r.state = recoveryActivating
	node, shardID, epoch, end := r.home.node, r.home.shardID, r.epoch, r.end
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		activateCtx, cancel := context.WithTimeout(context.Background(), recoveryRaftTimeout)
		defer cancel()
		state, won, err := node.ActivateEpoch(activateCtx, shardID, epoch, end)
		system.Root.Send(self, activateResult{state: state, won: won, err: err})
	}()
}

func (r *recovery) activated(ctx actor.Context, msg activateResult) {
	switch {
	case msg.err != nil:
		r.note = "activation failed: " + msg.err.Error()
		r.after(ctx, recoveryRetry)
		return
	case !msg.won:
		r.fail(ctx, fmt.Sprintf("the activation of epoch %d was refused (the shard is at epoch %d, owner %s)",
			r.epoch, msg.state.Epoch, msg.state.Owner))
		return
	}
	r.state = recoveryDone
	r.timeline.stage(r.core.now(), "activated", "", fmt.Sprintf("epoch %d from %d", r.epoch, r.end))
	ctx.Send(r.partition, recoveryPlanned{epoch: r.epoch, plan: r.chosen, reports: r.reports, state: msg.state})
	r.core.registry.StopActor(ctx, ctx.Self(), runtime.StopDone)
}

func (r *recovery) fail(ctx actor.Context, reason string) {
	r.state, r.note = recoveryDone, reason
	r.timeline.finish(r.core.now(), r.epoch, "failed: "+reason)
	ctx.Send(r.partition, recoveryFailed{reason: reason})
	r.core.registry.StopActor(ctx, ctx.Self(), runtime.StopDone)
}
