package cluster

// The reconcile loop is the one goroutine of a Node that owns the set of
// coordination shards the node hosts. It wakes on a kick (the catalog or a
// coordination shard applied a change, a leader changed) or on a tick, and
// makes the node match the catalog:
//
//  1. propose the catalog's init command if the catalog is empty;
//  2. start the coordination shard of every partition whose replica set
//     names this node, and stop (then remove) those no longer in it;
//  3. for every hosted partition nobody ever served, claim the first epoch
//     if this node should (shouldClaimFirst in coord.go): its leader claims
//     when it is the preferred owner; until then the leader and the
//     preferred owner ask for the leadership to move (once per election
//     timeout), and a leader that is not preferred claims itself when the
//     partition stayed ownerless under its leadership for ten election
//     timeouts. Later epochs are claimed by the broker's recovery, which
//     owns the partition's data (actors/recovery.go);
//  4. when this node owns a partition and the catalog's owner hint is older
//     than the coordination epoch, copy the owner into the catalog;
//  5. publish the local view (hosted shards and their states) and signal
//     watchers when it or the catalog revision changed.
//
// Proposals (init, claims, hints, data removal) never run on the loop
// itself: each runs on its own goroutine, at most maxInFlight at once and
// at most one per shard, and reports back on a channel sized to hold every
// in-flight report, so a report never blocks.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
)

const maxInFlight = 64

// localView is what the loop publishes for readers on other goroutines.
// It is immutable once published.
type localView struct {
	revision    uint64
	initialized bool
	shards      map[uint64]hostedView
	// replicaNames maps every node's current Raft replica id (from the
	// catalog) to its node id.
	replicaNames map[uint64]string
}

// hostedView is a hosted coordination shard as last read.
type hostedView struct {
	Queue     string
	Partition int
	Replicas  []string
	// Members and Join are how this node starts the shard: as an initial
	// member with these members, or joining it (it replaced its replica).
	Members map[uint64]string
	Join    bool
	State   CoordState
	// LeaderID is the shard's Raft leader as this node last heard (0 when
	// none is known); LeaderTerm its term.
	LeaderID   uint64
	LeaderTerm uint64
}

// hostedShard is the loop's own record of a coordination shard it started.
type hostedShard struct {
	view           hostedView
	ownerlessSince time.Time
	// ledSince is when this node last became the shard's leader (zero
	// while it does not lead): a non-preferred replica counts its grace
	// from there, so the time an election took is never taken from the
	// preferred owner's chance to claim.
	ledSince time.Time
	// transferOfferedAt is when this node last asked for the leadership of
	// an ownerless shard to move to its preferred owner.
	transferOfferedAt time.Time
}

type operationKind uint8

const (
	operationInit operationKind = iota + 1
	operationClaim
	operationHint
	operationRemove
)

type operationKey struct {
	kind    operationKind
	shardID uint64
}

type operationReport struct {
	key operationKey
	err error
}

// reconciler is the state owned by the loop goroutine.
type reconciler struct {
	node     *Node
	hosted   map[uint64]*hostedShard
	removing map[uint64]bool // stopped shards whose data is still to remove
	inFlight map[operationKey]bool
	reports  chan operationReport
	workers  sync.WaitGroup
	ctx      context.Context // cancelled when the loop returns
	last     *localView
	// nodeListChecked is set once the catalog's node list was compared
	// with this node's config (a difference is logged once).
	nodeListChecked bool
}

func (n *Node) runReconcile() {
	defer close(n.loopDone)
	ctx, cancel := context.WithCancel(context.Background())
	loop := &reconciler{
		node: n, hosted: map[uint64]*hostedShard{}, removing: map[uint64]bool{},
		inFlight: map[operationKey]bool{}, reports: make(chan operationReport, maxInFlight),
		ctx: ctx, last: &localView{},
	}
	defer loop.workers.Wait()
	defer cancel()
	tick := time.NewTicker(max(n.electionTimeout/2, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case report := <-loop.reports:
			loop.finish(report)
		case <-n.kick:
		case <-tick.C:
		}
		loop.pass(time.Now())
	}
}

func (r *reconciler) finish(report operationReport) {
	delete(r.inFlight, report.key)
	if report.key.kind == operationRemove && report.err == nil {
		delete(r.removing, report.key.shardID)
	}
	if report.err != nil && !errors.Is(report.err, context.Canceled) {
		r.node.logger.Debug("cluster operation failed; will retry", "kind", report.key.kind, "shard", report.key.shardID, "error", report.err)
	}
}

// launch runs operation on its own goroutine unless one of the same key is
// in flight or the in-flight limit is reached.
func (r *reconciler) launch(key operationKey, operation func(context.Context) error) {
	if r.inFlight[key] || len(r.inFlight) >= maxInFlight {
		return
	}
	r.inFlight[key] = true
	r.workers.Add(1)
	go func() {
		defer r.workers.Done()
		ctx, cancel := context.WithTimeout(r.ctx, max(4*r.node.electionTimeout, time.Second))
		defer cancel()
		r.reports <- operationReport{key: key, err: operation(ctx)}
	}()
}

func (r *reconciler) pass(now time.Time) {
	n := r.node
	state, err := n.localCatalogState()
	if err != nil {
		return // the catalog replica is not ready yet; the next tick retries
	}
	if !state.Initialized {
		r.launch(operationKey{kind: operationInit}, func(ctx context.Context) error {
			_, err := n.proposeCatalog(ctx, n.initCommand())
			return err
		})
	}
	r.maybeCheckNodeList(state)
	r.startAndStopShards(state)
	for shardID, shard := range r.hosted {
		r.readShard(shardID, shard)
		r.maybeClaim(shardID, shard, now)
		r.maybeHint(shardID, shard, state)
	}
	r.publish(state)
}

// maybeCheckNodeList logs once when the catalog's node list differs from
// this node's config: the catalog keeps the list it was initialised with
// (there is no membership change yet), so the config is the one to fix.
func (r *reconciler) maybeCheckNodeList(state *CatalogState) {
	if r.nodeListChecked || !state.Initialized {
		return
	}
	r.nodeListChecked = true
	configured := r.node.initCommand().Init.Nodes
	// The addresses only: replica ids change when a node is replaced.
	sameNode := func(a, b NodeInfo) bool {
		return a.ID == b.ID && a.ClientAddress == b.ClientAddress && a.PeerAddress == b.PeerAddress &&
			a.RaftAddress == b.RaftAddress && a.HTTPAddress == b.HTTPAddress
	}
	if !slices.EqualFunc(configured, state.Nodes, sameNode) {
		r.node.logger.Error("the config's node list differs from the catalog's; the catalog's is in force",
			"config_nodes", configured, "catalog_nodes", state.Nodes)
	}
}

// startAndStopShards makes the hosted set match the catalog's replica sets.
func (r *reconciler) startAndStopShards(state *CatalogState) {
	n := r.node
	desired := map[uint64]hostedView{}
	for _, queue := range state.Queues {
		for _, partition := range queue.Partitions {
			for _, replica := range partition.Replicas {
				if replica == n.self.ID {
					desired[partition.ShardID] = hostedView{Queue: queue.Name, Partition: partition.Index, Replicas: partition.Replicas,
						Members: n.partitionMembers(partition), Join: slices.Contains(partition.Joined, n.self.ID)}
				}
			}
		}
	}
	for shardID, view := range desired {
		if _, hosted := r.hosted[shardID]; hosted {
			continue
		}
		members, join := view.Members, view.Join
		if join {
			members = nil
		}
		if n.nodeHost.HasNodeInfo(shardID, n.replicaID) {
			// A restart: this replica's bootstrap record is in force. The
			// catalog's member list may have changed since (a replica
			// replaced), and dragonboat refuses a list that differs.
			members, join = nil, false
		}
		err := n.nodeHost.StartReplica(members, join, newCoordMachine(n.kickReconcile), n.raftConfig(shardID))
		if err != nil && !errors.Is(err, dragonboat.ErrShardAlreadyExist) {
			n.logger.Warn("start coordination shard failed; will retry", "queue", view.Queue, "partition", view.Partition, "shard", shardID, "error", err)
			continue
		}
		r.hosted[shardID] = &hostedShard{view: view}
	}
	for shardID, shard := range r.hosted {
		if _, wanted := desired[shardID]; wanted {
			continue
		}
		if err := n.nodeHost.StopShard(shardID); err != nil && !errors.Is(err, dragonboat.ErrShardNotFound) {
			n.logger.Warn("stop coordination shard failed; will retry", "queue", shard.view.Queue, "shard", shardID, "error", err)
			continue
		}
		delete(r.hosted, shardID)
		r.removing[shardID] = true
	}
	for shardID := range r.removing {
		r.launch(operationKey{kind: operationRemove, shardID: shardID}, func(ctx context.Context) error {
			return n.nodeHost.SyncRemoveData(ctx, shardID, n.replicaID)
		})
	}
}

func (r *reconciler) readShard(shardID uint64, shard *hostedShard) {
	shard.view.LeaderID, shard.view.LeaderTerm = 0, 0
	if leaderID, term, valid, err := r.node.nodeHost.GetLeaderID(shardID); err == nil && valid {
		shard.view.LeaderID, shard.view.LeaderTerm = leaderID, term
	}
	value, err := r.node.staleRead(shardID, coordQuery{})
	if err != nil {
		return // not ready yet
	}
	shard.view.State = value.(CoordState)
}

func (r *reconciler) maybeClaim(shardID uint64, shard *hostedShard, now time.Time) {
	n := r.node
	if shard.view.State.Epoch != 0 {
		shard.ownerlessSince = time.Time{}
		return
	}
	if shard.ownerlessSince.IsZero() {
		shard.ownerlessSince = now
	}
	selfLeads := shard.view.LeaderID == n.replicaID
	switch {
	case !selfLeads:
		shard.ledSince = time.Time{}
	case shard.ledSince.IsZero():
		shard.ledSince = now
	}
	waited := now.Sub(shard.ownerlessSince)
	if selfLeads {
		waited = min(waited, now.Sub(shard.ledSince))
	}
	preferred := shard.view.Replicas[0]
	grace := 10 * n.coordinationElectionTimeout
	if shouldOfferFirstTransfer(n.self.ID, preferred, selfLeads, waited, grace) {
		if replicaID, found := n.replicaIDOf(preferred); found && now.Sub(shard.transferOfferedAt) >= n.coordinationElectionTimeout {
			shard.transferOfferedAt = now
			_ = n.nodeHost.RequestLeaderTransfer(shardID, replicaID) // best effort; the grace covers a refusal
		}
	}
	if !shouldClaimFirst(shard.view.State, n.self.ID, preferred, selfLeads, waited, grace) {
		return
	}
	claim := coordCommand{Kind: coordClaim, Owner: n.self.ID, Instance: n.instance, Epoch: 0, UnixMs: now.UnixMilli()}
	r.launch(operationKey{kind: operationClaim, shardID: shardID}, func(ctx context.Context) error {
		_, err := n.proposeCoordination(ctx, shardID, claim) // a refused claim means another won: fine
		return err
	})
}

// maybeHint copies this node's ownership into the catalog when the
// catalog's hint is older.
func (r *reconciler) maybeHint(shardID uint64, shard *hostedShard, state *CatalogState) {
	n := r.node
	coord := shard.view.State
	if coord.Owner != n.self.ID || coord.Phase != PhaseActive {
		return
	}
	queue, found := state.Queues[shard.view.Queue]
	if !found || shard.view.Partition >= len(queue.Partitions) {
		return
	}
	if queue.Partitions[shard.view.Partition].Epoch >= coord.Epoch {
		return
	}
	hint := &ownerHint{Queue: shard.view.Queue, Partition: shard.view.Partition, ShardID: shardID, Owner: coord.Owner, Epoch: coord.Epoch}
	r.launch(operationKey{kind: operationHint, shardID: shardID}, func(ctx context.Context) error {
		_, err := n.proposeCatalog(ctx, catalogCommand{Kind: commandOwnerHint, Hint: hint})
		return err
	})
}

// publish stores the new local view and signals watchers if it changed.
func (r *reconciler) publish(state *CatalogState) {
	view := &localView{revision: state.Revision, initialized: state.Initialized, shards: map[uint64]hostedView{},
		replicaNames: map[uint64]string{}}
	for _, node := range state.Nodes {
		view.replicaNames[node.ReplicaID] = node.ID
	}
	for shardID, shard := range r.hosted {
		view.shards[shardID] = shard.view
	}
	r.node.view.Store(view)
	changed := view.revision != r.last.revision || view.initialized != r.last.initialized ||
		!maps.EqualFunc(view.shards, r.last.shards, func(a, b hostedView) bool {
			return a.State.Epoch == b.State.Epoch && a.State.Owner == b.State.Owner &&
				a.State.Phase == b.State.Phase && a.LeaderID == b.LeaderID && a.LeaderTerm == b.LeaderTerm
		})
	r.last = view
	if changed {
		r.node.notifyWatchers()
	}
}
