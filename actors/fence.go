package actors

// A replica's fence: the newest epoch it was sealed at or accepted a push
// of, kept in the partition directory so that a restarted replica never
// takes a push of an older epoch again (docs/protocol.md 8.3). The file
// also names the partition's coordination shard, so a directory left by an
// earlier declaration of the same queue name (deleted and declared again
// while this node was down) is recognised and removed before it is opened.
//
// The fence also says whether the copy is incomplete (replication's
// FollowerLog.Incomplete): it was created empty (a new directory, one
// lost and made again, a damaged copy set aside) and has not yet caught up
// past a committed frontier an owner of the active epoch reported. Such a
// copy may lack records it once acknowledged, so its seal does not count
// (docs/cluster.md, "A copy earns its vote"); the flag is cleared, durably,
// once it has caught up.
//
// Format of <partition dir>/fence: 24 bytes, the shard id and the epoch as
// big-endian u64s, a big-endian u32 of flags (bit 0: incomplete; the other
// bits are 0) and the CRC-32C of those 20 bytes as a big-endian u32. A
// 20-byte file is the earlier format (no flags: complete), with its CRC
// over the first 16 bytes.
// It is written to fence.tmp, synced, renamed over fence, and the
// directory synced, so the file always holds a whole old or a whole new
// fence. A missing file is fence 0 of no shard (a partition writes it when
// it first opens); a damaged one is an error (the replica fences itself
// rather than accept pushes it might have refused).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path"

	"github.com/fibrilmq/fibril/storage/vfs"
)

const (
	fenceFileName           = "fence"
	fenceTmpFileName        = "fence.tmp"
	fenceFileBytes          = 24
	fenceFileBytesUnflagged = 20 // the earlier format, without flags
	fenceFlagIncomplete     = 1 << 0
)

// fenceRecord is what the fence file holds.
type fenceRecord struct {
	shardID uint64
	epoch   uint64
	// incomplete: the copy opened empty and has not caught up since.
	incomplete bool
}

// errFenceDamaged is returned for a fence file that does not check out.
var errFenceDamaged = errors.New("actors: the replica's fence file is damaged")

var fenceTable = crc32.MakeTable(crc32.Castagnoli)

// readFence reads dir's fence; exists is false when there is no file.
func readFence(fs vfs.FS, dir string) (record fenceRecord, exists bool, err error) {
	name := path.Join(dir, fenceFileName)
	size, exists, err := fs.Stat(name)
	if err != nil || !exists {
		return fenceRecord{}, false, err
	}
	if size != fenceFileBytes && size != fenceFileBytesUnflagged {
		return fenceRecord{}, true, fmt.Errorf("%w: %s has %d bytes", errFenceDamaged, name, size)
	}
	file, err := fs.Open(name)
	if err != nil {
		return fenceRecord{}, true, err
	}
	defer file.Close()
	data := make([]byte, size)
	if _, err := file.ReadAt(data, 0); err != nil {
		return fenceRecord{}, true, err
	}
	covered := data[:size-4]
	if crc32.Checksum(covered, fenceTable) != binary.BigEndian.Uint32(data[size-4:]) {
		return fenceRecord{}, true, fmt.Errorf("%w: %s fails its checksum", errFenceDamaged, name)
	}
	record = fenceRecord{shardID: binary.BigEndian.Uint64(data[:8]), epoch: binary.BigEndian.Uint64(data[8:16])}
	if size == fenceFileBytes {
		flags := binary.BigEndian.Uint32(data[16:20])
		if flags&^fenceFlagIncomplete != 0 {
			return fenceRecord{}, true, fmt.Errorf("%w: %s has unknown flags %#x", errFenceDamaged, name, flags)
		}
		record.incomplete = flags&fenceFlagIncomplete != 0
	}
	return record, true, nil
}

// writeFence records the fence, durably.
func writeFence(fs vfs.FS, dir string, record fenceRecord) error {
	var data [fenceFileBytes]byte
	binary.BigEndian.PutUint64(data[:8], record.shardID)
	binary.BigEndian.PutUint64(data[8:16], record.epoch)
	if record.incomplete {
		binary.BigEndian.PutUint32(data[16:20], fenceFlagIncomplete)
	}
	binary.BigEndian.PutUint32(data[20:], crc32.Checksum(data[:20], fenceTable))
	temporary := path.Join(dir, fenceTmpFileName)
	file, err := fs.Create(temporary)
	if err != nil {
		return err
	}
	if _, err := file.WriteAt(data[:], 0); err != nil {
		file.Close()
		return err
	}
	if err := file.Sync(); err != nil {
		file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return err
	}
	if err := fs.Rename(temporary, path.Join(dir, fenceFileName)); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}
