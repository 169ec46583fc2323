// Replication frames, spoken between nodes: the owner of a queue pushes
// records to each follower and the follower reports how far it got.
// Layouts:
//
//	FQR1 push              queue string, epoch u64, start_offset u64, record_count u32, records bytes
//	FQP1 progress          queue string, epoch u64, durable_next u64
//	FQP2 progress-written  queue string, epoch u64, durable_next u64, written_next u64
//
// records are raw log records exactly as the owner's log stores them,
// starting at start_offset; this package does not look inside them. A push
// with record_count 0 carries no records and serves as a keepalive.
//
// Invariant: a durable field never carries written progress. A follower
// sends FQP2 only when its written position is ahead of its durable one and
// FQP1 otherwise, so a durable queue's followers keep sending the FQP1 that
// every node reads; a decoder refuses an FQP2 whose written_next is not
// above durable_next.
package wire

// Push (FQR1) carries records from a queue's owner to a follower.
type Push struct {
	Queue       []byte
	Epoch       uint64 // the owner's epoch; a follower refuses pushes from older epochs
	StartOffset uint64 // offset of the first record
	RecordCount uint32 // records in Records
	Records     []byte // raw log records, aliasing the body after a decode
}

func (*Push) Tag() Tag { return TagPush }

func (f *Push) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPush)
	dst = appendStringBytes(dst, "queue", f.Queue)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.StartOffset)
	dst = appendU32(dst, f.RecordCount)
	dst = appendBytes(dst, "records", f.Records)
	return endFrame(dst, start)
}

func (f *Push) Decode(body []byte) error {
	d := newDecoder(TagPush, body)
	f.Queue = d.stringBytes("queue")
	f.Epoch = d.u64("epoch")
	f.StartOffset = d.u64("start_offset")
	f.RecordCount = d.u32("record_count")
	recordsAt := d.off
	f.Records = d.bytes("records")
	if d.err == nil && (f.RecordCount == 0) != (len(f.Records) == 0) {
		d.off = recordsAt
		d.failf("records", "record_count %d does not match %d record bytes", f.RecordCount, len(f.Records))
	}
	return d.finish()
}

// Progress (FQP1) reports a follower's durable position: the offset after
// the last record it has fsynced.
type Progress struct {
	Queue       []byte
	Epoch       uint64
	DurableNext uint64
}

func (*Progress) Tag() Tag { return TagProgress }

func (f *Progress) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagProgress)
	dst = appendStringBytes(dst, "queue", f.Queue)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.DurableNext)
	return endFrame(dst, start)
}

func (f *Progress) Decode(body []byte) error {
	d := newDecoder(TagProgress, body)
	f.Queue = d.stringBytes("queue")
	f.Epoch = d.u64("epoch")
	f.DurableNext = d.u64("durable_next")
	return d.finish()
}

// ProgressWritten (FQP2) reports a follower's durable and written
// positions when written is ahead.
type ProgressWritten struct {
	Queue       []byte
	Epoch       uint64
	DurableNext uint64
	WrittenNext uint64 // always above DurableNext
}

func (*ProgressWritten) Tag() Tag { return TagProgressWritten }

func (f *ProgressWritten) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagProgressWritten)
	dst = appendStringBytes(dst, "queue", f.Queue)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.DurableNext)
	dst = appendU64(dst, f.WrittenNext)
	return endFrame(dst, start)
}

func (f *ProgressWritten) Decode(body []byte) error {
	d := newDecoder(TagProgressWritten, body)
	f.Queue = d.stringBytes("queue")
	f.Epoch = d.u64("epoch")
	f.DurableNext = d.u64("durable_next")
	writtenAt := d.off
	f.WrittenNext = d.u64("written_next")
	if f.WrittenNext <= f.DurableNext && d.err == nil {
		d.off = writtenAt
		d.failf("written_next", "%d is not ahead of durable_next %d; send FQP1", f.WrittenNext, f.DurableNext)
	}
	return d.finish()
}

// EncodeProgress appends the progress frame a follower sends for these
// positions: FQP2 when writtenNext is ahead of durableNext, FQP1 otherwise.
// It does not allocate when dst has room.
func EncodeProgress(dst []byte, queue []byte, epoch, durableNext, writtenNext uint64) []byte {
	if writtenNext > durableNext {
		frame := ProgressWritten{Queue: queue, Epoch: epoch, DurableNext: durableNext, WrittenNext: writtenNext}
		return frame.Encode(dst)
	}
	frame := Progress{Queue: queue, Epoch: epoch, DurableNext: durableNext}
	return frame.Encode(dst)
}
