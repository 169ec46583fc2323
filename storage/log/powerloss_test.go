package log

// Randomized power-loss test (design: fault injection). Each iteration runs
// a few rounds of random appends at random durability levels, concurrent
// bursts, background-sync ticks, explicit syncs and retention on a vfs.Mem,
// then simulates a power loss at a random moment (CrashClone keeping a
// random prefix of unsynced writes, sometimes tearing one), reopens the
// clone and checks:
//
//   - Open succeeds: a power loss only ever produces a torn tail;
//   - every record confirmed at AfterFsync before the crash is present and
//     intact (durable_next covers it);
//   - the log is a prefix of what was appended (same bytes at each offset);
//   - new appends continue at the recovered end, so no offset below a
//     durable confirm is ever reused.
//
// Odd iterations drive the log in direct mode (directDriver), even ones
// in standalone mode. Iterations: 200 by default, 5000 with FIBRIL_SOAK=1,
// or FIBRIL_LOG_ITERATIONS. Seed: FIBRIL_LOG_SEED.

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// randomizedIterations is how many iterations a seeded randomized test
// runs: FIBRIL_LOG_ITERATIONS when set, 5000 with FIBRIL_SOAK=1, otherwise
// ciDefault.
func randomizedIterations(t *testing.T, ciDefault int) int {
	if value := os.Getenv("FIBRIL_LOG_ITERATIONS"); value != "" {
		n, err := strconv.Atoi(value)
		if err != nil {
			t.Fatalf("FIBRIL_LOG_ITERATIONS: %v", err)
		}
		return n
	}
	if os.Getenv("FIBRIL_SOAK") == "1" {
		return 5000
	}
	return ciDefault
}

// powerLossModel is what the test appended, by offset.
type powerLossModel struct {
	mu               sync.Mutex
	bodies           map[uint64][]byte
	epochs           map[uint64]uint64
	durableConfirmed uint64 // max Next of confirmed AfterFsync appends
	frozen           bool   // the crash image is taken: later confirms do not count
	epoch            uint64
}

func (m *powerLossModel) record(result Result, entries []Entry, level Durability) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for offset := result.First; offset < result.Next; offset++ {
		entry := entries[offset-result.First]
		m.bodies[offset] = entry.Body
		m.epochs[offset] = entry.Epoch
	}
	if !m.frozen && result.Err == nil && level == AfterFsync && result.Next > m.durableConfirmed {
		m.durableConfirmed = result.Next
	}
}

func (m *powerLossModel) confirmed() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.durableConfirmed
}

func randomEntries(rng *rand.Rand, model *powerLossModel) []Entry {
	entries := make([]Entry, 1+rng.IntN(4))
	model.mu.Lock()
	if rng.IntN(20) == 0 {
		model.epoch++
	}
	epoch := model.epoch
	model.mu.Unlock()
	for i := range entries {
		size := rng.IntN(200)
		if rng.IntN(200) == 0 {
			size = 70 << 10 // larger than a cache block: the oversize path
		}
		payload := make([]byte, size)
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		entries[i] = Entry{Epoch: epoch, Type: uint8(rng.IntN(4)), Body: payload}
	}
	return entries
}

func TestPowerLossRandomized(t *testing.T) {
	seed := testSeed(t)
	iterations := randomizedIterations(t, 200)
	for iteration := 0; iteration < iterations; iteration++ {
		rng := rand.New(rand.NewPCG(seed, uint64(iteration)))
		direct := iteration%2 == 1 // odd iterations drive the log in direct mode
		if !runPowerLossIteration(t, rng, direct) {
			t.Fatalf("iteration %d (direct mode %v) failed", iteration, direct)
		}
	}
}

func runPowerLossIteration(t *testing.T, rng *rand.Rand, direct bool) bool {
	t.Helper()
	mem := vfs.NewMem()
	clock := newFakeClock()
	opts := memOptions(mem)
	opts.Clock = clock.Now
	opts.SegmentBytes = int64(256 + rng.IntN(4096))
	opts.IndexIntervalBytes = int64(64 + rng.IntN(512))
	opts.TailCacheBytes = -1
	opts.SyncInterval = time.Duration(rng.IntN(3)) * 50 * time.Millisecond
	model := &powerLossModel{bodies: map[uint64][]byte{}, epochs: map[uint64]uint64{}}
	for round := 0; round < 3; round++ {
		l, err := openTarget("/p", opts, direct)
		if err != nil {
			t.Errorf("round %d: open after power loss: %v", round, err)
			return false
		}
		if !checkRecovered(t, l, model) {
			l.Close()
			return false
		}
		crashed := driveUntilCrash(t, rng, l, model, clock)
		l.Close()
		mem = crashed
		opts.FS = mem
	}
	return true
}

// checkRecovered verifies the reopened log against the model and trims the
// model to what survived.
func checkRecovered(t *testing.T, target appendTarget, model *powerLossModel) bool {
	t.Helper()
	l := target.underlying()
	frontiers := l.Frontiers()
	if frontiers.Durable != frontiers.Written || frontiers.Written != frontiers.Staged {
		t.Errorf("frontiers after open not equal: %+v", frontiers)
		return false
	}
	if frontiers.Durable < model.confirmed() {
		t.Errorf("durable_next %d below confirmed AfterFsync %d", frontiers.Durable, model.confirmed())
		return false
	}
	expected := l.FirstOffset()
	for _, record := range scanAll(t, l, l.FirstOffset(), true) {
		want, ok := model.bodies[record.Offset]
		if record.Offset != expected || !ok || !bytes.Equal(record.Body, want) || record.Epoch != model.epochs[record.Offset] {
			t.Errorf("record %d does not match what was appended (expected offset %d, known %v)", record.Offset, expected, ok)
			return false
		}
		expected++
	}
	if expected != frontiers.Durable {
		t.Errorf("scan ended at %d, durable_next %d", expected, frontiers.Durable)
		return false
	}
	for offset := range model.bodies {
		if offset >= frontiers.Durable {
			delete(model.bodies, offset)
			delete(model.epochs, offset)
		}
	}
	model.durableConfirmed = frontiers.Durable
	model.frozen = false
	if last, ok := l.lastEpoch(); ok {
		model.epoch = max(model.epoch, last)
	}
	return true
}

// driveUntilCrash runs random operations and returns the crash image taken
// at a random moment, after every outstanding append has completed on the
// original (so the model knows every staged offset).
func driveUntilCrash(t *testing.T, rng *rand.Rand, l appendTarget, model *powerLossModel, clock *fakeClock) *vfs.Mem {
	t.Helper()
	mem := l.underlying().opts.FS.(*vfs.Mem)
	var outstanding sync.WaitGroup
	steps := 5 + rng.IntN(40)
	crashAt := rng.IntN(steps)
	var image *vfs.Mem
	for step := 0; step < steps; step++ {
		if step == crashAt {
			image = crashNow(rng, mem, model)
		}
		switch choice := rng.IntN(10); {
		case choice < 4:
			entries := randomEntries(rng, model)
			level := Durability(1 + rng.IntN(3))
			result, err := l.Append(context.Background(), entries, level)
			if err != nil && !errors.Is(err, ErrEpochRegression) {
				t.Fatalf("append: %v", err)
			}
			model.record(result, entries, level)
		case choice < 7:
			burst(t, rng, l, model, &outstanding)
		case choice < 8:
			l.Tick(clock.Advance(time.Duration(rng.IntN(120)) * time.Millisecond))
		case choice < 9:
			if err := l.Sync(context.Background()); err != nil {
				t.Fatalf("sync: %v", err)
			}
			durable := l.Frontiers().Durable
			model.record(Result{First: durable, Next: durable}, nil, AfterFsync)
		default:
			floor := l.FirstOffset() + uint64(rng.IntN(20))
			if err := l.TruncateBefore(floor); err != nil && !errors.Is(err, ErrFloorAboveDurable) {
				t.Fatalf("truncate before %d: %v", floor, err)
			}
		}
	}
	if image == nil {
		image = crashNow(rng, mem, model)
	}
	outstanding.Wait()
	return image
}

// crashNow snapshots the confirmed watermark, then the disk: every confirm
// counted finished before the image was taken.
func crashNow(rng *rand.Rand, mem *vfs.Mem, model *powerLossModel) *vfs.Mem {
	model.mu.Lock()
	model.frozen = true // confirms from now on may miss the image
	model.mu.Unlock()
	return mem.CrashClone(vfs.CrashOptions{Rand: rng, TearLastWrite: rng.IntN(2) == 0})
}

// burst issues several AppendAsync calls without waiting.
func burst(t *testing.T, rng *rand.Rand, l appendTarget, model *powerLossModel, outstanding *sync.WaitGroup) {
	for i := 1 + rng.IntN(8); i > 0; i-- {
		entries := randomEntries(rng, model)
		level := Durability(1 + rng.IntN(3))
		outstanding.Add(1)
		err := l.AppendAsync(entries, level, func(result Result) {
			defer outstanding.Done()
			if result.Err != nil && !errors.Is(result.Err, ErrEpochRegression) {
				t.Errorf("async append: %v", result.Err)
			}
			model.record(result, entries, level)
		})
		if err != nil {
			t.Fatalf("async append refused: %v", err)
		}
	}
}
