package log

// The writer goroutine owns the active segment: its write descriptors, its
// staged bytes and the staged and written frontiers. Its inbox (one bounded
// channel, in order) carries:
//
//   - append requests: staged into the tail cache (which is the staging
//     buffer), as many as are queued up to the group limit, then written
//     with one write(2) per contiguous span (the group), after which
//     written_next advances and AfterFlush waiters complete;
//   - ticks: the background sync decision (shouldStartBackgroundSync);
//   - controls: TruncateAfter, Close, and completing a latch that
//     retention set, in order with the appends.
//
// Sync outcomes come from the syncer on their own channel, read only while
// a sync is outstanding (at most one is), so the idle loop is a plain
// channel receive. AfterFsync waiters that arrive while a sync is
// outstanding form the next group commit.
//
// Ordering promises: a sync job covers every byte written to the active
// segment before it was submitted (target = written_next at submission).
// Every sync of a segment file goes through the syncer, one at a time,
// rollover's included: rollover waits for the outstanding sync, then
// syncs the outgoing segment to its end, and only once durable_next has
// reached that end creates the next segment. So durable_next only ever
// reaches an offset that successful syncs of every segment below it cover.
// A latch freezes durable_next at once (no later sync outcome moves it),
// then waits for the outstanding sync to come back before it drops
// written_next to durable_next and fails the waiters.

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// messageKind tells the writer what an inbox message is.
type messageKind uint8

const (
	messageAppend messageKind = iota
	messageTick
	messageControl
)

// appendRequest is one Append or AppendAsync call (pooled), or a tick or
// control message on the writer's inbox.
type appendRequest struct {
	kind        messageKind
	entries     []Entry
	level       Durability
	first, next uint64
	done        func(Result)
	resultCh    chan Result

	// An encoded append (encoded.go): checked records that must start at
	// encodedFirst, instead of entries.
	isEncoded    bool
	encoded      []byte
	encodedFirst uint64
	batch        encodedBatch

	control controlKind // messageControl only
	offset  uint64
	run     func(w *writer) error // controlRun only
	reply   chan error
}

// setEncoded makes the request an encoded append of a checked batch.
func (r *appendRequest) setEncoded(records []byte, first uint64, batch encodedBatch) {
	r.kind, r.entries = messageAppend, nil
	r.isEncoded, r.encoded, r.encodedFirst, r.batch = true, records, first, batch
}

// reset clears what a request refers to before it goes back to the pool.
func (r *appendRequest) reset() {
	r.entries, r.done = nil, nil
	r.isEncoded, r.encoded = false, nil
}

// complete reports the request's result exactly once.
func (r *appendRequest) complete(l *Log, err error) {
	result := Result{First: r.first, Next: r.next, Err: err}
	r.entries = nil
	r.isEncoded, r.encoded = false, nil
	if done := r.done; done != nil {
		r.done = nil
		l.requestPool.Put(r)
		done(result)
		return
	}
	r.resultCh <- result
}

type controlKind uint8

const (
	controlClose controlKind = iota + 1
	controlTruncateAfter
	controlLatch // complete a latch set outside the writer
	controlRun   // run a function on the writer (Seal, Rebase)
)

// flushPiece is one contiguous span to write: a slice of a cache block, or
// the writer's buffer for a record too large for the cache.
type flushPiece struct {
	block      *cacheBlock
	start, end int
	raw        []byte
	position   int64
}

func (p flushPiece) bytes() []byte {
	if p.block != nil {
		return p.block.data[p.start:p.end]
	}
	return p.raw
}

type writer struct {
	l *Log

	active            *segment
	logFile           vfs.File
	indexFile         vfs.File
	position          int64 // staged end of the active segment
	lastEntryPosition int64
	pendingEntries    []indexEntry // index entries of staged, unwritten records
	indexPersisted    int          // entries of active.entries written to indexFile
	indexBuffer       []byte

	next         uint64 // staged_next
	lastEpoch    uint64
	epochSeen    bool  // the epoch history is not empty
	stagedBytes  int64 // cumulative since Open
	writtenBytes int64

	pieces       []flushPiece
	groupBytes   int
	groupLimit   int
	groupWaiters []*appendRequest // staged, waiting for the group's write
	fsyncWaiters []*appendRequest // written, waiting for the next sync
	oversize     []byte

	job           syncJob
	syncInFlight  bool
	forceSync     bool
	indexDirty    bool
	dirDirty      bool // a segment was created since the last directory sync
	lastSyncStart time.Time
	latched       bool
}

// newWriter opens write descriptors on the recovered active segment.
func (l *Log) newWriter(recovered recoveredSegments) (*writer, error) {
	active := recovered.segments[len(recovered.segments)-1]
	w := &writer{l: l, active: active, next: recovered.next, lastSyncStart: l.clock()}
	if err := w.openActiveFiles(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *writer) openActiveFiles() error {
	logFile, err := w.l.fs.OpenReadWrite(w.active.logPath)
	if err != nil {
		return err
	}
	indexFile, err := w.l.fs.OpenReadWrite(w.active.indexPath)
	if err != nil {
		logFile.Close()
		return err
	}
	w.logFile, w.indexFile = logFile, indexFile
	_, w.position = w.active.bounds()
	if allocator, ok := logFile.(vfs.Preallocator); ok && w.l.opts.PreallocateSegments && w.position == 0 {
		allocator.Preallocate(w.l.opts.SegmentBytes) // best effort: an error only loses the optimization
	}
	w.indexPersisted = len(w.active.entries)
	w.lastEntryPosition = 0
	if n := len(w.active.entries); n > 0 {
		w.lastEntryPosition = int64(w.active.entries[n-1].position)
	}
	return nil
}

func (w *writer) closeFiles() {
	if w.logFile != nil {
		w.logFile.Close()
		w.indexFile.Close()
		w.logFile, w.indexFile = nil, nil
	}
}

func (w *writer) run() {
	l := w.l
	for {
		var message *appendRequest
		if w.syncInFlight {
			select {
			case message = <-l.inbox:
			case outcome := <-l.syncDone:
				message = w.afterSync(outcome)
			}
		} else {
			message = <-l.inbox
		}
		for message != nil {
			// Appends start a group; other messages run on their own.
			if message.kind == messageAppend {
				w.stageRequest(message)
				message = w.drainAppends()
				w.flush()
				continue
			}
			if w.handleMessage(message) {
				return
			}
			message = nil
		}
	}
}

// afterSync handles a sync outcome and gathers the next group commit. When
// the finished job woke several appenders, the writer yields once first so
// that they can queue their next appends, then stages what is queued and
// flushes, which submits the next sync: without the yield the next job
// would often carry only the few waiters that happened to be queued. A
// lone appender (one waiter) pays no yield. It returns the first
// non-append message met while draining, if any.
func (w *writer) afterSync(outcome syncOutcome) *appendRequest {
	w.handleSyncOutcome(outcome)
	if outcome.waiters > 1 {
		runtime.Gosched()
	}
	message := w.drainAppends()
	w.flush()
	return message
}

// drainAppends stages the appends already queued, up to the group limit,
// and returns the first other message it met, if any.
func (w *writer) drainAppends() *appendRequest {
	for w.groupBytes < w.groupLimit {
		select {
		case message := <-w.l.inbox:
			if message.kind != messageAppend {
				return message
			}
			w.stageRequest(message)
		default:
			return nil
		}
	}
	return nil
}

// handleMessage runs a tick or a control; it returns true after Close.
func (w *writer) handleMessage(message *appendRequest) (stop bool) {
	switch {
	case message.kind == messageTick:
		w.l.tickPending.Store(false)
		w.maybeBackgroundSync(*w.l.tickTime.Load())
	case message.control == controlClose:
		message.reply <- w.close()
		return true
	default:
		message.reply <- w.handleControl(message)
	}
	return false
}

// stageRequest assigns offsets to a request's entries and stages them.
func (w *writer) stageRequest(request *appendRequest) {
	request.first, request.next = w.next, w.next
	if w.latched {
		request.complete(w.l, w.l.latchError())
		return
	}
	var err error
	if request.isEncoded {
		err = w.checkEncodedAgainstLog(request.encodedFirst, request.batch)
	} else {
		err = w.checkEpochs(request.entries)
	}
	if err != nil {
		request.complete(w.l, err)
		return
	}
	if request.isEncoded {
		w.stageEncodedRequest(request)
	} else {
		for i := 0; i < len(request.entries) && !w.latched; i++ {
			w.stageRecord(&request.entries[i], nil)
		}
	}
	if w.latched {
		request.next = w.next
		request.complete(w.l, w.l.latchError())
		return
	}
	request.next = w.next
	if request.level == AfterWrite {
		// Other levels publish staged_next with the group's flush, a few
		// microseconds later, under the same lock as written_next.
		if !w.l.frontiers.advanceStaged(w.next) {
			w.groupWaiters = append(w.groupWaiters, request) // the latch fails it
			w.becomeLatched(nil)
			return
		}
		request.complete(w.l, nil)
		return
	}
	w.groupWaiters = append(w.groupWaiters, request)
}

// checkEpochs refuses entries whose epochs go below the log's last epoch
// or decrease among themselves.
func (w *writer) checkEpochs(entries []Entry) error {
	epoch := w.lastEpoch
	for i := range entries {
		if entries[i].Epoch < epoch {
			return fmt.Errorf("%w: entry %d has epoch %d after %d", ErrEpochRegression, i, entries[i].Epoch, epoch)
		}
		epoch = entries[i].Epoch
	}
	return nil
}

// stageRecord stages one record, an entry to encode or a checked encoded
// record (entry nil), rolling over or flushing first when needed.
func (w *writer) stageRecord(entry *Entry, encoded []byte) {
	var size int
	var epoch uint64
	if entry != nil {
		size, epoch = encodedSize(len(entry.Body)), entry.Epoch
	} else {
		size, epoch = len(encoded), encodedEpoch(encoded)
	}
	if w.position > 0 && w.position+int64(size) > w.l.opts.SegmentBytes {
		if w.flush(); w.latched {
			return
		}
		if w.rollover(); w.latched {
			return
		}
	}
	cacheable := w.l.cache.fits(size)
	if w.groupBytes > 0 && (w.groupBytes+size > w.groupLimit || !cacheable) {
		if w.flush(); w.latched {
			return
		}
	}
	position := w.position
	switch {
	case cacheable && entry != nil:
		block, start, end := w.l.cache.stage(w.next, entry.Epoch, entry.Type, entry.Body)
		w.addPiece(flushPiece{block: block, start: start, end: end, position: position})
	case cacheable:
		block, start, end := w.l.cache.stageEncoded(w.next, encoded)
		w.addPiece(flushPiece{block: block, start: start, end: end, position: position})
	default:
		if entry != nil {
			w.oversize = appendRecord(w.oversize[:0], w.next, entry.Epoch, entry.Type, entry.Body)
		} else {
			w.oversize = append(w.oversize[:0], encoded...)
		}
		w.l.cache.restartAt(w.next + 1)
		w.pieces = append(w.pieces, flushPiece{raw: w.oversize, position: position})
	}
	if position == 0 || position >= w.lastEntryPosition+w.l.opts.IndexIntervalBytes {
		w.pendingEntries = append(w.pendingEntries, indexEntry{relativeOffset: uint32(w.next - w.active.base), position: uint32(position)})
		w.lastEntryPosition = position
	}
	if !w.epochSeen || epoch > w.lastEpoch {
		w.l.observeEpoch(w.next, epoch)
		w.epochSeen = true
	}
	w.lastEpoch = epoch
	w.position += int64(size)
	w.groupBytes += size
	w.stagedBytes += int64(size)
	w.next++
}

// addPiece extends the last piece when the new span continues it.
func (w *writer) addPiece(piece flushPiece) {
	if n := len(w.pieces); n > 0 {
		last := &w.pieces[n-1]
		if last.block == piece.block && last.end == piece.start {
			last.end = piece.end
			return
		}
	}
	w.pieces = append(w.pieces, piece)
}

// observeEpoch records a new epoch's first offset.
func (l *Log) observeEpoch(offset, epoch uint64) {
	l.epochMu.Lock()
	defer l.epochMu.Unlock()
	builder := epochHistoryBuilder{history: l.epochs}
	builder.observe(offset, epoch)
	l.epochs = builder.history
}

// flush writes the staged group, advances written_next and settles the
// group's waiters.
func (w *writer) flush() {
	if w.latched {
		return // the latch failed every waiter; written_next stays at durable_next
	}
	if len(w.pieces) > 0 {
		if w.l.latchBegun() {
			w.becomeLatched(nil) // latched by the syncer meanwhile: write nothing more
			return
		}
		for _, piece := range w.pieces {
			if _, err := w.logFile.WriteAt(piece.bytes(), piece.position); err != nil {
				w.becomeLatched(fmt.Errorf("write %s: %w", w.active.logPath, err))
				return
			}
		}
		w.pieces = w.pieces[:0]
		w.groupBytes = 0
		w.writtenBytes = w.stagedBytes
		w.l.cache.markWritten(w.next)
		w.active.publish(w.next, w.position, w.pendingEntries)
		w.pendingEntries = w.pendingEntries[:0]
		if len(w.active.entries)-w.indexPersisted >= indexPersistBatch {
			if err := w.persistIndex(); err != nil {
				w.becomeLatched(err)
				return
			}
		}
	}
	durable, ok := w.l.frontiers.advanceWrittenFrom(w.next, w.writtenBytes)
	if !ok {
		w.becomeLatched(nil) // latched by the syncer meanwhile
		return
	}
	w.queueFsyncWaiters(durable)
	w.maybeSubmitSync()
	// Completing waiters is the last step, so the woken callers do not
	// wait for the writer's own bookkeeping.
	w.completeFlushWaiters()
}

// indexPersistBatch bounds the index entries kept only in memory between
// syncs (a 4 KiB index write).
const indexPersistBatch = 512

// queueFsyncWaiters moves the group's AfterFsync waiters that are not yet
// durable to the next sync, leaving in groupWaiters only those to complete
// now (once moved, a waiter belongs to the syncer and may complete at any
// moment, so the writer must not touch it again).
func (w *writer) queueFsyncWaiters(durable uint64) {
	kept := w.groupWaiters[:0]
	for _, request := range w.groupWaiters {
		if request.level == AfterFsync && request.next > durable {
			w.fsyncWaiters = append(w.fsyncWaiters, request)
		} else {
			kept = append(kept, request)
		}
	}
	clear(w.groupWaiters[len(kept):])
	w.groupWaiters = kept
}

// completeFlushWaiters completes the group's remaining waiters.
func (w *writer) completeFlushWaiters() {
	for _, request := range w.groupWaiters {
		request.complete(w.l, nil)
	}
	clear(w.groupWaiters)
	w.groupWaiters = w.groupWaiters[:0]
}

// persistIndex writes the active segment's index entries not yet in its
// file. The writer alone appends to active.entries, so it reads them
// without the segment lock.
func (w *writer) persistIndex() error {
	entries := w.active.entries
	if w.indexPersisted == len(entries) {
		return nil
	}
	w.indexBuffer = appendIndexEntries(w.indexBuffer[:0], entries[w.indexPersisted:])
	if _, err := w.indexFile.WriteAt(w.indexBuffer, int64(w.indexPersisted)*indexEntryBytes); err != nil {
		return fmt.Errorf("write %s: %w", w.active.indexPath, err)
	}
	w.indexPersisted = len(entries)
	w.indexDirty = true
	return nil
}

// rollover seals the active segment and starts the next one. The group
// must be flushed. The outgoing segment is synced to its end (data, index
// and, if it is new, its directory entry) through the syncer like any
// other sync, after the outstanding one: never beside it, because a sync
// that completes after another sync of the same file failed proves
// nothing. The next segment is created only once durable_next has reached
// the outgoing segment's end, so a power loss can never leave a torn
// segment with a later one after it.
func (w *writer) rollover() {
	if w.awaitSync(); w.latched {
		return
	}
	if err := w.persistIndex(); err != nil {
		w.becomeLatched(err)
		return
	}
	if w.l.frontiers.snapshot().Durable < w.next || w.indexDirty || w.dirDirty {
		if w.submitSync(); w.latched {
			return
		}
		if w.awaitSync(); w.latched {
			return
		}
	}
	if durable := w.l.frontiers.snapshot().Durable; durable != w.next {
		panic(fmt.Sprintf("log: rollover at %d with durable_next %d", w.next, durable))
	}
	w.active.seal()
	w.closeFiles() // the syncer is done with them: no sync is outstanding
	next, err := w.l.createSegment(w.next)
	if err != nil {
		w.becomeLatched(err)
		return
	}
	w.active = next
	if err := w.openActiveFiles(); err != nil {
		w.becomeLatched(err)
		return
	}
	w.indexDirty, w.dirDirty = false, true
}

// createSegment creates an empty segment's files and adds it to the list.
func (l *Log) createSegment(base uint64) (*segment, error) {
	seg := newSegment(l.dir, base)
	for _, path := range []string{seg.logPath, seg.indexPath} {
		file, err := l.fs.Create(path)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		file.Close()
	}
	reader, err := l.fs.Open(seg.logPath)
	if err != nil {
		return nil, err
	}
	seg.reader = reader
	seg.useFiles(&l.budget.files, l.fs)
	l.segmentsMu.Lock()
	l.segments = append(l.segments, seg)
	l.segmentsMu.Unlock()
	return seg, nil
}

// becomeLatched stops the log after a storage failure (cause, or nil when
// another goroutine latched the log already): it latches (setLatch freezes
// durable_next and records the cut), waits for the outstanding sync to
// come back, drops written_next to durable_next, cuts the active segment
// back to it in the page cache, and fails every waiter.
func (w *writer) becomeLatched(cause error) {
	if w.latched {
		return
	}
	w.latched = true
	l := w.l
	var latchErr error
	if cause != nil {
		latchErr = l.setLatch(cause)
	} else {
		latchErr = l.awaitLatch()
	}
	w.awaitSync() // its waiters rejoin fsyncWaiters
	durableBytes := l.frontiers.durableBytes()
	l.frontiers.dropToDurable()
	durable := l.frontiers.snapshot().Durable
	w.pieces, w.groupBytes = w.pieces[:0], 0
	l.cache.truncateFrom(durable)
	l.epochMu.Lock()
	l.epochs = trimEpochHistory(l.epochs, durable)
	l.epochMu.Unlock()
	w.truncateActive(durable, durableBytes)
	l.logger.Error("log latched after a storage failure", "dir", l.dir, "durable_next", durable, "error", latchErr)
	// Waiters learn of the failure only once the latch is complete.
	for _, waiters := range [][]*appendRequest{w.groupWaiters, w.fsyncWaiters} {
		for _, request := range waiters {
			request.complete(l, latchErr)
		}
	}
	clear(w.groupWaiters)
	w.groupWaiters, w.fsyncWaiters = w.groupWaiters[:0], nil
}

// truncateActive cuts the active segment's file back to the record at
// durable (whose cumulative byte count is durableBytes), without a sync:
// the page cache then no longer holds any record past the cut, so a
// process restart never serves one, even when the disk refused the cut
// file. Every byte staged after durable lies in the active segment, since
// rollover creates the next segment only once durable_next reached the
// outgoing one's end. A failure is logged and kept in Status; the cut
// file, when recorded, still cuts at the next open.
func (w *writer) truncateActive(durable uint64, durableBytes int64) {
	if w.logFile == nil || durable < w.active.base {
		return
	}
	position := w.position - (w.stagedBytes - durableBytes)
	if position < 0 || position > w.position {
		panic(fmt.Sprintf("log: latch cut at %d maps to byte %d of a segment staged to %d", durable, position, w.position))
	}
	if err := w.logFile.Truncate(position); err != nil {
		err = fmt.Errorf("truncate %s to the cut: %w", w.active.logPath, err)
		w.l.logger.Error("log could not cut its active segment back after a storage failure", "dir", w.l.dir, "error", err)
		w.l.statusMu.Lock()
		w.l.lastError = errors.Join(w.l.lastError, err)
		w.l.statusMu.Unlock()
		return
	}
	w.pendingEntries = w.pendingEntries[:0]
	w.active.cutTo(durable, position)
}

// close writes and syncs everything staged, then closes the files.
func (w *writer) close() error {
	// Every append admitted before Close is ahead of the close message,
	// so the inbox holds no appends now, only possibly a tick.
	w.flush()
	w.awaitSync()
	if !w.latched {
		w.forceSync = true
		w.maybeSubmitSync()
		w.awaitSync()
	}
	if !w.latched && len(w.fsyncWaiters) > 0 {
		panic("log: AfterFsync waiters left after the closing sync")
	}
	var err error
	if w.latched {
		err = w.l.latchError()
	} else {
		err = w.l.persistEpochs()
		if recordErr := w.l.durableEnd.recordDurably(w.l.frontiers.snapshot().Durable); recordErr != nil && err == nil {
			err = fmt.Errorf("log: close: recording the durable end: %w", recordErr)
		}
	}
	w.closeFiles()
	return err
}
