package vfs

import (
	"errors"
	"io"
	"io/fs"
)

// File is an open file. Offsets given to ReadAt and WriteAt are absolute;
// Write appends at the handle's own position, which starts at zero.
type File interface {
	io.Writer
	io.ReaderAt
	io.Closer
	// WriteAt writes p at offset off, extending the file when needed.
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes every byte written to this file so far durable
	// (fdatasync on the OS implementation). It does not make the file's
	// directory entry durable: that needs FS.SyncDir on the parent.
	Sync() error
	// Truncate sets the file's size.
	Truncate(size int64) error
	// Size reports the file's current size.
	Size() (int64, error)
	// Name is the path the file was opened with.
	Name() string
}

// FS is a filesystem. Paths are slash-separated; implementations clean them.
type FS interface {
	// Create creates name, or truncates it when it exists, and opens it
	// read-write.
	Create(name string) (File, error)
	// OpenReadWrite opens an existing file read-write without truncating.
	OpenReadWrite(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string) error
	// ReadDir lists the names (not paths) directly under dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat reports a file's size and whether it exists. A missing file is
	// not an error.
	Stat(name string) (size int64, exists bool, err error)
	// SyncDir makes the directory's entries (creations, removals, renames
	// of names directly under it) durable.
	SyncDir(dir string) error
}

// Preallocator is an optional File capability: reserve disk blocks for the
// first size bytes without changing the file's visible size.
type Preallocator interface {
	Preallocate(size int64) error
}

// ErrNotExist is returned (wrapped) when a named file does not exist. It is
// io/fs.ErrNotExist, so errors from either implementation satisfy
// errors.Is(err, ErrNotExist).
var ErrNotExist = fs.ErrNotExist

// ErrClosed is returned when a closed File is used.
var ErrClosed = errors.New("vfs: file already closed")

// ErrReadOnly is returned when a file opened with Open is written.
var ErrReadOnly = errors.New("vfs: file opened read-only")
