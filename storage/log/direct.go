package log

// Direct mode: one caller goroutine drives the log. OpenDirect returns the
// log and its Appender; there is no writer goroutine, no inbox and no
// ticker, only the log's sync goroutine, which runs every fdatasync. The
// appender's owner (a log-writer actor, say) calls every Appender method
// from one goroutine, and turns the log's wake-ups (Options.SyncDone) into
// messages to itself:
//
//	Stage(entries, level, done)  assign offsets and encode into the staging
//	                             buffer (the tail cache); no I/O unless the
//	                             group is full or the segment rolls over
//	Flush()                      write the staged group, one write(2) per
//	                             contiguous span; written_next advances,
//	                             AfterFlush waiters complete, AfterFsync
//	                             waiters queue for the next sync, which is
//	                             submitted when none is outstanding
//	SyncFinished()               on SyncDone's message: apply the finished
//	                             sync (durable_next advances, AfterFsync
//	                             waiters complete) and submit the next one
//	SyncDue(), MaybeSync(now)    background sync: when to arm a timer, and
//	                             the decision when it fires
//
// The rules are the standalone writer's, by the same code (writer.go,
// syncer.go): group commit (AfterFsync waiters that arrive while a sync
// runs form the next one), at most one sync outstanding, background sync
// when written > durable and the interval has passed since the last sync
// started (merging with AfterFsync requests), the per-segment rules that
// move durable_next, rollover, and the failure latch.
//
// Ordering and threading promises:
//
//   - every done callback runs exactly once, on the appender's goroutine,
//     from within Stage (AfterWrite, or a failure while staging), Flush,
//     SyncFinished, MaybeSync, TruncateAfter or Close;
//   - fdatasync never runs on the appender's goroutine in the common path:
//     syncs run on the sync goroutine, and a failed sync latches the log
//     and records the cut there too. The appender's goroutine waits for
//     the sync goroutine, without running an fsync itself, only at
//     rollover (once per segment: the outgoing segment is synced to its
//     end before the next is created) and when a write fails while a sync
//     is outstanding. TruncateAfter and Close run their syncs on the
//     appender's goroutine, as they do on the standalone writer;
//   - an idle log needs no timer: SyncDue reports false unless records are
//     staged or written beyond durable_next and no sync is outstanding.
//
// Reads (Scan*, Frontiers, Watch, Status, EpochHistory) and TruncateBefore
// work from any goroutine, as in standalone mode. Log.Append, AppendAsync,
// Sync, TruncateAfter and Close return ErrDirectMode; Tick does nothing.

import (
	"errors"
	"time"
)

// Appender drives a log opened with OpenDirect; see the file comment. All
// its methods must be called from one goroutine.
type Appender struct {
	l *Log
	w *writer
}

// OpenDirect opens (creating when needed) and recovers the log in dir, like
// Open, in direct mode. opts.SyncDone is required.
func OpenDirect(dir string, opts Options) (*Log, *Appender, error) {
	if opts.SyncDone == nil {
		return nil, nil, errors.New("log: OpenDirect needs Options.SyncDone")
	}
	l, w, err := open(dir, opts, true)
	if err != nil {
		return nil, nil, err
	}
	return l, &Appender{l: l, w: w}, nil
}

// Log is the appender's log.
func (a *Appender) Log() *Log { return a.l }

// Stage assigns the entries their offsets, [Result.First, Result.Next),
// and stages them at level. It returns an error, and never calls done,
// when the append is refused up front: invalid, too large, closed,
// latched (ErrLatched), or an epoch below the log's last
// (ErrEpochRegression). Otherwise done is called exactly once, on this
// goroutine, when level is reached or the append failed; it may be called
// before Stage returns. An empty entries slice at AfterFsync is a sync
// request: done is called once everything staged before it is durable.
// The entries' bodies may be reused as soon as Stage returns.
func (a *Appender) Stage(entries []Entry, level Durability, done func(Result)) (Result, error) {
	if done == nil {
		panic("log: Stage needs a done callback")
	}
	if err := validateAppend(entries, level, a.l.opts.MaxRecordBytes); err != nil {
		return Result{}, err
	}
	if err := a.refusal(); err != nil {
		return Result{}, err
	}
	if err := a.w.checkEpochs(entries); err != nil {
		return Result{}, err
	}
	request := a.l.requestPool.Get().(*appendRequest)
	request.kind, request.entries, request.level, request.done = messageAppend, entries, level, done
	first := a.w.next
	a.w.stageRequest(request) // may complete and recycle request
	return Result{First: first, Next: a.w.next}, nil
}

// refusal is the error a new append gets now, or nil.
func (a *Appender) refusal() error {
	switch {
	case a.l.closed:
		return ErrClosed
	case a.w.latched:
		return a.l.latchError()
	case a.l.latchBegun():
		a.w.becomeLatched(nil) // latched by the sync goroutine or retention
		return a.l.latchError()
	}
	return nil
}

// Flush writes the staged group and settles what that completes; see the
// file comment. It does nothing on a latched or closed log.
func (a *Appender) Flush() {
	if !a.l.closed {
		a.w.flush()
	}
}

// SyncFinished applies a finished sync, if one has finished, completes the
// waiters it made durable, completes a latch another goroutine began, and
// writes and submits what is owed (the next group commit). Call it on
// every SyncDone wake-up; an extra call does nothing.
func (a *Appender) SyncFinished() {
	if a.l.closed {
		return
	}
	w := a.w
	if w.syncInFlight {
		select {
		case outcome := <-a.l.syncDone:
			w.handleSyncOutcome(outcome)
		default:
		}
	}
	if !w.latched && a.l.latchBegun() {
		w.becomeLatched(nil)
	}
	w.flush()
}

// SyncDue reports when a background sync is due, and false when none is:
// background sync is off, the log is latched or closed, a sync is already
// outstanding (SyncFinished will follow), or nothing is staged or written
// beyond durable_next. An owner arms one timer for the time returned and
// calls MaybeSync when it fires, and asks again after Flush and
// SyncFinished; an idle log needs no timer.
func (a *Appender) SyncDue() (time.Time, bool) {
	w := a.w
	interval := a.l.syncInterval()
	if interval <= 0 || w.latched || w.syncInFlight || a.l.closed {
		return time.Time{}, false
	}
	if w.next <= a.l.frontiers.snapshot().Durable {
		return time.Time{}, false
	}
	return w.lastSyncStart.Add(interval), true
}

// MaybeSync writes what is staged and starts a background sync if one is
// due at now (the same decision as the standalone log's ticks).
func (a *Appender) MaybeSync(now time.Time) {
	if a.l.closed {
		return
	}
	a.w.flush()
	a.w.maybeBackgroundSync(now)
}

// TruncateAfter removes every record at or after offset, as
// Log.TruncateAfter does, on this goroutine; it waits for an outstanding
// sync first.
func (a *Appender) TruncateAfter(offset uint64) error {
	if a.l.closed {
		return ErrClosed
	}
	return a.w.handleControl(&appendRequest{kind: messageControl, control: controlTruncateAfter, offset: offset})
}

// Close writes and syncs everything staged (completing every waiter),
// stops the sync goroutine and closes the files.
func (a *Appender) Close() error {
	if !a.l.beginClose() {
		return ErrClosed
	}
	err := a.w.close()
	a.l.finishClose()
	return err
}
