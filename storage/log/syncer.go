package log

// The syncer goroutine runs every fdatasync of a segment file for the
// writer, one job at a time: at most one job is outstanding per log, and
// while the log runs no other goroutine syncs a segment file (rollover
// submits a job too). That is what makes a success mean something: after
// a failed sync the kernel may have dropped the file's dirty pages and
// reports it once, so a second sync of the same file running beside it
// could succeed without having written them.
//
// A job covers every byte written to the active segment before the writer
// submitted it. The syncer:
//
//  1. syncs the segment's log file and, when new entries were written, its
//     index, concurrently; the job succeeds only if both do;
//  2. syncs the directory when a segment was created since the last job,
//     so that the segment's name survives a power loss with its bytes;
//  3. on success, reports the segment and the offset the job covered to
//     the ledger (frontier.go), which moves durable_next, or on a latched
//     log refuses to; then completes the job's AfterFsync waiters at or
//     below durable_next. On failure it latches the log first (freezing
//     durable_next) and completes nobody;
//  4. hands the job back to the writer, with the waiters it did not
//     complete, which the writer fails (latched) or queues for the next job.
//
// In direct mode (direct.go) the syncer does not settle a successful job:
// it hands the outcome back on the same channel and wakes the appender
// (Options.SyncDone), which settles it on its own goroutine with the same
// code (handleSyncOutcome), so that durable_next moves and the waiters
// complete where the appender's owner serializes its state. A failed job
// latches the log on the syncer in both modes, so the freeze is
// immediate and the cut file's fsyncs stay off the appender's goroutine.
//
// The background sync decision is a plain function below; the writer
// applies it on each tick, and the ticker (internal, or the caller through
// Tick, or the direct appender through MaybeSync) only supplies the time.

import (
	"fmt"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

type syncJob struct {
	logFile     vfs.File
	indexFile   vfs.File
	syncIndex   bool
	syncDir     bool
	segmentBase uint64 // the synced segment's first offset
	target      uint64 // offset after the last record written before submission
	targetBytes int64
	waiters     []*appendRequest
}

// syncOutcome reports a finished job: its error, how many waiters it
// carried, and whether the syncer settled it (standalone mode; in direct
// mode the appender settles it on its own goroutine).
type syncOutcome struct {
	err     error
	waiters int
	settled bool
}

// shouldStartBackgroundSync is the background sync decision: sync when
// background sync is on, something is written but not durable, no sync is
// outstanding, and the interval has passed since the last sync started
// (any sync: an AfterFsync group commit counts). Ticks that arrive while a
// sync is outstanding are simply skipped, never queued.
func shouldStartBackgroundSync(now, lastSyncStart time.Time, interval time.Duration, written, durable uint64, syncInFlight bool) bool {
	return interval > 0 && !syncInFlight && written > durable && now.Sub(lastSyncStart) >= interval
}

func (w *writer) maybeBackgroundSync(now time.Time) {
	if w.latched || len(w.pieces) > 0 {
		return
	}
	frontiers := w.l.frontiers.snapshot()
	if shouldStartBackgroundSync(now, w.lastSyncStart, w.l.syncInterval(), frontiers.Written, frontiers.Durable, w.syncInFlight) {
		w.submitSync()
	}
}

// maybeSubmitSync starts a sync when one is owed (AfterFsync waiters,
// Close) and none is outstanding.
func (w *writer) maybeSubmitSync() {
	if w.syncInFlight || w.latched {
		return
	}
	if len(w.fsyncWaiters) == 0 && !w.forceSync {
		return
	}
	w.submitSync()
}

// submitSync hands the syncer a job covering everything written. The group
// must be flushed.
func (w *writer) submitSync() {
	if len(w.pieces) > 0 {
		panic("log: sync submitted with an unflushed group")
	}
	if w.syncInFlight {
		panic("log: a second sync submitted while one is outstanding")
	}
	if err := w.persistIndex(); err != nil {
		w.becomeLatched(err)
		return
	}
	job := &w.job
	job.logFile, job.indexFile, job.syncIndex = w.logFile, w.indexFile, w.indexDirty
	job.syncDir = w.dirDirty
	job.segmentBase = w.active.base
	job.target, job.targetBytes = w.next, w.writtenBytes
	job.waiters = append(job.waiters[:0], w.fsyncWaiters...)
	clear(w.fsyncWaiters)
	w.fsyncWaiters = w.fsyncWaiters[:0]
	w.indexDirty, w.dirDirty, w.forceSync = false, false, false
	w.syncInFlight = true
	w.l.syncPending.Store(true)
	w.lastSyncStart = w.l.clock()
	w.l.syncJobs <- job
}

// awaitSync waits for the outstanding sync, if any, and handles it.
func (w *writer) awaitSync() {
	if w.syncInFlight {
		w.handleSyncOutcome(<-w.l.syncDone)
	}
}

// handleSyncOutcome takes the job back from the syncer. Its waiters that
// the syncer did not complete rejoin the queue for the next sync; the
// latch fails them when the job failed or the log latched meanwhile.
func (w *writer) handleSyncOutcome(outcome syncOutcome) {
	w.syncInFlight = false
	w.l.syncPending.Store(false)
	if outcome.err == nil && !outcome.settled {
		w.l.settleSync(&w.job)
	}
	w.fsyncWaiters = append(w.fsyncWaiters, w.job.waiters...)
	clear(w.job.waiters)
	w.job.waiters = w.job.waiters[:0]
	switch {
	case outcome.err != nil:
		w.becomeLatched(outcome.err)
	case w.l.latchError() != nil:
		w.becomeLatched(nil)
	}
}

func (l *Log) runSyncer() {
	indexSyncer := l.durableNotes
	defer indexSyncer.stop()
	for job := range l.syncJobs {
		waiters := len(job.waiters)
		err := performSync(job, indexSyncer, l.syncDirectory)
		settled := false
		if err != nil {
			// Latch before anything else can read the frontiers; the writer
			// completes the latch and fails this job's waiters.
			l.setLatch(err)
		} else if !l.direct {
			l.settleSync(job)
			settled = true
		}
		l.syncDone <- syncOutcome{err: err, waiters: waiters, settled: settled}
		l.wakeAppender()
	}
}

// settleSync applies a successful job to the ledger and completes the
// waiters it made durable, keeping the others in the job for the writer.
func (l *Log) settleSync(job *syncJob) {
	durable, ok := l.frontiers.applySync(segmentSync{base: job.segmentBase, next: job.target, bytes: job.targetBytes})
	if !ok {
		return // latched meanwhile: this success proves nothing
	}
	l.statusMu.Lock()
	l.lastSyncTime = l.clock()
	l.statusMu.Unlock()
	kept := job.waiters[:0]
	for _, request := range job.waiters {
		if request.next <= durable {
			request.complete(l, nil)
		} else {
			kept = append(kept, request)
		}
	}
	clear(job.waiters[len(kept):])
	job.waiters = kept
	l.noteDurable(durable)
}

// noteDurable hands durable_next to the sync helper goroutine, which
// writes it into the durable-end record beside the next fdatasync, off the
// path of every waiter and of the next sync. Notes not yet written fold
// into the newest.
func (l *Log) noteDurable(durable uint64) {
	l.durableNotes.note(durable, l.durableEnd.generation.Load())
}

// writeDurableEnd writes a note, on the sync helper goroutine. The records
// are durable all the same if it fails; a disk that refuses this small
// write is failing, so the log stops trusting it.
func (l *Log) writeDurableEnd(durable, generation uint64) {
	if err := l.durableEnd.note(durable, generation); err != nil {
		l.setLatch(fmt.Errorf("write %s: %w", durableEndFileName, err))
	}
}

// performSync runs one job's syncs; see the ordering above.
func performSync(job *syncJob, indexSyncer *indexSyncer, syncDirectory func() error) error {
	if job.syncIndex {
		indexSyncer.requests <- job.indexFile
	}
	logErr := job.logFile.Sync()
	var indexErr error
	if job.syncIndex {
		indexErr = <-indexSyncer.results
	}
	if logErr != nil {
		return fmt.Errorf("sync %s: %w", job.logFile.Name(), logErr)
	}
	if indexErr != nil {
		return fmt.Errorf("sync %s: %w", job.indexFile.Name(), indexErr)
	}
	if job.syncDir {
		return syncDirectory()
	}
	return nil
}

// syncDirectory syncs the log's directory for the syncer and for
// retention, which runs on its caller's goroutine: one at a time, and a
// failure latches the log (freezing durable_next) before the next one may
// start, because a directory sync that succeeds after another failed
// proves nothing about the entries the failure may have lost.
func (l *Log) syncDirectory() error {
	l.directorySyncMu.Lock()
	defer l.directorySyncMu.Unlock()
	if err := l.fs.SyncDir(l.dir); err != nil {
		err = fmt.Errorf("sync directory %s: %w", l.dir, err)
		l.setLatch(err)
		return err
	}
	return nil
}

// indexSyncer is the syncer's helper goroutine: it syncs the index file
// while the syncer syncs the log file, and writes the durable-end notes
// (noteDurable). One sync request at a time; both channels hold one value.
// A note is the newest value and a kick: notes written late fold into one,
// and the last one is written before the helper stops.
type indexSyncer struct {
	requests  chan vfs.File
	results   chan error
	done      chan struct{}
	kick      chan struct{}
	writeNote func(durable, generation uint64)

	noteMu         sync.Mutex // guards the newest note
	noteDurable    uint64
	noteGeneration uint64
}

func newIndexSyncer(writeNote func(durable, generation uint64)) *indexSyncer {
	helper := &indexSyncer{requests: make(chan vfs.File, 1), results: make(chan error, 1), done: make(chan struct{}),
		kick: make(chan struct{}, 1), writeNote: writeNote}
	go func() {
		defer close(helper.done)
		for {
			select {
			case file, ok := <-helper.requests:
				if !ok {
					helper.writeNewestNote()
					return
				}
				helper.results <- file.Sync()
			case <-helper.kick:
				helper.writeNewestNote()
			}
		}
	}()
	return helper
}

// note asks the helper to write durable, taken at generation; it never
// blocks.
func (s *indexSyncer) note(durable, generation uint64) {
	s.noteMu.Lock()
	if generation > s.noteGeneration || (generation == s.noteGeneration && durable > s.noteDurable) {
		s.noteDurable, s.noteGeneration = durable, generation
	}
	s.noteMu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *indexSyncer) writeNewestNote() {
	s.noteMu.Lock()
	durable, generation := s.noteDurable, s.noteGeneration
	s.noteMu.Unlock()
	if durable > 0 {
		s.writeNote(durable, generation)
	}
}

// stop ends the helper, after its last note, and waits for it.
func (s *indexSyncer) stop() {
	close(s.requests)
	<-s.done
}

// runTicker drives background sync when the caller does not: it ticks at
// half the interval (so a sync starts at most 1.5 intervals after the
// previous one), re-arms when the interval changes, and sleeps while it is
// 0.
func (l *Log) runTicker() {
	var ticker *time.Ticker
	var tickC <-chan time.Time
	arm := func() {
		if ticker != nil {
			ticker.Stop()
			ticker, tickC = nil, nil
		}
		if interval := l.syncInterval(); interval > 0 {
			ticker = time.NewTicker(max(interval/2, time.Millisecond))
			tickC = ticker.C
		}
	}
	arm()
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		select {
		case <-tickC:
			l.Tick(l.clock())
		case <-l.intervalChanged:
			arm()
		case <-l.stopTicker:
			return
		}
	}
}
