package queue

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

const testDir = "/q"

// fakeEnv runs the queue over fakeLog; queue files live on a vfs.Mem that
// is crash-cloned together with the log on a power loss.
type fakeEnv struct {
	fs  *vfs.Mem
	log *fakeLog
	rng *rand.Rand
}

func newFakeEnv(rng *rand.Rand) *fakeEnv {
	return &fakeEnv{fs: vfs.NewMem(), log: newFakeLog(rng), rng: rng}
}

func (e *fakeEnv) open(opts Options, clock Clock) (*Queue, error) {
	if err := prepareDirectory(e.fs, testDir, opts); err != nil {
		return nil, err
	}
	return openWithLog(testDir, opts, e.fs, e.log, clock, quietLogger, defaultMaxInflight, startMode{role: roleOwner})
}

// flush writes everything staged, or sometimes only part of it.
func (e *fakeEnv) flush(*Queue) {
	f := e.log.Frontiers()
	if e.rng.IntN(3) == 0 {
		e.log.flushTo(f.Written + e.rng.Uint64N(f.Staged-f.Written+1))
		return
	}
	e.log.flush()
}

// sync makes everything written durable, or sometimes only part of it.
func (e *fakeEnv) sync(*Queue) {
	f := e.log.Frontiers()
	if e.rng.IntN(3) == 0 {
		e.log.syncTo(f.Durable + e.rng.Uint64N(f.Written-f.Durable+1))
		return
	}
	e.log.sync()
}

func (e *fakeEnv) restart(q *Queue, opts Options, clock Clock, powerLoss bool, rng *rand.Rand) (*Queue, error) {
	if powerLoss {
		e.fs = e.fs.CrashClone(vfs.CrashOptions{Rand: rng})
		e.log = e.log.powerLoss(rng)
	} else {
		e.log = e.log.processCrash(rng)
	}
	_ = q.Close()
	return e.open(opts, clock)
}

// memEnv runs the queue over the real log on vfs.Mem.
type memEnv struct {
	fs           *vfs.Mem
	segmentBytes int64
	tailCache    int64
	notify       chan struct{}
	faultCalls   int // failSync calls, to alternate its two variants
}

func newMemEnv(rng *rand.Rand) *memEnv {
	e := &memEnv{fs: vfs.NewMem(), segmentBytes: int64(512 + rng.IntN(4096)), notify: make(chan struct{}, 1)}
	if rng.IntN(2) == 0 {
		e.tailCache = -1 // every read from the segment files
	}
	return e
}

func (e *memEnv) logOptions() log.Options {
	return log.Options{
		FS: e.fs, SegmentBytes: e.segmentBytes, ExternalTicks: true, TailCacheBytes: e.tailCache,
		Logger: quietLogger,
	}
}

func (e *memEnv) open(opts Options, clock Clock) (*Queue, error) {
	q, err := Open(testDir, opts, e.logOptions(), clock)
	if err != nil {
		return nil, err
	}
	q.SetNotify(func() {
		select {
		case e.notify <- struct{}{}:
		default:
		}
	})
	return q, nil
}

// flush waits until everything staged is written.
func (e *memEnv) flush(q *Queue) {
	for {
		f := q.log.Frontiers()
		if f.Written == f.Staged || q.inbox.failure() != nil {
			return
		}
		select {
		case <-e.notify:
		case <-time.After(time.Millisecond):
		}
	}
}

func (e *memEnv) sync(q *Queue) {
	e.flush(q)
	_ = q.log.Sync(context.Background()) // a latched log refuses; the queue fences

}

func (e *memEnv) restart(q *Queue, opts Options, clock Clock, powerLoss bool, rng *rand.Rand) (*Queue, error) {
	e.flush(q)
	if powerLoss {
		clone := e.fs.CrashClone(vfs.CrashOptions{Rand: rng, TearLastWrite: rng.IntN(2) == 0})
		_ = q.Close()
		e.fs = clone
	} else {
		_ = q.Close()
	}
	return e.open(opts, clock)
}

// failSync makes the log's next fsync fail, as a disk error would; the
// log latches and the queue must fence. It alternates two variants: the
// isolated one first makes everything durable, so the failing fsync is the
// only one in flight, then appends through probe (which the failing sync
// covers); the concurrent one fails a sync while the queue's own appends
// may have fsyncs in flight. FIBRIL_QUEUE_FAULTS=isolated or =concurrent
// runs only one of them.
func (e *memEnv) failSync(q *Queue, probe func()) (bool, error) {
	e.faultCalls++
	variant := os.Getenv("FIBRIL_QUEUE_FAULTS")
	concurrent := variant == "concurrent" || (variant != "isolated" && e.faultCalls%2 == 0)
	if concurrent {
		e.flush(q)
	} else {
		e.sync(q)
	}
	before := e.fs.FaultsFired()
	e.fs.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log"})
	if !concurrent {
		probe()
	}
	err := q.log.Sync(context.Background())
	fired := e.fs.FaultsFired() > before
	e.fs.ClearFaults()
	return fired, err
}

// faultInjector is implemented by environments that can fail storage.
type faultInjector interface {
	failSync(q *Queue, probe func()) (fired bool, err error)
}

// runModel runs one seeded model run and returns how many leases lapsed in
// it; adjust, when given, changes the random options first.
func runModel(t *testing.T, seed uint64, steps int, makeEnv func(*rand.Rand) environment, adjust ...func(*Options)) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	opts := randomOptions(rng)
	for _, change := range adjust {
		change(&opts)
	}
	h := newHarness(t, rng, opts, makeEnv(rng))
	defer func() {
		if t.Failed() {
			t.Logf("seed %d, options %+v", seed, opts)
		}
	}()
	for range steps {
		h.step()
		if t.Failed() {
			return h.lapses
		}
	}
	_ = h.q.Close()
	return h.lapses
}
