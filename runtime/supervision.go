package runtime

// Supervision policy, stated once for the whole tree.
//
//   - The root actor (node) runs under FatalGuardian. Any failure that reaches
//     the guardian is one the node cannot contain: the guardian hands it to
//     the broker's fatal function on a new goroutine (HandleFailure runs on
//     the failing actor's goroutine and must not block) and never escalates,
//     because escalating from a guardian panics inside the library's recover
//     path.
//   - Every supervisor has a FailurePolicy: a decider, a restart budget
//     (maxRestarts within a window) and what to do when the budget is spent.
//     A reason that wraps ErrFatal always escalates. Node's children escalate
//     when their budget is spent, which ends at the guardian; partitions are
//     stopped and recorded as failed by their manager, which keeps serving
//     every other queue; sessions are never restarted (their state is a
//     connection), they are stopped and their connection closed.
//   - A child that was asked to stop, is stopping, or has an ancestor that is
//     stopping or restarting is never restarted (lifecycle.go): its failure
//     is answered with Stop, whatever the decider says, and the restart
//     budget is not charged. A fatal reason still escalates.
//   - Each decision is published on the actor system's event stream; every
//     decision the policy made (not one forced by a stop in progress) is
//     reported to the observe hook, so no actor stops or restarts without
//     its supervisor knowing why.
//   - panicLogging is the outermost receiver middleware of every actor: it
//     logs the panic value and stack, then re-panics so the library's
//     mailbox recovers it and supervision proceeds.

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// ErrFatal marks a failure the node cannot contain. Panicking with an error
// that wraps it (fmt.Errorf("...: %w", ErrFatal)) escalates through every
// supervisor to the guardian, which stops the process with a non-zero exit.
var ErrFatal = errors.New("runtime: failure the node cannot contain")

// failureError turns a recovered panic value into an error.
func failureError(reason any) error {
	if err, ok := reason.(error); ok {
		return err
	}
	return fmt.Errorf("panic: %v", reason)
}

// FatalGuardian supervises the root actor. Whatever reaches it ends the
// process through fatal, which says it in the node's log (one line).
type FatalGuardian struct {
	Fatal func(error)
}

var _ actor.SupervisorStrategy = (*FatalGuardian)(nil)

// HandleFailure runs on the failing actor's goroutine: it must not block and
// must never escalate. The failed actor stays suspended; the fatal function
// decides how the process ends.
func (g *FatalGuardian) HandleFailure(system *actor.ActorSystem, _ actor.Supervisor, child *actor.PID,
	_ *actor.RestartStatistics, reason any, _ any) {
	err := fmt.Errorf("runtime: %s failed and the node cannot contain it: %w", child.Id, failureError(reason))
	system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.StopDirective})
	go g.Fatal(err)
}

// FailurePolicy is the supervisor strategy of one level of the tree.
type FailurePolicy struct {
	Level       string        // for logs: "node", "queues", "sessions", "partition"
	MaxRestarts int           // restarts allowed within the window before exhausted applies
	Window      time.Duration // the restart budget window
	// decide picks the directive for a non-fatal failure: Restart, Stop or
	// Escalate (Resume is never used: a panicking actor's state is suspect).
	Decide func(err error) actor.Directive
	// exhausted replaces Restart once the budget is spent: Stop or Escalate.
	Exhausted actor.Directive
	// observe, when set, learns every decision. It runs on the supervisor's
	// goroutine and must not block (send a message, bump a counter).
	Observe func(child *actor.PID, err error, directive actor.Directive)
	Logger  *slog.Logger
	// registry holds the children's lifecycle entries (nil in tests that
	// build a policy alone: every child then counts as running).
	Registry *Registry
}

var _ actor.SupervisorStrategy = (*FailurePolicy)(nil)

// HandleFailure applies the policy to one failed child. The decision and a
// restart's send happen under the child's stop lock (lifecycle.go), so a
// stop requested meanwhile is either seen here or reaches the child after
// the restart.
func (p *FailurePolicy) HandleFailure(system *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID,
	stats *actor.RestartStatistics, reason any, _ any) {
	err := failureError(reason)
	var entry *Entry
	if p.Registry != nil {
		entry = p.Registry.EntryAt(child.Id)
	}
	if entry != nil {
		entry.stopMu.Lock()
	}
	forced := entry != nil && entry.restartBlocked()
	directive := p.directiveFor(err, stats, forced)
	if directive == actor.RestartDirective {
		supervisor.RestartChildren(child)
	}
	if directive == actor.StopDirective && entry != nil {
		entry.stopAsked.CompareAndSwap(uint32(StopNotAsked), uint32(StopFailed))
	}
	if entry != nil {
		entry.stopMu.Unlock()
	}
	p.Logger.Warn("supervisor decided", "level", p.Level, "actor", child.Id,
		"directive", directive.String(), "err", err, "stop_in_progress", forced)
	if directive != actor.EscalateDirective {
		system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: directive})
	}
	if p.Observe != nil && !forced {
		p.Observe(child, err, directive)
	}
	switch directive {
	case actor.RestartDirective: // sent above
	case actor.StopDirective:
		supervisor.StopChildren(child)
	case actor.EscalateDirective:
		supervisor.EscalateFailure(err, nil)
	default:
		panic(fmt.Sprintf("runtime: policy %s produced directive %v", p.Level, directive))
	}
}

// directiveFor is the pure decision: fatal reasons escalate; a child whose
// stop is in progress (forced) stops; restarts are counted against the
// budget, and a spent budget becomes exhausted.
func (p *FailurePolicy) directiveFor(err error, stats *actor.RestartStatistics, forced bool) actor.Directive {
	if errors.Is(err, ErrFatal) {
		return actor.EscalateDirective
	}
	if forced {
		return actor.StopDirective
	}
	directive := p.Decide(err)
	if directive != actor.RestartDirective {
		return directive
	}
	stats.Fail()
	if stats.NumberOfFailures(p.Window) > p.MaxRestarts {
		stats.Reset()
		return p.Exhausted
	}
	return actor.RestartDirective
}

// AlwaysRestart is the decider of levels whose children can be rebuilt from
// durable state (partitions reopen their log).
func AlwaysRestart(error) actor.Directive { return actor.RestartDirective }

// AlwaysStop is the decider of levels whose children cannot be rebuilt
// (sessions: their state is a connection the client must re-establish).
func AlwaysStop(error) actor.Directive { return actor.StopDirective }

// AlwaysEscalate is the decider of an actor whose children are part of it
// (a partition's log writer and sync scheduler): their failure is the
// partition's failure.
func AlwaysEscalate(error) actor.Directive { return actor.EscalateDirective }

// panicLogging logs a panic's value and stack, then re-panics so the mailbox
// recovers it and supervision takes over.
func panicLogging(logger *slog.Logger, kind string) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, envelope *actor.MessageEnvelope) {
			defer func() {
				if reason := recover(); reason != nil {
					logger.Error("actor panicked", "actor", ctx.Self().Id, "kind", kind,
						"message", fmt.Sprintf("%T", envelope.Message), "reason", fmt.Sprint(reason),
						"stack", string(debug.Stack()))
					panic(reason)
				}
			}()
			next(ctx, envelope)
		}
	}
}
