package vfs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
)

// conformance runs the same checks against every implementation.
func conformance(t *testing.T, fs FS, dir string) {
	t.Helper()
	if err := fs.MkdirAll(filepath.Join(dir, "a", "b")); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "a", "file")
	file, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.Write([]byte("hello ")); err != nil {
		t.Fatal(err)
	}
	if _, err := file.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("W"), 6); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
	size, err := file.Size()
	if err != nil || size != 11 {
		t.Fatalf("size %d %v, want 11", size, err)
	}
	buffer := make([]byte, 11)
	if _, err := file.ReadAt(buffer, 0); err != nil || string(buffer) != "hello World" {
		t.Fatalf("read %q %v", buffer, err)
	}
	if n, err := file.ReadAt(buffer, 6); n != 5 || err != io.EOF {
		t.Fatalf("short read n=%d err=%v, want 5 EOF", n, err)
	}
	if err := file.Truncate(5); err != nil {
		t.Fatal(err)
	}
	if size, _ := file.Size(); size != 5 {
		t.Fatalf("size after truncate %d", size)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := fs.Stat(filepath.Join(dir, "a", "missing")); exists {
		t.Fatal("missing file exists")
	}
	if size, exists, err := fs.Stat(name); !exists || size != 5 || err != nil {
		t.Fatalf("stat %d %v %v", size, exists, err)
	}
	readOnly, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readOnly.Write([]byte("x")); err == nil {
		t.Fatal("write to read-only file succeeded")
	}
	readOnly.Close()
	readWrite, err := fs.OpenReadWrite(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readWrite.WriteAt([]byte("!"), 5); err != nil {
		t.Fatal(err)
	}
	readWrite.Close()
	if _, err := fs.OpenReadWrite(filepath.Join(dir, "nope")); !errors.Is(err, ErrNotExist) {
		t.Fatalf("open missing: %v, want ErrNotExist", err)
	}
	renamed := filepath.Join(dir, "a", "renamed")
	if err := fs.Rename(name, renamed); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	names, err := fs.ReadDir(filepath.Join(dir, "a"))
	if err != nil || len(names) != 2 || names[0] != "b" || names[1] != "renamed" {
		t.Fatalf("readdir %v %v", names, err)
	}
	if err := fs.Remove(renamed); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := fs.Stat(renamed); exists {
		t.Fatal("removed file still exists")
	}
}

func TestOSConformance(t *testing.T) { conformance(t, OS, t.TempDir()) }

func TestMemConformance(t *testing.T) { conformance(t, NewMem(), "/data") }

func TestOSPreallocateKeepsSize(t *testing.T) {
	file, err := OS.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := file.(Preallocator).Preallocate(1 << 20); err != nil {
		t.Skipf("fallocate unsupported here: %v", err)
	}
	if size, _ := file.Size(); size != 0 {
		t.Fatalf("size after preallocate %d, want 0", size)
	}
}

// writeSynced creates a durable file holding data, through the FS API.
func writeSynced(t *testing.T, m *Mem, name string, data []byte) File {
	t.Helper()
	file, err := m.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir(filepath.Dir(name)); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestCrashKeepsOnlySyncedBytes(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	file := writeSynced(t, m, "/d/f", []byte("durable"))
	file.WriteAt([]byte("-lost"), 7)
	clone := m.CrashClone(CrashOptions{})
	got, err := clone.ReadFile("/d/f")
	if err != nil || string(got) != "durable" {
		t.Fatalf("after crash %q %v, want durable", got, err)
	}
	live, _ := m.ReadFile("/d/f")
	if string(live) != "durable-lost" {
		t.Fatalf("original changed by clone: %q", live)
	}
}

func TestCrashDropsUnsyncedNames(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	writeSynced(t, m, "/d/kept", []byte("k"))
	unnamed, _ := m.Create("/d/unnamed")
	unnamed.WriteAt([]byte("data"), 0)
	unnamed.Sync() // data synced, but the name never was
	m.Rename("/d/kept", "/d/moved")
	clone := m.CrashClone(CrashOptions{})
	names := clone.Names()
	if len(names) != 1 || names[0] != "/d/kept" {
		t.Fatalf("names after crash %v, want [/d/kept]", names)
	}
	m.SyncDir("/d")
	names = m.CrashClone(CrashOptions{}).Names()
	if len(names) != 2 || names[0] != "/d/moved" || names[1] != "/d/unnamed" {
		t.Fatalf("names after SyncDir and crash %v", names)
	}
}

func TestCrashWithRandKeepsOrderedPrefix(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		m := NewMem()
		m.MkdirAll("/d")
		file := writeSynced(t, m, "/d/f", []byte("0"))
		for i := 1; i < 10; i++ {
			file.WriteAt([]byte{byte('0' + i)}, int64(i))
		}
		got, _ := m.CrashClone(CrashOptions{Rand: rand.New(rand.NewPCG(seed, 1))}).ReadFile("/d/f")
		if !bytes.HasPrefix([]byte("0123456789"), got) || len(got) == 0 {
			t.Fatalf("seed %d: image %q is not a prefix of the writes", seed, got)
		}
	}
}

func TestCrashTearsLastWrite(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	file := writeSynced(t, m, "/d/f", []byte("ab"))
	file.WriteAt([]byte("cdefgh"), 2)
	got, _ := m.CrashClone(CrashOptions{TearLastWrite: true}).ReadFile("/d/f")
	if string(got) != "abcde" {
		t.Fatalf("torn image %q, want abcde", got)
	}
}

func TestFaultNthWriteOnceAndSticky(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	logFile, _ := m.Create("/d/1.log")
	other, _ := m.Create("/d/1.idx")
	m.InjectFault(FaultRule{Op: FaultWrite, Pattern: "*.log", Nth: 2, Err: syscall.ENOSPC})
	if _, err := other.Write([]byte("x")); err != nil {
		t.Fatalf("non-matching file failed: %v", err)
	}
	if _, err := logFile.Write([]byte("a")); err != nil {
		t.Fatalf("first write failed: %v", err)
	}
	if _, err := logFile.Write([]byte("b")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("second write: %v, want ENOSPC", err)
	}
	if _, err := logFile.Write([]byte("c")); err != nil {
		t.Fatalf("one-shot fault fired again: %v", err)
	}
	m.InjectFault(FaultRule{Op: FaultSync, Pattern: "/d/1.log", Sticky: true})
	for i := 0; i < 3; i++ {
		if err := logFile.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("sticky sync %d: %v, want EIO", i, err)
		}
	}
	if m.FaultsFired() != 4 {
		t.Fatalf("fired %d, want 4", m.FaultsFired())
	}
	m.ClearFaults()
	if err := logFile.Sync(); err != nil {
		t.Fatalf("sync after clear: %v", err)
	}
}

func TestFailedSyncLosesPendingWrites(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	file := writeSynced(t, m, "/d/f", []byte("old"))
	file.WriteAt([]byte("new"), 3)
	m.InjectFault(FaultRule{Op: FaultSync})
	if err := file.Sync(); err == nil {
		t.Fatal("injected sync fault did not fire")
	}
	if err := file.Sync(); err != nil {
		t.Fatalf("retry: %v", err)
	}
	got, _ := m.CrashClone(CrashOptions{}).ReadFile("/d/f")
	if string(got) != "old" {
		t.Fatalf("after failed sync and crash %q, want old", got)
	}
}

func TestPartialWrite(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	file, _ := m.Create("/d/f")
	m.InjectFault(FaultRule{Op: FaultWrite, PartialWrite: true})
	n, err := file.WriteAt([]byte("abcd"), 0)
	if n != 2 || err == nil {
		t.Fatalf("partial write n=%d err=%v", n, err)
	}
	got, _ := m.ReadFile("/d/f")
	if string(got) != "ab" {
		t.Fatalf("contents %q, want ab", got)
	}
}

// KeepUnsynced keeps every pending write, but not the ones a failed sync
// discarded: the image after a failed sync followed by later writes holds
// the durable bytes, a hole, and the later writes.
func TestCrashKeepUnsyncedKeepsWritesAfterAFailedSync(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d")
	file := writeSynced(t, m, "/d/f", []byte("ab"))
	file.WriteAt([]byte("cd"), 2)
	m.InjectFault(FaultRule{Op: FaultSync})
	if err := file.Sync(); err == nil {
		t.Fatal("injected sync fault did not fire")
	}
	file.WriteAt([]byte("ef"), 4)
	got, _ := m.CrashClone(CrashOptions{KeepUnsynced: true}).ReadFile("/d/f")
	if string(got) != "ab\x00\x00ef" {
		t.Fatalf("image %q, want the durable bytes, a hole, then the later write", got)
	}
}

func TestCountSyncs(t *testing.T) {
	var first, second SyncCounter
	m := NewMem()
	fs := CountSyncs(CountSyncs(m, &first), &second, nil)
	fs.MkdirAll("/d")
	file, err := fs.Create("/d/f")
	if err != nil {
		t.Fatal(err)
	}
	file.WriteAt([]byte("x"), 0)
	file.Sync()
	m.InjectFault(FaultRule{Op: FaultSync, Pattern: "f"})
	if err := file.Sync(); err == nil {
		t.Fatal("injected sync fault did not fire")
	}
	fs.SyncDir("/d")
	for name, counter := range map[string]*SyncCounter{"inner": &first, "outer": &second} {
		if counter.FileSyncs() != 2 || counter.DirectorySyncs() != 1 || counter.Total() != 3 {
			t.Fatalf("%s counter: %d file syncs, %d directory syncs", name, counter.FileSyncs(), counter.DirectorySyncs())
		}
	}
	osFile, err := CountSyncs(OS, &first).Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer osFile.Close()
	if _, ok := osFile.(Preallocator); !ok {
		t.Fatal("a counted OS file lost its Preallocator capability")
	}
}
