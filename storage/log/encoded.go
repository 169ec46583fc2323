package log

// Encoded records: the primitives replication stands on. A record's
// encoding (record.go) is the same on every copy of a log, CRC included,
// so a copy ships the bytes as they are and the receiver appends them as
// they are.
//
// ScanEncoded yields the encoded bytes of whole records from an offset, up
// to the written or the durable frontier (the caller chooses, read once at
// the start), in contiguous spans. It reads the tail cache first, without
// a copy: a span from the cache aliases a cache block, pinned so that its
// memory is not reused while fn runs. On a miss it reads the segment
// files, checking every record as the other scans do (length, CRC, dense
// offset, Options.ValidType), into the scan's buffer. Either way the bytes
// are valid only until fn returns: copy them to keep them. Cached records
// are checked too (CRC and offset), so what is yielded is always what a
// receiver's checks accept.
//
// AppendEncoded appends such bytes at an expected first offset. The whole
// batch is checked before anything is staged, and a refused batch appends
// nothing:
//
//   - every record decodes: length within bounds, CRC-32C matching
//     (ErrCorrupt), body within Options.MaxRecordBytes (ErrTooLarge), type
//     accepted by Options.ValidType when set (ErrCorrupt);
//   - offsets are dense from first, and first equals the log's staged_next
//     when the batch is staged (ErrOffsetMismatch);
//   - epochs never decrease within the batch, nor below the log's last
//     epoch (ErrEpochRegression).
//
// An accepted batch goes through the same writer path as Append: the same
// levels, group commit, rollover and latch rules, and the epoch history
// gains an entry for each epoch the batch starts. The records are stored
// byte for byte as given.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// ScanEncoded yields, through fn, the encoded bytes of the records from
// offset from up to bound's frontier (FrontierWritten or FrontierDurable),
// at most maxBytes of them per call but always at least one record. fn
// receives contiguous spans, each with its records' offsets [first, next),
// one or more per call; the bytes are valid only until fn returns. It
// returns the offset after the last record fn accepted, and fn's error as
// is. A from at or past the frontier yields nothing; a from below
// FirstOffset is ErrOutOfRange.
func (l *Log) ScanEncoded(from uint64, bound FrontierKind, maxBytes int, fn func(records []byte, first, next uint64) error) (uint64, error) {
	frontiers := l.frontiers.snapshot()
	limit := frontiers.Written
	switch bound {
	case FrontierDurable:
		limit = frontiers.Durable
	case FrontierWritten:
	default:
		return from, fmt.Errorf("%w: scans stop at the written or the durable frontier, not %d", ErrOutOfRange, bound)
	}
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
	next, yielded := from, 0
	for next < limit && (next == from || yielded < maxBytes) {
		spanNext, spanBytes, err := l.yieldEncodedSpan(next, limit, maxBytes-yielded, next == from, buffers, fn)
		if err != nil {
			return next, err
		}
		if spanNext == next {
			break // the next record does not fit the budget
		}
		next, yielded = spanNext, yielded+spanBytes
	}
	return next, nil
}

// yieldEncodedSpan yields one span from next, from the cache or from the
// file of the segment holding next, that keeps within budgetBytes or, when
// atLeastOne, holds at least one record. It returns next unchanged when
// nothing fits.
func (l *Log) yieldEncodedSpan(next, limit uint64, budgetBytes int, atLeastOne bool, buffers *scanBuffers, fn func([]byte, uint64, uint64) error) (uint64, int, error) {
	if block, span, spanNext, hit := l.cache.pinSpan(next, limit, budgetBytes, atLeastOne); hit {
		defer block.unpin()
		if spanNext == next {
			return next, 0, nil
		}
		if err := checkEncodedSpan(span, next, l.opts.ValidType); err != nil {
			panic(fmt.Sprintf("log: cached records no longer check out at offset %d: %v", next, err))
		}
		l.budget.cacheHits.Add(spanNext - next)
		return spanNext, len(span), fn(span, next, spanNext)
	}
	span, spanNext, err := l.readEncodedSpan(next, limit, budgetBytes, atLeastOne, buffers)
	if err != nil || spanNext == next {
		return next, 0, err
	}
	l.budget.cacheMisses.Add(spanNext - next)
	return spanNext, len(span), fn(span, next, spanNext)
}

// readEncodedSpan reads the records from next out of the file of the
// segment holding next, each checked by the walk, into buffers.records:
// up to limit, the segment's end, or the budget (see yieldEncodedSpan).
func (l *Log) readEncodedSpan(next, limit uint64, budgetBytes int, atLeastOne bool, buffers *scanBuffers) ([]byte, uint64, error) {
	l.segmentsMu.RLock()
	seg := findSegment(l.segments, next)
	l.segmentsMu.RUnlock()
	if seg == nil {
		return nil, next, fmt.Errorf("%w: no segment holds offset %d", ErrOutOfRange, next)
	}
	segmentNext, segmentSize := seg.bounds()
	if next >= segmentNext {
		return nil, next, fmt.Errorf("%w: offset %d is past segment %d's written end %d", ErrOutOfRange, next, seg.base, segmentNext)
	}
	start := seg.readStart(next)
	walker := newRecordWalker(seg, start.position, segmentSize, start.offset, buffers.walk)
	walker.readBytes = scanReadBytes(budgetBytes)
	defer func() { buffers.walk = walker.buffer }()
	out, end := buffers.records[:0], next
	hint := readHint{}
	for end < limit && end < segmentNext {
		record, position, err := walker.next()
		if err != nil {
			var damage *walkDamage
			if errors.As(err, &damage) || errors.Is(err, errWalkEnd) {
				return nil, next, fmt.Errorf("%w: segment %d: %v", ErrCorrupt, seg.base, err)
			}
			return nil, next, err
		}
		if l.opts.ValidType != nil && !l.opts.ValidType(record.Type) {
			return nil, next, fmt.Errorf("%w: segment %d: record %d has unknown type %d", ErrCorrupt, seg.base, record.Offset, record.Type)
		}
		if record.Offset < end {
			continue // walking up from an index entry
		}
		size := encodedSize(len(record.Body))
		if (end > next || !atLeastOne) && len(out)+size > budgetBytes {
			hint = readHint{offset: record.Offset, position: position}
			break
		}
		within := position - walker.bufferStart
		out = append(out, walker.buffer[within:within+int64(size)]...)
		end++
		hint = readHint{offset: walker.expectedOffset, position: walker.position}
	}
	if hint.position > 0 {
		seg.rememberReadStart(start.generation, hint)
	}
	buffers.records = out
	return out, end, nil
}

// checkEncodedSpan checks records the log holds: each decodes with its CRC
// and has the next offset from first, and its type passes validType.
func checkEncodedSpan(span []byte, first uint64, validType func(uint8) bool) error {
	_, err := checkEncodedBatch(span, first, recordBodyMax, validType)
	return err
}

// encodedBatch describes a checked batch of encoded records.
type encodedBatch struct {
	count                 int
	firstEpoch, lastEpoch uint64
}

// maxEncodedBatchRecords bounds one batch, as validateAppend bounds
// entries.
const maxEncodedBatchRecords = 1 << 20

// checkEncodedBatch checks a batch of encoded records that must start at
// offset first (see the file comment): every record decodes with its CRC,
// bodies are within maxBodyBytes, types pass validType (when set), offsets
// are dense from first, and epochs never decrease. It reads nothing
// outside data and allocates nothing.
func checkEncodedBatch(data []byte, first uint64, maxBodyBytes int, validType func(uint8) bool) (encodedBatch, error) {
	var batch encodedBatch
	for position := 0; position < len(data); {
		record, size, err := decodeRecord(data[position:])
		if err != nil {
			return encodedBatch{}, fmt.Errorf("%w: encoded record %d at byte %d: %v", ErrCorrupt, batch.count, position, err)
		}
		switch want := first + uint64(batch.count); {
		case record.Offset != want:
			return encodedBatch{}, fmt.Errorf("%w: encoded record %d has offset %d, want %d", ErrOffsetMismatch, batch.count, record.Offset, want)
		case len(record.Body) > maxBodyBytes:
			return encodedBatch{}, fmt.Errorf("%w: encoded record %d has a body of %d bytes, limit %d", ErrTooLarge, batch.count, len(record.Body), maxBodyBytes)
		case validType != nil && !validType(record.Type):
			return encodedBatch{}, fmt.Errorf("%w: encoded record %d has unknown type %d", ErrCorrupt, batch.count, record.Type)
		case batch.count > 0 && record.Epoch < batch.lastEpoch:
			return encodedBatch{}, fmt.Errorf("%w: encoded record %d has epoch %d after %d", ErrEpochRegression, batch.count, record.Epoch, batch.lastEpoch)
		case batch.count >= maxEncodedBatchRecords:
			return encodedBatch{}, fmt.Errorf("%w: more than %d records in one batch", ErrTooLarge, maxEncodedBatchRecords)
		}
		if batch.count == 0 {
			batch.firstEpoch = record.Epoch
		}
		batch.lastEpoch = record.Epoch
		batch.count++
		position += size
	}
	return batch, nil
}

// encodedEpoch reads the epoch of a checked encoded record.
func encodedEpoch(record []byte) uint64 { return binary.LittleEndian.Uint64(record[16:24]) }

// checkEncodedRequest is the up-front check of an encoded append.
func (l *Log) checkEncodedRequest(records []byte, first uint64, level Durability) (encodedBatch, error) {
	if level < AfterWrite || level > AfterFsync {
		return encodedBatch{}, fmt.Errorf("%w: %d", ErrInvalidDurability, level)
	}
	return checkEncodedBatch(records, first, l.opts.MaxRecordBytes, l.opts.ValidType)
}

// AppendEncoded appends encoded records (another copy's bytes, as
// ScanEncoded yields them) that must start at offset first, and returns
// when level is reached for all of them; see the file comment for the
// checks, each refusal naming its error (ErrCorrupt, ErrTooLarge,
// ErrOffsetMismatch, ErrEpochRegression). An empty records slice appends
// nothing, checks first against staged_next and waits until everything
// staged before it reaches level. When ctx ends first, AppendEncoded
// returns ctx.Err() but the append goes on. records may be reused once it
// returns.
func (l *Log) AppendEncoded(ctx context.Context, records []byte, first uint64, level Durability) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	results := make(chan Result, 1)
	if err := l.AppendEncodedAsync(records, first, level, func(result Result) { results <- result }); err != nil {
		return Result{}, err
	}
	select {
	case result := <-results:
		return result, result.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// AppendEncodedAsync is AppendEncoded without waiting, with AppendAsync's
// contract: a batch that fails its own checks is refused up front, the
// offset and epoch checks against the log come through done, and records
// must stay unchanged until done is called.
func (l *Log) AppendEncodedAsync(records []byte, first uint64, level Durability, done func(Result)) error {
	if done == nil {
		panic("log: AppendEncodedAsync needs a done callback")
	}
	batch, err := l.checkEncodedRequest(records, first, level)
	if err != nil {
		return err
	}
	request := l.requestPool.Get().(*appendRequest)
	request.setEncoded(records, first, batch)
	request.level, request.done = level, done
	if err := l.enqueue(request); err != nil {
		request.reset()
		l.requestPool.Put(request)
		return err
	}
	return nil
}

// StageEncoded is Stage for encoded records that must start at offset
// first (see AppendEncoded): every check happens before Stage returns,
// and a refused batch stages nothing and never calls done.
func (a *Appender) StageEncoded(records []byte, first uint64, level Durability, done func(Result)) (Result, error) {
	if done == nil {
		panic("log: StageEncoded needs a done callback")
	}
	batch, err := a.l.checkEncodedRequest(records, first, level)
	if err != nil {
		return Result{}, err
	}
	if err := a.refusal(); err != nil {
		return Result{}, err
	}
	if err := a.w.checkEncodedAgainstLog(first, batch); err != nil {
		return Result{}, err
	}
	request := a.l.requestPool.Get().(*appendRequest)
	request.setEncoded(records, first, batch)
	request.level, request.done = level, done
	start := a.w.next
	a.w.stageRequest(request) // may complete and recycle request
	return Result{First: start, Next: a.w.next}, nil
}

// checkEncodedAgainstLog is the writer's check of a batch against the log:
// it must start at staged_next and not go below the last epoch.
func (w *writer) checkEncodedAgainstLog(first uint64, batch encodedBatch) error {
	if first != w.next {
		return fmt.Errorf("%w: the batch starts at %d, the log's next offset is %d", ErrOffsetMismatch, first, w.next)
	}
	if batch.count > 0 && w.epochSeen && batch.firstEpoch < w.lastEpoch {
		return fmt.Errorf("%w: the batch starts with epoch %d after %d", ErrEpochRegression, batch.firstEpoch, w.lastEpoch)
	}
	return nil
}

// stageEncodedRequest stages a checked encoded batch, record by record.
func (w *writer) stageEncodedRequest(request *appendRequest) {
	for position := 0; position < len(request.encoded); {
		size, _ := recordLength(request.encoded[position:])
		w.stageRecord(nil, request.encoded[position:position+size])
		if w.latched {
			return
		}
		position += size
	}
}

// EncodedPrefix returns the bytes of the first maxRecords whole records of
// records (all of them when there are fewer), for a reader that bounds a
// page by a record count as well as by bytes. records must be whole
// records as ScanEncoded yields them; a length field that runs past the
// bytes ends the prefix before that record.
func EncodedPrefix(records []byte, maxRecords int) []byte {
	at := 0
	for count := 0; count < maxRecords && at+recordPrefixBytes <= len(records); count++ {
		size := recordPrefixBytes + int(binary.LittleEndian.Uint32(records[at:at+4]))
		if at+size > len(records) {
			break
		}
		at += size
	}
	return records[:at]
}

// EncodedEpochStarts lists where records (whole records, as AppendEncoded
// accepted them, the first at offset first) start a new epoch: the first
// record, and every record whose epoch differs from the one before. A
// replica that hands batches to its log before they are staged uses it to
// know the epoch history its pending appends will make.
func EncodedEpochStarts(records []byte, first uint64) []EpochStart {
	var starts []EpochStart
	at, offset := 0, first
	for at+recordPrefixBytes <= len(records) {
		size := recordPrefixBytes + int(binary.LittleEndian.Uint32(records[at:at+4]))
		if at+size > len(records) {
			break
		}
		epoch := encodedEpoch(records[at : at+size])
		if len(starts) == 0 || starts[len(starts)-1].Epoch != epoch {
			starts = append(starts, EpochStart{Epoch: epoch, FirstOffset: offset})
		}
		at += size
		offset++
	}
	return starts
}
