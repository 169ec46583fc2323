package actors

// The queues manager in cluster mode (see cluster.go). Its extra state,
// clusterQueues, is owned by the manager's Receive like the rest of it.
//
// Three flows talk to the catalog, each on its own goroutine that sends
// its result back as a message, so Receive never waits on Raft:
//
//   - Watch: a goroutine forwards every catalog change as a catalogSnapshot
//     (the local replica's view). The manager opens every partition the
//     catalog says this node owns and does not have open yet. Once a
//     linearizable read has shown that the local replica is caught up
//     (catalogConfirmed), a queue open here that a later snapshot no longer
//     lists was deleted cluster-wide (its delete was interrupted, or made
//     while this node was down), and its local files are removed.
//   - Declare: the declaration is proposed to the catalog. When this node
//     is already the elected owner it opens the partition and answers once
//     it is ready; otherwise it answers at once (a new queue's owner is
//     elected right after, and requests that arrive before that wait for
//     it, see awaitQueue). A re-declare is checked
//     field by field against the catalog's declaration first (a field it
//     leaves out keeps its value), then proposed without options so that
//     the catalog checks mode, policy and replica count.
//   - Delete: the queue leaves the catalog first, then its local partition
//     and files go the single-node way.
//
// Sessions hold requests for a queue this node owns but has not opened
// yet, that has no owner yet, or that the local catalog replica does not
// list (it may lag: the manager reads the catalog through Raft before the
// request is refused as unknown) (awaitQueue); the manager answers each
// await once the queue is ready, failed or deleted here, or once its owner
// is elected elsewhere (the session then redirects), or after
// clusterOwnerWait without an owner (queueAwaited).
//
// Invariant: a queue name in awaiting has a record in m.queues that is
// opening; the list is answered and removed when the record leaves that
// state.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/wire"
)

// Messages of cluster mode.
type (
	// catalogSnapshot carries the local catalog replica's view.
	catalogSnapshot struct{ view cluster.CatalogView }
	// catalogConfirmed says a linearizable read at revision succeeded, so
	// local views at or after it are trustworthy about what is absent.
	catalogConfirmed struct{ revision uint64 }
	// clusterDeclared is the catalog's answer to a declare.
	clusterDeclared struct {
		request declareRequest
		outcome cluster.DeclareOutcome
		owner   cluster.OwnerInfo // NodeID empty when no owner was elected in time
		err     error
	}
	// clusterDeleteRequest is a client's delete in cluster mode.
	clusterDeleteRequest struct{ request deleteRequest }
	// clusterDeleted is the catalog's answer to a delete.
	clusterDeleted struct {
		request deleteRequest
		err     error
		// revision is the local catalog's revision after the delete.
		revision uint64
	}
	// awaitQueue asks the manager to answer once the queue is ready here.
	awaitQueue struct {
		replyTo *actor.PID
		name    string
		// lookedUp is set once a linearizable read found the queue, so a
		// local replica still without it is not asked about again.
		lookedUp bool
	}
	// queueLookedUp is a linearizable read's answer for an await whose
	// queue the local catalog replica did not list.
	queueLookedUp struct {
		await awaitQueue
		err   error
	}
	// queueAwaited answers an awaitQueue: the queue is ready (no failure),
	// failed, or not this node's to open (reroute).
	queueAwaited struct {
		name    string
		failure requestFailure
		reroute bool
	}
	// ownerWaitExpired says awaits of a queue may have passed their
	// deadline.
	ownerWaitExpired struct{ name string }
	// clusterDeclareAnswer is a declare's reply in cluster mode: FDK2 with
	// the effective policy when the declare named a mode.
	clusterDeclareAnswer struct {
		result declareResult
		policy string
	}
)

// clusterQueues is the manager's cluster-mode state.
type clusterQueues struct {
	node   *cluster.Node
	ctx    context.Context // ends when the manager stops
	cancel context.CancelFunc
	send   func(message any) // to the manager, from any goroutine

	// confirmedRevision is the revision of the first linearizable read;
	// confirmed is set once it succeeded.
	confirmedRevision uint64
	confirmed         bool
	// learned is the catalog revision at which each open queue was
	// declared, so an older snapshot never removes a queue declared since.
	learned map[string]uint64
	// gone is the catalog revision from which each queue deleted here is
	// absent: an older snapshot (still listing it) never reopens it.
	gone map[string]uint64
	// awaiting holds, per queue, what waits for its record to settle
	// (cluster_replicas.go).
	awaiting map[string][]settleWaiter
	// forwarded is the view key last sent to each partition, by shard.
	forwarded map[uint64]string
	// onDisk names the queues found on disk at start that the catalog has
	// not yet been checked against.
	onDisk map[string]bool
	// ownerless holds awaits of queues the catalog lists without an owner
	// yet, answered when one is elected or at their deadline.
	ownerless map[string][]ownerWaiter
}

// ownerWaiter is an await parked until the queue has an owner.
type ownerWaiter struct {
	await    awaitQueue
	deadline time.Time
}

// maybeStartCluster sets up the cluster-mode state when the broker runs in
// a cluster.
func (m *queuesManager) maybeStartCluster(ctx actor.Context) {
	node := m.core.config.Cluster
	if node == nil {
		return
	}
	if m.cluster != nil {
		m.cluster.cancel() // a restarted manager starts over
	}
	clusterCtx, cancel := context.WithCancel(context.Background())
	m.cluster = &clusterQueues{
		node: node, ctx: clusterCtx, cancel: cancel, learned: map[string]uint64{}, gone: map[string]uint64{},
		awaiting: map[string][]settleWaiter{}, forwarded: map[uint64]string{}, onDisk: map[string]bool{},
		ownerless: map[string][]ownerWaiter{},
	}
	self, system := ctx.Self(), ctx.ActorSystem()
	m.cluster.send = func(message any) { system.Root.Send(self, message) }
}

// maybeWatchCatalog starts the catalog watcher and the confirming read
// once the queues found on disk are recovered, so the catalog never opens
// a queue the startup scan is about to open.
func (m *queuesManager) maybeWatchCatalog() {
	if m.cluster == nil {
		return
	}
	go watchCatalog(m.cluster.ctx, m.cluster.node, m.cluster.send)
	go confirmCatalog(m.cluster.ctx, m.cluster.node, m.core.logger, m.cluster.send)
}

// stopCluster ends the manager's catalog goroutines.
func (m *queuesManager) stopCluster() {
	if m.cluster != nil {
		m.cluster.cancel()
	}
}

// watchCatalog sends a snapshot of the local catalog on every change.
func watchCatalog(ctx context.Context, node *cluster.Node, send func(any)) {
	watch := node.Watch()
	defer watch.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case _, open := <-watch.C:
			if !open {
				return
			}
			if view, err := node.LocalCatalog(); err == nil {
				send(catalogSnapshot{view: view})
			}
		}
	}
}

// confirmCatalog retries a linearizable read of an initialised catalog
// until one succeeds, then reports its revision.
func confirmCatalog(ctx context.Context, node *cluster.Node, logger interface{ Debug(string, ...any) }, send func(any)) {
	for ctx.Err() == nil {
		readCtx, cancel := context.WithTimeout(ctx, clusterRequestTimeout)
		view, err := node.Catalog(readCtx)
		cancel()
		if err == nil && view.Initialized {
			send(catalogConfirmed{revision: view.Revision})
			return
		}
		logger.Debug("cluster catalog not confirmed yet; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// receiveCluster handles the cluster-mode messages; false for others.
func (m *queuesManager) receiveCluster(ctx actor.Context, message any) bool {
	if m.cluster == nil {
		return false
	}
	switch msg := message.(type) {
	case catalogSnapshot:
		m.catalogChanged(ctx, msg.view)
	case catalogConfirmed:
		m.cluster.confirmed, m.cluster.confirmedRevision = true, msg.revision
		if view, err := m.cluster.node.LocalCatalog(); err == nil {
			m.catalogChanged(ctx, view)
		}
	case clusterDeclared:
		m.clusterDeclared(ctx, msg)
	case clusterDeleteRequest:
		m.clusterDelete(ctx, msg.request)
	case clusterDeleted:
		m.clusterDeleted(ctx, msg)
	case awaitQueue:
		m.awaitQueue(ctx, msg)
	case ownerWaitExpired:
		m.ownerWaitExpired(msg)
	case queueLookedUp:
		m.queueLookedUp(ctx, msg)
	case deleteResult:
		// The answer to a delete the manager made itself (catalogChanged):
		// a queue declared again under the same name opens fresh now.
		if msg.failure.failed() {
			m.core.logger.Warn("removing a queue the catalog no longer lists failed", "err", msg.failure.message)
		}
		if view, err := m.cluster.node.LocalCatalog(); err == nil {
			m.catalogChanged(ctx, view)
		}
	default:
		return m.receiveReplicas(ctx, msg)
	}
	return true
}

// catalogChanged opens the partitions this node replicates, forwards
// coordination views, answers what waits, and removes queues the catalog
// deleted.
func (m *queuesManager) catalogChanged(ctx actor.Context, view cluster.CatalogView) {
	c := m.cluster
	listed := make(map[string]bool, len(view.Queues))
	for _, info := range view.Queues {
		listed[info.Name] = true
		record, open := m.queues[info.Name]
		switch {
		case !m.hostsPartition(info):
		case !open && view.Revision >= c.gone[info.Name]:
			m.openFromCatalog(ctx, info)
		case open && record.state != queueDeleting && record.home.replication != nil &&
			record.home.replication.shardID != info.Partitions[0].ShardID:
			// The name was deleted and declared again while this node
			// missed it: the open copy is of the old declaration.
			m.core.logger.Warn("removing a local queue of an earlier declaration of the name", "queue", info.Name,
				"old_shard", record.home.replication.shardID, "shard", info.Partitions[0].ShardID)
			m.delete(ctx, deleteRequest{replyTo: ctx.Self(), name: info.Name})
		}
	}
	m.forwardViews(ctx)
	for name := range c.awaiting {
		if record, open := m.queues[name]; open {
			m.maybeSettleClusterWaiters(record)
		}
	}
	m.maybeAnswerOwnerWaiters(ctx, view)
	if !c.confirmed || !view.Initialized || view.Revision < c.confirmedRevision {
		return
	}
	m.maybeRemoveUnlisted(ctx, view)
	for name, record := range m.queues {
		if listed[name] || record.state == queueDeleting || c.learned[name] > view.Revision {
			continue
		}
		m.core.logger.Warn("removing a local queue the cluster catalog no longer lists (deleted cluster-wide)",
			"queue", name, "catalog_revision", view.Revision)
		c.gone[name] = view.Revision
		m.delete(ctx, deleteRequest{replyTo: ctx.Self(), name: name})
	}
}

// openFromCatalog spawns this node's replica of a queue's partition; nil
// when its declaration cannot be opened here.
func (m *queuesManager) openFromCatalog(ctx actor.Context, info cluster.QueueInfo) *queueRecord {
	options, err := storageOptionsOfCatalog(info)
	if err == nil {
		err = options.Validate()
	}
	if err != nil {
		m.core.logger.Error("cannot open a queue the catalog places on this node", "queue", info.Name, "err", err)
		return nil
	}
	m.cluster.learned[info.Name] = info.Revision
	partition := info.Partitions[0]
	m.core.logger.Info("opening this node's replica of a queue", "queue", info.Name, "shard", partition.ShardID,
		"replicas", partition.Replicas, "write_copies", info.WriteCopies)
	return m.spawnQueueReplicated(ctx, info.Name, options, m.replicaHomeOf(info))
}

// clusterDeclare checks a declare locally, then proposes it to the catalog
// on its own goroutine.
func (m *queuesManager) clusterDeclare(ctx actor.Context, msg declareRequest) {
	refuse := func(format string, args ...any) {
		ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: requestFailure{
			code: wire.CodeInvalidOptions, message: fmt.Sprintf(format, args...)}})
	}
	local := msg.options
	local.Policy, local.Replicas = "", 0
	if local.DeadLetterQueue != "" {
		refuse("dead_letter_queue is not available in a cluster yet: a dead-letter queue may be owned by another " +
			"node, and moving dead letters between nodes needs replication links")
		return
	}
	requested, err := storageOptions(msg.name, local, msg.mode)
	if err == nil {
		err = requested.Validate()
	}
	if err != nil {
		refuse("%v", err)
		return
	}
	if failure, full := m.catalogQueueLimitReached(msg.name); full {
		ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: failure})
		return
	}
	decl := cluster.QueueDecl{Name: msg.name, Mode: clusterModeOfWire(msg.mode), Policy: msg.options.Policy,
		Replicas: int(msg.options.Replicas), Options: catalogOptions(local)}
	node, parent := m.cluster.node, m.cluster.ctx
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		outcome, owner, err := declareThroughCatalog(parent, node, decl, local, msg.mode)
		system.Root.Send(self, clusterDeclared{request: msg, outcome: outcome, owner: owner, err: err})
	}()
}

// catalogQueueLimitReached is queueLimitReached in cluster mode: a
// declare of a name the catalog does not hold is refused when this
// node's replica of the catalog lists Limits.MaxQueues queues (declares
// made at once on several nodes may pass it by a few).
func (m *queuesManager) catalogQueueLimitReached(name string) (requestFailure, bool) {
	view, err := m.cluster.node.LocalCatalog()
	if err != nil {
		return requestFailure{}, false // the catalog decides; a read failure is not a client's limit
	}
	limit := m.core.config.Limits.MaxQueues
	if len(view.Queues) < limit {
		return requestFailure{}, false
	}
	for _, declared := range view.Queues {
		if declared.Name == name {
			return requestFailure{}, false // a re-declare
		}
	}
	m.core.metrics.limitReached(limitQueues)
	return requestFailure{code: wire.CodeResourceLimit, message: fmt.Sprintf(
		"the cluster holds %d queues and the limit is %d; delete queues or raise the limit (fibril serve --max-queues)",
		len(view.Queues), limit)}, true
}

// declareThroughCatalog proposes a declare and reads the queue's owner if
// one is elected already. It runs on its own goroutine.
func declareThroughCatalog(parent context.Context, node *cluster.Node, decl cluster.QueueDecl,
	named wire.QueueOptions, mode wire.Mode) (cluster.DeclareOutcome, cluster.OwnerInfo, error) {
	ctx, cancel := context.WithTimeout(parent, clusterRequestTimeout)
	defer cancel()
	if existing, err := node.LookupLocal(decl.Name); err == nil {
		if err := checkRedeclare(existing, named, mode); err != nil {
			return cluster.DeclareOutcome{}, cluster.OwnerInfo{}, err
		}
		decl.Options = nil // compared field by field above
	}
	outcome, err := node.DeclareQueue(ctx, decl)
	if errors.Is(err, cluster.ErrDeclarationConflict) && decl.Options != nil {
		// Declared meanwhile by someone else: compare field by field.
		existing, lookupErr := node.Lookup(ctx, decl.Name)
		if lookupErr != nil {
			return cluster.DeclareOutcome{}, cluster.OwnerInfo{}, err
		}
		if err := checkRedeclare(existing, named, mode); err != nil {
			return cluster.DeclareOutcome{}, cluster.OwnerInfo{}, err
		}
		decl.Options = nil
		outcome, err = node.DeclareQueue(ctx, decl)
	}
	if err != nil {
		return cluster.DeclareOutcome{}, cluster.OwnerInfo{}, err
	}
	owner, err := node.Owner(decl.Name, 0)
	if err != nil {
		owner = cluster.OwnerInfo{} // not elected yet: requests wait for it (awaitQueue)
	}
	return outcome, owner, nil
}

// redeclareError is a re-declare refused by the field-by-field check.
type redeclareError struct{ failure requestFailure }

func (e *redeclareError) Error() string { return e.failure.message }

// checkRedeclare applies the single-node rule to the catalog's
// declaration: every option the re-declare names must equal the stored one.
func checkRedeclare(existing cluster.QueueInfo, named wire.QueueOptions, mode wire.Mode) error {
	stored, err := storageOptionsOfCatalog(existing)
	if err != nil {
		return err
	}
	if conflict := declareConflict(stored.WithDefaults(), named, mode); conflict.failed() {
		return &redeclareError{failure: conflict}
	}
	return nil
}

// clusterDeclared answers a declare the catalog took: the owner once its
// partition is ready, any other node at once.
func (m *queuesManager) clusterDeclared(ctx actor.Context, msg clusterDeclared) {
	request := msg.request
	if msg.err != nil {
		failure := failureOfClusterError(msg.err)
		var refused *redeclareError
		if errors.As(msg.err, &refused) {
			failure = refused.failure
		}
		ctx.Send(request.replyTo, declareResult{requestID: request.requestID, failure: failure})
		return
	}
	info := msg.outcome.Queue
	answer := clusterDeclareAnswer{policy: info.Policy, result: declareResult{
		requestID: request.requestID, created: msg.outcome.Created,
		mode: wireModeOfCluster(info.Mode), warnings: clusterWarnings(msg.outcome),
	}}
	if !msg.owner.IsSelf {
		ctx.Send(request.replyTo, answer)
		return
	}
	record, open := m.queues[info.Name]
	if !open {
		if record = m.openFromCatalog(ctx, info); record == nil {
			ctx.Send(request.replyTo, declareResult{requestID: request.requestID, failure: requestFailure{
				code: wire.CodeInvalidOptions, message: fmt.Sprintf("queue %q: the catalog's declaration cannot be opened on this node", info.Name)}})
			return
		}
	}
	m.whenSettled(record, func(record *queueRecord) {
		if failure, failed := settledFailure(record); failed {
			answer.result.failure = failure
		}
		m.core.system.Root.Send(request.replyTo, answer)
	})
}

// settledFailure is why a settled record does not serve, if it does not.
func settledFailure(record *queueRecord) (requestFailure, bool) {
	switch record.state {
	case queueFailed:
		return record.failure, true
	case queueDeleting:
		return requestFailure{code: wire.CodeUnknownQueue, message: fmt.Sprintf("queue %q was deleted", record.name)}, true
	}
	return requestFailure{}, false
}

// awaitQueue answers once the named queue can serve here. A queue this
// node replicates but has not opened yet is opened; one without an owner
// and no replica here waits (at most clusterOwnerWait) for the election;
// one owned by another node is routed again by the session (it will
// redirect or refuse it).
func (m *queuesManager) awaitQueue(ctx actor.Context, msg awaitQueue) {
	record, open := m.queues[msg.name]
	if !open {
		info, err := m.cluster.node.LookupLocal(msg.name)
		switch {
		case errors.Is(err, cluster.ErrQueueNotFound) && !msg.lookedUp:
			m.lookUpQueue(msg) // the local replica may lag: ask the catalog
			return
		case err != nil:
			ctx.Send(msg.replyTo, queueAwaited{name: msg.name, reroute: true})
			return
		case !m.hostsPartition(info) && info.Partitions[0].Owner != "":
			ctx.Send(msg.replyTo, queueAwaited{name: msg.name, reroute: true})
			return
		case !m.hostsPartition(info):
			m.awaitOwner(msg)
			return
		}
		if record = m.openFromCatalog(ctx, info); record == nil {
			ctx.Send(msg.replyTo, queueAwaited{name: msg.name, failure: requestFailure{code: wire.CodeInternal,
				message: fmt.Sprintf("queue %q: the catalog's declaration cannot be opened on this node", msg.name)}})
			return
		}
	}
	m.whenSettled(record, m.awaitAnswer(msg))
}

// lookUpQueue reads the queue through Raft on its own goroutine; once the
// read returns, the local replica has caught up with it.
func (m *queuesManager) lookUpQueue(msg awaitQueue) {
	node, parent, send := m.cluster.node, m.cluster.ctx, m.cluster.send
	go func() {
		ctx, cancel := context.WithTimeout(parent, clusterRequestTimeout)
		defer cancel()
		_, err := node.Lookup(ctx, msg.name)
		send(queueLookedUp{await: msg, err: err})
	}()
}

// queueLookedUp continues an await after the catalog was read through Raft.
func (m *queuesManager) queueLookedUp(ctx actor.Context, msg queueLookedUp) {
	switch {
	case msg.err == nil:
		msg.await.lookedUp = true
		m.awaitQueue(ctx, msg.await)
	case errors.Is(msg.err, cluster.ErrQueueNotFound):
		ctx.Send(msg.await.replyTo, queueAwaited{name: msg.await.name, reroute: true})
	default:
		ctx.Send(msg.await.replyTo, queueAwaited{name: msg.await.name, failure: failureOfClusterError(msg.err)})
	}
}

// awaitOwner parks an await until the catalog names the queue's owner,
// or clusterOwnerWait passes.
func (m *queuesManager) awaitOwner(msg awaitQueue) {
	deadline := time.Now().Add(clusterOwnerWait)
	m.cluster.ownerless[msg.name] = append(m.cluster.ownerless[msg.name], ownerWaiter{await: msg, deadline: deadline})
	send := m.cluster.send
	time.AfterFunc(clusterOwnerWait, func() { send(ownerWaitExpired{name: msg.name}) })
}

// maybeAnswerOwnerWaiters takes up the awaits of queues whose owner is
// now known (or that are gone), after a catalog change.
func (m *queuesManager) maybeAnswerOwnerWaiters(ctx actor.Context, view cluster.CatalogView) {
	for name, waiters := range m.cluster.ownerless {
		index := slices.IndexFunc(view.Queues, func(info cluster.QueueInfo) bool { return info.Name == name })
		if index >= 0 && view.Queues[index].Partitions[0].Owner == "" {
			continue
		}
		delete(m.cluster.ownerless, name)
		for _, waiter := range waiters {
			m.awaitQueue(ctx, waiter.await)
		}
	}
}

// ownerWaitExpired refuses the awaits of a queue that found no owner in
// time.
func (m *queuesManager) ownerWaitExpired(msg ownerWaitExpired) {
	now := time.Now()
	waiters := m.cluster.ownerless[msg.name]
	kept := waiters[:0]
	for _, waiter := range waiters {
		if waiter.deadline.After(now) {
			kept = append(kept, waiter)
			continue
		}
		m.core.system.Root.Send(waiter.await.replyTo, queueAwaited{name: msg.name, failure: requestFailure{
			code: wire.CodeUnavailable, message: fmt.Sprintf("queue %q has no owner yet (its election did not finish within %v); retry",
				msg.name, clusterOwnerWait)}})
	}
	if len(kept) == 0 {
		delete(m.cluster.ownerless, msg.name)
		return
	}
	m.cluster.ownerless[msg.name] = kept
}

// clusterDelete removes the queue from the catalog first, on its own
// goroutine.
func (m *queuesManager) clusterDelete(ctx actor.Context, request deleteRequest) {
	node, parent := m.cluster.node, m.cluster.ctx
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		deleteCtx, cancel := context.WithTimeout(parent, clusterRequestTimeout)
		defer cancel()
		err := node.DeleteQueue(deleteCtx, request.name)
		deleted := clusterDeleted{request: request, err: err}
		if view, viewErr := node.LocalCatalog(); viewErr == nil {
			deleted.revision = view.Revision
		}
		system.Root.Send(self, deleted)
	}()
}

// clusterDeleted finishes a delete once the catalog no longer lists the
// queue: the local partition and files go the single-node way.
func (m *queuesManager) clusterDeleted(ctx actor.Context, msg clusterDeleted) {
	request := msg.request
	_, open := m.queues[request.name]
	if msg.err == nil || errors.Is(msg.err, cluster.ErrQueueNotFound) {
		m.cluster.gone[request.name] = max(m.cluster.gone[request.name], msg.revision)
	}
	switch {
	case open && (msg.err == nil || errors.Is(msg.err, cluster.ErrQueueNotFound)):
		delete(m.cluster.learned, request.name)
		m.delete(ctx, request)
	case msg.err == nil:
		ctx.Send(request.replyTo, deleteResult{requestID: request.requestID})
	default:
		ctx.Send(request.replyTo, deleteResult{requestID: request.requestID, failure: failureOfClusterError(msg.err)})
	}
}
