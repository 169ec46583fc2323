package log

// Deterministic tests of how the log proves its durable end after a crash
// (recovery.go, durable.go) and of the latch when the disk refuses the cut
// file too (ErrCutNotRecorded).

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// failHoldFS runs the first *.log sync after arm (which an injected fault
// makes fail) and then holds it before returning, so that the writer keeps
// writing while nobody yet knows the sync failed: the writes issued then
// land after the failed sync, as they do on Linux when they race it.
type failHoldFS struct {
	vfs.FS
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

type failHoldFile struct {
	vfs.File
	fs *failHoldFS
}

func newFailHoldFS(fs vfs.FS) *failHoldFS {
	return &failHoldFS{FS: fs, held: make(chan struct{}), release: make(chan struct{})}
}

func (h *failHoldFS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &failHoldFile{File: file, fs: h}, nil
}

func (h *failHoldFS) Create(name string) (vfs.File, error) { return h.wrap(h.FS.Create(name)) }
func (h *failHoldFS) OpenReadWrite(name string) (vfs.File, error) {
	return h.wrap(h.FS.OpenReadWrite(name))
}
func (h *failHoldFS) Open(name string) (vfs.File, error) { return h.wrap(h.FS.Open(name)) }

func (f *failHoldFile) Sync() error {
	err := f.File.Sync()
	if strings.HasSuffix(f.Name(), logSuffix) && f.fs.armed.CompareAndSwap(true, false) {
		close(f.fs.held)
		<-f.fs.release
	}
	return err
}

// The shape of the randomized failure: an fdatasync fails (dropping the
// bytes it covered), the writer writes more before it learns of it, and
// the power goes with those later writes on the disk: durable records, a
// hole, valid records. Nothing proved the hole durable, so Open truncates
// there and serves every confirmed record; before the durable-end record
// existed it refused with interior corruption.
func TestFailedSyncLaterWritesPowerLossKeepingThem(t *testing.T) {
	mem := vfs.NewMem()
	hold := newFailHoldFS(mem)
	opts := memOptions(hold)
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/shape", opts)
	appendN(t, l, 3, AfterFsync, "confirmed")
	confirmed := l.Frontiers().Durable
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log"})
	hold.armed.Store(true)
	failed := make(chan error, 1)
	go func() {
		_, err := l.Append(context.Background(), []Entry{{Epoch: 1, Type: 7, Body: []byte("dropped by the failed sync")}}, AfterFsync)
		failed <- err
	}()
	<-hold.held // the sync failed inside; the log does not know yet
	later := l.Frontiers().Written
	appendN(t, l, 4, AfterFlush, "later") // written after the failed sync
	if got := l.Frontiers().Written; got != later+4 {
		t.Fatalf("written_next %d after four later writes, want %d", got, later+4)
	}
	powerLoss := mem.CrashClone(vfs.CrashOptions{KeepUnsynced: true})
	assertHoleThenRecords(t, powerLoss, "/shape", confirmed)
	checkOpensAt(t, "power loss keeping the later writes", powerLoss, opts, confirmed)

	close(hold.release)
	if err := <-failed; !isLatched(err) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("the append whose sync failed: %v, want ErrLatched wrapping EIO", err)
	}
	afterLatch := mem.CrashClone(vfs.CrashOptions{KeepUnsynced: true})
	syncedOnly := mem.CrashClone(vfs.CrashOptions{})
	l.Close()
	mem.ClearFaults()
	checkOpensAt(t, "power loss after the latch, keeping every write", afterLatch, opts, confirmed)
	checkOpensAt(t, "power loss after the latch, synced bytes only", syncedOnly, opts, confirmed)
	checkOpensAt(t, "process restart after the latch", mem, opts, confirmed)
}

// assertHoleThenRecords checks the image is the shape under test: the
// record at durable is gone and a valid record lies after it.
func assertHoleThenRecords(t *testing.T, image *vfs.Mem, dir string, durable uint64) {
	t.Helper()
	data, err := image.ReadFile(dir + "/" + segmentName(0, logSuffix))
	if err != nil {
		t.Fatal(err)
	}
	position := 0
	for offset := uint64(0); offset < durable; offset++ {
		_, size, err := decodeRecord(data[position:])
		if err != nil {
			t.Fatalf("durable record %d does not decode: %v", offset, err)
		}
		position += size
	}
	if _, _, err := decodeRecord(data[position:]); err == nil {
		t.Fatal("the record the failed sync covered survived; the image is not the shape under test")
	}
	survivor := false
	for i := position + 1; i+recordHeaderBytes <= len(data) && !survivor; i++ {
		record, _, err := decodeRecord(data[i:])
		survivor = err == nil && record.Offset > durable
	}
	if !survivor {
		t.Fatal("no valid record follows the hole; the image is not the shape under test")
	}
}

// checkOpensAt opens a copy of the image's log and wants exactly the
// records below end, those appended by appendN.
func checkOpensAt(t *testing.T, name string, image *vfs.Mem, opts Options, end uint64) {
	t.Helper()
	opts.FS = image
	reopened, err := Open("/shape", opts)
	if err != nil {
		t.Fatalf("%s: open: %v", name, err)
	}
	defer reopened.Close()
	if got := reopened.Frontiers(); got != (Frontiers{Staged: end, Written: end, Durable: end}) {
		t.Fatalf("%s: frontiers %+v, want all at %d", name, got, end)
	}
	for _, record := range scanAll(t, reopened, 0, true) {
		if !bytes.Equal(record.Body, body(record.Offset, "confirmed")) {
			t.Fatalf("%s: record %d is %q", name, record.Offset, record.Body)
		}
	}
}

// Damage inside the proven durable prefix still refuses, with every byte
// kept: here the last synced record is zeroed after a clean close (bytes
// below the last index entry are not re-read at open; see recovery.go).
func TestDamageInsideTheProvenPrefixRefuses(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/shape", opts)
	appendN(t, l, 5, AfterFsync, "confirmed")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := "/shape/" + segmentName(0, logSuffix)
	data, _ := mem.ReadFile(path)
	positions := recordPositions(t, data)
	clear(data[positions[4] : positions[4]+10]) // record 4, the last
	mem.WriteFile(path, data)
	before := snapshotFiles(t, mem)
	if _, err := Open("/shape", opts); !errors.Is(err, ErrInteriorCorruption) {
		t.Fatalf("open over damage below the proven end: %v, want ErrInteriorCorruption", err)
	}
	if after := snapshotFiles(t, mem); len(after) != len(before) || after[path] != before[path] {
		t.Fatal("a refused open changed the files")
	}
}

// When the disk refuses even latched-cut.pending, the latch error names
// it (ErrCutNotRecorded, with the device error), Status says so as soon as
// a watcher can see the latch, and neither a process restart nor a power
// loss serves a record past the cut.
func TestCutNotRecordedIsNamedAndNothingPastItIsServed(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	opts.SegmentBytes = 1 << 20
	l := mustOpen(t, "/shape", opts)
	appendN(t, l, 3, AfterFsync, "confirmed")
	cut := l.Frontiers().Durable
	watch := l.Watch(FrontierDurable)
	defer watch.Close()
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "/shape/*", Sticky: true})
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "/shape", Sticky: true})
	_, err := l.Append(context.Background(), []Entry{{Epoch: 1, Type: 7, Body: []byte("refused")}}, AfterFsync)
	for _, want := range []error{ErrLatched, ErrCutNotRecorded, syscall.EIO} {
		if !errors.Is(err, want) {
			t.Fatalf("append on a disk that refuses the cut: %v, want it to wrap %v", err, want)
		}
	}
	<-watch.C()
	if status := l.Status(); !status.Latched || !errors.Is(status.LastError, ErrCutNotRecorded) {
		t.Fatalf("status once the latch is visible: %+v, want latched naming ErrCutNotRecorded", status)
	}
	if _, pending, _ := readCutFile(mem, "/shape"); pending {
		t.Fatal("a cut file exists although every sync failed")
	}
	images := map[string]*vfs.Mem{
		"power loss, synced bytes only":    mem.CrashClone(vfs.CrashOptions{}),
		"power loss, every write kept":     mem.CrashClone(vfs.CrashOptions{KeepUnsynced: true}),
		"power loss, a random prefix kept": mem.CrashClone(vfs.CrashOptions{Rand: fixedRand(7), TearLastWrite: true}),
	}
	if err := l.Close(); !isLatched(err) {
		t.Fatalf("close: %v", err)
	}
	mem.ClearFaults()
	images["process restart"] = mem
	for name, image := range images {
		checkOpensAt(t, name, image, opts, cut)
	}
}

// fixedRand is a vfs.Rand that always returns the same value.
type fixedRand uint64

func (r fixedRand) Uint64() uint64 { return uint64(r) }

// findRecordPosition, as a pending cut uses it: damage exactly where the
// target record starts is the cut (its bytes were dropped); damage before
// it is not.
func TestFindRecordPositionAtADamagedTarget(t *testing.T) {
	var data []byte
	for offset := uint64(0); offset < 3; offset++ {
		data = appendRecord(data, offset, 1, 1, []byte("body"))
	}
	second := encodedSize(4)
	damaged := append(append([]byte(nil), data[:second]...), make([]byte, second)...)
	damaged = append(damaged, appendRecord(nil, 2, 1, 1, []byte("body"))...)
	source := &countingSource{data: damaged}
	position, found, err := findRecordPosition(source, 0, int64(len(damaged)), 0, 1)
	if err != nil || !found || position != int64(second) {
		t.Fatalf("cut at the damaged record 1: position %d, found %v, err %v; want %d, true", position, found, err, second)
	}
	if _, found, err := findRecordPosition(source, 0, int64(len(damaged)), 0, 2); err != nil || found {
		t.Fatalf("cut above the damage: found %v, err %v; want not found", found, err)
	}
	if position, found, _ := findRecordPosition(&countingSource{data: data}, 0, int64(len(data)), 0, 3); !found || position != int64(len(data)) {
		t.Fatalf("cut at the end: position %d, found %v", position, found)
	}
}

// The durable-end record never leads the truth: a note taken before a
// durable record (which may lower the value, at a cut) is never written
// after it, and a note is written only above the value recorded.
func TestDurableEndNotesNeverOutliveALoweringRecord(t *testing.T) {
	mem := vfs.NewMem()
	mem.MkdirAll("/d")
	record, err := openDurableEnd(mem, "/d")
	if err != nil {
		t.Fatal(err)
	}
	defer record.close()
	if err := record.recordDurably(50); err != nil {
		t.Fatal(err)
	}
	stale := record.generation.Load()
	if err := record.recordDurably(10); err != nil { // a cut lowers it
		t.Fatal(err)
	}
	if err := record.note(50, stale); err != nil {
		t.Fatal(err)
	}
	if value, ok, _ := readDurableEnd(mem, "/d"); !ok || value != 10 {
		t.Fatalf("after a stale note: %d (valid %v), want 10", value, ok)
	}
	current := record.generation.Load()
	for _, offset := range []uint64{20, 15, 30} {
		if err := record.note(offset, current); err != nil {
			t.Fatal(err)
		}
	}
	if value, _, _ := readDurableEnd(mem, "/d"); value != 30 {
		t.Fatalf("after notes 20, 15, 30: %d, want 30", value)
	}
}

// After a suffix cut below the proven end, a power loss keeping every
// unsynced write opens at or past the cut: the lowered record holds.
func TestSuffixCutLowersTheProvenEnd(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	l := mustOpen(t, "/cut", opts)
	appendN(t, l, 50, AfterFsync, "confirmed")
	if err := l.TruncateAfter(10); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 5, AfterFlush, "confirmed")
	if value, _, _ := readDurableEnd(mem, "/cut"); value > 15 {
		t.Fatalf("durable-end record %d after a cut to 10 and five unsynced records", value)
	}
	image := mem.CrashClone(vfs.CrashOptions{Rand: fixedRand(3), TearLastWrite: true})
	l.Close()
	opts.FS = image
	reopened, err := Open("/cut", opts)
	if err != nil {
		t.Fatalf("open after a cut and a power loss: %v", err)
	}
	defer reopened.Close()
	if got := reopened.Frontiers().Durable; got < 10 || got > 15 {
		t.Fatalf("reopened at %d, want between the cut 10 and 15", got)
	}
}
