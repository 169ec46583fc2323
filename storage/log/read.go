package log

// Reads. A scan takes the frontier it is bounded by once, at its start,
// and delivers records in offset order below it: from the tail cache when
// the offsets are still cached, otherwise from the segment files through
// each segment's open read descriptor, where every record is checked
// (length, CRC, dense offset, and Options.ValidType when set) before it is
// delivered. Records are copied out of the cache or file buffer under the
// respective lock and delivered after it is released, so a callback may
// call back into the log.

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
	next, delivered := from, 0
	for next < limit && (next == from || delivered < maxBytes) {
		chunk, chunkNext, hit := l.cache.copyOut(next, limit, maxBytes-delivered, buffers.records[:0])
		if !hit {
			var err error
			chunk, chunkNext, err = l.readFiles(next, limit, maxBytes-delivered, buffers, chunk)
			if err != nil {
				return next, err
			}
		}
		buffers.records = chunk
		for position := 0; position < len(chunk); {
			record, size, err := decodeRecord(chunk[position:])
			if err != nil || record.Offset != next {
				panic(fmt.Sprintf("log: verified record bytes no longer decode at offset %d: %v", next, err))
			}
			if err := fn(record); err != nil {
				return next, err
			}
			next++
			delivered += len(record.Body)
			position += size
		}
		if next != chunkNext {
			panic("log: scan chunk and its end offset disagree")
		}
	}
	return next, nil
}

// readFiles appends to dst the encoded records from offset from, read from
// the segment that holds it, stopping as copyOut does or at the segment's
// end.
func (l *Log) readFiles(from, limit uint64, budgetBytes int, buffers *scanBuffers, dst []byte) ([]byte, uint64, error) {
	l.segmentsMu.RLock()
	seg := findSegment(l.segments, from)
	l.segmentsMu.RUnlock()
	if seg == nil {
		return dst, from, fmt.Errorf("%w: no segment holds offset %d", ErrOutOfRange, from)
	}
	segmentNext, segmentSize := seg.bounds()
	if from >= segmentNext {
		return dst, from, fmt.Errorf("%w: offset %d is past segment %d's written end %d", ErrOutOfRange, from, seg.base, segmentNext)
	}
	position, startOffset := seg.locate(from)
	walker := newRecordWalker(seg, position, segmentSize, startOffset, buffers.walk)
	defer func() { buffers.walk = walker.buffer }()
	next, bodyBytes := from, 0
	for next < limit && next < segmentNext && (next == from || bodyBytes < budgetBytes) {
		record, _, err := walker.next()
		if err != nil {
			var damage *walkDamage
			if errors.As(err, &damage) || errors.Is(err, errWalkEnd) {
				return dst, next, fmt.Errorf("%w: segment %d: %v", ErrCorrupt, seg.base, err)
			}
			return dst, next, err
		}
		if l.opts.ValidType != nil && !l.opts.ValidType(record.Type) {
			return dst, next, fmt.Errorf("%w: segment %d: record %d has unknown type %d", ErrCorrupt, seg.base, record.Offset, record.Type)
		}
		if record.Offset < from {
			continue
		}
		dst = append(dst, walker.raw...)
		bodyBytes += len(record.Body)
		next++
	}
	return dst, next, nil
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
	l.cache = newTailCache(0, next) // empty: reads go to the files
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
