package runtime

import (
	"bytes"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// goroutineID returns the running goroutine's number, from its stack
// header ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:goruntime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

func (d *KeepAliveDispatcher) hasWorker() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.worker
}

// An actor on the keep-alive dispatcher gets every message in order, and
// its wake-ups (most messages here find the mailbox idle and wake it) run
// on one goroutine while it stays busier than the idle timeout.
func TestKeepAliveDispatcherReusesOneGoroutine(t *testing.T) {
	system := actor.NewActorSystem()
	dispatcher := NewKeepAliveDispatcher(DispatcherThroughput, time.Minute)
	t.Cleanup(dispatcher.Retire)
	type seen struct {
		n         int
		goroutine string
	}
	got := make(chan seen, 1)
	props := actor.PropsFromFunc(func(ctx actor.Context) {
		if n, ok := ctx.Message().(int); ok {
			got <- seen{n: n, goroutine: goroutineID()}
		}
	}, actor.WithDispatcher(dispatcher))
	pid := system.Root.Spawn(props)
	goroutines := map[string]bool{}
	for i := range 200 {
		system.Root.Send(pid, i)
		s := <-got
		if s.n != i {
			t.Fatalf("message %d arrived as %d", i, s.n)
		}
		goroutines[s.goroutine] = true
	}
	if len(goroutines) != 1 {
		t.Fatalf("200 wake-ups ran on %d goroutines, want 1", len(goroutines))
	}
	if err := system.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
}

// An idle worker exits; the next wake-up starts a new one.
func TestKeepAliveDispatcherWorkerExitsWhenIdle(t *testing.T) {
	dispatcher := NewKeepAliveDispatcher(DispatcherThroughput, 5*time.Millisecond)
	ran := make(chan string, 1)
	dispatcher.Schedule(func() { ran <- goroutineID() })
	first := <-ran
	waitFor(t, "the idle worker to exit", func() bool { return !dispatcher.hasWorker() })
	dispatcher.Schedule(func() { ran <- goroutineID() })
	if second := <-ran; second == first {
		t.Fatalf("a wake-up after the idle exit ran on the exited worker %s", first)
	}
}

// Schedule never blocks: with the worker busy and a wake-up already in its
// slot, another wake-up runs at once on a goroutine of its own.
func TestKeepAliveDispatcherScheduleNeverBlocks(t *testing.T) {
	dispatcher := NewKeepAliveDispatcher(DispatcherThroughput, time.Minute)
	t.Cleanup(dispatcher.Retire)
	release, started := make(chan struct{}), make(chan struct{})
	dispatcher.Schedule(func() { close(started); <-release })
	<-started // the worker holds the first run
	order := make(chan string, 2)
	dispatcher.Schedule(func() { order <- "slot" }) // waits in the slot
	dispatcher.Schedule(func() { order <- "overflow" })
	if got := <-order; got != "overflow" {
		t.Fatalf("first to run was %q, want the overflow wake-up while the worker is busy", got)
	}
	close(release)
	if got := <-order; got != "slot" {
		t.Fatalf("then %q, want the slot's wake-up", got)
	}
}

// After retire the worker exits once idle, and later wake-ups still run.
func TestKeepAliveDispatcherRetire(t *testing.T) {
	dispatcher := NewKeepAliveDispatcher(DispatcherThroughput, time.Minute)
	ran := make(chan struct{}, 1)
	dispatcher.Schedule(func() { ran <- struct{}{} })
	<-ran
	dispatcher.Retire()
	waitFor(t, "the retired worker to exit", func() bool { return !dispatcher.hasWorker() })
	dispatcher.Schedule(func() { ran <- struct{}{} })
	<-ran
	if dispatcher.hasWorker() {
		t.Fatal("a retired dispatcher started a worker")
	}
}

// Actors that send to each other from their Receive, each on its own
// keep-alive dispatcher, never wait on one another: a ring of actors passes
// many tokens around at once and every token completes its laps.
func TestKeepAliveDispatchersDoNotDeadlock(t *testing.T) {
	system := actor.NewActorSystem()
	const actors, tokens, laps = 8, 64, 200
	type token struct{ hops int }
	pids := make([]*actor.PID, actors)
	var finished sync.WaitGroup
	finished.Add(tokens)
	for i := range actors {
		props := actor.PropsFromFunc(func(ctx actor.Context) {
			if msg, ok := ctx.Message().(token); ok {
				if msg.hops == actors*laps {
					finished.Done()
					return
				}
				ctx.Send(pids[(i+1)%actors], token{hops: msg.hops + 1})
			}
		}, actor.WithDispatcher(NewKeepAliveDispatcher(DispatcherThroughput, time.Millisecond)))
		pids[i] = system.Root.Spawn(props)
	}
	for range tokens {
		system.Root.Send(pids[0], token{})
	}
	finished.Wait()
	for _, pid := range pids {
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	}
}
