package log

// Tests of the durable ledger and the frontier latch (frontier.go): how
// sync outcomes, in order, out of order and after a latch, move
// durable_next.

import (
	"errors"
	"strings"
	"testing"
)

func TestDurableLedgerMovesOnlyOverCoveredSegments(t *testing.T) {
	// Segments start at 0, 10 and 20.
	steps := []struct {
		name        string
		sync        segmentSync
		wantDurable uint64
		wantPending int
	}{
		{"segment 0 partly", segmentSync{base: 0, next: 4, bytes: 40}, 4, 0},
		{"an older sync of segment 0 changes nothing", segmentSync{base: 0, next: 3, bytes: 30}, 4, 0},
		{"segment 1 before segment 0 is complete waits", segmentSync{base: 10, next: 15, bytes: 150}, 4, 1},
		{"segment 2 waits too", segmentSync{base: 20, next: 22, bytes: 220}, 4, 2},
		{"segment 0 further, still short of its end", segmentSync{base: 0, next: 8, bytes: 80}, 8, 2},
		{"a newer sync of segment 1 replaces its pending one", segmentSync{base: 10, next: 20, bytes: 200}, 8, 2},
		{"segment 0 to its end releases 1, then 2", segmentSync{base: 0, next: 10, bytes: 100}, 22, 0},
	}
	var ledger durableLedger
	for _, step := range steps {
		ledger.apply(step.sync)
		if ledger.durable != step.wantDurable || len(ledger.pending) != step.wantPending {
			t.Fatalf("%s: durable %d, %d pending; want %d, %d", step.name, ledger.durable, len(ledger.pending), step.wantDurable, step.wantPending)
		}
	}
	if ledger.durableBytes != 220 {
		t.Fatalf("durable bytes %d, want 220", ledger.durableBytes)
	}
}

// A sync of segment 0 says nothing about segment 1: a complete sync of
// segment 0 moves durable_next to segment 1's start and no further, even
// when segment 1 holds written records.
func TestDurableLedgerSegmentSyncImpliesNothingAboutTheNext(t *testing.T) {
	var ledger durableLedger
	ledger.apply(segmentSync{base: 0, next: 10})
	if ledger.durable != 10 {
		t.Fatalf("durable %d, want 10", ledger.durable)
	}
	ledger.apply(segmentSync{base: 20, next: 25}) // segment 1 (10..20) never synced
	if ledger.durable != 10 {
		t.Fatalf("durable %d after a sync of segment 2, want 10", ledger.durable)
	}
	ledger.apply(segmentSync{base: 10, next: 20})
	if ledger.durable != 25 {
		t.Fatalf("durable %d once segment 1 is covered, want 25", ledger.durable)
	}
}

func TestDurableLedgerRefusesEverySyncAfterTheLatch(t *testing.T) {
	var ledger durableLedger
	ledger.apply(segmentSync{base: 0, next: 5})
	ledger.apply(segmentSync{base: 10, next: 12}) // pending
	if cut := ledger.latch(); cut != 5 {
		t.Fatalf("cut %d, want 5", cut)
	}
	for _, sync := range []segmentSync{{base: 0, next: 10}, {base: 0, next: 6}, {base: 10, next: 12}} {
		if ledger.apply(sync) || ledger.durable != 5 {
			t.Fatalf("sync %+v after the latch moved durable to %d", sync, ledger.durable)
		}
	}
	if len(ledger.pending) != 0 {
		t.Fatalf("pending syncs kept after the latch: %+v", ledger.pending)
	}
	mustPanic(t, "reset of a latched ledger", func() { ledger.reset(3, 0) })
}

func TestDurableLedgerBoundsPendingSyncs(t *testing.T) {
	var ledger durableLedger
	for i := uint64(1); i <= maxPendingSyncs; i++ {
		ledger.apply(segmentSync{base: 10 * i, next: 10*i + 1})
	}
	mustPanic(t, "one pending sync too many", func() {
		ledger.apply(segmentSync{base: 1000, next: 1001})
	})
}

// The frontiers refuse every advance once latched, under the lock that
// records the latch, so an append reported done reached its level before.
func TestFrontiersRefuseAdvancesAfterTheLatch(t *testing.T) {
	var f frontierState
	f.reset(0, 0)
	watch := f.watch(FrontierDurable)
	if _, ok := f.advanceWrittenFrom(8, 80); !ok {
		t.Fatal("write refused before the latch")
	}
	if durable, ok := f.applySync(segmentSync{base: 0, next: 5, bytes: 50}); !ok || durable != 5 {
		t.Fatalf("sync before the latch: durable %d, ok %v", durable, ok)
	}
	<-watch.C()
	state, cut, first := f.freeze()
	if !first || cut != 5 {
		t.Fatalf("freeze: cut %d, first %v; want 5, true", cut, first)
	}
	if again, _, first := f.freeze(); first || again != state {
		t.Fatal("a second freeze did not return the first latch")
	}
	select {
	case <-watch.C():
		t.Fatal("the freeze woke a watcher before the latch was published")
	default:
	}
	latchErr := errors.New("latched")
	f.publishLatch(latchErr)
	if f.latchError() != latchErr {
		t.Fatalf("latch error %v, want %v", f.latchError(), latchErr)
	}
	select {
	case <-watch.C():
	default:
		t.Fatal("the latch woke no watcher")
	}
	if durable, ok := f.applySync(segmentSync{base: 0, next: 8, bytes: 80}); ok || durable != 5 {
		t.Fatalf("sync after the latch: durable %d, ok %v", durable, ok)
	}
	if _, ok := f.advanceWrittenFrom(9, 90); ok {
		t.Fatal("write accepted after the latch")
	}
	if f.advanceStaged(9) {
		t.Fatal("stage accepted after the latch")
	}
	f.dropToDurable()
	if got := f.snapshot(); got != (Frontiers{Staged: 5, Written: 5, Durable: 5}) { // the cut
		t.Fatalf("frontiers after the drop: %+v", got)
	}
	if records, bytes := f.lag(); records != 0 || bytes != 0 {
		t.Fatalf("lag after the drop: %d records, %d bytes", records, bytes)
	}
}

func TestFrontiersRefuseASyncOfUnwrittenRecords(t *testing.T) {
	var f frontierState
	f.reset(0, 0)
	f.advanceWrittenFrom(3, 30)
	mustPanic(t, "sync past written", func() { f.applySync(segmentSync{base: 0, next: 4}) })
}

func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	defer func() {
		recovered := recover()
		if recovered == nil {
			t.Fatalf("%s: no panic", what)
		}
		if message, ok := recovered.(string); !ok || !strings.HasPrefix(message, "log: ") {
			t.Fatalf("%s: panic %v, want a log invariant message", what, recovered)
		}
	}()
	fn()
}
