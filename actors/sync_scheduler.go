package actors

// The sync scheduler drives one log's background sync. The log decides
// whether a sync is due (written ahead of durable and the interval passed
// since the last sync started) each time it is ticked; this actor only
// supplies the ticks, from time.AfterFunc callbacks that send it a message
// (never ReceiveTimeout, which races at the pinned library version).
//
// Ticks come every quarter interval (at least 1 ms), so a record waits at
// most about 1.25 intervals for its background sync. A tick carries the
// generation of the timer that sent it; changing the interval starts a new
// generation, and ticks of an older one are ignored, so exactly one timer
// chain is live. An interval of 0 turns background sync off: no timer runs.
//
// It also runs the explicit syncs the partition asks for (syncNow, from
// Broker.SyncQueue): one log.Sync at a time, on its own goroutine, which
// answers each request by message and then tells the scheduler it is done.
// Requests that arrive while one runs wait for the next, which starts
// after they arrived, so each is answered by a sync that covers everything
// written before it asked. These are the only
// syncs the broker can time (fibril_sync_seconds): background syncs start
// inside the log on a tick, and the log does not report their duration.
//
// States: armed (a tick timer runs) or off (interval 0), each with an
// explicit sync running or not; and the lifecycle phases every actor has
// (doc.go, "Lifecycle"): Stopping and Restarting disarm the timer and
// answer the waiting explicit syncs. Takes syncTick, setSyncInterval,
// syncNow, explicitSyncFinished; sends syncDone.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// syncTarget is what the scheduler needs from a log.
type syncTarget interface {
	Tick(now time.Time)
	SetSyncInterval(interval time.Duration)
	Sync(ctx context.Context) error
}

// explicitSyncTimeout bounds one explicit sync.
const explicitSyncTimeout = 30 * time.Second

// explicitSyncWaitersMax bounds the explicit sync requests waiting for the
// next sync of one log.
const explicitSyncWaitersMax = 1024

// errTooManySyncRequests refuses an explicit sync past the waiting bound.
var errTooManySyncRequests = errors.New("actors: too many explicit sync requests waiting for this log")

// errSyncSchedulerStopped answers explicit syncs still waiting when the
// scheduler stops (the queue stopped or restarted).
var errSyncSchedulerStopped = errors.New("actors: the queue's sync scheduler stopped before the sync ran")

// syncNow asks for an explicit sync; syncDone answers it at replyTo.
type syncNow struct{ replyTo *actor.PID }

// syncDone answers syncNow: nil once everything written before the
// request is durable.
type syncDone struct{ err error }

// explicitSyncFinished is sent by the goroutine that ran an explicit sync,
// after it answered the sync's waiters.
type explicitSyncFinished struct{}

// syncTick is sent by the scheduler's own timer.
type syncTick struct{ generation uint64 }

// setSyncInterval changes the interval live; 0 turns background sync off.
type setSyncInterval struct{ interval time.Duration }

type syncScheduler struct {
	entry      *Entry
	target     syncTarget
	clock      func() time.Time
	interval   time.Duration
	generation uint64
	timer      *time.Timer
	ticks      uint64

	// syncSeconds observes explicit syncs; nil in tests that do not count.
	syncSeconds interface{ Update(float64) }
	syncing     bool         // an explicit sync is running
	waiting     []*actor.PID // requests for the next explicit sync
	syncs       uint64
}

func newSyncScheduler(entry *Entry, target syncTarget, interval time.Duration, clock func() time.Time) *syncScheduler {
	return &syncScheduler{entry: entry, target: target, interval: interval, clock: clock}
}

func (s *syncScheduler) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.target.SetSyncInterval(s.interval)
		s.becomeArmed(ctx)
	case syncTick:
		if msg.generation != s.generation {
			return
		}
		s.ticks++
		s.target.Tick(s.clock())
		s.becomeArmed(ctx)
	case setSyncInterval:
		s.interval = msg.interval
		s.target.SetSyncInterval(msg.interval)
		s.becomeArmed(ctx)
	case syncNow:
		s.requestSync(ctx, msg.replyTo)
	case explicitSyncFinished:
		s.syncing = false
		s.syncs++
		s.maybeStartSync(ctx)
		s.publishSummary()
	case *actor.Stopping, *actor.Restarting:
		s.disarm()
		for _, waiter := range s.waiting {
			ctx.Send(waiter, syncDone{err: errSyncSchedulerStopped})
		}
		s.waiting = nil
	}
}

// requestSync queues an explicit sync request and starts a sync when none
// runs.
func (s *syncScheduler) requestSync(ctx actor.Context, replyTo *actor.PID) {
	if len(s.waiting) >= explicitSyncWaitersMax {
		ctx.Send(replyTo, syncDone{err: errTooManySyncRequests})
		return
	}
	s.waiting = append(s.waiting, replyTo)
	s.maybeStartSync(ctx)
}

// maybeStartSync runs one log.Sync for every waiting request, off the
// mailbox, timing it from the call to its return. The goroutine answers
// the waiters itself, so they are answered even if the scheduler stops
// meanwhile.
func (s *syncScheduler) maybeStartSync(ctx actor.Context) {
	if s.syncing || len(s.waiting) == 0 {
		return
	}
	s.syncing = true
	waiters := s.waiting
	s.waiting = nil
	target, clock, histogram := s.target, s.clock, s.syncSeconds
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		syncCtx, cancel := context.WithTimeout(context.Background(), explicitSyncTimeout)
		defer cancel()
		start := clock()
		err := target.Sync(syncCtx)
		if histogram != nil {
			histogram.Update(clock().Sub(start).Seconds())
		}
		for _, waiter := range waiters {
			system.Root.Send(waiter, syncDone{err: err})
		}
		system.Root.Send(self, explicitSyncFinished{})
	}()
}

// tickPeriod is how often the log is asked whether a sync is due.
func tickPeriod(interval time.Duration) time.Duration {
	return max(interval/4, time.Millisecond)
}

// becomeArmed starts a new timer generation (or none when sync is off).
func (s *syncScheduler) becomeArmed(ctx actor.Context) {
	s.disarm()
	s.generation++
	if s.interval > 0 {
		generation, self, system := s.generation, ctx.Self(), ctx.ActorSystem()
		s.timer = time.AfterFunc(tickPeriod(s.interval), func() {
			system.Root.Send(self, syncTick{generation: generation})
		})
	}
	s.publishSummary()
}

// publishSummary runs on every tick: it stores counters, and the registry
// formats them only when read (registry.go).
func (s *syncScheduler) publishSummary() {
	var syncing int64
	if s.syncing {
		syncing = 1
	}
	s.entry.SetSummaryValues(&syncSchedulerSummary, int64(s.interval), int64(s.ticks), int64(s.syncs), syncing)
}

// syncSchedulerSummary formats publishSummary's values.
var syncSchedulerSummary SummaryFormat = func(v [SummaryValuesMax]int64) string {
	interval, ticks, syncs, syncing := time.Duration(v[0]), v[1], v[2], v[3] != 0
	summary := "background sync off"
	if interval > 0 {
		summary = fmt.Sprintf("interval %s, %d ticks", interval, ticks)
	}
	if syncs > 0 || syncing {
		summary += fmt.Sprintf("; %d explicit syncs", syncs)
	}
	return summary
}

func (s *syncScheduler) disarm() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}
