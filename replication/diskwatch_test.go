package replication

import (
	"testing"
	"time"
)

// diskStep is one observation of a DiskWatch scenario and the verdict
// expected after it.
type diskStep struct {
	at       time.Duration // since the scenario's start
	progress DiskProgress
	waiting  bool
	stalled  bool // Stalled(DiskStallAfter)
}

func runDiskSteps(t *testing.T, name string, steps []diskStep) {
	t.Helper()
	start := time.Unix(1000, 0)
	var watch DiskWatch
	for i, step := range steps {
		health := watch.Observe(step.progress, start.Add(step.at))
		if health.Waiting != step.waiting || health.Stalled(DiskStallAfter) != step.stalled {
			t.Fatalf("%s, step %d at %v (%+v): %+v; want waiting %v, stalled %v", name, i, step.at, step.progress,
				health, step.waiting, step.stalled)
		}
	}
}

// TestDiskWatchWrites: a write that hangs stalls any queue once Written
// has not moved for DiskStallAfter; a write that moves, however slowly,
// does not.
func TestDiskWatchWrites(t *testing.T) {
	stuck := DiskProgress{Staged: 20, Written: 10, Durable: 10}
	runDiskSteps(t, "a hung write", []diskStep{
		{0, stuck, true, false},
		{time.Second, stuck, true, false},
		{DiskStallAfter, stuck, true, false}, // stuck since the second observation
		{DiskStallAfter + time.Second, stuck, true, true},
	})
	runDiskSteps(t, "a slow write", []diskStep{
		{0, DiskProgress{Staged: 20, Written: 10}, true, false},
		{2 * time.Second, DiskProgress{Staged: 20, Written: 10}, true, false},
		{4 * time.Second, DiskProgress{Staged: 22, Written: 11}, true, false},
		{6 * time.Second, DiskProgress{Staged: 22, Written: 12}, true, false},
		{8 * time.Second, DiskProgress{Staged: 22, Written: 13}, true, false},
	})
	runDiskSteps(t, "an idle log", []diskStep{
		{0, DiskProgress{Staged: 5, Written: 5, Durable: 5}, false, false},
		{time.Hour, DiskProgress{Staged: 5, Written: 5, Durable: 5}, false, false},
	})
}

// TestDiskWatchSyncs: a sync that hangs stalls a durable queue even while
// its writes go on (Written moving is no progress for it), and never a
// buffered queue, which confirms at the written frontier.
func TestDiskWatchSyncs(t *testing.T) {
	hung := func(written uint64, durableBoundary bool) DiskProgress {
		return DiskProgress{Staged: written, Written: written, Durable: 10, SyncInFlight: true, DurableBoundary: durableBoundary}
	}
	runDiskSteps(t, "a durable queue, writes going on", []diskStep{
		{0, hung(11, true), true, false},
		{time.Second, hung(12, true), true, false},
		{2 * time.Second, hung(13, true), true, false},
		{DiskStallAfter + time.Second, hung(14, true), true, true},
	})
	runDiskSteps(t, "a buffered queue", []diskStep{
		{0, hung(11, false), false, false},
		{time.Minute, hung(11, false), false, false},
	})
	runDiskSteps(t, "a durable queue whose sync returns", []diskStep{
		{0, hung(11, true), true, false},
		{time.Second, hung(11, true), true, false},
		{DiskStallAfter, DiskProgress{Staged: 11, Written: 11, Durable: 11, DurableBoundary: true}, false, false},
		{DiskStallAfter + time.Second, hung(12, true), true, false},
		{DiskStallAfter + 2*time.Second, hung(12, true), true, false}, // its clock started again
	})
	runDiskSteps(t, "a sync in flight with nothing left to make durable", []diskStep{
		{0, DiskProgress{Staged: 10, Written: 10, Durable: 10, SyncInFlight: true, DurableBoundary: true}, false, false},
		{time.Minute, DiskProgress{Staged: 10, Written: 10, Durable: 10, SyncInFlight: true, DurableBoundary: true}, false, false},
	})
}

// TestDiskWatchResetForgets: after Reset the watch starts afresh.
func TestDiskWatchResetForgets(t *testing.T) {
	start := time.Unix(1000, 0)
	var watch DiskWatch
	stuck := DiskProgress{Staged: 20, Written: 10}
	watch.Observe(stuck, start)
	watch.Observe(stuck, start.Add(time.Second))
	watch.Reset()
	if health := watch.Observe(stuck, start.Add(time.Minute)); health.StalledFor != 0 {
		t.Fatalf("after Reset: %+v", health)
	}
}

func TestDiskWatchPanicsOnDisorderedFrontiers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for durable > written")
		}
	}()
	var watch DiskWatch
	watch.Observe(DiskProgress{Staged: 5, Written: 4, Durable: 5}, time.Unix(0, 0))
}

// TestDiskWatchPendingAppends: appends handed to the log whose completion
// does not come back stall the owner when no frontier moves (a write that
// hangs before the log publishes staged_next), and not while one moves.
func TestDiskWatchPendingAppends(t *testing.T) {
	pending := DiskProgress{Staged: 10, Written: 10, Durable: 10, AppendsPending: true}
	runDiskSteps(t, "pending appends, nothing moves", []diskStep{
		{0, pending, true, false},
		{time.Second, pending, true, false},
		{DiskStallAfter + time.Second, pending, true, true},
	})
	runDiskSteps(t, "pending settles of a durable queue with no sync owed, written moving", []diskStep{
		{0, DiskProgress{Staged: 10, Written: 10, AppendsPending: true, DurableBoundary: true}, true, false},
		{2 * time.Second, DiskProgress{Staged: 11, Written: 11, AppendsPending: true, DurableBoundary: true}, true, false},
		{4 * time.Second, DiskProgress{Staged: 12, Written: 12, AppendsPending: true, DurableBoundary: true}, true, false},
		{6 * time.Second, DiskProgress{Staged: 13, Written: 13, AppendsPending: true, DurableBoundary: true}, true, false},
	})
}
