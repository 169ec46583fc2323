package actors

// The sync scheduler ("sync" under a partition) keeps the one timer of its
// log's background sync, and runs the explicit syncs the partition asks
// for. The decision whether a sync is due stays in the log
// (Appender.SyncDue and MaybeSync, on the log actor's goroutine); this
// actor only supplies time, from time.AfterFunc callbacks that send it a
// message (never ReceiveTimeout, which races at the pinned library
// version).
//
// The protocol with the log actor: the log actor sends syncWanted{at} only
// when its log has written records beyond the durable frontier, no sync
// outstanding and no tick asked for already; the scheduler answers every
// syncWanted with one syncTick when at comes, but never sooner than a
// quarter interval after it asked (at least 1 ms), so writes that follow a
// quiet spell share one background sync; a record therefore waits at most
// about 1.25 intervals for it, as with a ticker at a quarter interval. An
// interval change sends a syncTick at once, asked for or not, so the log
// decides again under the new interval (a duplicate tick or want is
// harmless: the log asks only while it has none asked, and a new want
// replaces the armed timer). A log with
// nothing unsynced asks for nothing, so an idle queue arms no timer and
// wakes no goroutine. A busy one gets at most about one tick per interval:
// each tick is answered by MaybeSync, which starts a sync only if none
// started within the interval (a group commit counts).
//
// A timer carries the generation it was armed in; disarming starts a new
// generation, and a firing of an older one is ignored, so exactly one
// timer is live.
//
// Explicit syncs (syncNow, from Broker.SyncQueue): one log Sync at a time,
// on its own goroutine, which answers each request by message and then
// tells the scheduler it is done. Requests that arrive while one runs wait
// for the next, which starts after they arrived, so each is answered by a
// sync that covers everything written before it asked. These are the
// syncs the broker times (fibril_sync_seconds).
//
// States: idle (no tick asked for) or armed (a timer runs for the log's
// syncWanted), each with an explicit sync running or not; and the
// lifecycle phases every actor has (doc.go, "Lifecycle"): Stopping and
// Restarting disarm the timer and answer the waiting explicit syncs. Takes
// syncWanted (log actor), syncTimerFired (itself), setSyncInterval,
// syncNow (partition), explicitSyncFinished (its sync goroutine); sends
// syncTick (log actor), syncDone.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
)

// syncTarget is what the scheduler needs from a log.
type syncTarget interface {
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

// Messages of the sync scheduler.
type (
	// syncWanted asks for one syncTick at log when at comes.
	syncWanted struct {
		at  time.Time
		log *actor.PID
	}
	// syncTick answers a syncWanted: the log decides whether to sync now.
	syncTick struct{}
	// syncTimerFired is sent by the scheduler's own timer.
	syncTimerFired struct{ generation uint64 }
	// setSyncInterval changes the interval live; 0 turns background sync off.
	setSyncInterval struct{ interval time.Duration }
	// syncNow asks for an explicit sync; syncDone answers it at replyTo.
	syncNow struct{ replyTo *actor.PID }
	// syncDone answers syncNow: nil once everything written before the
	// request is durable.
	syncDone struct{ err error }
	// explicitSyncFinished is sent by the goroutine that ran an explicit
	// sync, after it answered the sync's waiters.
	explicitSyncFinished struct{}
)

type syncScheduler struct {
	entry    *runtime.Entry
	target   syncTarget
	log      *actor.PID // the log actor the ticks go to
	clock    func() time.Time
	interval time.Duration

	generation uint64
	timer      *time.Timer
	wanting    bool   // a syncWanted waits for its tick: the armed timer answers it
	ticks      uint64 // syncTicks sent
	arms       uint64 // timers armed

	// syncSeconds observes explicit syncs; nil in tests that do not count.
	syncSeconds interface{ Update(float64) }
	syncing     bool         // an explicit sync is running
	waiting     []*actor.PID // requests for the next explicit sync
	syncs       uint64
}

func newSyncScheduler(entry *runtime.Entry, target syncTarget, log *actor.PID, interval time.Duration,
	clock func() time.Time) *syncScheduler {
	return &syncScheduler{entry: entry, target: target, log: log, interval: interval, clock: clock}
}

func (s *syncScheduler) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.target.SetSyncInterval(s.interval)
		s.publishSummary()
	case syncWanted:
		s.becomeArmed(ctx, msg)
	case syncTimerFired:
		if msg.generation != s.generation {
			return
		}
		s.timer = nil
		s.tick(ctx)
	case setSyncInterval:
		s.interval = msg.interval
		s.target.SetSyncInterval(msg.interval)
		s.disarm()
		s.tick(ctx) // the log decides again under the new interval
		s.publishSummary()
	case syncNow:
		s.requestSync(ctx, msg.replyTo)
	case explicitSyncFinished:
		s.syncing = false
		s.syncs++
		s.maybeStartSync(ctx)
		s.publishSummary()
	case *actor.Stopping, *actor.Restarting:
		s.disarm()
		s.wanting = false
		for _, waiter := range s.waiting {
			ctx.Send(waiter, syncDone{err: errSyncSchedulerStopped})
		}
		s.waiting = nil
	}
}

// becomeArmed arms the one timer for a log's syncWanted.
func (s *syncScheduler) becomeArmed(ctx actor.Context, want syncWanted) {
	s.disarm()
	s.wanting = true
	s.arms++
	generation, self, system := s.generation, ctx.Self(), ctx.ActorSystem()
	delay := max(want.at.Sub(s.clock()), syncDelayMin(s.interval))
	s.timer = time.AfterFunc(delay, func() {
		system.Root.Send(self, syncTimerFired{generation: generation})
	})
	s.publishSummary()
}

// syncDelayMin is the shortest wait between a syncWanted and its tick.
func syncDelayMin(interval time.Duration) time.Duration {
	return max(interval/4, time.Millisecond)
}

// tick tells the log to decide now, answering the outstanding syncWanted.
func (s *syncScheduler) tick(ctx actor.Context) {
	ctx.Send(s.log, syncTick{})
	s.wanting = false
	s.ticks++
	s.publishSummary()
}

// disarm stops the armed timer, if any, and starts a new generation.
func (s *syncScheduler) disarm() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.generation++
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

// maybeStartSync runs one Sync for every waiting request, off the mailbox,
// timing it from the call to its return. The goroutine answers the waiters
// itself, so they are answered even if the scheduler stops meanwhile.
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

// publishSummary stores counters; the registry formats them only when
// read (runtime/registry.go).
func (s *syncScheduler) publishSummary() {
	var syncing, armed int64
	if s.syncing {
		syncing = 1
	}
	if s.wanting {
		armed = 1
	}
	s.entry.SetSummaryValues(&syncSchedulerSummary, int64(s.interval), int64(s.ticks), int64(s.syncs), syncing, armed)
}

// syncSchedulerSummary formats publishSummary's values.
var syncSchedulerSummary runtime.SummaryFormat = func(v [runtime.SummaryValuesMax]int64) string {
	interval, ticks, syncs, syncing, armed := time.Duration(v[0]), v[1], v[2], v[3] != 0, v[4] != 0
	summary := "background sync off"
	if interval > 0 {
		summary = fmt.Sprintf("interval %s, %d ticks", interval, ticks)
		if armed {
			summary += ", armed"
		}
	}
	if syncs > 0 || syncing {
		summary += fmt.Sprintf("; %d explicit syncs", syncs)
	}
	return summary
}
