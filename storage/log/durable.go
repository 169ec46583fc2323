package log

// The durable-end record: the log's own proof of how far it was durable,
// which recovery trusts (recovery.go, rule 4). Format, part of the on-disk
// format: the file "durable-end" holds two slots, at byte 0 and at byte
// 4096 (so that no device write of one slot touches the other), each
//
//	u64 offset || CRC-32C(offset) (4 bytes, little-endian)
//
// A slot that fails its CRC (never written, or torn) is ignored; the
// record's value is the larger offset of the valid slots, and a file with
// no valid slot (or no file: logs written before it existed) proves
// nothing beyond the sealed segments.
//
// Invariant: every valid slot names an offset below which every record was
// covered by a completed fdatasync when the slot was written. The log keeps
// it by writing a slot only after the ledger (frontier.go) accepted a
// successful sync, with the durable_next that sync produced, so a slot can
// only ever lag the truth, never lead it:
//
//   - after each successful sync that moved durable_next, the next slot in
//     turn is overwritten in place with pwrite(2), without an fsync of its
//     own: it reaches the disk with the kernel's writeback, or with the
//     next durable write of the record. A slot that does not reach the
//     disk leaves the other, older one, which is still true. The two slots
//     alternate so that a torn write can only damage the slot being
//     written.
//   - the record is written durably (both slots, then fdatasync) at Open
//     once recovery has synced the tail, at Close after the closing sync,
//     at a suffix cut and at a restart at a base offset. Lowering it (a cut
//     below it) is always durable before any record is written above the
//     new end, so no stale, higher slot can survive a later crash.
//
// Cost: one pwrite of 12 bytes per sync that moved durable_next, on the
// goroutine that settles syncs, after the sync is handed back (so it
// overlaps the writer's next group); no fsync in the common path.

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/fibrilmq/fibril/storage/vfs"
)

const (
	durableEndFileName  = "durable-end"
	durableEndSlotBytes = 12
	durableEndSlotGap   = 4096
)

// durableEndRecord is the open durable-end file, written by the goroutine
// that settles syncs (the syncer, or the direct appender) and by the writer
// at close and cuts; mu serializes them.
type durableEndRecord struct {
	mu       sync.Mutex // the sync helper notes; the writer records durably
	file     vfs.File
	nextSlot int
	noted    uint64 // the last offset written
	slot     [durableEndSlotBytes]byte
	// generation changes at every durable record, which may lower the
	// value (a cut): a note taken before it is stale and never written,
	// so no higher value from before a cut can land after it.
	generation atomic.Uint64
}

func encodeDurableEndSlot(offset uint64) []byte {
	var slot [durableEndSlotBytes]byte
	putDurableEndSlot(&slot, offset)
	return slot[:]
}

func putDurableEndSlot(slot *[durableEndSlotBytes]byte, offset uint64) {
	binary.LittleEndian.PutUint64(slot[:8], offset)
	binary.LittleEndian.PutUint32(slot[8:], crc32.Checksum(slot[:8], castagnoli))
}

// decodeDurableEndSlot returns a slot's offset, or false when it fails its
// CRC.
func decodeDurableEndSlot(slot []byte) (uint64, bool) {
	if len(slot) < durableEndSlotBytes {
		return 0, false
	}
	if crc32.Checksum(slot[:8], castagnoli) != binary.LittleEndian.Uint32(slot[8:12]) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(slot[:8]), true
}

// readDurableEnd returns the proven durable end recorded in dir; ok is
// false when the file is missing or holds no valid slot.
func readDurableEnd(fs vfs.FS, dir string) (offset uint64, ok bool, err error) {
	path := filepath.Join(dir, durableEndFileName)
	_, exists, err := fs.Stat(path)
	if err != nil || !exists {
		return 0, false, err
	}
	file, err := fs.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer file.Close()
	for slot := 0; slot < 2; slot++ {
		buffer := make([]byte, durableEndSlotBytes)
		n, err := file.ReadAt(buffer, int64(slot*durableEndSlotGap))
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, false, err
		}
		if value, valid := decodeDurableEndSlot(buffer[:n]); valid && (!ok || value > offset) {
			offset, ok = value, true
		}
	}
	return offset, ok, nil
}

// openDurableEnd opens (creating when needed) the durable-end file for
// writing. The caller records a value durably before relying on it.
func openDurableEnd(fs vfs.FS, dir string) (*durableEndRecord, error) {
	path := filepath.Join(dir, durableEndFileName)
	_, exists, err := fs.Stat(path)
	if err != nil {
		return nil, err
	}
	var file vfs.File
	if exists {
		file, err = fs.OpenReadWrite(path)
	} else {
		file, err = fs.Create(path)
	}
	if err != nil {
		return nil, err
	}
	return &durableEndRecord{file: file}, nil
}

// note records offset in the next slot without syncing it; it does nothing
// unless offset is above the last value written and generation (read when
// offset became durable) is current. offset must be durable.
func (d *durableEndRecord) note(offset, generation uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if offset <= d.noted || generation != d.generation.Load() {
		return nil
	}
	putDurableEndSlot(&d.slot, offset)
	if _, err := d.file.WriteAt(d.slot[:], int64(d.nextSlot*durableEndSlotGap)); err != nil {
		return err
	}
	d.nextSlot = 1 - d.nextSlot
	d.noted = offset
	return nil
}

// recordDurably writes offset to both slots and syncs the file: the way to
// lower the record, and to make it current before the log relies on it.
// offset must be durable.
func (d *durableEndRecord) recordDurably(offset uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	putDurableEndSlot(&d.slot, offset)
	for i := 0; i < 2; i++ {
		if _, err := d.file.WriteAt(d.slot[:], int64(i*durableEndSlotGap)); err != nil {
			return err
		}
	}
	if err := d.file.Sync(); err != nil {
		return err
	}
	d.noted, d.nextSlot = offset, 0
	d.generation.Add(1)
	return nil
}

func (d *durableEndRecord) close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.file != nil {
		d.file.Close()
		d.file = nil
	}
}
