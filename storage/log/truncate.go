package log

// Retention (TruncateBefore) and the suffix cut (TruncateAfter).
//
// Retention removes whole segments whose records all lie below the floor,
// oldest first, never the active segment, and refuses a floor above
// durable_next: a copy must never drop history it cannot prove it holds.
// It runs on the caller's goroutine (it touches only sealed segments). A
// failed directory sync latches the log like any failed sync: the writer
// completes the latch, in order with the appends before it.
//
// The suffix cut removes every record from an offset on and is durable on
// return. It runs on the writer and goes through the same path as a latch's
// pending cut: the cut offset is first recorded in latched-cut.pending, so
// a crash mid-cut is finished by the next Open, then cutSegmentFiles
// removes and truncates, then the durable-end record is lowered to the cut
// (durably, before any record is written above it), then the file is
// removed. A latch during the cut records the cut offset, not the higher
// durable_next, so the cut still happens at the next Open.

import (
	"fmt"
	"path/filepath"
)

// TruncateBefore removes the segments whose records all lie below offset.
// FirstOffset becomes the base of the oldest remaining segment, which may
// be below offset. It refuses (ErrFloorAboveDurable) an offset above
// durable_next. A failed directory sync latches the log (ErrLatched).
func (l *Log) TruncateBefore(offset uint64) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	err, latched := l.removeSegmentsBelow(offset)
	if latched {
		// The writer completes the latch; the retention lock is released
		// first, since the writer may be waiting for it in a suffix cut.
		if l.direct {
			l.wakeAppender() // its next SyncFinished completes the latch
		} else {
			l.control(controlLatch, 0)
		}
	}
	return err
}

// removeSegmentsBelow is TruncateBefore under the retention lock; latched
// reports that its directory sync failed and latched the log.
func (l *Log) removeSegmentsBelow(offset uint64) (err error, latched bool) {
	l.retentionMu.Lock()
	defer l.retentionMu.Unlock()
	if durable := l.frontiers.snapshot().Durable; offset > durable {
		return fmt.Errorf("%w: floor %d, durable_next %d", ErrFloorAboveDurable, offset, durable), false
	}
	l.segmentsMu.Lock()
	removable := 0
	for removable < len(l.segments)-1 && l.segments[removable+1].base <= offset {
		removable++
	}
	removed := append([]*segment(nil), l.segments[:removable]...)
	l.segments = append([]*segment(nil), l.segments[removable:]...)
	l.firstOffset.Store(l.segments[0].base)
	l.segmentsMu.Unlock()
	if len(removed) == 0 {
		return nil, false
	}
	for _, seg := range removed {
		seg.closeReader()
		if err := removeSegmentFiles(l.fs, l.dir, seg.base); err != nil {
			return fmt.Errorf("log: retention: %w", err), false
		}
	}
	if err := l.syncDirectory(); err != nil {
		return fmt.Errorf("log: retention: %w", l.latchError()), true
	}
	return nil, false
}

// TruncateAfter removes every record at or after offset and returns once
// the cut is durable; afterwards all three frontiers equal offset (every
// record below it is durable). An offset at or past staged_next changes
// nothing. Appends still waiting for removed records fail with
// ErrTruncated. The incarnation changes.
func (l *Log) TruncateAfter(offset uint64) error {
	return l.control(controlTruncateAfter, offset)
}

func (w *writer) handleControl(control *appendRequest) error {
	switch control.control {
	case controlLatch:
		w.becomeLatched(nil)
		return w.l.latchError()
	case controlRun:
		return control.run(w)
	case controlTruncateAfter:
	default:
		panic("log: unknown control request")
	}
	if w.flush(); w.latched {
		return w.l.latchError()
	}
	if w.awaitSync(); w.latched {
		return w.l.latchError()
	}
	offset := control.offset
	if offset >= w.next {
		return nil
	}
	if offset < w.l.FirstOffset() {
		return fmt.Errorf("%w: cut %d is below the first offset %d", ErrOutOfRange, offset, w.l.FirstOffset())
	}
	if err := w.cutAfter(offset); err != nil {
		w.becomeLatched(fmt.Errorf("truncate after %d: %w", offset, err))
		return w.l.latchError()
	}
	return nil
}

// cutAfter carries out a live suffix cut on the writer.
func (w *writer) cutAfter(offset uint64) error {
	l := w.l
	l.retentionMu.Lock()
	defer l.retentionMu.Unlock()
	l.pendingCut.Store(offset + 1) // a latch from here on cuts at offset too
	if err := writeSmallFile(l.fs, l.dir, cutFileName, encodeUint64(offset)); err != nil {
		return err
	}
	incarnation, err := bumpIncarnation(l.fs, l.dir, func() int64 { return l.clock().UnixNano() })
	if err != nil {
		return err
	}
	l.incarnation.Store(incarnation)
	if err := w.persistIndex(); err != nil {
		return err // the cut reads the active segment's index file
	}
	w.closeFiles() // before the files change under them
	if err := w.cutSegments(offset); err != nil {
		return err
	}
	if err := w.openActiveFiles(); err != nil {
		return err
	}
	w.next = offset
	w.writtenBytes = w.stagedBytes
	l.cache.restartAt(offset)
	l.frontiers.reset(offset, w.stagedBytes)
	l.epochMu.Lock()
	l.epochs = trimEpochHistory(l.epochs, offset)
	l.epochMu.Unlock()
	w.lastEpoch, w.epochSeen = l.lastEpoch()
	for _, request := range w.fsyncWaiters {
		if request.next <= offset {
			request.complete(l, nil)
		} else {
			request.complete(l, fmt.Errorf("%w: cut at %d", ErrTruncated, offset))
		}
	}
	clear(w.fsyncWaiters)
	w.fsyncWaiters = w.fsyncWaiters[:0]
	if err := l.persistEpochs(); err != nil {
		return err
	}
	// Lower the proof before any record is written above the cut: a stale,
	// higher durable end would make a later torn tail look like damage.
	if err := l.durableEnd.recordDurably(offset); err != nil {
		return err
	}
	if err := removeCutFile(l.fs, l.dir); err != nil {
		return err
	}
	l.pendingCut.Store(0)
	return nil
}

// cutSegments removes and truncates segment files and rebuilds the
// in-memory state of the segment that becomes active.
func (w *writer) cutSegments(offset uint64) error {
	l := w.l
	l.segmentsMu.Lock()
	defer l.segmentsMu.Unlock()
	bases := make([]uint64, len(l.segments))
	for i, seg := range l.segments {
		bases[i] = seg.base
	}
	kept, err := cutSegmentFiles(l.fs, l.dir, bases, offset, func(target uint64) (int64, uint64) {
		return findSegment(l.segments, target).locate(target)
	})
	if err != nil {
		return err
	}
	for _, seg := range l.segments[len(kept):] {
		seg.closeReader()
	}
	l.segments = l.segments[:len(kept)]
	active := l.segments[len(l.segments)-1]
	if active.base != kept[len(kept)-1] {
		return fmt.Errorf("segment list and files disagree after the cut")
	}
	return w.reloadActive(active)
}

// reloadActive re-reads the active segment's index and bounds from its
// files after a cut (the caller holds segmentsMu).
func (w *writer) reloadActive(active *segment) error {
	l := w.l
	size, _, err := l.fs.Stat(active.logPath)
	if err != nil {
		return err
	}
	indexBytes, err := readWholeFile(l.fs, active.indexPath)
	if err != nil {
		return err
	}
	analysis, err := analyzeSegment(active, active.base, size, indexBytes, l.opts.IndexIntervalBytes, anchorsUnlimited)
	if err != nil {
		return err
	}
	if analysis.damage != nil {
		return fmt.Errorf("%w: segment %d after the cut: %v", ErrCorrupt, active.base, analysis.damage)
	}
	if analysis.indexRewrite {
		if err := writeIndexFile(l.fs, filepath.Clean(active.indexPath), analysis.entries); err != nil {
			return err
		}
	}
	reader, err := l.fs.Open(active.logPath)
	if err != nil {
		return err
	}
	active.unseal(reader, analysis.entries, analysis.next, analysis.validEnd)
	w.active = active
	return nil
}
