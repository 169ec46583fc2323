package queue

// The seams between the queue and its log: the small interface the queue
// uses (so tests can drive it with a log whose frontiers they control), the
// completion inbox that log goroutines write to, and the adapters recovery
// and checkpoints read the log through.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fibrilmq/fibril/storage/log"
)

// Log is what a Queue needs from its partition log. *log.Log opened with
// log.Open implements it, and Open uses that unless WithLogOpener names
// another opener: a caller that drives its log in direct mode
// (log.OpenDirect) from a goroutine of its own gives the queue a seam that
// hands every append, sync and close to that goroutine, in order.
//
// The queue calls AppendAsync, Append, Sync, TruncateBefore and Close from
// its owner's goroutine (Append and Sync also while Open recovers, on the
// goroutine that calls Open), and Sync from checkpoint tasks; the reads
// (Frontiers, Status, scans, FirstOffset, EpochHistory) from either. An
// implementation must assign offsets in the order the appends were made,
// call every done exactly once, and report a refusal either up front (the
// append is not made) or through done. The queue predicts offsets, so an
// append refused through done must be followed by no append that is made
// (a latched or closed log refuses all of them).
type Log interface {
	Append(ctx context.Context, entries []log.Entry, level log.Durability) (log.Result, error)
	AppendAsync(entries []log.Entry, level log.Durability, done func(log.Result)) error
	Frontiers() log.Frontiers
	ScanWritten(from uint64, maxBytes int, fn func(log.Record) error) (uint64, error)
	ScanDurable(from uint64, maxBytes int, fn func(log.Record) error) (uint64, error)
	Sync(ctx context.Context) error
	Status() log.Status
	FirstOffset() uint64
	TruncateBefore(offset uint64) error
	EpochHistory() []log.EpochStart
	Close() error
}

// partitionLog is the queue's own name for its log seam.
type partitionLog = Log

// ReplicaLog is what a replica needs beyond Log: appending records
// another copy's log encoded, cutting a divergent suffix, and restarting
// empty at a base offset. *log.Log provides all three (the storage/log
// work's AppendEncodedAsync, TruncateAfter and Rebase); the tests implement
// them over the fake log and over an adapter of *log.Log.
//
// AppendEncodedAsync appends records (whole records in the log's on-disk
// encoding, as the owner's ScanEncoded yields them, offsets dense from
// first) byte for byte, after checking every record's CRC, bounds and type,
// that first is the log's staged end and that epochs never decrease. A
// batch that fails its own checks is refused up front; the checks against
// the log come through done; either way nothing of a refused batch is
// appended. The queue never interprets records itself: it applies them by
// reading them back.
type ReplicaLog interface {
	Log
	AppendEncodedAsync(records []byte, first uint64, level log.Durability, done func(log.Result)) error
	TruncateAfter(offset uint64) error
	Rebase(base uint64, epochs []log.EpochStart) error
}

// replicaLog is the queue's own name for a replica's log seam.
type replicaLog = ReplicaLog

// LogOpener opens (creating when needed) and recovers the partition log in
// dir with opts, as log.Open does. The queue owns what it returns: it
// closes it on a failed open and in Close.
type LogOpener func(dir string, opts log.Options) (Log, error)

// OpenOption changes how Open, OpenOwner and OpenReplica open a queue.
type OpenOption func(*openConfig)

type openConfig struct {
	openLog LogOpener
}

// WithLogOpener opens the queue's log with open instead of log.Open.
func WithLogOpener(open LogOpener) OpenOption {
	return func(config *openConfig) { config.openLog = open }
}

// openStandalone is the default LogOpener.
func openStandalone(dir string, opts log.Options) (Log, error) {
	l, err := log.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// completionInbox receives append completions on log goroutines. It keeps
// only the first failure: the queue applies by frontier, so a successful
// completion carries nothing but a wake-up.
type completionInbox struct {
	mu     sync.Mutex
	err    error
	notify func()
}

// done returns the completion callback of an append predicted at first.
func (b *completionInbox) done(first uint64) func(log.Result) {
	return func(result log.Result) {
		b.mu.Lock()
		if b.err == nil && result.Err != nil {
			b.err = result.Err
		} else if b.err == nil && result.First != first {
			b.err = fmt.Errorf("%w: predicted %d, assigned %d", ErrLogContract, first, result.First)
		}
		notify := b.notify
		b.mu.Unlock()
		if notify != nil {
			notify()
		}
	}
}

// wake calls the notify function (from a log goroutine).
func (b *completionInbox) wake() {
	b.mu.Lock()
	notify := b.notify
	b.mu.Unlock()
	if notify != nil {
		notify()
	}
}

func (b *completionInbox) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *completionInbox) setNotify(fn func()) {
	b.mu.Lock()
	b.notify = fn
	b.mu.Unlock()
}

// scanBudgetBytes is the body budget of one log scan call.
const scanBudgetBytes = 64 << 10

// logSource lets recovery read the durable log.
type logSource struct{ log partitionLog }

func (s logSource) firstOffset() uint64 { return s.log.FirstOffset() }
func (s logSource) durableNext() uint64 { return s.log.Frontiers().Durable }

func (s logSource) scan(from uint64, fn func(offset uint64, kind uint8, body []byte) error) error {
	end := s.durableNext()
	for from < end {
		next, err := s.log.ScanDurable(from, scanBudgetBytes, func(r log.Record) error {
			return fn(r.Offset, r.Type, r.Body)
		})
		if err != nil {
			return err
		}
		if next == from {
			return fmt.Errorf("queue: log scan made no progress at %d", from)
		}
		from = next
	}
	return nil
}

// logBarrier lets a checkpoint make the log durable.
type logBarrier struct{ log partitionLog }

func (b logBarrier) durableNext() uint64            { return b.log.Frontiers().Durable }
func (b logBarrier) sync(ctx context.Context) error { return b.log.Sync(ctx) }

// readRecords calls fn with the epoch and full decoding of each publish
// record at offsets (sorted, unique), reading below the written frontier.
// It scans runs of nearby offsets in one pass and jumps over long gaps.
func readRecords(l partitionLog, offsets []uint64, fn func(offset, epoch uint64, rec *Record)) error {
	const gapRecords = 256
	var rec Record
	for i := 0; i < len(offsets); {
		start := offsets[i]
		_, err := l.ScanWritten(start, scanBudgetBytes, func(r log.Record) error {
			switch {
			case i >= len(offsets):
				return errStopScan
			case r.Offset < offsets[i]:
				if offsets[i]-r.Offset > gapRecords {
					return errStopScan
				}
				return nil
			case r.Offset > offsets[i]:
				return fmt.Errorf("queue: record %d missing from the log", offsets[i])
			}
			if err := decodeRecord(r.Type, r.Body, &rec, true); err != nil || rec.Kind != KindPublish {
				return fmt.Errorf("queue: record %d is not a publish: %v %w", r.Offset, rec.Kind, err)
			}
			fn(r.Offset, r.Epoch, &rec)
			i++
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return err
		}
		if i < len(offsets) && offsets[i] == start {
			return fmt.Errorf("queue: record %d not readable below the written frontier", start)
		}
	}
	return nil
}

// validRecordType is the log's type check for queue logs.
func validRecordType(recordType uint8) bool {
	return recordType >= uint8(KindPublish) && recordType <= uint8(kindLast)
}
