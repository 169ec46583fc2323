package runtime

// The lifecycle mechanism every actor of the tree runs under. doc.go states
// the rules ("Lifecycle"); this file is what enforces them, so an actor
// inherits them by being spawned through Registry.Props and cannot forget
// one.
//
// Phases, kept on the actor's registry Entry:
//
//	starting    spawned; Started not handled yet
//	running     handling messages
//	restarting  its supervisor restarts it: the failed instance has handled
//	            Restarting, its children are stopping, and a fresh instance
//	            handles Started next (running again)
//	stopping    it has handled Stopping; its children are stopping; it
//	            finalizes once the last of them terminated
//	stopped     it has handled Stopped and left the registry; it never runs again
//
// Transitions: starting → running (Started); running → restarting
// (Restarting) → running (Started of the fresh instance); any phase →
// stopping (Stopping) → stopped (Stopped). Nothing leaves stopping except
// to stopped.
//
// The pieces:
//
//   - The registry's lifecycle middleware moves the phase as the library
//     delivers Started, Restarting, Stopping and Stopped, and links each
//     entry to its parent's.
//   - lifecycleGate wraps every actor instance. Once the actor is stopping,
//     its Receive sees only Stopping and Stopped; every other message goes
//     to the actor's ReceiveStopping when it has one (to answer a request:
//     "the queue stopped") and is dropped otherwise, so nothing touches
//     what Stopping closed. A panic while handling Stopping, Stopped,
//     Restarting or a message in the stopping phase is logged with its
//     stack and goes no further: the library would otherwise abandon the
//     stop or restart halfway (a stopping actor whose Stopping panicked
//     never stops its children and never terminates).
//   - Registry.StopActor is how an actor asks another to stop: it records
//     the reason on the target's entry, then sends the stop, under the
//     entry's lock. FailurePolicy (supervision.go) takes the same lock to
//     decide, and answers Stop instead of Restart when the child was asked
//     to stop, is stopping, or has an ancestor that is stopping or
//     restarting. Because both sides hold the lock while they send, the
//     child receives the stop and the restart in the order they were
//     decided: a restart can never overtake a stop and revive the actor.
//   - signal is a readiness signal that fires once, whoever fires it and
//     however often (a restarted actor fires it again harmlessly).
//   - WaitBefore bounds every wait of a shutdown by one deadline.

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// phase is where an actor is in its life; see the file comment.
type Phase int32

const (
	PhaseStarting Phase = iota
	PhaseRunning
	PhaseRestarting
	PhaseStopping
	PhaseStopped
)

func (p Phase) String() string {
	switch p {
	case PhaseStarting:
		return "starting"
	case PhaseRunning:
		return "running"
	case PhaseRestarting:
		return "restarting"
	case PhaseStopping:
		return "stopping"
	case PhaseStopped:
		return "stopped"
	}
	return fmt.Sprintf("phase(%d)", int32(p))
}

// StopReason says why an actor stops. The stopping actor reads it
// (Entry.StopCause) to tell the actors waiting on it what happened.
type StopReason uint32

const (
	StopNotAsked StopReason = iota
	// StopShutdown: the node is shutting down.
	StopShutdown
	// StopDelete: what the actor serves (a queue) is deleted.
	StopDelete
	// StopRestart: the actor is rebuilt: a supervisor above it restarts, or
	// its owner reopens it.
	StopRestart
	// StopFailed: its supervisor stopped it after a failure.
	StopFailed
	// StopDone: the actor finished its own work (a session whose
	// connection ended).
	StopDone
)

func (r StopReason) String() string {
	switch r {
	case StopNotAsked:
		return "not asked"
	case StopShutdown:
		return "shutdown"
	case StopDelete:
		return "delete"
	case StopRestart:
		return "restart"
	case StopFailed:
		return "failed"
	case StopDone:
		return "done"
	}
	return fmt.Sprintf("stopReason(%d)", uint32(r))
}

// stoppingReceiver is implemented by actors that answer messages arriving
// once they are stopping (requests whose senders wait for a reply).
// ReceiveStopping runs on the actor's mailbox like Receive, with the
// message in ctx.Message(); it MUST NOT touch what Stopping closed.
type stoppingReceiver interface {
	ReceiveStopping(ctx actor.Context)
}

// lifecycleGate wraps an actor instance; see the file comment.
type lifecycleGate struct {
	inner  actor.Actor
	entry  *Entry
	logger *slog.Logger
}

func (g *lifecycleGate) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
		g.guarded(ctx, g.inner.Receive)
		return
	}
	if g.entry.Phase() >= PhaseStopping {
		if receiver, ok := g.inner.(stoppingReceiver); ok {
			g.guarded(ctx, receiver.ReceiveStopping)
		}
		return
	}
	g.inner.Receive(ctx)
}

// guarded runs a handler whose panic must not abandon a stop or a restart:
// the panic is logged with its stack and goes no further.
func (g *lifecycleGate) guarded(ctx actor.Context, handle func(actor.Context)) {
	defer func() {
		if reason := recover(); reason != nil {
			g.logger.Error("actor panicked while stopping or restarting; the stop goes on",
				"actor", ctx.Self().Id, "kind", g.entry.kind, "message", fmt.Sprintf("%T", ctx.Message()),
				"reason", fmt.Sprint(reason), "stack", string(debug.Stack()))
		}
	}()
	handle(ctx)
}

// stopper is what can send a stop: an actor's context or the root context.
type Stopper interface{ Stop(pid *actor.PID) }

// StopActor asks the actor at pid to stop for reason. The reason is
// recorded first (a reason already recorded is kept) and the stop sent
// under the entry's lock, which FailurePolicy also takes, so no restart
// decided later can reach the actor after this stop.
func (r *Registry) StopActor(from Stopper, pid *actor.PID, reason StopReason) {
	entry := r.EntryAt(pid.Id)
	if entry == nil {
		from.Stop(pid) // not started yet, or gone: the library answers either
		return
	}
	entry.stopMu.Lock()
	defer entry.stopMu.Unlock()
	entry.stopAsked.CompareAndSwap(uint32(StopNotAsked), uint32(reason))
	from.Stop(pid)
}

// Phase returns where the actor is in its life.
func (e *Entry) Phase() Phase { return Phase(e.phase.Load()) }

func (e *Entry) BecomePhase(p Phase) { e.phase.Store(int32(p)) }

// StopCause says why the actor stops: the reason it was asked to stop
// with, or else the nearest ancestor's (a restarting ancestor means
// StopRestart). With no reason recorded anywhere it is StopShutdown: the
// only stop that comes from outside the tree is the node's.
func (e *Entry) StopCause() StopReason {
	for entry := e; entry != nil; entry = entry.parent {
		if asked := StopReason(entry.stopAsked.Load()); asked != StopNotAsked {
			return asked
		}
		if entry != e && entry.Phase() == PhaseRestarting {
			return StopRestart
		}
	}
	return StopShutdown
}

// restartBlocked reports whether a supervisor must not restart the actor:
// it was asked to stop or is stopping, or an ancestor is stopping or
// restarting (the library is about to stop it with that ancestor). The
// caller holds e.stopMu.
func (e *Entry) restartBlocked() bool {
	if StopReason(e.stopAsked.Load()) != StopNotAsked || e.Phase() >= PhaseStopping {
		return true
	}
	for ancestor := e.parent; ancestor != nil; ancestor = ancestor.parent {
		switch {
		case StopReason(ancestor.stopAsked.Load()) != StopNotAsked,
			ancestor.Phase() == PhaseRestarting, ancestor.Phase() >= PhaseStopping:
			return true
		}
	}
	return false
}

// Stopped is closed once the actor handled Stopped.
func (e *Entry) Stopped() <-chan struct{} { return e.stopped }

// signal is a readiness signal: the first fire records its error and
// closes the channel; later fires do nothing. Safe for concurrent use.
type Signal struct {
	once sync.Once
	done chan struct{}
	err  error
}

func NewSignal() *Signal { return &Signal{done: make(chan struct{})} }

// fire fires the signal with err (nil: ready) and reports whether this
// call was the one that fired it.
func (s *Signal) Fire(err error) bool {
	fired := false
	s.once.Do(func() {
		s.err = err
		close(s.done)
		fired = true
	})
	return fired
}

// C is closed once the signal fired.
func (s *Signal) C() <-chan struct{} { return s.done }

// Err is the error the signal fired with; call it after C is closed.
func (s *Signal) Err() error { return s.err }

// WaitBefore waits for done until deadline and reports whether done closed.
func WaitBefore(done <-chan struct{}, deadline time.Time) bool {
	select {
	case <-done:
		return true
	default:
	}
	timer := time.NewTimer(max(time.Until(deadline), 0))
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

// WaitGroupUntil waits for group until deadline and reports whether it
// finished. A group that does not finish in time leaves one goroutine
// waiting on it, which ends when the group does.
func WaitGroupUntil(group *sync.WaitGroup, deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		group.Wait()
		close(done)
	}()
	return WaitBefore(done, deadline)
}
