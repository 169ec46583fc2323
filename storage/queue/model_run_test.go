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
	for range runs {
		seed := seedFromEnv(t, "FIBRIL_QUEUE_SEED")
		runModel(t, seed, steps, func(rng *rand.Rand) environment { return newFakeEnv(rng) })
		if t.Failed() {
			t.Fatalf("failed with FIBRIL_QUEUE_SEED=%d", seed)
		}
	}
}

func TestModelMemLog(t *testing.T) {
	runs, steps := modelRuns()
	runs /= 4
	if os.Getenv("FIBRIL_QUEUE_SEED") != "" {
		runs = 1
	}
	for range runs {
		seed := seedFromEnv(t, "FIBRIL_QUEUE_SEED")
		runModel(t, seed, steps, func(rng *rand.Rand) environment { return newMemEnv(rng) })
		if t.Failed() {
			t.Fatalf("failed with FIBRIL_QUEUE_SEED=%d", seed)
		}
	}
}
