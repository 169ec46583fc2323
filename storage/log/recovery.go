package log

// Recovery rules, applied by Open in this order.
//
// What recovery trusts. After a crash the log can prove that a record was
// durable in two ways only: every segment but the last was synced to its
// end before the next one was created (rollover, writer.go), so a later
// segment on disk proves the earlier ones; and the durable-end record
// (durable.go) names an offset below which a completed fdatasync covered
// every record. Together they give the proven durable end, X: the larger
// of the last segment's base and the record's value (lowered to a pending
// cut, if any). Nothing proves anything about the bytes past X: a power
// loss keeps any subset of the writes issued after the last successful
// sync, and a failed fdatasync may have dropped some of them while later
// writes reached the disk, so damage followed by valid records is what a
// crash leaves there, not evidence of corruption.
//
// The rule: Open never refuses over damage that lies wholly at or past X,
// and refuses (ErrInteriorCorruption, deleting nothing) damage inside the
// proven prefix, below X.
//
//  0. A pending rebase (rebase.pending, seal.go) is carried out first:
//     every segment is removed and the log restarts empty at its base; a
//     pending cut is then moot.
//  1. A pending cut (latched-cut.pending) is carried out first: every
//     record at or after its offset is removed (cutSegmentFiles), before
//     anything reads the tail. Linux reports a writeback error once and may
//     drop the dirty pages, so nothing past the last good sync is trusted.
//     The record at the cut may itself be damaged (its bytes were dropped):
//     the walk that meets damage exactly where that record starts has found
//     the cut.
//  2. Each segment's index is checked against its log (checkIndex, then the
//     header of every entry used as an anchor must name the record the
//     entry says). An index that contradicts its log is dropped and rebuilt
//     from a walk of the log from byte 0. The index is never evidence about
//     the log: in the last segment only entries at or below X may anchor
//     the walk, so that every byte past X is read.
//  3. Every segment but the last is walked from its index anchor to its end
//     and must end cleanly exactly where the next segment begins; anything
//     else is damage inside the proven prefix.
//  4. The last non-empty segment (the tail) is walked from its last usable
//     anchor with every CRC checked, up to the first damage or its end. If
//     the walk stops below X (damage below X, or the records end below X),
//     proven records are missing: Open refuses. Otherwise the damage is a
//     torn tail, whatever follows it, and the tail is truncated there.
//     Bytes below an accepted anchor are not re-read at open: damage there
//     surfaces as ErrCorrupt when a read reaches it.
//  5. The recovered tail (log and index) is fdatasynced, and the directory
//     synced, before the frontiers are published: records found in the
//     page cache after a process crash are not durable until then. Then the
//     durable-end record is written durably with the recovered end.
//
// Zero-length segments: a zero-length last segment whose base continues
// the log is kept as the active segment; other trailing zero-length
// segments hold no bytes and are removed; a zero-length segment followed by
// a non-empty one is a gap in the offsets and refuses the open.
//
// Work is bounded by a walk of the files: index checks are linear in the
// index, walks are linear in the log, and no byte past the first damage is
// read.

import (
	"encoding/binary"
	"errors"
	"fmt"
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
// index is consistent, from byte 0 otherwise. Only entries naming offsets
// at or below anchorLimit may anchor the walk (the tail passes its proven
// durable end, sealed segments anchorsUnlimited); the entries above it are
// dropped and the walk adds them back from the records it reads.
func analyzeSegment(source readerAt, base uint64, size int64, indexBytes []byte, intervalBytes int64, anchorLimit uint64) (segmentAnalysis, error) {
	original := decodeIndex(indexBytes)
	entries := original
	if anchorLimit < base {
		anchorLimit = base
	}
	if used := usableAnchors(entries, base, anchorLimit); used < len(entries) {
		entries = entries[:used]
	}
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
	analysis.indexRewrite = len(indexBytes)%indexEntryBytes != 0 || !sameEntries(analysis.entries, original)
	return analysis, nil
}

// anchorsUnlimited lets every index entry anchor a walk (sealed segments).
const anchorsUnlimited = ^uint64(0)

// usableAnchors is how many leading entries name offsets at or below
// limit. Entries out of order are left to checkIndex.
func usableAnchors(entries []indexEntry, base, limit uint64) int {
	for i, entry := range entries {
		if base+uint64(entry.relativeOffset) > limit {
			return i
		}
	}
	return len(entries)
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

// directoryListing is the parsed content of a log directory.
type directoryListing struct {
	logBases      []uint64 // sorted
	indexBases    map[uint64]bool
	cutPending    bool
	rebasePending bool
	leftovers     []string // temporary files to remove once recovery succeeds
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
		} else if name == rebaseFileName {
			listing.rebasePending = true
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
