package actors

// The log actor ("log" under a partition) is its partition log's writer:
// it owns the log's direct-mode Appender (storage/log.OpenDirect) from the
// moment the queue is open, and its mailbox serializes everything done to
// it. fsyncs never run here: they run on the log's own sync goroutine,
// whose completions come back as messages.
//
//   - Appends. The queue's seam (log_handle.go) lists each request (append,
//     a replica's encoded append, sync, cut, rebase, seal, close) and
//     kicks the actor when the list goes from empty to not empty. One kick
//     is one write group: the actor stages everything listed, looking again
//     until the list is empty (at most writeGroupRounds times, so a steady
//     stream cannot hold the mailbox), then calls Flush once: one write(2)
//     for the group, and an AfterFsync waiter in it makes the log submit a
//     sync when none is outstanding (group commit: what arrives while a
//     sync runs forms the next one).
//   - Completions. Every done callback runs on this goroutine, inside
//     Stage, Flush or SyncFinished, and the queue's turns into the
//     partition's appendsDone. The log's SyncDone becomes logSyncFinished,
//     answered with Appender.SyncFinished.
//   - Background sync. After every group and every finished sync the actor
//     asks Appender.SyncDue; only when it reports a sync due (written ahead
//     of durable, none outstanding) and no timer is requested does it ask
//     the sync scheduler (sync_scheduler.go) for one tick at that time. The
//     tick comes back as syncTick, answered with MaybeSync. An idle log
//     (nothing written beyond durable) asks for nothing, so it costs no
//     timer and no wake-up.
//   - Frontiers. When the durable frontier moves it tells the partition
//     (appendsDone: a background sync applies a durable queue's acks) and
//     every follower; when the written frontier moves, its followers
//     (logFollow: a follower link ships records once written, before the
//     owner's fsync). Its registry summary shows the frontiers and the
//     durable lag; a latch sets the queue's latched gauge and is reported
//     to the partition once (logLatched), so a failed background sync
//     fences the queue with no append in flight.
//
// States: writing (from Started: the appender is the actor's), latched (a
// write or sync failed: the log refuses appends, every waiter failed;
// the actor keeps reporting), closed (a close request or Stopping handed
// the appender to a closing goroutine; nothing touches it again). The
// lifecycle phases are every actor's (doc.go, "Lifecycle"): Stopping and
// Restarting close the log on a goroutine the broker counts, staging what
// is listed first, so no append the queue made is lost to the stop.
//
// Takes logKick, logSyncFinished (the seam), syncTick (the sync
// scheduler), logFollow, logUnfollow (followers). Sends syncWanted (the
// sync scheduler), logLatched and appendsDone (the partition),
// logFrontiers (followers).

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
)

// writeGroupRounds bounds how often one write group looks for more
// requests before it writes.
const writeGroupRounds = 16

// followersMax bounds the followers of one log.
const followersMax = 64

// Messages of the log actor.
type (
	// logKick: requests are listed (from the seam).
	logKick struct{}
	// logSyncFinished: the log's sync goroutine finished a sync, or the log
	// latched (from the seam's SyncDone).
	logSyncFinished struct{}
	// logFollow asks for logFrontiers at follower whenever the written or
	// durable frontier moves (and once at once); logUnfollow stops it.
	logFollow   struct{ follower *actor.PID }
	logUnfollow struct{ follower *actor.PID }
	// logFrontiers tells a follower where the log's frontiers stand.
	logFrontiers struct {
		frontiers   log.Frontiers
		incarnation uint64
	}
	// logLatched tells the partition its log refuses appends. handle
	// names the log, so that a partition that closed it since (a reopen, a
	// restart) does not take the report for one of the log it runs now.
	logLatched struct {
		handle *logHandle
		err    error
	}
)

type logWriter struct {
	entry     *runtime.Entry
	core      *brokerCore
	handle    *logHandle
	partition *actor.PID
	scheduler *actor.PID
	notify    func() // the partition's appendsDone, coalesced
	metrics   *queueMetrics
	clock     func() time.Time

	closed        bool
	syncRequested bool // a syncWanted is out; the scheduler answers it with one syncTick
	latchReported bool
	reported      log.Frontiers // as last told to followers and the partition
	followers     []*actor.PID
	batch         []logRequest
	groups        uint64 // write groups flushed
	syncWants     uint64 // ticks asked of the scheduler
}

func newLogWriter(entry *runtime.Entry, core *brokerCore, handle *logHandle, partition, scheduler *actor.PID,
	notify func(), metrics *queueMetrics) *logWriter {
	return &logWriter{entry: entry, core: core, handle: handle, partition: partition, scheduler: scheduler,
		notify: notify, metrics: metrics, clock: core.config.Clock}
}

// spawnLogActors starts a partition's sync scheduler and log actor as
// children of ctx, and hands the log actor the appender: ctx makes no
// request of the queue before this returns. A spawn that fails is a bug
// (the names are the partition's own), so it panics.
func spawnLogActors(ctx actor.Context, core *brokerCore, handle *logHandle, interval time.Duration,
	notify func(), metrics *queueMetrics) (logPID, syncPID *actor.PID) {
	logName := actor.NewPID(ctx.Self().Address, ctx.Self().Id+"/log") // spawned next: the ticks go there
	props := core.registry.Props("sync", core.logger, func(entry *runtime.Entry) actor.Actor {
		scheduler := newSyncScheduler(entry, handle, logName, interval, core.config.Clock)
		scheduler.syncSeconds = metrics.syncSeconds
		return scheduler
	})
	syncPID, err := ctx.SpawnNamed(props, "sync")
	if err != nil {
		panic(fmt.Errorf("actors: spawn the sync scheduler of %s: %w", ctx.Self().Id, err))
	}
	partition := ctx.Self()
	props = core.registry.Props("log", core.logger, func(entry *runtime.Entry) actor.Actor {
		return newLogWriter(entry, core, handle, partition, syncPID, notify, metrics)
	})
	logPID, err = ctx.SpawnNamed(props, "log")
	if err != nil {
		panic(fmt.Errorf("actors: spawn the log actor of %s: %w", ctx.Self().Id, err))
	}
	system := ctx.ActorSystem()
	handle.attach(
		func() { system.Root.Send(logPID, logKick{}) },
		func() {
			if handle.woken.CompareAndSwap(false, true) {
				system.Root.Send(logPID, logSyncFinished{})
			}
		})
	return logPID, syncPID
}

func (w *logWriter) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		w.reported = w.handle.l.Frontiers()
		w.publishSummary(w.handle.l.Status())
		w.syncFinished(ctx) // a sync may have finished before the wake-up went to this actor
	case logKick:
		w.writeGroup(ctx)
	case logSyncFinished:
		w.syncFinished(ctx)
	case syncTick:
		w.syncRequested = false
		if !w.closed {
			w.handle.appender.MaybeSync(w.clock())
			w.settle(ctx)
		}
	case logFollow:
		w.follow(ctx, msg.follower)
	case logUnfollow:
		w.unfollow(msg.follower)
	case *actor.Stopping, *actor.Restarting:
		w.close()
	}
}

// writeGroup stages every listed request and writes them as one group.
func (w *logWriter) writeGroup(ctx actor.Context) {
	if w.closed {
		return
	}
	closeAsked := false
	for round := 0; ; round++ {
		if round == writeGroupRounds {
			ctx.Send(ctx.Self(), logKick{}) // still kicked: the rest is the next group
			break
		}
		w.batch = w.handle.take(w.batch[:0])
		if len(w.batch) == 0 {
			break
		}
		for _, request := range w.batch {
			if w.handle.run(request) {
				closeAsked = true
			}
		}
		clear(w.batch)
	}
	w.handle.appender.Flush()
	w.groups++
	if closeAsked {
		w.close()
		return
	}
	w.settle(ctx)
}

func (w *logWriter) syncFinished(ctx actor.Context) {
	w.handle.woken.Store(false)
	if w.closed {
		return
	}
	w.handle.appender.SyncFinished()
	w.settle(ctx)
}

// settle reports what moved and asks for a background sync tick when one
// is due and none is asked for.
func (w *logWriter) settle(ctx actor.Context) {
	status := w.handle.l.Status()
	f := status.Frontiers
	moved := f != w.reported
	if f.Durable != w.reported.Durable {
		w.notify() // a durable queue's acks apply once a sync covers them
	}
	if moved {
		w.reported = f
		w.tellFollowers(ctx, status)
	}
	w.publishSummary(status)
	if status.Latched {
		w.metrics.latched.Store(true)
		if !w.latchReported {
			w.latchReported = true
			ctx.Send(w.partition, logLatched{handle: w.handle, err: fmt.Errorf("log latched: %w", status.LastError)})
		}
		return
	}
	if w.syncRequested || w.scheduler == nil {
		return
	}
	if at, due := w.handle.appender.SyncDue(); due {
		w.syncRequested = true
		w.syncWants++
		ctx.Send(w.scheduler, syncWanted{at: at, log: ctx.Self()})
	}
}

func (w *logWriter) follow(ctx actor.Context, follower *actor.PID) {
	for _, known := range w.followers {
		if known.Equal(follower) {
			return
		}
	}
	if len(w.followers) >= followersMax {
		w.core.logger.Warn("log actor refused a follower: too many", "log", ctx.Self().Id, "follower", follower.Id)
		return
	}
	w.followers = append(w.followers, follower)
	ctx.Send(follower, logFrontiers{frontiers: w.handle.l.Frontiers(), incarnation: w.handle.l.Incarnation()})
}

func (w *logWriter) unfollow(follower *actor.PID) {
	for i, known := range w.followers {
		if known.Equal(follower) {
			w.followers = append(w.followers[:i], w.followers[i+1:]...)
			return
		}
	}
}

func (w *logWriter) tellFollowers(ctx actor.Context, status log.Status) {
	for _, follower := range w.followers {
		ctx.Send(follower, logFrontiers{frontiers: status.Frontiers, incarnation: status.Incarnation})
	}
}

// close hands the appender to a closing goroutine, once: it stages what is
// listed, then writes, syncs and closes the log (log_handle.go, shutDown).
func (w *logWriter) close() {
	if w.closed {
		return
	}
	w.closed = true
	if !w.handle.beginShutDown() {
		return // closed already (the open was abandoned)
	}
	w.core.storageClosers.Add(1)
	go func() {
		defer w.core.storageClosers.Done()
		w.handle.shutDown()
	}()
}

// publishSummary stores the log's progress; the registry formats it only
// when read (runtime/registry.go). A latch is rare and carries its error text.
func (w *logWriter) publishSummary(status log.Status) {
	values := [runtime.SummaryValuesMax]int64{int64(status.Frontiers.Written), int64(status.Frontiers.Durable),
		int64(status.DurableLagRecords), status.DurableLagBytes, 0, int64(w.syncWants)}
	if status.SyncPending {
		values[4] = 1
	}
	if !status.Latched {
		w.entry.SetSummaryValues(&logWriterSummary, values[:6]...)
		return
	}
	w.entry.SetSummary(fmt.Sprintf("latched: %v; %s", status.LastError, logWriterSummary(values)))
}

// logWriterSummary formats publishSummary's values.
var logWriterSummary runtime.SummaryFormat = func(v [runtime.SummaryValuesMax]int64) string {
	return fmt.Sprintf("written=%d durable=%d lag=%d records/%d bytes sync_pending=%v sync_ticks_asked=%d",
		v[0], v[1], v[2], v[3], v[4] != 0, v[5])
}
