package bench

import (
	"errors"
	"testing"
	"time"
)

// A hand-driven run: warm-up ends at 100 ns. Publish 0 is in the warm-up,
// 1..4 are measured.
func TestLedgerCountsAndLatencies(t *testing.T) {
	l := newLedger(9, 100, 200, BoundaryDurable, 8, 8)
	l.onSent(0, 50, 50, true)
	l.onSent(1, 100, 100, true)
	l.onSent(2, 110, 112, true)
	l.onSent(3, 120, 150, true) // sent 30 ns late
	l.onSent(4, 130, 150, true)
	l.onSent(5, 140, 150, true)
	l.onSent(6, 150, 150, true)

	l.onConfirm(0, 60, BoundaryDurable, nil)   // warm-up: counted, not measured
	l.onConfirm(1, 105, BoundaryDurable, nil)  // 5
	l.onConfirm(2, 130, BoundaryWritten, nil)  // 20, wrong boundary
	l.onConfirm(3, 0, "", errors.New("nope"))  // failed
	l.onConfirm(3, 190, BoundaryDurable, nil)  // a second confirm: anomaly
	l.onConfirm(42, 190, BoundaryDurable, nil) // never sent: anomaly
	l.onConfirm(5, 150, "boundary_9", nil)     // 10, unknown boundary
	l.onConfirm(6, 160, BoundaryDurable, nil)  // 10
	if l.settled() {
		t.Fatal("settled with publish 4 unconfirmed")
	}

	deliver := func(seq uint64, intended, at time.Duration, redelivered bool) {
		l.onDeliver(&PayloadHeader{RunTag: 9, Seq: seq, Intended: intended}, at, redelivered)
	}
	deliver(1, 100, 108, false) // 8
	deliver(1, 100, 300, true)  // duplicate, flagged
	deliver(2, 110, 140, false) // 30
	deliver(2, 110, 301, false) // duplicate, unflagged
	deliver(3, 120, 200, true)  // a failed publish may still arrive: 80, flagged
	deliver(5, 140, 150, false) // 10
	deliver(6, 150, 160, false) // 10
	l.onDeliver(nil, 210, false)
	l.onDeliver(&PayloadHeader{RunTag: 8, Seq: 1}, 211, false)
	l.onDeliver(&PayloadHeader{RunTag: 9, Seq: 7}, 212, false)
	// Publish 0 is confirmed but never delivered: lost. Publish 4 is never
	// confirmed.

	got := l.close()
	want := Counts{
		Published: 7, Measured: 6, Confirmed: 5, PublishFailed: 1, Unconfirmed: 1,
		Delivered: 5, Lost: 1, Duplicated: 2, DuplicatedUnflagged: 1, Redelivered: 2,
		Unexpected: 3, BoundaryMismatch: 2, ConfirmAnomalies: 2,
	}
	if got.counts != want {
		t.Errorf("counts\n got %+v\nwant %+v", got.counts, want)
	}
	if s := got.confirm; s.Count != 4 || s.Min != 5 || s.Max != 20 || s.At(P50) != 10 {
		t.Errorf("confirm latency %+v, want samples 5, 20, 10, 10", s)
	}
	if s := got.delivery; s.Count != 5 || s.Min != 8 || s.Max != 80 || s.At(P50) != 10 {
		t.Errorf("delivery latency %+v, want samples 8, 30, 80, 10, 10", s)
	}
	if s := got.sendLag; s.Count != 6 || s.Max != 30 || s.Min != 0 || s.At(P50) != 2 {
		t.Errorf("send lag %+v, want samples 0, 2, 30, 20, 10, 0", s)
	}
	// Four measured confirms in the window from 100 to 200 ns; five
	// measured first deliveries, the last at 200.
	if got.confirmPerSecond != 4/(100e-9) || got.deliveriesPerSecond != 5/(100e-9) {
		t.Errorf("rates %v and %v, want %v and %v", got.confirmPerSecond, got.deliveriesPerSecond, 4/(100e-9), 5/(100e-9))
	}
}

func TestLedgerSettled(t *testing.T) {
	l := newLedger(1, 0, 10, BoundaryWritten, 4, 4)
	l.onSent(0, 0, 0, false)
	l.onSent(1, 1, 1, false)
	l.onDeliver(&PayloadHeader{RunTag: 1, Seq: 0}, 2, false) // delivery before its confirm
	l.onConfirm(0, 3, BoundaryWritten, nil)
	l.onConfirm(1, 3, BoundaryDurable, nil) // stronger than a buffered queue needs
	if l.settled() {
		t.Fatal("settled with publish 1 undelivered")
	}
	l.onDeliver(&PayloadHeader{RunTag: 1, Seq: 1, Intended: 1}, 4, false)
	if !l.settled() {
		t.Fatal("not settled with everything confirmed and delivered")
	}
	if got := l.close(); got.counts.Lost != 0 || got.counts.Delivered != 2 || got.sendLag.Count != 0 ||
		got.counts.AboveBoundary != 1 || got.counts.BoundaryMismatch != 0 {
		t.Errorf("counts %+v, send lag %+v (unpaced publishes have no lag)", got.counts, got.sendLag)
	}
}

func TestLedgerLimitEndsRateWindow(t *testing.T) {
	l := newLedger(1, 0, 1000, BoundaryWritten, 4, 4)
	for seq := uint64(0); seq < 4; seq++ {
		l.onSent(seq, time.Duration(seq), time.Duration(seq), false)
		l.onConfirm(seq, time.Duration(seq)+10, BoundaryWritten, nil)
	}
	// Publishing stopped at 100 ns of a planned 1000: four confirms, the
	// last at 13, over a window that ends at 100.
	l.endPublishing(100, true)
	if got := l.close().confirmPerSecond; got != 4/(100e-9) {
		t.Errorf("rate %v, want %v", got, 4/(100e-9))
	}
}

func TestLedgerRejectsOutOfOrderSends(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a gap in sent sequence numbers did not panic")
		}
	}()
	l := newLedger(1, 0, 10, BoundaryWritten, 4, 4)
	l.onSent(1, 0, 0, true)
}

func TestRateWindow(t *testing.T) {
	var w rateWindow
	if w.perSecond(0, time.Second) != 0 {
		t.Error("empty window has a rate")
	}
	// 100 events, 10 ms apart from 0 to 990 ms, in a window of 1 s.
	for i := 0; i < 100; i++ {
		w.observe(time.Duration(i) * 10 * time.Millisecond)
	}
	if got := w.perSecond(0, time.Second); got != 100 {
		t.Errorf("rate %v, want 100", got)
	}
	// Bursts: 400 events at 100 ms and 200 ms in a window from 50 to 250 ms.
	var bursts rateWindow
	for i := 0; i < 400; i++ {
		bursts.observe(time.Duration(100+100*(i/200)) * time.Millisecond)
	}
	if got := bursts.perSecond(50*time.Millisecond, 250*time.Millisecond); got != 2000 {
		t.Errorf("burst rate %v, want 2000", got)
	}
	// A late event stretches the window: 100 events over 1.25 s.
	w.observe(1250 * time.Millisecond)
	if got := w.perSecond(0, time.Second); got != 101/1.25 {
		t.Errorf("rate with a late event %v, want %v", got, 101/1.25)
	}
}
