package actors

// timedFS times the two storage calls an operator asks about first: each
// write of a log segment file (what makes records written) and each
// fdatasync of one (what makes them durable). It wraps the filesystem a
// queue's log opens its files through, so every caller is covered, the
// log's background sync and its durable appends included, without the log
// reporting durations itself. Only segment files (".log") are timed: the
// sparse index and the small state files would blur the figures.
//
// The wrapper adds no behaviour: errors, sizes and optional capabilities
// (vfs.Preallocator) are the wrapped file's own. The clock is wall time,
// not the broker's injected clock: these are durations of real calls.

import (
	"strings"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// segmentSuffix names the files timed.
const segmentSuffix = ".log"

type timedFS struct {
	vfs.FS
	metrics *queueMetrics
}

func newTimedFS(fs vfs.FS, metrics *queueMetrics) vfs.FS {
	if fs == nil || metrics == nil {
		return fs
	}
	return timedFS{FS: fs, metrics: metrics}
}

func (t timedFS) Create(name string) (vfs.File, error) {
	file, err := t.FS.Create(name)
	return t.wrap(name, file, err)
}

func (t timedFS) OpenReadWrite(name string) (vfs.File, error) {
	file, err := t.FS.OpenReadWrite(name)
	return t.wrap(name, file, err)
}

func (t timedFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, segmentSuffix) {
		return file, err
	}
	timed := &timedFile{File: file, metrics: t.metrics}
	if allocator, ok := file.(vfs.Preallocator); ok {
		return &timedPreallocatingFile{timedFile: timed, allocator: allocator}, nil
	}
	return timed, nil
}

type timedFile struct {
	vfs.File
	metrics *queueMetrics
}

func (f *timedFile) Write(p []byte) (int, error) {
	start := time.Now()
	n, err := f.File.Write(p)
	f.metrics.logWriteSeconds.Update(time.Since(start).Seconds())
	return n, err
}

func (f *timedFile) WriteAt(p []byte, off int64) (int, error) {
	start := time.Now()
	n, err := f.File.WriteAt(p, off)
	f.metrics.logWriteSeconds.Update(time.Since(start).Seconds())
	return n, err
}

func (f *timedFile) Sync() error {
	start := time.Now()
	err := f.File.Sync()
	f.metrics.logFsyncSeconds.Update(time.Since(start).Seconds())
	return err
}

// timedPreallocatingFile keeps the wrapped file's Preallocate.
type timedPreallocatingFile struct {
	*timedFile
	allocator vfs.Preallocator
}

func (f *timedPreallocatingFile) Preallocate(size int64) error { return f.allocator.Preallocate(size) }
