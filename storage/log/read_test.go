package log

// Tests of the file read path (read.go): a sequential scan reads each byte
// about once and searches an index once per segment, a scan resumes
// exactly where a callback stopped it, and a suffix cut invalidates the
// read hints taken before it.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// readCountingFS counts ReadAt calls and bytes on .log and .idx files.
type readCountingFS struct {
	vfs.FS
	logReads, logBytes, indexReads atomic.Int64
}

type readCountingFile struct {
	vfs.File
	fs *readCountingFS
}

func (c *readCountingFS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &readCountingFile{File: file, fs: c}, nil
}

func (c *readCountingFS) Create(name string) (vfs.File, error) { return c.wrap(c.FS.Create(name)) }
func (c *readCountingFS) OpenReadWrite(name string) (vfs.File, error) {
	return c.wrap(c.FS.OpenReadWrite(name))
}
func (c *readCountingFS) Open(name string) (vfs.File, error) { return c.wrap(c.FS.Open(name)) }

func (c *readCountingFS) reset() {
	c.logReads.Store(0)
	c.logBytes.Store(0)
	c.indexReads.Store(0)
}

func (f *readCountingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	switch {
	case strings.HasSuffix(f.Name(), logSuffix):
		f.fs.logReads.Add(1)
		f.fs.logBytes.Add(int64(n))
	case strings.HasSuffix(f.Name(), indexSuffix):
		f.fs.indexReads.Add(1)
	}
	return n, err
}

// fileBackedLog writes n records of bodySize bytes and reopens the log, so
// that every record is read from the files and sealed indexes from theirs.
func fileBackedLog(t *testing.T, fs vfs.FS, n, bodySize int, segmentBytes int64) (*Log, Options) {
	t.Helper()
	opts := memOptions(fs)
	opts.SegmentBytes = segmentBytes
	opts.TailCacheBytes = -1
	l := mustOpen(t, "/r", opts)
	for i := 0; i < n; i++ {
		if _, err := l.Append(context.Background(), []Entry{{Epoch: 1, Type: 1, Body: bytes.Repeat([]byte{byte(i)}, bodySize)}}, AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return mustOpen(t, "/r", opts), opts
}

// A sequential scan in small budgets, as recovery does, reads the log
// about once (not a fresh chunk from an index entry per call) and searches
// each sealed index once (where the scan enters the segment), not once per
// call.
func TestSequentialFileScanReadsEachByteAboutOnce(t *testing.T) {
	const records, bodySize = 1000, 1000
	fs := &readCountingFS{FS: vfs.NewMem()}
	l, _ := fileBackedLog(t, fs, records, bodySize, 256<<10)
	defer l.Close()
	segments := len(l.segments)
	if segments < 3 {
		t.Fatalf("%d segments; the test needs several", segments)
	}
	fs.reset()
	calls, delivered := 0, 0
	for from := l.FirstOffset(); from < l.Frontiers().Durable; calls++ {
		next, err := l.ScanDurable(from, 16<<10, func(record Record) error {
			if record.Offset != l.FirstOffset()+uint64(delivered) {
				t.Fatalf("record %d delivered after %d others", record.Offset, delivered)
			}
			if !bytes.Equal(record.Body, bytes.Repeat([]byte{byte(record.Offset)}, bodySize)) {
				t.Fatalf("record %d has the wrong body", record.Offset)
			}
			delivered++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		from = next
	}
	logBytes := int64(records * encodedSize(bodySize))
	if delivered != records {
		t.Fatalf("delivered %d records, want %d", delivered, records)
	}
	if got := fs.logBytes.Load(); got > logBytes+logBytes/4 {
		t.Fatalf("%d scan calls read %d bytes of a %d-byte log", calls, got, logBytes)
	}
	// A binary search over a sealed index of 64 entries is at most 7 reads.
	if got := fs.indexReads.Load(); got > int64(7*segments) {
		t.Fatalf("%d scan calls over %d segments made %d index reads", calls, segments, got)
	}
}

// A callback error stops the scan at the record it rejected, and the next
// scan delivers that record first; scans from other offsets are not
// misled by where the last one stopped.
func TestFileScanResumesWhereACallbackStopped(t *testing.T) {
	l, _ := fileBackedLog(t, vfs.NewMem(), 600, 500, 1<<20)
	defer l.Close()
	errStop := errors.New("stop")
	for _, stopAt := range []uint64{37, 38, 200} {
		next, err := l.ScanDurable(stopAt-30, 1<<20, func(record Record) error {
			if record.Offset == stopAt {
				return errStop
			}
			return nil
		})
		if !errors.Is(err, errStop) || next != stopAt {
			t.Fatalf("scan stopped at %d with %v, want %d and the callback's error", next, err, stopAt)
		}
		for _, from := range []uint64{stopAt, stopAt - 1, stopAt + 1} {
			var first Record
			if _, err := l.ScanDurable(from, 0, func(record Record) error { first = record; return nil }); err != nil {
				t.Fatal(err)
			}
			if first.Offset != from || !bytes.Equal(first.Body, bytes.Repeat([]byte{byte(from)}, 500)) {
				t.Fatalf("scan from %d delivered record %d first", from, first.Offset)
			}
		}
	}
}

// After a suffix cut the offsets above it name new records at new byte
// positions: a read hint from before the cut must not be used.
func TestFileScanAfterASuffixCutIgnoresOlderReadHints(t *testing.T) {
	l, _ := fileBackedLog(t, vfs.NewMem(), 600, 1000, 4<<20)
	defer l.Close()
	if next, err := l.ScanDurable(0, 100*1000-1, func(Record) error { return nil }); err != nil || next != 100 {
		t.Fatalf("first scan: next %d, %v", next, err) // leaves a read hint at 100
	}
	if err := l.TruncateAfter(50); err != nil {
		t.Fatal(err)
	}
	newBody := func(offset uint64) []byte { return bytes.Repeat([]byte{byte(offset), 0xee}, 1000) }
	for offset := uint64(50); offset < 400; offset++ { // evicts 100 from the tail cache
		if _, err := l.Append(context.Background(), []Entry{{Epoch: 1, Type: 1, Body: newBody(offset)}}, AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, hit := l.cache.copyOut(100, 101, 1, nil); hit {
		t.Fatal("offset 100 still cached; the test needs it read from the file")
	}
	var got Record
	if _, err := l.ScanDurable(100, 0, func(record Record) error {
		got = record
		got.Body = append([]byte(nil), record.Body...)
		return nil
	}); err != nil {
		t.Fatalf("scan from 100 after the cut: %v", err)
	}
	if got.Offset != 100 || !bytes.Equal(got.Body, newBody(100)) {
		t.Fatalf("scan from 100 after the cut delivered record %d with a %d-byte body", got.Offset, len(got.Body))
	}
}
