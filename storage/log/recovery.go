package log

// Recovery rules, applied by Open in this order:
//
//  1. A pending cut (latched-cut.pending) is carried out first: every
//     record at or after its offset is removed (cutSegmentFiles), before
//     anything reads the tail. Linux reports a writeback error once and may
//     drop the dirty pages, so nothing past the last good sync is trusted.
//  2. Each segment's index is checked against its log (checkIndex, then the
//     anchor record at the last entry must be found where the index says).
//     An index that contradicts its log is dropped and rebuilt from a walk
//     of the log from byte 0. The index is never evidence about the log.
//  3. Every segment but the last is walked from its index anchor to its end
//     and must end cleanly exactly where the next segment begins; anything
//     else is interior corruption (rollover syncs the outgoing segment
//     before creating the next, so a power loss cannot tear a sealed one).
//  4. The last non-empty segment (the tail) is walked from its index anchor
//     (every entry's record header checked first) with every CRC checked.
//     Bytes below an accepted anchor are not re-read at open: damage there
//     surfaces as ErrCorrupt when a read reaches it. At the first damage, the rest of the segment is probed for a
//     valid record: if one exists, the damage is interior corruption and
//     Open refuses with ErrInteriorCorruption, deleting nothing; if the
//     probe cannot finish within its work bound it refuses with
//     ErrUnverifiedTail; otherwise the damage is a torn final write and the
//     tail is truncated there.
//  5. The recovered tail (log and index) is fdatasynced, and the directory
//     synced, before the frontiers are published: records found in the
//     page cache after a process crash are not durable until then.
//
// Zero-length segments: a zero-length last segment whose base continues
// the log is kept as the active segment; other trailing zero-length
// segments hold no bytes and are removed; a zero-length segment followed by
// a non-empty one is a gap in the offsets and refuses the open.
//
// Work is bounded by a walk of the files: index checks are linear in the
// index, walks are linear in the log, and the residue probe hashes at most
// residueBudget bytes.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// segmentAnalysis is what a read-only walk learns about one segment.
type segmentAnalysis struct {
	entries      []indexEntry
	indexRewrite bool  // the index file must be rewritten from entries
	indexReason  error // why the index was rebuilt from byte 0, if it was
	next         uint64
	validEnd     int64
	damage       *walkDamage
	// walkStart and walkStartOffset are where the CRC walk began: the
	// index anchor, or byte 0 when the index was rebuilt. Bytes below an
	// accepted anchor are not re-read at open (their damage surfaces as
	// ErrCorrupt on read).
	walkStart       int64
	walkStartOffset uint64
}

// analyzeSegment walks one segment's log, anchored by its index when the
// index is consistent, from byte 0 otherwise.
func analyzeSegment(source readerAt, base uint64, size int64, indexBytes []byte, intervalBytes int64) (segmentAnalysis, error) {
	entries := decodeIndex(indexBytes)
	reason := checkIndex(entries, size)
	if reason == nil && len(entries) == 0 && size > 0 {
		reason = errors.New("index is empty")
	}
	if reason == nil && size > 0 {
		reason = checkIndexAnchors(source, base, entries)
	}
	analysis := segmentAnalysis{indexReason: reason}
	start, startOffset := int64(0), base
	if n := len(entries); reason == nil && n > 0 {
		// The walk starts at the anchor and re-adds it.
		analysis.entries = append([]indexEntry(nil), entries[:n-1]...)
		start, startOffset = int64(entries[n-1].position), base+uint64(entries[n-1].relativeOffset)
	}
	if err := walkSegment(&analysis, source, base, start, startOffset, size, intervalBytes); err != nil {
		return analysis, err
	}
	if analysis.damage != nil && analysis.damage.position == start && start > 0 {
		// The anchor itself is not a record: the index contradicts the log.
		analysis = segmentAnalysis{indexReason: fmt.Errorf("anchor at byte %d: %v", start, analysis.damage.reason)}
		if err := walkSegment(&analysis, source, base, 0, base, size, intervalBytes); err != nil {
			return analysis, err
		}
	}
	analysis.indexRewrite = len(indexBytes)%indexEntryBytes != 0 || !sameEntries(analysis.entries, entries)
	return analysis, nil
}

// checkIndexAnchors confirms that every index entry points at the header of
// the record it names (the offset field, read without the body). It is one
// small read per entry, the same order of work as reading the index.
func checkIndexAnchors(source readerAt, base uint64, entries []indexEntry) error {
	var header [recordHeaderBytes]byte
	for i, entry := range entries {
		if _, err := source.readAt(header[:], int64(entry.position)); err != nil {
			return fmt.Errorf("entry %d: cannot read its record: %v", i, err)
		}
		if _, err := recordLength(header[:]); err != nil {
			return fmt.Errorf("entry %d: %v", i, err)
		}
		if got := binary.LittleEndian.Uint64(header[8:16]); got != base+uint64(entry.relativeOffset) {
			return fmt.Errorf("entry %d points at offset %d, want %d", i, got, base+uint64(entry.relativeOffset))
		}
	}
	return nil
}

// walkSegment walks from start to size, adding an index entry for the
// first record and then for each record at least intervalBytes past the
// previous entry (the writer's rule), and recording where the valid
// records end.
func walkSegment(analysis *segmentAnalysis, source readerAt, base uint64, start int64, startOffset uint64, size, intervalBytes int64) error {
	analysis.walkStart, analysis.walkStartOffset = start, startOffset
	walker := newRecordWalker(source, start, size, startOffset, nil)
	analysis.next, analysis.validEnd = startOffset, start
	lastEntryPosition := start
	for {
		record, position, err := walker.next()
		if errors.Is(err, errWalkEnd) {
			return nil
		}
		var damage *walkDamage
		if errors.As(err, &damage) {
			analysis.damage = damage
			return nil
		}
		if err != nil {
			return err
		}
		if position == start || position >= lastEntryPosition+intervalBytes {
			analysis.entries = append(analysis.entries, indexEntry{relativeOffset: uint32(record.Offset - base), position: uint32(position)})
			lastEntryPosition = position
		}
		analysis.next, analysis.validEnd = record.Offset+1, walker.position
	}
}

func sameEntries(a, b []indexEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// residueBudget bounds the bytes the residue probe may hash: twice the
// probed span plus 1 MiB, so a crafted tail costs at most a few walks.
func residueBudget(span int64) int64 { return 2*span + 1<<20 }

// probeResidue reports whether a valid record lies in [from, end): one with
// a good length and CRC and an offset that could follow expectedOffset
// given the bytes in between. It returns ErrUnverifiedTail when the bound
// is reached first.
func probeResidue(source readerAt, from, end int64, expectedOffset uint64) (bool, int64, error) {
	budget := residueBudget(end - from)
	const chunkBytes = 1 << 20
	chunk := make([]byte, chunkBytes+recordHeaderBytes)
	var scratch []byte
	for chunkStart := from; chunkStart+recordHeaderBytes <= end; chunkStart += chunkBytes {
		n, err := source.readAt(chunk[:min(int64(len(chunk)), end-chunkStart)], chunkStart)
		if err != nil && !errors.Is(err, io.EOF) {
			return false, 0, err
		}
		for i := 0; i < min(n-recordHeaderBytes+1, chunkBytes); i++ {
			position := chunkStart + int64(i)
			header := chunk[i : i+recordHeaderBytes]
			size, err := recordLength(header)
			if err != nil || position+int64(size) > end {
				continue
			}
			offset := binary.LittleEndian.Uint64(header[8:16])
			maxOffset := expectedOffset + uint64((position-from)/recordHeaderBytes) + 1
			if offset < expectedOffset || offset > maxOffset {
				continue
			}
			if budget -= int64(size); budget < 0 {
				return false, 0, fmt.Errorf("%w: probing from byte %d", ErrUnverifiedTail, from)
			}
			body := chunk[i:min(n, i+size)]
			if len(body) < size {
				if cap(scratch) < size {
					scratch = make([]byte, size)
				}
				if _, err := source.readAt(scratch[:size], position); err != nil {
					return false, 0, err
				}
				body = scratch[:size]
			}
			if crc32.Checksum(body[recordPrefixBytes:size], castagnoli) == binary.LittleEndian.Uint32(body[4:8]) {
				return true, position, nil
			}
		}
	}
	return false, 0, nil
}

// directoryListing is the parsed content of a log directory.
type directoryListing struct {
	logBases   []uint64 // sorted
	indexBases map[uint64]bool
	cutPending bool
	leftovers  []string // temporary files to remove once recovery succeeds
}

func listDirectory(fs vfs.FS, dir string) (directoryListing, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return directoryListing{}, err
	}
	listing := directoryListing{indexBases: map[uint64]bool{}}
	for _, name := range names {
		if base, ok := parseSegmentName(name, logSuffix); ok {
			listing.logBases = append(listing.logBases, base)
		} else if base, ok := parseSegmentName(name, indexSuffix); ok {
			listing.indexBases[base] = true
		} else if name == cutFileName {
			listing.cutPending = true
		} else if filepath.Ext(name) == tmpSuffix {
			listing.leftovers = append(listing.leftovers, name)
		}
	}
	return listing, nil
}

// readWholeFile reads a file that may be missing (nil, nil).
func readWholeFile(fs vfs.FS, path string) ([]byte, error) {
	size, exists, err := fs.Stat(path)
	if err != nil || !exists {
		return nil, err
	}
	file, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data := make([]byte, size)
	n, err := file.ReadAt(data, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data[:n], nil
}
