// Snapshot frames, spoken between nodes on peer links: a follower that
// needs records below its source's first retained offset (a fetched page
// said first_offset > from_offset) cannot catch up from the source's log,
// so it asks for the source's newest published snapshot of the queue
// state instead, restarts its log at the source's first offset with the
// source's epoch history below it, fetches from there, and installs the
// snapshot once its own log holds the snapshot's checkpoint marker. Layouts:
//
//	FQH1 snapshot-request  request_id u64, partition u64, epoch u64
//	FQI1 snapshot          request_id u64, partition u64, first_offset u64,
//	                       history list<u16>{epoch u64, first_offset u64}, snapshot bytes
//
// snapshot is the queue's snapshot file exactly as the source stores it
// (storage/queue's snapshot format, CRC included); this package does not
// look inside it, the asker verifies it (checksum, format, counts) before
// it changes anything, and its queue verifies it again against the log
// before it is used. A source that holds no published snapshot, is sealed
// at an epoch newer than the request's, or whose snapshot would not fit
// in a peer frame answers FER1 with the request's id instead.
package wire

// SnapshotRequest (FQH1) asks a node for its newest published snapshot of
// a partition's queue state, with the first offset and epoch history of
// its log, so a follower below the node's retained records can catch up.
type SnapshotRequest struct {
	RequestID uint64
	Partition uint64
	Epoch     uint64 // the asker's epoch: a source sealed at a newer epoch refuses
}

func (*SnapshotRequest) Tag() Tag { return TagSnapshotRequest }

func (f *SnapshotRequest) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSnapshotRequest)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.Epoch)
	return endFrame(dst, start)
}

func (f *SnapshotRequest) Decode(body []byte) error {
	d := newDecoder(TagSnapshotRequest, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Partition = d.nonZeroU64("partition")
	f.Epoch = d.nonZeroU64("epoch")
	return d.finish()
}

// Snapshot (FQI1) answers a snapshot request: the source's log starts at
// FirstOffset, History is its log's epoch history, and Snapshot is its
// newest published snapshot, which covers every record below an offset
// past FirstOffset (the snapshot says which).
type Snapshot struct {
	RequestID   uint64
	Partition   uint64
	FirstOffset uint64 // the source's first retained offset
	History     []EpochStart
	Snapshot    []byte // the snapshot file, aliasing the body after a decode; not empty
}

func (*Snapshot) Tag() Tag { return TagSnapshot }

func (f *Snapshot) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagSnapshot)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.Partition)
	dst = appendU64(dst, f.FirstOffset)
	dst = appendEpochHistory(dst, f.History)
	dst = appendBytes(dst, "snapshot", f.Snapshot)
	return endFrame(dst, start)
}

func (f *Snapshot) Decode(body []byte) error {
	d := newDecoder(TagSnapshot, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Partition = d.nonZeroU64("partition")
	f.FirstOffset = d.u64("first_offset")
	f.History = d.epochHistory(f.History)
	at := d.off
	f.Snapshot = d.bytes("snapshot")
	if d.err == nil && len(f.Snapshot) == 0 {
		d.off = at
		d.failf("snapshot", "is empty")
	}
	return d.finish()
}
