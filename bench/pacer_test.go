package bench

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// stepClock is a clock that only moves when told: SleepUntil jumps to the
// wake-up time, and tests advance it to simulate slow sends.
type stepClock struct{ now time.Duration }

func (c *stepClock) Now() time.Duration { return c.now }

func (c *stepClock) SleepUntil(ctx context.Context, at time.Duration) error {
	c.now = max(c.now, at)
	return ctx.Err()
}

type sentRecord struct {
	seq              uint64
	intended, sentAt time.Duration
}

// pace runs a pacer on a step clock starting at start; onSend may advance
// the clock, and acquire may too.
func pace(t *testing.T, clock *stepClock, shape Shape, start, runFor time.Duration, limit uint64,
	acquire func(seq uint64), onSend func(seq uint64)) ([]sentRecord, StopReason) {
	t.Helper()
	var sent []sentRecord
	next := uint64(0)
	p := pacer{
		clock: clock, source: shape.Source(runFor), start: start, runFor: runFor, limit: limit,
		acquire: func(context.Context) error {
			if acquire != nil {
				acquire(next)
			}
			return nil
		},
		send: func(seq uint64, _ Planned, intended, sentAt time.Duration) error {
			sent = append(sent, sentRecord{seq, intended, sentAt})
			if onSend != nil {
				onSend(seq)
			}
			next = seq + 1
			return nil
		},
	}
	count, reason, err := p.run(context.Background())
	if err != nil {
		t.Fatalf("pacer: %v", err)
	}
	if count != uint64(len(sent)) {
		t.Fatalf("pacer counted %d, sent %d", count, len(sent))
	}
	return sent, reason
}

func TestPacerOnTime(t *testing.T) {
	clock := &stepClock{now: 5 * time.Second}
	shape := Shape{Kind: KindFixedRate, RatePerSecond: 100, Window: 1}
	sent, reason := pace(t, clock, shape, 5*time.Second, 100*time.Millisecond, 1000, nil, nil)
	if reason != StopSourceEnded || len(sent) != 10 {
		t.Fatalf("sent %d, reason %s; want 10 and source-ended", len(sent), reason)
	}
	for i, s := range sent {
		want := 5*time.Second + time.Duration(i)*10*time.Millisecond
		if s.seq != uint64(i) || s.intended != want || s.sentAt != want {
			t.Errorf("publish %d: %+v, want intended = sent at %v", i, s, want)
		}
	}
}

// A stall while sending publish 3 (55 ms) makes publishes 4..8 late. They
// go out at once when the stall ends, each still stamped with its own
// intended time, and publish 9 is on time again.
func TestPacerStallKeepsIntendedTimes(t *testing.T) {
	clock := &stepClock{}
	shape := Shape{Kind: KindFixedRate, RatePerSecond: 100, Window: 1}
	sent, _ := pace(t, clock, shape, 0, 100*time.Millisecond, 1000, nil, func(seq uint64) {
		if seq == 3 {
			clock.now += 55 * time.Millisecond
		}
	})
	if len(sent) != 10 {
		t.Fatalf("sent %d, want 10: a stall must not drop publishes", len(sent))
	}
	for i, s := range sent {
		intended := time.Duration(i) * 10 * time.Millisecond
		sentAt := intended
		if i >= 4 && i <= 8 {
			sentAt = 85 * time.Millisecond
		}
		if s.intended != intended || s.sentAt != sentAt {
			t.Errorf("publish %d: intended %v sent %v, want %v and %v", i, s.intended, s.sentAt, intended, sentAt)
		}
	}
}

// A full window (the acquire of publish 2 waits 25 ms) delays bursts the
// same way: publishes keep the burst's intended time.
func TestPacerWindowWaitKeepsBurstIntendedTime(t *testing.T) {
	clock := &stepClock{}
	shape := Shape{Kind: KindBurst, BurstSize: 3, BurstInterval: 20 * time.Millisecond, Window: 2}
	sent, _ := pace(t, clock, shape, 0, 40*time.Millisecond, 1000, func(seq uint64) {
		if seq == 2 {
			clock.now += 25 * time.Millisecond
		}
	}, nil)
	want := []sentRecord{
		{0, 0, 0}, {1, 0, 0}, {2, 0, 25 * time.Millisecond},
		{3, 20 * time.Millisecond, 25 * time.Millisecond}, {4, 20 * time.Millisecond, 25 * time.Millisecond},
		{5, 20 * time.Millisecond, 25 * time.Millisecond},
	}
	if len(sent) != len(want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	for i := range want {
		if sent[i] != want[i] {
			t.Errorf("publish %d: %+v, want %+v", i, sent[i], want[i])
		}
	}
}

// Saturation takes the send time as intended time and stops at the end.
func TestPacerSaturationClosedLoop(t *testing.T) {
	clock := &stepClock{now: time.Second}
	shape := Shape{Kind: KindSaturation, Window: 4}
	sent, reason := pace(t, clock, shape, time.Second, 10*time.Millisecond, 1000, func(uint64) {
		clock.now += time.Millisecond // each slot frees after 1 ms
	}, nil)
	if reason != StopDuration || len(sent) != 10 {
		t.Fatalf("sent %d, reason %s; want 10 and duration-elapsed", len(sent), reason)
	}
	for i, s := range sent {
		if s.intended != s.sentAt || s.sentAt != time.Second+time.Duration(i+1)*time.Millisecond {
			t.Errorf("publish %d: %+v", i, s)
		}
	}
}

func TestPacerLimit(t *testing.T) {
	clock := &stepClock{}
	shape := Shape{Kind: KindSaturation, Window: 4}
	sent, reason := pace(t, clock, shape, 0, time.Second, 7, nil, nil)
	if reason != StopLimit || len(sent) != 7 {
		t.Fatalf("sent %d, reason %s; want 7 and message-limit", len(sent), reason)
	}
}

func TestPacerReplayScaled(t *testing.T) {
	clock := &stepClock{}
	c, err := ReplayCase("trace", []Planned{{Offset: 0}, {Offset: 10 * time.Millisecond, SizeBytes: 100}, {Offset: 30 * time.Millisecond}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	runFor := c.Shape.RunFor(0, time.Hour)
	if runFor != 15*time.Millisecond+1 {
		t.Errorf("replay runs for %v, want 15ms+1ns", runFor)
	}
	sent, reason := pace(t, clock, c.Shape, 0, runFor, 1000, nil, nil)
	if reason != StopSourceEnded || len(sent) != 3 || sent[1].intended != 5*time.Millisecond || sent[2].intended != 15*time.Millisecond {
		t.Fatalf("replay sent %+v, reason %s", sent, reason)
	}
}

func TestPacerStopsOnErrors(t *testing.T) {
	clock := &stepClock{}
	failure := errors.New("connection lost")
	p := pacer{clock: clock, source: Shape{Kind: KindSaturation, Window: 1}.Source(time.Second), runFor: time.Second, limit: 100,
		acquire: func(context.Context) error { return nil },
		send: func(seq uint64, _ Planned, _, _ time.Duration) error {
			if seq == 2 {
				return failure
			}
			return nil
		}}
	count, _, err := p.run(context.Background())
	if !errors.Is(err, failure) || count != 2 {
		t.Fatalf("count %d err %v, want 2 and the send error", count, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.source = Shape{Kind: KindFixedRate, RatePerSecond: 10, Window: 1}.Source(time.Second)
	if _, _, err := p.run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run returned %v", err)
	}
}

// How late a 100 us sleep wakes up, with Go's timer and with the pacer's
// precise sleep. Figures only, no assertion on them:
//
//	FIBRIL_BENCH_SELF=1 go test ./bench -run SleepPrecision -v
func TestSleepPrecision(t *testing.T) {
	if os.Getenv("FIBRIL_BENCH_SELF") != "1" {
		t.Skip("set FIBRIL_BENCH_SELF=1 to measure sleep precision")
	}
	const interval, count = 100 * time.Microsecond, 2000
	oversleep := func(sleep func(time.Duration)) Summary {
		recorder := NewRecorder(count)
		for i := 0; i < count; i++ {
			started := time.Now()
			sleep(interval)
			recorder.Record(time.Since(started) - interval)
		}
		return recorder.Summary()
	}
	goTimer := oversleep(time.Sleep)
	release := holdPreciseThread()
	precise := oversleep(sleepFor)
	release()
	for _, row := range []struct {
		name string
		s    Summary
	}{{"Go timer", goTimer}, {"precise sleep", precise}} {
		t.Logf("%s, %v sleeps: oversleep p50 %v p99 %v max %v", row.name, interval, row.s.At(P50), row.s.At(P99), row.s.Max)
	}
}
