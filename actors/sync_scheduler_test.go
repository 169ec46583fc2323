package actors

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
)

// fakeSyncTarget records what the scheduler asks of a log. An explicit
// Sync waits for a result on release, when release is set.
type fakeSyncTarget struct {
	mu        sync.Mutex
	intervals []time.Duration
	syncs     int
	release   chan error
}

func (f *fakeSyncTarget) Sync(ctx context.Context) error {
	f.mu.Lock()
	f.syncs++
	f.mu.Unlock()
	if f.release == nil {
		return nil
	}
	select {
	case err := <-f.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeSyncTarget) syncCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// countingHistogram counts observations.
type countingHistogram struct {
	mu     sync.Mutex
	values []float64
}

func (h *countingHistogram) Update(value float64) {
	h.mu.Lock()
	h.values = append(h.values, value)
	h.mu.Unlock()
}

func (h *countingHistogram) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.values)
}

func (f *fakeSyncTarget) SetSyncInterval(interval time.Duration) {
	f.mu.Lock()
	f.intervals = append(f.intervals, interval)
	f.mu.Unlock()
}

func (f *fakeSyncTarget) snapshot() (int, []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs, append([]time.Duration(nil), f.intervals...)
}

// Explicit syncs run one at a time off the mailbox: requests that arrive
// while one runs share the next one (which starts after they asked), every
// request is answered by message with its sync's result, and every sync is
// timed.
func TestSyncSchedulerRunsExplicitSyncs(t *testing.T) {
	system := runtime.NewActorSystem(runtime.DiscardLogger())
	registry := runtime.NewRegistry(nil)
	target := &fakeSyncTarget{release: make(chan error)}
	histogram := &countingHistogram{}
	props := registry.Props("sync", runtime.DiscardLogger(), func(entry *runtime.Entry) actor.Actor {
		scheduler := newSyncScheduler(entry, target, nil, 0, time.Now)
		scheduler.syncSeconds = histogram
		return scheduler
	})
	pid, err := system.Root.SpawnNamed(props, "sync")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = system.Root.StopFuture(pid).Wait() }()
	replies := make(chan error, 3)
	replier := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if done, ok := ctx.Message().(syncDone); ok {
			replies <- done.err
		}
	}))

	system.Root.Send(pid, syncNow{replyTo: replier})
	waitFor(t, "the first sync to start", func() bool { return target.syncCount() == 1 })
	system.Root.Send(pid, syncNow{replyTo: replier})
	system.Root.Send(pid, syncNow{replyTo: replier})
	target.release <- nil
	if err := <-replies; err != nil {
		t.Fatalf("first sync answered %v", err)
	}
	waitFor(t, "the second sync to start", func() bool { return target.syncCount() == 2 })
	failure := errors.New("disk gone")
	target.release <- failure
	for range 2 {
		select {
		case err := <-replies:
			if !errors.Is(err, failure) {
				t.Fatalf("a waiter of the second sync got %v", err)
			}
		case <-time.After(testWait):
			t.Fatal("a waiter was never answered")
		}
	}
	if syncs := target.syncCount(); syncs != 2 {
		t.Fatalf("%d syncs for 3 requests, two of them waiting together", syncs)
	}
	waitFor(t, "both syncs timed", func() bool { return histogram.count() == 2 })
	waitFor(t, "the summary to count both syncs", func() bool {
		info, ok := registry.Lookup("sync")
		return ok && info.Summary == "background sync off; 2 explicit syncs"
	})
}

// tickCounter stands in for a log actor: it counts the syncTicks it gets.
type tickCounter struct {
	ticks atomic.Int64
	got   chan struct{}
}

func (c *tickCounter) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(syncTick); ok {
		c.ticks.Add(1)
		c.got <- struct{}{}
	}
}

// The scheduler answers every syncWanted with one syncTick; a want that
// replaces an armed one
// still gets one tick; an interval change ticks at once, armed or not; and
// nothing asked means no tick and no timer.
func TestSyncSchedulerTicksOnlyWhenAsked(t *testing.T) {
	system := runtime.NewActorSystem(runtime.DiscardLogger())
	registry := runtime.NewRegistry(nil)
	counter := &tickCounter{got: make(chan struct{}, 16)}
	logPID := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return counter }))
	target := &fakeSyncTarget{}
	const interval = 40 * time.Millisecond
	props := registry.Props("sync", runtime.DiscardLogger(), func(entry *runtime.Entry) actor.Actor {
		return newSyncScheduler(entry, target, logPID, interval, time.Now)
	})
	pid, err := system.Root.SpawnNamed(props, "sync")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = system.Root.StopFuture(pid).Wait() }()
	awaitTick := func(what string) {
		t.Helper()
		select {
		case <-counter.got:
		case <-time.After(testWait):
			t.Fatalf("no tick %s", what)
		}
	}

	system.Root.Send(pid, syncWanted{at: time.Now(), log: logPID}) // due already
	awaitTick("for a due want")
	system.Root.Send(pid, syncWanted{at: time.Now().Add(time.Hour), log: logPID})
	system.Root.Send(pid, syncWanted{at: time.Now(), log: logPID}) // replaces the armed one
	awaitTick("for a replaced want")
	system.Root.Send(pid, syncWanted{at: time.Now().Add(time.Hour), log: logPID})
	waitFor(t, "the scheduler to show it is armed", func() bool {
		info, ok := registry.Lookup("sync")
		return ok && strings.Contains(info.Summary, "armed")
	})
	system.Root.Send(pid, setSyncInterval{interval: interval / 2})
	awaitTick("at an interval change")
	system.Root.Send(pid, setSyncInterval{interval: 0}) // not armed: still a tick, so the log decides again
	awaitTick("at a second interval change")
	waitFor(t, "sync to turn off", func() bool {
		info, ok := registry.Lookup("sync")
		return ok && info.Summary == "background sync off"
	})
	if ticks := counter.ticks.Load(); ticks != 4 {
		t.Fatalf("%d ticks for two wants and two interval changes", ticks)
	}
	_, intervals := target.snapshot()
	if len(intervals) != 3 || intervals[0] != interval || intervals[1] != interval/2 || intervals[2] != 0 {
		t.Fatalf("intervals set on the log: %v", intervals)
	}
	// The hour-long want was disarmed by the interval change: nothing else
	// comes. A sync round trip through the scheduler's mailbox, then no tick.
	replies := make(chan error, 1)
	replier := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if done, ok := ctx.Message().(syncDone); ok {
			replies <- done.err
		}
	}))
	system.Root.Send(pid, syncNow{replyTo: replier})
	<-replies
	if ticks := counter.ticks.Load(); ticks != 4 {
		t.Fatalf("%d ticks after the timers were disarmed", ticks)
	}
}
