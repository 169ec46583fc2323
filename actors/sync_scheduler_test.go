package actors

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// fakeSyncTarget records what the scheduler asks of a log.
type fakeSyncTarget struct {
	mu        sync.Mutex
	ticks     int
	intervals []time.Duration
	ticked    chan struct{}
}

func (f *fakeSyncTarget) Tick(time.Time) {
	f.mu.Lock()
	f.ticks++
	f.mu.Unlock()
	select {
	case f.ticked <- struct{}{}:
	default:
	}
}

func (f *fakeSyncTarget) SetSyncInterval(interval time.Duration) {
	f.mu.Lock()
	f.intervals = append(f.intervals, interval)
	f.mu.Unlock()
}

func (f *fakeSyncTarget) snapshot() (int, []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ticks, append([]time.Duration(nil), f.intervals...)
}

func TestSyncSchedulerTicksAndFollowsTheInterval(t *testing.T) {
	system := newActorSystem(discardLogger())
	registry := NewRegistry(nil)
	target := &fakeSyncTarget{ticked: make(chan struct{}, 1)}
	props := registry.props("sync", discardLogger(), func(entry *Entry) actor.Actor {
		return newSyncScheduler(entry, target, 4*time.Millisecond, time.Now)
	})
	pid, err := system.Root.SpawnNamed(props, "sync")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = system.Root.StopFuture(pid).Wait() }()
	for range 3 {
		select {
		case <-target.ticked:
		case <-time.After(testWait):
			t.Fatal("the scheduler never ticked the log")
		}
	}
	system.Root.Send(pid, setSyncInterval{interval: 0})
	waitFor(t, "sync to turn off", func() bool {
		info, ok := registry.Lookup("sync")
		return ok && info.Summary == "background sync off"
	})
	ticks, intervals := target.snapshot()
	if len(intervals) != 2 || intervals[0] != 4*time.Millisecond || intervals[1] != 0 {
		t.Fatalf("intervals set on the log: %v", intervals)
	}
	// With sync off no timer runs: a tick already in flight belongs to the
	// old generation and is ignored.
	time.Sleep(20 * time.Millisecond)
	if after, _ := target.snapshot(); after != ticks {
		t.Fatalf("ticks went on after sync was turned off: %d then %d", ticks, after)
	}
	if period := tickPeriod(100 * time.Millisecond); period != 25*time.Millisecond {
		t.Fatalf("tick period of 100ms is %v", period)
	}
	if period := tickPeriod(2 * time.Millisecond); period != time.Millisecond {
		t.Fatalf("tick period floor is %v", period)
	}
}
