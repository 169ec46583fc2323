package actors

// logHandle is a partition's log seam (storage/queue.ReplicaLog) over a log
// opened in direct mode (storage/log.OpenDirect). The log's Appender has
// one owner at a time, and the handle is how everyone else reaches it:
//
//	opening   the goroutine running queue.Open owns the appender: the
//	          handle runs every request at once on the caller's goroutine
//	          and waits for the log's sync goroutine itself (recovery's
//	          sync and the restart lease expiry)
//	attached  from attach on, the log actor owns it (log_writer.go): a
//	          request is put on a bounded list and the actor is kicked
//	          when the list goes from empty to not empty; the actor takes
//	          everything listed, stages it in order and writes the group
//	closing   no request is taken any more (ErrClosed); the owner stages
//	          what is listed and closes the log, which writes and syncs
//	          everything staged and completes every waiter
//	closed    h.closed is closed and closeErr says how it went
//
// Transitions: opening → attached (attach, on the partition's goroutine,
// before it makes any request); opening or attached → closing → closed
// (Close, or the log actor's stop, whichever comes first).
//
// Invariant: requests reach the log in the order they were made, so the
// offsets the log assigns are the ones the queue predicted; every request's
// done (or reply) is called exactly once.
//
// The list, not the actor's mailbox, holds the requests, so a stop (a
// system message, which overtakes user messages) never strands an append
// the queue already made: the owner stages what is listed before it closes.
// Reads (Frontiers, Status, scans, FirstOffset, EpochHistory) and
// TruncateBefore go straight to the log, which allows them from any
// goroutine.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/queue"
)

// logRequestsMax bounds the requests listed for the log actor. The queue
// bounds its appends in flight (log.Options.RequestQueueLength) far below
// this; reaching it is a broken promise upstream, answered with an error
// that fences the queue rather than with unbounded memory.
const logRequestsMax = 1 << 14

// errLogBacklog refuses a request past logRequestsMax.
var errLogBacklog = errors.New("actors: too many requests waiting for the queue's log actor")

type logRequestKind uint8

const (
	requestAppend  logRequestKind = iota + 1 // entries (none at AfterFsync: a sync)
	requestEncoded                           // encoded records at first (a replica's)
	requestControl                           // a function of the appender, answered on reply
	requestClose                             // close the log
)

// logRequest is one thing asked of the log, in order.
type logRequest struct {
	kind    logRequestKind
	entries []log.Entry
	records []byte
	first   uint64
	level   log.Durability
	done    func(log.Result)
	control func(*log.Appender) error
	reply   chan error // capacity 1
}

type logHandle struct {
	l              *log.Log
	appender       *log.Appender // touched only by its owner (see the file comment)
	maxRecordBytes int

	mu       sync.Mutex
	requests []logRequest
	kicked   bool   // the owner has been kicked and not yet found the list empty
	kick     func() // nil while opening
	closing  bool
	// closeCalled: Close was called (the queue's close); later calls
	// return ErrClosed.
	closeCalled bool

	// ownerWake is the attached owner's wake-up for a finished sync; nil
	// while opening, when wake carries it to the goroutine running Open.
	ownerWake atomic.Pointer[func()]
	wake      chan struct{} // capacity 1
	// woken coalesces the attached owner's wake-ups: set when one is sent,
	// cleared by the owner when it takes it.
	woken atomic.Bool

	// appendsPending counts the appends (and syncs) asked of the log whose
	// done has not been called: the owner's disk watch reads it
	// (partition_diskwatch.go), since the direct appender publishes
	// staged_next only as it writes.
	appendsPending atomic.Int64

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

var _ queue.ReplicaLog = (*logHandle)(nil)

// openLogHandle opens the log in dir in direct mode; the handle is in its
// opening state, owned by the calling goroutine.
func openLogHandle(dir string, options log.Options) (*logHandle, error) {
	h := &logHandle{wake: make(chan struct{}, 1), closed: make(chan struct{})}
	options.SyncDone = h.syncDone
	l, appender, err := log.OpenDirect(dir, options)
	if err != nil {
		return nil, err
	}
	h.l, h.appender = l, appender
	h.maxRecordBytes = options.MaxRecordBytes
	if h.maxRecordBytes <= 0 {
		h.maxRecordBytes = log.DefaultMaxRecordBytes
	}
	return h, nil
}

// attach hands the appender to the log actor: kick wakes it for listed
// requests, wake for finished syncs. The caller must be the goroutine that
// makes the queue's requests, before it makes any.
func (h *logHandle) attach(kick, wake func()) {
	h.mu.Lock()
	h.kick = kick
	h.mu.Unlock()
	h.ownerWake.Store(&wake)
}

// syncDone is the log's Options.SyncDone: it never blocks.
func (h *logHandle) syncDone() {
	if wake := h.ownerWake.Load(); wake != nil {
		(*wake)()
		return
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// AppendsPending says appends or syncs asked of the log wait for it.
func (h *logHandle) AppendsPending() bool { return h.appendsPending.Load() > 0 }

// Log is the log itself, for reads, watches and status.
func (h *logHandle) Log() *log.Log { return h.l }

// submit lists a request for the owner, or runs it at once when the
// caller owns the appender (opening); owned reports which.
func (h *logHandle) submit(request logRequest) (owned bool, err error) {
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return false, log.ErrClosed
	}
	if done := request.done; done != nil {
		h.appendsPending.Add(1)
		request.done = func(result log.Result) {
			h.appendsPending.Add(-1)
			done(result)
		}
	}
	if h.kick == nil {
		h.mu.Unlock()
		h.run(request)
		h.appender.Flush()
		return true, nil
	}
	if len(h.requests) >= logRequestsMax {
		h.mu.Unlock()
		if request.done != nil {
			h.appendsPending.Add(-1) // refused: its done is never called
		}
		return false, errLogBacklog
	}
	h.requests = append(h.requests, request)
	kick := !h.kicked
	h.kicked = true
	h.mu.Unlock()
	if kick {
		h.kick()
	}
	return false, nil
}

// take moves every listed request into into (reused) for the owner. When
// it finds none the owner counts as not kicked: the next request kicks it.
func (h *logHandle) take(into []logRequest) []logRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	into = append(into, h.requests...)
	clear(h.requests)
	h.requests = h.requests[:0]
	if len(into) == 0 {
		h.kicked = false
	}
	return into
}

// run carries out one request on the appender; the owner calls it. A
// refusal is reported through done, as the seam's contract allows. It
// reports whether the request was a close.
func (h *logHandle) run(request logRequest) (closeAsked bool) {
	switch request.kind {
	case requestAppend:
		if _, err := h.appender.Stage(request.entries, request.level, request.done); err != nil {
			request.done(log.Result{Err: err})
		}
	case requestEncoded:
		if _, err := h.appender.StageEncoded(request.records, request.first, request.level, request.done); err != nil {
			request.done(log.Result{Err: err})
		}
	case requestControl:
		h.appender.Flush() // a control follows everything asked before it
		request.reply <- request.control(h.appender)
	case requestClose:
		return true
	default:
		panic(fmt.Sprintf("actors: log request of kind %d", request.kind))
	}
	return false
}

// shutDown closes the log on the owner's behalf: it refuses new requests,
// stages what is listed (controls are answered ErrClosed), and closes the
// log, which writes and syncs it and completes every waiter. It blocks on
// I/O; the log actor runs it on a goroutine the broker counts.
func (h *logHandle) shutDown() {
	h.mu.Lock()
	h.closing = true
	pending := h.requests
	h.requests = nil
	h.mu.Unlock()
	for _, request := range pending {
		switch request.kind {
		case requestControl:
			request.reply <- log.ErrClosed
		case requestClose:
		default:
			h.run(request)
		}
	}
	err := h.appender.Close()
	h.closeOnce.Do(func() {
		h.closeErr = err
		close(h.closed)
	})
}

// beginShutDown marks the handle closing and reports whether the caller
// is the first to do so (and so must run shutDown).
func (h *logHandle) beginShutDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.closing = true
	return true
}

// AppendAsync lists an append; see queue.Log. Bodies over the log's limit
// are refused up front (log.ErrTooLarge), as the log would.
func (h *logHandle) AppendAsync(entries []log.Entry, level log.Durability, done func(log.Result)) error {
	for i := range entries {
		if len(entries[i].Body) > h.maxRecordBytes {
			return fmt.Errorf("%w: body of %d bytes, limit %d", log.ErrTooLarge, len(entries[i].Body), h.maxRecordBytes)
		}
	}
	_, err := h.submit(logRequest{kind: requestAppend, entries: entries, level: level, done: done})
	return err
}

// AppendEncodedAsync lists a replica's append of encoded records.
func (h *logHandle) AppendEncodedAsync(records []byte, first uint64, level log.Durability, done func(log.Result)) error {
	_, err := h.submit(logRequest{kind: requestEncoded, records: records, first: first, level: level, done: done})
	return err
}

// Append appends and waits for level.
func (h *logHandle) Append(ctx context.Context, entries []log.Entry, level log.Durability) (log.Result, error) {
	results := make(chan log.Result, 1)
	for i := range entries {
		if len(entries[i].Body) > h.maxRecordBytes {
			return log.Result{}, fmt.Errorf("%w: body of %d bytes, limit %d", log.ErrTooLarge, len(entries[i].Body), h.maxRecordBytes)
		}
	}
	owned, err := h.submit(logRequest{kind: requestAppend, entries: entries, level: level,
		done: func(result log.Result) { results <- result }})
	if err != nil {
		return log.Result{}, err
	}
	if owned {
		result, err := driveUntil(ctx, h, results)
		if err != nil {
			return log.Result{}, err
		}
		return result, result.Err
	}
	select {
	case result := <-results:
		return result, result.Err
	case <-ctx.Done():
		return log.Result{}, ctx.Err()
	case <-h.closed:
		select {
		case result := <-results: // completed by the close
			return result, result.Err
		default:
			return log.Result{}, log.ErrClosed
		}
	}
}

// driveUntil waits for a result on the goroutine that owns the appender
// (opening), settling each finished sync itself.
func driveUntil[T any](ctx context.Context, h *logHandle, results <-chan T) (T, error) {
	for {
		select {
		case result := <-results:
			return result, nil
		default:
		}
		select {
		case result := <-results:
			return result, nil
		case <-h.wake:
			h.appender.SyncFinished()
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

// Sync waits until everything asked before it is durable.
func (h *logHandle) Sync(ctx context.Context) error {
	_, err := h.Append(ctx, nil, log.AfterFsync)
	return err
}

// control runs fn on the appender's owner, after everything asked before
// it, and waits for its answer.
func (h *logHandle) control(fn func(*log.Appender) error) error {
	reply := make(chan error, 1)
	owned, err := h.submit(logRequest{kind: requestControl, control: fn, reply: reply})
	if err != nil {
		return err
	}
	if owned {
		return <-reply
	}
	select {
	case err := <-reply:
		return err
	case <-h.closed:
		select {
		case err := <-reply:
			return err
		default:
			return log.ErrClosed
		}
	}
}

// TruncateAfter cuts every record at or after offset (a replica's
// divergent suffix).
func (h *logHandle) TruncateAfter(offset uint64) error {
	return h.control(func(a *log.Appender) error { return a.TruncateAfter(offset) })
}

// Rebase restarts the log empty at base with epochs as its history.
func (h *logHandle) Rebase(base uint64, epochs []log.EpochStart) error {
	return h.control(func(a *log.Appender) error { return a.Rebase(base, epochs) })
}

// Seal waits until everything asked before it is durable and returns the
// durable end and the history below it (a replica taking over, or an
// owner stepping down).
func (h *logHandle) Seal(ctx context.Context) (log.SealState, error) {
	type sealed struct {
		state log.SealState
		err   error
	}
	results := make(chan sealed, 1)
	h.mu.Lock()
	owned := h.kick == nil
	h.mu.Unlock()
	err := h.control(func(a *log.Appender) error {
		return a.Seal(func(state log.SealState, err error) { results <- sealed{state, err} })
	})
	if err != nil {
		return log.SealState{}, err
	}
	if owned {
		result, err := driveUntil(ctx, h, results)
		if err != nil {
			return log.SealState{}, err
		}
		return result.state, result.err
	}
	select {
	case result := <-results:
		return result.state, result.err
	case <-ctx.Done():
		return log.SealState{}, ctx.Err()
	case <-h.closed:
		select {
		case result := <-results:
			return result.state, result.err
		default:
			return log.SealState{}, log.ErrClosed
		}
	}
}

// Close closes the log: at once when the caller owns the appender (an
// open that failed or was abandoned), otherwise through the log actor,
// waiting until the log is closed (by this request, or by the log actor's
// stop if that came first). The first Close returns how the close went;
// later ones return log.ErrClosed.
func (h *logHandle) Close() error {
	h.mu.Lock()
	attached, again := h.kick != nil, h.closeCalled
	h.closeCalled = true
	h.mu.Unlock()
	if again {
		<-h.closed
		return log.ErrClosed
	}
	if !attached {
		if h.beginShutDown() {
			h.shutDown()
		}
		<-h.closed
		return h.closeErr
	}
	if _, err := h.submit(logRequest{kind: requestClose}); err != nil && !errors.Is(err, log.ErrClosed) {
		return err
	}
	<-h.closed
	return h.closeErr
}

// SetSyncInterval changes the log's background sync interval; the log
// actor reads it at its next SyncDue.
func (h *logHandle) SetSyncInterval(interval time.Duration) { h.l.SetSyncInterval(interval) }

// Reads and retention go to the log, from any goroutine.

func (h *logHandle) Frontiers() log.Frontiers { return h.l.Frontiers() }
func (h *logHandle) Status() log.Status       { return h.l.Status() }
func (h *logHandle) FirstOffset() uint64      { return h.l.FirstOffset() }
func (h *logHandle) EpochHistory() []log.EpochStart {
	return h.l.EpochHistory()
}
func (h *logHandle) TruncateBefore(offset uint64) error { return h.l.TruncateBefore(offset) }
func (h *logHandle) ScanWritten(from uint64, maxBytes int, fn func(log.Record) error) (uint64, error) {
	return h.l.ScanWritten(from, maxBytes, fn)
}
func (h *logHandle) ScanDurable(from uint64, maxBytes int, fn func(log.Record) error) (uint64, error) {
	return h.l.ScanDurable(from, maxBytes, fn)
}
