package log

// Fuzz targets for the decoders. Seed corpora live in
// testdata/fuzz/<FuzzName>/. Run, for example:
//
//	go test -run '^$' -fuzz FuzzDecodeRecord -fuzztime 30s ./storage/log
//	go test -run '^$' -fuzz FuzzRecoverSegment -fuzztime 30s ./storage/log

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
	seeds := map[string]map[string][][]byte{
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
			"no-index":         {healthy, nil},
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
				text += "[]byte(" + strconv.Quote(string(value)) + ")\n"
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
