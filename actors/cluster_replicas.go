package actors

// The queues manager's side of replication (cluster mode). Every node of a
// partition's replica set opens the partition (as a replica: the catalog,
// not the disk, decides what opens), and the partition's role follows its
// coordination shard (partition_cluster.go). The manager
//
//   - opens every partition whose replica set names this node
//     (catalogChanged → openFromCatalog), with its replicaHome;
//   - forwards each coordination view that changed to its partition
//     (coordinationView), so a partition never reads Raft itself;
//   - keeps the directory honest: a partition is listed as serving only
//     between partitionServing and partitionNotServing; while it is a
//     replica (or recovering) its route carries not_owner, so sessions
//     route its requests by the coordination shard (cluster_session.go);
//   - answers awaits of a queue whose owner is this node but which does not
//     serve yet (its recovery runs) once it serves, once another node owns
//     it (reroute), or after clusterOwnerWait (unavailable);
//   - removes the files of queues found on disk that the catalog no longer
//     lists for this node, once the catalog was read through Raft.
//
// Takes: partitionReplicaOpened, partitionServing, partitionNotServing
// (partitions), awaitDeadline (its timers). Sends: coordinationView.
//
// Invariant: a record in state ready in cluster mode is a partition that
// said partitionServing and has not said partitionNotServing since.

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// Messages between the manager and its cluster partitions.
type (
	// partitionReplicaOpened: the partition opened its queue as a replica.
	partitionReplicaOpened struct {
		name string
		pid  *actor.PID
	}
	// partitionServing: the partition serves clients as the owner.
	partitionServing struct {
		name string
		pid  *actor.PID
	}
	// partitionNotServing: the partition stopped serving (it stepped down).
	partitionNotServing struct {
		name    string
		pid     *actor.PID
		failure requestFailure
	}
	// awaitDeadline says waiters of a queue may have passed their deadline.
	awaitDeadline struct{ name string }
	// filesRemoved reports the removal of a queue found on disk that the
	// catalog does not give to this node.
	filesRemoved struct {
		name string
		err  error
	}
)

// settleWaiter is something waiting for a record to settle.
type settleWaiter struct {
	then     func(record *queueRecord)
	deadline time.Time
}

// receiveReplicas handles the replication messages; false for others.
func (m *queuesManager) receiveReplicas(ctx actor.Context, message any) bool {
	switch msg := message.(type) {
	case partitionReplicaOpened:
		m.partitionReplicaOpened(msg)
	case partitionServing:
		m.partitionServing(ctx, msg)
	case partitionNotServing:
		m.partitionNotServing(msg)
	case awaitDeadline:
		m.awaitDeadlinePassed(msg)
	case filesRemoved:
		if msg.err != nil {
			m.core.logger.Warn("could not remove a queue the catalog no longer gives to this node", "queue", msg.name, "err", msg.err)
		}
	default:
		return false
	}
	return true
}

// recordOfPartition is the record whose current partition is pid.
func (m *queuesManager) recordOfPartition(name string, pid *actor.PID) (*queueRecord, bool) {
	record, ok := m.queues[name]
	if !ok || record.state == queueDeleting || record.pid == nil || record.pid.Id != pid.Id {
		return nil, false
	}
	return record, true
}

// replicaFailure is the route of a partition that does not serve here.
func replicaFailure(name string) requestFailure {
	return requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
		"queue %q is a replica on this node; its owner serves it", name)}
}

func (m *queuesManager) partitionReplicaOpened(msg partitionReplicaOpened) {
	record, ok := m.recordOfPartition(msg.name, msg.pid)
	if !ok {
		return
	}
	m.maybeRecoveredOne(record)
	if record.state == queueOpening || record.state == queueFailed {
		record.state, record.failure, record.reopening = queueReplica, requestFailure{}, false
		m.core.directory.fail(record.name, record.pid, replicaFailure(record.name))
	}
	m.answerReopeners(record, nil)
	m.maybeSettleClusterWaiters(record)
}

func (m *queuesManager) partitionServing(ctx actor.Context, msg partitionServing) {
	if _, ok := m.recordOfPartition(msg.name, msg.pid); ok {
		m.partitionReady(ctx, partitionReady{name: msg.name, pid: msg.pid})
	}
}

func (m *queuesManager) partitionNotServing(msg partitionNotServing) {
	record, ok := m.recordOfPartition(msg.name, msg.pid)
	if !ok || record.state != queueReady {
		return
	}
	record.state = queueReplica
	m.core.directory.fail(record.name, record.pid, msg.failure)
	m.maybeSettleClusterWaiters(record)
}

// ownedElsewhere reports whether the coordination shard (as this node
// last saw it) names another node the partition's owner (claimed or
// serving), and that node is reachable. While it names none, this node,
// or a node whose peer link is down (its owner is likely gone and a
// failover is under way), requests wait here rather than follow a
// redirect to a dead address.
func (m *queuesManager) ownedElsewhere(name string) bool {
	owner, err := m.cluster.node.Owner(name, 0)
	return err == nil && !owner.IsSelf && !m.core.peerUnreachable(owner.NodeID)
}

// settled reports whether what waits on a record can be answered now.
func (m *queuesManager) settled(record *queueRecord) bool {
	switch record.state {
	case queueReady, queueFailed, queueDeleting:
		return true
	case queueReplica:
		return m.ownedElsewhere(record.name)
	}
	return false
}

// whenSettled runs then once the record serves, failed, is deleted, or is
// a replica another node owns, or once clusterOwnerWait passed; at once
// when it already is settled.
func (m *queuesManager) whenSettled(record *queueRecord, then func(*queueRecord)) {
	if m.settled(record) {
		then(record)
		return
	}
	m.cluster.awaiting[record.name] = append(m.cluster.awaiting[record.name],
		settleWaiter{then: then, deadline: time.Now().Add(clusterOwnerWait)})
	name, send := record.name, m.cluster.send
	time.AfterFunc(clusterOwnerWait, func() { send(awaitDeadline{name: name}) })
}

// maybeSettleClusterWaiters answers what waits on a record that settled.
// Called wherever a record changes state, and after every catalog or
// coordination change.
func (m *queuesManager) maybeSettleClusterWaiters(record *queueRecord) {
	if m.cluster == nil || !m.settled(record) {
		return
	}
	waiting := m.cluster.awaiting[record.name]
	delete(m.cluster.awaiting, record.name)
	for _, waiter := range waiting {
		waiter.then(record)
	}
}

// awaitDeadlinePassed answers the waiters of a queue whose deadline
// passed, with the record as it is.
func (m *queuesManager) awaitDeadlinePassed(msg awaitDeadline) {
	waiting := m.cluster.awaiting[msg.name]
	record, ok := m.queues[msg.name]
	now, kept := time.Now(), waiting[:0]
	for _, waiter := range waiting {
		if ok && waiter.deadline.After(now) {
			kept = append(kept, waiter)
			continue
		}
		if ok {
			waiter.then(record)
		}
	}
	if len(kept) == 0 {
		delete(m.cluster.awaiting, msg.name)
		return
	}
	m.cluster.awaiting[msg.name] = kept
}

// failClusterWaiters answers every cluster waiter with failure (the
// manager stops or restarts).
func (m *queuesManager) failClusterWaiters(failure requestFailure) {
	if m.cluster == nil {
		return
	}
	for name, waiting := range m.cluster.awaiting {
		failed := &queueRecord{name: name, state: queueFailed, failure: failure}
		for _, waiter := range waiting {
			waiter.then(failed)
		}
	}
	clear(m.cluster.awaiting)
	for name, waiters := range m.cluster.ownerless {
		for _, waiter := range waiters {
			m.core.system.Root.Send(waiter.await.replyTo, queueAwaited{name: name, failure: failure})
		}
	}
	clear(m.cluster.ownerless)
}

// awaitAnswer is how an await is answered once its record settled.
func (m *queuesManager) awaitAnswer(msg awaitQueue) func(*queueRecord) {
	return func(record *queueRecord) {
		answer := queueAwaited{name: msg.name}
		failure, failed := settledFailure(record)
		switch {
		case failed:
			answer.failure = failure
		case record.state == queueReady:
		case record.state == queueReplica && m.ownedElsewhere(record.name):
			answer.reroute = true
		default:
			answer.failure = requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
				"queue %q is not served yet: its owner is being chosen or recovering (waited %v); retry",
				msg.name, clusterOwnerWait)}
		}
		m.core.system.Root.Send(msg.replyTo, answer)
	}
}

// hostsPartition reports whether the catalog's replica set of the queue's
// partition names this node.
func (m *queuesManager) hostsPartition(info cluster.QueueInfo) bool {
	return len(info.Partitions) > 0 && slices.Contains(info.Partitions[0].Replicas, m.cluster.node.ID())
}

// replicaHomeOf is the cluster part of a partition's home. A queue keeps
// its failover timeline while this node runs, across reopens.
func (m *queuesManager) replicaHomeOf(info cluster.QueueInfo) *replicaHome {
	partition := info.Partitions[0]
	timeline, _ := m.core.timelines.LoadOrStore(info.Name, &failoverTimeline{})
	return &replicaHome{shardID: partition.ShardID, replicas: slices.Clone(partition.Replicas),
		copies: max(info.WriteCopies, 1), node: m.cluster.node, self: m.cluster.node.ID(),
		instance: m.cluster.node.Instance(), timeline: timeline.(*failoverTimeline)}
}

// QueueFailovers returns the recoveries this node ran for a queue since it
// started, oldest first, each with its stages; false when the node has no
// copy of the queue.
func (b *Broker) QueueFailovers(name string) ([]FailoverRecord, bool) {
	timeline, ok := b.core.timelines.Load(name)
	if !ok {
		return nil, false
	}
	return timeline.(*failoverTimeline).records(), true
}

// forwardViews sends every partition whose coordination view changed its
// new view.
func (m *queuesManager) forwardViews(ctx actor.Context) {
	for _, view := range m.cluster.node.Partitions() {
		record, open := m.queues[view.Queue]
		if !open || record.terminated || record.home.replication == nil || record.home.replication.shardID != view.ShardID {
			continue
		}
		key := viewKey(view)
		if m.cluster.forwarded[view.ShardID] == key {
			continue
		}
		m.cluster.forwarded[view.ShardID] = key
		ctx.Send(record.pid, coordinationView{view: view})
	}
}

// viewKey is what of a view a partition acts on.
func viewKey(view cluster.PartitionView) string {
	state := view.State
	return view.Leader + "/" + strconv.FormatUint(view.Term, 10) + "/" + strconv.FormatBool(view.SelfLeads) + "/" +
		state.Owner + "/" + strconv.FormatUint(state.OwnerInstance, 10) + "/" + strconv.FormatUint(state.Epoch, 10) +
		"/" + state.Phase.String() + "/" + strconv.Itoa(len(state.History))
}

// keepFoundOnDisk remembers the queues found on disk at start; the
// catalog decides which of them open (catalogChanged) and which are
// removed (maybeRemoveUnlisted).
func (m *queuesManager) keepFoundOnDisk(declarations map[string]queue.Options) {
	for name := range declarations {
		m.cluster.onDisk[name] = true
	}
}

// maybeRemoveUnlisted removes, once the catalog was confirmed, the
// directories of queues found on disk that the catalog does not give to
// this node (deleted, or placed elsewhere, while it was down).
func (m *queuesManager) maybeRemoveUnlisted(ctx actor.Context, view cluster.CatalogView) {
	if len(m.cluster.onDisk) == 0 {
		return
	}
	hosted := map[string]bool{}
	for _, info := range view.Queues {
		if m.hostsPartition(info) {
			hosted[info.Name] = true
		}
	}
	for name := range m.cluster.onDisk {
		delete(m.cluster.onDisk, name)
		if _, open := m.queues[name]; open || hosted[name] {
			continue
		}
		m.core.logger.Warn("removing a local queue the cluster catalog does not give to this node",
			"queue", name, "catalog_revision", view.Revision)
		self, system, core := ctx.Self(), ctx.ActorSystem(), m.core
		pending, unique := core.closing.pending(path.Join(core.config.DataDir, queuesDirName, name, "0")), core.newID()
		core.storageClosers.Add(1)
		go func() {
			defer core.storageClosers.Done()
			for _, closing := range pending {
				<-closing
			}
			err := removeQueueFiles(core.config.FS, core.config.DataDir, name, unique)
			system.Root.Send(self, filesRemoved{name: name, err: err})
		}()
	}
}
