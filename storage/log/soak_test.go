package log

// Memory over a long log (design: tail cache within budget; memory does
// not grow with log length). The 1 GiB run is a soak test: FIBRIL_SOAK=1.
//
//	FIBRIL_SOAK=1 go test -run TestSoakMemoryFlatOverLongLog -v ./storage/log

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

func TestTailCacheStaysWithinBudget(t *testing.T) {
	for _, budget := range []int64{1 << 20, 8 << 20, 64 << 20} {
		cache := newTailCache(budget, 0, nil)
		if int64(cache.maxBlocks*cache.blockBytes) > budget {
			t.Fatalf("budget %d: %d blocks of %d bytes exceed it", budget, cache.maxBlocks, cache.blockBytes)
		}
		payload := make([]byte, 3000)
		allocated := map[*cacheBlock]bool{}
		for offset := uint64(0); offset < uint64(4*budget)/3000; offset++ {
			block, _, _ := cache.stage(offset, 1, 1, payload)
			cache.markWritten(offset + 1)
			allocated[block] = true
		}
		if len(allocated) > cache.maxBlocks {
			t.Fatalf("budget %d: %d blocks allocated, at most %d allowed", budget, len(allocated), cache.maxBlocks)
		}
	}
}

// residentBytes reads the process's resident set size, after asking the
// runtime to return freed heap to the OS (otherwise RSS also counts garbage
// the scavenger has not released yet).
func residentBytes(t *testing.T) int64 {
	debug.FreeOSMemory()
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	fields := strings.Fields(string(data))
	pages, _ := strconv.ParseInt(fields[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func heapInUse() int64 {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return int64(stats.HeapInuse)
}

func TestSoakMemoryFlatOverLongLog(t *testing.T) {
	if os.Getenv("FIBRIL_SOAK") != "1" {
		t.Skip("1 GiB soak: set FIBRIL_SOAK=1")
	}
	dir := t.TempDir()
	if root := os.Getenv("FIBRIL_SOAK_DIR"); root != "" {
		dir = filepath.Join(root, "soak-log")
		os.RemoveAll(dir)
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	opts := DefaultOptions()
	opts.FS = vfs.OS
	opts.Logger = discardLogger()
	l := mustOpen(t, dir, opts)
	defer l.Close()
	entries := make([]Entry, 16)
	for i := range entries {
		entries[i] = Entry{Epoch: 1, Type: 1, Body: make([]byte, 4096)}
	}
	const totalBytes, markBytes = 1 << 30, 128 << 20
	var written int64
	var residentAtMark, heapAtMark int64
	for written < totalBytes {
		if _, err := l.Append(context.Background(), entries, AfterFlush); err != nil {
			t.Fatal(err)
		}
		written += 16 * 4096
		if written == markBytes {
			residentAtMark, heapAtMark = residentBytes(t), heapInUse()
		}
		if written%(256<<20) == 0 {
			t.Logf("at %4d MiB of log: resident %d MiB", written>>20, residentBytes(t)>>20)
		}
	}
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	residentAtEnd, heapAtEnd := residentBytes(t), heapInUse()
	t.Logf("resident: %d MiB at 128 MiB of log, %d MiB at 1 GiB; Go heap in use: %d MiB, %d MiB",
		residentAtMark>>20, residentAtEnd>>20, heapAtMark>>20, heapAtEnd>>20)
	// Sealed segments keep their index on disk, so nothing in memory grows
	// with the log; the tolerances are for runtime noise.
	if growth := residentAtEnd - residentAtMark; growth > 4<<20 {
		t.Fatalf("resident set grew by %d MiB between 128 MiB and 1 GiB of log", growth>>20)
	}
	if growth := heapAtEnd - heapAtMark; growth > 2<<20 {
		t.Fatalf("Go heap grew by %d MiB between 128 MiB and 1 GiB of log", growth>>20)
	}
}
