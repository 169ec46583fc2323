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
// Memory: at most maxBlocks blocks of blockBytes (the budget), plus the
// position tables (4 bytes per record). A record larger than a block is not
// cached: the writer writes it from its own buffer and the cache restarts
// after it.
//
// Concurrency: the writer mutates under mu; readers copy records out under
// the read lock and decode them after releasing it, so no callback ever
// runs with the lock held.

import "sync"

const (
	cacheBlockBytesMin = 64 << 10
	cacheBlockBytesMax = 1 << 20
	cacheBlocksMin     = 4
)

type cacheBlock struct {
	first     uint64
	positions []uint32 // positions[i] is where record first+i starts in data
	data      []byte   // capacity blockBytes, never reallocated
}

type tailCache struct {
	mu         sync.RWMutex
	blockBytes int
	maxBlocks  int
	blocks     []*cacheBlock
	spare      []*cacheBlock
	first      uint64
	next       uint64
}

func newTailCache(budgetBytes int64, next uint64) *tailCache {
	blockBytes := int64(cacheBlockBytesMin)
	if budgetBytes/16 > blockBytes {
		blockBytes = min(budgetBytes/16, cacheBlockBytesMax)
	}
	maxBlocks := max(int(budgetBytes/blockBytes), cacheBlocksMin)
	return &tailCache{blockBytes: int(blockBytes), maxBlocks: maxBlocks, first: next, next: next}
}

// groupBytesLimit is the largest group the writer may stage before
// flushing, so that starting a new block never evicts unflushed bytes.
func (c *tailCache) groupBytesLimit() int {
	return (c.maxBlocks - 2) * c.blockBytes
}

// fits reports whether a record of size bytes can be cached at all.
func (c *tailCache) fits(size int) bool { return size <= c.blockBytes }

// stage encodes one record into the newest block, starting a new block
// (evicting the oldest) when it does not fit. The record must fit a block
// and offset must equal c.next. It returns the block and the record's span.
func (c *tailCache) stage(offset, epoch uint64, recordType uint8, body []byte) (*cacheBlock, int, int) {
	size := encodedSize(len(body))
	c.mu.Lock()
	defer c.mu.Unlock()
	if offset != c.next || size > c.blockBytes {
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
	return block, start, len(block.data)
}

func (c *tailCache) newestLocked() *cacheBlock {
	if len(c.blocks) == 0 {
		return nil
	}
	return c.blocks[len(c.blocks)-1]
}

func (c *tailCache) startBlockLocked(first uint64) *cacheBlock {
	var block *cacheBlock
	switch {
	case len(c.spare) > 0:
		block = c.spare[len(c.spare)-1]
		c.spare = c.spare[:len(c.spare)-1]
	case len(c.blocks) >= c.maxBlocks:
		block = c.blocks[0]
		copy(c.blocks, c.blocks[1:])
		c.blocks = c.blocks[:len(c.blocks)-1]
	default:
		block = &cacheBlock{data: make([]byte, 0, c.blockBytes)}
	}
	block.first = first
	block.positions = block.positions[:0]
	block.data = block.data[:0]
	c.blocks = append(c.blocks, block)
	if len(c.blocks) > 0 {
		c.first = c.blocks[0].first
	}
	return block
}

// restartAt empties the cache so that it next holds offset (after an
// oversized record, a latch or a cut). The writer calls it only with no
// unflushed group.
func (c *tailCache) restartAt(offset uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spare = append(c.spare, c.blocks...)
	c.blocks = c.blocks[:0]
	c.first, c.next = offset, offset
}

// truncateFrom drops every record at or after offset.
func (c *tailCache) truncateFrom(offset uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if offset >= c.next {
		return
	}
	if offset <= c.first {
		c.spare = append(c.spare, c.blocks...)
		c.blocks = c.blocks[:0]
		c.first, c.next = offset, offset
		return
	}
	for len(c.blocks) > 0 {
		block := c.blocks[len(c.blocks)-1]
		if block.first < offset {
			keep := offset - block.first
			block.data = block.data[:block.positions[keep]]
			block.positions = block.positions[:keep]
			break
		}
		c.blocks = c.blocks[:len(c.blocks)-1]
		c.spare = append(c.spare, block)
	}
	c.next = offset
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
