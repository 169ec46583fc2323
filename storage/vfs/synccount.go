package vfs

// Counting the syncs a program makes. A server exposes how many fdatasync
// and directory fsync calls it issued (each one is a device flush on most
// disks), so the FS its storage uses can be wrapped to count them:
//
//	var node vfs.SyncCounter
//	fs := vfs.CountSyncs(vfs.OS, &node)
//
// Every File.Sync made through a file opened from the wrapper, and every
// SyncDir on it, adds one to each counter given, whether it succeeds or
// fails (a failed sync still reached the device). Wrappers nest, so a
// per-log counter and a node-wide one can count the same calls. Nothing
// else changes: the wrapper forwards every call, and a wrapped file keeps
// the optional Preallocator capability of the file it wraps.

import "sync/atomic"

// SyncCounter counts file syncs and directory syncs. The zero value is
// ready; it is safe for concurrent use.
type SyncCounter struct {
	fileSyncs      atomic.Uint64
	directorySyncs atomic.Uint64
}

// FileSyncs is the number of File.Sync calls (fdatasync on vfs.OS).
func (c *SyncCounter) FileSyncs() uint64 { return c.fileSyncs.Load() }

// DirectorySyncs is the number of FS.SyncDir calls (fsync of a directory).
func (c *SyncCounter) DirectorySyncs() uint64 { return c.directorySyncs.Load() }

// Total is FileSyncs plus DirectorySyncs.
func (c *SyncCounter) Total() uint64 { return c.FileSyncs() + c.DirectorySyncs() }

// CountSyncs returns fs with every sync made through it counted in each
// of counters (nil counters are skipped).
func CountSyncs(fs FS, counters ...*SyncCounter) FS {
	kept := make([]*SyncCounter, 0, len(counters))
	for _, counter := range counters {
		if counter != nil {
			kept = append(kept, counter)
		}
	}
	return &countingFS{FS: fs, counters: kept}
}

type countingFS struct {
	FS
	counters []*SyncCounter
}

func (c *countingFS) wrap(file File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	counted := countingFile{File: file, counters: c.counters}
	if allocator, ok := file.(Preallocator); ok {
		return &countingPreallocatingFile{countingFile: counted, allocator: allocator}, nil
	}
	return &counted, nil
}

func (c *countingFS) Create(name string) (File, error) { return c.wrap(c.FS.Create(name)) }
func (c *countingFS) OpenReadWrite(name string) (File, error) {
	return c.wrap(c.FS.OpenReadWrite(name))
}
func (c *countingFS) Open(name string) (File, error) { return c.wrap(c.FS.Open(name)) }

func (c *countingFS) SyncDir(dir string) error {
	for _, counter := range c.counters {
		counter.directorySyncs.Add(1)
	}
	return c.FS.SyncDir(dir)
}

type countingFile struct {
	File
	counters []*SyncCounter
}

func (f *countingFile) Sync() error {
	for _, counter := range f.counters {
		counter.fileSyncs.Add(1)
	}
	return f.File.Sync()
}

type countingPreallocatingFile struct {
	countingFile
	allocator Preallocator
}

func (f *countingPreallocatingFile) Preallocate(size int64) error {
	return f.allocator.Preallocate(size)
}
