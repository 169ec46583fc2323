package log

// Failure latch tests (design: "Failure latch"). A failed write or sync
// must latch the log: written_next drops to durable_next at once, waiters
// are failed rather than left hanging, appends are refused with
// ErrLatched, latched-cut.pending records the last good sync, and the next
// Open cuts the log back to it.

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// concurrentAppends runs n appenders of one record each at level and
// returns their errors.
func concurrentAppends(l *Log, n int, level Durability) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.Append(context.Background(), []Entry{{Epoch: 1, Body: []byte("x")}}, level)
		}()
	}
	wg.Wait()
	return errs
}

// checkLatched verifies the latched state and that a reopen cuts back to
// the durable end recorded at the latch.
func checkLatched(t *testing.T, l *Log, mem *vfs.Mem, durableBefore uint64, opts Options) {
	t.Helper()
	status := l.Status()
	if !status.Latched || status.LastError == nil {
		t.Fatalf("status after failure: %+v", status)
	}
	f := l.Frontiers()
	if f.Written != f.Durable || f.Staged != f.Durable || f.Durable < durableBefore {
		t.Fatalf("frontiers after latch %+v (durable before %d)", f, durableBefore)
	}
	if _, err := l.Append(context.Background(), []Entry{{Epoch: 1}}, AfterWrite); !isLatched(err) {
		t.Fatalf("append on a latched log: %v, want ErrLatched", err)
	}
	if err := l.AppendAsync([]Entry{{Epoch: 1}}, AfterWrite, func(Result) {}); !isLatched(err) {
		t.Fatalf("async append on a latched log: %v, want ErrLatched", err)
	}
	cut, pending, err := readCutFile(mem, l.dir)
	if err != nil || !pending || cut != f.Durable {
		t.Fatalf("pending cut %d %v %v, want %d", cut, pending, err, f.Durable)
	}
	if err := l.Close(); !isLatched(err) {
		t.Fatalf("close of a latched log: %v, want ErrLatched", err)
	}
	mem.ClearFaults()
	reopened := mustOpen(t, l.dir, opts)
	defer reopened.Close()
	if got := reopened.Frontiers(); got.Durable != cut || got.Written != cut {
		t.Fatalf("reopened frontiers %+v, want cut %d", got, cut)
	}
	if records := scanAll(t, reopened, 0, true); uint64(len(records)) != cut {
		t.Fatalf("reopened log holds %d records, want %d", len(records), cut)
	}
	if _, pending, _ := readCutFile(mem, l.dir); pending {
		t.Fatal("the cut file survived the reopen")
	}
}

func TestLatchOnSyncFailureMidGroup(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/latch", opts)
	appendN(t, l, 10, AfterFsync, "ok")
	appendN(t, l, 5, AfterFlush, "unsynced") // written, not durable: the cut drops them
	durableBefore := l.Frontiers().Durable
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	for i, err := range concurrentAppends(l, 16, AfterFsync) {
		if !isLatched(err) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("appender %d: %v, want ErrLatched wrapping EIO", i, err)
		}
	}
	checkLatched(t, l, mem, durableBefore, opts)
}

func TestLatchOnWriteFailureMidGroup(t *testing.T) {
	for _, fault := range []struct {
		name string
		err  error
	}{{"EIO", syscall.EIO}, {"ENOSPC", syscall.ENOSPC}} {
		t.Run(fault.name, func(t *testing.T) {
			mem := vfs.NewMem()
			opts := memOptions(mem)
			opts.SegmentBytes = 1 << 20
			l := mustOpen(t, "/latch", opts)
			appendN(t, l, 10, AfterFsync, "ok")
			durableBefore := l.Frontiers().Durable
			mem.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite, Pattern: "*.log", Err: fault.err, PartialWrite: true})
			failed := 0
			for _, err := range concurrentAppends(l, 16, AfterFlush) {
				if err != nil {
					if !isLatched(err) || !errors.Is(err, fault.err) {
						t.Fatalf("append error %v, want ErrLatched wrapping %v", err, fault.err)
					}
					failed++
				}
			}
			if failed == 0 {
				t.Fatal("no append saw the write failure")
			}
			checkLatched(t, l, mem, durableBefore, opts)
		})
	}
}

// Waiters queued behind an outstanding sync fail too when it fails.
func TestLatchFailsQueuedWaiters(t *testing.T) {
	mem := vfs.NewMem()
	gate := make(chan struct{})
	fs := &countingFS{FS: mem}
	opts := memOptions(fs)
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/latch", opts)
	appendN(t, l, 3, AfterFsync, "ok")
	fs.syncGate = gate
	results := make(chan Result, 8)
	done := func(result Result) { results <- result }
	if err := l.AppendAsync([]Entry{{Epoch: 1, Body: []byte("in-flight")}}, AfterFsync, done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first sync to start", func() bool { return l.Status().SyncPending })
	for i := 0; i < 3; i++ {
		if err := l.AppendAsync([]Entry{{Epoch: 1, Body: []byte("queued")}}, AfterFsync, done); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the queued appends to be written", func() bool { return l.Frontiers().Written == 7 })
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	close(gate)
	for i := 0; i < 4; i++ {
		if result := <-results; !isLatched(result.Err) {
			t.Fatalf("waiter %d: %+v, want ErrLatched", i, result)
		}
	}
	checkLatched(t, l, mem, 3, opts)
}

func TestLatchOnBackgroundSyncFailure(t *testing.T) {
	mem := vfs.NewMem()
	clock := newFakeClock()
	opts := memOptions(mem)
	opts.Clock = clock.Now
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/latch", opts)
	appendN(t, l, 4, AfterFsync, "ok")
	appendN(t, l, 6, AfterFlush, "buffered")
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log"})
	l.Tick(clock.Advance(time.Second))
	waitFor(t, "the background sync failure to latch", func() bool { return l.Status().Latched })
	checkLatched(t, l, mem, 4, opts)
}

func TestLatchOnIndexWriteFailure(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/latch", opts)
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite, Pattern: "*.idx", Sticky: true})
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = l.Append(context.Background(), []Entry{{Epoch: 1, Body: make([]byte, 100)}}, AfterFsync)
	}
	if !isLatched(err) {
		t.Fatalf("append with a failing index: %v, want ErrLatched", err)
	}
	checkLatched(t, l, mem, 0, opts)
}
