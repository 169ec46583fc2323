package log

// Tests of the log's behaviour through its public API: durability levels
// and frontiers, watches, group commit, background sync, scans, retention,
// suffix cut, epochs, validation and status.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

func TestAppendLevelsReachTheirFrontier(t *testing.T) {
	l := mustOpen(t, "/a", memOptions(vfs.NewMem()))
	defer l.Close()
	ctx := context.Background()
	for _, level := range []Durability{AfterWrite, AfterFlush, AfterFsync, AfterFlush, AfterWrite} {
		result, err := l.Append(ctx, []Entry{{Epoch: 1, Body: []byte("a")}, {Epoch: 1, Body: []byte("b")}}, level)
		if err != nil || result.Next != result.First+2 {
			t.Fatalf("%v: %+v %v", level, result, err)
		}
		f := l.Frontiers()
		reached := map[Durability]uint64{AfterWrite: f.Staged, AfterFlush: f.Written, AfterFsync: f.Durable}[level]
		if reached < result.Next || f.Durable > f.Written || f.Written > f.Staged {
			t.Fatalf("%v returned with frontiers %+v for next %d", level, f, result.Next)
		}
	}
	// An empty append waits for everything staged before it.
	result, err := l.Append(ctx, nil, AfterFsync)
	if f := l.Frontiers(); err != nil || result.First != result.Next || f.Durable != f.Staged {
		t.Fatalf("empty AfterFsync append: %+v %v frontiers %+v", result, err, f)
	}
}

func TestAppendAsyncCallsDoneOnce(t *testing.T) {
	l := mustOpen(t, "/a", memOptions(vfs.NewMem()))
	var calls sync.Map
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		var count atomic.Int32
		calls.Store(i, &count)
		err := l.AppendAsync([]Entry{{Epoch: 1, Body: []byte{byte(i)}}}, Durability(1+i%3), func(result Result) {
			if count.Add(1) == 1 {
				wg.Done()
			}
			if result.Err != nil {
				t.Errorf("async %d: %v", i, result.Err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	calls.Range(func(key, value any) bool {
		if n := value.(*atomic.Int32).Load(); n != 1 {
			t.Errorf("done for %v called %d times", key, n)
		}
		return true
	})
	if f := l.Frontiers(); f.Durable != 200 {
		t.Fatalf("close did not sync everything: %+v", f)
	}
}

func TestAppendValidation(t *testing.T) {
	opts := memOptions(vfs.NewMem())
	opts.MaxRecordBytes = 100
	l := mustOpen(t, "/a", opts)
	ctx := context.Background()
	if _, err := l.Append(ctx, []Entry{{Body: make([]byte, 101)}}, AfterWrite); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized body: %v", err)
	}
	if _, err := l.Append(ctx, []Entry{{}}, 0); !errors.Is(err, ErrInvalidDurability) {
		t.Fatalf("level 0: %v", err)
	}
	if _, err := l.Append(ctx, []Entry{{Epoch: 5}}, AfterFlush); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, []Entry{{Epoch: 5}, {Epoch: 4}}, AfterFlush); !errors.Is(err, ErrEpochRegression) {
		t.Fatalf("epoch regression: %v", err)
	}
	if f := l.Frontiers(); f.Staged != 1 {
		t.Fatalf("a refused batch staged records: %+v", f)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Append(cancelled, []Entry{{Epoch: 5}}, AfterFsync); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, []Entry{{Epoch: 5}}, AfterWrite); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := l.ScanWritten(0, 1, func(Record) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("scan after close: %v", err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

func TestWatchWakesWithoutLostWakeups(t *testing.T) {
	l := mustOpen(t, "/w", memOptions(vfs.NewMem()))
	defer l.Close()
	const total = 300
	var wg sync.WaitGroup
	for _, kind := range []FrontierKind{FrontierStaged, FrontierWritten, FrontierDurable} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watch := l.Watch(kind)
			defer watch.Close()
			for {
				f := l.Frontiers()
				reached := map[FrontierKind]uint64{FrontierStaged: f.Staged, FrontierWritten: f.Written, FrontierDurable: f.Durable}[kind]
				if reached >= total {
					return
				}
				<-watch.C() // a lost wake-up would hang here
			}
		}()
	}
	for i := 0; i < total; i++ {
		level := Durability(1 + i%3)
		if i == total-1 {
			level = AfterFsync
		}
		if _, err := l.Append(context.Background(), []Entry{{Epoch: 1}}, level); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestWatchCloseUnsubscribes(t *testing.T) {
	l := mustOpen(t, "/w", memOptions(vfs.NewMem()))
	goroutines := runtime.NumGoroutine()
	for i := 0; i < 1000; i++ {
		l.Watch(FrontierKind(i % 3)).Close()
	}
	watch := l.Watch(FrontierWritten)
	watch.Close()
	watch.Close()
	l.frontiers.mu.Lock()
	subscribed := len(l.frontiers.watchers[0]) + len(l.frontiers.watchers[1]) + len(l.frontiers.watchers[2])
	l.frontiers.mu.Unlock()
	if subscribed != 0 {
		t.Fatalf("%d watchers left after Close", subscribed)
	}
	// A watch holds no goroutine: a thousand of them leave no trace (the
	// small tolerance is for runtime and test-framework goroutines).
	if now := runtime.NumGoroutine(); now > goroutines+5 {
		t.Fatalf("goroutines grew from %d to %d over 1000 watches", goroutines, now)
	}
	closing := l.Watch(FrontierDurable)
	l.Close()
	select {
	case <-closing.C():
	default:
		t.Fatal("closing the log did not wake its watchers")
	}
}

// Concurrent AfterFsync waiters share one fdatasync: with the first sync
// held, twenty appends queue behind it and all complete with one more.
func TestGroupCommitSharesOneSync(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem()}
	opts := memOptions(fs)
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/g", opts)
	defer l.Close()
	gate := make(chan struct{})
	fs.syncGate = gate
	syncsBefore := fs.syncs.Load()
	results := make(chan Result, 32)
	done := func(result Result) { results <- result }
	l.AppendAsync([]Entry{{Epoch: 1}}, AfterFsync, done)
	waitFor(t, "the first sync", func() bool { return l.Status().SyncPending })
	for i := 0; i < 20; i++ {
		l.AppendAsync([]Entry{{Epoch: 1}}, AfterFsync, done)
	}
	waitFor(t, "twenty queued appends to be written", func() bool { return l.Frontiers().Written == 21 })
	close(gate)
	for i := 0; i < 21; i++ {
		if result := <-results; result.Err != nil {
			t.Fatal(result.Err)
		}
	}
	// Each job syncs the log file and, when new index entries exist, the
	// index file: two jobs are at most four file syncs.
	if syncs := fs.syncs.Load() - syncsBefore; syncs > 4 {
		t.Fatalf("%d file syncs for 21 waiters, want the two jobs' (at most 4)", syncs)
	}
}

func TestBackgroundSyncDecisions(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem()}
	clock := newFakeClock()
	opts := memOptions(fs)
	opts.Clock = clock.Now
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/b", opts)
	defer l.Close()
	syncCount := func() int64 { return fs.syncs.Load() }
	// An idle log does nothing, however many ticks pass.
	before := syncCount()
	for i := 0; i < 10; i++ {
		l.Tick(clock.Advance(time.Second))
	}
	drainTicks(l)
	if syncCount() != before {
		t.Fatal("an idle log synced")
	}
	// Written but the interval has not passed since the last sync started.
	appendN(t, l, 3, AfterFsync, "b")
	appendN(t, l, 3, AfterFlush, "b")
	before = syncCount()
	l.Tick(clock.Advance(50 * time.Millisecond))
	drainTicks(l)
	if syncCount() != before || l.Frontiers().Durable != 3 {
		t.Fatal("synced before the interval passed")
	}
	// Due: one sync makes everything written durable.
	l.Tick(clock.Advance(60 * time.Millisecond))
	waitFor(t, "the background sync", func() bool { return l.Frontiers().Durable == 6 })
	if status := l.Status(); status.DurableLagRecords != 0 || status.LastSyncTime != clock.Now() {
		t.Fatalf("status after background sync %+v", status)
	}
	// Interval 0 turns it off, live; a new interval turns it back on.
	l.SetSyncInterval(0)
	appendN(t, l, 2, AfterFlush, "b")
	l.Tick(clock.Advance(time.Hour))
	drainTicks(l)
	if l.Frontiers().Durable != 6 || l.Status().DurableLagRecords != 2 || l.Status().DurableLagBytes <= 0 {
		t.Fatalf("interval 0 still synced: %+v", l.Status())
	}
	l.SetSyncInterval(10 * time.Millisecond)
	l.Tick(clock.Advance(20 * time.Millisecond))
	waitFor(t, "the background sync after re-enabling", func() bool { return l.Frontiers().Durable == 8 })
}

// drainTicks waits until the writer has handled every tick sent so far:
// ticks share the writer's inbox with appends, in order, so an empty
// AfterWrite append round trip completes after them.
func drainTicks(l *Log) {
	l.Append(context.Background(), nil, AfterWrite)
}

// At most one background sync is outstanding; ticks during it are skipped;
// an AfterFsync arriving meanwhile rides the next job.
func TestBackgroundSyncOneOutstandingAndMerge(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem()}
	clock := newFakeClock()
	opts := memOptions(fs)
	opts.Clock = clock.Now
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/b", opts)
	defer l.Close()
	appendN(t, l, 5, AfterFlush, "b")
	gate := make(chan struct{})
	fs.syncGate = gate
	before := fs.syncs.Load()
	l.Tick(clock.Advance(time.Second))
	waitFor(t, "the background sync to start", func() bool { return l.Status().SyncPending })
	for i := 0; i < 5; i++ {
		l.Tick(clock.Advance(time.Second))
	}
	drainTicks(l)
	result := make(chan Result, 1)
	l.AppendAsync([]Entry{{Epoch: 1}}, AfterFsync, func(r Result) { result <- r })
	waitFor(t, "the AfterFsync append to be written", func() bool { return l.Frontiers().Written == 6 })
	close(gate)
	if r := <-result; r.Err != nil || l.Frontiers().Durable < 6 {
		t.Fatalf("merged AfterFsync: %+v frontiers %+v", r, l.Frontiers())
	}
	drainTicks(l)
	// Two jobs: the background sync and the one the append rode; the
	// skipped ticks added none.
	if syncs := fs.syncs.Load() - before; syncs > 4 {
		t.Fatalf("%d file syncs, want at most two jobs' worth", syncs)
	}
}

func TestBackgroundSyncInternalTicker(t *testing.T) {
	opts := memOptions(vfs.NewMem())
	opts.ExternalTicks = false
	opts.SyncInterval = 2 * time.Millisecond
	l := mustOpen(t, "/b", opts)
	defer l.Close()
	appendN(t, l, 5, AfterFlush, "b")
	waitFor(t, "the internal ticker to sync", func() bool { return l.Frontiers().Durable == 5 })
}

func TestScanBudgetsAndFrontiers(t *testing.T) {
	opts := memOptions(vfs.NewMem())
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/s", opts)
	defer l.Close()
	appendN(t, l, 10, AfterFsync, "s")
	appendN(t, l, 5, AfterFlush, "s")
	count := func(scan func(uint64, int, func(Record) error) (uint64, error), from uint64, maxBytes int) (int, uint64) {
		n := 0
		next, err := scan(from, maxBytes, func(Record) error { n++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return n, next
	}
	if n, next := count(l.ScanDurable, 0, 1<<20); n != 10 || next != 10 {
		t.Fatalf("ScanDurable delivered %d up to %d, want 10", n, next)
	}
	if n, next := count(l.ScanWritten, 0, 1<<20); n != 15 || next != 15 {
		t.Fatalf("ScanWritten delivered %d up to %d, want 15", n, next)
	}
	if n, _ := count(l.ScanWritten, 0, 0); n != 1 {
		t.Fatalf("zero budget delivered %d, want at least one", n)
	}
	size := len(body(0, "s"))
	if n, _ := count(l.ScanWritten, 0, 3*size); n != 3 {
		t.Fatalf("budget of three bodies delivered %d", n)
	}
	if n, next := count(l.ScanDurable, 10, 1<<20); n != 0 || next != 10 {
		t.Fatalf("scan at the frontier delivered %d", n)
	}
	stop := errors.New("stop")
	next, err := l.ScanWritten(2, 1<<20, func(r Record) error {
		if r.Offset == 4 {
			return stop
		}
		return nil
	})
	if err != stop || next != 4 {
		t.Fatalf("callback error: next %d err %v", next, err)
	}
}

// Records evicted from the tail cache come from the files, through the
// segments' open read descriptors (no reopen per read).
// Sealed segments open their files through the descriptor cache: the
// first scan from the files opens each once, later scans open none.
func TestScanFromFilesReusesCachedDescriptors(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem()}
	opts := memOptions(fs)
	opts.SegmentBytes = 64 << 10
	opts.TailCacheBytes = -1
	l := mustOpen(t, "/s", opts)
	defer l.Close()
	payload := bytes.Repeat([]byte("p"), 3000)
	for i := 0; i < 400; i++ {
		if _, err := l.Append(context.Background(), []Entry{{Epoch: 1, Type: 1, Body: payload}}, AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, hit := l.cache.copyOut(0, 1, 1, nil); hit {
		t.Fatal("offset 0 still cached; the test needs it evicted")
	}
	var opens int64
	for round := 0; round < 3; round++ {
		before := fs.opens.Load()
		records := scanAll(t, l, 0, false)
		if len(records) != 400 || !bytes.Equal(records[123].Body, payload) {
			t.Fatalf("scanned %d records", len(records))
		}
		if opens = fs.opens.Load() - before; round > 0 && opens != 0 {
			t.Fatalf("round %d of reads opened %d files", round, opens)
		}
	}
	if stats := l.Budget().Stats(); stats.SegmentFileHits == 0 || stats.SegmentFileMisses == 0 || stats.OpenSegmentFiles == 0 {
		t.Fatalf("descriptor cache stats %+v", stats)
	}
}

func TestScanDetectsCorruptFileRecords(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	opts.TailCacheBytes = -1
	opts.ValidType = func(recordType uint8) bool { return recordType != 99 }
	l := mustOpen(t, "/s", opts)
	defer l.Close()
	ctx := context.Background()
	big := bytes.Repeat([]byte("q"), 70<<10) // oversized: never cached
	if _, err := l.Append(ctx, []Entry{{Epoch: 1, Type: 99, Body: big}, {Epoch: 1, Type: 1, Body: big}}, AfterFsync); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ScanDurable(0, 1, func(Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("record with a rejected type: %v, want ErrCorrupt", err)
	}
	path := l.segments[len(l.segments)-1].logPath
	file, _ := mem.OpenReadWrite(path)
	file.WriteAt([]byte{0xff}, 100)
	file.Close()
	if _, err := l.ScanDurable(1, 1, func(Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupted record: %v, want ErrCorrupt", err)
	}
}

func TestOversizedRecordsRoundTrip(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	opts.TailCacheBytes = -1
	l := mustOpen(t, "/o", opts)
	ctx := context.Background()
	big := bytes.Repeat([]byte("B"), 100<<10)
	for i := 0; i < 3; i++ {
		entries := []Entry{{Epoch: 1, Body: []byte("small")}, {Epoch: 1, Body: big}, {Epoch: 1, Body: []byte("tail")}}
		if _, err := l.Append(ctx, entries, Durability(1+i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Sync(ctx)
	check := func(l *Log) {
		records := scanAll(t, l, 0, true)
		if len(records) != 9 || !bytes.Equal(records[4].Body, big) || string(records[5].Body) != "tail" {
			t.Fatalf("records %d", len(records))
		}
	}
	check(l)
	l.Close()
	reopened := mustOpen(t, "/o", opts)
	defer reopened.Close()
	check(reopened)
}

func TestTruncateBefore(t *testing.T) {
	mem := vfs.NewMem()
	l := mustOpen(t, "/t", memOptions(mem))
	defer l.Close()
	appendN(t, l, 60, AfterFsync, "t")
	appendN(t, l, 5, AfterFlush, "t")
	if err := l.TruncateBefore(64); !errors.Is(err, ErrFloorAboveDurable) {
		t.Fatalf("floor above durable: %v", err)
	}
	if err := l.TruncateBefore(40); err != nil {
		t.Fatal(err)
	}
	first := l.FirstOffset()
	if first == 0 || first > 40 {
		t.Fatalf("first offset %d after retention to 40", first)
	}
	if _, err := l.ScanDurable(first-1, 1, func(Record) error { return nil }); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("scan below the first offset: %v", err)
	}
	if records := scanAll(t, l, first, true); len(records) != int(60-first) {
		t.Fatalf("%d records after retention", len(records))
	}
	if _, exists, _ := mem.Stat(segmentPathIn("/t", 0, logSuffix)); exists {
		t.Fatal("segment 0 survived retention")
	}
}

func segmentPathIn(dir string, base uint64, suffix string) string {
	return dir + "/" + segmentName(base, suffix)
}

func TestTruncateAfter(t *testing.T) {
	for _, cut := range []uint64{58, 30, 29, 1, 0} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			mem := vfs.NewMem()
			opts := memOptions(mem)
			l := mustOpen(t, "/t", opts)
			appendN(t, l, 40, AfterFsync, "t")
			ctx := context.Background()
			if _, err := l.Append(ctx, []Entry{{Epoch: 2, Body: []byte("e2")}}, AfterFsync); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 20; i++ { // 41..60, written but not durable
				if _, err := l.Append(ctx, []Entry{{Epoch: 2, Body: []byte("u")}}, AfterFlush); err != nil {
					t.Fatal(err)
				}
			}
			incarnation := l.Incarnation()
			if err := l.TruncateAfter(cut); err != nil {
				t.Fatal(err)
			}
			if f := l.Frontiers(); f != (Frontiers{cut, cut, cut}) {
				t.Fatalf("frontiers after cut %+v", f)
			}
			if l.Incarnation() == incarnation {
				t.Fatal("incarnation unchanged by a cut")
			}
			if history := l.EpochHistory(); (cut <= 40 && len(history) > 1) || (cut > 40 && len(history) != 2) {
				t.Fatalf("epoch history after cut %v", history)
			}
			// Durable on return: a power loss right now keeps exactly this.
			image := mem.CrashClone(vfs.CrashOptions{})
			if _, err := l.Append(ctx, []Entry{{Epoch: 3, Body: []byte("new")}}, AfterFsync); err != nil {
				t.Fatal(err)
			}
			records := scanAll(t, l, 0, true)
			if uint64(len(records)) != cut+1 || string(records[cut].Body) != "new" {
				t.Fatalf("after cut and append: %d records", len(records))
			}
			l.Close()
			crashed := mustOpen(t, "/t", memOptionsLike(opts, image))
			defer crashed.Close()
			if f := crashed.Frontiers(); f.Durable != cut {
				t.Fatalf("after crash the cut log ends at %d, want %d", f.Durable, cut)
			}
		})
	}
}

func memOptionsLike(opts Options, fs vfs.FS) Options {
	opts.FS = fs
	return opts
}

func TestTruncateAfterRefusesBelowFirstOffset(t *testing.T) {
	l := mustOpen(t, "/t", memOptions(vfs.NewMem()))
	defer l.Close()
	appendN(t, l, 60, AfterFsync, "t")
	l.TruncateBefore(50)
	if err := l.TruncateAfter(l.FirstOffset() - 1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("cut below the first offset: %v", err)
	}
}

func TestEpochHistoryPersistsAndRebuilds(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	l := mustOpen(t, "/e", opts)
	ctx := context.Background()
	var want []EpochStart
	offset := uint64(0)
	for epoch := uint64(3); epoch < 300; epoch += 1 + epoch%3 {
		want = append(want, EpochStart{Epoch: epoch, FirstOffset: offset})
		n := 1 + int(epoch%4)
		entries := make([]Entry, n)
		for i := range entries {
			entries[i] = Entry{Epoch: epoch, Body: []byte("e")}
		}
		if _, err := l.Append(ctx, entries, AfterFlush); err != nil {
			t.Fatal(err)
		}
		offset += uint64(n)
	}
	checkHistory := func(l *Log) {
		t.Helper()
		got := l.EpochHistory()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("history %v\nwant %v", got, want)
		}
	}
	checkHistory(l)
	l.Close()
	checkHistory(mustOpen(t, "/e", opts)) // verified from the cache file
	mem.Remove("/e/" + epochsFileName)
	reopened := mustOpen(t, "/e", opts) // rebuilt (more than 256 epochs: linear walk)
	checkHistory(reopened)
	reopened.Close()
}

func TestStatusAndIncarnation(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	l := mustOpen(t, "/st", opts)
	first := l.Incarnation()
	appendN(t, l, 3, AfterFlush, "st")
	status := l.Status()
	if status.DurableLagRecords != 3 || status.DurableLagBytes != int64(3*encodedSize(len(body(0, "st")))) || status.Latched || status.LastError != nil || status.SyncInterval != DefaultSyncInterval {
		t.Fatalf("status %+v", status)
	}
	l.Close()
	l = mustOpen(t, "/st", opts)
	defer l.Close()
	if l.Incarnation() <= first {
		t.Fatalf("incarnation %d after reopen, was %d", l.Incarnation(), first)
	}
}

// Appenders, scanners and watchers together, for the race detector.
func TestConcurrentUse(t *testing.T) {
	opts := memOptions(vfs.NewMem())
	opts.TailCacheBytes = -1
	opts.SegmentBytes = 8 << 10
	l := mustOpen(t, "/c", opts)
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var readers sync.WaitGroup
	for i := 0; i < 2; i++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			watch := l.Watch(FrontierWritten)
			defer watch.Close()
			from := uint64(0)
			for ctx.Err() == nil {
				next, err := l.ScanWritten(from, 4096, func(r Record) error {
					if r.Offset != from {
						return fmt.Errorf("offset %d, want %d", r.Offset, from)
					}
					from++
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				if next == from && l.Frontiers().Written == from {
					select {
					case <-watch.C():
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for i := 0; i < 4; i++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for j := 0; j < 150; j++ {
				if _, err := l.Append(ctx, []Entry{{Epoch: 1, Body: bytes.Repeat([]byte{byte(j)}, j)}}, Durability(1+j%3)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writers.Wait()
	l.TruncateBefore(l.Frontiers().Durable / 4)
	cancel()
	readers.Wait()
}
