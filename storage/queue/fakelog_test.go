package queue

// fakeLog is an in-memory partitionLog whose frontiers move only when the
// test says so (flush: staged records become written; sync: written become
// durable), so the queue can be driven step by step. A process crash keeps
// written records; a power loss keeps a random prefix between durable and
// written. Records are grouped in 8-offset "segments" for TruncateBefore.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
	// latchOnScan, when set, latches the log at the next scan with this
	// cause, as a failed sync does on another goroutine: written drops to
	// durable, what was not durable is cut, and the scan finds nothing.
	latchOnScan error
	latched     error
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
	if f.latchOnScan != nil {
		f.latched, f.latchOnScan = f.latchOnScan, nil
		f.records = f.records[:f.durable-f.base]
		f.written = f.durable
		limit = min(limit, f.durable)
	}
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
	f.mu.Lock()
	latched := f.latched
	f.mu.Unlock()
	return log.Status{Frontiers: fr, FirstOffset: f.FirstOffset(), DurableLagRecords: fr.Written - fr.Durable,
		Latched: latched != nil, LastError: latched}
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

// The tests' stand-in for the log's encoded record format (replication
// ships whole records; the queue never looks inside): per record
// offset u64 | epoch u64 | type u8 | body length uvarint | body | crc32c u32
// of everything before it in the record, all little-endian.
func encodeForTest(records []log.Record) []byte {
	var out []byte
	for _, r := range records {
		start := len(out)
		out = binary.LittleEndian.AppendUint64(out, r.Offset)
		out = binary.LittleEndian.AppendUint64(out, r.Epoch)
		out = append(out, r.Type)
		out = binary.AppendUvarint(out, uint64(len(r.Body)))
		out = append(out, r.Body...)
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(out[start:], castagnoli))
	}
	return out
}

var errEncodedForTest = errors.New("fake: encoded records damaged")

func decodeForTest(encoded []byte) ([]log.Record, error) {
	var out []log.Record
	for len(encoded) > 0 {
		r := reader{buf: encoded}
		rec := log.Record{Offset: r.uint64(), Epoch: r.uint64(), Type: r.byte()}
		rec.Body = append([]byte(nil), r.lengthPrefixed()...)
		if r.err != nil || len(r.buf) < 4 {
			return nil, errEncodedForTest
		}
		size := len(encoded) - len(r.buf)
		if crc32.Checksum(encoded[:size], castagnoli) != binary.LittleEndian.Uint32(r.buf) {
			return nil, errEncodedForTest
		}
		out = append(out, rec)
		encoded = encoded[size+4:]
	}
	return out, nil
}

// checkEncoded refuses what the log's AppendEncoded refuses: damage, a
// first offset other than the log's end, a gap, an epoch regression.
func checkEncoded(first, end, lastEpoch uint64, records []log.Record) error {
	if first != end {
		return fmt.Errorf("fake: encoded records start at %d, log ends at %d", first, end)
	}
	for i, r := range records {
		if r.Offset != first+uint64(i) {
			return fmt.Errorf("fake: encoded record %d has offset %d", first+uint64(i), r.Offset)
		}
		if r.Epoch < lastEpoch {
			return fmt.Errorf("fake: %w", log.ErrEpochRegression)
		}
		lastEpoch = r.Epoch
	}
	return nil
}

func (f *fakeLog) AppendEncodedAsync(encoded []byte, first uint64, level log.Durability, done func(log.Result)) error {
	records, err := decodeForTest(encoded)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return log.ErrClosed
	}
	lastEpoch := uint64(0)
	if n := len(f.records); n > 0 {
		lastEpoch = f.records[n-1].Epoch
	}
	if err := checkEncoded(first, f.end(), lastEpoch, records); err != nil {
		return err
	}
	f.records = append(f.records, records...)
	f.waiters = append(f.waiters, fakeWaiter{log.Result{First: first, Next: f.end()}, level, done})
	return nil
}

// TruncateAfter removes every record at or after offset; what remains is
// durable, and appends waiting for removed records fail.
func (f *fakeLog) TruncateAfter(offset uint64) error {
	f.mu.Lock()
	if offset >= f.end() {
		f.mu.Unlock()
		return nil
	}
	if offset < f.base {
		f.mu.Unlock()
		return fmt.Errorf("fake: %w: cut %d below %d", log.ErrOutOfRange, offset, f.base)
	}
	f.records = f.records[:offset-f.base]
	f.written, f.durable = offset, offset
	var failed []fakeWaiter
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.result.Next > offset {
			failed = append(failed, w)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
	f.mu.Unlock()
	for _, w := range failed {
		w.done(log.Result{First: w.result.First, Next: w.result.Next, Err: log.ErrTruncated})
	}
	f.completeReached()
	return nil
}

// Rebase empties the log and restarts it at base.
func (f *fakeLog) Rebase(base uint64, _ []log.EpochStart) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiters) > 0 {
		return errors.New("fake: rebase with appends in flight")
	}
	f.records, f.base, f.written, f.durable = nil, base, base, base
	return nil
}

// recordsBetween returns copies of the records [from, to).
func (f *fakeLog) recordsBetween(from, to uint64) []log.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]log.Record, 0, to-from)
	for o := from; o < to; o++ {
		r := f.records[o-f.base]
		r.Body = append([]byte(nil), r.Body...)
		out = append(out, r)
	}
	return out
}
