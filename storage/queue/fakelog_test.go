package queue

// fakeLog is an in-memory partitionLog whose frontiers move only when the
// test says so (flush: staged records become written; sync: written become
// durable), so the queue can be driven step by step. A process crash keeps
// written records; a power loss keeps a random prefix between durable and
// written. Records are grouped in 8-offset "segments" for TruncateBefore.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/fibrilmq/fibril/storage/log"
)

type fakeLog struct {
	mu       sync.Mutex
	base     uint64
	records  []log.Record
	written  uint64
	durable  uint64
	waiters  []fakeWaiter
	closed   bool
	refuse   error // returned by the next AppendAsync
	lastSync int
	levels   map[uint64]log.Durability // level of each append, by its first offset
}

type fakeWaiter struct {
	result log.Result
	level  log.Durability
	done   func(log.Result)
}

const fakeSegmentRecords = 8

func newFakeLog(*rand.Rand) *fakeLog { return &fakeLog{} }

func (f *fakeLog) end() uint64 { return f.base + uint64(len(f.records)) }

func (f *fakeLog) appendLocked(entries []log.Entry) log.Result {
	first := f.end()
	for _, e := range entries {
		f.records = append(f.records, log.Record{Offset: f.end(), Epoch: e.Epoch, Type: e.Type, Body: append([]byte(nil), e.Body...)})
	}
	return log.Result{First: first, Next: f.end()}
}

func (f *fakeLog) AppendAsync(entries []log.Entry, level log.Durability, done func(log.Result)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return log.ErrClosed
	}
	if err := f.refuse; err != nil {
		f.refuse = nil
		return err
	}
	f.noteLevelLocked(level)
	f.waiters = append(f.waiters, fakeWaiter{f.appendLocked(entries), level, done})
	return nil
}

func (f *fakeLog) noteLevelLocked(level log.Durability) {
	if f.levels == nil {
		f.levels = map[uint64]log.Durability{}
	}
	f.levels[f.end()] = level
}

// levelAt is the level of the append that started at first.
func (f *fakeLog) levelAt(first uint64) (log.Durability, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	level, ok := f.levels[first]
	return level, ok
}

func (f *fakeLog) Append(ctx context.Context, entries []log.Entry, level log.Durability) (log.Result, error) {
	f.mu.Lock()
	f.noteLevelLocked(level)
	result := f.appendLocked(entries)
	f.mu.Unlock()
	f.flush()
	f.sync()
	return result, nil
}

// flush makes every staged record written and completes AfterFlush waiters.
func (f *fakeLog) flush() { f.flushTo(f.Frontiers().Staged) }

// flushTo makes records below next written, as a write split by a segment
// rollover can leave part of an append written.
func (f *fakeLog) flushTo(next uint64) {
	f.mu.Lock()
	f.written = max(f.written, min(next, f.end()))
	f.mu.Unlock()
	f.completeReached()
}

// sync makes every written record durable.
func (f *fakeLog) sync() { f.syncTo(f.Frontiers().Written) }

func (f *fakeLog) syncTo(next uint64) {
	f.mu.Lock()
	f.durable = max(f.durable, min(next, f.written))
	f.mu.Unlock()
	f.completeReached()
}

func (f *fakeLog) completeReached() {
	f.mu.Lock()
	var ready []fakeWaiter
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		frontier := f.written
		if w.level == log.AfterFsync {
			frontier = f.durable
		}
		if w.result.Next <= frontier {
			ready = append(ready, w)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
	f.mu.Unlock()
	for _, w := range ready {
		w.done(w.result)
	}
}

func (f *fakeLog) Frontiers() log.Frontiers {
	f.mu.Lock()
	defer f.mu.Unlock()
	return log.Frontiers{Staged: f.end(), Written: f.written, Durable: f.durable}
}

func (f *fakeLog) scan(from, limit uint64, fn func(log.Record) error) (uint64, error) {
	f.mu.Lock()
	if from < f.base {
		f.mu.Unlock()
		return from, fmt.Errorf("%w: %d below %d", log.ErrOutOfRange, from, f.base)
	}
	var chunk []log.Record
	for o := from; o < limit && len(chunk) < 64; o++ {
		chunk = append(chunk, f.records[o-f.base])
	}
	f.mu.Unlock()
	next := from
	for _, r := range chunk {
		if err := fn(r); err != nil {
			return next, err
		}
		next++
	}
	return next, nil
}

func (f *fakeLog) ScanWritten(from uint64, _ int, fn func(log.Record) error) (uint64, error) {
	return f.scan(from, f.Frontiers().Written, fn)
}

func (f *fakeLog) ScanDurable(from uint64, _ int, fn func(log.Record) error) (uint64, error) {
	return f.scan(from, f.Frontiers().Durable, fn)
}

func (f *fakeLog) Sync(context.Context) error {
	f.flush()
	f.sync()
	return nil
}

func (f *fakeLog) Status() log.Status {
	fr := f.Frontiers()
	return log.Status{Frontiers: fr, FirstOffset: f.FirstOffset(), DurableLagRecords: fr.Written - fr.Durable}
}

func (f *fakeLog) FirstOffset() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.base
}

func (f *fakeLog) TruncateBefore(offset uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if offset > f.durable {
		return log.ErrFloorAboveDurable
	}
	floor := offset - offset%fakeSegmentRecords
	if floor <= f.base {
		return nil
	}
	f.records = append([]log.Record(nil), f.records[floor-f.base:]...)
	f.base = floor
	return nil
}

// EpochHistory derives the history from the records, as the real log's
// does: the first offset of every epoch present.
func (f *fakeLog) EpochHistory() []log.EpochStart {
	f.mu.Lock()
	defer f.mu.Unlock()
	var history []log.EpochStart
	for _, r := range f.records {
		if len(history) == 0 || r.Epoch > history[len(history)-1].Epoch {
			history = append(history, log.EpochStart{Epoch: r.Epoch, FirstOffset: r.Offset})
		}
	}
	return history
}

func (f *fakeLog) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("fake log closed twice")
	}
	f.closed = true
	return nil
}

// reopen returns the log a new process finds: records up to cut survive
// and are all durable (recovery syncs the recovered tail).
func (f *fakeLog) reopen(cut uint64, rng *rand.Rand) *fakeLog {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &fakeLog{base: f.base}
	n.records = append([]log.Record(nil), f.records[:cut-f.base]...)
	n.written, n.durable = n.end(), n.end()
	return n
}

// processCrash keeps what was written.
func (f *fakeLog) processCrash(rng *rand.Rand) *fakeLog {
	return f.reopen(f.Frontiers().Written, rng)
}

// powerLoss keeps the durable records and a random prefix of the rest.
func (f *fakeLog) powerLoss(rng *rand.Rand) *fakeLog {
	fr := f.Frontiers()
	return f.reopen(fr.Durable+rng.Uint64N(fr.Written-fr.Durable+1), rng)
}

var errTooLargeForTest = fmt.Errorf("fake: %w", log.ErrTooLarge)
