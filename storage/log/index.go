package log

// Index format. Each segment has a sparse index file, <base>.idx, next to
// its <base>.log. It is a sequence of 8-byte entries, little-endian, part
// of the on-disk format:
//
//	offset  size  field
//	0       4     relative offset: record offset minus the segment's base
//	4       4     position: byte position of that record in the .log file
//
// The first entry of a non-empty segment is (0, 0). A new entry is added
// for the first record that starts at least Options.IndexIntervalBytes
// after the previous entry's record. Entries strictly increase in both
// fields. A trailing partial entry is ignored.
//
// The index is derived from the log and is never evidence about it: when an
// index contradicts its log (an entry past the log's end, entries out of
// order, a wrong first entry, or the anchor record not found where the
// index says), recovery drops it and rebuilds it from a walk of the log
// from byte 0.

import (
	"encoding/binary"
	"fmt"
	"sort"
)

const indexEntryBytes = 8

// indexEntry maps one record offset to its byte position in a segment.
type indexEntry struct {
	relativeOffset uint32
	position       uint32
}

// decodeIndex parses an index file's bytes, ignoring a partial last entry.
func decodeIndex(b []byte) []indexEntry {
	entries := make([]indexEntry, 0, len(b)/indexEntryBytes)
	for i := 0; i+indexEntryBytes <= len(b); i += indexEntryBytes {
		entries = append(entries, indexEntry{
			relativeOffset: binary.LittleEndian.Uint32(b[i : i+4]),
			position:       binary.LittleEndian.Uint32(b[i+4 : i+8]),
		})
	}
	return entries
}

// appendIndexEntries appends the encoding of entries to dst.
func appendIndexEntries(dst []byte, entries []indexEntry) []byte {
	for _, entry := range entries {
		dst = binary.LittleEndian.AppendUint32(dst, entry.relativeOffset)
		dst = binary.LittleEndian.AppendUint32(dst, entry.position)
	}
	return dst
}

// checkIndex reports why entries cannot describe a log of logSize bytes, or
// nil when they may. It checks only what needs no log reads; the caller
// then confirms the anchor (last entry) against the log.
func checkIndex(entries []indexEntry, logSize int64) error {
	if len(entries) == 0 {
		return nil
	}
	if entries[0] != (indexEntry{}) {
		return fmt.Errorf("first entry is (%d, %d), want (0, 0)", entries[0].relativeOffset, entries[0].position)
	}
	for i, entry := range entries {
		if int64(entry.position) >= logSize {
			return fmt.Errorf("entry %d at position %d is past the log end %d", i, entry.position, logSize)
		}
		if i == 0 {
			continue
		}
		previous := entries[i-1]
		if entry.relativeOffset <= previous.relativeOffset || entry.position <= previous.position {
			return fmt.Errorf("entry %d out of order", i)
		}
	}
	return nil
}

// searchIndex returns the last entry at or below relativeOffset; entries
// must be non-empty and start at (0, 0).
func searchIndex(entries []indexEntry, relativeOffset uint32) indexEntry {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].relativeOffset > relativeOffset })
	if i == 0 {
		return indexEntry{}
	}
	return entries[i-1]
}
