package actors

// The mode-change request's paths outside the partition
// (partition_mode.go): a client's change-mode frame (FMC1) through its
// session, and Broker.ChangeMode for the HTTP endpoint and tools. Both
// end in a modeChangeRequest to the queue's partition; the session
// answers with mode-changed (FMK1) or an error frame, the Broker method
// with a ModeChange or an error.
//
// A session routes change-mode like purge: to the local partition when it
// serves the queue, or with a redirect to the owner in a cluster. It is
// not a barrier: the partition sees it in the connection's order with the
// connection's publishes, so a publish sent after the request is admitted
// under the revision's mode (docs/protocol.md, FMC1).

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// inChangeMode is a client's change-mode frame.
type inChangeMode struct{ frame *wire.ChangeMode }

// changeMode forwards a client's change-mode to the queue's partition. It
// needs Admin on the queue: a switch to buffered weakens what a confirm
// promises for every publisher of the queue.
func (s *session) changeMode(ctx actor.Context, msg inChangeMode) {
	if ValidateQueueName(msg.frame.Queue) == nil && !s.permit(msg.frame.RequestID, access.Admin, msg.frame.Queue) {
		return
	}
	if s.maybeClusterRoute(ctx, msg.frame.Queue, msg) {
		return
	}
	partition, ok := s.route(msg.frame.RequestID, msg.frame.Queue)
	if !ok {
		return
	}
	mode := queue.Durable
	if msg.frame.Mode == wire.ModeBuffered {
		mode = queue.Buffered
	}
	ctx.Send(partition, modeChangeRequest{replyTo: ctx.Self(), requestID: msg.frame.RequestID, mode: mode,
		wait: time.Duration(msg.frame.WaitMs) * time.Millisecond})
}

// modeAnswered sends the partition's answer to the client.
func (s *session) modeAnswered(msg modeChangeResult) {
	if msg.failure.failed() {
		s.push(msg.failure.frame(msg.requestID))
		return
	}
	s.push(&wire.ModeChanged{RequestID: msg.requestID, Outcome: msg.outcome, Mode: wireMode(msg.mode),
		Applied: wireMode(msg.applied), Revision: msg.revision, Message: msg.message})
}

// ModeChange is what Broker.ChangeMode reports.
type ModeChange struct {
	// Outcome: applied (the switch happened), unchanged (the queue already
	// ran the mode) or pending (recorded, not applied within the wait).
	Outcome  wire.ModeOutcome
	Mode     queue.Mode // asked for
	Applied  queue.Mode // in force when the partition answered
	Revision uint64     // the revision that sets Mode
	Message  string     // what a pending change waits for
}

// Errors of Broker.ChangeMode besides ErrUnknownQueue and ErrQueueNotServing.
var (
	// ErrModeChangePending: a change to the other mode is still pending.
	ErrModeChangePending = errors.New("actors: a mode change is pending")
	// ErrNotOwner: in a cluster, another node serves the queue.
	ErrNotOwner = errors.New("actors: this node does not serve the queue")
)

// ChangeMode switches an existing queue to mode (docs/durability.md,
// "Changing the mode of an existing queue") and waits up to wait for the
// revision to apply. A pending outcome is not an error: the revision is
// recorded and applies once the copies it needs are durable.
func (b *Broker) ChangeMode(name string, mode queue.Mode, wait time.Duration) (ModeChange, error) {
	if mode != queue.Durable && mode != queue.Buffered {
		return ModeChange{}, fmt.Errorf("%w: %d", queue.ErrModeUnknown, mode)
	}
	route, ok := b.core.directory.lookup(name)
	if !ok {
		return ModeChange{}, fmt.Errorf("%w: %q", ErrUnknownQueue, name)
	}
	if route.failure.failed() {
		if route.failure.code == wire.CodeNotOwner {
			return ModeChange{}, fmt.Errorf("%w: %s", ErrNotOwner, route.failure.message)
		}
		return ModeChange{}, fmt.Errorf("%w: %s", ErrQueueNotServing, route.failure.message)
	}
	wait = min(max(wait, 0), maxModeWait)
	future := actor.NewFuture(b.core.system, wait+10*time.Second)
	b.core.system.Root.Send(route.pid, modeChangeRequest{replyTo: future.PID(), mode: mode, wait: wait})
	answer, err := future.Result()
	if err != nil {
		return ModeChange{}, fmt.Errorf("%w: queue %q did not answer the mode change: %v", ErrQueueNotServing, name, err)
	}
	result, ok := answer.(modeChangeResult)
	if !ok {
		return ModeChange{}, fmt.Errorf("%w: queue %q answered the mode change with %T", ErrQueueNotServing, name, answer)
	}
	switch result.failure.code {
	case 0:
	case wire.CodeModeChangePending:
		return ModeChange{}, fmt.Errorf("%w: %s", ErrModeChangePending, result.failure.message)
	case wire.CodeNotOwner:
		return ModeChange{}, fmt.Errorf("%w: %s", ErrNotOwner, result.failure.message)
	case wire.CodeUnknownQueue:
		return ModeChange{}, fmt.Errorf("%w: %s", ErrUnknownQueue, result.failure.message)
	default:
		return ModeChange{}, fmt.Errorf("%w: %s (%s)", ErrQueueNotServing, result.failure.message, result.failure.code)
	}
	return ModeChange{Outcome: result.outcome, Mode: result.mode, Applied: result.applied, Revision: result.revision,
		Message: result.message}, nil
}
