package log

// Seal and rebase: the two log operations a replica's recovery needs
// beyond appends and cuts.
//
// Seal syncs everything written and reports, in one step, the durable end
// and the epoch history below it: a live seal counts only durable records,
// so what it reports survives any crash after it. On the standalone log it
// runs on the writer, in order with the appends before it, so the end and
// the history describe the same records; a direct appender seals through a
// sync request and reports on its own goroutine once that is durable
// (appends it staged after asking may be covered too; the history is
// trimmed to the end either way).
//
// Rebase drops every record and restarts the log empty at a base offset
// (a follower whose log lies below the source's retained range starts
// again at the source's first offset), optionally carrying an epoch
// history prefix: the epochs that started before base on the source. It is
// durable on return and crash-safe through rebase.pending, written first
// (payload: u64 base, then the epochs payload of smallfile.go), which the
// next Open carries out before anything else. In order: rebase.pending;
// the incarnation (offsets from base are given out again); every segment
// removed and the directory synced; an empty segment at base; the epoch
// history; the durable-end record lowered to base; rebase.pending removed.
// Appends still waiting for a sync fail with ErrTruncated.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// SealState is what a seal reports.
type SealState struct {
	// End is durable_next when the seal completed: every record below it
	// is durable.
	End uint64
	// Epochs is the epoch history of the records below End.
	Epochs []EpochStart
	// Incarnation is the log's incarnation at the seal.
	Incarnation uint64
}

// Seal syncs everything written and returns the durable end and the epoch
// history below it; see the file comment. A storage failure returns
// ErrLatched.
func (l *Log) Seal(ctx context.Context) (SealState, error) {
	if err := ctx.Err(); err != nil {
		return SealState{}, err
	}
	var state SealState
	err := l.runOnWriter(func(w *writer) error {
		var err error
		state, err = w.seal()
		return err
	})
	return state, err
}

// seal is Seal on the writer.
func (w *writer) seal() (SealState, error) {
	if w.flush(); w.latched {
		return SealState{}, w.l.latchError()
	}
	if w.awaitSync(); w.latched {
		return SealState{}, w.l.latchError()
	}
	if w.l.frontiers.snapshot().Durable < w.next {
		w.forceSync = true
		w.maybeSubmitSync()
		if w.awaitSync(); w.latched {
			return SealState{}, w.l.latchError()
		}
	}
	return w.l.sealState(), nil
}

// sealState reads the durable end and the history below it.
func (l *Log) sealState() SealState {
	end := l.frontiers.snapshot().Durable
	return SealState{End: end, Epochs: trimEpochHistory(l.EpochHistory(), end), Incarnation: l.Incarnation()}
}

// Seal asks for a seal: done is called on this goroutine, once everything
// staged before the call is durable, with the durable end and the history
// below it (see the file comment). A storage failure reports ErrLatched.
func (a *Appender) Seal(done func(SealState, error)) error {
	_, err := a.Stage(nil, AfterFsync, func(result Result) {
		if result.Err != nil {
			done(SealState{}, result.Err)
			return
		}
		done(a.l.sealState(), nil)
	})
	if err != nil {
		return err
	}
	a.Flush()
	return nil
}

const rebaseFileName = "rebase.pending"

// Rebase drops every record and restarts the log empty at base, with
// epochs as its history (every entry must start below base, in order); see
// the file comment.
func (l *Log) Rebase(base uint64, epochs []EpochStart) error {
	return l.runOnWriter(func(w *writer) error { return w.rebase(base, epochs) })
}

// Rebase is Log.Rebase on the appender's goroutine.
func (a *Appender) Rebase(base uint64, epochs []EpochStart) error {
	if a.l.closed {
		return ErrClosed
	}
	return a.w.rebase(base, epochs)
}

// checkRebaseHistory refuses a history that cannot precede an empty log
// at base.
func checkRebaseHistory(base uint64, epochs []EpochStart) error {
	for i, start := range epochs {
		if start.FirstOffset >= base {
			return fmt.Errorf("%w: epoch %d starts at %d, not below the base %d", ErrOutOfRange, start.Epoch, start.FirstOffset, base)
		}
		if i > 0 && (start.Epoch <= epochs[i-1].Epoch || start.FirstOffset <= epochs[i-1].FirstOffset) {
			return fmt.Errorf("%w: epoch history entry %d out of order", ErrOutOfRange, i)
		}
	}
	return nil
}

// rebase is Rebase on the writer.
func (w *writer) rebase(base uint64, epochs []EpochStart) error {
	if err := checkRebaseHistory(base, epochs); err != nil {
		return err
	}
	if w.flush(); w.latched {
		return w.l.latchError()
	}
	if w.awaitSync(); w.latched {
		return w.l.latchError()
	}
	if err := w.rebaseFiles(base, epochs); err != nil {
		w.becomeLatched(fmt.Errorf("rebase to %d: %w", base, err))
		return w.l.latchError()
	}
	return nil
}

// rebaseFiles carries out a live rebase and resets the writer's state.
func (w *writer) rebaseFiles(base uint64, epochs []EpochStart) error {
	l := w.l
	l.retentionMu.Lock()
	defer l.retentionMu.Unlock()
	if err := writeSmallFile(l.fs, l.dir, rebaseFileName, encodeRebase(base, epochs)); err != nil {
		return err
	}
	incarnation, err := bumpIncarnation(l.fs, l.dir, func() int64 { return l.clock().UnixNano() })
	if err != nil {
		return err
	}
	l.incarnation.Store(incarnation)
	w.closeFiles()
	l.segmentsMu.Lock()
	old := l.segments
	bases := make([]uint64, len(old))
	for i, seg := range old {
		bases[i] = seg.base
	}
	recovered, err := carryOutRebase(l.fs, l.dir, bases, base)
	if err == nil {
		closeSegments(old)
		l.segments = recovered.segments
		l.segments[0].useFiles(&l.budget.files, l.fs)
		l.firstOffset.Store(base)
	}
	l.segmentsMu.Unlock()
	if err != nil {
		return err
	}
	w.active, w.next, w.lastEntryPosition = l.segments[0], base, 0
	w.pieces, w.groupBytes, w.pendingEntries = w.pieces[:0], 0, w.pendingEntries[:0]
	w.indexDirty, w.dirDirty = false, false
	if err := w.openActiveFiles(); err != nil {
		return err
	}
	w.writtenBytes = w.stagedBytes
	l.cache.restartAt(base)
	l.frontiers.reset(base, w.stagedBytes)
	l.epochMu.Lock()
	l.epochs = append([]EpochStart(nil), epochs...)
	l.epochMu.Unlock()
	w.lastEpoch, w.epochSeen = l.lastEpoch()
	for _, request := range w.fsyncWaiters {
		request.complete(l, fmt.Errorf("%w: the log restarted empty at %d", ErrTruncated, base))
	}
	clear(w.fsyncWaiters)
	w.fsyncWaiters = w.fsyncWaiters[:0]
	return finishRebase(l.fs, l.dir, l.durableEnd, base, epochs)
}

// carryOutRebase removes every segment in bases, highest first, and
// creates an empty one at base, durably (Open and the live rebase).
func carryOutRebase(fs vfs.FS, dir string, bases []uint64, base uint64) (recoveredSegments, error) {
	for i := len(bases) - 1; i >= 0; i-- {
		if err := removeSegmentFiles(fs, dir, bases[i]); err != nil {
			return recoveredSegments{}, err
		}
	}
	if err := fs.SyncDir(dir); err != nil {
		return recoveredSegments{}, err
	}
	return createFirstSegment(fs, dir, base)
}

// finishRebase records the new history and durable end, then removes
// rebase.pending.
func finishRebase(fs vfs.FS, dir string, durableEnd *durableEndRecord, base uint64, epochs []EpochStart) error {
	if err := writeSmallFile(fs, dir, epochsFileName, encodeEpochs(epochs)); err != nil {
		return err
	}
	if durableEnd != nil {
		if err := durableEnd.recordDurably(base); err != nil {
			return err
		}
	}
	return removeSmallFile(fs, dir, rebaseFileName)
}

func encodeRebase(base uint64, epochs []EpochStart) []byte {
	return append(encodeUint64(base), encodeEpochs(epochs)...)
}

func decodeRebase(payload []byte) (uint64, []EpochStart, error) {
	if len(payload) < 8 {
		return 0, nil, fmt.Errorf("%w: %s is truncated", ErrCorrupt, rebaseFileName)
	}
	epochs, err := decodeEpochs(payload[8:])
	if err != nil {
		return 0, nil, err
	}
	base := binary.LittleEndian.Uint64(payload[:8])
	if err := checkRebaseHistory(base, epochs); err != nil {
		return 0, nil, errors.Join(ErrCorrupt, err)
	}
	return base, epochs, nil
}

// readRebaseFile returns a pending rebase, if any.
func readRebaseFile(fs vfs.FS, dir string) (base uint64, epochs []EpochStart, pending bool, err error) {
	payload, exists, err := readSmallFile(fs, dir, rebaseFileName)
	if err != nil || !exists {
		return 0, nil, false, err
	}
	base, epochs, err = decodeRebase(payload)
	return base, epochs, err == nil, err
}
