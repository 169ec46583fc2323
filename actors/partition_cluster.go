package actors

// A partition in a cluster: one actor per replica of a queue partition, on
// every node of its replica set, whose role follows the partition's
// coordination shard (cluster/coord.go).
//
// Roles:
//
//	replica     the queue is open with queue.OpenReplica; it serves no
//	            client. It appends what the owner pushes (partition_replica.go),
//	            fetches what it lacks, answers seals and page requests.
//	recovering  this node leads the coordination shard but is not its
//	            serving owner: a recovery child (recovery.go) claims the next
//	            epoch, seals the replicas and plans; the partition cuts and
//	            fetches to install the chosen history, promotes its queue
//	            under the new epoch and pushes the history to the followers;
//	            once W copies hold it, the epoch is activated.
//	owner       the queue is promoted and its epoch active: it serves clients
//	            (the manager lists it in the directory), pushes every record
//	            to its followers through one follower link each
//	            (follower_link.go) and applies, confirms and delivers only up
//	            to the quorum frontier (partition_quorum.go).
//
// Transitions, on every coordination view (coordinationView, from the
// manager) and on the partition's own events:
//
//	replica    → owner       the view names this process's instance the
//	                         serving owner and this node leads (epoch 1 of a
//	                         new partition: nothing to recover)
//	replica    → recovering  this node leads but does not serve
//	recovering → owner       the recovery activated its epoch
//	owner, recovering → replica
//	                         this node no longer leads, the view names another
//	                         owner, a follower is sealed at a newer epoch, or
//	                         the recovery failed: the queue is closed and
//	                         opened again as a replica (stepDown)
//
// A restarted process is a new instance, so it starts as a replica and is
// never the serving owner of an epoch it did not claim itself: it serves
// again only through a recovery.
//
// Messages taken here: coordinationView (manager); linkProgress, linkStale
// (follower links); recoveryPlanned, recoveryFailed
// (recovery child); the replica's messages (partition_replica.go) and
// its snapshot catch-up's (partition_snapshot.go). Sent:
// partitionServing, partitionNotServing (manager).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// replicaHome is the cluster part of a partition's home: what does not
// change while the partition lives.
type replicaHome struct {
	shardID  uint64
	replicas []string // placement order; the first is the preferred owner
	copies   int      // W: copies every confirm stands on, owner included
	node     *cluster.Node
	self     string
	instance uint64
	// timeline keeps the partition's last recoveries for operators.
	timeline *failoverTimeline
}

// countedReadTimeout bounds the read copyMayHaveCounted makes.
const countedReadTimeout = 2 * time.Second

// copyMayHaveCounted reports whether the coordination shard, read
// linearizably, says a copy on this node may have counted toward a
// confirm of the partition (cluster.CoordState.MayHaveCounted: the
// partition confirmed, and this node is a voter). A copy created empty on
// a node whose copies never counted lost nothing a confirm stood on and
// starts complete. It blocks on Raft (the open goroutine calls it); when
// the read fails it answers true, and the copy starts incomplete.
func (h *replicaHome) copyMayHaveCounted() bool {
	ctx, cancel := context.WithTimeout(context.Background(), countedReadTimeout)
	defer cancel()
	state, err := h.node.ReadCoordination(ctx, h.shardID)
	return err != nil || state.MayHaveCounted(h.self)
}

type partitionRole uint8

const (
	roleSingle partitionRole = iota // a single node: no replication
	roleReplica
	roleRecovering
	roleOwner
)

func (r partitionRole) String() string {
	switch r {
	case roleSingle:
		return "single"
	case roleReplica:
		return "replica"
	case roleRecovering:
		return "recovering"
	case roleOwner:
		return "owner"
	}
	return "role(?)"
}

// clusterState is a partition's cluster state, owned by its Receive.
type clusterState struct {
	role  partitionRole
	view  cluster.PartitionView
	fence uint64 // the newest epoch sealed at or accepted (fence.go)
	epoch uint64 // the epoch this partition owns or recovers
	// incomplete says this copy opened empty and has not caught up past a
	// committed frontier since (fence.go): its seal does not count.
	// completeAt is the durable end that makes it complete (0: not known
	// yet), from the last push of the active epoch's owner.
	incomplete    bool
	completeAt    uint64
	completeKnown bool
	// recorded is the coordination shard's state after this partition's
	// last proposal of voters (partition_quorum.go maybeRecordVoters);
	// recording says one is in flight.
	recorded  cluster.CoordState
	recording bool
	// cutOffSince is when this owner last began to be cut off
	// (replication.OwnerCutOff); zero while it is not.
	cutOffSince time.Time
	// diskWatch judges the owner's own log by its progress; diskCheckArmed
	// says its timer runs; stallFenced says this copy fenced because its
	// disk stalled, and reopens itself once the disk answers again
	// (partition_diskwatch.go).
	diskWatch      replication.DiskWatch
	diskCheckArmed bool
	stallFenced    bool
	// fetchDiverged says a catch-up page did not agree with this log
	// below its end (replication.PageAgrees): the next push behind the
	// end is refused with the history, so the owner finds the divergence.
	fetchDiverged bool

	// Owner and recovering: the follower links and what they report.
	links     map[string]*actor.PID
	followers map[string]replication.ReplicaProgress
	// commitWait times how long written records wait for the quorum
	// frontier (partition_commit.go).
	commitWait commitWait
	// linkReports is each follower link's last report: its state for
	// operators, whether it counts toward admission, what it holds of
	// retention.
	linkReports map[string]linkProgress
	committed   uint64 // the quorum frontier at the queue's boundary
	// installEnd is the chosen history's end while recovering: the epoch
	// activates once W copies hold it. promoted is set once this node's
	// queue holds it under the new epoch (the followers are pushed to).
	installEnd   uint64
	promoted     bool
	installed    bool
	activated    cluster.CoordState // the recovery's epoch, as the shard activated it
	recoveryPID  *actor.PID
	recoveryStep string

	// Replica: the owner's link to answer on, the progress last reported,
	// and the fetch in flight.
	ownerReply   peerReply
	ownerNode    string
	ownerEpoch   uint64
	ownerHeardAt time.Time // the owner's last push (records or keepalive)
	// ownerCommitted is the highest committed frontier an owner reported
	// on a push this copy took: a replica applies only below it
	// (replicaApplyLimit), so nothing it applies, checkpoints or compacts
	// against can be cut by a later recovery.
	ownerCommitted uint64
	// leadershipOfferedAt rate-limits giving the coordination leadership
	// back to a live owner; leadershipOffers counts the offers made while
	// this replica kept leading, and doubles the wait after each (up to
	// leadershipOfferWaitMax): on a starved machine the leadership moves
	// faster than the owner can keep it, and every offer is one more
	// election.
	leadershipOfferedAt time.Time
	leadershipOffers    int
	// watchingSince is when this replica opened or learned of the serving
	// owner's epoch (watchingEpoch): an owner it has not heard from since
	// counts as silent only ownerSilenceMax after it (ownerNotHeardYet).
	watchingSince time.Time
	watchingEpoch uint64
	reported      [2]uint64 // durable, written last sent
	fetch         *fetchState
	snapshot      snapshotCatchUp // a catch-up from below the source's retained records (partition_snapshot.go)
	// appendsInFlight counts batches handed to the log whose completion
	// has not arrived; pendingEnd and pendingHistory are the log's end and
	// epoch history once they are staged (replicaLogView).
	appendsInFlight int
	pendingEnd      uint64
	pendingHistory  []replication.HistoryEntry
	// sealsWaiting hold seals until appendsInFlight drains.
	sealsWaiting []sealRequest
	serving      bool
	stepDownNote string
}

// Messages of a cluster partition.
type (
	// coordinationView is the manager's latest view of the partition.
	coordinationView struct{ view cluster.PartitionView }
	// linkProgress is a follower link's report of its follower: its
	// counted progress, its state for operators (replication.LinkHealth),
	// whether it counts toward admission, and the durable position it
	// holds the owner's retention at (holdsRetention false: none).
	linkProgress struct {
		node           string
		progress       replication.ReplicaProgress
		state          string
		admits         bool
		stalled        bool
		lagRecords     uint64
		retention      uint64
		holdsRetention bool
		// at is when the link sent the report; a link sends one at least
		// every linkReportRefresh while it runs, so an older one is stale
		// (the link stopped running) and keeps nobody up.
		at time.Time
	}
	// linkStale says a follower is sealed at a newer epoch.
	linkStale struct {
		node  string
		epoch uint64
	}
)

// isReplicated reports whether this partition runs in a cluster.
func (p *partition) isReplicated() bool { return p.home.replication != nil }

// openReplicated opens the queue as a replica (cluster mode); it runs on
// the open goroutine. A directory whose fence names another coordination
// shard holds an earlier declaration of the queue's name: it is removed
// first (queue names are reused across deletes; shard ids never are). A
// partition opened for the first time records its shard in a fence of
// epoch 0, marked incomplete (fence.go) when mayHaveCounted says a copy on
// this node may have counted toward a confirm: a directory made now holds
// nothing, and this node may have lost what it held. Otherwise no copy on
// this node ever counted (the partition never confirmed, or this node was
// never one of its voters), so it lost nothing a confirm stood on and
// starts complete. It returns the fence.
func openReplicated(fs vfs.FS, dataDir, dir, name string, shardID, unique uint64, mayHaveCounted func() bool,
	options queue.Options, logOptions log.Options, clock queue.Clock, open ...queue.OpenOption) (*queue.Queue, fenceRecord, error) {
	fence, exists, err := readFence(fs, dir)
	if err != nil {
		return nil, fenceRecord{}, fmt.Errorf("read the replica's fence: %w", err)
	}
	if exists && fence.shardID != shardID {
		if err := removeQueueFiles(fs, dataDir, name, unique); err != nil {
			return nil, fenceRecord{}, fmt.Errorf("remove the files of an earlier declaration (shard %d) of the name: %w", fence.shardID, err)
		}
		fence, exists = fenceRecord{}, false
	}
	q, err := queue.OpenReplica(dir, options, logOptions, clock, open...)
	if err != nil && (errors.Is(err, log.ErrInteriorCorruption) || errors.Is(err, log.ErrCorrupt)) {
		// A replica's copy is redundant: the owner and the other copies
		// hold its history. A damaged one is set aside (never deleted) and
		// the replica starts empty behind the same fence, so it catches up
		// through the pull path instead of leaving the partition a copy
		// short for good. It is incomplete: it lost records it may have
		// acknowledged, so its seal counts for nothing until it caught up.
		damaged := fmt.Sprintf("%s.damaged-%d", dir, unique)
		if moveErr := moveFiles(fs, dir, damaged); moveErr != nil {
			return nil, fenceRecord{}, fmt.Errorf("%w (and setting the damaged copy aside failed: %v)", err, moveErr)
		}
		if q, err = queue.OpenReplica(dir, options, logOptions, clock, open...); err != nil {
			return nil, fenceRecord{}, err
		}
		// The same fence epoch: the new copy refuses what the old one refused.
		fence.shardID, fence.incomplete = shardID, mayHaveCounted()
		if err := writeFence(fs, dir, fence); err != nil {
			_ = q.Close()
			return nil, fenceRecord{}, fmt.Errorf("record the replica's fence after setting its damaged copy aside: %w", err)
		}
		exists = true
	}
	if err != nil {
		return nil, fenceRecord{}, err
	}
	if !exists {
		fence = fenceRecord{shardID: shardID, incomplete: mayHaveCounted()}
		if err := writeFence(fs, dir, fence); err != nil {
			_ = q.Close()
			return nil, fenceRecord{}, fmt.Errorf("record the replica's fence: %w", err)
		}
	}
	return q, fence, nil
}

// clusterOpened runs when a cluster partition's queue opened (as a
// replica): it takes its fence and its role from the current view.
func (p *partition) clusterOpened(ctx actor.Context, fence fenceRecord) {
	home := p.home.replication
	if p.repl == nil {
		p.repl = &clusterState{links: map[string]*actor.PID{},
			followers: map[string]replication.ReplicaProgress{}, linkReports: map[string]linkProgress{}}
	}
	p.repl.role, p.repl.appendsInFlight = roleReplica, 0
	p.repl.watchingSince, p.repl.watchingEpoch = time.Now(), 0
	for _, seal := range p.repl.sealsWaiting {
		defer p.seal(ctx, seal) // its appends ended with the old queue
	}
	p.repl.sealsWaiting = nil
	p.repl.fence = max(p.repl.fence, fence.epoch, p.q.Epoch())
	p.repl.incomplete = fence.incomplete
	if view, ok := home.node.Partition(home.shardID); ok {
		p.followView(ctx, view)
	}
}

// receiveCluster handles the cluster messages; false for others.
func (p *partition) receiveCluster(ctx actor.Context, message any) bool {
	if !p.isReplicated() {
		return false
	}
	switch msg := message.(type) {
	case coordinationView:
		p.followView(ctx, msg.view)
	case replicaPush:
		p.replicaPush(ctx, msg)
	case replicaAppended:
		p.replicaAppended(ctx, msg)
	case pageRequest:
		p.servePage(ctx, msg)
	case snapshotRequest:
		p.serveSnapshot(msg)
	case sealRequest:
		p.seal(ctx, msg)
	case sealFinished:
		p.sealFinished(ctx, msg)
	case peerAnswer:
		p.peerAnswered(ctx, msg)
	case peerRequestFailed:
		p.peerFailed(ctx, msg)
	case fetchRetry:
		p.maybeFetch(ctx)
	case snapshotRetry:
		p.snapshotRetried(ctx, msg)
	case linkProgress:
		p.followerReported(ctx, msg)
	case linkStale:
		p.stepDown(ctx, fmt.Sprintf("follower %s is sealed at epoch %d, newer than this owner's %d", msg.node, msg.epoch, p.repl.epoch))
	case recoveryClaimed:
		if p.repl.role == roleRecovering {
			p.repl.epoch = msg.epoch
		}
	case recoveryPlanned:
		p.installPlan(ctx, msg)
	case confirmedResult:
		p.confirmedAnswered(ctx, msg)
	case confirmedRetry:
		p.repl.recording = false
		if p.recomputeQuorum(ctx) {
			p.advance(ctx)
		}
	case recoveryFailed:
		p.recoveryFailed(ctx, msg)
	case recheckCoordination:
		if view, ok := p.home.replication.node.Partition(p.home.replication.shardID); ok {
			p.followView(ctx, view)
		}
	default:
		return false
	}
	return true
}

// maybeReplicationAdvance runs before every Advance of a cluster
// partition: an owner moves its apply limit to the quorum frontier (its
// own position may have moved), a replica reports its progress.
func (p *partition) maybeReplicationAdvance(ctx actor.Context) {
	if !p.isReplicated() || p.repl == nil {
		return
	}
	if p.repl.role == roleReplica {
		p.snapshotBeforeAdvance(ctx)
		p.maybeCapReplicaApplies()
		p.reportProgress(false)
		return
	}
	p.recomputeQuorum(ctx)
	p.maybeFinishInstall(ctx)
}

// refuseUnlessOwner answers a client's request with not_owner when this
// partition does not serve (a session routed it before the directory
// changed, or holds a subscription from before a step down); true when it
// did.
func (p *partition) refuseUnlessOwner(ctx actor.Context, message any) bool {
	if !p.isReplicated() || (p.repl != nil && p.repl.role == roleOwner) {
		return false
	}
	switch message.(type) {
	case publishBatch, subscribeRequest, unsubscribeRequest, settleRequest, purgeRequest, syncRequest:
	default:
		return false
	}
	role := "replica"
	if p.repl != nil {
		role = p.repl.role.String()
	}
	p.refuse(ctx, message, requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
		"queue %q is not served by this node (it is a %s here); ask the cluster for its owner", p.home.name, role)})
	return true
}

// addClusterInfo adds what this copy knows of the partition's replication
// to its info: the coordination's owner and epoch, and on the owner the
// quorum frontier and every copy's progress and link state. A replica
// leaves Replicas empty (withClusterInfo lists the replica set from the
// catalog, with this copy's own positions).
func (p *partition) addClusterInfo(info *wire.QueueInfo) {
	if !p.isReplicated() || p.repl == nil {
		return
	}
	r, home := p.repl, p.home.replication
	info.Owner, info.Epoch = r.view.State.Owner, r.view.State.Epoch
	if r.role != roleOwner && r.role != roleRecovering {
		return
	}
	info.CommittedNext = r.committed
	info.Replicas = make([]wire.ReplicaInfo, 0, len(home.replicas))
	for _, replica := range home.replicas {
		if replica == home.self {
			state := "owner"
			if r.role == roleRecovering {
				state = "recovering (" + r.recoveryStep + ")"
			}
			info.Replicas = append(info.Replicas, wire.ReplicaInfo{Node: replica, WrittenNext: info.WrittenNext,
				DurableNext: info.DurableNext, State: state})
			continue
		}
		progress := r.followers[replica]
		info.Replicas = append(info.Replicas, wire.ReplicaInfo{Node: replica, WrittenNext: progress.WrittenNext,
			DurableNext: progress.DurableNext, State: r.linkReports[replica].stateAt(time.Now())})
	}
	p.countCopiesAtTheFrontier(info)
	info.CommitWaitMs = uint64(r.commitWait.wait(time.Now(), r.committed).Milliseconds())
}

// stateAt is the report's state for operators at now: a report older
// than linkReportStaleAfter says so, since the link that sent it no
// longer reports (the owner's cut-off rule stops counting it then).
func (report linkProgress) stateAt(now time.Time) string {
	if report.at.IsZero() || report.freshAt(now) {
		return report.state
	}
	return fmt.Sprintf("no report for %.1fs (last: %s)", now.Sub(report.at).Seconds(), report.state)
}

// freshAt reports whether the report is younger than
// linkReportStaleAfter at now. A stale report comes from a link that no
// longer reports: it says nothing about the follower now, so it neither
// admits publishes, nor counts a copy at the frontier, nor keeps a cut-off
// owner serving.
func (report linkProgress) freshAt(now time.Time) bool {
	return !report.at.IsZero() && now.Sub(report.at) < linkReportStaleAfter
}

// followView applies a coordination view: the role follows who leads and
// who serves.
func (p *partition) followView(ctx actor.Context, view cluster.PartitionView) {
	if p.repl == nil || p.q == nil || p.state != partitionOpen {
		if p.repl != nil {
			p.repl.view = view
		}
		return
	}
	home, r := p.home.replication, p.repl
	r.view = view
	serving := view.State.Serving(home.self, home.instance)
	switch r.role {
	case roleOwner:
		// Authority is the epoch, not the Raft leadership: a follower that
		// took the leadership while this owner was slow gives it back (or,
		// if it finds the owner silent, claims a newer epoch and seals the
		// followers, which fences this owner).
		if !serving {
			p.stepDown(ctx, fmt.Sprintf("the coordination shard names owner %s (epoch %d, %s); its leader is %q",
				view.State.Owner, view.State.Epoch, view.State.Phase, view.Leader))
			break
		}
		p.maybeStepDownCutOff(ctx)
	case roleRecovering:
		if !view.SelfLeads {
			p.stepDown(ctx, fmt.Sprintf("lost the coordination shard's leadership to %q while recovering", view.Leader))
		}
	case roleReplica:
		if !view.SelfLeads {
			r.leadershipOffers = 0 // the leadership moved on: the next offer is prompt again
		}
		if view.State.Epoch != r.watchingEpoch {
			r.watchingSince, r.watchingEpoch = time.Now(), view.State.Epoch
		}
		notHeardFor, waiting := p.ownerNotHeardYet(view.State)
		switch {
		case view.SelfLeads && serving && view.State.Epoch == 1 && len(view.State.History) == 1:
			// The first epoch of a partition nobody served: nothing to
			// recover, this process claimed it.
			p.becomeOwner(ctx, view.State)
		case view.SelfLeads && p.ownerAlive(view.State):
			// The leadership moved but the owner is alive (it pushed a
			// moment ago on a live link): hand the leadership back rather
			// than fail over a working owner; look again shortly.
			p.maybeReturnLeadership(ctx, view)
		case view.SelfLeads && waiting:
			// This replica opened, or learned of the owner's epoch, a moment
			// ago: the owner has had no chance to reach it yet. Silence
			// counts from then, not from a push that could not have come.
			self, system := ctx.Self(), ctx.ActorSystem()
			time.AfterFunc(notHeardFor, func() { system.Root.Send(self, recheckCoordination{}) })
		case view.SelfLeads:
			p.startRecovery(ctx)
		}
	}
	p.publishSummary()
}

// ownerSilenceMax is how long a replica that leads the coordination shard
// waits for word from the serving owner before it takes the partition
// over: twice an idle owner's keepalive interval.
const ownerSilenceMax = 2 * linkKeepalive

// leadershipOfferWaitMax bounds the wait between two offers of the
// coordination leadership to a live owner.
const leadershipOfferWaitMax = 5 * time.Second

// ownerAlive reports whether the serving owner of state pushed to this
// replica within ownerSilenceMax, on a link that is still open.
func (p *partition) ownerAlive(state cluster.CoordState) bool {
	r := p.repl
	return state.Phase == cluster.PhaseActive && r.ownerNode == state.Owner && r.ownerEpoch == state.Epoch &&
		r.ownerReply != nil && r.ownerReply.alive() && time.Since(r.ownerHeardAt) < ownerSilenceMax
}

// ownerNotHeardYet reports whether the serving owner of state has not
// pushed to this replica since it started watching that epoch, less than
// ownerSilenceMax ago; wait is what is left of that grace.
func (p *partition) ownerNotHeardYet(state cluster.CoordState) (wait time.Duration, waiting bool) {
	r := p.repl
	if state.Phase != cluster.PhaseActive {
		return 0, false
	}
	if r.ownerNode == state.Owner && r.ownerEpoch == state.Epoch && r.ownerHeardAt.After(r.watchingSince) {
		return 0, false // heard: ownerAlive decides
	}
	wait = ownerSilenceMax - time.Since(r.watchingSince)
	return wait, wait > 0
}

// maybeReturnLeadership asks the coordination shard to move its leadership
// to the live owner (at once, then at doubling waits while this replica
// keeps leading) and looks at the
// view again once the owner's silence would exceed ownerSilenceMax.
func (p *partition) maybeReturnLeadership(ctx actor.Context, view cluster.PartitionView) {
	r, home := p.repl, p.home.replication
	self, system := ctx.Self(), ctx.ActorSystem()
	wait := min(linkProbeRetry<<min(r.leadershipOffers, 8), leadershipOfferWaitMax)
	if time.Since(r.leadershipOfferedAt) >= wait {
		r.leadershipOfferedAt = time.Now()
		r.leadershipOffers++
		node, shardID, owner := home.node, home.shardID, view.State.Owner
		p.core.logger.Info("the coordination leader is not the owner, which is alive; handing the leadership back",
			"queue", p.home.name, "owner", owner, "epoch", view.State.Epoch)
		go func() { _ = node.TransferLeadership(shardID, owner) }()
	}
	recheck := max(ownerSilenceMax-time.Since(r.ownerHeardAt), 10*time.Millisecond)
	time.AfterFunc(min(recheck, linkProbeRetry), func() { system.Root.Send(self, recheckCoordination{}) })
}

// becomeOwner promotes the queue if it is still a replica, starts the
// follower links and lists the partition in the directory.
func (p *partition) becomeOwner(ctx actor.Context, state cluster.CoordState) {
	r := p.repl
	if p.q.IsReplica() {
		if _, err := p.q.Promote(state.Epoch); err != nil {
			p.core.logger.Warn("could not promote the replica; recovering instead", "queue", p.home.name,
				"epoch", state.Epoch, "err", err)
			if errors.Is(err, queue.ErrEpochStale) {
				p.startRecovery(ctx)
				return
			}
			p.maybeFence(ctx, err)
			return
		}
		r.epoch = state.Epoch
		p.spawnLinks(ctx)
	}
	if r.fetch != nil {
		// A catch-up this copy began as a replica (from the old owner, at
		// the old epoch) ends here: the owner's history is the one the
		// recovery chose. Left running it was refused by the sealed old
		// owner again and again, and the queue stopped delivering.
		p.core.logger.Info("the new owner drops a catch-up it began as a replica", "queue", p.home.name,
			"source", r.fetch.source, "fetch_epoch", r.fetch.epoch, "epoch", state.Epoch)
		r.fetch = nil
	}
	r.role, r.epoch, r.recoveryPID, r.recoveryStep = roleOwner, state.Epoch, nil, ""
	r.fence = max(r.fence, state.Epoch)
	p.becomeComplete() // an owner holds its epoch's history
	p.maybeArmDiskCheck(ctx)
	p.recomputeQuorum(ctx)
	p.maybeAnnounceServing(ctx)
	p.advance(ctx)
	p.publishSummary()
}

// maybeAnnounceServing lists the owner in the directory once W copies
// count: a fresh owner's followers answer their first probe within a
// round trip, and until then its requests wait in the manager rather than
// meet unavailable. Once listed it stays listed while it owns the queue: a
// follower lost later makes publishes unavailable (admitsPublishes).
func (p *partition) maybeAnnounceServing(ctx actor.Context) {
	r := p.repl
	if r.role != roleOwner || r.serving {
		return
	}
	if admitted, _ := p.admitsPublishes(); !admitted {
		return
	}
	r.serving = true
	ctx.Send(p.home.manager, partitionServing{name: p.home.name, pid: ctx.Self()})
	p.core.logger.Info("partition serves as owner", "queue", p.home.name, "epoch", r.epoch)
	now := p.core.now()
	if took, recovered := p.home.replication.timeline.finish(now, r.epoch, "serving"); recovered {
		replication := p.core.metrics.replication
		replication.failovers.WithLabelValues(p.home.name).Inc()
		replication.failoverSeconds.WithLabelValues(p.home.name).Observe(took.Seconds())
	}
}

// stepDown stops owning or recovering: the manager takes the partition out
// of the directory, what it owed is answered (appended publishes with
// outcome_unknown: a new owner may or may not hold them), the follower
// links stop, and the queue reopens as a replica.
func (p *partition) stepDown(ctx actor.Context, reason string) { p.stepDownWith(ctx, reason, false) }

// stepDownWith steps down; cutOff says the owner stepped down because it
// is cut off from its peers (requestFailure.cutOff).
func (p *partition) stepDownWith(ctx actor.Context, reason string, cutOff bool) {
	r := p.repl
	if r.role != roleOwner && r.role != roleRecovering {
		return
	}
	p.core.logger.Warn("partition steps down", "queue", p.home.name, "epoch", r.epoch, "role", r.role.String(), "reason", reason)
	failure := requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
		"queue %q changed owner: %s", p.home.name, reason), cutOff: cutOff}
	if r.serving {
		r.serving = false
		ctx.Send(p.home.manager, partitionNotServing{name: p.home.name, pid: ctx.Self(), failure: failure})
	}
	p.refuseOwedUnknown(ctx, failure)
	p.home.subscribers.endAll(ctx, failure)
	p.stopLinks(ctx)
	if r.recoveryPID != nil {
		p.core.registry.StopActor(ctx, r.recoveryPID, runtime.StopDone)
		r.recoveryPID = nil
	}
	r.role, r.stepDownNote, r.installEnd, r.promoted, r.installed = roleReplica, reason, 0, false, false
	if !p.q.IsReplica() {
		p.reopenAsReplica(ctx)
	}
	p.publishSummary()
}

// reopenAsReplica closes the promoted queue and opens it again as a
// replica, the way a fenced queue is reopened (reopen.go); requests wait
// meanwhile.
func (p *partition) reopenAsReplica(ctx actor.Context) {
	p.core.logger.Info("reopening the queue as a replica", "queue", p.home.name)
	p.beginReopen(ctx)
}

// failoverTimeline keeps the last recoveries of a partition, each with its
// stages in microseconds from the recovery's start. The partition and its
// recovery child write it and the info path reads it, so it has its own
// lock (held only to copy or append).
type failoverTimeline struct {
	mu         sync.Mutex
	recoveries []FailoverRecord // newest last, at most failoverRecordsMax
	current    *FailoverRecord
	start      time.Time
}

// records returns a copy of the finished recoveries, oldest first.
func (t *failoverTimeline) records() []FailoverRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]FailoverRecord(nil), t.recoveries...)
}

// failoverRecordsMax bounds the recoveries a partition remembers.
const failoverRecordsMax = 16

// FailoverRecord is one recovery of a partition, for operators.
type FailoverRecord struct {
	Epoch     uint64          `json:"epoch"`
	StartedAt time.Time       `json:"started_at"`
	Stages    []FailoverStage `json:"stages"`
	Outcome   string          `json:"outcome"`
}

// FailoverStage is one step of a recovery.
type FailoverStage struct {
	Stage  string `json:"stage"`
	Peer   string `json:"peer,omitempty"`
	Micros int64  `json:"micros"` // since the recovery started
	Detail string `json:"detail,omitempty"`
}

func (t *failoverTimeline) begin(now time.Time, epoch uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start = now
	t.current = &FailoverRecord{Epoch: epoch, StartedAt: now}
}

func (t *failoverTimeline) stage(now time.Time, stage, peer, detail string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addStage(now, stage, peer, detail)
}

func (t *failoverTimeline) addStage(now time.Time, stage, peer, detail string) {
	if t.current == nil {
		return
	}
	t.current.Stages = append(t.current.Stages, FailoverStage{Stage: stage, Peer: peer,
		Micros: now.Sub(t.start).Microseconds(), Detail: detail})
}

// finish ends the recovery in progress, if any, and reports how long it
// took.
func (t *failoverTimeline) finish(now time.Time, epoch uint64, outcome string) (took time.Duration, finished bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.current == nil {
		return 0, false
	}
	took = now.Sub(t.start)
	t.addStage(now, outcome, "", "")
	t.current.Epoch, t.current.Outcome = epoch, outcome
	t.recoveries = append(t.recoveries, *t.current)
	if len(t.recoveries) > failoverRecordsMax {
		t.recoveries = t.recoveries[len(t.recoveries)-failoverRecordsMax:]
	}
	t.current = nil
	return took, true
}

// moveFiles moves every file under from to the same place under to (file
// by file, so it works on every FS the node runs on), then syncs the
// directories it changed.
func moveFiles(fs vfs.FS, from, to string) error {
	names, err := fs.ReadDir(from)
	if err != nil {
		return err
	}
	if err := fs.MkdirAll(to); err != nil {
		return err
	}
	for _, name := range names {
		source, target := from+"/"+name, to+"/"+name
		if _, err := fs.ReadDir(source); err == nil {
			if err := moveFiles(fs, source, target); err != nil {
				return err
			}
			continue
		}
		if err := fs.Rename(source, target); err != nil {
			return err
		}
	}
	if err := fs.SyncDir(to); err != nil {
		return err
	}
	return fs.SyncDir(from)
}
