package queue

// Incarnation history file format (part of the on-disk format):
//
//	magic "FQIN" | version u8 (1) | count uvarint |
//	count x (id u64 little-endian, first offset uvarint), first offsets increasing |
//	crc32c u32 little-endian over everything before it
//
// An incarnation is a random 64-bit id chosen at every open and made
// durable before the queue appends anything. Entry (id, first) says that
// records from offset first on were appended under id, up to the next
// entry's first. A message's identity is (incarnation of its offset range,
// offset): it stays the same across restarts for a record that survives,
// and differs when a power loss or a cut drops records and new publishes
// reuse their offsets, because those are appended under a newer id.
//
// Why a new id at every open rather than only after a detected cut: the
// queue cannot tell, at open, whether the previous process wrote records
// that the crash dropped (a power loss leaves no trace). A fresh id per open
// is always safe, costs one small synced write per open, and does not change
// the identity of surviving records, which resolve through the history.

import (
	"encoding/binary"
	"fmt"
	"sort"
)

type incarnation struct {
	id    uint64
	first uint64
}

const (
	incarnationMagic   = "FQIN"
	incarnationVersion = 1
)

func encodeIncarnations(history []incarnation) []byte {
	buf := append([]byte(incarnationMagic), incarnationVersion)
	buf = binary.AppendUvarint(buf, uint64(len(history)))
	for _, inc := range history {
		buf = binary.LittleEndian.AppendUint64(buf, inc.id)
		buf = binary.AppendUvarint(buf, inc.first)
	}
	return appendChecksum(buf)
}

func decodeIncarnations(data []byte) ([]incarnation, error) {
	body, ok := verifyChecksum(data)
	if !ok || len(body) < 5 || string(body[:4]) != incarnationMagic || body[4] != incarnationVersion {
		return nil, fmt.Errorf("%w: incarnation header or checksum", ErrFileCorrupt)
	}
	r := reader{buf: body[5:]}
	count := r.uvarint()
	if count > uint64(len(r.buf))/9 {
		return nil, fmt.Errorf("%w: incarnation count", ErrFileCorrupt)
	}
	history := make([]incarnation, 0, count)
	for i := uint64(0); i < count; i++ {
		inc := incarnation{id: r.uint64(), first: r.uvarint()}
		if len(history) > 0 && inc.first <= history[len(history)-1].first {
			r.err = errShortBuffer
		}
		history = append(history, inc)
	}
	if r.err != nil || len(r.buf) != 0 {
		return nil, fmt.Errorf("%w: incarnation body", ErrFileCorrupt)
	}
	return history, nil
}

// beginIncarnation returns history with a new incarnation id starting at
// next, the log's end at open. Entries starting at or after next appended
// nothing that survived, so they are dropped; entries whose whole range
// lies below firstOffset are pruned, keeping the one that covers it.
func beginIncarnation(history []incarnation, id, next, firstOffset uint64) []incarnation {
	kept := history[:0:0]
	for _, inc := range history {
		if inc.first < next {
			kept = append(kept, inc)
		}
	}
	kept = append(kept, incarnation{id: id, first: next})
	covering := sort.Search(len(kept), func(i int) bool { return kept[i].first > firstOffset }) - 1
	if covering > 0 {
		kept = kept[covering:]
	}
	return kept
}

// incarnationAt returns the id under which offset was appended; 0 for an
// offset before the history (records older than incarnation tracking).
func incarnationAt(history []incarnation, offset uint64) uint64 {
	i := sort.Search(len(history), func(i int) bool { return history[i].first > offset }) - 1
	if i < 0 {
		return 0
	}
	return history[i].id
}
