package log

// Small metadata files. Each is written whole as
//
//	payload || CRC-32C(payload) (4 bytes, little-endian)
//
// to "<name>.tmp", synced, renamed over <name> and the directory synced, so
// a reader sees either the old file or the new one, never a mix. The
// payloads, part of the on-disk format:
//
//	latched-cut.pending  u64 offset: every record at or after it must be
//	                     removed before anything reads the tail.
//	incarnation          u64 counter, bumped (durably) at every Open and
//	                     every suffix cut.
//	epochs               "FEP1", u32 count, count x (u64 epoch, u64 first
//	                     offset): the epoch history cache.
//	rebase.pending       u64 base, then an epochs payload: the log restarts
//	                     empty at base with that history (seal.go).
//
// The durable-end record (durable.go) is not a small file: it is written
// in place, two slots, without the rename.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"

	"github.com/fibrilmq/fibril/storage/vfs"
)

const (
	cutFileName         = "latched-cut.pending"
	incarnationFileName = "incarnation"
	epochsFileName      = "epochs"
	epochsMagic         = "FEP1"
)

// writeSmallFile replaces dir/name with payload, durably.
func writeSmallFile(fs vfs.FS, dir, name string, payload []byte) error {
	data := binary.LittleEndian.AppendUint32(append([]byte(nil), payload...), crc32.Checksum(payload, castagnoli))
	tmpPath := filepath.Join(dir, name+tmpSuffix)
	file, err := fs.Create(tmpPath)
	if err != nil {
		return err
	}
	if _, err := file.WriteAt(data, 0); err != nil {
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
	if err := fs.Rename(tmpPath, filepath.Join(dir, name)); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// readSmallFile returns dir/name's payload; exists is false when the file
// is missing. A file that fails its CRC is reported as ErrCorrupt.
func readSmallFile(fs vfs.FS, dir, name string) (payload []byte, exists bool, err error) {
	path := filepath.Join(dir, name)
	size, exists, err := fs.Stat(path)
	if err != nil || !exists {
		return nil, false, err
	}
	if size > 64<<20 {
		return nil, true, fmt.Errorf("%w: %s is %d bytes", ErrCorrupt, name, size)
	}
	file, err := fs.Open(path)
	if err != nil {
		return nil, true, err
	}
	defer file.Close()
	data := make([]byte, size)
	if _, err := file.ReadAt(data, 0); err != nil && !(errors.Is(err, io.EOF) && len(data) == int(size)) {
		return nil, true, err
	}
	if len(data) < 4 {
		return nil, true, fmt.Errorf("%w: %s is truncated", ErrCorrupt, name)
	}
	payload = data[:len(data)-4]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(data[len(data)-4:]) {
		return nil, true, fmt.Errorf("%w: %s fails its checksum", ErrCorrupt, name)
	}
	return payload, true, nil
}

func encodeUint64(value uint64) []byte { return binary.LittleEndian.AppendUint64(nil, value) }

func decodeUint64(name string, payload []byte) (uint64, error) {
	if len(payload) != 8 {
		return 0, fmt.Errorf("%w: %s has %d payload bytes, want 8", ErrCorrupt, name, len(payload))
	}
	return binary.LittleEndian.Uint64(payload), nil
}

// readCutFile returns the pending cut offset, if any.
func readCutFile(fs vfs.FS, dir string) (offset uint64, pending bool, err error) {
	payload, exists, err := readSmallFile(fs, dir, cutFileName)
	if err != nil || !exists {
		return 0, false, err
	}
	offset, err = decodeUint64(cutFileName, payload)
	return offset, err == nil, err
}

func removeCutFile(fs vfs.FS, dir string) error { return removeSmallFile(fs, dir, cutFileName) }

// removeSmallFile removes dir/name, durably.
func removeSmallFile(fs vfs.FS, dir, name string) error {
	if err := fs.Remove(filepath.Join(dir, name)); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}

// bumpIncarnation durably increments the incarnation counter. A missing or
// unreadable counter restarts from the current time in nanoseconds, so a
// lost file cannot bring back an incarnation already handed out.
func bumpIncarnation(fs vfs.FS, dir string, now func() int64) (uint64, error) {
	payload, exists, err := readSmallFile(fs, dir, incarnationFileName)
	var current uint64
	if err == nil && exists {
		current, err = decodeUint64(incarnationFileName, payload)
	}
	if err != nil || !exists {
		current = uint64(now())
	}
	next := current + 1
	if err := writeSmallFile(fs, dir, incarnationFileName, encodeUint64(next)); err != nil {
		return 0, err
	}
	return next, nil
}

func encodeEpochs(history []EpochStart) []byte {
	payload := append([]byte(epochsMagic), make([]byte, 4)...)
	binary.LittleEndian.PutUint32(payload[4:8], uint32(len(history)))
	for _, start := range history {
		payload = binary.LittleEndian.AppendUint64(payload, start.Epoch)
		payload = binary.LittleEndian.AppendUint64(payload, start.FirstOffset)
	}
	return payload
}

func decodeEpochs(payload []byte) ([]EpochStart, error) {
	if len(payload) < 8 || string(payload[:4]) != epochsMagic {
		return nil, fmt.Errorf("%w: epochs file has no header", ErrCorrupt)
	}
	count := int(binary.LittleEndian.Uint32(payload[4:8]))
	if len(payload) != 8+16*count {
		return nil, fmt.Errorf("%w: epochs file length does not match its count", ErrCorrupt)
	}
	history := make([]EpochStart, count)
	for i := range history {
		entry := payload[8+16*i:]
		history[i] = EpochStart{Epoch: binary.LittleEndian.Uint64(entry), FirstOffset: binary.LittleEndian.Uint64(entry[8:])}
	}
	return history, nil
}
