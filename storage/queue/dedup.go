package queue

// The deduplication table: which (producer, producer sequence) pairs and
// publisher-given message ids a queue has stored recently, so that a
// publish sent again after an unknown outcome is not stored twice.
//
// The table is part of State and, like the rest of it, a pure function of
// the applied log prefix: a publish record carries its dedup keys (record.go:
// the producer id and sequence, and whether the message id is the
// publisher's), and applying the record enters them. Every copy of the
// queue and every recovery (replay, snapshot plus replay) therefore holds
// the same table. Nothing in it depends on the clock: entries leave by the
// log's own time, the publish time of the newest applied publish.
//
// Keys are the first 16 bytes of a SHA-256 over a domain-separated
// encoding ("m" + message id, or "p" + producer id length, producer id and
// sequence), so memory per entry does not depend on id lengths and one
// publisher cannot make another's messages collide with its own.
//
// Bounds. An entry leaves the table when it is older than the window by the
// log's time (the newest applied publish is windowMs or more after it), or,
// earlier, when the table holds maxEntries entries and a newer one enters:
// the oldest leaves first and is counted in evictedEarly when its window
// had not ended. A lookup also checks the window against the caller's
// clock, so on an idle queue an entry stops matching once its window has
// passed even though no newer publish has pushed it out.
//
// The entries live in a ring that grows by doubling up to maxEntries, so a
// full table costs no copying: the oldest slot is reused.
//
// Invariants (checkDedup verifies them in tests):
//   - entries are in the order they entered, so their offsets never
//     decrease; count <= len(ring) <= maxEntries;
//   - index[k] is the offset of the newest held entry with key k, and
//     every held key is in index;
//   - an entry leaves only from the front.

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// dedupKey is a truncated SHA-256 of one deduplication key.
type dedupKey [16]byte

// dedupEntry is one key the table holds.
type dedupEntry struct {
	key       dedupKey
	offset    uint64 // the publish record that entered it
	publishMs int64  // that record's publish time
}

// dedupTable is the deduplication state of one queue partition.
type dedupTable struct {
	windowMs   int64 // 0: the queue does not deduplicate
	maxEntries int

	ring         []dedupEntry // count entries from ring[head] on, wrapping, oldest first
	head, count  int
	index        map[dedupKey]uint64
	evictedEarly uint64 // entries that left at the bound before their window ended
}

func newDedupTable(windowMs int64, maxEntries int) dedupTable {
	t := dedupTable{windowMs: windowMs, maxEntries: maxEntries}
	if windowMs > 0 {
		t.index = map[dedupKey]uint64{}
	}
	return t
}

func (t *dedupTable) enabled() bool { return t.windowMs > 0 }

// held is the number of entries the table holds.
func (t *dedupTable) held() int { return t.count }

// at returns the i-th oldest held entry.
func (t *dedupTable) at(i int) *dedupEntry { return &t.ring[(t.head+i)%len(t.ring)] }

// push appends an entry; the caller keeps count below maxEntries.
func (t *dedupTable) push(e dedupEntry) {
	if t.count == len(t.ring) {
		grown := make([]dedupEntry, min(max(2*len(t.ring), 64), t.maxEntries))
		for i := range t.count {
			grown[i] = *t.at(i)
		}
		t.ring, t.head = grown, 0
	}
	t.ring[(t.head+t.count)%len(t.ring)] = e
	t.count++
}

// lookup returns the offset of the stored publish with key, when its
// window has not passed at nowMs.
func (t *dedupTable) lookup(key dedupKey, nowMs int64) (uint64, bool) {
	offset, ok := t.index[key]
	if !ok {
		return 0, false
	}
	if t.publishMsOf(key, offset)+t.windowMs <= nowMs {
		return 0, false
	}
	return offset, true
}

// publishMsOf finds the publish time of the held entry (key, offset).
// Entries are sorted by offset, so it bisects.
func (t *dedupTable) publishMsOf(key dedupKey, offset uint64) int64 {
	low, high := 0, t.count
	for low < high {
		middle := (low + high) / 2
		if t.at(middle).offset < offset {
			low = middle + 1
		} else {
			high = middle
		}
	}
	for i := low; i < t.count && t.at(i).offset == offset; i++ {
		if e := t.at(i); e.key == key {
			return e.publishMs
		}
	}
	panic(fmt.Sprintf("queue: dedup index names offset %d, which the table does not hold", offset))
}

// enter adds the keys of the publish at offset, after removing what the
// window (by publishMs, the log's time) and the bound push out.
func (t *dedupTable) enter(keys []dedupKey, offset uint64, publishMs int64) {
	if !t.enabled() || len(keys) == 0 {
		return
	}
	for t.count > 0 && t.at(0).publishMs+t.windowMs <= publishMs {
		t.evictFront()
	}
	for _, key := range keys {
		for t.count >= t.maxEntries {
			t.evictedEarly++
			t.evictFront()
		}
		t.push(dedupEntry{key: key, offset: offset, publishMs: publishMs})
		t.index[key] = offset
	}
}

func (t *dedupTable) evictFront() {
	e := t.at(0)
	if t.index[e.key] == e.offset {
		delete(t.index, e.key)
	}
	*e = dedupEntry{}
	t.head = (t.head + 1) % len(t.ring)
	t.count--
}

// restore appends a decoded entry (snapshot.go), in entry order.
func (t *dedupTable) restore(e dedupEntry) {
	t.push(e)
	t.index[e.key] = e.offset
}

// oldestMs is the publish time of the oldest held entry (0 when empty).
func (t *dedupTable) oldestMs() int64 {
	if t.count == 0 {
		return 0
	}
	return t.at(0).publishMs
}

// messageIDKey is the key of a publisher-given message id.
func messageIDKey(id []byte) dedupKey {
	var scratch [128]byte
	buf := append(scratch[:0], 'm')
	return sumKey(append(buf, id...))
}

// producerKey is the key of a producer's numbered message.
func producerKey(producer []byte, seq uint64) dedupKey {
	var scratch [128]byte
	buf := append(scratch[:0], 'p')
	buf = binary.AppendUvarint(buf, uint64(len(producer)))
	buf = append(buf, producer...)
	return sumKey(binary.BigEndian.AppendUint64(buf, seq))
}

func sumKey(encoded []byte) dedupKey {
	sum := sha256.Sum256(encoded)
	return dedupKey(sum[:16])
}

// dedupKeysOf appends the keys a publish record carries: its producer
// pair, then its message id when the publisher gave it.
func dedupKeysOf(dst []dedupKey, rec *Record) []dedupKey {
	if rec.ProducerSeq != 0 {
		dst = append(dst, producerKey(rec.ProducerID, rec.ProducerSeq))
	}
	if rec.IDGiven {
		dst = append(dst, messageIDKey(rec.MessageID))
	}
	return dst
}

// checkDedup verifies the table's invariants; tests call it after every
// step.
func (t *dedupTable) checkDedup() error {
	if !t.enabled() {
		if t.held() != 0 || len(t.index) != 0 {
			return fmt.Errorf("dedup: a disabled table holds %d entries", t.held())
		}
		return nil
	}
	if t.held() > t.maxEntries {
		return fmt.Errorf("dedup: %d entries over the bound %d", t.held(), t.maxEntries)
	}
	if len(t.ring) > t.maxEntries || t.count > len(t.ring) {
		return fmt.Errorf("dedup: %d entries in a ring of %d, bound %d", t.count, len(t.ring), t.maxEntries)
	}
	newest := map[dedupKey]uint64{}
	for i := range t.count {
		e := t.at(i)
		if i > 0 && e.offset < t.at(i-1).offset {
			return fmt.Errorf("dedup: entry %d at offset %d below its predecessor %d", i, e.offset, t.at(i-1).offset)
		}
		newest[e.key] = e.offset
	}
	if len(newest) != len(t.index) {
		return fmt.Errorf("dedup: index holds %d keys, entries %d", len(t.index), len(newest))
	}
	for key, offset := range newest {
		if t.index[key] != offset {
			return fmt.Errorf("dedup: index names %d for a key whose newest entry is at %d", t.index[key], offset)
		}
	}
	return nil
}
