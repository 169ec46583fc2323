package actors

// The queues manager owns the set of queues: it recovers them at start,
// declares new ones, deletes them, routes dead-letter handoffs, and
// supervises every partition actor. Sessions find partitions through the
// directory, which only the manager writes.
//
// A queue's record moves through these states:
//
//	opening   its partition is opening the queue; declares wait
//	ready     serving; listed in the directory
//	failed    it could not open, or its partition stopped after spending
//	          its restart budget; the directory answers its name with the
//	          reason, so clients get a clear error, not silence
//	deleting  delete in progress; the directory no longer lists it
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
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

type queueRecordState uint8

const (
	queueOpening queueRecordState = iota + 1
	queueReady
	queueFailed
	queueDeleting
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
	removed    uint64
	stopped    bool // the partition actor is gone (it failed past its budget)
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
	prepareDelete  struct{}
	deletePrepared struct {
		name    string
		removed uint64
	}
	partitionDeleted struct {
		name string
		err  error
	}
	recoveredQueues struct {
		declarations map[string]queue.Options
		err          error
	}
)

type queuesManager struct {
	entry  *Entry
	core   *brokerCore
	ready  chan<- error // closed once every recovered queue has opened (or failed)
	queues map[string]*queueRecord

	recovering int // recovered queues still opening
	recovered  bool
	stopping   bool // the manager is stopping: partitions end with it

	cluster *clusterQueues // cluster mode only (cluster_queues.go)
}

func newQueuesManager(entry *Entry, core *brokerCore, ready chan<- error) *queuesManager {
	return &queuesManager{entry: entry, core: core, ready: ready, queues: make(map[string]*queueRecord)}
}

// partitionPolicy supervises partitions: a panic restarts one (reopening
// its log); more than partitionRestartsMax within a minute stop it, and the
// manager records it as failed.
func partitionPolicy(core *brokerCore, manager func() *actor.PID) *failurePolicy {
	return &failurePolicy{
		level: "queues", maxRestarts: partitionRestartsMax, window: time.Minute,
		decide: alwaysRestart, exhausted: actor.StopDirective, logger: core.logger,
		observe: func(child *actor.PID, err error, directive actor.Directive) {
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
	case deletePrepared:
		if record, ok := m.queues[msg.name]; ok && record.state == queueDeleting {
			record.removed = msg.removed
			ctx.Stop(record.pid)
		}
	case partitionDeleted:
		m.partitionDeleted(ctx, msg)
	case listRequest:
		m.list(ctx, msg)
	case deadLetterHandoff:
		m.handoff(ctx, msg)
	case setSyncInterval:
		for _, record := range m.queues {
			ctx.Send(record.pid, msg)
		}
	case *actor.Stopping, *actor.Restarting:
		m.stopping = true
		m.stopCluster()
	case *actor.Terminated:
		if !m.stopping {
			m.partitionTerminated(msg.Who)
		}
	default:
		m.receiveCluster(ctx, msg)
	}
	m.publishSummary()
}

// scan lists the queues on disk on its own goroutine.
func (m *queuesManager) scan(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	fs, root := m.core.config.FS, path.Join(m.core.config.DataDir, queuesDirName)
	logger := m.core.logger
	go func() {
		declarations, err := scanQueues(fs, root, logger)
		system.Root.Send(self, recoveredQueues{declarations: declarations, err: err})
	}()
}

func (m *queuesManager) recover(ctx actor.Context, msg recoveredQueues) {
	if msg.err != nil {
		panic(fmt.Errorf("actors: cannot list the queues in the data directory: %v: %w", msg.err, ErrFatal))
	}
	for name, options := range msg.declarations {
		m.spawnQueue(ctx, name, options).recovering = true
		m.recovering++
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
		if m.ready != nil {
			close(m.ready)
			m.ready = nil
		}
	}
}

// spawnQueue creates a record and its partition actor.
func (m *queuesManager) spawnQueue(ctx actor.Context, name string, options queue.Options) *queueRecord {
	options = options.WithDefaults()
	home := &partitionHome{
		name: name, dir: partitionDir(m.core.config.DataDir, name), options: options,
		declared: wireOptions(options), manager: ctx.Self(), subscribers: newSubscriptionSet(),
	}
	props := m.core.registry.props("partition", m.core.logger, func(entry *Entry) actor.Actor {
		return newPartition(entry, m.core, home)
	}, actor.WithSupervisor(&failurePolicy{
		level: "partition", maxRestarts: 0, window: time.Minute, decide: alwaysEscalate,
		exhausted: actor.EscalateDirective, logger: m.core.logger,
	}))
	pid, err := ctx.SpawnNamed(props, name+"/0")
	if err != nil {
		panic(fmt.Errorf("actors: spawn partition of %s: %w", name, err))
	}
	record := &queueRecord{name: name, pid: pid, home: home, state: queueOpening}
	m.queues[name] = record
	return record
}

func (m *queuesManager) partitionReady(ctx actor.Context, msg partitionReady) {
	record, ok := m.queues[msg.name]
	if !ok || record.state == queueDeleting {
		return
	}
	m.maybeRecoveredOne(record)
	record.state = queueReady
	m.core.directory.set(msg.name, msg.pid)
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
	m.maybeRecoveredOne(record)
	m.becomeFailed(record, requestFailure{code: wire.CodeFenced,
		message: fmt.Sprintf("queue %q failed to open its storage: %v", msg.name, msg.err)})
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

// partitionFailed: a partition spent its restart budget and was stopped.
func (m *queuesManager) partitionFailed(_ actor.Context, msg partitionFailed) {
	for _, record := range m.queues {
		if record.pid.Id == msg.pid.Id && record.state != queueDeleting {
			m.becomeFailed(record, requestFailure{code: wire.CodeFenced, message: fmt.Sprintf(
				"queue %q stopped after repeated internal failures (last: %v); restart the node to recover it",
				record.name, msg.err)})
		}
	}
}

func (m *queuesManager) partitionTerminated(pid *actor.PID) {
	for _, record := range m.queues {
		if record.pid.Id != pid.Id {
			continue
		}
		record.stopped = true
		if record.state == queueDeleting {
			continue
		}
		if record.state != queueFailed {
			m.becomeFailed(record, requestFailure{code: wire.CodeFenced,
				message: fmt.Sprintf("queue %q stopped unexpectedly; restart the node to recover it", record.name)})
		}
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
	record.state = queueDeleting
	m.core.directory.remove(msg.name)
	m.maybeSettleClusterWaiters(record)
	if !record.stopped {
		ctx.Send(record.pid, prepareDelete{})
		return
	}
	self, system, core, name := ctx.Self(), ctx.ActorSystem(), m.core, msg.name
	go func() {
		err := removeQueueFiles(core.config.FS, core.config.DataDir, name, core.newID())
		system.Root.Send(self, partitionDeleted{name: name, err: err})
	}()
}

func (m *queuesManager) partitionDeleted(ctx actor.Context, msg partitionDeleted) {
	record, ok := m.queues[msg.name]
	if !ok || record.state != queueDeleting {
		return
	}
	delete(m.queues, msg.name)
	m.core.metrics.dropQueue(msg.name)
	for _, request := range record.deleters {
		result := deleteResult{requestID: request.requestID, removed: record.removed}
		if msg.err != nil {
			result.failure = requestFailure{code: wire.CodeStorageFailure,
				message: fmt.Sprintf("queue %q was closed but its files could not all be removed: %v", msg.name, msg.err)}
		}
		ctx.Send(request.replyTo, result)
	}
}

// list answers list-queues: names from the manager, info from each
// partition, gathered on a goroutine so the manager never waits.
func (m *queuesManager) list(ctx actor.Context, msg listRequest) {
	limit := msg.limit
	if limit <= 0 || limit > wire.MaxQueueListEntries {
		limit = wire.MaxQueueListEntries
	}
	names := make([]string, 0, len(m.queues))
	for name, record := range m.queues {
		if record.state != queueDeleting && strings.HasPrefix(name, msg.prefix) && name > msg.after {
			names = append(names, name)
		}
	}
	remote := m.catalogOnlyQueues(msg) // cluster mode: the catalog's other queues (cluster_list.go)
	for name := range remote {
		names = append(names, name)
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
	system, core := ctx.ActorSystem(), m.core
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
	}()
}

// handoff routes dead letters to their queue, declaring it (durable, with
// defaults) when it does not exist.
func (m *queuesManager) handoff(ctx actor.Context, msg deadLetterHandoff) {
	refuse := func(failure requestFailure) {
		offsets := make([]uint64, len(msg.letters))
		for i := range msg.letters {
			offsets[i] = msg.letters[i].Offset
		}
		ctx.Send(msg.source, deadLettersRefused{offsets: offsets, failure: failure})
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
	m.entry.SetSummary(fmt.Sprintf("queues=%d ready=%d opening=%d failed=%d deleting=%d recovered=%v",
		len(m.queues), counts[queueReady], counts[queueOpening], counts[queueFailed], counts[queueDeleting], m.recovered))
}
