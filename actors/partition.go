package actors

// The partition actor owns one queue partition's storage/queue state and
// serializes every change to it. It is a thin shell: publishes, leases and
// settles become calls on *queue.Queue; append completions (log goroutines
// call the queue's notify function) become an appendsDone message, and the
// Advance that follows turns into confirms, deliveries and dead-letter
// handoffs sent to the actors that wait for them.
//
// Lifecycle, in states (besides the phases every actor has, runtime/lifecycle.go):
//
//	opening   the queue is being opened (recovery runs on its own goroutine;
//	          Receive never blocks on it). Requests wait in a bounded list.
//	          A reopen first waits here for the old log and sync actors to
//	          terminate; its open waits for the old queue to close.
//	open      serving.
//	fenced    a storage failure latched the log. Publishes, subscribes and
//	          settles are refused with code fenced and the reason; the queue
//	          stays fenced until it is reopened (reopenQueue, from
//	          Broker.ReopenQueue: the open carries out the log's pending
//	          cut) or the node restarts. Other queues are unaffected. A
//	          cluster copy stops owning or recovering at once and hands
//	          the partition on (partition_handover.go): its clients are
//	          told not_owner and go to the copy that takes it over.
//	stopping  Stopping ran: what it owed is answered (a delete: the queue is
//	          gone; a shutdown or a restart above it: unavailable), the
//	          queue closes on a goroutine; every later message is answered
//	          or dropped by ReceiveStopping without touching the queue. The
//	          actor stops once its log and sync children have; the manager
//	          then removes a deleted queue's files.
//
// Open and fenced have a deleting variant (partition_delete.go): the
// queue is deleted, new work is refused, and the partition stops itself
// once the publishes it took before are answered.
//
// Messages taken: publishBatch, settleRequest, subscribeRequest,
// unsubscribeRequest, purgeRequest, infoRequest, consumersRequest,
// syncRequest (sessions, Broker); deadLetterPublish, deadLettersTaken,
// deadLettersRefused (other partitions, via the manager); reopenQueue,
// deleteQueue, setSyncInterval (manager); logLatched (log actor);
// appendsDone (its queue's appends, through the log actor),
// deadlineReached, checkpointRan, retryHandoffs, queueOpened,
// deleteDrainExpired (itself); Terminated of its sessions
// and children. Sent: publishResult, subscribeResult, unsubscribeResult,
// deliverBatch, settleFailed, subscriptionEnded, partitionNotice,
// infoResult, purgeResult (sessions); partitionReady, partitionOpenFailed,
// deleteCounted, reopenRefused, deadLetterHandoff (manager);
// deadLettersTaken, deadLettersRefused (a dead-letter source).
//
// Supervision: a panic restarts the partition (policy in queues.go). The
// failing instance, on Restarting, refuses its unconfirmed publishes
// (their outcome is unknown: they may have reached the log) and closes the
// queue on a goroutine; the new instance waits for that close, reopens the
// queue (which recovers from the log and returns every held lease with an
// attempt counted) and keeps the subscriptions, whose held tags are now
// stale. Every session involved gets an error frame saying so.
//
// What survives a restart lives in partitionHome, owned by whichever
// instance is current (never two at once: the library runs a restart on the
// actor's own mailbox goroutine).

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

type partitionState uint8

const (
	partitionOpening partitionState = iota + 1
	partitionOpen
	partitionFenced
	partitionStopping
)

func (s partitionState) String() string {
	switch s {
	case partitionOpening:
		return "opening"
	case partitionOpen:
		return "open"
	case partitionFenced:
		return "fenced"
	case partitionStopping:
		return "stopping"
	}
	return "?"
}

// openWaitingMax bounds the requests a partition holds while opening.
const openWaitingMax = 1 << 14

// partitionHome is the part of a partition that survives its restarts.
type partitionHome struct {
	name        string
	dir         string
	options     queue.Options     // declared, defaults applied
	declared    wire.QueueOptions // as the first declare named them, for info
	manager     *actor.PID
	subscribers *subscriptionSet
	// replication is set in a cluster (partition_cluster.go).
	replication *replicaHome
	// appliedMode is the mode in force once a revision changed it (0: as
	// declared); written by the partition, read by the declare path
	// (partition_mode.go).
	appliedMode atomic.Uint32
	// publishFences are the sessions this queue refuses publishes of
	// (publish_fence.go); here, so a restart of the instance keeps them.
	publishFences partitionFences
}

// partition is one instance of the partition actor.
type partition struct {
	entry   *runtime.Entry
	core    *brokerCore
	home    *partitionHome
	metrics *queueMetrics

	state    partitionState
	fenceErr error
	q        *queue.Queue
	opening  *openAttempt // the open in flight, while opening
	logPID   *actor.PID   // the log actor: owns the queue log's appender (log_writer.go)
	handle   *logHandle   // the queue's log seam, while the log actor has it
	syncPID  *actor.PID   // the sync scheduler: the log's background sync timer and explicit syncs
	// reopenWaits counts the children a reopen waits for before it opens.
	reopenWaits int
	// checkpointRunning is closed when the checkpoint task in flight (if
	// any) returned; the close of the queue waits for it.
	checkpointRunning chan struct{}
	// syncInterval is the background sync interval this queue's log runs
	// with: set at open, changed live only through the sync scheduler.
	syncInterval time.Duration
	waiting      []any // requests received while opening
	notified     *atomic.Bool

	tickets  map[queue.Ticket]pendingPublish // publishes appended, not yet confirmed
	busy     []publishBatch                  // publishes refused with ErrBusy, retried after Advance
	purges   map[queue.Ticket]pendingPurge
	ackSyncs map[queue.Ticket]pendingAckSync // ack-syncs appended, not yet applied (partition_acksync.go)
	handoffs map[uint64]queue.DeadLetter     // dead letters sent to their queue, by offset
	deadline deadlineTimer

	deadLetterBatches   map[uint64]deadLetterBatch // copies this partition published as a dead-letter queue
	nextDeadLetterBatch uint64
	handoffRetry        bool // a retryHandoffs timer is armed

	checkpointing        bool
	appliedSinceSnapshot uint64

	deleting    bool // the queue is deleted: finish what was sent before, then stop
	deleteTimer *time.Timer

	offers []queue.Offer // reused by each publish (partition_publish.go)

	// Cluster mode only (partition_cluster.go): the role and replication
	// state, and what follower links share with the partition.
	repl       *clusterState
	linkShared *linkShared

	// modes is the mode-change bookkeeping (partition_mode.go).
	modes modeState

	// handover is what a fenced cluster partition keeps while it hands
	// the partition on (partition_handover.go).
	handover handoverState
}

type pendingPublish struct {
	replyTo *actor.PID
	batchID uint64
	count   int
	bytes   int
	start   time.Time
}

type pendingPurge struct {
	replyTo   *actor.PID
	requestID uint64
	removed   uint64
}

// openAttempt is one queue.Open running on its own goroutine. Whoever
// abandons it (an instance that restarts or stops while opening) closes
// what it opened once done is closed.
type openAttempt struct {
	done   chan struct{} // closed when Open returned
	q      *queue.Queue
	handle *logHandle  // the queue's log seam, once the log opened
	fence  fenceRecord // a cluster partition's fence (fence.go)
	err    error
}

// Messages the partition sends itself.
type (
	queueOpened     struct{ attempt *openAttempt }
	appendsDone     struct{}
	deadlineReached struct{ generation uint64 }
	checkpointRan   struct {
		q    *queue.Queue // the queue the task belongs to
		task *queue.CheckpointTask
		err  error
	}
	retryHandoffs struct{}
	sessionEnded  struct{ session *actor.PID }
)

func newPartition(entry *runtime.Entry, core *brokerCore, home *partitionHome) *partition {
	return &partition{
		entry: entry, core: core, home: home,
		metrics:  core.metrics.forQueue(home.name, boundaryOf(home.options.Mode).String()),
		tickets:  make(map[queue.Ticket]pendingPublish),
		purges:   make(map[queue.Ticket]pendingPurge),
		handoffs: make(map[uint64]queue.DeadLetter),
		notified: new(atomic.Bool),
	}
}

func (p *partition) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		p.becomeOpening(ctx)
	case queueOpened:
		if msg.attempt == p.opening {
			p.opened(ctx, msg.attempt)
		}
	case *actor.Restarting:
		p.restarting(ctx)
	case *actor.Stopping:
		p.stopping(ctx)
	case *actor.Terminated:
		if p.isChild(ctx, msg.Who) {
			p.childGone(ctx)
			return
		}
		// A system message overtakes the user messages the session sent
		// before it stopped (its last settles): handle the end after them.
		ctx.Send(ctx.Self(), sessionEnded{session: msg.Who})
	case sessionEnded:
		p.sessionGone(ctx, msg.session)
	case reopenQueue:
		p.reopen(ctx)
	case diskCheck:
		p.checkDisk(ctx) // in every state: a copy fenced by a stall watches for its disk's return
		if p.repl != nil {
			p.maybeStepDownCutOff(ctx) // an owner also when no link reports any more
		}
	case *actor.Stopped:
	case injectedPanic:
		panic(fmt.Errorf("injected panic in partition %s: %s", p.home.name, msg.reason))
	case infoRequest:
		if p.state == partitionOpening {
			// Counts are unknown until the queue is open: answer then, so a
			// reopening queue never reports that it holds nothing.
			if msg.replyTo == nil {
				msg.replyTo = ctx.Sender() // a request future
			}
			p.hold(ctx, msg)
			return
		}
		p.info(ctx, msg) // answered in every other state: a request future waits for it
	case consumersRequest:
		p.consumers(ctx) // answered in every state, like info
	case coordinationView:
		if p.state == partitionOpening {
			// Not held for after the open, as requests are: a view is
			// state, and the open reads the one in force (clusterOpened).
			// Replayed after that, an older view undid what the newer one
			// did: an owner that had just taken epoch 1 saw a view from
			// before its claim, stepped down and recovered to epoch 2.
			return
		}
		p.receiveServing(ctx, msg)
	default:
		if p.state == partitionOpening {
			p.hold(ctx, msg)
			return
		}
		p.receiveServing(ctx, msg)
	}
}

// hold keeps a request until the queue is open.
func (p *partition) hold(ctx actor.Context, message any) {
	if len(p.waiting) >= openWaitingMax {
		p.refuse(ctx, message, requestFailure{code: wire.CodeUnavailable,
			message: fmt.Sprintf("queue %q is still opening; retry shortly", p.home.name)})
		return
	}
	p.waiting = append(p.waiting, message)
}

func (p *partition) receiveServing(ctx actor.Context, message any) {
	if p.deleting && p.refuseWhileDeleting(ctx, message) {
		return
	}
	if p.refuseUnlessOwner(ctx, message) {
		return
	}
	switch msg := message.(type) {
	case infoRequest: // held while opening
		p.info(ctx, msg)
	case publishBatch:
		p.publish(ctx, msg)
	case appendsDone:
		p.notified.Store(false)
		p.advance(ctx)
	case settleRequest:
		p.settle(ctx, msg)
	case subscribeRequest:
		p.subscribe(ctx, msg)
	case unsubscribeRequest:
		p.unsubscribe(ctx, msg)
	case deadlineReached:
		p.deadlineReached(ctx, msg)
	case purgeRequest:
		p.purge(ctx, msg)
	case deadLetterPublish:
		p.publishDeadLetters(ctx, msg)
	case deadLettersTaken:
		p.deadLettersTaken(ctx, msg)
	case deadLettersRefused:
		p.deadLettersRefused(ctx, msg)
	case retryHandoffs:
		p.resendHandoffs(ctx)
	case checkpointRan:
		p.checkpointRan(ctx, msg)
	case logLatched:
		if msg.handle != p.handle {
			// The old log's report, come after a reopen closed it: it
			// could be sent after the partition stopped that log, and
			// fenced the reopened queue with the cause already recovered.
			return
		}
		p.becomeFenced(ctx, msg.err)
	case setSyncInterval:
		if p.syncPID != nil {
			p.syncInterval = msg.interval
			ctx.Send(p.syncPID, msg)
		}
	case syncRequest:
		p.syncNow(ctx, msg)
	case deleteQueue:
		p.beginDelete(ctx)
	case deleteDrainExpired:
		p.core.logger.Warn("deleted queue's appends did not finish in time; it stops without them", "queue", p.home.name)
		p.stopDeleted(ctx)
	default:
		if p.receiveFenced(ctx, message) || p.receiveMode(ctx, message) || p.receiveCluster(ctx, message) {
			return
		}
		p.core.logger.Error("partition got an unexpected message", "queue", p.home.name,
			"type", fmt.Sprintf("%T", message))
	}
}

// becomeOpening starts opening the queue on its own goroutine.
func (p *partition) becomeOpening(ctx actor.Context) {
	p.state = partitionOpening
	p.publishSummary()
	self, system := ctx.Self(), ctx.ActorSystem()
	dir, options, logOptions := p.home.dir, p.home.options, p.logOptions()
	p.syncInterval = logOptions.SyncInterval
	clock := p.core.config.Clock
	previous := p.core.closing.pending(dir) // a close of this directory still running
	replication, fs, dataDir, name, unique := p.home.replication, p.core.config.FS, p.core.config.DataDir, p.home.name, p.core.newID()
	attempt := &openAttempt{done: make(chan struct{})}
	p.opening = attempt
	p.core.storageClosers.Add(1) // an open in flight must finish before Close returns
	go func() {
		defer p.core.storageClosers.Done()
		for _, closing := range previous {
			<-closing
		}
		openLog := queue.WithLogOpener(func(dir string, options log.Options) (queue.Log, error) {
			handle, err := openLogHandle(dir, options)
			if err != nil {
				return nil, err
			}
			attempt.handle = handle
			return handle, nil
		})
		if replication != nil {
			attempt.q, attempt.fence, attempt.err = openReplicated(fs, dataDir, dir, name, replication.shardID, unique,
				replication.copyMayHaveCounted, options, logOptions, queue.Clock(clock), openLog)
		} else {
			attempt.q, attempt.err = queue.Open(dir, options, logOptions, queue.Clock(clock), openLog)
		}
		close(attempt.done)
		system.Root.Send(self, queueOpened{attempt: attempt})
	}()
}

// logOptions are the options every queue log opens with (in direct mode,
// driven by the log actor: log_handle.go).
func (p *partition) logOptions() log.Options {
	options := log.DefaultOptions()
	options.FS = newTimedFS(p.core.config.FS, p.metrics) // fibril_log_write_seconds, fibril_log_fsync_seconds
	options.Budget = p.core.budget                       // the node's tail cache and descriptors
	options.SegmentBytes = p.core.config.SegmentBytes
	options.SyncInterval = p.core.syncInterval()
	options.Clock = p.core.config.Clock
	options.Logger = p.core.logger
	options.MaxRecordBytes = int(p.core.config.MaxBodyBytes) + deliverFrameSlackBytes
	return options
}

func (p *partition) opened(ctx actor.Context, attempt *openAttempt) {
	p.opening = nil
	if attempt.err != nil {
		p.core.logger.Error("queue failed to open", "queue", p.home.name, "err", attempt.err)
		p.becomeFenced(ctx, fmt.Errorf("open: %w", attempt.err))
		ctx.Send(p.home.manager, partitionOpenFailed{name: p.home.name, err: attempt.err})
		p.drainWaiting(ctx)
		return
	}
	p.q = attempt.q
	p.state = partitionOpen
	notified, self, system := p.notified, ctx.Self(), ctx.ActorSystem()
	notify := func() {
		if notified.CompareAndSwap(false, true) {
			system.Root.Send(self, appendsDone{})
		}
	}
	p.q.SetNotify(notify)
	p.spawnStorageActors(ctx, attempt.handle, notify)
	if recovery := p.q.Recovery(); recovery.ExpiredLeases > 0 || p.home.subscribers.len() > 0 {
		p.core.logger.Info("queue opened", "queue", p.home.name, "log_end", recovery.LogEnd,
			"expired_leases", recovery.ExpiredLeases, "replayed", recovery.Replayed)
	}
	if p.isReplicated() {
		// A cluster partition opens as a replica and serves only once the
		// coordination shard names it (partition_cluster.go).
		ctx.Send(p.home.manager, partitionReplicaOpened{name: p.home.name, pid: ctx.Self()})
		p.clusterOpened(ctx, attempt.fence)
		p.drainWaiting(ctx)
		p.publishSummary()
		return
	}
	p.drainWaiting(ctx)
	p.advance(ctx)
	p.publishSummary()
	ctx.Send(p.home.manager, partitionReady{name: p.home.name, pid: ctx.Self()})
}

// drainWaiting handles the requests held while opening, in order.
func (p *partition) drainWaiting(ctx actor.Context) {
	waiting := p.waiting
	p.waiting = nil
	for _, message := range waiting {
		p.receiveServing(ctx, message)
	}
}

// spawnStorageActors starts the sync scheduler and the log actor, and
// hands the log actor the queue log's appender: from here on every append
// the queue makes goes through it.
func (p *partition) spawnStorageActors(ctx actor.Context, handle *logHandle, notify func()) {
	p.logPID, p.syncPID = spawnLogActors(ctx, p.core, handle, p.syncInterval, notify, p.metrics)
	p.handle = handle
}

// becomeFenced stops serving after a storage failure. A cluster copy
// also stops owning or recovering and hands the partition on to a healthy
// copy (partition_handover.go); what it owed is answered there, with
// not_owner, so its clients go to the new owner.
func (p *partition) becomeFenced(ctx actor.Context, cause error) {
	if p.state == partitionFenced {
		return
	}
	p.state = partitionFenced
	p.fenceErr = cause
	if errors.Is(cause, queue.ErrFenced) || errors.Is(cause, log.ErrLatched) {
		p.metrics.latched.Store(true)
	}
	p.core.metrics.fencedQueues.Add(1)
	p.core.logger.Error("queue fenced", "queue", p.home.name, "err", cause)
	p.handover = handoverState{}
	p.handOverFenced(ctx, cause)
	failure := p.fencedFailure()
	// A publish that reached the log below its durable frontier was made
	// durable before the failure (its sync came back, the confirm had not
	// been released yet), and the reopen's cut keeps it: it is answered
	// outcome_unknown, never "not stored". One above it is cut by the
	// reopen, and one that never reached the log is not stored: both get
	// the fence itself.
	p.refuseOwedSplit(ctx, failure, p.appendedDurableBeforeFence())
	p.home.subscribers.endAll(ctx, failure)
	p.deadline.stop()
	p.publishSummary()
	if errors.Is(cause, log.ErrCutNotRecorded) {
		// The disk refused even the record of where the log's durable
		// records end: the node stops rather than run on it.
		panic(fmt.Errorf("actors: queue %q: %w: %w", p.home.name, cause, runtime.ErrFatal))
	}
}

func (p *partition) fencedFailure() requestFailure {
	return fencedFailureOf(p.home.name, p.fenceErr)
}

// fencedFailureOf says a queue is fenced, names the storage cause once,
// and names the action that recovers it.
func fencedFailureOf(name string, cause error) requestFailure {
	return requestFailure{code: wire.CodeFenced, message: fmt.Sprintf(
		"queue %q is fenced after a storage failure: %s; %s", name, storageCause(cause), reopenAdvice(name))}
}

// restarting runs on the failed instance: answer what it owed, keep the
// subscriptions for the next instance, and close the queue off the mailbox.
func (p *partition) restarting(ctx actor.Context) {
	p.metrics.restarts.Inc()
	failure := requestFailure{code: wire.CodeInternal, message: fmt.Sprintf(
		"queue %q restarted after an internal failure", p.home.name)}
	p.refuseOwedUnknown(ctx, failure)
	p.home.subscribers.forgetHeld()
	notice := partitionNotice{queue: p.home.name, failure: requestFailure{code: wire.CodeInternal,
		message: "the queue restarted after an internal failure; held deliveries are stale and will be delivered again"}}
	p.home.subscribers.notifySessions(ctx, notice)
	if p.state == partitionFenced {
		p.core.metrics.fencedQueues.Add(-1)
	}
	p.closeQueueAsync()
}

// stopping runs when the queue is deleted, the node shuts down, or the
// manager above restarts; StopCause says which.
func (p *partition) stopping(ctx actor.Context) {
	cause := p.entry.StopCause()
	failure := p.stoppedFailure(cause)
	if p.state == partitionFenced {
		p.core.metrics.fencedQueues.Add(-1)
	}
	p.state = partitionStopping
	if p.deleteTimer != nil {
		p.deleteTimer.Stop()
	}
	if cause == runtime.StopDelete {
		p.refuseOwed(ctx, failure) // the queue is gone: nothing of it is stored
	} else {
		p.refuseOwedUnknown(ctx, failure)
	}
	p.home.subscribers.endAll(ctx, failure)
	p.closeQueueAsync()
	p.publishSummary()
}

// stoppedFailure is what a stopping partition answers, by why it stops.
func (p *partition) stoppedFailure(cause runtime.StopReason) requestFailure {
	switch cause {
	case runtime.StopDelete:
		return requestFailure{code: wire.CodeUnknownQueue, message: fmt.Sprintf("queue %q was deleted", p.home.name)}
	case runtime.StopRestart:
		return requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q is reopening after an internal failure of the node; retry", p.home.name)}
	case runtime.StopFailed:
		return requestFailure{code: wire.CodeInternal, message: fmt.Sprintf(
			"queue %q stopped after repeated internal failures; %s", p.home.name, reopenAdvice(p.home.name))}
	}
	return requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
		"queue %q stopped: the node is shutting down", p.home.name)}
}

// ReceiveStopping answers what arrives once the partition stops, without
// touching the queue (closed or closing): requests are refused with the
// reason it stops, its own timers' and storage's messages are dropped.
func (p *partition) ReceiveStopping(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case infoRequest:
		// Its counts are gone with the closed queue: say why rather than
		// report an empty queue.
		p.answerInfo(ctx, msg, infoResult{requestID: msg.requestID, failure: p.stoppedFailure(p.entry.StopCause())})
	case consumersRequest:
		p.consumers(ctx)
	case reopenQueue:
		ctx.Send(p.home.manager, reopenRefused{name: p.home.name, reason: fmt.Sprintf("queue %q is stopping", p.home.name)})
	default:
		p.refuse(ctx, msg, p.stoppedFailure(p.entry.StopCause()))
	}
}

// closeQueueAsync closes the queue on a goroutine (Close flushes and syncs,
// which is I/O). Whatever touches the same directory next (the restarted
// instance, a reopen, a partition of a restarted manager, the removal of a
// deleted queue's files) waits for it through core.closing. An open still
// in flight, and a checkpoint task still running, are waited for first.
func (p *partition) closeQueueAsync() {
	q, attempt, checkpoint := p.q, p.opening, p.checkpointRunning
	p.q, p.opening, p.checkpointRunning = nil, nil, nil
	p.handle = nil // the close stages whatever is still listed
	closed := p.core.closing.begin(p.home.dir)
	name, logger, core, dir := p.home.name, p.core.logger, p.core, p.home.dir
	p.core.storageClosers.Add(1)
	go func() {
		defer p.core.storageClosers.Done()
		defer core.closing.end(dir, closed)
		if attempt != nil {
			<-attempt.done
			q = attempt.q
		}
		if checkpoint != nil {
			<-checkpoint
		}
		if q != nil {
			if err := q.Close(); err != nil && !errors.Is(err, queue.ErrClosed) {
				logger.Warn("queue close reported an error", "queue", name, "err", err)
			}
		}
	}()
}

// refuse answers a request the partition cannot serve.
func (p *partition) refuse(ctx actor.Context, message any, failure requestFailure) {
	switch msg := message.(type) {
	case infoRequest:
		p.answerInfo(ctx, msg, infoResult{requestID: msg.requestID, failure: failure})
	case publishBatch:
		p.refuseBatch(ctx, msg, failure)
	case subscribeRequest:
		ctx.Send(msg.replyTo, subscribeResult{requestID: msg.requestID, subscriptionID: msg.subscriptionID, failure: failure})
	case unsubscribeRequest:
		ctx.Send(msg.replyTo, unsubscribeResult{requestID: msg.requestID, subscriptionID: msg.subscriptionID, failure: failure})
	case settleRequest:
		ctx.Send(msg.replyTo, settleFailed{requestID: msg.requestID, subscriptionID: msg.subscriptionID, tags: msg.tags, failure: failure})
	case purgeRequest:
		ctx.Send(msg.replyTo, purgeResult{requestID: msg.requestID, failure: failure})
	case deadLetterPublish:
		ctx.Send(msg.source, deadLettersRefused{offsets: msg.offsets(), failure: failure})
	case syncRequest:
		ctx.Send(msg.replyTo, syncDone{err: fmt.Errorf("%w: %s", ErrQueueNotServing, failure.message)})
	case modeChangeRequest:
		p.answerMode(ctx, msg.replyTo, modeChangeResult{requestID: msg.requestID, mode: msg.mode, failure: failure})
	}
}

// failureOf maps a queue error to the failure a client is told.
func (p *partition) failureOf(err error) requestFailure {
	switch {
	case errors.Is(err, queue.ErrFenced):
		if p.fenceErr == nil {
			// Not fenced yet: this error is the first news of the fault,
			// so it is the cause the client must see.
			return fencedFailureOf(p.home.name, err)
		}
		return p.fencedFailure()
	case errors.Is(err, queue.ErrQueueFull):
		return requestFailure{code: wire.CodeLimitReached, message: err.Error()}
	case errors.Is(err, log.ErrTooLarge):
		return requestFailure{code: wire.CodeInvalidRequest, message: "a message is larger than the node stores: " + err.Error()}
	case errors.Is(err, queue.ErrNotLeased), errors.Is(err, queue.ErrWrongHolder), errors.Is(err, queue.ErrSettlePending):
		return requestFailure{code: wire.CodeUnknownDeliveryTag, message: err.Error()}
	}
	return requestFailure{code: wire.CodeInternal, message: fmt.Sprintf("queue %q: %v", p.home.name, err)}
}

// maybeFence fences the partition when err says the queue is fenced, and
// reports whether it did.
func (p *partition) maybeFence(ctx actor.Context, err error) bool {
	if err == nil || !errors.Is(err, queue.ErrFenced) {
		return false
	}
	p.becomeFenced(ctx, err)
	return true
}

// publishSummary runs after every batch: it stores counters, and the
// registry formats them only when read (runtime/registry.go). A fence is rare and
// carries its error text, so it is formatted at once.
func (p *partition) publishSummary() {
	if p.state == partitionFenced {
		p.entry.SetSummary(fmt.Sprintf("%s %s tickets=%d busy=%d subscriptions=%d fence=%q", p.state,
			p.home.options.Mode, len(p.tickets), len(p.busy), p.home.subscribers.len(), p.fenceErr.Error()))
		return
	}
	if p.repl != nil {
		p.entry.SetSummaryValues(&clusterPartitionSummary, int64(p.state), int64(p.home.options.Mode),
			int64(len(p.tickets)), int64(len(p.busy)), int64(p.home.subscribers.len()), int64(p.repl.role),
			int64(p.repl.epoch), int64(p.repl.fence), int64(p.repl.committed))
		return
	}
	p.entry.SetSummaryValues(&partitionSummary, int64(p.state), int64(p.home.options.Mode),
		int64(len(p.tickets)), int64(len(p.busy)), int64(p.home.subscribers.len()))
}

// clusterPartitionSummary adds the replication role to partitionSummary.
var clusterPartitionSummary runtime.SummaryFormat = func(v [runtime.SummaryValuesMax]int64) string {
	return fmt.Sprintf("%s %s tickets=%d busy=%d subscriptions=%d role=%s epoch=%d fence=%d committed=%d",
		partitionState(v[0]), queue.Mode(v[1]), v[2], v[3], v[4], partitionRole(v[5]), v[6], v[7], v[8])
}

// partitionSummary formats publishSummary's values.
var partitionSummary runtime.SummaryFormat = func(v [runtime.SummaryValuesMax]int64) string {
	return fmt.Sprintf("%s %s tickets=%d busy=%d subscriptions=%d", partitionState(v[0]), queue.Mode(v[1]),
		v[2], v[3], v[4])
}

// boundaryOf is the boundary a mode's confirms stand on.
func boundaryOf(mode queue.Mode) wire.Boundary {
	if mode == queue.Buffered {
		return wire.BoundaryWritten
	}
	return wire.BoundaryDurable
}

// partitionDir is where a queue's single partition lives; a name that
// breaks the naming rule, or would leave the queues directory, is an
// error (wire.JoinQueuePath), whatever check it came through before.
func partitionDir(dataDir, name string) (string, error) {
	return wire.JoinQueuePath(path.Join(dataDir, queuesDirName), name, "0")
}

// queuesDirName is the data directory's folder of queues.
const queuesDirName = "queues"

// runCheckpoint runs a checkpoint task of q off the mailbox and reports
// back; the returned channel closes when the task returned.
func runCheckpoint(system *actor.ActorSystem, self *actor.PID, q *queue.Queue, task *queue.CheckpointTask,
	closers interface {
		Add(int)
		Done()
	}) chan struct{} {
	done := make(chan struct{})
	closers.Add(1)
	go func() {
		defer closers.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := task.Run(ctx)
		system.Root.Send(self, checkpointRan{q: q, task: task, err: err})
	}()
	return done
}
