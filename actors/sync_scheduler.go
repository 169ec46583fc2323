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

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// syncTarget is what the scheduler needs from a log.
type syncTarget interface {
	Tick(now time.Time)
	SetSyncInterval(interval time.Duration)
}

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
	case *actor.Stopping, *actor.Restarting:
		s.disarm()
	}
}

// tickPeriod is how often the log is asked whether a sync is due.
func tickPeriod(interval time.Duration) time.Duration {
	return max(interval/4, time.Millisecond)
}

// becomeArmed starts a new timer generation (or none when sync is off).
func (s *syncScheduler) becomeArmed(ctx actor.Context) {
	s.disarm()
	s.generation++
	if s.interval <= 0 {
		s.entry.SetSummary("background sync off")
		return
	}
	generation, self, system := s.generation, ctx.Self(), ctx.ActorSystem()
	s.timer = time.AfterFunc(tickPeriod(s.interval), func() {
		system.Root.Send(self, syncTick{generation: generation})
	})
	s.entry.SetSummary(fmt.Sprintf("interval %s, %d ticks", s.interval, s.ticks))
}

func (s *syncScheduler) disarm() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}
