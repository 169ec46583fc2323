package queue

// Snapshot format (part of the on-disk format; do not change):
//
//	magic "FQSN" | version u8 (1; 2 with a dedup section; 3 with a mode
//	                           section; 4 with both; 5 with marks in force) |
//	[version 5: sections u8 (bit 0: a dedup section; bit 1: a mode section)] |
//	next uvarint (the snapshot covers every record below it) |
//	checkpointID u64 little-endian (the id of the marker at next-1) |
//	counts, uvarints: Ready Delayed Leased DeadLettering QueuedBytes
//	                  Published Acked Discarded Expired Dropped Purged DeadLettered |
//	message count uvarint |
//	per message, in offset order:
//	    offset delta uvarint (from the previous message; the first from 0) |
//	    status u8 (1 ready, 2 delayed, 3 leased, 4 dead-lettering) |
//	    flags u8 (bit 0: delivered before; bit 1: sent, leased only) |
//	    attempts uvarint | payload bytes uvarint |
//	    publishMs uvarint | [timeMs uvarint: delayed and leased] | [holder uvarint: leased] |
//	[versions 2, 4, 5 with bit 0: evictedEarly uvarint | entry count uvarint |
//	    per dedup entry, oldest first: key 16 bytes |
//	    offset delta uvarint (from the previous entry; the first from 0) | publishMs uvarint] |
//	[versions 3, 4, 5 with bit 1: applied mode u8 | mode revision uvarint (not 0) |
//	    offset of the revision's record uvarint (below next)] |
//	crc32c u32 little-endian over everything before it
//
// Version 2 is written only when the queue deduplicates (dedup.go), and
// versions 3 and 4 only once a mode revision applied (mode.go), so a queue
// that does neither keeps writing the version 1 files older versions read; a decoder reads both, and refuses a version 2 snapshot for a queue
// whose options do not deduplicate.
// Version 5 is written only once a sent mark applied (record.go), which
// only a replicated owner writes; it says marks are in force, and only in
// it may a leased message carry flag bit 1 (a mark marked its lease). An
// older version refuses it (unknown version), as it refuses the log that
// holds the mark.
// A snapshot holds the applied state only: claims of operations in flight
// are not part of it. Decoding recomputes the live counts from the messages
// and refuses the snapshot when they disagree with the stored ones.

import (
	"encoding/binary"
	"fmt"
)

const (
	snapshotMagic        = "FQSN"
	snapshotVersion      = 1
	snapshotVersionDedup = 2
	snapshotVersionMode  = 3 // 3 + 1 with a dedup section
	snapshotVersionMarks = 5
	sectionDedup         = 1
	sectionMode          = 2
	flagDelivered        = 1
	flagSent             = 2
)

// EncodeSnapshot serializes the applied state.
func (s *State) EncodeSnapshot() []byte {
	live := len(s.messages) - s.head - s.tombstones
	buf := make([]byte, 0, 64+live*16)
	buf = append(buf, snapshotMagic...)
	if s.marking {
		sections := byte(0)
		if s.dedup.enabled() {
			sections |= sectionDedup
		}
		if s.modeRevision != 0 {
			sections |= sectionMode
		}
		buf = append(buf, snapshotVersionMarks, sections)
	} else {
		buf = append(buf, snapshotVersionOf(s.dedup.enabled(), s.modeRevision != 0))
	}
	buf = binary.AppendUvarint(buf, s.next)
	buf = binary.LittleEndian.AppendUint64(buf, s.checkpointID)
	for _, v := range s.countFields() {
		buf = binary.AppendUvarint(buf, *v)
	}
	buf = binary.AppendUvarint(buf, uint64(live))
	previous := uint64(0)
	for i := s.head; i < len(s.messages); i++ {
		m := &s.messages[i]
		if m.status == statusGone {
			continue
		}
		buf = appendSnapshotMessage(buf, m, previous)
		previous = m.offset
	}
	if s.dedup.enabled() {
		buf = s.dedup.appendSnapshot(buf)
	}
	if s.modeRevision != 0 {
		buf = append(buf, byte(s.mode))
		buf = binary.AppendUvarint(buf, s.modeRevision)
		buf = binary.AppendUvarint(buf, s.modeOffset)
	}
	return appendChecksum(buf)
}

func snapshotVersionOf(dedup, mode bool) byte {
	switch {
	case mode && dedup:
		return snapshotVersionMode + 1
	case mode:
		return snapshotVersionMode
	case dedup:
		return snapshotVersionDedup
	}
	return snapshotVersion
}

func (t *dedupTable) appendSnapshot(buf []byte) []byte {
	buf = binary.AppendUvarint(buf, t.evictedEarly)
	buf = binary.AppendUvarint(buf, uint64(t.held()))
	previous := uint64(0)
	for i := range t.count {
		e := t.at(i)
		buf = append(buf, e.key[:]...)
		buf = binary.AppendUvarint(buf, e.offset-previous)
		buf = binary.AppendUvarint(buf, uint64(e.publishMs))
		previous = e.offset
	}
	return buf
}

// decodeSnapshot reads the dedup section into t, whose bound came from the
// queue's options; next bounds the offsets.
func (t *dedupTable) decodeSnapshot(r *reader, next uint64) error {
	t.evictedEarly = r.uvarint()
	count := r.uvarint()
	if r.err == nil && (count > uint64(t.maxEntries) || count > uint64(len(r.buf))/18) {
		return fmt.Errorf("%w: %d dedup entries", ErrSnapshotCorrupt, count)
	}
	t.ring = make([]dedupEntry, min(max(count, 64), uint64(t.maxEntries)))
	previous := uint64(0)
	for i := uint64(0); i < count && r.err == nil; i++ {
		var e dedupEntry
		copy(e.key[:], r.bytes(len(e.key)))
		e.offset = previous + r.uvarint()
		e.publishMs = int64(r.uvarint())
		if r.err == nil && (e.offset < previous || e.offset >= next || e.publishMs < 0) {
			return fmt.Errorf("%w: dedup entry %d", ErrSnapshotCorrupt, i)
		}
		t.restore(e)
		previous = e.offset
	}
	return nil
}

// liveCountFields is how many of countFields are recomputed from messages.
const liveCountFields = 5

func (s *State) countFields() []*uint64 {
	c := &s.counts
	return []*uint64{&c.Ready, &c.Delayed, &c.Leased, &c.DeadLettering, &c.QueuedBytes,
		&c.Published, &c.Acked, &c.Discarded, &c.Expired, &c.Dropped, &c.Purged, &c.DeadLettered}
}

func appendSnapshotMessage(buf []byte, m *message, previous uint64) []byte {
	buf = binary.AppendUvarint(buf, m.offset-previous)
	flags := byte(0)
	if m.delivered {
		flags |= flagDelivered
	}
	if m.sent {
		flags |= flagSent
	}
	buf = append(buf, byte(m.status), flags)
	buf = binary.AppendUvarint(buf, uint64(m.attempts))
	buf = binary.AppendUvarint(buf, uint64(m.bytes))
	buf = binary.AppendUvarint(buf, uint64(m.publishMs))
	if m.status == statusDelayed || m.status == statusLeased {
		buf = binary.AppendUvarint(buf, uint64(m.timeMs))
	}
	if m.status == statusLeased {
		buf = binary.AppendUvarint(buf, m.holder)
	}
	return buf
}

// DecodeSnapshot rebuilds a State from a snapshot taken under opts.
func DecodeSnapshot(data []byte, opts Options) (*State, error) {
	body, ok := verifyChecksum(data)
	if !ok || len(body) < 5 || string(body[:4]) != snapshotMagic || body[4] < snapshotVersion || body[4] > snapshotVersionMarks {
		return nil, fmt.Errorf("%w: header or checksum", ErrSnapshotCorrupt)
	}
	version := body[4]
	withDedup := version == snapshotVersionDedup || version == snapshotVersionMode+1
	withMode := version == snapshotVersionMode || version == snapshotVersionMode+1
	r := reader{buf: body[5:]}
	marking := version == snapshotVersionMarks
	if marking {
		sections := r.byte()
		if r.err == nil && sections&^(sectionDedup|sectionMode) != 0 {
			return nil, fmt.Errorf("%w: sections %#x", ErrSnapshotCorrupt, sections)
		}
		withDedup, withMode = sections&sectionDedup != 0, sections&sectionMode != 0
	}
	s := NewState(opts, r.uvarint())
	s.marking = marking
	s.checkpointID = r.uint64()
	stored := make([]uint64, len(s.countFields()))
	for i := range stored {
		stored[i] = r.uvarint()
	}
	count := r.uvarint()
	if r.err == nil && count > uint64(len(r.buf))/5 {
		return nil, fmt.Errorf("%w: message count %d", ErrSnapshotCorrupt, count)
	}
	s.messages = make([]message, 0, count)
	previous := uint64(0)
	for i := uint64(0); i < count && r.err == nil; i++ {
		m, err := decodeSnapshotMessage(&r, previous, i == 0)
		if err != nil || m.offset >= s.next || (m.sent && !marking) {
			return nil, fmt.Errorf("%w: message %d", ErrSnapshotCorrupt, i)
		}
		s.restoreMessage(m)
		previous = m.offset
	}
	switch {
	case withDedup && !s.dedup.enabled():
		return nil, fmt.Errorf("%w: a dedup section for a queue that does not deduplicate", ErrSnapshotCorrupt)
	case withDedup:
		if err := s.dedup.decodeSnapshot(&r, s.next); err != nil {
			return nil, err
		}
	}
	if withMode {
		s.mode, s.modeRevision, s.modeOffset = Mode(r.byte()), r.uvarint(), r.uvarint()
		if r.err == nil && ((s.mode != Durable && s.mode != Buffered) || s.modeRevision == 0 || s.modeOffset >= s.next) {
			return nil, fmt.Errorf("%w: mode section", ErrSnapshotCorrupt)
		}
	}
	if r.err != nil || len(r.buf) != 0 {
		return nil, fmt.Errorf("%w: body", ErrSnapshotCorrupt)
	}
	for i, field := range s.countFields() {
		if i < liveCountFields && *field != stored[i] {
			return nil, fmt.Errorf("%w: live counts disagree with the messages", ErrSnapshotCorrupt)
		}
		*field = stored[i]
	}
	return s, nil
}

func decodeSnapshotMessage(r *reader, previous uint64, first bool) (message, error) {
	delta := r.uvarint()
	m := message{offset: previous + delta, status: status(r.byte())}
	flags := r.byte()
	m.delivered, m.sent = flags&flagDelivered != 0, flags&flagSent != 0
	m.attempts = uint32(r.uvarint())
	m.bytes = uint32(r.uvarint())
	m.publishMs = int64(r.uvarint())
	if m.status == statusDelayed || m.status == statusLeased {
		m.timeMs = int64(r.uvarint())
	}
	if m.status == statusLeased {
		m.holder = r.uvarint()
	}
	switch {
	case r.err != nil:
		return m, r.err
	case delta == 0 && !first, m.offset < previous:
		return m, errShortBuffer
	case m.status < statusReady || m.status > statusDeadLettering || flags&^(flagDelivered|flagSent) != 0:
		return m, errShortBuffer
	case m.sent && m.status != statusLeased:
		return m, errShortBuffer
	case m.publishMs < 0 || m.timeMs < 0:
		return m, errShortBuffer
	}
	return m, nil
}

// restoreMessage appends a decoded message with its derived structures.
func (s *State) restoreMessage(m message) {
	s.messages = append(s.messages, m)
	switch m.status {
	case statusReady:
		s.bits.add(m.offset, false)
		s.counts.Ready++
		s.counts.QueuedBytes += uint64(m.bytes)
	case statusDelayed:
		s.bits.add(m.offset, true)
		s.dueTimers.push(m.timeMs, m.offset)
		s.counts.Delayed++
		s.counts.QueuedBytes += uint64(m.bytes)
	case statusLeased:
		s.leaseTimers.push(m.timeMs, m.offset)
		s.counts.Leased++
	case statusDeadLettering:
		s.handoffs = append(s.handoffs, m.offset)
		s.counts.DeadLettering++
	}
}
