package actors

// The log actor ("log" under a partition) watches its partition's log: a
// goroutine waits on the log's durable-frontier watch (which also wakes on
// a latch or close) and sends the actor a message; the actor reads the
// log's status, publishes the durable lag (written records and bytes not
// yet fsynced) in its registry summary and a latch to the metrics, tells
// the partition that the durable frontier moved (appendsDone: settles
// applied by a background sync), and tells it at once when the log has
// latched, so a failed background sync fences the queue even when no
// append is in flight to notice it. (The unsynced gauges are read from
// queue info at scrape time: metrics_queues.go.)
//
// It needs the log handle, so it runs only when the queue exposes it (see
// syncControlOf); without it the partition reads queue info on a timer
// (partition.statusTick).
//
// States: watching (from Started), and the lifecycle phases every actor
// has (doc.go, "Lifecycle"): Stopping and Restarting end the watch
// goroutine. Takes frontierMoved; sends logLatched to its partition.

import (
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/log"
)

// logStatusSource is what the log actor reads; *log.Log implements it.
type logStatusSource interface {
	Watch(kind log.FrontierKind) *log.Watch
	Status() log.Status
}

// frontierMoved is sent by the watch goroutine.
type frontierMoved struct{}

// logLatched tells the partition its log refuses appends.
type logLatched struct{ err error }

type logWatcher struct {
	entry     *Entry
	source    logStatusSource
	partition *actor.PID
	metrics   *queueMetrics

	stop     chan struct{}
	stopOnce sync.Once
	reported bool
}

func newLogWatcher(entry *Entry, source logStatusSource, partition *actor.PID, metrics *queueMetrics) *logWatcher {
	return &logWatcher{entry: entry, source: source, partition: partition, metrics: metrics}
}

func (w *logWatcher) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		w.startWatching(ctx)
		w.refresh(ctx)
	case frontierMoved:
		w.refresh(ctx)
		// A durable queue's acks wait only for write and apply once a sync
		// covers them; a background sync completes no append, so the
		// partition learns of it here.
		ctx.Send(w.partition, appendsDone{})
	case *actor.Stopping, *actor.Restarting:
		w.stopOnce.Do(func() { close(w.stop) })
	}
}

func (w *logWatcher) startWatching(ctx actor.Context) {
	w.stop = make(chan struct{})
	w.stopOnce = sync.Once{}
	watch := w.source.Watch(log.FrontierDurable)
	self, system, stop := ctx.Self(), ctx.ActorSystem(), w.stop
	go func() {
		defer watch.Close()
		for {
			select {
			case <-watch.C():
				system.Root.Send(self, frontierMoved{})
			case <-stop:
				return
			}
		}
	}()
}

// refresh publishes the log's status and reports a latch once.
func (w *logWatcher) refresh(ctx actor.Context) {
	status := w.source.Status()
	w.metrics.latched.Store(status.Latched)
	values := [SummaryValuesMax]int64{int64(status.Frontiers.Written), int64(status.Frontiers.Durable),
		int64(status.DurableLagRecords), status.DurableLagBytes, 0}
	if status.SyncPending {
		values[4] = 1
	}
	if !status.Latched {
		// Every durable move lands here: format only when the registry is read.
		w.entry.SetSummaryValues(&logWatcherSummary, values[:5]...)
		return
	}
	w.entry.SetSummary(fmt.Sprintf("latched: %v; %s", status.LastError, logWatcherSummary(values)))
	if !w.reported {
		w.reported = true
		ctx.Send(w.partition, logLatched{err: fmt.Errorf("log latched: %w", status.LastError)})
	}
}

// logWatcherSummary formats refresh's values.
var logWatcherSummary SummaryFormat = func(v [SummaryValuesMax]int64) string {
	return fmt.Sprintf("written=%d durable=%d lag=%d records/%d bytes sync_pending=%v", v[0], v[1], v[2], v[3], v[4] != 0)
}
