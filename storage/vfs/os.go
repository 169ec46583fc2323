package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// OS is the real filesystem.
var OS FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return openOS(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
}

func (osFS) OpenReadWrite(name string) (File, error) {
	return openOS(name, os.O_RDWR)
}

func (osFS) Open(name string) (File, error) {
	return openOS(name, os.O_RDONLY)
}

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) Stat(name string) (int64, bool, error) {
	info, err := os.Stat(name)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return info.Size(), true, nil
}

func (osFS) SyncDir(dir string) error {
	handle, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	syncErr := handle.Sync()
	closeErr := handle.Close()
	if syncErr != nil {
		return syncErr
	}
	return closeErr
}

// osFile wraps an *os.File. The descriptor number is kept for fdatasync and
// fallocate, so that a sync allocates nothing; as with any descriptor,
// Sync and Preallocate must not race Close.
type osFile struct {
	file *os.File
	fd   int
}

func openOS(name string, flag int) (File, error) {
	file, err := os.OpenFile(name, flag, 0o644)
	if err != nil {
		return nil, err
	}
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, err
	}
	fd := -1
	if err := raw.Control(func(descriptor uintptr) { fd = int(descriptor) }); err != nil {
		file.Close()
		return nil, err
	}
	return &osFile{file: file, fd: fd}, nil
}

func (f *osFile) Write(p []byte) (int, error)              { return f.file.Write(p) }
func (f *osFile) WriteAt(p []byte, off int64) (int, error) { return f.file.WriteAt(p, off) }
func (f *osFile) ReadAt(p []byte, off int64) (int, error)  { return f.file.ReadAt(p, off) }
func (f *osFile) Close() error                             { return f.file.Close() }
func (f *osFile) Truncate(size int64) error                { return f.file.Truncate(size) }
func (f *osFile) Name() string                             { return f.file.Name() }

func (f *osFile) Size() (int64, error) {
	info, err := f.file.Stat()
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

// Sync is fdatasync(2): data and the metadata needed to read it back (the
// size), not timestamps.
func (f *osFile) Sync() error {
	for {
		err := unix.Fdatasync(f.fd)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.file.Name(), Err: err}
		}
		return nil
	}
}

// Preallocate reserves blocks for the first size bytes with
// fallocate(FALLOC_FL_KEEP_SIZE); the visible size does not change, so
// readers and recovery never see the reserved range.
func (f *osFile) Preallocate(size int64) error {
	if err := unix.Fallocate(f.fd, unix.FALLOC_FL_KEEP_SIZE, 0, size); err != nil {
		return &os.PathError{Op: "fallocate", Path: f.file.Name(), Err: err}
	}
	return nil
}
