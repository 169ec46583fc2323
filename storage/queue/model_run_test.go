package queue

import (
	"math/rand/v2"
	"os"
	"testing"
)

// Model-based randomized tests. Set FIBRIL_QUEUE_SEED to replay one seed
// (the failing seed is printed), FIBRIL_SOAK=1 for many more runs.

func modelRuns() (runs, steps int) {
	if os.Getenv("FIBRIL_SOAK") != "" {
		return 300, 2000
	}
	return 30, 1200
}

func TestModelFakeLog(t *testing.T) {
	runs, steps := modelRuns()
	if os.Getenv("FIBRIL_QUEUE_SEED") != "" {
		runs = 1
	}
	lapses := 0
	for range runs {
		seed := seedFromEnv(t, "FIBRIL_QUEUE_SEED")
		lapses += runModel(t, seed, steps, func(rng *rand.Rand) environment { return newFakeEnv(rng) })
		if t.Failed() {
			t.Fatalf("failed with FIBRIL_QUEUE_SEED=%d", seed)
		}
	}
	checkLapsesSeen(t, runs, lapses)
}

// checkLapsesSeen: over several runs the clock jumps make some leases
// lapse at their apply, so the harness checks that path too.
func checkLapsesSeen(t *testing.T, runs, lapses int) {
	t.Helper()
	if runs > 1 && lapses == 0 {
		t.Fatalf("%d runs saw no lease lapse at its apply", runs)
	}
	t.Logf("%d runs: %d leases lapsed at their apply", runs, lapses)
}

func TestModelMemLog(t *testing.T) {
	runs, steps := modelRuns()
	runs /= 4
	if os.Getenv("FIBRIL_QUEUE_SEED") != "" {
		runs = 1
	}
	lapses := 0
	for range runs {
		seed := seedFromEnv(t, "FIBRIL_QUEUE_SEED")
		lapses += runModel(t, seed, steps, func(rng *rand.Rand) environment { return newMemEnv(rng) })
		if t.Failed() {
			t.Fatalf("failed with FIBRIL_QUEUE_SEED=%d", seed)
		}
	}
	checkLapsesSeen(t, runs, lapses)
}

// TestModelReplicated runs the harness on an owner and a replica over the
// fake log: the replica must hold the owner's state, and every failover
// must keep what the harness checks after a restart.
func TestModelReplicated(t *testing.T) {
	runs, steps := modelRuns()
	runReplicated(t, runs/3, steps, newFakeStore)
}

// TestModelReplicatedMemLog is the same over the real log on vfs.Mem,
// whose power losses keep only what a completed sync covered.
func TestModelReplicatedMemLog(t *testing.T) {
	runs, steps := modelRuns()
	runReplicated(t, runs/6, steps, newMemStore)
}

func runReplicated(t *testing.T, runs, steps int, newStore func(*rand.Rand) copyStore) {
	if os.Getenv("FIBRIL_QUEUE_SEED") != "" {
		runs = 1
	}
	compared, failovers, published, fromSnapshot, lapses := 0, 0, 0, 0, 0
	expiredCounted, releasedUnsent := 0, 0
	budgets := 0
	for range runs {
		seed := seedFromEnv(t, "FIBRIL_QUEUE_SEED")
		var pair *pairEnv
		// Runs of even seeds always have an attempt budget, so their owners
		// write sent marks and their failovers release the leases never
		// sent (decided by the seed, so a replayed seed runs the same).
		budget := func(opts *Options) {
			if seed%2 == 0 && opts.MaxDeliveries == 0 {
				opts.MaxDeliveries = uint32(1 + seed/2%4)
			}
			if opts.MaxDeliveries > 0 {
				budgets++
			}
		}
		lapses += runModel(t, seed, steps, func(rng *rand.Rand) environment {
			pair = newPairEnv(t, rng, newStore)
			return pair
		}, budget)
		if t.Failed() {
			t.Fatalf("failed with FIBRIL_QUEUE_SEED=%d", seed)
		}
		compared, failovers = compared+pair.compared, failovers+pair.failovers
		published, fromSnapshot = published+pair.published, fromSnapshot+pair.fromSnapshot
		expiredCounted, releasedUnsent = expiredCounted+pair.expiredCounted, releasedUnsent+pair.releasedUnsent
	}
	if compared == 0 || failovers == 0 || published == 0 {
		t.Fatalf("the runs compared %d states, made %d failovers and published %d replica checkpoints", compared, failovers, published)
	}
	if runs > 1 && (expiredCounted == 0 || (budgets > 0 && releasedUnsent == 0)) {
		t.Fatalf("%d runs: failovers expired %d leases with their attempt counted and released %d without; both paths must run",
			runs, expiredCounted, releasedUnsent)
	}
	t.Logf("%d runs: %d state comparisons, %d failovers (%d leases expired, %d unmarked ones released), "+
		"%d replica checkpoints published, %d replica opens from a snapshot",
		runs, compared, failovers, expiredCounted, releasedUnsent, published, fromSnapshot)
	checkLapsesSeen(t, runs, lapses)
}
