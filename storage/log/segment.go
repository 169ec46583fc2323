package log

// Segment files. A segment is <base>.log plus <base>.idx in the log's
// directory, <base> being the segment's first offset as 20 decimal digits,
// so that a sorted directory listing is in offset order. A segment's
// records are the dense offsets [base, next).

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/fibrilmq/fibril/storage/vfs"
)

const (
	logSuffix   = ".log"
	indexSuffix = ".idx"
	tmpSuffix   = ".tmp"
	baseDigits  = 20
)

func segmentName(base uint64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// parseSegmentName returns the base of a "<base>.log" or "<base>.idx" name.
func parseSegmentName(name, suffix string) (uint64, bool) {
	stem, ok := strings.CutSuffix(name, suffix)
	if !ok || len(stem) != baseDigits {
		return 0, false
	}
	base, err := strconv.ParseUint(stem, 10, 64)
	return base, err == nil
}

// segment is the part of a segment that readers share with the writer. The
// writer appends index entries and moves next and size forward after each
// flush; readers search under the read lock.
//
// Descriptors: the active segment keeps reader, a read-only descriptor
// open while it is active, so a read of the tail never opens a file. A
// sealed segment keeps none: it reads its .log and .idx through the
// node-wide descriptor cache (budget.go), which opens them on a miss and
// closes the least recently used beyond its bound. Once the segment is
// removed, reads get ErrOutOfRange.
//
// Only the active segment keeps its index in memory. A sealed segment's
// index is complete and synced on disk, and is searched there (a binary
// search of 8-byte reads), so memory does not grow with the length of the
// log.
type segment struct {
	base      uint64
	logPath   string
	indexPath string
	files     *fileCache // shared by every log of the node
	fs        vfs.FS

	mu         sync.RWMutex
	reader     vfs.File     // active segment only
	entries    []indexEntry // active segment only
	sealed     bool
	removed    bool
	logFile    *fileEntry // sealed segments only
	indexFile  *fileEntry // sealed segments only
	indexCount int        // entries in the sealed index file
	next       uint64     // offset after the last written record
	size       int64      // bytes of written records

	// hintMu guards the read hint (see read.go) and the generation of the
	// segment's contents it belongs to; a suffix cut starts a new one.
	hintMu     sync.Mutex
	hint       readHint
	generation uint64
}

// readHint is where a record starts: offset at byte position. The zero
// value names no record (offset 0 at byte 0 is the index's first entry
// anyway).
type readHint struct {
	offset   uint64
	position int64
}

// readStart is where a file scan for an offset starts walking.
type readStart struct {
	offset     uint64
	position   int64
	generation uint64
}

func newSegment(dir string, base uint64) *segment {
	return &segment{
		base:      base,
		logPath:   filepath.Join(dir, segmentName(base, logSuffix)),
		indexPath: filepath.Join(dir, segmentName(base, indexSuffix)),
		next:      base,
	}
}

// useFiles sets where the segment opens its files once sealed.
func (s *segment) useFiles(files *fileCache, fs vfs.FS) { s.files, s.fs = files, fs }

// bounds returns the written range of the segment.
func (s *segment) bounds() (next uint64, size int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.next, s.size
}

// locate returns where to start walking for offset: the last index entry at
// or below it.
func (s *segment) locate(offset uint64) (position int64, startOffset uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if offset < s.base {
		return 0, s.base
	}
	var entry indexEntry
	if s.sealed {
		entry = s.searchSealedIndex(uint32(offset - s.base))
	} else if len(s.entries) > 0 {
		entry = searchIndex(s.entries, uint32(offset-s.base))
	}
	return int64(entry.position), s.base + uint64(entry.relativeOffset)
}

// searchSealedIndex searches the sealed index file through the descriptor
// cache; the caller holds the read lock. Failing to open it falls back to
// the first entry, as a read failure does.
func (s *segment) searchSealedIndex(relativeOffset uint32) indexEntry {
	file, err := s.files.acquire(s.indexFile, s.fs)
	if err != nil {
		return indexEntry{}
	}
	defer s.files.release(s.indexFile)
	return searchIndexFile(file, s.indexCount, relativeOffset)
}

// searchIndexFile is searchIndex over an index file. A read failure falls
// back to the first entry, (0, 0): the walk from there is slower but
// checks every record anyway.
func searchIndexFile(file vfs.File, count int, relativeOffset uint32) indexEntry {
	var buffer [indexEntryBytes]byte
	var found indexEntry
	low, high := 0, count // the answer is the last entry at or below relativeOffset
	for low < high {
		middle := low + (high-low)/2
		if _, err := file.ReadAt(buffer[:], int64(middle)*indexEntryBytes); err != nil {
			return indexEntry{}
		}
		entry := decodeIndex(buffer[:])[0]
		if entry.relativeOffset <= relativeOffset {
			found, low = entry, middle+1
		} else {
			high = middle
		}
	}
	return found
}

// readStart returns where to walk from to read offset: the read hint when
// a previous scan stopped exactly there, else the last index entry at or
// below offset.
func (s *segment) readStart(offset uint64) readStart {
	s.hintMu.Lock()
	hint, generation := s.hint, s.generation
	s.hintMu.Unlock()
	if hint.offset == offset && hint.position > 0 {
		return readStart{offset: offset, position: hint.position, generation: generation}
	}
	position, startOffset := s.locate(offset)
	return readStart{offset: startOffset, position: position, generation: generation}
}

// rememberReadStart records where a scan stopped, unless the segment's
// contents changed since the scan began.
func (s *segment) rememberReadStart(generation uint64, hint readHint) {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	if generation == s.generation {
		s.hint = hint
	}
}

// forgetReadHints starts a new generation of the segment's contents (a
// suffix cut changed them): hints taken before are dropped and never
// stored.
func (s *segment) forgetReadHints() {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	s.generation++
	s.hint = readHint{}
}

// seal moves the segment's index out of memory and its descriptors into
// the descriptor cache: from now on its files are opened on demand. Its
// index must be complete and persisted.
func (s *segment) seal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.indexCount = len(s.entries)
	s.entries, s.sealed = nil, true
	if s.reader != nil {
		s.reader.Close()
		s.reader = nil
	}
	s.logFile, s.indexFile = newFileEntry(s.logPath), newFileEntry(s.indexPath)
}

// unseal makes the segment active again (after a cut) with entries in
// memory and reader as its descriptor.
func (s *segment) unseal(reader vfs.File, entries []indexEntry, next uint64, size int64) {
	s.forgetReadHints()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files.remove(s.logFile)
	s.files.remove(s.indexFile)
	if s.reader != nil {
		s.reader.Close()
	}
	s.reader, s.logFile, s.indexFile = reader, nil, nil
	s.entries, s.sealed, s.indexCount = entries, false, 0
	s.next, s.size = next, size
}

// readAt reads from the segment's log file, holding the read lock so that
// removal cannot close the descriptor mid-read.
func (s *segment) readAt(p []byte, position int64) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.reader != nil {
		return s.reader.ReadAt(p, position)
	}
	if s.removed || !s.sealed {
		return 0, fmt.Errorf("%w: segment %d removed", ErrOutOfRange, s.base)
	}
	file, err := s.files.acquire(s.logFile, s.fs)
	if err != nil {
		return 0, err
	}
	defer s.files.release(s.logFile)
	return file.ReadAt(p, position)
}

// closeReader closes the segment's descriptors (removal, or the log's
// close); later reads get ErrOutOfRange.
func (s *segment) closeReader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = true
	if s.reader != nil {
		s.reader.Close()
		s.reader = nil
	}
	s.files.remove(s.logFile)
	s.files.remove(s.indexFile)
}

// publish records the writer's progress in this segment.
func (s *segment) publish(next uint64, size int64, entries []indexEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next, s.size = next, size
	s.entries = append(s.entries, entries...)
}

// cutTo drops the segment's records from next on (the latch's cut of the
// active segment, whose file now ends at size).
func (s *segment) cutTo(next uint64, size int64) {
	s.forgetReadHints()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next, s.size = next, size
	kept := 0
	for kept < len(s.entries) && int64(s.entries[kept].position) < size {
		kept++
	}
	s.entries = s.entries[:kept]
}

// findSegment returns the segment holding offset from a list sorted by base.
func findSegment(segments []*segment, offset uint64) *segment {
	i := sort.Search(len(segments), func(i int) bool { return segments[i].base > offset })
	if i == 0 {
		return nil
	}
	return segments[i-1]
}

// readerAt is the read side recordWalker needs.
type readerAt interface {
	readAt(p []byte, position int64) (int, error)
}

// fileReader adapts a vfs.File to readerAt.
type fileReader struct{ file vfs.File }

func (f fileReader) readAt(p []byte, position int64) (int, error) { return f.file.ReadAt(p, position) }

// recordWalker reads records sequentially from position up to end, checking
// each one's length, CRC and offset (which must be dense from
// expectedOffset). It buffers reads in chunks.
type recordWalker struct {
	source         readerAt
	position       int64 // of the next record
	end            int64
	expectedOffset uint64
	buffer         []byte
	bufferStart    int64
	bufferLength   int
	readBytes      int // size of each read, at most len(buffer)
}

const walkChunkBytes = 64 << 10

func newRecordWalker(source readerAt, position, end int64, expectedOffset uint64, buffer []byte) *recordWalker {
	if cap(buffer) < walkChunkBytes {
		buffer = make([]byte, walkChunkBytes)
	}
	return &recordWalker{source: source, position: position, end: end, expectedOffset: expectedOffset, buffer: buffer[:cap(buffer)], readBytes: walkChunkBytes}
}

// errWalkEnd is returned by next at exactly the end.
var errWalkEnd = errors.New("end of records")

// walkDamage describes why a walk stopped before the end.
type walkDamage struct {
	position int64
	reason   error
}

func (d *walkDamage) Error() string {
	return fmt.Sprintf("damage at byte %d: %v", d.position, d.reason)
}

// next returns the next record (Body aliases the walker's buffer until the
// next call) and its position, errWalkEnd at the end, a *walkDamage when
// the bytes there are not the expected record, or a read error.
func (w *recordWalker) next() (Record, int64, error) {
	if w.position >= w.end {
		return Record{}, w.position, errWalkEnd
	}
	available := w.end - w.position
	if available < recordPrefixBytes {
		return Record{}, w.position, w.damage(errShortRecord)
	}
	b, err := w.window(recordPrefixBytes)
	if err != nil {
		return Record{}, w.position, err
	}
	size, err := recordLength(b)
	if err != nil {
		return Record{}, w.position, w.damage(err)
	}
	if int64(size) > available {
		return Record{}, w.position, w.damage(errShortRecord)
	}
	if b, err = w.window(size); err != nil {
		return Record{}, w.position, err
	}
	record, _, err := decodeRecord(b)
	if err != nil {
		return Record{}, w.position, w.damage(err)
	}
	if record.Offset != w.expectedOffset {
		return Record{}, w.position, w.damage(fmt.Errorf("offset %d, want %d", record.Offset, w.expectedOffset))
	}
	position := w.position
	w.position += int64(size)
	w.expectedOffset++
	return record, position, nil
}

func (w *recordWalker) damage(reason error) error {
	return &walkDamage{position: w.position, reason: reason}
}

// window returns n bytes at w.position, refilling the buffer when needed.
func (w *recordWalker) window(n int) ([]byte, error) {
	offsetInBuffer := w.position - w.bufferStart
	if w.position >= w.bufferStart && offsetInBuffer+int64(n) <= int64(w.bufferLength) {
		return w.buffer[offsetInBuffer : offsetInBuffer+int64(n)], nil
	}
	if size := max(n, w.readBytes); size > len(w.buffer) {
		w.buffer = make([]byte, size)
	}
	want := min(int64(max(n, w.readBytes)), w.end-w.position)
	read, err := w.source.readAt(w.buffer[:want], w.position)
	if err != nil && !(errors.Is(err, io.EOF) && int64(read) == want) {
		if errors.Is(err, io.EOF) {
			// The file is shorter than the caller believed.
			return nil, w.damage(errShortRecord)
		}
		return nil, err
	}
	w.bufferStart, w.bufferLength = w.position, read
	if read < n {
		return nil, w.damage(errShortRecord)
	}
	return w.buffer[:n], nil
}
