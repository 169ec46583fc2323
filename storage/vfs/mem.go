package vfs

// Mem is an in-memory FS that can simulate power loss and inject faults.
//
// Crash model (what CrashClone keeps):
//   - File contents: every byte covered by a completed File.Sync on that
//     file. Writes and truncations after the file's last successful sync are
//     "pending"; a plain CrashClone drops them all. With CrashOptions.Rand
//     set, a random prefix of each file's pending operations survives, in
//     the order they were issued (later writes never survive without the
//     earlier ones), and with TearLastWrite the first pending write that
//     does not survive whole keeps a random prefix of its bytes. With
//     CrashOptions.KeepUnsynced every pending operation survives.
//   - Directory entries: a creation, removal or rename of a name becomes
//     durable only when SyncDir is called on its parent directory after it.
//     File.Sync never makes a name durable. A file whose creation was never
//     covered by a SyncDir is gone after the crash, whatever was synced
//     into it.
//   - Directories made by MkdirAll are always durable (simplification).
//   - A failed File.Sync (injected) discards that file's pending operations
//     from the durable view: they stay readable in this Mem (the page cache
//     still holds them) but no later sync makes them durable. This is how
//     Linux may behave after a writeback error, and why a failed sync must
//     latch a log.
//
// All methods are safe for concurrent use; one mutex guards the whole FS.

import (
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"sync"
)

// Mem is an in-memory filesystem; see the crash model above.
type Mem struct {
	mu           sync.Mutex
	files        map[string]*memInode // live namespace
	durableFiles map[string]*memInode // namespace as last covered by SyncDir
	dirs         map[string]bool
	faults       []*faultState
	faultsFired  int
}

// memInode is one file's contents. Invariant: applying pending to durable
// in order gives data, unless a failed sync discarded pending operations.
type memInode struct {
	data    []byte
	durable []byte
	pending []memOperation
}

// memOperation is one unsynced change: a write of data at offset, or a
// truncation to size.
type memOperation struct {
	truncate bool
	offset   int64
	data     []byte
	size     int64
}

// NewMem returns an empty in-memory filesystem.
func NewMem() *Mem {
	return &Mem{
		files:        map[string]*memInode{},
		durableFiles: map[string]*memInode{},
		dirs:         map[string]bool{".": true, "/": true},
	}
}

func cleanPath(name string) string { return path.Clean(name) }

func (m *Mem) parentExistsLocked(name string) bool {
	return m.dirs[path.Dir(name)]
}

func pathError(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// Create creates or truncates name.
func (m *Mem) Create(name string) (File, error) {
	name = cleanPath(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.parentExistsLocked(name) || m.dirs[name] {
		return nil, pathError("create", name, ErrNotExist)
	}
	if inode, ok := m.files[name]; ok {
		inode.applyLocked(memOperation{truncate: true, size: 0})
		return &memFile{mem: m, inode: inode, name: name}, nil
	}
	inode := &memInode{}
	m.files[name] = inode
	return &memFile{mem: m, inode: inode, name: name}, nil
}

// OpenReadWrite opens an existing file for reading and writing.
func (m *Mem) OpenReadWrite(name string) (File, error) {
	return m.open(name, false)
}

// Open opens an existing file read-only.
func (m *Mem) Open(name string) (File, error) {
	return m.open(name, true)
}

func (m *Mem) open(name string, readOnly bool) (File, error) {
	name = cleanPath(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	inode, ok := m.files[name]
	if !ok {
		return nil, pathError("open", name, ErrNotExist)
	}
	return &memFile{mem: m, inode: inode, name: name, readOnly: readOnly}, nil
}

// Remove removes a file or an empty directory.
func (m *Mem) Remove(name string) error {
	name = cleanPath(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; ok {
		delete(m.files, name)
		return nil
	}
	if m.dirs[name] {
		if len(m.listLocked(name)) > 0 {
			return pathError("remove", name, fmt.Errorf("directory not empty"))
		}
		delete(m.dirs, name)
		return nil
	}
	return pathError("remove", name, ErrNotExist)
}

// Rename moves a file to a new name, replacing any file there.
func (m *Mem) Rename(oldname, newname string) error {
	oldname, newname = cleanPath(oldname), cleanPath(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	inode, ok := m.files[oldname]
	if !ok {
		return pathError("rename", oldname, ErrNotExist)
	}
	if !m.parentExistsLocked(newname) || m.dirs[newname] {
		return pathError("rename", newname, ErrNotExist)
	}
	delete(m.files, oldname)
	m.files[newname] = inode
	return nil
}

// MkdirAll creates dir and its parents.
func (m *Mem) MkdirAll(dir string) error {
	dir = cleanPath(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for current := dir; !m.dirs[current]; current = path.Dir(current) {
		if _, isFile := m.files[current]; isFile {
			return pathError("mkdir", current, fmt.Errorf("not a directory"))
		}
		m.dirs[current] = true
	}
	return nil
}

// ReadDir lists the names directly under dir, sorted.
func (m *Mem) ReadDir(dir string) ([]string, error) {
	dir = cleanPath(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, pathError("readdir", dir, ErrNotExist)
	}
	return m.listLocked(dir), nil
}

func (m *Mem) listLocked(dir string) []string {
	var names []string
	for name := range m.files {
		if path.Dir(name) == dir {
			names = append(names, path.Base(name))
		}
	}
	for name := range m.dirs {
		if name != dir && path.Dir(name) == dir {
			names = append(names, path.Base(name))
		}
	}
	sort.Strings(names)
	return names
}

// Stat reports a file's size and whether it exists.
func (m *Mem) Stat(name string) (int64, bool, error) {
	name = cleanPath(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if inode, ok := m.files[name]; ok {
		return int64(len(inode.data)), true, nil
	}
	if m.dirs[name] {
		return 0, true, nil
	}
	return 0, false, nil
}

// SyncDir makes every name directly under dir durable as it is now.
func (m *Mem) SyncDir(dir string) error {
	dir = cleanPath(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return pathError("syncdir", dir, ErrNotExist)
	}
	if err := m.maybeFailLocked(FaultSync, dir); err != nil {
		return pathError("syncdir", dir, err)
	}
	for name := range m.durableFiles {
		if path.Dir(name) == dir {
			delete(m.durableFiles, name)
		}
	}
	for name, inode := range m.files {
		if path.Dir(name) == dir {
			m.durableFiles[name] = inode
		}
	}
	return nil
}

// ReadFile returns a copy of a file's current contents (a test helper).
func (m *Mem) ReadFile(name string) ([]byte, error) {
	name = cleanPath(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	inode, ok := m.files[name]
	if !ok {
		return nil, pathError("readfile", name, ErrNotExist)
	}
	return append([]byte(nil), inode.data...), nil
}

// WriteFile replaces a file's contents and makes them and the name durable
// at once, as if the file had been on disk before the test began (a test
// helper for building fixtures; it ignores injected faults).
func (m *Mem) WriteFile(name string, data []byte) error {
	name = cleanPath(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.parentExistsLocked(name) {
		return pathError("writefile", name, ErrNotExist)
	}
	inode, ok := m.files[name]
	if !ok {
		inode = &memInode{}
		m.files[name] = inode
	}
	inode.data = append([]byte(nil), data...)
	inode.durable = append([]byte(nil), data...)
	inode.pending = nil
	m.durableFiles[name] = inode
	return nil
}

// applyLocked changes the live contents and remembers the change as
// pending until the next sync.
func (inode *memInode) applyLocked(operation memOperation) {
	inode.data = applyOperation(inode.data, operation)
	inode.pending = append(inode.pending, operation)
}

// syncLocked makes every pending change durable.
func (inode *memInode) syncLocked() {
	for _, operation := range inode.pending {
		inode.durable = applyOperation(inode.durable, operation)
	}
	inode.pending = nil
}

func applyOperation(data []byte, operation memOperation) []byte {
	if operation.truncate {
		if operation.size <= int64(len(data)) {
			return data[:operation.size]
		}
		return append(data, make([]byte, operation.size-int64(len(data)))...)
	}
	end := operation.offset + int64(len(operation.data))
	if end > int64(len(data)) {
		data = append(data, make([]byte, end-int64(len(data)))...)
	}
	copy(data[operation.offset:end], operation.data)
	return data
}

// memFile is a handle on a memInode. Its fields are guarded by mem.mu.
type memFile struct {
	mem      *Mem
	inode    *memInode
	name     string
	position int64
	readOnly bool
	closed   bool
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) checkLocked(op string, write bool) error {
	if f.closed {
		return pathError(op, f.name, ErrClosed)
	}
	if write && f.readOnly {
		return pathError(op, f.name, ErrReadOnly)
	}
	return nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	n, err := f.writeAtLocked(p, f.position)
	f.position += int64(n)
	return n, err
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	return f.writeAtLocked(p, off)
}

func (f *memFile) writeAtLocked(p []byte, off int64) (int, error) {
	if err := f.checkLocked("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathError("write", f.name, fmt.Errorf("negative offset"))
	}
	if rule := f.mem.matchFaultLocked(FaultWrite, f.name); rule != nil {
		written := 0
		if rule.PartialWrite && len(p) > 1 {
			written = len(p) / 2
			f.inode.applyLocked(memOperation{offset: off, data: append([]byte(nil), p[:written]...)})
		}
		return written, pathError("write", f.name, rule.err())
	}
	f.inode.applyLocked(memOperation{offset: off, data: append([]byte(nil), p...)})
	return len(p), nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	if err := f.checkLocked("read", false); err != nil {
		return 0, err
	}
	if err := f.mem.maybeFailLocked(FaultRead, f.name); err != nil {
		return 0, pathError("read", f.name, err)
	}
	if off < 0 {
		return 0, pathError("read", f.name, fmt.Errorf("negative offset"))
	}
	if off >= int64(len(f.inode.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.inode.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Sync() error {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	if err := f.checkLocked("sync", false); err != nil {
		return err
	}
	if err := f.mem.maybeFailLocked(FaultSync, f.name); err != nil {
		// The failed writeback loses the pending changes for good.
		f.inode.pending = nil
		return pathError("sync", f.name, err)
	}
	f.inode.syncLocked()
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	if err := f.checkLocked("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathError("truncate", f.name, fmt.Errorf("negative size"))
	}
	if err := f.mem.maybeFailLocked(FaultTruncate, f.name); err != nil {
		return pathError("truncate", f.name, err)
	}
	f.inode.applyLocked(memOperation{truncate: true, size: size})
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	if err := f.checkLocked("stat", false); err != nil {
		return 0, err
	}
	return int64(len(f.inode.data)), nil
}

func (f *memFile) Close() error {
	f.mem.mu.Lock()
	defer f.mem.mu.Unlock()
	if f.closed {
		return pathError("close", f.name, ErrClosed)
	}
	f.closed = true
	return nil
}

// names returns every live file path, sorted (for tests and CrashClone).
func (m *Mem) namesLocked(files map[string]*memInode) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Names lists every file path in the live namespace, sorted.
func (m *Mem) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.namesLocked(m.files)
}
