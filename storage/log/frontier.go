package log

// frontierState holds the three progress offsets and their watchers.
//
//	staged  = offset after the last record accepted into the staging buffer
//	written = offset after the last record handed to the OS with write(2)
//	durable = offset after the last record covered by a completed fdatasync
//
// Invariant: durable <= written <= staged, checked on every change.
//
// The writer goroutine advances staged and written; the syncer reports
// sync outcomes, and durableLedger (below) alone decides how far durable
// moves. All three only ever move forward, except at a latch (written and
// staged drop to durable) and at a suffix cut (all three move to the cut),
// and both of those run on the writer while no sync is in flight. Once the
// log is latched nothing advances any more: every later advance is refused
// under the same lock that records the latch, so an append reported done
// reached its level before the latch. Byte positions (cumulative bytes
// since Open) ride along for the lag report.

import "sync"

type frontierState struct {
	mu           sync.Mutex
	staged       uint64
	written      uint64
	writtenBytes int64
	ledger       durableLedger // durable_next and the rules that move it
	latchState   *latchState   // set with ledger.latched, at the freeze
	latchErr     error         // the error appends get, once the latch is published
	watchers     [frontierKinds]map[*Watch]struct{}
}

// latchState is one latch of a log: created when the frontiers freeze,
// final (err set, done closed) once the cut has been recorded or could not
// be. Whoever did not freeze the frontiers waits on done for the error.
type latchState struct {
	done chan struct{}
	err  error
}

// segmentSync is what one successful sync made durable: the records
// [base, next) of the segment whose first offset is base, next being the
// offset after the last record written to that segment before the sync
// began, and bytes the cumulative written bytes at next. A sync of one
// segment says nothing about any other.
type segmentSync struct {
	base, next uint64
	bytes      int64
}

// durableLedger turns sync outcomes into durable_next. It is plain data,
// used under frontierState's lock and driven directly by tests.
//
// Rules:
//   - durable_next moves to a sync's next only when the sync's segment
//     starts at or below durable_next, that is when every segment below it
//     is already covered by successful syncs. A sync of a later segment
//     that completes first waits in pending until the segments below it
//     are covered (the writer never lets that happen, since it syncs a
//     segment to its end before it creates the next, but the ledger does
//     not rely on it).
//   - After the latch nothing moves durable_next. A failed sync may have
//     dropped dirty pages that the kernel reports lost only once, so a sync
//     of the same file that completes later can succeed without having
//     written them: its success proves nothing. durable_next at the latch
//     is the cut.
//
// Invariant: durable never decreases between resets; every pending entry
// has base > durable, at most one per segment, at most maxPendingSyncs.
type durableLedger struct {
	durable      uint64
	durableBytes int64
	latched      bool
	pending      []segmentSync
}

// maxPendingSyncs bounds the out-of-order syncs the ledger keeps. The
// writer has at most one sync outstanding, so more is a broken invariant.
const maxPendingSyncs = 4

// apply records a successful sync. It reports whether durable_next moved;
// a latched ledger refuses every sync.
func (d *durableLedger) apply(done segmentSync) (advanced bool) {
	if d.latched {
		return false
	}
	if done.next < done.base {
		panic("log: a sync covering a negative range")
	}
	if done.base > d.durable {
		d.keepPending(done)
		return false
	}
	before := d.durable
	d.advanceTo(done)
	for d.applyPending() {
	}
	return d.durable > before
}

func (d *durableLedger) advanceTo(done segmentSync) {
	if done.next > d.durable {
		d.durable, d.durableBytes = done.next, done.bytes
	}
}

// keepPending remembers a sync of a segment above durable_next.
func (d *durableLedger) keepPending(done segmentSync) {
	for i := range d.pending {
		if d.pending[i].base == done.base {
			if done.next > d.pending[i].next {
				d.pending[i] = done
			}
			return
		}
	}
	if len(d.pending) >= maxPendingSyncs {
		panic("log: more out-of-order syncs than the writer ever has outstanding")
	}
	d.pending = append(d.pending, done)
}

// applyPending applies one pending sync that durable_next now reaches,
// dropping those it has passed; it reports whether it applied one.
func (d *durableLedger) applyPending() bool {
	for i, done := range d.pending {
		if done.base <= d.durable {
			d.pending = append(d.pending[:i], d.pending[i+1:]...)
			d.advanceTo(done)
			return true
		}
	}
	return false
}

// latch freezes durable_next and returns it: the cut.
func (d *durableLedger) latch() (cut uint64) {
	d.latched = true
	d.pending = nil
	return d.durable
}

// reset starts over at next (open and suffix cut).
func (d *durableLedger) reset(next uint64, bytes int64) {
	if d.latched {
		panic("log: frontiers reset on a latched log")
	}
	d.durable, d.durableBytes, d.pending = next, bytes, nil
}

func (f *frontierState) snapshot() Frontiers {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Frontiers{Staged: f.staged, Written: f.written, Durable: f.ledger.durable}
}

func (f *frontierState) lag() (records uint64, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written - f.ledger.durable, f.writtenBytes - f.ledger.durableBytes
}

func (f *frontierState) checkLocked() {
	if !(f.ledger.durable <= f.written && f.written <= f.staged) {
		panic("log: frontier invariant broken: durable <= written <= staged")
	}
}

// advanceStaged publishes staged_next; it returns false, moving nothing,
// on a latched log.
func (f *frontierState) advanceStaged(next uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledger.latched {
		return false
	}
	if next > f.staged {
		f.staged = next
		f.checkLocked()
		f.notifyLocked(FrontierStaged)
	}
	return true
}

// advanceWrittenFrom moves staged (when a flush inside a request wrote
// its first part) and written forward together and returns durable, all
// under one lock: the writer's per-flush update. On a latched log it moves
// nothing and returns ok false.
func (f *frontierState) advanceWrittenFrom(next uint64, bytes int64) (durable uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledger.latched {
		return f.ledger.durable, false
	}
	if next > f.staged {
		f.staged = next
		f.notifyLocked(FrontierStaged)
	}
	if next > f.written {
		f.written, f.writtenBytes = next, bytes
		f.notifyLocked(FrontierWritten)
	}
	f.checkLocked()
	return f.ledger.durable, true
}

// applySync records a successful sync (see durableLedger) and returns
// durable_next afterwards; ok is false when the log is latched, and then
// the sync confirms nothing.
func (f *frontierState) applySync(done segmentSync) (durable uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledger.latched {
		return f.ledger.durable, false
	}
	if done.next > f.written {
		panic("log: a sync covering records that were never written")
	}
	if f.ledger.apply(done) {
		f.checkLocked()
		f.notifyLocked(FrontierDurable)
	}
	return f.ledger.durable, true
}

// freeze latches the frontiers (see durableLedger): from now on no
// frontier advances. It returns the log's latch state, durable_next (the
// cut) and whether this call froze them; watchers are woken only when the
// latch is published, once its error is final.
func (f *frontierState) freeze() (state *latchState, cut uint64, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.latchState != nil {
		return f.latchState, f.ledger.durable, false
	}
	f.ledger.latch()
	f.latchState = &latchState{done: make(chan struct{})}
	return f.latchState, f.ledger.durable, true
}

// publishLatch records the final latch error, drops staged_next and
// written_next to durable_next (nothing advances after the freeze, so
// this is final) and wakes every watcher: whoever sees the latch sees the
// frontiers it left, never a written frontier above the cut.
func (f *frontierState) publishLatch(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.latchState == nil || err == nil {
		panic("log: latch published without a freeze or an error")
	}
	f.latchErr = err
	f.staged, f.written, f.writtenBytes = f.ledger.durable, f.ledger.durable, f.ledger.durableBytes
	f.notifyAllLocked()
}

// latchError returns the published latch error, or nil.
func (f *frontierState) latchError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latchErr
}

// currentLatch returns the latch state, or nil before the freeze.
func (f *frontierState) currentLatch() *latchState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latchState
}

// durableBytes is the cumulative written bytes at durable_next.
func (f *frontierState) durableBytes() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ledger.durableBytes
}

// dropToDurable moves staged and written back to durable (the latch, once
// no sync is in flight).
func (f *frontierState) dropToDurable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ledger.latched {
		panic("log: frontiers dropped on a log that is not latched")
	}
	f.staged, f.written, f.writtenBytes = f.ledger.durable, f.ledger.durable, f.ledger.durableBytes
	f.notifyAllLocked()
}

// reset sets all three frontiers to next (open and suffix cut).
func (f *frontierState) reset(next uint64, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ledger.reset(next, bytes)
	f.staged, f.written = next, next
	f.writtenBytes = bytes
	f.notifyAllLocked()
}

func (f *frontierState) notifyAllLocked() {
	for kind := FrontierKind(0); kind < frontierKinds; kind++ {
		f.notifyLocked(kind)
	}
}

func (f *frontierState) notifyLocked(kind FrontierKind) {
	for watch := range f.watchers[kind] {
		select {
		case watch.c <- struct{}{}:
		default: // a wake is already pending; the watcher will read the latest value
		}
	}
}

// Watch wakes its channel whenever its frontier advances, and when the log
// latches, is cut or closes. The channel has capacity 1 and the log never
// blocks on it: several advances may fold into one wake. To wait without
// missing an advance, create the watch first, then read Frontiers, then
// wait on C. A Watch holds no goroutine; Close unsubscribes.
type Watch struct {
	state *frontierState
	kind  FrontierKind
	c     chan struct{}
}

func (f *frontierState) watch(kind FrontierKind) *Watch {
	if kind >= frontierKinds {
		panic("log: unknown frontier kind")
	}
	watch := &Watch{state: f, kind: kind, c: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watchers[kind] == nil {
		f.watchers[kind] = map[*Watch]struct{}{}
	}
	f.watchers[kind][watch] = struct{}{}
	if f.latchErr != nil {
		watch.c <- struct{}{} // the latch already happened: wake at once
	}
	return watch
}

// C is the wake channel.
func (w *Watch) C() <-chan struct{} { return w.c }

// Close unsubscribes; it is safe to call more than once.
func (w *Watch) Close() {
	w.state.mu.Lock()
	defer w.state.mu.Unlock()
	delete(w.state.watchers[w.kind], w)
}

// wakeAll wakes every watcher (used at close).
func (f *frontierState) wakeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notifyAllLocked()
}
