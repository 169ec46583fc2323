package log

// frontierState holds the three progress offsets and their watchers.
//
//	staged  = offset after the last record accepted into the staging buffer
//	written = offset after the last record handed to the OS with write(2)
//	durable = offset after the last record covered by a completed fdatasync
//
// Invariant: durable <= written <= staged, checked on every change.
//
// The writer goroutine advances staged and written; the syncer advances
// durable. They only ever move forward, except at a latch (written and
// staged drop to durable) and at a suffix cut (all three move to the cut),
// and both of those run on the writer while no sync is in flight. Byte
// positions (cumulative bytes since Open) ride along for the lag report.

import "sync"

type frontierState struct {
	mu           sync.Mutex
	staged       uint64
	written      uint64
	durable      uint64
	writtenBytes int64
	durableBytes int64
	watchers     [frontierKinds]map[*Watch]struct{}
}

func (f *frontierState) snapshot() Frontiers {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Frontiers{Staged: f.staged, Written: f.written, Durable: f.durable}
}

func (f *frontierState) lag() (records uint64, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written - f.durable, f.writtenBytes - f.durableBytes
}

func (f *frontierState) checkLocked() {
	if !(f.durable <= f.written && f.written <= f.staged) {
		panic("log: frontier invariant broken: durable <= written <= staged")
	}
}

func (f *frontierState) advanceStaged(next uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if next <= f.staged {
		return
	}
	f.staged = next
	f.checkLocked()
	f.notifyLocked(FrontierStaged)
}

// advanceWrittenFrom moves staged (when a flush inside a request wrote
// its first part) and written forward together and returns durable, all
// under one lock: the writer's per-flush update.
func (f *frontierState) advanceWrittenFrom(next uint64, bytes int64) (durable uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if next > f.staged {
		f.staged = next
		f.notifyLocked(FrontierStaged)
	}
	if next > f.written {
		f.written, f.writtenBytes = next, bytes
		f.notifyLocked(FrontierWritten)
	}
	f.checkLocked()
	return f.durable
}

func (f *frontierState) advanceDurable(next uint64, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if next <= f.durable {
		return
	}
	f.durable, f.durableBytes = next, bytes
	f.checkLocked()
	f.notifyLocked(FrontierDurable)
}

// dropToDurable moves staged and written back to durable (the latch).
func (f *frontierState) dropToDurable() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.staged, f.written, f.writtenBytes = f.durable, f.durable, f.durableBytes
	f.notifyAllLocked()
}

// reset sets all three frontiers to next (open and suffix cut).
func (f *frontierState) reset(next uint64, bytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.staged, f.written, f.durable = next, next, next
	f.writtenBytes, f.durableBytes = bytes, bytes
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
