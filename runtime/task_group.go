package runtime

import (
	"sync"
	"time"
)

// TaskGroup counts running background tasks (queue storage opens, closes
// and checkpoints) so that Broker.Close can wait for them. Unlike
// sync.WaitGroup it lets a task join while a wait is in progress: when a
// shutdown's wait for the actor tree times out, partitions still stopping
// start their closes while Close already waits for storage, and the wait
// then covers those closes too. (With a WaitGroup that is an Add racing a
// Wait on a zero counter, which the race detector reports.)
//
// Invariant: running >= 0; idle is closed exactly when running == 0.
type TaskGroup struct {
	mu      sync.Mutex
	running int
	idle    chan struct{}
}

// Add counts n more running tasks (n < 0: tasks ended).
func (g *TaskGroup) Add(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lazyInit()
	before := g.running
	g.running += n
	switch {
	case g.running < 0:
		panic("runtime: TaskGroup count below zero")
	case before == 0 && g.running > 0:
		g.idle = make(chan struct{})
	case before > 0 && g.running == 0:
		close(g.idle)
	}
}

// Done counts one task ended.
func (g *TaskGroup) Done() { g.Add(-1) }

// lazyInit makes the zero TaskGroup idle.
func (g *TaskGroup) lazyInit() {
	if g.idle == nil {
		g.idle = make(chan struct{})
		close(g.idle)
	}
}

// waitUntil waits until no task runs or deadline, and reports whether the
// group became idle. A task that joins during the wait is waited for too.
func (g *TaskGroup) WaitUntil(deadline time.Time) bool {
	for {
		g.mu.Lock()
		g.lazyInit()
		idle := g.idle
		g.mu.Unlock()
		if !WaitBefore(idle, deadline) {
			return false
		}
		g.mu.Lock()
		done := g.running == 0
		g.mu.Unlock()
		if done {
			return true
		}
	}
}
