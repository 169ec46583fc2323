package log

// tailCache keeps the newest records, encoded exactly as on disk, in a ring
// of fixed-size blocks. The writer encodes staged records straight into the
// newest block, so the staging buffer and the cache are the same memory and
// a grouped write is a slice of one or two blocks: no copy, no allocation
// per append once the ring is warm.
//
// Invariant: the cache holds the dense offsets [first, next), block by
// block, oldest block first; every record in it is staged. Readers only ask
// for offsets below a frontier they read first, so they never see bytes the
// writer has not yet handed to the OS.
//
// Memory: at most maxBlocks blocks of blockBytes (the log's own cap),
// drawn from the node-wide budget (budget.go), plus the position tables (4
// bytes per record). When the budget is spent, a cache may lose its oldest
// block to another log (evictOldest), but only a block whose records are
// all written: staged bytes are the writer's to write. A record larger
// than a block is not cached: the writer writes it from its own buffer and
// the cache restarts after it.
//
// Concurrency: the writer mutates under mu, the budget evicts under mu;
// readers copy records out under the read lock and decode them after
// releasing it, so no callback ever runs with the lock held. A reader that
// needs a block's bytes after the lock is released pins the block
// (pins): a pinned block's memory is never reused, only let go.
//
// Invariant: written <= next, and every block holding a record at or
// above written is never evicted or reused.

import (
	"sync"
	"sync/atomic"
)

const (
	cacheBlockBytesMin = 64 << 10
	cacheBlockBytesMax = 1 << 20
	cacheBlocksMin     = 4
)

type cacheBlock struct {
	first     uint64
	positions []uint32 // positions[i] is where record first+i starts in data
	data      []byte   // capacity blockBytes, never reallocated
	pins      atomic.Int32
}

// end is the offset after the block's last record.
func (b *cacheBlock) end() uint64 { return b.first + uint64(len(b.positions)) }

type tailCache struct {
	mu         sync.RWMutex
	budget     *tailBudget
	blockBytes int
	maxBlocks  int
	blocks     []*cacheBlock
	first      uint64
	next       uint64
	written    atomic.Uint64 // records below it are written: their blocks may go (the writer stores it without the lock)
	heldBytes  atomic.Int64  // capacity of the blocks held, for the budget
}

// newTailCache returns an empty cache holding offsets from next, within
// budgetBytes for this log (its cap) and the node budget (nil: a cache
// that uses no budget, for recovery's reads).
func newTailCache(budgetBytes int64, next uint64, budget *tailBudget) *tailCache {
	blockBytes := int64(cacheBlockBytesMin)
	if budgetBytes/16 > blockBytes {
		blockBytes = min(budgetBytes/16, cacheBlockBytesMax)
	}
	maxBlocks := max(int(budgetBytes/blockBytes), cacheBlocksMin)
	cache := &tailCache{budget: budget, blockBytes: int(blockBytes), maxBlocks: maxBlocks, first: next, next: next}
	cache.written.Store(next)
	if budget != nil {
		budget.register(cache)
	}
	return cache
}

// groupBytesLimit is the largest group the writer may stage before
// flushing, so that starting a new block never reuses unflushed bytes.
func (c *tailCache) groupBytesLimit() int {
	return (c.maxBlocks - 2) * c.blockBytes
}

// fits reports whether a record of size bytes can be cached at all.
func (c *tailCache) fits(size int) bool { return size <= c.blockBytes }

// stage encodes one record into the newest block, starting a new block
// when it does not fit: the oldest block when the cache is at its cap,
// else one from the budget. The record must fit a block and offset must
// equal c.next. It returns the block and the record's span.
func (c *tailCache) stage(offset, epoch uint64, recordType uint8, body []byte) (*cacheBlock, int, int) {
	size := encodedSize(len(body))
	c.mu.Lock()
	if offset != c.next || size > c.blockBytes {
		c.mu.Unlock()
		panic("log: tail cache staged out of order or oversized")
	}
	block := c.newestLocked()
	if block == nil || len(block.data)+size > c.blockBytes {
		block = c.startBlockLocked(offset)
	}
	start := len(block.data)
	block.positions = append(block.positions, uint32(start))
	block.data = appendRecord(block.data, offset, epoch, recordType, body)
	c.next = offset + 1
	c.mu.Unlock()
	return block, start, len(block.data)
}

// stageEncoded is stage for a record already encoded (a replicated
// record: its bytes, CRC included, are kept as they are). The record must
// be a checked record for offset.
func (c *tailCache) stageEncoded(offset uint64, record []byte) (*cacheBlock, int, int) {
	c.mu.Lock()
	if offset != c.next || len(record) > c.blockBytes {
		c.mu.Unlock()
		panic("log: tail cache staged out of order or oversized")
	}
	block := c.newestLocked()
	if block == nil || len(block.data)+len(record) > c.blockBytes {
		block = c.startBlockLocked(offset)
	}
	start := len(block.data)
	block.positions = append(block.positions, uint32(start))
	block.data = append(block.data, record...)
	c.next = offset + 1
	c.mu.Unlock()
	return block, start, len(block.data)
}

func (c *tailCache) newestLocked() *cacheBlock {
	if len(c.blocks) == 0 {
		return nil
	}
	return c.blocks[len(c.blocks)-1]
}

// startBlockLocked appends an empty block starting at first: the cache's
// oldest when it is at its cap (written, by the group limit), otherwise
// one from the budget, for which it releases the lock a moment (only the
// writer adds blocks, so nothing it relies on changes meanwhile).
func (c *tailCache) startBlockLocked(first uint64) *cacheBlock {
	var block *cacheBlock
	if len(c.blocks) >= c.maxBlocks {
		block = c.blocks[0]
		if block.end() > c.written.Load() {
			panic("log: tail cache would reuse a block holding unwritten records")
		}
		copy(c.blocks, c.blocks[1:])
		c.blocks = c.blocks[:len(c.blocks)-1]
		if block.pins.Load() != 0 { // a reader still looks at it: let it go
			c.heldBytes.Add(-int64(cap(block.data)))
			c.mu.Unlock()
			c.budget.release([]*cacheBlock{block})
			block = nil
			c.mu.Lock()
		}
	}
	if block == nil {
		c.mu.Unlock()
		block = c.acquireBlock()
		c.mu.Lock()
		c.heldBytes.Add(int64(cap(block.data)))
	}
	block.first = first
	block.positions = block.positions[:0]
	block.data = block.data[:0]
	c.blocks = append(c.blocks, block)
	c.first = c.blocks[0].first
	return block
}

// acquireBlock gets an empty block from the budget, or allocates one for a
// cache without a budget.
func (c *tailCache) acquireBlock() *cacheBlock {
	if c.budget == nil {
		return &cacheBlock{data: make([]byte, 0, c.blockBytes)}
	}
	return c.budget.acquire(c)
}

// markWritten records that every record below next is written. Only the
// writer calls it, after its write(2) returned; an evictor that reads an
// older value only keeps a block longer.
func (c *tailCache) markWritten(next uint64) {
	if next > c.written.Load() {
		c.written.Store(next)
	}
}

// evictOldest gives the oldest block back to the budget when all its
// records are written; nil otherwise. The budget calls it.
func (c *tailCache) evictOldest() *cacheBlock {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.blocks) == 0 || c.blocks[0].end() > c.written.Load() {
		return nil
	}
	block := c.blocks[0]
	copy(c.blocks, c.blocks[1:])
	c.blocks[len(c.blocks)-1] = nil
	c.blocks = c.blocks[:len(c.blocks)-1]
	c.first = c.next
	if len(c.blocks) > 0 {
		c.first = c.blocks[0].first
	}
	c.heldBytes.Add(-int64(cap(block.data)))
	return block
}

// restartAt empties the cache so that it next holds offset (after an
// oversized record, a latch or a cut). The writer calls it only with no
// unflushed group.
func (c *tailCache) restartAt(offset uint64) {
	c.mu.Lock()
	released := c.blocks
	c.blocks = nil
	c.first, c.next = offset, offset
	c.written.Store(offset)
	c.heldBytes.Store(0)
	c.mu.Unlock()
	c.releaseBlocks(released)
}

// truncateFrom drops every record at or after offset.
func (c *tailCache) truncateFrom(offset uint64) {
	c.mu.Lock()
	if offset >= c.next {
		c.mu.Unlock()
		return
	}
	if offset <= c.first {
		c.mu.Unlock()
		c.restartAt(offset)
		return
	}
	var released []*cacheBlock
	for len(c.blocks) > 0 {
		block := c.blocks[len(c.blocks)-1]
		if block.first < offset {
			keep := offset - block.first
			block.data = block.data[:block.positions[keep]]
			block.positions = block.positions[:keep]
			break
		}
		c.blocks = c.blocks[:len(c.blocks)-1]
		c.heldBytes.Add(-int64(cap(block.data)))
		released = append(released, block)
	}
	c.next = offset
	c.written.Store(min(c.written.Load(), offset))
	c.mu.Unlock()
	c.releaseBlocks(released)
}

// close gives every block back and leaves the budget.
func (c *tailCache) close() {
	c.restartAt(c.next)
	if c.budget != nil {
		c.budget.unregister(c)
	}
}

func (c *tailCache) releaseBlocks(blocks []*cacheBlock) {
	if c.budget != nil {
		c.budget.release(blocks)
	}
}

// copyOut appends to dst the encoded records from offset from, stopping
// before limit, once the bodies copied reach budgetBytes (at least one
// record is copied), or at the end of the cache. hit is false when from is
// not cached.
func (c *tailCache) copyOut(from, limit uint64, budgetBytes int, dst []byte) (out []byte, next uint64, hit bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if from < c.first || from >= c.next || from >= limit {
		return dst, from, false
	}
	limit = min(limit, c.next)
	i := len(c.blocks) - 1
	for c.blocks[i].first > from {
		i--
	}
	bodyBytes := 0
	next = from
	for ; i < len(c.blocks) && next < limit && (next == from || bodyBytes < budgetBytes); i++ {
		block := c.blocks[i]
		for next < limit && (next == from || bodyBytes < budgetBytes) {
			k := next - block.first
			if k >= uint64(len(block.positions)) {
				break
			}
			start := int(block.positions[k])
			end := len(block.data)
			if k+1 < uint64(len(block.positions)) {
				end = int(block.positions[k+1])
			}
			dst = append(dst, block.data[start:end]...)
			bodyBytes += end - start - recordHeaderBytes
			next++
		}
	}
	return dst, next, true
}

// pinSpan returns, without copying, the encoded records of one block from
// offset from: as many as end below limit and keep the span within
// budgetBytes (the first one regardless, when atLeastOne). The block is pinned (its memory is not reused)
// until the caller calls unpin; the bytes never change while it is. hit is
// false when from is not cached.
func (c *tailCache) pinSpan(from, limit uint64, budgetBytes int, atLeastOne bool) (block *cacheBlock, span []byte, next uint64, hit bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if from < c.first || from >= c.next || from >= limit {
		return nil, nil, from, false
	}
	limit = min(limit, c.next)
	i := len(c.blocks) - 1
	for c.blocks[i].first > from {
		i--
	}
	block = c.blocks[i]
	start := int(block.positions[from-block.first])
	end := start
	for next = from; next < limit && next < block.end(); next++ {
		k := next - block.first
		recordEnd := len(block.data)
		if k+1 < uint64(len(block.positions)) {
			recordEnd = int(block.positions[k+1])
		}
		if (next > from || !atLeastOne) && recordEnd-start > budgetBytes {
			break
		}
		end = recordEnd
	}
	block.pins.Add(1)
	return block, block.data[start:end:end], next, true
}

// unpin releases a pinSpan.
func (b *cacheBlock) unpin() {
	if b.pins.Add(-1) < 0 {
		panic("log: tail cache block unpinned more often than pinned")
	}
}
