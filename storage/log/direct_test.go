package log

// Tests of the direct mode (direct.go). directDriver owns an Appender on
// one goroutine the way a log-writer actor would, so that the randomized
// tests can drive the same scenarios through either mode (appendTarget).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// appendTarget is what the randomized tests drive: a standalone *Log, or a
// directDriver.
type appendTarget interface {
	Append(ctx context.Context, entries []Entry, level Durability) (Result, error)
	AppendAsync(entries []Entry, level Durability, done func(Result)) error
	Sync(ctx context.Context) error
	Tick(now time.Time)
	TruncateBefore(offset uint64) error
	Close() error
	Status() Status
	Frontiers() Frontiers
	FirstOffset() uint64
	Dir() string
	underlying() *Log
}

func (l *Log) underlying() *Log { return l }

// openTarget opens dir in standalone or direct mode.
func openTarget(dir string, opts Options, direct bool) (appendTarget, error) {
	if !direct {
		return Open(dir, opts)
	}
	return openDirectDriver(dir, opts)
}

// directDriver is a minimal log-writer actor: one goroutine owns the
// Appender, its mailbox carries the calls, and the log's wake-ups arrive
// on their own channel. Each drain of the mailbox is one write group,
// flushed at its end.
type directDriver struct {
	l       *Log
	a       *Appender
	mailbox chan func()
	wake    chan struct{}
	stopped chan struct{}
	wakes   atomic.Int64
}

func openDirectDriver(dir string, opts Options) (*directDriver, error) {
	d := &directDriver{mailbox: make(chan func(), 64), wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	opts.SyncDone = func() {
		d.wakes.Add(1)
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	l, a, err := OpenDirect(dir, opts)
	if err != nil {
		return nil, err
	}
	d.l, d.a = l, a
	go d.run()
	return d, nil
}

func (d *directDriver) run() {
	defer close(d.stopped)
	for {
		select {
		case call, ok := <-d.mailbox:
			if !ok {
				return
			}
			call()
			d.drain()
			d.a.Flush()
		case <-d.wake:
			d.a.SyncFinished()
		}
	}
}

// drain runs the calls already queued.
func (d *directDriver) drain() {
	for {
		select {
		case call, ok := <-d.mailbox:
			if !ok {
				return
			}
			call()
		default:
			return
		}
	}
}

// do runs call on the driver's goroutine and waits for it.
func (d *directDriver) do(call func()) {
	ran := make(chan struct{})
	d.mailbox <- func() { call(); close(ran) }
	<-ran
}

// AppendAsync stages on the driver's goroutine with the standalone
// contract: an epoch regression is reported through done, not returned.
func (d *directDriver) AppendAsync(entries []Entry, level Durability, done func(Result)) error {
	var err error
	d.do(func() {
		_, err = d.a.Stage(entries, level, done)
		if errors.Is(err, ErrEpochRegression) {
			next := d.a.w.next
			done(Result{First: next, Next: next, Err: err})
			err = nil
		}
	})
	return err
}

func (d *directDriver) Append(ctx context.Context, entries []Entry, level Durability) (Result, error) {
	results := make(chan Result, 1)
	if err := d.AppendAsync(entries, level, func(result Result) { results <- result }); err != nil {
		return Result{}, err
	}
	result := <-results
	return result, result.Err
}

func (d *directDriver) Sync(ctx context.Context) error {
	_, err := d.Append(ctx, nil, AfterFsync)
	return err
}

func (d *directDriver) Tick(now time.Time) {
	d.mailbox <- func() { d.a.MaybeSync(now) }
}

func (d *directDriver) TruncateBefore(offset uint64) error { return d.l.TruncateBefore(offset) }
func (d *directDriver) Status() Status                     { return d.l.Status() }
func (d *directDriver) Frontiers() Frontiers               { return d.l.Frontiers() }
func (d *directDriver) FirstOffset() uint64                { return d.l.FirstOffset() }
func (d *directDriver) Dir() string                        { return d.l.Dir() }
func (d *directDriver) underlying() *Log                   { return d.l }

func (d *directDriver) Close() error {
	var err error
	d.do(func() { err = d.a.Close() })
	close(d.mailbox)
	<-d.stopped
	return err
}

// directHarness runs an Appender on the test's own goroutine: wake-ups are
// counted and delivered only when the test asks.
type directHarness struct {
	t     *testing.T
	l     *Log
	a     *Appender
	wakes chan struct{}
}

func openDirectHarness(t *testing.T, dir string, opts Options) *directHarness {
	t.Helper()
	h := &directHarness{t: t, wakes: make(chan struct{}, 16)}
	opts.SyncDone = func() { h.wakes <- struct{}{} }
	l, a, err := OpenDirect(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.l, h.a = l, a
	return h
}

// awaitWake waits for one SyncDone and handles it.
func (h *directHarness) awaitWake() {
	h.t.Helper()
	select {
	case <-h.wakes:
		h.a.SyncFinished()
	case <-time.After(20 * time.Second):
		h.t.Fatal("no SyncDone wake-up") // bounds a hang, asserts no timing
	}
}

func (h *directHarness) stage(entries []Entry, level Durability) *[]Result {
	h.t.Helper()
	results := &[]Result{}
	if _, err := h.a.Stage(entries, level, func(result Result) { *results = append(*results, result) }); err != nil {
		h.t.Fatalf("stage: %v", err)
	}
	return results
}

func oneEntry(tag string) []Entry { return []Entry{{Epoch: 1, Type: 1, Body: []byte(tag)}} }

// Each level completes where the direct mode promises, on the caller's
// goroutine: AfterWrite in Stage, AfterFlush in Flush, AfterFsync in the
// SyncFinished that follows the sync's wake-up.
func TestDirectLevelsCompleteOnTheCallersGoroutine(t *testing.T) {
	h := openDirectHarness(t, "/d", memOptions(vfs.NewMem()))
	written := h.stage(oneEntry("w"), AfterWrite)
	if len(*written) != 1 || (*written)[0].Err != nil || (*written)[0].First != 0 {
		t.Fatalf("AfterWrite results after Stage: %+v", *written)
	}
	flushed := h.stage(oneEntry("f"), AfterFlush)
	durable := h.stage(oneEntry("d"), AfterFsync)
	if len(*flushed) != 0 || h.l.Frontiers().Written != 0 {
		t.Fatalf("AfterFlush completed before Flush: %+v, %+v", *flushed, h.l.Frontiers())
	}
	h.a.Flush()
	if len(*flushed) != 1 || (*flushed)[0] != (Result{First: 1, Next: 2}) || len(*durable) != 0 {
		t.Fatalf("after Flush: flushed %+v, durable %+v", *flushed, *durable)
	}
	if f := h.l.Frontiers(); f.Written != 3 || f.Durable != 0 || !h.l.Status().SyncPending {
		t.Fatalf("after Flush: %+v, sync pending %v", f, h.l.Status().SyncPending)
	}
	h.awaitWake()
	if len(*durable) != 1 || (*durable)[0] != (Result{First: 2, Next: 3}) || h.l.Frontiers().Durable != 3 {
		t.Fatalf("after SyncFinished: durable %+v, frontiers %+v", *durable, h.l.Frontiers())
	}
	h.a.SyncFinished() // an extra call does nothing
	if _, err := h.l.Append(context.Background(), oneEntry("x"), AfterFlush); !errors.Is(err, ErrDirectMode) {
		t.Fatalf("Log.Append on a direct log: %v, want ErrDirectMode", err)
	}
	if err := h.a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Stage(oneEntry("late"), AfterFlush, func(Result) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("stage after close: %v", err)
	}
}

// AfterFsync stages that arrive while a sync is outstanding share the
// next sync (group commit), exactly as in standalone mode.
func TestDirectGroupCommitSharesOneSync(t *testing.T) {
	fs := &countingFS{FS: vfs.NewMem()}
	h := openDirectHarness(t, "/d", memOptions(fs))
	defer h.a.Close()
	first := h.stage(oneEntry("first"), AfterFsync)
	h.a.Flush() // submits the first sync
	before := fs.syncs.Load()
	var later []*[]Result
	for i := 0; i < 20; i++ { // one group per stage, twenty writes, while the sync is out
		later = append(later, h.stage(oneEntry(fmt.Sprint(i)), AfterFsync))
		h.a.Flush()
	}
	h.awaitWake() // the first sync; SyncFinished submits the one for the twenty
	if len(*first) != 1 {
		t.Fatalf("first append: %+v", *first)
	}
	h.awaitWake()
	for i, results := range later {
		if len(*results) != 1 || (*results)[0].Err != nil {
			t.Fatalf("append %d: %+v", i, *results)
		}
	}
	if syncs := fs.syncs.Load() - before; syncs > 4 { // the two jobs: log and index each at most
		t.Fatalf("%d file syncs for two group commits", syncs)
	}
}

// Background sync in direct mode: SyncDue names the time to arm a timer
// only while something is unsynced, MaybeSync runs the same decision as
// the standalone ticks, and an idle log asks for no timer and makes no
// sync however often it is poked (syncs counted, no time measured).
func TestDirectBackgroundSyncAndIdle(t *testing.T) {
	clock := newFakeClock()
	fs := &countingFS{FS: vfs.NewMem()}
	opts := memOptions(fs)
	opts.Clock = clock.Now
	opts.SyncInterval = 100 * time.Millisecond
	h := openDirectHarness(t, "/d", opts)
	defer h.a.Close()
	if _, due := h.a.SyncDue(); due {
		t.Fatal("a new, empty log asks for a timer")
	}
	start := clock.Now()
	h.stage(oneEntry("buffered"), AfterFlush)
	h.a.Flush()
	at, due := h.a.SyncDue()
	if !due || !at.Equal(start.Add(100*time.Millisecond)) {
		t.Fatalf("sync due %v at %v, want at %v", due, at, start.Add(100*time.Millisecond))
	}
	syncs := fs.syncs.Load()
	h.a.MaybeSync(clock.Advance(50 * time.Millisecond))
	if fs.syncs.Load() != syncs || h.l.Status().SyncPending {
		t.Fatal("a background sync started before the interval passed")
	}
	h.a.MaybeSync(clock.Advance(50 * time.Millisecond))
	if !h.l.Status().SyncPending {
		t.Fatal("no background sync once the interval passed")
	}
	if _, due := h.a.SyncDue(); due {
		t.Fatal("a timer is asked for while a sync is outstanding")
	}
	h.awaitWake()
	if f := h.l.Frontiers(); f.Durable != 1 {
		t.Fatalf("frontiers after the background sync: %+v", f)
	}
	idleSyncs := fs.syncs.Load()
	for i := 0; i < 100; i++ {
		if _, due := h.a.SyncDue(); due {
			t.Fatal("an idle log asks for a timer")
		}
		h.a.MaybeSync(clock.Advance(time.Second))
		h.a.SyncFinished()
	}
	if fs.syncs.Load() != idleSyncs || len(h.wakes) != 0 {
		t.Fatalf("an idle log made %d syncs", fs.syncs.Load()-idleSyncs)
	}
}

// A failed sync latches a direct log exactly as a standalone one: the
// waiters fail with ErrLatched wrapping the cause, later stages are
// refused, and the reopened log holds the records below the cut.
func TestDirectLatchOnSyncFailure(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	h := openDirectHarness(t, "/d", opts)
	kept := h.stage(oneEntry("kept"), AfterFsync)
	h.a.Flush()
	h.awaitWake()
	if len(*kept) != 1 || (*kept)[0].Err != nil {
		t.Fatalf("durable append: %+v", *kept)
	}
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	lost := h.stage(oneEntry("lost"), AfterFsync)
	h.a.Flush()
	h.awaitWake()
	if len(*lost) != 1 || !isLatched((*lost)[0].Err) || !errors.Is((*lost)[0].Err, syscall.EIO) {
		t.Fatalf("append whose sync failed: %+v", *lost)
	}
	if _, err := h.a.Stage(oneEntry("refused"), AfterFlush, func(Result) {}); !isLatched(err) {
		t.Fatalf("stage on a latched log: %v", err)
	}
	if _, due := h.a.SyncDue(); due {
		t.Fatal("a latched log asks for a timer")
	}
	if err := h.a.Close(); !isLatched(err) {
		t.Fatalf("close: %v", err)
	}
	mem.ClearFaults()
	reopened := mustOpen(t, "/d", opts)
	defer reopened.Close()
	if records := scanAll(t, reopened, 0, true); len(records) != 1 || string(records[0].Body) != "kept" {
		t.Fatalf("reopened log holds %d records", len(records))
	}
}

// Rollover, suffix cut and epochs in direct mode, read back after a
// reopen in standalone mode (the files are the same).
func TestDirectRolloverAndTruncateAfter(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem) // 1 KiB segments
	h := openDirectHarness(t, "/d", opts)
	for i := 0; i < 100; i++ {
		level := []Durability{AfterWrite, AfterFlush, AfterFsync}[i%3]
		epoch := uint64(1 + i/40)
		if _, err := h.a.Stage([]Entry{{Epoch: epoch, Type: 7, Body: body(uint64(i), "d")}}, level, func(Result) {}); err != nil {
			t.Fatal(err)
		}
		h.a.Flush()
		for len(h.wakes) > 0 {
			h.awaitWake()
		}
	}
	incarnation := h.l.Incarnation()
	if err := h.a.TruncateAfter(90); err != nil {
		t.Fatal(err)
	}
	if h.l.Incarnation() == incarnation {
		t.Fatal("a direct suffix cut did not change the incarnation")
	}
	if f := h.l.Frontiers(); f != (Frontiers{Staged: 90, Written: 90, Durable: 90}) {
		t.Fatalf("frontiers after the cut: %+v", f)
	}
	if history := h.l.EpochHistory(); fmt.Sprint(history) != "[{1 0} {2 40} {3 80}]" {
		t.Fatalf("epoch history %v", history)
	}
	if err := h.a.Close(); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, "/d", opts)
	defer l.Close()
	records := scanAll(t, l, 0, true)
	if len(records) != 90 || len(l.segments) < 3 {
		t.Fatalf("%d records in %d segments", len(records), len(l.segments))
	}
	for i, record := range records {
		if !bytes.Equal(record.Body, body(uint64(i), "d")) || record.Epoch != uint64(1+i/40) {
			t.Fatalf("record %d: %+v", i, record)
		}
	}
}
