package log

// The syncer goroutine runs fdatasync for the writer, one job at a time
// (at most one is outstanding per log). A job covers every byte written
// before the writer submitted it. The syncer:
//
//  1. syncs the indexes of segments sealed since the last job (their data
//     was synced at rollover) and closes their write descriptors;
//  2. syncs the active segment's log and, when new entries were written,
//     its index, concurrently; durable_next advances only when both
//     succeed;
//  3. syncs the directory when a segment was created;
//  4. publishes durable_next = the job's target and completes the job's
//     AfterFsync waiters, or on failure latches the log and fails them;
//  5. hands the job back to the writer.
//
// The background sync decision is a plain function below; the writer
// applies it on each tick, and the ticker (internal, or the caller through
// Tick) only supplies the time.

import (
	"fmt"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

type syncJob struct {
	dir         string
	logFile     vfs.File
	indexFile   vfs.File
	syncIndex   bool
	sealed      []sealedSegment
	syncDir     bool
	target      uint64
	targetBytes int64
	waiters     []*appendRequest
}

// syncOutcome reports a finished job: its error, and how many waiters it
// completed.
type syncOutcome struct {
	err     error
	waiters int
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

// maybeSubmitSync starts a sync when one is owed (AfterFsync waiters, a
// rollover, Close) and none is outstanding.
func (w *writer) maybeSubmitSync() {
	if w.syncInFlight || w.latched {
		return
	}
	if len(w.fsyncWaiters) == 0 && len(w.sealed) == 0 && !w.forceSync {
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
	if err := w.persistIndex(); err != nil {
		w.becomeLatched(err)
		return
	}
	job := &w.job
	job.dir = w.l.dir
	job.logFile, job.indexFile, job.syncIndex = w.logFile, w.indexFile, w.indexDirty
	job.sealed = append(job.sealed[:0], w.sealed...)
	job.syncDir = w.dirDirty
	job.target, job.targetBytes = w.next, w.writtenBytes
	job.waiters = append(job.waiters[:0], w.fsyncWaiters...)
	clear(w.fsyncWaiters)
	clear(w.sealed)
	w.fsyncWaiters, w.sealed = w.fsyncWaiters[:0], w.sealed[:0]
	w.indexDirty, w.dirDirty, w.forceSync = false, false, false
	w.syncInFlight = true
	w.l.syncPending.Store(true)
	w.lastSyncStart = w.l.clock()
	w.l.syncJobs <- job
}

func (w *writer) handleSyncOutcome(outcome syncOutcome) {
	w.syncInFlight = false
	w.l.syncPending.Store(false)
	if outcome.err != nil {
		w.becomeLatched(outcome.err)
	}
}

func (l *Log) runSyncer() {
	indexSyncer := newIndexSyncer()
	defer indexSyncer.stop()
	for job := range l.syncJobs {
		err := performSync(l.fs, job, indexSyncer)
		waiters := len(job.waiters)
		if err == nil {
			l.frontiers.advanceDurable(job.target, job.targetBytes)
			l.statusMu.Lock()
			l.lastSyncTime = l.clock()
			l.statusMu.Unlock()
			for _, request := range job.waiters {
				request.complete(l, nil)
			}
			clear(job.waiters)
			job.waiters = job.waiters[:0]
		} else {
			// Refuse new appends now; the writer latches and then fails
			// this job's waiters with everyone else's.
			l.setLatch(err)
		}
		l.syncDone <- syncOutcome{err: err, waiters: waiters}
	}
}

// performSync runs one job's syncs; see the ordering above.
func performSync(fs vfs.FS, job *syncJob, indexSyncer *indexSyncer) error {
	var firstErr error
	for _, sealed := range job.sealed {
		if err := sealed.indexFile.Sync(); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("sync %s: %w", sealed.indexFile.Name(), err)
		}
		sealed.logFile.Close()
		sealed.indexFile.Close()
	}
	clear(job.sealed)
	job.sealed = job.sealed[:0]
	if firstErr != nil {
		return firstErr
	}
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
		if err := fs.SyncDir(job.dir); err != nil {
			return fmt.Errorf("sync directory %s: %w", job.dir, err)
		}
	}
	return nil
}

// indexSyncer is the syncer's helper goroutine: it syncs the index file
// while the syncer syncs the log file. One request at a time; both
// channels hold one value.
type indexSyncer struct {
	requests chan vfs.File
	results  chan error
	done     chan struct{}
}

func newIndexSyncer() *indexSyncer {
	helper := &indexSyncer{requests: make(chan vfs.File, 1), results: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(helper.done)
		for file := range helper.requests {
			helper.results <- file.Sync()
		}
	}()
	return helper
}

// stop ends the helper and waits for it.
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
