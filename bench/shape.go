package bench

// Load shapes and the publishes they plan.
//
// A run publishes message i (0-based, its sequence number) at an intended
// time t0 + Offset(i), where t0 is the start of the run on the run's clock:
//
//   - fixed-rate at R per second: Offset(i) = i * 1s / R, in exact integer
//     nanoseconds;
//   - burst of B every I: Offset(i) = floor(i / B) * I, so all B messages of
//     a burst share the intended time of the burst's start, and the last of
//     them carries the wait behind the others;
//   - saturation: no intended time; a publish is sent as soon as the window
//     of unconfirmed publishes has room, and its intended time is the moment
//     it was sent (a closed loop, so its latency is service time, and the
//     achieved rate is the headline figure);
//   - replay: the offsets of a recorded trace divided by a speed factor.
//
// Paced shapes (fixed-rate, burst, replay) are open loops: a publish that is
// late because the sender or the window stalled is sent as soon as it can
// be, and its latency still counts from its intended time, so a stall shows
// up in every publish that waited behind it instead of being omitted.
// Every shape also bounds the number of unconfirmed publishes (Window), so
// memory stays bounded even when the broker stops answering; for paced
// shapes the bound is wide enough not to matter in a healthy run.

import (
	"errors"
	"fmt"
	"time"
)

// ShapeKind names a family of load shapes.
type ShapeKind string

// The load shape families.
const (
	KindFixedRate  ShapeKind = "fixed-rate"
	KindBurst      ShapeKind = "burst"
	KindSaturation ShapeKind = "saturation"
	KindReplay     ShapeKind = "replay"
)

// Window sizes: SaturationWindow is the issue's "window of 256 unconfirmed
// publishes"; PacedWindow bounds paced shapes (at 10,000 per second it is
// about 0.8 s of publishes before the sender blocks, and a blocked sender
// still measures from intended times).
const (
	SaturationWindow = 256
	PacedWindow      = 8192
)

// Shape is the load a case puts on a queue.
type Shape struct {
	Kind ShapeKind `json:"kind"`
	// RatePerSecond is the publish rate of a fixed-rate shape.
	RatePerSecond int `json:"rate_per_second,omitempty"`
	// BurstSize and BurstInterval describe a burst shape.
	BurstSize     int           `json:"burst_size,omitempty"`
	BurstInterval time.Duration `json:"burst_interval_ns,omitempty"`
	// Window is the most publishes that may be unconfirmed at once.
	Window int `json:"window"`
	// Replay holds the publishes of a replay shape; ReplaySpeed divides
	// their offsets (2 replays twice as fast). The publishes are not
	// written to the JSON report.
	Replay      []Planned `json:"-"`
	ReplaySpeed float64   `json:"replay_speed,omitempty"`
}

// Case is a named load shape.
type Case struct {
	Name  string `json:"name"`
	Shape Shape  `json:"shape"`
}

// The built-in case names.
const (
	CaseSteady100  = "steady-100"
	CaseSteady10k  = "steady-10k"
	CaseBurst200   = "burst-200"
	CaseSaturation = "saturation"
)

// BuiltinCases returns the four cases of the benchmark in their run order.
func BuiltinCases() []Case {
	return []Case{
		{Name: CaseSteady100, Shape: Shape{Kind: KindFixedRate, RatePerSecond: 100, Window: PacedWindow}},
		{Name: CaseSteady10k, Shape: Shape{Kind: KindFixedRate, RatePerSecond: 10_000, Window: PacedWindow}},
		{Name: CaseBurst200, Shape: Shape{Kind: KindBurst, BurstSize: 200, BurstInterval: 100 * time.Millisecond, Window: PacedWindow}},
		{Name: CaseSaturation, Shape: Shape{Kind: KindSaturation, Window: SaturationWindow}},
	}
}

// CaseByName returns the built-in case with that name.
func CaseByName(name string) (Case, error) {
	for _, c := range BuiltinCases() {
		if c.Name == name {
			return c, nil
		}
	}
	return Case{}, fmt.Errorf("%w: %q (known: %s, %s, %s, %s)", ErrUnknownCase, name,
		CaseSteady100, CaseSteady10k, CaseBurst200, CaseSaturation)
}

// ReplayCase builds a case that replays publishes, which must be in
// non-decreasing offset order, at speed times their recorded pace.
func ReplayCase(name string, publishes []Planned, speed float64) (Case, error) {
	c := Case{Name: name, Shape: Shape{Kind: KindReplay, Window: PacedWindow, Replay: publishes, ReplaySpeed: speed}}
	return c, c.Shape.Validate()
}

// Validate reports whether the shape can be run.
func (s Shape) Validate() error {
	if s.Window <= 0 {
		return fmt.Errorf("%w: window %d", ErrInvalidShape, s.Window)
	}
	switch s.Kind {
	case KindFixedRate:
		if s.RatePerSecond <= 0 {
			return fmt.Errorf("%w: fixed rate %d per second", ErrInvalidShape, s.RatePerSecond)
		}
	case KindBurst:
		if s.BurstSize <= 0 || s.BurstInterval <= 0 {
			return fmt.Errorf("%w: burst of %d every %v", ErrInvalidShape, s.BurstSize, s.BurstInterval)
		}
	case KindSaturation:
	case KindReplay:
		return validateReplay(s.Replay, s.ReplaySpeed)
	default:
		return fmt.Errorf("%w: kind %q", ErrInvalidShape, s.Kind)
	}
	return nil
}

func validateReplay(publishes []Planned, speed float64) error {
	if !(speed > 0) {
		return fmt.Errorf("%w: replay speed %v", ErrInvalidShape, speed)
	}
	if len(publishes) == 0 {
		return fmt.Errorf("%w: replay has no publishes", ErrInvalidShape)
	}
	for i := range publishes {
		if publishes[i].Offset < 0 || (i > 0 && publishes[i].Offset < publishes[i-1].Offset) {
			return fmt.Errorf("%w: replay offset %v at %d is out of order", ErrInvalidShape, publishes[i].Offset, i)
		}
	}
	return nil
}

// ErrInvalidShape is returned for a shape that cannot be run.
var ErrInvalidShape = errors.New("bench: invalid load shape")

// Planned is one publish a Source asks for.
type Planned struct {
	// Offset is the intended time of the publish from the start of the run.
	// It is meaningful only when Paced.
	Offset time.Duration
	// Paced publishes wait for their intended time; unpaced ones go as soon
	// as the window has room and take their send time as intended time.
	Paced bool
	// SizeBytes is the payload size, or 0 for the run's size.
	SizeBytes int
}

// Source plans the publishes of one run. Next returns publish index, or
// false when the source has no more; it is called with 0, 1, 2, ... in order
// from a single goroutine. An unpaced source may never end: the run stops it
// when its duration has passed.
type Source interface {
	Next(index uint64) (Planned, bool)
}

// Source returns the publishes of the shape for a run of runFor (warm-up
// included). A replay ignores runFor and ends with its trace.
func (s Shape) Source(runFor time.Duration) Source {
	switch s.Kind {
	case KindFixedRate:
		return fixedRateSource{ratePerSecond: uint64(s.RatePerSecond), runFor: runFor}
	case KindBurst:
		return burstSource{size: uint64(s.BurstSize), interval: s.BurstInterval, runFor: runFor}
	case KindSaturation:
		return saturationSource{}
	case KindReplay:
		return replaySource{publishes: s.Replay, speed: s.ReplaySpeed}
	}
	panic(fmt.Sprintf("bench: source of unvalidated shape kind %q", s.Kind))
}

// RunFor returns how long a run of the shape lasts, warm-up included: the
// given warm-up plus duration, or for a replay the span of its trace at its
// speed (plus one nanosecond, so the last publish is inside the run).
func (s Shape) RunFor(warmup, duration time.Duration) time.Duration {
	if s.Kind == KindReplay {
		last := s.Replay[len(s.Replay)-1].Offset
		return scaleOffset(last, s.ReplaySpeed) + 1
	}
	return warmup + duration
}

// ExpectedPublishes returns how many publishes a run of runFor plans, or
// false when the shape is unpaced and the count depends on the broker.
func (s Shape) ExpectedPublishes(runFor time.Duration) (uint64, bool) {
	switch s.Kind {
	case KindFixedRate:
		return countBelow(runFor, time.Second, uint64(s.RatePerSecond)), true
	case KindBurst:
		return countBelow(runFor, s.BurstInterval, 1) * uint64(s.BurstSize), true
	case KindReplay:
		return uint64(len(s.Replay)), true
	}
	return 0, false
}

// countBelow counts the i >= 0 with i*period/perPeriod < runFor.
func countBelow(runFor, period time.Duration, perPeriod uint64) uint64 {
	if runFor <= 0 {
		return 0
	}
	// i*period < runFor*perPeriod  <=>  i < ceil(runFor*perPeriod/period).
	numerator := uint64(runFor) * perPeriod
	return (numerator + uint64(period) - 1) / uint64(period)
}

type fixedRateSource struct {
	ratePerSecond uint64
	runFor        time.Duration
}

func (s fixedRateSource) Next(index uint64) (Planned, bool) {
	offset := time.Duration(index * uint64(time.Second) / s.ratePerSecond)
	return Planned{Offset: offset, Paced: true}, offset < s.runFor
}

type burstSource struct {
	size     uint64
	interval time.Duration
	runFor   time.Duration
}

func (s burstSource) Next(index uint64) (Planned, bool) {
	offset := time.Duration(index/s.size) * s.interval
	return Planned{Offset: offset, Paced: true}, offset < s.runFor
}

type saturationSource struct{}

func (saturationSource) Next(uint64) (Planned, bool) { return Planned{}, true }

type replaySource struct {
	publishes []Planned
	speed     float64
}

func (s replaySource) Next(index uint64) (Planned, bool) {
	if index >= uint64(len(s.publishes)) {
		return Planned{}, false
	}
	planned := s.publishes[index]
	planned.Offset = scaleOffset(planned.Offset, s.speed)
	planned.Paced = true
	return planned, true
}

func scaleOffset(offset time.Duration, speed float64) time.Duration {
	return time.Duration(float64(offset) / speed)
}
