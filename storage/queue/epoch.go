package queue

// Epochs and message identity.
//
// Epoch file format (part of the on-disk format):
//
//	magic "FQEP" | version u8 (1) | epoch u64 little-endian |
//	crc32c u32 little-endian over everything before it
//
// Every record carries the epoch of the copy that appended it (the log
// stores it in the record header). A message's identity is (epoch of its
// publish record, offset): the same on every copy, since followers store
// the owner's records byte for byte, and the same across restarts for a
// record that survives.
//
// Rule: a copy appends under an epoch above every epoch it may have
// appended under before. Offsets are reused only after records are lost (a
// power loss, a storage failure's cut, a follower's divergent suffix), and
// only by appends after the loss, which carry a greater epoch than the lost
// records did; so (epoch, offset) never names two messages. The epoch file
// holds the highest epoch this copy opened as owner under, written durably
// before the first append under it, because the lost records' epoch may be
// nowhere else: a power loss can take every record of the last epoch.
//
//   - Single node: every open takes max(stored, newest epoch in the log)
//     + 1. An epoch file that is missing while the log holds epochs, or
//     unreadable, leaves the last epoch used unknown; the open then jumps
//     epochGap past the log's newest epoch and logs a warning.
//   - Replicated owner (OpenOwner, Promote): the cluster's coordination
//     epoch, which must be above the stored epoch and above every epoch in
//     the log (ErrEpochStale otherwise): the cluster gives every ownership
//     start, a restart of the same owner included, a new epoch.
//   - Replica: appends nothing of its own and stores nothing.
//
// Records written before epochs existed carry epoch 0; their identity is
// (0, offset), and every later open appends under epoch 1 or more.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path"
)

const (
	epochMagic   = "FQEP"
	epochVersion = 1
	// epochGap is how far past the log's newest epoch a single-node open
	// jumps when the epoch file cannot say which epoch was used last: far
	// more opens than could have appended only records a crash took.
	epochGap = 1 << 20
)

func encodeEpoch(epoch uint64) []byte {
	buf := append([]byte(epochMagic), epochVersion)
	buf = binary.LittleEndian.AppendUint64(buf, epoch)
	return appendChecksum(buf)
}

func decodeEpoch(data []byte) (uint64, error) {
	body, ok := verifyChecksum(data)
	if !ok || len(body) != 13 || string(body[:4]) != epochMagic || body[4] != epochVersion {
		return 0, fmt.Errorf("%w: epoch file", ErrFileCorrupt)
	}
	return binary.LittleEndian.Uint64(body[5:]), nil
}

// storedEpoch reads the epoch file: exists is false when it is missing.
func storedEpoch(q *Queue) (epoch uint64, exists bool, err error) {
	data, exists, err := readFile(q.fs, path.Join(q.dir, epochName))
	if err != nil || !exists {
		return 0, exists, err
	}
	epoch, err = decodeEpoch(data)
	return epoch, true, err
}

// newestLogEpoch is the newest epoch among the log's records (0 when none).
func newestLogEpoch(l partitionLog) uint64 {
	if history := l.EpochHistory(); len(history) > 0 {
		return history[len(history)-1].Epoch
	}
	return 0
}

// chooseEpoch applies the rule of the file comment. requested is the
// caller's epoch, 0 on a single node; warn reports an unknown last epoch.
func chooseEpoch(requested, stored uint64, exists bool, readErr error, newest uint64) (epoch uint64, warn error, err error) {
	if requested != 0 {
		if readErr != nil {
			return 0, nil, fmt.Errorf("queue: read epoch file: %w", readErr)
		}
		if requested <= stored || requested <= newest {
			return 0, nil, fmt.Errorf("%w: epoch %d, stored %d, newest in the log %d", ErrEpochStale, requested, stored, newest)
		}
		return requested, nil, nil
	}
	switch {
	case readErr != nil:
		return newest + epochGap, readErr, nil
	case !exists && newest > 0:
		return newest + epochGap, errors.New("epoch file missing while the log holds epochs"), nil
	}
	return max(stored, newest) + 1, nil, nil
}

// beginEpoch chooses the epoch this owner appends under and stores it
// durably before any append.
func (q *Queue) beginEpoch(requested uint64) error {
	stored, exists, readErr := storedEpoch(q)
	epoch, warn, err := chooseEpoch(requested, stored, exists, readErr, newestLogEpoch(q.log))
	if err != nil {
		return err
	}
	if warn != nil {
		q.logger.Warn("queue: last epoch unknown; skipping ahead", "dir", q.dir, "epoch", epoch, "err", warn)
	}
	if err := writeFileAtomic(q.fs, q.dir, epochName, encodeEpoch(epoch)); err != nil {
		return fmt.Errorf("queue: store epoch: %w", err)
	}
	q.epoch = epoch
	return nil
}
