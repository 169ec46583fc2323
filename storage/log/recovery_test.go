package log

// Table tests of Open over damaged logs (design: "Open and recovery"). Each
// case builds a healthy log on a vfs.Mem through the log itself, damages
// its files, reopens, and checks the outcome: the recovered end, the
// records, the files left behind, or a named refusal with every byte kept.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

const recoveryDir = "/r"

// buildLog writes n durable records of body(offset, "r") and closes the
// log; it returns the segment bases.
func buildLog(t *testing.T, mem *vfs.Mem, n int) []uint64 {
	t.Helper()
	l := mustOpen(t, recoveryDir, memOptions(mem))
	appendN(t, l, n, AfterFsync, "r")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := mem.ReadDir(recoveryDir)
	var bases []uint64
	for _, name := range names {
		if base, ok := parseSegmentName(name, logSuffix); ok {
			bases = append(bases, base)
		}
	}
	return bases
}

func segmentPath(base uint64, suffix string) string {
	return filepath.Join(recoveryDir, segmentName(base, suffix))
}

func readFile(t *testing.T, mem *vfs.Mem, path string) []byte {
	t.Helper()
	data, err := mem.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t *testing.T, mem *vfs.Mem, path string, data []byte) {
	t.Helper()
	if err := mem.WriteFile(path, data); err != nil {
		t.Fatal(err)
	}
}

// snapshotFiles maps every file to its contents.
func snapshotFiles(t *testing.T, mem *vfs.Mem) map[string]string {
	files := map[string]string{}
	for _, name := range mem.Names() {
		files[name] = string(readFile(t, mem, name))
	}
	return files
}

// recordPositions walks a segment's log bytes and returns each record's
// start position.
func recordPositions(t *testing.T, data []byte) []int {
	t.Helper()
	var positions []int
	for position := 0; position < len(data); {
		_, size, err := decodeRecord(data[position:])
		if err != nil {
			t.Fatalf("fixture does not decode at %d: %v", position, err)
		}
		positions = append(positions, position)
		position += size
	}
	return positions
}

func indexEntries(data []byte) []indexEntry { return decodeIndex(data) }

type recoveryCase struct {
	name string
	// damage changes the files of a 60-record log; it returns the expected
	// recovered end (ignored when wantErr is set).
	damage  func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64
	wantErr error
}

func TestRecoveryTable(t *testing.T) {
	const records = 60
	cases := []recoveryCase{
		{name: "healthy", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 { return records }},
		{name: "torn tail mid-record", damage: tearTail(7)},
		{name: "torn tail inside the length field", damage: tearTail(2)},
		{name: "zeros after the last record", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(bases[len(bases)-1], logSuffix)
			writeFile(t, mem, path, append(readFile(t, mem, path), make([]byte, 300)...))
			return records
		}},
		{name: "index entry past the log end", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(bases[len(bases)-1], indexSuffix)
			writeFile(t, mem, path, appendIndexEntries(readFile(t, mem, path), []indexEntry{{relativeOffset: 1000, position: 1 << 20}}))
			return records
		}},
		{name: "index out of order", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(bases[0], indexSuffix)
			entries := indexEntries(readFile(t, mem, path))
			if len(entries) < 3 {
				t.Fatalf("fixture index too short: %v", entries)
			}
			entries[1], entries[2] = entries[2], entries[1]
			writeFile(t, mem, path, appendIndexEntries(nil, entries))
			return records
		}},
		{name: "wrong first index entry", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(bases[0], indexSuffix)
			entries := indexEntries(readFile(t, mem, path))
			entries[0] = indexEntry{relativeOffset: 1, position: 0}
			writeFile(t, mem, path, appendIndexEntries(nil, entries))
			return records
		}},
		{name: "index entry pointing inside a record", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(bases[len(bases)-1], indexSuffix)
			entries := indexEntries(readFile(t, mem, path))
			entries[len(entries)-1].position += 3
			writeFile(t, mem, path, appendIndexEntries(nil, entries))
			return records
		}},
		{name: "missing index files", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			for _, base := range bases {
				mem.Remove(segmentPath(base, indexSuffix))
			}
			return records
		}},
		{name: "partial trailing index entry", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(bases[len(bases)-1], indexSuffix)
			writeFile(t, mem, path, append(readFile(t, mem, path), 1, 2, 3))
			return records
		}},
		{name: "torn record inside the proven durable prefix", wantErr: ErrInteriorCorruption, damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			tearTail(7)(t, mem, bases)
			setDurableEnd(t, mem, records) // the torn record was proven durable
			return 0
		}},
		{name: "interior corruption with a valid record after it", wantErr: ErrInteriorCorruption, damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			damageRecordBody(t, mem, bases[len(bases)-1], 1)
			return 0
		}},
		{name: "damage with valid records after it, past the proven end", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			// A failed sync dropped a record's bytes and later writes reached
			// the disk: durable bytes, a hole, valid records. Nothing proved
			// the hole durable, so it is a torn tail, not corruption.
			tail := bases[len(bases)-1]
			setDurableEnd(t, mem, tail+1)
			zeroRecord(t, mem, tail, 1)
			return tail + 1
		}},
		{name: "damage past the proven end, below an index entry that checks out", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			// Index entries above the proven end are not evidence: the walk
			// starts below them and finds the damage they would skip.
			tail := bases[len(bases)-1]
			positions := recordPositions(t, readFile(t, mem, segmentPath(tail, logSuffix)))
			if len(positions) < 3 {
				t.Fatalf("the tail holds %d records; the case needs three", len(positions))
			}
			last := len(positions) - 1
			anchors := []indexEntry{{0, 0}, {relativeOffset: uint32(last), position: uint32(positions[last])}}
			writeFile(t, mem, segmentPath(tail, indexSuffix), appendIndexEntries(nil, anchors))
			setDurableEnd(t, mem, tail+1)
			zeroRecord(t, mem, tail, 1)
			return tail + 1
		}},
		{name: "proven end past the records on disk", wantErr: ErrInteriorCorruption, damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			setDurableEnd(t, mem, records+3)
			return 0
		}},
		{name: "unreadable durable-end record: the tail proves nothing", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			tail := bases[len(bases)-1]
			writeFile(t, mem, filepath.Join(recoveryDir, durableEndFileName), make([]byte, durableEndSlotGap+durableEndSlotBytes))
			damageRecordBody(t, mem, tail, 1)
			return tail + 1
		}},
		{name: "one torn durable-end slot: the other one counts", wantErr: ErrInteriorCorruption, damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := filepath.Join(recoveryDir, durableEndFileName)
			data := readFile(t, mem, path)
			data[3] ^= 0xff // slot 0 torn; slot 1 still says 60
			writeFile(t, mem, path, data)
			damageRecordBody(t, mem, bases[len(bases)-1], 1)
			return 0
		}},
		{name: "damage in a sealed segment", wantErr: ErrInteriorCorruption, damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(bases[0], logSuffix)
			data := readFile(t, mem, path)
			data[len(data)-1] ^= 0xff
			writeFile(t, mem, path, data)
			return 0
		}},
		{name: "missing middle segment", wantErr: ErrInteriorCorruption, damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			mem.Remove(segmentPath(bases[1], logSuffix))
			mem.Remove(segmentPath(bases[1], indexSuffix))
			return 0
		}},
		{name: "zero-length middle segment", wantErr: ErrInteriorCorruption, damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			writeFile(t, mem, segmentPath(bases[1], logSuffix), nil)
			return 0
		}},
		{name: "zero-length last segment continuing the log", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			writeFile(t, mem, segmentPath(records, logSuffix), nil)
			return records
		}},
		{name: "zero-length last segment not continuing the log", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			writeFile(t, mem, segmentPath(records+5, logSuffix), nil)
			return records
		}},
		{name: "torn last segment holding only a partial record", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			path := segmentPath(records, logSuffix)
			writeFile(t, mem, path, appendRecord(nil, records, 1, 7, []byte("partial"))[:10])
			return records
		}},
		{name: "pending cut inside the last segment", damage: pendingCut(records - 3)},
		{name: "pending cut in an earlier segment", damage: pendingCut(5)},
		{name: "pending cut at the end", damage: pendingCut(records)},
		{name: "wrong epoch history cache", damage: func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
			writeFile(t, mem, filepath.Join(recoveryDir, epochsFileName), binary.LittleEndian.AppendUint32(encodeEpochs([]EpochStart{{Epoch: 9, FirstOffset: 3}}), 0))
			return records
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runRecoveryCase(t, c, records) })
	}
}

func runRecoveryCase(t *testing.T, c recoveryCase, records int) {
	mem := vfs.NewMem()
	bases := buildLog(t, mem, records)
	if len(bases) < 3 {
		t.Fatalf("fixture has %d segments, want at least 3", len(bases))
	}
	wantNext := c.damage(t, mem, bases)
	before := snapshotFiles(t, mem)
	l, err := Open(recoveryDir, memOptions(mem))
	if c.wantErr != nil {
		if !errors.Is(err, c.wantErr) {
			t.Fatalf("open: %v, want %v", err, c.wantErr)
		}
		if after := snapshotFiles(t, mem); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("a refused open changed the files")
		}
		return
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer l.Close()
	checkRecoveredLog(t, l, mem, wantNext)
}

// checkRecoveredLog checks frontiers, records, index files and epochs.
func checkRecoveredLog(t *testing.T, l *Log, mem *vfs.Mem, wantNext uint64) {
	t.Helper()
	if f := l.Frontiers(); f != (Frontiers{Staged: wantNext, Written: wantNext, Durable: wantNext}) {
		t.Fatalf("frontiers %+v, want all %d", f, wantNext)
	}
	got := scanAll(t, l, 0, true)
	if uint64(len(got)) != wantNext {
		t.Fatalf("scanned %d records, want %d", len(got), wantNext)
	}
	for i, record := range got {
		if record.Offset != uint64(i) || !bytes.Equal(record.Body, body(uint64(i), "r")) {
			t.Fatalf("record %d: %+v", i, record)
		}
	}
	if _, pending, _ := readCutFile(mem, recoveryDir); pending {
		t.Fatal("pending cut file left behind")
	}
	l.segmentsMu.RLock()
	defer l.segmentsMu.RUnlock()
	for _, seg := range l.segments {
		size, _, _ := mem.Stat(seg.logPath)
		if next, written := seg.bounds(); size != written || (seg == l.segments[len(l.segments)-1] && next != wantNext) {
			t.Fatalf("segment %d: file %d bytes, bounds (%d, %d)", seg.base, size, next, written)
		}
		onDisk := indexEntries(readFile(t, mem, seg.indexPath))
		if err := checkIndex(onDisk, size); err != nil || checkIndexAnchors(seg, seg.base, onDisk) != nil {
			t.Fatalf("segment %d index after recovery is inconsistent: %v", seg.base, err)
		}
	}
	if history := l.EpochHistory(); wantNext > 0 && (len(history) != 1 || history[0] != (EpochStart{Epoch: 1, FirstOffset: 0})) {
		t.Fatalf("epoch history %v", history)
	}
}

// tearTail tears the last record, which was never proven durable (the
// durable-end record is set below it, as a power loss leaves it).
func tearTail(keep int) func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
	return func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
		path := segmentPath(bases[len(bases)-1], logSuffix)
		data := readFile(t, mem, path)
		positions := recordPositions(t, data)
		last := positions[len(positions)-1]
		writeFile(t, mem, path, data[:last+keep])
		// The last segment's final record is torn: the log ends one before.
		end := bases[len(bases)-1] + uint64(len(positions)) - 1
		setDurableEnd(t, mem, end)
		return end
	}
}

// setDurableEnd writes the durable-end record with offset in both slots.
func setDurableEnd(t *testing.T, mem *vfs.Mem, offset uint64) {
	t.Helper()
	data := make([]byte, durableEndSlotGap+durableEndSlotBytes)
	copy(data, encodeDurableEndSlot(offset))
	copy(data[durableEndSlotGap:], encodeDurableEndSlot(offset))
	writeFile(t, mem, filepath.Join(recoveryDir, durableEndFileName), data)
}

// damageRecordBody flips a body byte of the segment's record number i.
func damageRecordBody(t *testing.T, mem *vfs.Mem, base uint64, i int) {
	t.Helper()
	path := segmentPath(base, logSuffix)
	data := readFile(t, mem, path)
	positions := recordPositions(t, data)
	data[positions[i]+recordHeaderBytes] ^= 0xff
	writeFile(t, mem, path, data)
}

// zeroRecord zeroes the segment's record number i, as a dropped write
// leaves it when later writes reached the disk.
func zeroRecord(t *testing.T, mem *vfs.Mem, base uint64, i int) {
	t.Helper()
	path := segmentPath(base, logSuffix)
	data := readFile(t, mem, path)
	positions := append(recordPositions(t, data), len(data))
	clear(data[positions[i]:positions[i+1]])
	writeFile(t, mem, path, data)
}

func pendingCut(offset uint64) func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
	return func(t *testing.T, mem *vfs.Mem, bases []uint64) uint64 {
		payload := encodeUint64(offset)
		writeFile(t, mem, filepath.Join(recoveryDir, cutFileName), binary.LittleEndian.AppendUint32(payload, crc32Castagnoli(payload)))
		return offset
	}
}

func TestRecoveryEmptyDirectoryUsesBaseOffset(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	opts.BaseOffset = 1000
	l := mustOpen(t, recoveryDir, opts)
	res, err := l.Append(t.Context(), []Entry{{Epoch: 1, Body: []byte("x")}}, AfterFsync)
	if err != nil || res.First != 1000 || l.FirstOffset() != 1000 {
		t.Fatalf("append on a new log at base 1000: %+v %v first=%d", res, err, l.FirstOffset())
	}
	l.Close()
}

func TestRecoveryZeroLengthOnlySegment(t *testing.T) {
	mem := vfs.NewMem()
	mem.MkdirAll(recoveryDir)
	writeFile(t, mem, segmentPath(42, logSuffix), nil)
	l := mustOpen(t, recoveryDir, memOptions(mem))
	defer l.Close()
	if f := l.Frontiers(); f.Durable != 42 || l.FirstOffset() != 42 {
		t.Fatalf("frontiers %+v first %d, want 42", f, l.FirstOffset())
	}
	if names := mem.Names(); !sort.StringsAreSorted(names) || len(names) < 2 {
		t.Fatalf("files %v", names)
	}
}

// A crafted tail past the proven end (every 25 bytes a plausible huge
// record with a bad CRC) is a torn tail: Open truncates it at the first
// damage and reads nothing past it.
func TestRecoveryCraftedTailIsBounded(t *testing.T) {
	mem := vfs.NewMem()
	bases := buildLog(t, mem, 60)
	path := segmentPath(bases[len(bases)-1], logSuffix)
	data := readFile(t, mem, path)
	next := uint64(60)
	data = append(data, 0xee) // damage: a header that cannot be a record
	const craftedBytes = 4 << 20
	start := len(data)
	for len(data)-start < craftedBytes {
		var header [recordHeaderBytes]byte
		binary.LittleEndian.PutUint32(header[0:4], uint32(craftedBytes-(len(data)-start)-recordPrefixBytes))
		binary.LittleEndian.PutUint64(header[8:16], next)
		data = append(data, header[:]...)
	}
	writeFile(t, mem, path, data)
	fs := &readCountingFS{FS: mem}
	opts := memOptions(fs)
	l, err := Open(recoveryDir, opts)
	if err != nil {
		t.Fatalf("open over a crafted tail past the proven end: %v", err)
	}
	defer l.Close()
	if got := l.Frontiers().Durable; got != next {
		t.Fatalf("recovered end %d, want %d", got, next)
	}
	if read := fs.logBytes.Load(); read > 2*walkChunkBytes*int64(len(bases))+int64(start) {
		t.Fatalf("recovery read %d log bytes over a %d-byte crafted tail", read, craftedBytes)
	}
}
