package runtime

// The keep-alive dispatcher runs one actor's mailbox on a goroutine that
// outlives a single wake-up. The library's default dispatcher starts a new
// goroutine for every wake-up of a mailbox; that goroutine begins with a
// small stack and grows it by copying each time the actor's Receive goes
// deep (a partition's Advance does), which measured as about a third of the
// broker's CPU at 10,000 messages per second. Here each actor gets its own
// dispatcher (Registry.Props makes one per spawn) whose worker goroutine
// takes the next wake-up from a one-slot hand-off and, once idle for
// DispatcherIdle, exits; the next wake-up starts a new worker. A busy actor
// therefore keeps one goroutine and its grown stack, and an idle one costs
// no goroutine, as before.
//
// Invariant: at most one wake-up waits in the slot. The mailbox calls
// Schedule only when it moves from idle to running, and only the function
// Schedule was given moves it back, so between two Schedules the worker
// has taken the first. If the slot is ever found full anyway (a dispatcher
// shared by two mailboxes, which Registry.Props never does), Schedule runs
// the extra wake-up on a fresh goroutine, as the default dispatcher would.
//
// Why it cannot deadlock: Schedule never blocks. It holds the dispatcher's
// mutex only to fill the slot and decide whether a worker must be started
// (never across a wake-up or a channel operation that can wait), and it
// wakes a parked worker with a non-blocking send on a channel of capacity
// one. So an actor whose Receive sends to another actor (and thereby calls
// that actor's Schedule) returns at once whatever the other actor is doing;
// there is no shared pool whose workers could all be waiting on each
// other, and a mailbox that never empties occupies only its own goroutine.
//
// After the actor stops (retire, called on Stopped) the worker exits as
// soon as the wake-up it runs returns, and any later wake-up (a message
// racing the stop) runs on a fresh goroutine.

import (
	"sync"
	"time"
)

// DispatcherIdle is how long a worker waits for its actor's next wake-up
// before it exits. At 100 messages per second a queue wakes every 10 ms,
// so it keeps its goroutine.
const DispatcherIdle = time.Second

// DispatcherThroughput is how many messages a mailbox runs before it
// yields the processor (runtime.Gosched), the library's default.
const DispatcherThroughput = 300

// KeepAliveDispatcher implements the library's Dispatcher for one mailbox.
type KeepAliveDispatcher struct {
	throughput int
	idle       time.Duration
	wake       chan struct{} // capacity 1: a parked worker has a wake-up to take

	mu      sync.Mutex
	next    func() // the wake-up waiting for the worker; nil when none
	worker  bool   // a worker goroutine is running or parked
	retired bool   // the actor stopped: no worker waits any more
}

func NewKeepAliveDispatcher(throughput int, idle time.Duration) *KeepAliveDispatcher {
	return &KeepAliveDispatcher{throughput: throughput, idle: idle, wake: make(chan struct{}, 1)}
}

// Throughput is the number of messages a mailbox runs before it yields.
func (d *KeepAliveDispatcher) Throughput() int { return d.throughput }

// Schedule hands a mailbox's run to the worker, starting one when none is
// alive. It never blocks (see the file comment).
func (d *KeepAliveDispatcher) Schedule(run func()) {
	d.mu.Lock()
	if d.next != nil || d.retired {
		d.mu.Unlock()
		go run()
		return
	}
	d.next = run
	start := !d.worker
	d.worker = true
	d.mu.Unlock()
	if start {
		go d.work()
		return
	}
	select {
	case d.wake <- struct{}{}:
	default: // a wake-up is already signalled; the worker will see next
	}
}

// retire makes the worker exit after the run in progress; later wake-ups
// each get a fresh goroutine.
func (d *KeepAliveDispatcher) Retire() {
	d.mu.Lock()
	d.retired = true
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}: // a parked worker wakes and exits
	default:
	}
}

// work is the worker goroutine.
func (d *KeepAliveDispatcher) work() {
	var idle *time.Timer
	for {
		run, exit := d.take()
		if exit {
			if idle != nil {
				idle.Stop()
			}
			return
		}
		if run != nil {
			run()
			continue
		}
		if idle == nil {
			idle = time.NewTimer(d.idle)
		} else {
			idle.Reset(d.idle)
		}
		select {
		case <-d.wake: // next is set, or the dispatcher retired; take sees which
		case <-idle.C:
			if d.maybeExitIdle() {
				return
			}
		}
	}
}

// take returns the waiting wake-up, or exit when the actor has stopped and
// nothing waits.
func (d *KeepAliveDispatcher) take() (run func(), exit bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	run, d.next = d.next, nil
	if run == nil && d.retired {
		d.worker = false
		return nil, true
	}
	return run, false
}

// maybeExitIdle ends the worker unless a wake-up arrived meanwhile.
func (d *KeepAliveDispatcher) maybeExitIdle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.next != nil {
		return false
	}
	d.worker = false
	return true
}
