package log

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// testSeed returns the seed for a randomized test: FIBRIL_LOG_SEED when
// set, otherwise a fresh one. It is printed when the test fails.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if value := os.Getenv("FIBRIL_LOG_SEED"); value != "" {
		parsed, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			t.Fatalf("FIBRIL_LOG_SEED: %v", err)
		}
		seed = parsed
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("SEED=%d (rerun with FIBRIL_LOG_SEED=%d)", seed, seed)
		}
	})
	return seed
}

// fakeClock is a settable clock for sync decisions.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// memOptions are small-segment options over a Mem, with ticks driven by
// the test.
func memOptions(fs vfs.FS) Options {
	opts := DefaultOptions()
	opts.FS = fs
	opts.SegmentBytes = 1024
	opts.IndexIntervalBytes = 128
	opts.ExternalTicks = true
	opts.Logger = discardLogger()
	return opts
}

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return l
}

func body(offset uint64, tag string) []byte {
	return []byte(fmt.Sprintf("%s-record-%d", tag, offset))
}

// appendN appends n single-entry records with bodies body(offset, tag).
func appendN(t testing.TB, l *Log, n int, level Durability, tag string) {
	t.Helper()
	for i := 0; i < n; i++ {
		next := l.Frontiers().Staged
		if _, err := l.Append(context.Background(), []Entry{{Epoch: 1, Type: 7, Body: body(next, tag)}}, level); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
}

// scanAll returns copies of every record from from to the frontier.
func scanAll(t testing.TB, l *Log, from uint64, durable bool) []Record {
	t.Helper()
	var out []Record
	scan := l.ScanWritten
	if durable {
		scan = l.ScanDurable
	}
	for {
		next, err := scan(from, 1<<16, func(r Record) error {
			r.Body = append([]byte(nil), r.Body...)
			out = append(out, r)
			return nil
		})
		if err != nil {
			t.Fatalf("scan from %d: %v", from, err)
		}
		if next == from {
			return out
		}
		from = next
	}
}

// countingFS counts syncs and opens, and can delay syncs, over another FS.
type countingFS struct {
	vfs.FS
	syncs     atomic.Int64
	dirSyncs  atomic.Int64
	opens     atomic.Int64
	syncDelay time.Duration
	syncGate  chan struct{} // when set, every file sync waits for a token
}

type countingFile struct {
	vfs.File
	fs *countingFS
}

func (c *countingFS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &countingFile{File: file, fs: c}, nil
}

func (c *countingFS) Create(name string) (vfs.File, error) { return c.wrap(c.FS.Create(name)) }
func (c *countingFS) OpenReadWrite(name string) (vfs.File, error) {
	return c.wrap(c.FS.OpenReadWrite(name))
}
func (c *countingFS) Open(name string) (vfs.File, error) {
	c.opens.Add(1)
	return c.wrap(c.FS.Open(name))
}
func (c *countingFS) SyncDir(dir string) error {
	c.dirSyncs.Add(1)
	return c.FS.SyncDir(dir)
}

func (f *countingFile) Sync() error {
	if f.fs.syncGate != nil {
		<-f.fs.syncGate
	}
	if f.fs.syncDelay > 0 {
		time.Sleep(f.fs.syncDelay)
	}
	f.fs.syncs.Add(1)
	return f.File.Sync()
}

// waitFor polls cond (no timing assertion: it only bounds a hang).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func isLatched(err error) bool { return errors.Is(err, ErrLatched) }

var _ = rand.New

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
