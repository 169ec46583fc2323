package bench

// The pacer turns a Source into sends at intended times.
//
// For each planned publish, in order:
//
//  1. a paced publish waits until its intended time t0 + Offset; if that
//     time has already passed (the sender is behind), it does not wait;
//  2. it takes a slot in the window of unconfirmed publishes, waiting while
//     the window is full;
//  3. it is sent, stamped with both its intended time and its send time.
//
// An unpaced publish skips step 1, and its intended time is its send time.
// The pacer never moves an intended time: a stall in step 2 or in a slow send
// makes every later publish late, and each is measured from when it should
// have gone, so a stall is not hidden by the sender politely waiting
// (no coordinated omission).
//
// The run ends when the source ends, when an unpaced run reaches its
// duration, or when the publish limit that bounds the run's memory is
// reached; the reason is reported.

import (
	"context"
	"time"
)

// Clock is the run's monotonic clock: a duration since a fixed origin.
type Clock interface {
	Now() time.Duration
	// SleepUntil returns once Now() >= at, or with the context's error.
	SleepUntil(ctx context.Context, at time.Duration) error
}

// realClock reads the process's monotonic clock.
type realClock struct{ origin time.Time }

// NewRealClock returns a clock whose origin is the moment of the call.
func NewRealClock() Clock { return realClock{origin: time.Now()} }

func (c realClock) Now() time.Duration { return time.Since(c.origin) }

// sleepChunk bounds one sleep, so a cancelled context is noticed soon.
const sleepChunk = 10 * time.Millisecond

// SleepUntil sleeps the thread in chunks of at most sleepChunk (see
// platform_linux.go for why it does not use a Go timer).
func (c realClock) SleepUntil(ctx context.Context, at time.Duration) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wait := at - c.Now()
		if wait <= 0 {
			return nil
		}
		sleepFor(min(wait, sleepChunk))
	}
}

// StopReason says why a run stopped publishing.
type StopReason string

// The reasons a run stops publishing.
const (
	StopSourceEnded StopReason = "source-ended"
	StopDuration    StopReason = "duration-elapsed"
	StopLimit       StopReason = "message-limit"
)

// sendFunc sends publish seq. intended and sentAt are on the pacer's clock.
type sendFunc func(seq uint64, planned Planned, intended, sentAt time.Duration) error

// pacer drives one run's publishes. It is used by one goroutine.
type pacer struct {
	clock  Clock
	source Source
	// start is t0 on the clock; runFor ends unpaced runs at start+runFor.
	start  time.Duration
	runFor time.Duration
	// limit is the most publishes the run may send.
	limit uint64
	// acquire takes a window slot, blocking while the window is full.
	acquire func(ctx context.Context) error
	send    sendFunc
}

// run sends publishes until one of the stop conditions. It returns how many
// were sent. An error from acquire, send or the clock ends the run.
func (p pacer) run(ctx context.Context) (uint64, StopReason, error) {
	defer holdPreciseThread()()
	end := p.start + p.runFor
	for seq := uint64(0); ; seq++ {
		planned, ok := p.source.Next(seq)
		switch {
		case !ok:
			return seq, StopSourceEnded, nil
		case !planned.Paced && p.clock.Now() >= end:
			return seq, StopDuration, nil
		case seq >= p.limit:
			return seq, StopLimit, nil
		}
		intended := p.start + planned.Offset
		if planned.Paced {
			if err := p.clock.SleepUntil(ctx, intended); err != nil {
				return seq, "", err
			}
		}
		if err := p.acquire(ctx); err != nil {
			return seq, "", err
		}
		sentAt := p.clock.Now()
		if !planned.Paced {
			intended = sentAt
		}
		if err := p.send(seq, planned, intended, sentAt); err != nil {
			return seq, "", err
		}
	}
}
