package admin

// Node resources for the dashboard and /api/node: memory, file
// descriptors, disk space of the data directory, goroutines. Read from
// the Go runtime, /proc/self (Linux) and statfs; a figure that cannot be
// read on this system is reported as absent, never as 0 pretending to be
// a value.

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// diskSpace is the space of a filesystem.
type diskSpace struct {
	FreeBytes  uint64 // available to an unprivileged process
	TotalBytes uint64
}

// diskSpaceOf reads the filesystem that holds dir.
func diskSpaceOf(dir string) (diskSpace, error) {
	var stat syscall.Statfs_t
	if err := syscall.Statfs(dir, &stat); err != nil {
		return diskSpace{}, err
	}
	blockSize := uint64(stat.Bsize)
	return diskSpace{FreeBytes: stat.Bavail * blockSize, TotalBytes: stat.Blocks * blockSize}, nil
}

// resourcesView is the "resources" object of GET /api/node.
type resourcesView struct {
	HeapBytes      uint64  `json:"heap_bytes"`                 // Go heap in use
	RuntimeBytes   uint64  `json:"runtime_bytes"`              // everything the Go runtime holds from the OS
	ResidentBytes  *uint64 `json:"resident_bytes,omitempty"`   // resident set size (Linux)
	OpenFiles      *int    `json:"open_files,omitempty"`       // file descriptors open now (Linux)
	MaxOpenFiles   *uint64 `json:"max_open_files,omitempty"`   // the soft limit
	Goroutines     int     `json:"goroutines"`                 //
	DiskFreeBytes  *uint64 `json:"disk_free_bytes,omitempty"`  // of the data directory's filesystem
	DiskTotalBytes *uint64 `json:"disk_total_bytes,omitempty"` //
	DiskError      string  `json:"disk_error,omitempty"`       // why the disk figures are absent
}

// readResources reads the node's resources now.
func readResources(dataDir string) resourcesView {
	var memory runtime.MemStats
	runtime.ReadMemStats(&memory)
	view := resourcesView{HeapBytes: memory.HeapAlloc, RuntimeBytes: memory.Sys, Goroutines: runtime.NumGoroutine()}
	if entries, err := os.ReadDir("/proc/self/fd"); err == nil {
		open := len(entries)
		view.OpenFiles = &open
	}
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err == nil {
		view.MaxOpenFiles = &limit.Cur
	}
	if resident, ok := residentBytes(); ok {
		view.ResidentBytes = &resident
	}
	if space, err := diskSpaceOf(dataDir); err == nil {
		view.DiskFreeBytes, view.DiskTotalBytes = &space.FreeBytes, &space.TotalBytes
	} else {
		view.DiskError = err.Error()
	}
	return view
}

// residentBytes reads the resident set from /proc/self/statm (pages).
func residentBytes() (uint64, bool) {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(raw))
	if len(fields) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}

func itoa(n int) string { return strconv.Itoa(n) }
