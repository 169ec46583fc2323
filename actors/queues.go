package actors

// The queues manager owns the set of queues: it recovers them at start,
// declares new ones, deletes and reopens them, routes dead-letter
// handoffs, and supervises every partition actor. Sessions find partitions
// through the directory, which only the manager writes.
//
// Manager states, besides the lifecycle phases of every actor
// (runtime/lifecycle.go): recovering (the startup scan and the opens it started
// are running; core.ready fires when they are done) and serving. While
// stopping it spawns nothing: declares, deletes, reopens, lists and
// dead-letter handoffs are refused as unavailable (ReceiveStopping).
// Restarting, it marks every route unavailable and answers what waits on
// it; the library stops its partitions, and the fresh instance recovers
// every queue from disk again (after the closes of the old partitions
// finished), so the node keeps serving.
//
// A queue's record moves through these states:
//
//	opening   its partition is opening the queue; declares wait
//	ready     serving; listed in the directory
//	failed    it could not open, or its partition stopped after spending
//	          its restart budget; the directory answers its name with the
//	          reason, so clients get a clear error, not silence; a reopen
//	          (Broker.ReopenQueue) opens it again
//	deleting  delete in progress; the directory no longer lists it. The
//	          delete is answered once the partition actor terminated and
//	          its files are gone; declares of the name that arrive meanwhile
//	          wait and then create a fresh queue
//	replica   cluster mode: open here as a replica (or recovering), served
//	          by another node or not yet by this one; the directory marks
//	          it not_owner so sessions route its requests by the
//	          coordination shard (cluster_replicas.go)
//
// Messages taken: declareRequest, deleteRequest, listRequest, reopenRequest
// (sessions, Broker), partitionReady, partitionOpenFailed, deleteCounted,
// reopenRefused (partitions), partitionDeleted (its removal goroutine),
// partitionFailed (the partition policy),
// deadLetterHandoff, setSyncInterval, injectedPanic, children's
// Terminated, and the cluster messages (cluster_queues.go). Sent:
// declareResult, deleteResult, listResult, reopenResult; reopenQueue,
// deleteQueue, deadLetterPublish and setSyncInterval to partitions.
//
// Declares follow storage/queue's rule that options are fixed at first
// declare: a re-declare that omits a field keeps it, one that names the
// current value is fine, and one that names another value is refused (a
// different mode with code mode_conflict, anything else with
// invalid_options).

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

type queueRecordState uint8

const (
	queueOpening queueRecordState = iota + 1
	queueReady
	queueFailed
	queueDeleting
	// queueReplica: a cluster partition open as a replica (or recovering)
	// on this node; the directory sends its requests the cluster way
	// (cluster_replicas.go).
	queueReplica
)

type queueRecord struct {
	name    string
	pid     *actor.PID
	home    *partitionHome
	state   queueRecordState
	failure requestFailure // when failed
	created bool           // the next declare answered reports created
	// recovering: found on disk at start; the broker starts serving once
	// every such queue opened or failed.
	recovering bool
	waiters    []declareRequest
	deleters   []deleteRequest
	// redeclares arrived while deleting: they declare a fresh queue once
	// the delete finished.
	redeclares []declareRequest
	reopeners  []reopenRequest
	reopening  bool // a reopenQueue was sent to the partition
	// terminated: the partition actor is gone. policyStopped: its policy
	// stopped it after its restart budget was spent (Terminated follows).
	terminated    bool
	policyStopped bool
	// Delete progress: what the delete removes (the partition counts it),
	// the removal of the files started, and they are gone (or the error
	// that stopped it).
	removed   uint64
	removing  bool
	filesGone bool
	deleteErr error
}

// Messages between the manager and its partitions, and the startup scan.
type (
	partitionReady struct {
		name string
		pid  *actor.PID
	}
	partitionOpenFailed struct {
		name string
		err  error
	}
	partitionFailed struct {
		pid *actor.PID
		err error
	}
	// partitionDeleted: a deleted queue's files are removed (or could not
	// all be).
	partitionDeleted struct {
		name string
		err  error
	}
	recoveredQueues struct {
		declarations map[string]queue.Options
		err          error
	}
	// reopenRequest asks for a fenced or failed queue to be opened again
	// (Broker.ReopenQueue); reopenResult answers it at replyTo.
	reopenRequest struct {
		replyTo *actor.PID
		name    string
	}
	reopenResult struct{ err error }
	// reopenQueue tells a fenced partition to reopen its queue;
	// reopenRefused is its answer when it is not fenced.
	reopenQueue   struct{}
	reopenRefused struct {
		name   string
		reason string
	}
)

type queuesManager struct {
	entry  *runtime.Entry
	core   *brokerCore
	queues map[string]*queueRecord

	recovering int // recovered queues still opening
	recovered  bool

	// List answers are gathered off the manager, at most
	// Limits.MaxConcurrentLists at once; the others wait here, in order.
	listsRunning int
	listsWaiting []listRequest

	cluster *clusterQueues // cluster mode only (cluster_queues.go)
}

func newQueuesManager(entry *runtime.Entry, core *brokerCore) *queuesManager {
	return &queuesManager{entry: entry, core: core, queues: make(map[string]*queueRecord)}
}

// partitionPolicy supervises partitions: a panic restarts one (reopening
// its log); more than partitionRestartsMax within a minute stop it, and the
// manager records it as failed.
func partitionPolicy(core *brokerCore, manager func() *actor.PID) *runtime.FailurePolicy {
	return &runtime.FailurePolicy{
		Level: "queues", MaxRestarts: partitionRestartsMax, Window: time.Minute,
		Decide: runtime.AlwaysRestart, Exhausted: actor.StopDirective, Logger: core.logger, Registry: core.registry,
		Observe: func(child *actor.PID, err error, directive actor.Directive) {
			if directive == actor.StopDirective {
				core.system.Root.Send(manager(), partitionFailed{pid: child, err: err})
			}
		},
	}
}

// partitionRestartsMax is the restart budget of one partition per minute.
const partitionRestartsMax = 5

func (m *queuesManager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		m.scan(ctx)
		m.maybeStartCluster(ctx)
	case recoveredQueues:
		m.recover(ctx, msg)
	case declareRequest:
		m.declare(ctx, msg)
	case partitionReady:
		m.partitionReady(ctx, msg)
	case partitionOpenFailed:
		m.partitionOpenFailed(ctx, msg)
	case partitionFailed:
		m.partitionFailed(ctx, msg)
	case deleteRequest:
		m.delete(ctx, msg)
	case partitionDeleted:
		m.partitionDeleted(ctx, msg)
	case deleteCounted:
		if record, ok := m.queues[msg.name]; ok && record.state == queueDeleting {
			record.removed = msg.removed
		}
	case reopenRequest:
		m.reopen(ctx, msg)
	case reopenRefused:
		m.reopenRefused(msg)
	case listRequest:
		m.list(ctx, msg)
	case listGathered:
		m.listsRunning = max(m.listsRunning-1, 0) // a gatherer of a failed instance reports here too
		m.maybeStartWaitingList(ctx)
	case deadLetterHandoff:
		m.handoff(ctx, msg)
	case setSyncInterval:
		for _, record := range m.queues {
			if !record.terminated {
				ctx.Send(record.pid, msg)
			}
		}
	case injectedPanic:
		panic(fmt.Errorf("injected panic in the queues manager: %s", msg.reason))
	case *actor.Restarting:
		m.restarting()
	case *actor.Stopping:
		m.stopping()
	case *actor.Terminated:
		m.partitionTerminated(ctx, msg.Who)
	default:
		m.receiveCluster(ctx, msg)
	}
	m.publishSummary()
}

// ReceiveStopping refuses what arrives once the manager stops: the node is
// shutting down (a restart never gets here: the library holds messages
// until the fresh instance runs).
func (m *queuesManager) ReceiveStopping(ctx actor.Context) {
	failure := requestFailure{code: wire.CodeUnavailable, message: "the node is shutting down"}
	switch msg := ctx.Message().(type) {
	case declareRequest:
		ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: failure})
	case deleteRequest:
		ctx.Send(msg.replyTo, deleteResult{requestID: msg.requestID, failure: failure})
	case clusterDeleteRequest:
		ctx.Send(msg.request.replyTo, deleteResult{requestID: msg.request.requestID, failure: failure})
	case listRequest:
		ctx.Send(msg.replyTo, listResult{requestID: msg.requestID, failure: failure})
	case reopenRequest:
		ctx.Send(msg.replyTo, reopenResult{err: fmt.Errorf("%w: %s", ErrQueueNotServing, failure.message)})
	case deadLetterHandoff:
		ctx.Send(msg.source, deadLettersRefused{offsets: offsetsOf(msg.letters), failure: failure})
	case awaitQueue:
		ctx.Send(msg.replyTo, queueAwaited{name: msg.name, failure: failure})
	}
}

// stopping answers everything that waits on the manager; the library
// stops the partitions after this.
func (m *queuesManager) stopping() {
	m.stopCluster()
	m.answerAllWaiting(requestFailure{code: wire.CodeUnavailable, message: "the node is shutting down"})
}

// restarting runs on the failed instance: every route is unavailable
// until the fresh instance has reopened its queue, and whatever waits on
// this instance is answered.
func (m *queuesManager) restarting() {
	m.stopCluster()
	m.core.directory.failAll(func(name string) requestFailure {
		return requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q is reopening after an internal failure of the node's queue manager; retry", name)}
	})
	m.answerAllWaiting(requestFailure{code: wire.CodeUnavailable, message: "the node's queue manager restarted " +
		"after an internal failure before answering; send the request again"})
}

func (m *queuesManager) answerAllWaiting(failure requestFailure) {
	for _, record := range m.queues {
		for _, request := range append(record.waiters, record.redeclares...) {
			m.core.system.Root.Send(request.replyTo, declareResult{requestID: request.requestID, failure: failure})
		}
		for _, request := range record.deleters {
			m.core.system.Root.Send(request.replyTo, deleteResult{requestID: request.requestID, failure: failure})
		}
		m.answerReopeners(record, fmt.Errorf("%w: %s", ErrQueueNotServing, failure.message))
		record.waiters, record.redeclares, record.deleters = nil, nil, nil
	}
	for _, request := range m.listsWaiting {
		m.core.system.Root.Send(request.replyTo, listResult{requestID: request.requestID, failure: failure})
	}
	m.listsWaiting = nil
	m.failClusterWaiters(failure)
}

// scan lists the queues on disk on its own goroutine, once every close of
// a queue still running (an earlier instance's partitions) finished, so a
// queue deleted just before is not found again.
func (m *queuesManager) scan(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	fs, root := m.core.config.FS, path.Join(m.core.config.DataDir, queuesDirName)
	logger, pending := m.core.logger, m.core.closing.all()
	go func() {
		for _, closing := range pending {
			<-closing
		}
		declarations, err := scanQueues(fs, root, logger)
		system.Root.Send(self, recoveredQueues{declarations: declarations, err: err})
	}()
}

func (m *queuesManager) recover(ctx actor.Context, msg recoveredQueues) {
	if msg.err != nil {
		err := fmt.Errorf("actors: cannot list the queues in the data directory: %v: %w", msg.err, runtime.ErrFatal)
		m.core.ready.Fire(err)
		panic(err)
	}
	// Routes of an earlier instance whose queue is gone from disk go.
	m.core.directory.keepOnly(func(name string) bool { _, found := msg.declarations[name]; return found })
	if m.cluster != nil {
		// The catalog decides what opens in a cluster (cluster_replicas.go).
		m.keepFoundOnDisk(msg.declarations)
		m.maybeRecovered()
		return
	}
	for name, options := range msg.declarations {
		if record := m.spawnQueue(ctx, name, options); record.state == queueOpening {
			record.recovering = true
			m.recovering++
		}
	}
	m.maybeRecovered()
}

// maybeRecoveredOne counts a queue found at start that finished opening.
func (m *queuesManager) maybeRecoveredOne(record *queueRecord) {
	if record.recovering {
		record.recovering = false
		m.recovering--
		m.maybeRecovered()
	}
}

func (m *queuesManager) maybeRecovered() {
	if !m.recovered && m.recovering == 0 {
		m.recovered = true
		m.maybeWatchCatalog()
		m.core.ready.Fire(nil)
	}
}

// spawnQueue creates a record and its partition actor. A spawn the library
// refuses leaves the record failed, with the reason.
//
// The queue's directory is joined with wire.JoinQueuePath, which checks
// the name once more: a name that breaks the rule (from a catalog
// snapshot of an older version, say) leaves a failed record and touches
// no file.
func (m *queuesManager) spawnQueue(ctx actor.Context, name string, options queue.Options) *queueRecord {
	return m.spawnQueueReplicated(ctx, name, options, nil)
}

// spawnQueueReplicated is spawnQueue for a cluster partition (replication
// set) or a single-node queue (nil).
func (m *queuesManager) spawnQueueReplicated(ctx actor.Context, name string, options queue.Options,
	replication *replicaHome) *queueRecord {
	options = options.WithDefaults()
	dir, dirErr := partitionDir(m.core.config.DataDir, name)
	home := &partitionHome{
		name: name, dir: dir, options: options,
		declared: wireOptions(options), manager: ctx.Self(), subscribers: newSubscriptionSet(),
		replication: replication,
	}
	record := &queueRecord{name: name, home: home}
	m.queues[name] = record
	if dirErr != nil {
		record.pid, record.terminated = actor.NewPID(ctx.Self().Address, ctx.Self().Id+"/invalid-name"), true
		m.becomeFailed(record, requestFailure{code: wire.CodeInvalidName, message: dirErr.Error()})
		return record
	}
	m.spawnPartition(ctx, record)
	return record
}

// spawnPartition starts the record's partition actor (again, for a
// reopen) and makes the record opening, or failed when the spawn fails.
func (m *queuesManager) spawnPartition(ctx actor.Context, record *queueRecord) {
	home := record.home
	props := m.core.registry.Props("partition", m.core.logger, func(entry *runtime.Entry) actor.Actor {
		return newPartition(entry, m.core, home)
	}, actor.WithSupervisor(&runtime.FailurePolicy{
		Level: "partition", MaxRestarts: 0, Window: time.Minute, Decide: runtime.AlwaysEscalate,
		Exhausted: actor.EscalateDirective, Logger: m.core.logger, Registry: m.core.registry,
	}))
	record.state, record.failure = queueOpening, requestFailure{}
	record.terminated, record.policyStopped, record.reopening = false, false, false
	pid, err := ctx.SpawnNamed(props, record.name+"/0")
	if err != nil {
		record.pid, record.terminated = actor.NewPID(ctx.Self().Address, ctx.Self().Id+"/"+record.name+"/0"), true
		m.becomeFailed(record, requestFailure{code: wire.CodeInternal,
			message: fmt.Sprintf("queue %q: the node could not start its partition: %v", record.name, err)})
		return
	}
	record.pid = pid
	if home.replication != nil {
		m.core.shards.set(home.replication.shardID, pid) // peer links route by shard (shards.go)
	}
}

func (m *queuesManager) partitionReady(ctx actor.Context, msg partitionReady) {
	record, ok := m.queues[msg.name]
	if !ok || record.state == queueDeleting || record.pid.Id != msg.pid.Id {
		return
	}
	record.state, record.failure, record.reopening = queueReady, requestFailure{}, false
	m.core.directory.set(msg.name, msg.pid)
	// Only now may the node call itself ready: Start binds the listener
	// once ready fires, and a client's first request must find the route.
	m.maybeRecoveredOne(record)
	m.answerReopeners(record, nil)
	m.maybeSettleClusterWaiters(record)
	for _, waiting := range m.queues {
		m.maybeAnswerWaiters(ctx, waiting)
	}
}

// maybeAnswerWaiters answers a ready queue's declares once its dead-letter
// queue (if any) is ready too, so a client can use both at once.
func (m *queuesManager) maybeAnswerWaiters(ctx actor.Context, record *queueRecord) {
	if record.state != queueReady || len(record.waiters) == 0 {
		return
	}
	if target, ok := m.queues[record.home.options.DeadLetterQueue]; ok && target.state == queueOpening {
		return
	}
	for _, request := range record.waiters {
		m.answerDeclare(ctx, record, request)
	}
	record.waiters = nil
}

func (m *queuesManager) partitionOpenFailed(ctx actor.Context, msg partitionOpenFailed) {
	record, ok := m.queues[msg.name]
	if !ok || record.state == queueDeleting {
		return
	}
	record.reopening = false
	m.becomeFailed(record, requestFailure{code: wire.CodeFenced, message: fmt.Sprintf(
		"queue %q failed to open its storage: %s; %s", msg.name, storageCause(msg.err), reopenAdvice(msg.name))})
	m.maybeRecoveredOne(record) // after the route says why: ready may fire here
	m.answerReopeners(record, fmt.Errorf("%w: %s", ErrQueueNotServing, record.failure.message))
	for _, request := range record.waiters {
		ctx.Send(request.replyTo, declareResult{requestID: request.requestID, failure: record.failure})
	}
	record.waiters = nil
	for _, waiting := range m.queues {
		m.maybeAnswerWaiters(ctx, waiting)
	}
}

func (m *queuesManager) becomeFailed(record *queueRecord, failure requestFailure) {
	record.state = queueFailed
	record.failure = failure
	m.core.directory.fail(record.name, record.pid, failure)
	m.maybeSettleClusterWaiters(record)
	m.core.logger.Error("queue failed", "queue", record.name, "reason", failure.message)
}

// partitionFailed: a partition spent its restart budget and is stopping.
func (m *queuesManager) partitionFailed(_ actor.Context, msg partitionFailed) {
	record := m.recordOf(msg.pid)
	if record == nil || record.state == queueDeleting {
		return
	}
	record.policyStopped = true
	m.becomeFailed(record, requestFailure{code: wire.CodeFenced, message: fmt.Sprintf(
		"queue %q stopped after repeated internal failures (last: %v); %s", record.name, msg.err,
		reopenAdvice(record.name))})
}

// recordOf finds the record whose partition is pid.
func (m *queuesManager) recordOf(pid *actor.PID) *queueRecord {
	for _, record := range m.queues {
		if record.pid != nil && record.pid.Id == pid.Id {
			return record
		}
	}
	return nil
}

// partitionTerminated: a partition actor is gone. The manager asked for it
// (a delete), its policy stopped it (failed), or nobody did, which is a
// defect worth an error line.
func (m *queuesManager) partitionTerminated(ctx actor.Context, pid *actor.PID) {
	record := m.recordOf(pid)
	if record == nil || record.terminated {
		return
	}
	record.terminated = true
	if record.home.replication != nil {
		m.core.shards.remove(record.home.replication.shardID, pid)
	}
	switch {
	case record.state == queueDeleting:
		m.removeFiles(ctx, record)
	case record.state == queueFailed && len(record.reopeners) > 0:
		m.spawnPartition(ctx, record)
		m.core.directory.set(record.name, record.pid)
	case record.state != queueFailed:
		m.becomeFailed(record, requestFailure{code: wire.CodeFenced, message: fmt.Sprintf(
			"queue %q stopped unexpectedly; %s", record.name, reopenAdvice(record.name))})
		m.answerReopeners(record, fmt.Errorf("%w: %s", ErrQueueNotServing, record.failure.message))
	}
}

func (m *queuesManager) delete(ctx actor.Context, msg deleteRequest) {
	record, ok := m.queues[msg.name]
	if !ok {
		ctx.Send(msg.replyTo, deleteResult{requestID: msg.requestID, failure: requestFailure{
			code: wire.CodeUnknownQueue, message: fmt.Sprintf("queue %q is not declared", msg.name)}})
		return
	}
	record.deleters = append(record.deleters, msg)
	if record.state == queueDeleting {
		return
	}
	for _, request := range record.waiters {
		ctx.Send(request.replyTo, declareResult{requestID: request.requestID, failure: requestFailure{
			code: wire.CodeUnknownQueue, message: fmt.Sprintf("queue %q was deleted while it was being declared", msg.name)}})
	}
	record.waiters = nil
	m.answerReopeners(record, fmt.Errorf("%w: queue %q was deleted", ErrUnknownQueue, msg.name))
	record.state = queueDeleting
	m.core.directory.remove(msg.name)
	m.maybeSettleClusterWaiters(record)
	if record.terminated {
		m.removeFiles(ctx, record)
		return
	}
	// A user message, so the delete takes effect after whatever was sent
	// to the partition before it (partition_delete.go); the files go once
	// the partition terminated.
	ctx.Send(record.pid, deleteQueue{})
}

// removeFiles removes a deleted queue's files on a goroutine, after every
// close of its directory still running.
func (m *queuesManager) removeFiles(ctx actor.Context, record *queueRecord) {
	if record.removing {
		return
	}
	record.removing = true
	self, system, core, name := ctx.Self(), ctx.ActorSystem(), m.core, record.name
	pending := core.closing.pending(record.home.dir)
	core.storageClosers.Add(1)
	go func() {
		defer core.storageClosers.Done()
		for _, closing := range pending {
			<-closing
		}
		err := removeQueueFiles(core.config.FS, core.config.DataDir, name, core.newID())
		system.Root.Send(self, partitionDeleted{name: name, err: err})
	}()
}

func (m *queuesManager) partitionDeleted(ctx actor.Context, msg partitionDeleted) {
	record, ok := m.queues[msg.name]
	if !ok || record.state != queueDeleting {
		return
	}
	record.filesGone, record.deleteErr = true, msg.err
	m.maybeFinishDelete(ctx, record)
}

// maybeFinishDelete answers a delete once the partition actor is gone and
// its files are removed, then takes up the declares that waited for it.
func (m *queuesManager) maybeFinishDelete(ctx actor.Context, record *queueRecord) {
	if !record.terminated || !record.filesGone {
		return
	}
	delete(m.queues, record.name)
	m.core.metrics.dropQueue(record.name)
	m.core.timelines.Delete(record.name)
	for _, request := range record.deleters {
		result := deleteResult{requestID: request.requestID, removed: record.removed}
		if record.deleteErr != nil {
			result.failure = requestFailure{code: wire.CodeStorageFailure, message: fmt.Sprintf(
				"queue %q was closed but its files could not all be removed: %v", record.name, record.deleteErr)}
		}
		ctx.Send(request.replyTo, result)
	}
	for _, request := range record.redeclares {
		m.declare(ctx, request)
	}
}

// reopen opens a fenced or failed queue again: a partition that is alive
// (fenced) reopens its own queue; a stopped one is spawned again.
func (m *queuesManager) reopen(ctx actor.Context, msg reopenRequest) {
	record, ok := m.queues[msg.name]
	if !ok {
		ctx.Send(msg.replyTo, reopenResult{err: fmt.Errorf("%w: %q", ErrUnknownQueue, msg.name)})
		return
	}
	if record.state == queueDeleting {
		ctx.Send(msg.replyTo, reopenResult{err: fmt.Errorf("%w: queue %q is being deleted", ErrQueueNotServing, msg.name)})
		return
	}
	record.reopeners = append(record.reopeners, msg)
	switch {
	case record.state == queueOpening || record.reopening:
		// answered when the open in progress ends
	case record.terminated:
		m.spawnPartition(ctx, record)
		m.core.directory.set(record.name, record.pid)
	case record.policyStopped:
		// spawned again once the stopping partition terminated
	default:
		record.reopening = true
		ctx.Send(record.pid, reopenQueue{})
	}
}

func (m *queuesManager) reopenRefused(msg reopenRefused) {
	record, ok := m.queues[msg.name]
	if !ok {
		return
	}
	record.reopening = false
	m.answerReopeners(record, fmt.Errorf("%w: %s", ErrQueueNotFenced, msg.reason))
}

// answerReopeners answers every reopen waiting on record with err (nil:
// the queue serves again).
func (m *queuesManager) answerReopeners(record *queueRecord, err error) {
	for _, request := range record.reopeners {
		m.core.system.Root.Send(request.replyTo, reopenResult{err: err})
	}
	record.reopeners = nil
}

// listGathered tells the manager that a list gatherer finished.
type listGathered struct{}

// list answers list-queues: names from the manager, info from each
// partition, gathered on a goroutine so the manager never waits; at most
// Limits.MaxConcurrentLists gatherers run at once, and the requests over
// that wait in order (each session has at most its requests in flight).
func (m *queuesManager) list(ctx actor.Context, msg listRequest) {
	if m.listsRunning >= m.core.config.Limits.MaxConcurrentLists {
		m.listsWaiting = append(m.listsWaiting, msg)
		return
	}
	m.startList(ctx, msg)
}

// maybeStartWaitingList starts the first waiting list, if any.
func (m *queuesManager) maybeStartWaitingList(ctx actor.Context) {
	if len(m.listsWaiting) == 0 || m.listsRunning >= m.core.config.Limits.MaxConcurrentLists {
		return
	}
	next := m.listsWaiting[0]
	m.listsWaiting[0] = listRequest{}
	m.listsWaiting = m.listsWaiting[1:]
	if len(m.listsWaiting) == 0 {
		m.listsWaiting = nil
	}
	m.startList(ctx, next)
}

// startList picks the names of one list-queues answer (those visible to
// the session's user) and gathers their infos on a goroutine.
func (m *queuesManager) startList(ctx actor.Context, msg listRequest) {
	limit := msg.limit
	if limit <= 0 || limit > wire.MaxQueueListEntries {
		limit = wire.MaxQueueListEntries
	}
	listed := func(name string) bool {
		return strings.HasPrefix(name, msg.prefix) && name > msg.after && (msg.visible == nil || msg.visible(name))
	}
	names := make([]string, 0, len(m.queues))
	for name, record := range m.queues {
		if record.state != queueDeleting && listed(name) {
			names = append(names, name)
		}
	}
	remote := m.catalogOnlyQueues(msg) // cluster mode: the catalog's other queues (cluster_list.go)
	for name := range remote {
		if listed(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	more := len(names) > limit
	names = names[:min(len(names), limit)]
	routes := make([]queueRoute, 0, len(names))
	for _, name := range names {
		if record, open := m.queues[name]; open {
			routes = append(routes, queueRoute{name: name, pid: record.pid, failure: record.failure})
		}
	}
	system, core, self := ctx.ActorSystem(), m.core, ctx.Self()
	m.listsRunning++
	go func() {
		infos := gatherInfos(system, routes)
		for _, name := range names {
			if info, ok := remote[name]; ok {
				infos = append(infos, info)
			}
		}
		sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
		infos = core.withClusterInfos(infos)
		system.Root.Send(msg.replyTo, listResult{requestID: msg.requestID, more: more, queues: infos})
		system.Root.Send(self, listGathered{})
	}()
}

// handoff routes dead letters to their queue, declaring it (durable, with
// defaults) when it does not exist.
func (m *queuesManager) handoff(ctx actor.Context, msg deadLetterHandoff) {
	refuse := func(failure requestFailure) {
		ctx.Send(msg.source, deadLettersRefused{offsets: offsetsOf(msg.letters), failure: failure})
	}
	if err := ValidateQueueName(msg.target); err != nil {
		refuse(requestFailure{code: wire.CodeInvalidName, message: err.Error()})
		return
	}
	record, ok := m.queues[msg.target]
	if !ok && m.cluster != nil {
		refuse(requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"dead-letter queue %q is not open on this node; dead letters do not move between cluster nodes yet", msg.target)})
		return
	}
	if !ok {
		if failure, full := m.queueLimitReached(1); full {
			refuse(failure)
			return
		}
		record = m.spawnQueue(ctx, msg.target, queue.Options{})
	}
	switch record.state {
	case queueFailed:
		refuse(record.failure)
	case queueDeleting:
		refuse(requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf("queue %q is being deleted", msg.target)})
	default:
		ctx.Send(record.pid, deadLetterPublish{source: msg.source, sourceQueue: msg.sourceQueue, letters: msg.letters})
	}
}

func (m *queuesManager) publishSummary() {
	counts := map[queueRecordState]int{}
	for _, record := range m.queues {
		counts[record.state]++
	}
	m.entry.SetSummary(fmt.Sprintf("queues=%d ready=%d replica=%d opening=%d failed=%d deleting=%d recovered=%v",
		len(m.queues), counts[queueReady], counts[queueReplica], counts[queueOpening], counts[queueFailed],
		counts[queueDeleting], m.recovered))
}

// offsetsOf lists the offsets of dead letters.
func offsetsOf(letters []queue.DeadLetter) []uint64 {
	offsets := make([]uint64, len(letters))
	for i := range letters {
		offsets[i] = letters[i].Offset
	}
	return offsets
}
