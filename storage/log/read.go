package log

// Reads. A scan takes the frontier it is bounded by once, at its start,
// and delivers records in offset order below it: from the tail cache when
// the offsets are still cached, otherwise from the segment files through
// each segment's open read descriptor. Cached records are copied out under
// the cache's lock and decoded (CRC checked) after it is released. File
// records are read into the scan's own buffer, checked once there (length,
// CRC, dense offset, and Options.ValidType when set) and delivered from
// it, without a copy: no lock is held while a callback runs, so it may call
// back into the log.
//
// A scan usually starts where the previous one stopped (recovery and
// replication read a log in order, one budget at a time), so each segment
// remembers where its last file scan stopped (readHint) and a scan starting
// there skips the index search. The hint belongs to one generation of the
// segment's contents; a suffix cut starts a new one, and a hint from an
// older generation is never used or stored.

import (
	"errors"
	"fmt"
)

type scanBuffers struct {
	records []byte // encoded records to deliver
	walk    []byte // file read buffer
}

// ScanWritten delivers records from offset from up to written_next. It
// stops after about maxBytes of bodies (always at least one record), at the
// frontier, or when fn returns an error, which it returns as is. next is
// the offset after the last record fn accepted. A from at or past the
// frontier delivers nothing; a from below FirstOffset is ErrOutOfRange.
func (l *Log) ScanWritten(from uint64, maxBytes int, fn func(Record) error) (next uint64, err error) {
	return l.scan(from, l.frontiers.snapshot().Written, maxBytes, fn)
}

// ScanDurable is ScanWritten bounded by durable_next.
func (l *Log) ScanDurable(from uint64, maxBytes int, fn func(Record) error) (next uint64, err error) {
	return l.scan(from, l.frontiers.snapshot().Durable, maxBytes, fn)
}

func (l *Log) scan(from, limit uint64, maxBytes int, fn func(Record) error) (uint64, error) {
	if l.isClosed.Load() {
		return from, ErrClosed
	}
	if from < l.FirstOffset() {
		return from, fmt.Errorf("%w: %d is below the first offset %d", ErrOutOfRange, from, l.FirstOffset())
	}
	buffers, _ := l.scanPool.Get().(*scanBuffers)
	if buffers == nil {
		buffers = &scanBuffers{}
	}
	defer l.scanPool.Put(buffers)
	progress := scanProgress{from: from, next: from, limit: limit, maxBytes: maxBytes}
	for progress.more() {
		chunk, chunkNext, hit := l.cache.copyOut(progress.next, limit, maxBytes-progress.delivered, buffers.records[:0])
		buffers.records = chunk
		before := progress.next
		var err error
		if hit {
			err = progress.deliverCached(chunk, chunkNext, fn)
			l.budget.cacheHits.Add(progress.next - before)
		} else {
			err = l.scanFile(&progress, buffers, fn)
			l.budget.cacheMisses.Add(progress.next - before)
		}
		if err != nil {
			return progress.next, err
		}
	}
	return progress.next, nil
}

// scanProgress is one scan's position and budget.
type scanProgress struct {
	from, next, limit uint64
	maxBytes          int
	delivered         int // body bytes delivered
}

// more reports whether the scan goes on: below its limit, and within its
// budget or before its first record.
func (p *scanProgress) more() bool {
	return p.next < p.limit && (p.next == p.from || p.delivered < p.maxBytes)
}

// deliver hands one record to fn and counts it.
func (p *scanProgress) deliver(record Record, fn func(Record) error) error {
	if err := fn(record); err != nil {
		return err
	}
	p.next++
	p.delivered += len(record.Body)
	return nil
}

// deliverCached decodes and delivers a chunk copied out of the cache.
func (p *scanProgress) deliverCached(chunk []byte, chunkNext uint64, fn func(Record) error) error {
	for position := 0; position < len(chunk); {
		record, size, err := decodeRecord(chunk[position:])
		if err != nil || record.Offset != p.next {
			panic(fmt.Sprintf("log: verified record bytes no longer decode at offset %d: %v", p.next, err))
		}
		if err := p.deliver(record, fn); err != nil {
			return err
		}
		position += size
	}
	if p.next != chunkNext {
		panic("log: scan chunk and its end offset disagree")
	}
	return nil
}

// scanFile delivers records from the segment that holds p.next, read from
// its file and checked before delivery, until the scan stops or the
// segment's written end.
func (l *Log) scanFile(p *scanProgress, buffers *scanBuffers, fn func(Record) error) error {
	l.segmentsMu.RLock()
	seg := findSegment(l.segments, p.next)
	l.segmentsMu.RUnlock()
	if seg == nil {
		return fmt.Errorf("%w: no segment holds offset %d", ErrOutOfRange, p.next)
	}
	segmentNext, segmentSize := seg.bounds()
	if p.next >= segmentNext {
		return fmt.Errorf("%w: offset %d is past segment %d's written end %d", ErrOutOfRange, p.next, seg.base, segmentNext)
	}
	start := seg.readStart(p.next)
	walker := newRecordWalker(seg, start.position, segmentSize, start.offset, buffers.walk)
	walker.readBytes = scanReadBytes(p.maxBytes - p.delivered)
	defer func() { buffers.walk = walker.buffer }()
	for p.more() && p.next < segmentNext {
		record, position, err := walker.next()
		if err != nil {
			var damage *walkDamage
			if errors.As(err, &damage) || errors.Is(err, errWalkEnd) {
				return fmt.Errorf("%w: segment %d: %v", ErrCorrupt, seg.base, err)
			}
			return err
		}
		if l.opts.ValidType != nil && !l.opts.ValidType(record.Type) {
			return fmt.Errorf("%w: segment %d: record %d has unknown type %d", ErrCorrupt, seg.base, record.Offset, record.Type)
		}
		if record.Offset < p.next {
			continue // walking up from an index entry
		}
		if err := p.deliver(record, fn); err != nil {
			seg.rememberReadStart(start.generation, readHint{offset: record.Offset, position: position})
			return err
		}
	}
	seg.rememberReadStart(start.generation, readHint{offset: walker.expectedOffset, position: walker.position})
	return nil
}

// scanReadBytes sizes a file scan's reads to what the scan will use: the
// remaining body budget plus room for the records' headers and the record
// that crosses the budget, in one read unless the records are tiny (a read
// that ends inside a record is repeated from that record); at most 1 MiB.
func scanReadBytes(budgetBytes int) int {
	budgetBytes = max(budgetBytes, 0)
	return min(budgetBytes+budgetBytes/16+2<<10, 1<<20)
}

// recordAt reads one record (from the cache or the files); Body is a copy.
func (l *Log) recordAt(offset uint64) (Record, error) {
	var found Record
	_, err := l.scan(offset, offset+1, 0, func(record Record) error {
		found = record
		found.Body = append([]byte(nil), record.Body...)
		return nil
	})
	if err == nil && found.Offset != offset {
		err = fmt.Errorf("%w: record %d not found", ErrOutOfRange, offset)
	}
	return found, err
}

func (l *Log) epochAt(offset uint64) (uint64, error) {
	record, err := l.recordAt(offset)
	return record.Epoch, err
}

// recoverEpochs loads the epoch history cache and checks it against the
// records, rebuilding (and rewriting) it when it is missing or wrong.
func (l *Log) recoverEpochs(next uint64) error {
	first := l.FirstOffset()
	l.cache = newTailCache(0, next, nil) // empty, outside the budget: reads go to the files
	payload, exists, err := readSmallFile(l.fs, l.dir, epochsFileName)
	if err == nil && exists {
		history, decodeErr := decodeEpochs(payload)
		if decodeErr == nil && verifyEpochHistory(history, first, next, l.epochAt) == nil {
			l.epochs = history
			return nil
		}
	}
	history, err := rebuildEpochHistory(first, next, l.epochAt)
	if errors.Is(err, errTooManyEpochs) {
		history, err = l.walkEpochHistory(first, next)
	}
	if err != nil {
		return fmt.Errorf("rebuilding the epoch history: %w", err)
	}
	l.epochs = history
	return writeSmallFile(l.fs, l.dir, epochsFileName, encodeEpochs(history))
}

// walkEpochHistory derives the history with one walk over every record.
func (l *Log) walkEpochHistory(first, next uint64) ([]EpochStart, error) {
	var builder epochHistoryBuilder
	for offset := first; offset < next; {
		var err error
		offset, err = l.scan(offset, next, 1<<20, func(record Record) error {
			builder.observe(record.Offset, record.Epoch)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return builder.history, nil
}

// persistEpochs rewrites the epoch history cache.
func (l *Log) persistEpochs() error {
	return writeSmallFile(l.fs, l.dir, epochsFileName, encodeEpochs(l.EpochHistory()))
}
