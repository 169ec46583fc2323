package client

// Changing an existing queue's mode (docs/durability.md, "Changing the
// mode of an existing queue"; frames FMC1/FMK1 in docs/protocol.md).

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// ModeChange is what ChangeMode reports.
type ModeChange struct {
	// Outcome is wire.ModeApplied (the switch happened: every confirm and
	// delivery from now on stands on the new mode's boundary),
	// wire.ModeUnchanged (the queue already ran the mode) or
	// wire.ModePending (recorded, not applied within the wait; Message
	// says what it waits for).
	Outcome  wire.ModeOutcome
	Mode     Mode   // the mode asked for
	Applied  Mode   // the mode in force when the node answered
	Revision uint64 // the revision that sets Mode (0: the declared mode)
	Message  string
}

// DefaultModeChangeWait is how long ChangeMode lets the node hold its
// answer for the switch when ctx has no deadline.
const DefaultModeChangeWait = 30 * time.Second

// ChangeMode switches an existing queue to mode (ModeDurable or
// ModeBuffered) and waits, until ctx's deadline (DefaultModeChangeWait
// without one), for the switch. A pending outcome is not an error: the
// revision is recorded and applies once the copies it needs are durable;
// calling ChangeMode again with the same mode reports on the same
// revision, so a call whose answer was lost can simply be repeated. Asking
// for the other mode while a change is pending fails with a *ServerError
// of code wire.CodeModeChangePending.
func (c *Client) ChangeMode(ctx context.Context, queue string, mode Mode) (ModeChange, error) {
	if err := checkName("queue name", queue); err != nil {
		return ModeChange{}, err
	}
	if mode != ModeDurable && mode != ModeBuffered {
		return ModeChange{}, fmt.Errorf("%w: mode must be durable or buffered", ErrInvalidConfig)
	}
	wait := DefaultModeChangeWait
	if deadline, ok := ctx.Deadline(); ok {
		// Leave the node time to answer before ctx ends: a quarter of the
		// time left, at least half a second (or half of a shorter time).
		// A quarter second was too little on a loaded machine: the reply
		// of a node that waited 750 ms of a 1 s deadline arrived late.
		left := time.Until(deadline)
		wait = max(left-max(left/4, min(left/2, 500*time.Millisecond)), 0)
	}
	waitMs := uint32(min(wait.Milliseconds(), math.MaxUint32))
	answer, err := c.roundTrip(ctx, call{queue: queue, build: func(id uint64) wire.Frame {
		return &wire.ChangeMode{RequestID: id, Queue: queue, Mode: mode, WaitMs: waitMs}
	}})
	if err != nil {
		return ModeChange{}, err
	}
	frame, ok := answer.frame.(*wire.ModeChanged)
	if !ok {
		return ModeChange{}, unexpectedReply("change-mode", answer.frame)
	}
	return ModeChange{Outcome: frame.Outcome, Mode: frame.Mode, Applied: frame.Applied, Revision: frame.Revision,
		Message: frame.Message}, nil
}
