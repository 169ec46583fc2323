package log

// Node-wide budgets. Every log of a node draws on one Budget, created once
// by the caller and passed to each log in Options.Budget:
//
//   - tail-cache memory: the blocks of every log's tail cache (cache.go)
//     come from one byte budget. A log that needs a block when the budget
//     is spent takes one back from the log holding the most bytes (itself
//     included): that log's oldest block, if every record in it is
//     written. Blocks still holding unwritten (staged) records are never
//     taken, so a log staging a group may take the budget over its limit
//     by at most that group (Options.MaxGroupBytes) until it is written;
//     that overdraft is counted in the stats. Each log also keeps to its
//     own cap (Options.TailCacheBytes).
//   - descriptors of sealed segments: a sealed segment opens its .log and
//     .idx only to read them, through one cache of open descriptors with a
//     bound (BudgetOptions.OpenSegmentFiles), least recently used first
//     out. A descriptor in use by a read is never closed under it; when
//     every cached descriptor is in use, a read opens one more and the
//     cache shrinks back as reads finish. The active segment of each log
//     keeps its own descriptors (read, write, index write, and the
//     durable-end record: four per log) outside the cache.
//   - counters: every fdatasync and directory fsync a log issues (segment,
//     index, small files, recovery), node-wide and per log (Status).
//
// Stats reads all of it at any time; see BudgetStats for the meaning of
// each field and docs/storage.md for the metric names the broker
// publishes.
//
// Lock order: Budget locks are taken before a cache's lock, never after:
// a cache releases its own lock before it asks the budget for a block or
// gives blocks back.

import (
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// BudgetOptions configure a Budget; zero fields take their defaults.
type BudgetOptions struct {
	// TailCacheBytes bounds the tail-cache blocks of every log together;
	// default 256 MiB.
	TailCacheBytes int64
	// OpenSegmentFiles bounds the descriptors kept open for sealed
	// segments (a sealed segment has two files, .log and .idx); default
	// 1024.
	OpenSegmentFiles int
}

// Default budget values.
const (
	DefaultBudgetTailCacheBytes = 256 << 20
	DefaultOpenSegmentFiles     = 1024
)

// Budget is shared by every log of a node; see the file comment. Create it
// with NewBudget; it is safe for concurrent use and needs no closing.
type Budget struct {
	tail  tailBudget
	files fileCache
	syncs vfs.SyncCounter

	cacheHits, cacheMisses atomic.Uint64 // records read from the cache, from files
	logs                   atomic.Int64  // open logs using the budget
}

// NewBudget returns a budget with opts' limits.
func NewBudget(opts BudgetOptions) *Budget {
	if opts.TailCacheBytes <= 0 {
		opts.TailCacheBytes = DefaultBudgetTailCacheBytes
	}
	if opts.OpenSegmentFiles <= 0 {
		opts.OpenSegmentFiles = DefaultOpenSegmentFiles
	}
	b := &Budget{}
	b.tail.limitBytes = opts.TailCacheBytes
	b.tail.caches = map[*tailCache]struct{}{}
	b.tail.free = map[int][]*cacheBlock{}
	b.files.limit = opts.OpenSegmentFiles
	return b
}

// BudgetStats is a snapshot of a budget's use. Counters only grow.
type BudgetStats struct {
	// Logs is the number of open logs drawing on the budget.
	Logs int64
	// TailCacheBytes is the memory held by tail-cache blocks (cached
	// records and blocks kept for reuse); TailCacheLimitBytes the limit.
	// TailCacheBytes exceeds the limit only while logs stage groups that
	// no written block could make room for.
	TailCacheBytes, TailCacheLimitBytes int64
	// TailCacheHits and TailCacheMisses count records scans read from the
	// tail cache and from segment files.
	TailCacheHits, TailCacheMisses uint64
	// TailCacheEvictions counts blocks taken back from a log to make room;
	// TailCacheOverdrafts counts blocks granted over the limit.
	TailCacheEvictions, TailCacheOverdrafts uint64
	// OpenSegmentFiles is the descriptors of sealed segments open now,
	// OpenSegmentFilesLimit the bound.
	OpenSegmentFiles, OpenSegmentFilesLimit int
	// SegmentFileHits and SegmentFileMisses count reads of sealed segments
	// that found their descriptor open, and that had to open it;
	// SegmentFileEvictions counts descriptors closed to stay in the bound.
	SegmentFileHits, SegmentFileMisses, SegmentFileEvictions uint64
	// FileSyncs counts fdatasync calls on the logs' files, DirectorySyncs
	// fsync calls on their directories (both, failed ones included).
	FileSyncs, DirectorySyncs uint64
}

// Stats returns the budget's current use.
func (b *Budget) Stats() BudgetStats {
	b.tail.mu.Lock()
	tailBytes, evictions, overdrafts := b.tail.usedBytes, b.tail.evictions, b.tail.overdrafts
	b.tail.mu.Unlock()
	b.files.mu.Lock()
	open, hits, misses, fileEvictions := b.files.open, b.files.hits, b.files.misses, b.files.evictions
	b.files.mu.Unlock()
	return BudgetStats{
		Logs:                  b.logs.Load(),
		TailCacheBytes:        tailBytes,
		TailCacheLimitBytes:   b.tail.limitBytes,
		TailCacheHits:         b.cacheHits.Load(),
		TailCacheMisses:       b.cacheMisses.Load(),
		TailCacheEvictions:    evictions,
		TailCacheOverdrafts:   overdrafts,
		OpenSegmentFiles:      open,
		OpenSegmentFilesLimit: b.files.limit,
		SegmentFileHits:       hits,
		SegmentFileMisses:     misses,
		SegmentFileEvictions:  fileEvictions,
		FileSyncs:             b.syncs.FileSyncs(),
		DirectorySyncs:        b.syncs.DirectorySyncs(),
	}
}

// tailBudget hands out tail-cache blocks within a byte limit.
//
// Invariant: usedBytes is the capacity of every block held by a
// registered cache or kept in free.
type tailBudget struct {
	mu         sync.Mutex
	limitBytes int64
	usedBytes  int64
	caches     map[*tailCache]struct{}
	free       map[int][]*cacheBlock // reusable blocks by capacity
	evictions  uint64
	overdrafts uint64
}

func (b *tailBudget) register(cache *tailCache) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.caches[cache] = struct{}{}
}

func (b *tailBudget) unregister(cache *tailCache) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.caches, cache)
}

// acquire returns an empty block of requester's block size, taking one
// back from the log holding the most when the budget is spent. The caller
// holds no cache lock.
func (b *tailBudget) acquire(requester *tailCache) *cacheBlock {
	size := requester.blockBytes
	b.mu.Lock()
	defer b.mu.Unlock()
	if blocks := b.free[size]; len(blocks) > 0 { // counted already
		block := blocks[len(blocks)-1]
		b.free[size] = blocks[:len(blocks)-1]
		return block
	}
	tried := map[*tailCache]bool{}
	for b.usedBytes+int64(size) > b.limitBytes {
		if b.dropFreeLocked() {
			continue
		}
		victim := b.largestLocked(tried)
		if victim == nil {
			b.overdrafts++
			break
		}
		block := victim.evictOldest()
		if block == nil {
			tried[victim] = true
			continue
		}
		b.evictions++
		b.usedBytes -= int64(cap(block.data))
		if cap(block.data) == size && block.pins.Load() == 0 {
			b.usedBytes += int64(size)
			return block
		}
	}
	b.usedBytes += int64(size)
	return &cacheBlock{data: make([]byte, 0, size)}
}

// dropFreeLocked lets one free block go; it reports whether there was one.
func (b *tailBudget) dropFreeLocked() bool {
	for size, blocks := range b.free {
		if len(blocks) > 0 {
			b.free[size] = blocks[:len(blocks)-1]
			b.usedBytes -= int64(size)
			return true
		}
	}
	return false
}

// largestLocked returns the registered cache holding the most bytes, not
// in tried, or nil.
func (b *tailBudget) largestLocked(tried map[*tailCache]bool) *tailCache {
	var largest *tailCache
	var largestBytes int64
	for cache := range b.caches {
		if held := cache.heldBytes.Load(); held > largestBytes && !tried[cache] {
			largest, largestBytes = cache, held
		}
	}
	return largest
}

// release takes back blocks a cache no longer holds: kept for reuse while
// the budget has room and no reader pins them, otherwise let go.
func (b *tailBudget) release(blocks []*cacheBlock) {
	if len(blocks) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, block := range blocks {
		size := cap(block.data)
		if block.pins.Load() == 0 && b.usedBytes <= b.limitBytes {
			b.free[size] = append(b.free[size], block)
			continue
		}
		b.usedBytes -= int64(size)
	}
}

// fileCache keeps descriptors of sealed segments' files open within a
// bound, least recently used first out (see the file comment).
//
// Invariant: open counts the entries whose file is open; an entry is in
// idle exactly when its file is open and no read holds it.
type fileCache struct {
	mu        sync.Mutex
	limit     int
	open      int
	idle      list.List // *fileEntry, least recently used first
	hits      uint64
	misses    uint64
	evictions uint64
}

// fileEntry is one file of one sealed segment. Its fields are guarded by
// the cache's lock.
type fileEntry struct {
	path    string
	file    vfs.File
	refs    int
	element *list.Element
	removed bool
}

func newFileEntry(path string) *fileEntry { return &fileEntry{path: path} }

// acquire returns entry's open file, opening it (and closing the least
// recently used idle descriptors beyond the bound) when needed. Every
// successful acquire is paired with release.
func (c *fileCache) acquire(entry *fileEntry, fs vfs.FS) (vfs.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if entry.removed {
		return nil, fmt.Errorf("%w: %s was removed", ErrOutOfRange, entry.path)
	}
	if entry.file != nil {
		c.hits++
		if entry.refs == 0 {
			c.idle.Remove(entry.element)
			entry.element = nil
		}
		entry.refs++
		return entry.file, nil
	}
	c.misses++
	c.shrinkLocked(c.limit - 1)
	file, err := fs.Open(entry.path)
	if err != nil {
		return nil, err
	}
	entry.file, entry.refs = file, 1
	c.open++
	return file, nil
}

// release ends a read of entry's file.
func (c *fileCache) release(entry *fileEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	entry.refs--
	if entry.refs > 0 {
		return
	}
	if entry.refs < 0 {
		panic("log: file cache entry released more often than acquired")
	}
	if entry.removed {
		c.closeLocked(entry)
		return
	}
	entry.element = c.idle.PushBack(entry)
	c.shrinkLocked(c.limit)
}

// remove closes entry's file once no read holds it; later acquires fail.
func (c *fileCache) remove(entry *fileEntry) {
	if entry == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	entry.removed = true
	if entry.refs == 0 && entry.file != nil {
		c.idle.Remove(entry.element)
		entry.element = nil
		c.closeLocked(entry)
	}
}

// shrinkLocked closes idle descriptors until at most target are open.
func (c *fileCache) shrinkLocked(target int) {
	for c.open > target && c.idle.Len() > 0 {
		entry := c.idle.Remove(c.idle.Front()).(*fileEntry)
		entry.element = nil
		c.closeLocked(entry)
		c.evictions++
	}
}

func (c *fileCache) closeLocked(entry *fileEntry) {
	if entry.file != nil {
		entry.file.Close()
		entry.file = nil
		c.open--
	}
}
