package log

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// Log is one segmented log. All methods are safe for concurrent use.
type Log struct {
	dir    string
	opts   Options
	fs     vfs.FS // opts.FS, its syncs counted in syncs and the budget's
	clock  func() time.Time
	logger *slog.Logger
	budget *Budget
	syncs  vfs.SyncCounter

	frontiers frontierState
	cache     *tailCache

	segmentsMu  sync.RWMutex
	segments    []*segment // sorted by base; the last is the active one
	firstOffset atomic.Uint64
	retentionMu sync.Mutex // serializes TruncateBefore and TruncateAfter

	// directorySyncMu serializes the directory syncs that may run at the
	// same time: the syncer's and retention's (see syncDirectory).
	directorySyncMu sync.Mutex

	epochMu sync.Mutex
	epochs  []EpochStart

	// admission guards closed: appends hold the read side while they
	// enqueue, Close takes the write side, so no request is enqueued after
	// the writer stops.
	admission sync.RWMutex
	closed    bool
	isClosed  atomic.Bool
	// latch is the frontiers' latch state, copied for checks that take no
	// lock; nil until the log latches.
	latch atomic.Pointer[latchState]
	// pendingCut is 1 + the offset of a TruncateAfter in progress (0 when
	// none): a latch meanwhile records the lower of it and durable_next.
	pendingCut atomic.Uint64
	// durableEnd is the durable-end record (durable.go); durableNotes the
	// sync helper that writes it (syncer.go), set before any sync runs.
	durableEnd   *durableEndRecord
	durableNotes *indexSyncer
	// direct: the caller's goroutine drives the writer (direct.go); there
	// is no writer goroutine, inbox or ticker.
	direct bool

	// inbox carries appends, ticks and controls to the writer, in order.
	inbox           chan *appendRequest
	tickMessage     *appendRequest // the one tick message, sent when none is queued
	tickPending     atomic.Bool
	tickTime        atomic.Pointer[time.Time]
	syncJobs        chan *syncJob
	syncDone        chan syncOutcome
	intervalChanged chan struct{}
	stopTicker      chan struct{}
	goroutines      sync.WaitGroup

	syncIntervalNanos atomic.Int64
	syncPending       atomic.Bool
	incarnation       atomic.Uint64
	statusMu          sync.Mutex
	lastSyncTime      time.Time
	lastError         error

	requestPool sync.Pool
	scanPool    sync.Pool
}

// Open opens (creating when needed) the log in dir and recovers it; see
// recovery.go for the rules. It returns ErrInteriorCorruption, deleting
// nothing, when the log cannot be recovered safely. The log runs its own
// writer and syncer goroutines; OpenDirect is the mode in which the
// caller's goroutine drives it instead.
func Open(dir string, opts Options) (*Log, error) {
	l, w, err := open(dir, opts, false)
	if err != nil {
		return nil, err
	}
	l.start(w)
	return l, nil
}

// open recovers the log in dir and prepares what both modes share.
func open(dir string, opts Options, direct bool) (*Log, *writer, error) {
	opts = opts.withDefaults()
	dir = filepath.Clean(dir)
	if err := opts.FS.MkdirAll(dir); err != nil {
		return nil, nil, fmt.Errorf("log: open %s: %w", dir, err)
	}
	l := &Log{dir: dir, opts: opts, clock: opts.Clock, logger: opts.Logger, budget: opts.Budget, direct: direct}
	l.fs = vfs.CountSyncs(opts.FS, &l.syncs, &l.budget.syncs)
	w, err := l.recover()
	if err != nil {
		return nil, nil, fmt.Errorf("log: open %s: %w", dir, err)
	}
	l.prepare(w)
	l.budget.logs.Add(1)
	return l, w, nil
}

// recover runs recovery and leaves the log ready for its goroutines.
func (l *Log) recover() (*writer, error) {
	listing, err := listDirectory(l.fs, l.dir)
	if err != nil {
		return nil, err
	}
	bases := listing.logBases
	proven, err := l.provenDurableEnd()
	if err != nil {
		return nil, err
	}
	switch {
	case listing.rebasePending:
		base, epochs, _, err := readRebaseFile(l.fs, l.dir)
		if err != nil {
			return nil, err
		}
		if _, err := carryOutRebase(l.fs, l.dir, bases, base); err != nil {
			return nil, fmt.Errorf("carrying out the pending rebase to %d: %w", base, err)
		}
		if err := finishRebase(l.fs, l.dir, nil, base, epochs); err != nil {
			return nil, fmt.Errorf("carrying out the pending rebase to %d: %w", base, err)
		}
		bases, proven = []uint64{base}, min(proven, base)
	case listing.cutPending:
		cut, _, err := readCutFile(l.fs, l.dir)
		if err != nil {
			return nil, err
		}
		if bases, err = cutSegmentFiles(l.fs, l.dir, bases, cut, nil); err != nil {
			return nil, fmt.Errorf("carrying out the pending cut to %d: %w", cut, err)
		}
		proven = min(proven, cut)
	}
	recovered, err := recoverSegments(l.fs, l.dir, bases, l.opts, proven)
	if err != nil {
		return nil, err
	}
	l.segments = recovered.segments
	for _, seg := range l.segments {
		seg.useFiles(&l.budget.files, l.fs)
	}
	l.firstOffset.Store(recovered.segments[0].base)
	w, err := l.finishRecovery(listing, recovered)
	if err != nil {
		l.durableEnd.close()
		closeSegments(recovered.segments)
		return nil, err
	}
	return w, nil
}

// provenDurableEnd reads the durable-end record: 0 when there is none
// (then only the sealed segments are proven).
func (l *Log) provenDurableEnd() (uint64, error) {
	proven, recorded, err := readDurableEnd(l.fs, l.dir)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", durableEndFileName, err)
	}
	if !recorded {
		return 0, nil
	}
	return proven, nil
}

// finishRecovery runs once the segments are recovered and synced: it
// records the recovered end as durable, cleans the directory, opens the
// writer and recovers the epochs and the incarnation.
func (l *Log) finishRecovery(listing directoryListing, recovered recoveredSegments) (*writer, error) {
	record, err := openDurableEnd(l.fs, l.dir)
	if err != nil {
		return nil, err
	}
	l.durableEnd = record
	if err := record.recordDurably(recovered.next); err != nil {
		return nil, fmt.Errorf("recording the durable end: %w", err)
	}
	if err := l.cleanDirectory(listing, recovered.segments); err != nil { // syncs the directory
		return nil, err
	}
	w, err := l.newWriter(recovered)
	if err != nil {
		return nil, err
	}
	if err := l.recoverEpochs(w.next); err != nil {
		w.closeFiles()
		return nil, err
	}
	w.lastEpoch, w.epochSeen = l.lastEpoch()
	incarnation, err := bumpIncarnation(l.fs, l.dir, func() int64 { return l.clock().UnixNano() })
	if err != nil {
		w.closeFiles()
		return nil, err
	}
	l.incarnation.Store(incarnation)
	l.lastSyncTime = l.clock()
	return w, nil
}

// cleanDirectory removes what recovery made obsolete: the carried-out cut
// file, temporary files, and indexes without a log.
func (l *Log) cleanDirectory(listing directoryListing, segments []*segment) error {
	live := map[uint64]bool{}
	for _, seg := range segments {
		live[seg.base] = true
	}
	for base := range listing.indexBases {
		if !live[base] {
			l.fs.Remove(filepath.Join(l.dir, segmentName(base, indexSuffix)))
		}
	}
	for _, name := range listing.leftovers {
		l.fs.Remove(filepath.Join(l.dir, name))
	}
	if listing.cutPending {
		return removeCutFile(l.fs, l.dir)
	}
	return l.fs.SyncDir(l.dir)
}

func closeSegments(segments []*segment) {
	for _, seg := range segments {
		seg.closeReader()
	}
}

// prepare publishes the recovered frontiers and builds what both modes
// share: the tail cache, the sync channels and the syncer goroutine.
func (l *Log) prepare(w *writer) {
	l.frontiers.reset(w.next, 0)
	l.cache = newTailCache(max(l.opts.TailCacheBytes, 0), w.next, &l.budget.tail)
	w.groupLimit = min(l.opts.MaxGroupBytes, l.cache.groupBytesLimit())
	l.syncIntervalNanos.Store(int64(l.opts.SyncInterval))
	l.syncJobs = make(chan *syncJob, 1)
	l.syncDone = make(chan syncOutcome, 1)
	l.durableNotes = newIndexSyncer(l.writeDurableEnd)
	l.requestPool.New = func() any { return &appendRequest{resultCh: make(chan Result, 1)} }
	l.goroutines.Add(1)
	go func() { defer l.goroutines.Done(); l.runSyncer() }()
}

// start starts the standalone mode's writer and (unless ExternalTicks)
// its ticker.
func (l *Log) start(w *writer) {
	l.inbox = make(chan *appendRequest, l.opts.RequestQueueLength)
	l.tickMessage = &appendRequest{kind: messageTick}
	l.intervalChanged = make(chan struct{}, 1)
	l.stopTicker = make(chan struct{})
	l.goroutines.Add(1)
	go func() { defer l.goroutines.Done(); w.run() }()
	if !l.opts.ExternalTicks {
		l.goroutines.Add(1)
		go func() { defer l.goroutines.Done(); l.runTicker() }()
	}
}

// wakeAppender tells a direct appender's owner that it has work (a sync
// finished, or another goroutine latched the log): Options.SyncDone. A
// standalone log has no appender to wake.
func (l *Log) wakeAppender() {
	if l.direct {
		l.opts.SyncDone()
	}
}

// latchError returns the error appends get on a latched log, or nil. It
// is nil too in the moment between the freeze and the publication of the
// latch (while the cut is being recorded); latchBegun covers that moment.
func (l *Log) latchError() error {
	if state := l.latch.Load(); state != nil {
		select {
		case <-state.done:
			return state.err
		default:
		}
	}
	return nil
}

// latchBegun reports whether the log has latched, even if the latch is
// not yet published.
func (l *Log) latchBegun() bool { return l.latch.Load() != nil }

// awaitLatch waits until the latch is final and returns its error. The
// log must have latched.
func (l *Log) awaitLatch() error {
	state := l.frontiers.currentLatch()
	if state == nil {
		panic("log: latched without a cause")
	}
	<-state.done
	return state.err
}

// setLatch latches the log after a storage failure, from any goroutine.
// The first call freezes the frontiers (so no sync outcome moves
// durable_next any more and no append is reported done above the cut),
// records the cut in latched-cut.pending, durably, and only then publishes
// the latch: its error, the watchers' wake-up, and Status. When the disk
// refuses even the cut file, the latch error wraps ErrCutNotRecorded too,
// so that every refusal and Status says the node must stop. Later calls
// wait for the first one and return its error.
func (l *Log) setLatch(cause error) error {
	state, cut, first := l.frontiers.freeze()
	l.latch.CompareAndSwap(nil, state)
	if !first {
		<-state.done
		return state.err
	}
	if pending := l.pendingCut.Load(); pending != 0 {
		cut = min(cut, pending-1) // a suffix cut in progress: it must still happen
	}
	err, lastError := fmt.Errorf("%w: %w", ErrLatched, cause), cause
	if recordErr := writeSmallFile(l.fs, l.dir, cutFileName, encodeUint64(cut)); recordErr != nil {
		err = fmt.Errorf("%w: %w; %w: %w", ErrLatched, cause, ErrCutNotRecorded, recordErr)
		lastError = fmt.Errorf("%w; %w: %w", cause, ErrCutNotRecorded, recordErr)
		l.logger.Error("log could not record its cut after a storage failure", "dir", l.dir, "cut", cut, "error", recordErr)
	}
	l.statusMu.Lock()
	l.lastError = lastError
	l.statusMu.Unlock()
	state.err = err
	l.frontiers.publishLatch(err)
	close(state.done)
	return err
}

func validateAppend(entries []Entry, level Durability, maxBodyBytes int) error {
	if level < AfterWrite || level > AfterFsync {
		return fmt.Errorf("%w: %d", ErrInvalidDurability, level)
	}
	if len(entries) > 1<<20 {
		return fmt.Errorf("%w: %d entries in one append", ErrTooLarge, len(entries))
	}
	for i := range entries {
		if len(entries[i].Body) > maxBodyBytes {
			return fmt.Errorf("%w: body of %d bytes, limit %d", ErrTooLarge, len(entries[i].Body), maxBodyBytes)
		}
	}
	return nil
}

func (l *Log) enqueue(request *appendRequest) error {
	if l.direct {
		return ErrDirectMode
	}
	l.admission.RLock()
	defer l.admission.RUnlock()
	if l.closed {
		return ErrClosed
	}
	if err := l.latchError(); err != nil {
		return err
	}
	l.inbox <- request
	return nil
}

// Append appends entries and returns when level is reached for all of
// them, or with the error that prevented it. Offsets are assigned in call
// order; [Result.First, Result.Next) are this call's. An empty entries
// slice assigns nothing and waits until everything staged before it
// reaches level. When ctx ends first, Append returns ctx.Err() but the
// append itself goes on. The entries may be reused once Append returns.
func (l *Log) Append(ctx context.Context, entries []Entry, level Durability) (Result, error) {
	if err := validateAppend(entries, level, l.opts.MaxRecordBytes); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	request := l.requestPool.Get().(*appendRequest)
	request.entries, request.level, request.done = entries, level, nil
	if err := l.enqueue(request); err != nil {
		request.entries = nil
		l.requestPool.Put(request)
		return Result{}, err
	}
	done := ctx.Done()
	if done == nil { // a context that never ends: skip the select
		result := <-request.resultCh
		l.requestPool.Put(request)
		return result, result.Err
	}
	select {
	case result := <-request.resultCh:
		l.requestPool.Put(request)
		return result, result.Err
	case <-done:
		return Result{}, ctx.Err() // the request is abandoned to the collector
	}
}

// AppendAsync appends without waiting. done is called exactly once, from a
// log goroutine, when level is reached or the append failed; it must not
// block and must not call Append, AppendAsync or Sync on this log. The
// entries' bodies must stay unchanged until done is called. It returns an
// error only when the append is refused up front (invalid, latched,
// closed); otherwise it may wait for room in the bounded request queue,
// never for I/O.
func (l *Log) AppendAsync(entries []Entry, level Durability, done func(Result)) error {
	if done == nil {
		panic("log: AppendAsync needs a done callback")
	}
	if err := validateAppend(entries, level, l.opts.MaxRecordBytes); err != nil {
		return err
	}
	request := l.requestPool.Get().(*appendRequest)
	request.entries, request.level, request.done = entries, level, done
	if err := l.enqueue(request); err != nil {
		request.entries, request.done = nil, nil
		l.requestPool.Put(request)
		return err
	}
	return nil
}

// Sync returns once everything written before the call is durable. It goes
// through the writer's pipeline, so it shares an fdatasync with concurrent
// AfterFsync appends.
func (l *Log) Sync(ctx context.Context) error {
	_, err := l.Append(ctx, nil, AfterFsync)
	return err
}

// Frontiers returns the current frontiers.
func (l *Log) Frontiers() Frontiers { return l.frontiers.snapshot() }

// Watch subscribes to one frontier; see Watch.
func (l *Log) Watch(kind FrontierKind) *Watch {
	watch := l.frontiers.watch(kind) // wakes at once on a latched log
	if l.isClosed.Load() {
		select {
		case watch.c <- struct{}{}:
		default:
		}
	}
	return watch
}

// Tick offers the background sync decision a chance to run at now. With
// Options.ExternalTicks the caller drives it; otherwise an internal ticker
// does. A tick that finds the writer busy with an earlier one is dropped.
func (l *Log) Tick(now time.Time) {
	if l.direct {
		return // the appender's owner calls Appender.MaybeSync
	}
	l.tickTime.Store(&now)
	if !l.tickPending.CompareAndSwap(false, true) {
		return // a tick is queued; it will read the newest time
	}
	select {
	case l.inbox <- l.tickMessage:
	default:
		l.tickPending.Store(false) // the writer is backed up: skip this tick
	}
}

// SetSyncInterval changes the background sync interval on the running log
// (0 turns it off).
func (l *Log) SetSyncInterval(interval time.Duration) {
	l.syncIntervalNanos.Store(int64(max(interval, 0)))
	if l.direct {
		return // read by the next Appender.SyncDue
	}
	select {
	case l.intervalChanged <- struct{}{}:
	default:
	}
}

func (l *Log) syncInterval() time.Duration { return time.Duration(l.syncIntervalNanos.Load()) }

// FirstOffset is the oldest retained offset (equal to the next offset when
// the log is empty).
func (l *Log) FirstOffset() uint64 { return l.firstOffset.Load() }

// Incarnation identifies this opening of the log: it changes, durably, at
// every Open and every TruncateAfter that removes records. Offsets lost to
// a power loss or a cut can be reused, so (Incarnation, Offset) is the
// identity that never names two different records.
func (l *Log) Incarnation() uint64 { return l.incarnation.Load() }

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// Status returns the log's health and progress.
func (l *Log) Status() Status {
	lagRecords, lagBytes := l.frontiers.lag()
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	return Status{
		Frontiers:         l.frontiers.snapshot(),
		FirstOffset:       l.FirstOffset(),
		LastSyncTime:      l.lastSyncTime,
		DurableLagRecords: lagRecords,
		DurableLagBytes:   lagBytes,
		SyncPending:       l.syncPending.Load(),
		LastError:         l.lastError,
		Latched:           l.latchError() != nil,
		SyncInterval:      l.syncInterval(),
		Incarnation:       l.Incarnation(),
		TailCacheBytes:    l.cache.heldBytes.Load(),
		FileSyncs:         l.syncs.FileSyncs(),
		DirectorySyncs:    l.syncs.DirectorySyncs(),
	}
}

// Budget is the node-wide budget the log draws on (Options.Budget, or its
// private one).
func (l *Log) Budget() *Budget { return l.budget }

// EpochHistory returns, for each epoch in the log, its first offset, in
// order. It covers every staged record.
func (l *Log) EpochHistory() []EpochStart {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	return append([]EpochStart(nil), l.epochs...)
}

// lastEpoch returns the newest epoch in the history, if any.
func (l *Log) lastEpoch() (uint64, bool) {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	if len(l.epochs) == 0 {
		return 0, false
	}
	return l.epochs[len(l.epochs)-1].Epoch, true
}

// Close stops accepting appends, writes and syncs everything staged, stops
// the goroutines and closes the files. Appends in flight complete normally.
// A direct log is closed with Appender.Close.
func (l *Log) Close() error {
	if l.direct {
		return ErrDirectMode
	}
	if !l.beginClose() {
		return ErrClosed
	}
	err := l.sendControl(&appendRequest{kind: messageControl, control: controlClose})
	close(l.stopTicker)
	l.finishClose()
	return err
}

// beginClose marks the log closed; it reports false when it already was.
func (l *Log) beginClose() bool {
	l.admission.Lock()
	defer l.admission.Unlock()
	if l.closed {
		return false
	}
	l.closed = true
	l.isClosed.Store(true)
	return true
}

// finishClose stops the syncer once the writer is done and releases the
// files, the cache and the budget share.
func (l *Log) finishClose() {
	close(l.syncJobs)
	l.goroutines.Wait()
	l.segmentsMu.Lock()
	closeSegments(l.segments)
	l.segmentsMu.Unlock()
	l.durableEnd.close()
	l.cache.close()
	l.budget.logs.Add(-1)
	l.frontiers.wakeAll()
}

// control sends a control request to the writer and waits for its answer.
func (l *Log) control(kind controlKind, offset uint64) error {
	if l.direct {
		return ErrDirectMode
	}
	l.admission.RLock()
	if l.closed {
		l.admission.RUnlock()
		return ErrClosed
	}
	request := &appendRequest{kind: messageControl, control: kind, offset: offset, reply: make(chan error, 1)}
	l.inbox <- request
	l.admission.RUnlock()
	return <-request.reply
}

// runOnWriter runs fn on the writer, in order with the appends before it,
// and returns its error.
func (l *Log) runOnWriter(fn func(w *writer) error) error {
	if l.direct {
		return ErrDirectMode
	}
	l.admission.RLock()
	if l.closed {
		l.admission.RUnlock()
		return ErrClosed
	}
	request := &appendRequest{kind: messageControl, control: controlRun, run: fn, reply: make(chan error, 1)}
	l.inbox <- request
	l.admission.RUnlock()
	return <-request.reply
}

// sendControl sends a control request without the admission check (Close
// holds it already) and waits for the answer.
func (l *Log) sendControl(request *appendRequest) error {
	request.reply = make(chan error, 1)
	l.inbox <- request
	return <-request.reply
}
