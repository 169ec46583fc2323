package log

// Tests of the node-wide budget (budget.go): the descriptor cache of sealed
// segments, the shared tail-cache memory and the sync counters.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// descriptorFS counts the descriptors open on segment files right now and
// the most open at once.
type descriptorFS struct {
	vfs.FS
	open, peak atomic.Int64
}

type descriptorFile struct {
	vfs.File
	fs     *descriptorFS
	closed atomic.Bool
}

func (d *descriptorFS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(file.Name(), logSuffix) && !strings.HasSuffix(file.Name(), indexSuffix) {
		return file, nil
	}
	open := d.open.Add(1)
	for peak := d.peak.Load(); open > peak && !d.peak.CompareAndSwap(peak, open); peak = d.peak.Load() {
	}
	return &descriptorFile{File: file, fs: d}, nil
}

func (d *descriptorFS) Create(name string) (vfs.File, error) { return d.wrap(d.FS.Create(name)) }
func (d *descriptorFS) OpenReadWrite(name string) (vfs.File, error) {
	return d.wrap(d.FS.OpenReadWrite(name))
}
func (d *descriptorFS) Open(name string) (vfs.File, error) { return d.wrap(d.FS.Open(name)) }

func (f *descriptorFile) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		f.fs.open.Add(-1)
	}
	return f.File.Close()
}

// A log with many more sealed segments than the descriptor bound reads all
// of them, every record checked (CRC, offset) as it is read, while never
// holding more than the bound open for sealed segments; a record damaged
// in a sealed segment whose descriptor was evicted and reopened is still
// caught.
func TestSealedSegmentsReadThroughABoundedDescriptorCache(t *testing.T) {
	const limit = 4
	mem := vfs.NewMem()
	fs := &descriptorFS{FS: mem}
	opts := memOptions(fs)
	opts.SegmentBytes = 1024
	opts.TailCacheBytes = -1
	opts.Budget = NewBudget(BudgetOptions{OpenSegmentFiles: limit})
	l := mustOpen(t, "/fd", opts)
	appendN(t, l, 400, AfterFlush, "fd")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, "/fd", opts) // an empty tail cache: every read goes to the files
	defer l.Close()
	segments := len(l.segments)
	if segments < 4*limit {
		t.Fatalf("%d segments; the test wants many more than the bound of %d descriptors", segments, limit)
	}
	const activeDescriptors = 3 // the active segment's reader, log writer and index writer
	fs.peak.Store(fs.open.Load())
	for round := 0; round < 2; round++ {
		records := scanAll(t, l, 0, true)
		if len(records) != 400 {
			t.Fatalf("round %d: %d records, want 400", round, len(records))
		}
		for i, record := range records {
			if record.Offset != uint64(i) || !bytes.Equal(record.Body, body(uint64(i), "fd")) {
				t.Fatalf("round %d: record %d is %+v", round, i, record)
			}
		}
	}
	stats := l.Budget().Stats()
	if stats.OpenSegmentFiles > limit || stats.SegmentFileEvictions == 0 || stats.SegmentFileMisses < uint64(segments-1) {
		t.Fatalf("descriptor cache stats %+v over %d segments", stats, segments)
	}
	if peak := fs.peak.Load() - activeDescriptors; peak > limit {
		t.Fatalf("%d descriptors of sealed segments open at once, bound %d", peak, limit)
	}

	// Damage a record of the first segment, whose descriptor is long
	// evicted: the reopened descriptor reads it and the check catches it.
	path := l.segments[0].logPath
	data, _ := mem.ReadFile(path)
	data[len(data)-3] ^= 0xff
	mem.WriteFile(path, data)
	last := l.segments[1].base - 1
	if _, err := l.ScanDurable(last, 1<<10, func(Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged record read through a reopened descriptor: %v, want ErrCorrupt", err)
	}
}

// Readers racing over many sealed segments with a tiny bound: no
// descriptor is closed under a read (a closed descriptor would fail the
// read), and every record comes back intact.
func TestDescriptorCacheUnderConcurrentReads(t *testing.T) {
	opts := memOptions(vfs.NewMem())
	opts.SegmentBytes = 1024
	opts.TailCacheBytes = -1
	opts.Budget = NewBudget(BudgetOptions{OpenSegmentFiles: 2})
	l := mustOpen(t, "/fd", opts)
	appendN(t, l, 300, AfterFlush, "fd")
	l.Close()
	l = mustOpen(t, "/fd", opts)
	defer l.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for reader := 0; reader < 4; reader++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := uint64(reader * 7); from < 300; {
				next, err := l.ScanDurable(from, 200, func(record Record) error {
					if !bytes.Equal(record.Body, body(record.Offset, "fd")) {
						return fmt.Errorf("record %d is %q", record.Offset, record.Body)
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				from = next
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if stats := l.Budget().Stats(); stats.OpenSegmentFiles > 2 {
		t.Fatalf("%d descriptors cached after the reads, bound 2", stats.OpenSegmentFiles)
	}
}

// Logs sharing one tail-cache budget stay within it (beyond it only by
// the blocks a staging group needed), take blocks back from the log
// holding the most, and every log still reads back whole: what was evicted
// comes from the files.
func TestTailCacheBudgetIsSharedByEveryLog(t *testing.T) {
	const limit = 512 << 10
	budget := NewBudget(BudgetOptions{TailCacheBytes: limit})
	logs := make([]*Log, 6)
	for i := range logs {
		opts := memOptions(vfs.NewMem())
		opts.SegmentBytes = 1 << 20
		opts.TailCacheBytes = 1 << 20 // 64 KiB blocks, at most 16 per log
		opts.Budget = budget
		logs[i] = mustOpen(t, fmt.Sprintf("/budget/%d", i), opts)
		defer logs[i].Close()
	}
	payload := bytes.Repeat([]byte("b"), 1000)
	for round := 0; round < 300; round++ {
		for _, l := range logs {
			if _, err := l.Append(context.Background(), []Entry{{Epoch: 1, Type: 1, Body: payload}}, AfterFlush); err != nil {
				t.Fatal(err)
			}
		}
		stats := budget.Stats()
		if overdraft := stats.TailCacheBytes - limit; overdraft > 0 && overdraft > int64(len(logs))*64<<10 {
			t.Fatalf("round %d: %d bytes cached, limit %d", round, stats.TailCacheBytes, limit)
		}
	}
	var held int64
	for _, l := range logs {
		held += l.Status().TailCacheBytes
	}
	stats := budget.Stats()
	if stats.TailCacheEvictions == 0 || held > stats.TailCacheBytes || stats.Logs != int64(len(logs)) {
		t.Fatalf("budget stats %+v, logs hold %d bytes", stats, held)
	}
	for i, l := range logs {
		records := scanAll(t, l, 0, false)
		if len(records) != 300 || !bytes.Equal(records[0].Body, payload) || !bytes.Equal(records[299].Body, payload) {
			t.Fatalf("log %d: %d records read back", i, len(records))
		}
	}
	if stats := budget.Stats(); stats.TailCacheHits == 0 || stats.TailCacheMisses == 0 {
		t.Fatalf("budget stats after the reads %+v: want both hits and misses", stats)
	}
}

// Every fdatasync and directory sync a log makes is counted, per log and
// in its budget across logs.
func TestSyncsAreCountedPerLogAndNodeWide(t *testing.T) {
	budget := NewBudget(BudgetOptions{})
	var logs []*Log
	for i := 0; i < 2; i++ {
		opts := memOptions(vfs.NewMem())
		opts.Budget = budget
		logs = append(logs, mustOpen(t, fmt.Sprintf("/syncs/%d", i), opts))
	}
	before := budget.Stats()
	var perLog uint64
	for _, l := range logs {
		opened := l.Status().FileSyncs
		appendN(t, l, 5, AfterFsync, "s")
		status := l.Status()
		if status.FileSyncs-opened < 5 {
			t.Fatalf("five AfterFsync appends one at a time made %d fdatasyncs", status.FileSyncs-opened)
		}
		perLog += status.FileSyncs - opened
	}
	after := budget.Stats()
	if after.FileSyncs-before.FileSyncs != perLog || after.DirectorySyncs < 2 {
		t.Fatalf("node-wide %d file syncs over the appends, per log %d; %d directory syncs", after.FileSyncs-before.FileSyncs, perLog, after.DirectorySyncs)
	}
	for _, l := range logs {
		l.Close()
	}
	if budget.Stats().Logs != 0 {
		t.Fatalf("closed logs still counted: %+v", budget.Stats())
	}
}
