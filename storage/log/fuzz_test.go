package log

// Fuzz targets for the decoders. Seed corpora live in
// testdata/fuzz/<FuzzName>/. Run, for example:
//
//	go test -run '^$' -fuzz FuzzDecodeRecord -fuzztime 30s ./storage/log
//	go test -run '^$' -fuzz FuzzRecoverSegment -fuzztime 30s ./storage/log
//	go test -run '^$' -fuzz FuzzCheckEncodedBatch -fuzztime 30s ./storage/log
//	go test -run '^$' -fuzz FuzzAppendEncoded -fuzztime 30s ./storage/log

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, 7, 2, 1, []byte("hello")))
	f.Add(appendRecord(nil, 0, 0, 0, nil))
	f.Add(make([]byte, recordHeaderBytes))
	f.Fuzz(func(t *testing.T, data []byte) {
		record, size, err := decodeRecord(data)
		if err != nil {
			return
		}
		if size > len(data) || size != encodedSize(len(record.Body)) {
			t.Fatalf("size %d for %d bytes and a %d-byte body", size, len(data), len(record.Body))
		}
		if again := appendRecord(nil, record.Offset, record.Epoch, record.Type, record.Body); !bytes.Equal(again, data[:size]) {
			t.Fatal("a decoded record does not re-encode to the same bytes")
		}
	})
}

// FuzzRecoverSegment feeds arbitrary log and index bytes to the recovery
// analysis, once with every index entry usable as an anchor (a sealed
// segment) and once with only the entries at or below a proven end taken
// from the input (a tail): it must not panic, must stay within the bytes
// given, must never anchor above the proven end, and what it accepts must
// be a clean walk from where the analysis started (byte 0, or an index
// anchor whose entries all point at the records they name).
func FuzzRecoverSegment(f *testing.F) {
	var log []byte
	for offset := uint64(10); offset < 20; offset++ {
		log = appendRecord(log, offset, 1, 2, bytes.Repeat([]byte{byte(offset)}, int(offset)))
	}
	f.Add(log, appendIndexEntries(nil, []indexEntry{{0, 0}, {4, 4 * 35}}))
	f.Add(log[:len(log)-3], []byte(nil))
	f.Add(append(log[:50:50], log[80:]...), appendIndexEntries(nil, []indexEntry{{0, 0}, {9, 9999}}))
	f.Fuzz(func(t *testing.T, data, index []byte) {
		proven := uint64(10 + len(index)%16) // a proven end somewhere in [10, 26)
		for _, anchorLimit := range []uint64{anchorsUnlimited, proven} {
			checkRecoveredSegment(t, data, index, anchorLimit)
		}
	})
}

func checkRecoveredSegment(t *testing.T, data, index []byte, anchorLimit uint64) {
	t.Helper()
	source := &countingSource{data: data}
	analysis, err := analyzeSegment(source, 10, int64(len(data)), index, 64, anchorLimit)
	if err != nil {
		t.Fatalf("analysis over bytes in memory failed: %v", err)
	}
	if analysis.validEnd > int64(len(data)) || (analysis.damage == nil && analysis.validEnd != int64(len(data))) {
		t.Fatalf("valid end %d of %d bytes, damage %v", analysis.validEnd, len(data), analysis.damage)
	}
	if analysis.walkStartOffset > max(anchorLimit, 10) {
		t.Fatalf("the walk began at record %d, above the anchor limit %d", analysis.walkStartOffset, anchorLimit)
	}
	if err := checkIndex(analysis.entries, max(analysis.validEnd, 1)); err != nil && analysis.validEnd > 0 {
		t.Fatalf("recovered index inconsistent: %v", err)
	}
	var fresh segmentAnalysis
	if analysis.walkStart != 0 && analysis.indexReason != nil {
		t.Fatalf("index rejected (%v) but the walk began at byte %d", analysis.indexReason, analysis.walkStart)
	}
	if err := walkSegment(&fresh, source, 10, analysis.walkStart, analysis.walkStartOffset, analysis.validEnd, 64); err != nil || fresh.damage != nil || fresh.next != analysis.next {
		t.Fatalf("accepted prefix is not a clean walk from byte 0: next %d vs %d, damage %v", fresh.next, analysis.next, fresh.damage)
	}
}

// FuzzCheckEncodedBatch feeds arbitrary bytes and a first offset to the
// check of an encoded batch (the path every replicated append takes): it
// must not panic, and what it accepts must be whole records, dense from
// first, epochs never decreasing, each re-encoding to the same bytes.
func FuzzCheckEncodedBatch(f *testing.F) {
	f.Add(expectedEncoding(10, 13, func(offset uint64) uint64 { return offset / 2 }), uint64(10))
	f.Add([]byte(nil), uint64(0))
	f.Add(make([]byte, recordHeaderBytes), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, first uint64) {
		batch, err := checkEncodedBatch(data, first, 1<<16, func(recordType uint8) bool { return recordType < 200 })
		if err != nil {
			if !isPackageError(err) {
				t.Fatalf("refusal without a package error: %v", err)
			}
			return
		}
		position, lastEpoch := 0, uint64(0)
		for i := 0; i < batch.count; i++ {
			record, size, err := decodeRecord(data[position:])
			if err != nil || record.Offset != first+uint64(i) || (i > 0 && record.Epoch < lastEpoch) || record.Type >= 200 {
				t.Fatalf("accepted record %d: %+v, %v", i, record, err)
			}
			if again := appendRecord(nil, record.Offset, record.Epoch, record.Type, record.Body); !bytes.Equal(again, data[position:position+size]) {
				t.Fatalf("accepted record %d does not re-encode to its bytes", i)
			}
			if i == 0 && record.Epoch != batch.firstEpoch {
				t.Fatalf("first epoch %d, batch says %d", record.Epoch, batch.firstEpoch)
			}
			lastEpoch = record.Epoch
			position += size
		}
		if position != len(data) || (batch.count > 0 && lastEpoch != batch.lastEpoch) {
			t.Fatalf("accepted %d records ending at byte %d of %d", batch.count, position, len(data))
		}
	})
}

// FuzzAppendEncoded appends arbitrary bytes as an encoded batch to a log
// holding records [0, 3) of epoch 2: a refusal names a package error and
// leaves the log as it was; an accepted batch is stored byte for byte and
// continues the log.
func FuzzAppendEncoded(f *testing.F) {
	f.Add(expectedEncoding(3, 6, func(uint64) uint64 { return 2 }), uint64(3))
	f.Add(expectedEncoding(3, 4, func(uint64) uint64 { return 1 }), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, first uint64) {
		opts := memOptions(vfs.NewMem())
		opts.MaxRecordBytes = 1 << 16
		l := mustOpen(t, "/fuzz", opts)
		defer l.Close()
		mustAppend(t, l, epochEntries(0, 3, 2), AfterFlush)
		before := encodedRecords(t, l, 0, FrontierWritten, 1<<20)
		result, err := l.AppendEncoded(context.Background(), data, first, AfterFlush)
		after := encodedRecords(t, l, 0, FrontierWritten, 1<<20)
		if err != nil {
			if !isPackageError(err) || !bytes.Equal(after, before) {
				t.Fatalf("refusal %v (a package error: %v) changed the log: %v", err, isPackageError(err), !bytes.Equal(after, before))
			}
			return
		}
		if first != 3 || result.First != 3 || !bytes.Equal(after, append(before, data...)) {
			t.Fatalf("accepted at %d: %+v, and the log holds other bytes", first, result)
		}
	})
}

// isPackageError reports whether err wraps one of the refusals of an
// encoded append.
func isPackageError(err error) bool {
	for _, named := range []error{ErrCorrupt, ErrTooLarge, ErrOffsetMismatch, ErrEpochRegression} {
		if errors.Is(err, named) {
			return true
		}
	}
	return false
}

// TestWriteFuzzSeeds regenerates the committed seed corpora when
// FIBRIL_WRITE_FUZZ_SEEDS=1; otherwise it checks that they exist.
func TestWriteFuzzSeeds(t *testing.T) {
	var healthy []byte
	for offset := uint64(10); offset < 20; offset++ {
		healthy = appendRecord(healthy, offset, 1, 2, bytes.Repeat([]byte{byte(offset)}, int(offset)))
	}
	index := appendIndexEntries(nil, []indexEntry{{0, 0}, {4, 4*recordHeaderBytes + 10 + 11 + 12 + 13}})
	corrupt := append([]byte(nil), healthy...)
	corrupt[60] ^= 0xff
	batch := expectedEncoding(10, 13, func(offset uint64) uint64 { return offset / 2 })
	badBatch := append([]byte(nil), batch...)
	badBatch[len(badBatch)-1] ^= 0xff
	seeds := map[string]map[string][]any{
		"FuzzCheckEncodedBatch": {
			"batch":          {batch, uint64(10)},
			"wrong-first":    {batch, uint64(11)},
			"bad-checksum":   {badBatch, uint64(10)},
			"empty":          {[]byte(nil), uint64(0)},
			"epoch-decrease": {expectedEncoding(10, 13, func(offset uint64) uint64 { return 20 - offset }), uint64(10)},
		},
		"FuzzAppendEncoded": {
			"continues":    {expectedEncoding(3, 6, func(uint64) uint64 { return 2 }), uint64(3)},
			"gap":          {expectedEncoding(4, 6, func(uint64) uint64 { return 2 }), uint64(4)},
			"old-epoch":    {expectedEncoding(3, 4, func(uint64) uint64 { return 1 }), uint64(3)},
			"bad-checksum": {badBatch, uint64(10)},
		},
		"FuzzDecodeRecord": {
			"record":       {appendRecord(nil, 7, 2, 1, []byte("hello"))},
			"empty-body":   {appendRecord(nil, 0, 0, 0, nil)},
			"zeros":        {make([]byte, recordHeaderBytes)},
			"bad-checksum": {corrupt[:recordHeaderBytes+10]},
			"torn":         {healthy[:30]},
		},
		"FuzzRecoverSegment": {
			"healthy":          {healthy, index},
			"torn-tail":        {healthy[:len(healthy)-3], index},
			"no-index":         {healthy, []byte(nil)},
			"index-past-end":   {healthy, appendIndexEntries(nil, []indexEntry{{0, 0}, {9, 9999}})},
			"interior-damage":  {corrupt, index},
			"zeros-after-tail": {append(append([]byte(nil), healthy...), make([]byte, 64)...), index},
		},
	}
	for target, files := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		for name, values := range files {
			path := filepath.Join(dir, name)
			if os.Getenv("FIBRIL_WRITE_FUZZ_SEEDS") != "1" {
				if _, err := os.Stat(path); err != nil {
					t.Fatalf("seed %s missing (regenerate with FIBRIL_WRITE_FUZZ_SEEDS=1): %v", path, err)
				}
				continue
			}
			text := "go test fuzz v1\n"
			for _, value := range values {
				switch value := value.(type) {
				case []byte:
					text += "[]byte(" + strconv.Quote(string(value)) + ")\n"
				case uint64:
					text += "uint64(" + strconv.FormatUint(value, 10) + ")\n"
				}
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// countingSource is a readerAt over bytes in memory that counts what it
// reads.
type countingSource struct {
	data      []byte
	readBytes int64
}

func (c *countingSource) readAt(p []byte, position int64) (int, error) {
	c.readBytes += int64(len(p))
	if position >= int64(len(c.data)) {
		return 0, io.EOF
	}
	n := copy(p, c.data[position:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
