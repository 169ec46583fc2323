// Replication frames, spoken between nodes on peer links (peer.go): the
// owner of a queue partition pushes records to each follower, the follower
// reports how far it got or why it refused, and a node that lacks records
// fetches them in pages.
//
// Every frame names the partition by its coordination shard id, which the
// catalog hands out once per queue partition and never reuses (a queue
// deleted and declared again gets new ids), so a frame about an old
// declaration can never be applied to a new one. Layouts:
//
//	FQR1 push              partition u64, epoch u64, start_offset u64, previous_epoch u64,
//	                       committed_next u64, record_count u32, records bytes
//	FQP1 progress          partition u64, epoch u64, instance u64, durable_next u64
//	FQP2 progress-written  partition u64, epoch u64, instance u64, durable_next u64, written_next u64
//	FQN1 push-refused      partition u64, epoch u64, instance u64, reason u8, staged_next u64,
//	                       durable_next u64, history list<u16>{epoch u64, first_offset u64}, message string
//	FQF1 fetch             request_id u64, partition u64, epoch u64, from_offset u64,
//	                       max_records u32, max_bytes u32
//	FQG1 page              request_id u64, partition u64, from_offset u64, first_offset u64,
//	                       end_offset u64, record_count u32, records bytes
//
// records are whole log records exactly as the source's log stores them
// (storage/log's record format, CRC included), starting at start_offset
// (push) or from_offset (page); this package does not look inside them,
// the receiving log checks every CRC, offset and epoch before it appends.
// A push with record_count 0 carries no records and serves as a keepalive
// that also moves committed_next.
//
// Invariant: a durable field never carries written progress. A follower
// sends FQP2 only when its written position is ahead of its durable one and
// FQP1 otherwise, so a durable queue's followers keep sending FQP1; a
// decoder refuses an FQP2 whose written_next is not above durable_next.
//
// FQR1, FQP1 and FQP2 were defined before any node sent them; their
// layouts changed once, when replication was built (partition, epoch and
// instance were added), and are fixed from here on.
package wire

// RefusalReason says why a follower refused a push (FQN1).
type RefusalReason uint8

// Refusal reasons. A follower refuses a whole push and appends none of it.
const (
	// RefusedOffset: start_offset is not the follower's staged_next, or its
	// record before start_offset has another epoch than previous_epoch (the
	// two logs diverge there). The owner resumes from a point both hold,
	// using staged_next and history.
	RefusedOffset RefusalReason = 1
	// RefusedEpoch: the push's epoch is older than the one the follower is
	// sealed at. The sender is no longer the owner.
	RefusedEpoch RefusalReason = 2
	// RefusedLatched: the follower's log latched after a storage failure;
	// it drops out of the written set until it is repaired.
	RefusedLatched RefusalReason = 3
	// RefusedCorrupt: a record failed its CRC, offset or type check.
	RefusedCorrupt RefusalReason = 4
	// RefusedUnknown: the node does not host a replica of the partition.
	RefusedUnknown RefusalReason = 5
	// RefusedBehind: the follower's log ends below the source's first
	// retained offset or needs a fetch first; it catches up through fetch.
	RefusedBehind RefusalReason = 6
)

func (r RefusalReason) String() string {
	switch r {
	case RefusedOffset:
		return "offset"
	case RefusedEpoch:
		return "epoch"
	case RefusedLatched:
		return "latched"
	case RefusedCorrupt:
		return "corrupt"
	case RefusedUnknown:
		return "unknown"
	case RefusedBehind:
		return "behind"
	}
	return "refusal(?)"
}

// EpochStart is one entry of a log's epoch history: epoch Epoch's records
// start at FirstOffset.
type EpochStart struct {
	Epoch       uint64
	FirstOffset uint64
}

// Push (FQR1) carries records from a partition's owner to a follower.
type Push struct {
	Partition   uint64 // the partition's coordination shard id
	Epoch       uint64 // the owner's epoch; a follower refuses pushes older than its seal
	StartOffset uint64 // offset of the first record (or of the next record, for a keepalive)
	// PreviousEpoch is the epoch of the owner's record at StartOffset-1, or
	// 0 when StartOffset is the first offset the owner holds: the follower
	// appends only if its own record there has the same epoch.
	PreviousEpoch uint64
	// CommittedNext is the owner's quorum frontier at the queue's boundary:
	// every record below it stands on the policy's number of copies.
	CommittedNext uint64
	RecordCount   uint32 // records in Records
	Records       []byte // whole log records, aliasing the body after a decode
}

func (*Push) Tag() Tag { return TagPush }

func (f *Push) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPush)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.StartOffset)
	dst = appendU64(dst, f.PreviousEpoch)
	dst = appendU64(dst, f.CommittedNext)
	dst = appendU32(dst, f.RecordCount)
	dst = appendBytes(dst, "records", f.Records)
	return endFrame(dst, start)
}

func (f *Push) Decode(body []byte) error {
	d := newDecoder(TagPush, body)
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.nonZeroU64("epoch")
	f.StartOffset = d.u64("start_offset")
	f.PreviousEpoch = d.u64("previous_epoch")
	f.CommittedNext = d.u64("committed_next")
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
	Partition   uint64
	Epoch       uint64 // the epoch of the pushes acknowledged
	Instance    uint64 // the follower's replica instance (changes at every process start)
	DurableNext uint64
}

func (*Progress) Tag() Tag { return TagProgress }

func (f *Progress) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagProgress)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.Instance)
	dst = appendU64(dst, f.DurableNext)
	return endFrame(dst, start)
}

func (f *Progress) Decode(body []byte) error {
	d := newDecoder(TagProgress, body)
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.nonZeroU64("epoch")
	f.Instance = d.nonZeroU64("instance")
	f.DurableNext = d.u64("durable_next")
	return d.finish()
}

// ProgressWritten (FQP2) reports a follower's durable and written
// positions when written is ahead.
type ProgressWritten struct {
	Partition   uint64
	Epoch       uint64
	Instance    uint64
	DurableNext uint64
	WrittenNext uint64 // always above DurableNext
}

func (*ProgressWritten) Tag() Tag { return TagProgressWritten }

func (f *ProgressWritten) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagProgressWritten)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.Instance)
	dst = appendU64(dst, f.DurableNext)
	dst = appendU64(dst, f.WrittenNext)
	return endFrame(dst, start)
}

func (f *ProgressWritten) Decode(body []byte) error {
	d := newDecoder(TagProgressWritten, body)
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.nonZeroU64("epoch")
	f.Instance = d.nonZeroU64("instance")
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
func EncodeProgress(dst []byte, partition, epoch, instance, durableNext, writtenNext uint64) []byte {
	if writtenNext > durableNext {
		frame := ProgressWritten{Partition: partition, Epoch: epoch, Instance: instance,
			DurableNext: durableNext, WrittenNext: writtenNext}
		return frame.Encode(dst)
	}
	frame := Progress{Partition: partition, Epoch: epoch, Instance: instance, DurableNext: durableNext}
	return frame.Encode(dst)
}

// PushRefused (FQN1) answers a push the follower did not append.
type PushRefused struct {
	Partition uint64
	// Epoch is the epoch the follower is sealed at (at least the push's
	// when the reason is not RefusedEpoch).
	Epoch    uint64
	Instance uint64
	Reason   RefusalReason
	// StagedNext and DurableNext are the follower's log end and durable
	// end; History is its epoch history, so the owner can find the last
	// offset both logs agree on.
	StagedNext  uint64
	DurableNext uint64
	History     []EpochStart
	Message     string
}

func (*PushRefused) Tag() Tag { return TagPushRefused }

func (f *PushRefused) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPushRefused)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.Instance)
	dst = appendU8(dst, uint8(f.Reason))
	dst = appendU64(dst, f.StagedNext)
	dst = appendU64(dst, f.DurableNext)
	dst = appendEpochHistory(dst, f.History)
	dst = appendString(dst, "message", f.Message)
	return endFrame(dst, start)
}

func (f *PushRefused) Decode(body []byte) error {
	d := newDecoder(TagPushRefused, body)
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.u64("epoch")
	f.Instance = d.nonZeroU64("instance")
	f.Reason = RefusalReason(d.enum("reason", uint8(RefusedOffset), uint8(RefusedBehind)))
	f.StagedNext = d.u64("staged_next")
	f.DurableNext = d.u64("durable_next")
	f.History = d.epochHistory(f.History)
	f.Message = d.str("message")
	return d.finish()
}

// Fetch (FQF1) asks a node for the records of a partition from an offset,
// in one page. A follower catching up asks the owner; a new owner asks the
// replica whose history recovery chose.
type Fetch struct {
	RequestID  uint64
	Partition  uint64
	Epoch      uint64 // the asker's epoch: a source sealed at a newer epoch refuses
	FromOffset uint64
	MaxRecords uint32 // at most this many records (not 0)
	MaxBytes   uint32 // and at most this many record bytes, but always at least one record (not 0)
}

func (*Fetch) Tag() Tag { return TagFetch }

func (f *Fetch) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagFetch)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	dst = appendU64(dst, f.FromOffset)
	dst = appendU32(dst, f.MaxRecords)
	dst = appendU32(dst, f.MaxBytes)
	return endFrame(dst, start)
}

func (f *Fetch) Decode(body []byte) error {
	d := newDecoder(TagFetch, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.nonZeroU64("epoch")
	f.FromOffset = d.u64("from_offset")
	f.MaxRecords = d.u32("max_records")
	if f.MaxRecords == 0 && d.err == nil {
		d.off -= 4
		d.failf("max_records", "is 0")
	}
	f.MaxBytes = d.u32("max_bytes")
	if f.MaxBytes == 0 && d.err == nil {
		d.off -= 4
		d.failf("max_bytes", "is 0")
	}
	return d.finish()
}

// Page (FQG1) answers a fetch with records from FromOffset. A page with
// no records and FirstOffset above FromOffset means the source no longer
// holds FromOffset; one with no records and EndOffset equal to FromOffset
// means the asker is caught up.
type Page struct {
	RequestID   uint64
	Partition   uint64
	FromOffset  uint64
	FirstOffset uint64 // the source's first retained offset
	EndOffset   uint64 // the source's log end (what it may serve next)
	RecordCount uint32
	Records     []byte // whole log records from FromOffset, aliasing the body after a decode
}

func (*Page) Tag() Tag { return TagPage }

func (f *Page) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPage)
	dst = f.appendFields(dst)
	return endFrame(dst, start)
}

func (f *Page) appendFields(dst []byte) []byte {
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.FromOffset)
	dst = appendU64(dst, f.FirstOffset)
	dst = appendU64(dst, f.EndOffset)
	dst = appendU32(dst, f.RecordCount)
	return appendBytes(dst, "records", f.Records)
}

func (f *Page) Decode(body []byte) error {
	d := newDecoder(TagPage, body)
	f.decodeFields(&d)
	return d.finish()
}

func (f *Page) decodeFields(d *decoder) {
	f.RequestID = d.nonZeroU64("request_id")
	f.Partition = d.nonZeroU64("partition")
	f.FromOffset = d.u64("from_offset")
	f.FirstOffset = d.u64("first_offset")
	f.EndOffset = d.u64("end_offset")
	f.RecordCount = d.u32("record_count")
	recordsAt := d.off
	f.Records = d.bytes("records")
	if d.err == nil && (f.RecordCount == 0) != (len(f.Records) == 0) {
		d.off = recordsAt
		d.failf("records", "record_count %d does not match %d record bytes", f.RecordCount, len(f.Records))
	}
}

// PageAfter (FQG2) is a page (FQG1) that also names the epoch of the
// source's record before FromOffset (0 when FromOffset is the source's
// first offset or 0). The asker appends the records only when its own
// record before FromOffset has that epoch: the log-matching check a push
// makes with its previous_epoch, so a fetch never grows a log that
// disagrees with its source below the point it fetches from.
type PageAfter struct {
	Page
	PreviousEpoch uint64
}

func (*PageAfter) Tag() Tag { return TagPageAfter }

func (f *PageAfter) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPageAfter)
	dst = f.Page.appendFields(dst)
	dst = appendU64(dst, f.PreviousEpoch)
	return endFrame(dst, start)
}

func (f *PageAfter) Decode(body []byte) error {
	d := newDecoder(TagPageAfter, body)
	f.Page.decodeFields(&d)
	f.PreviousEpoch = d.u64("previous_epoch")
	return d.finish()
}

func appendEpochHistory(dst []byte, history []EpochStart) []byte {
	dst = appendCount16(dst, "history", len(history))
	for _, entry := range history {
		dst = appendU64(dst, entry.Epoch)
		dst = appendU64(dst, entry.FirstOffset)
	}
	return dst
}

// epochHistory decodes a list<u16> of (epoch, first_offset) in which both
// epochs and first offsets increase strictly.
func (d *decoder) epochHistory(dst []EpochStart) []EpochStart {
	n := d.count16("history", 16)
	dst = growSlice(dst, n)
	for i := range n {
		at := d.off
		dst[i] = EpochStart{Epoch: d.u64("epoch"), FirstOffset: d.u64("first_offset")}
		if d.err == nil && i > 0 && (dst[i].Epoch <= dst[i-1].Epoch || dst[i].FirstOffset < dst[i-1].FirstOffset) {
			d.off = at
			d.failf("history", "entry %d (epoch %d at %d) does not follow epoch %d at %d",
				i, dst[i].Epoch, dst[i].FirstOffset, dst[i-1].Epoch, dst[i-1].FirstOffset)
		}
		if d.err == nil && dst[i].Epoch == 0 {
			d.off = at
			d.failf("history", "entry %d has epoch 0", i)
		}
	}
	return dst
}
