// Queue info body: the msgpack map carried by queue-info (FIR1) and, as
// array entries, by queue-list (FLR1). Keys, in the order a node writes
// them (readers accept any order and skip keys they do not know):
//
//	name               str    always
//	mode               str    always: "durable" or "buffered"
//	policy             str    effective replication policy; omitted when empty
//	options            map    the declared options, set keys only (see QueueOptions)
//	ready              uint   always
//	leased             uint   always
//	delayed            uint   always
//	dead_lettered      uint   always
//	consumers          uint   always
//	written_next       uint   always
//	durable_next       uint   always
//	unsynced_records   uint   always
//	unsynced_bytes     uint   always
//	last_sync_unix_ms  int    always; 0 when no sync has completed
//	sync_interval_ms   uint   always; 0 = background sync off
//	sync_pending       bool   always
//	last_sync_error    str    omitted when empty
//	fenced             bool   always
//	fence_error        str    omitted when empty
//	owner              str    cluster only; omitted when empty
//	epoch              uint   cluster only; omitted when zero
//	replicas           array  cluster only; omitted when empty; maps of
//	                          node str, written_next uint, durable_next uint,
//	                          state str (omitted when empty), applied_mode str
//	                          and mode_revision uint (omitted when unknown/zero)
//	desired_mode       str    omitted when it is mode (no change pending)
//	mode_revision      uint   the revision that set mode; omitted when zero (the declared mode)
//	mode_change        map    omitted when none: revision uint, mode str, offset uint,
//	                          state str ("pending" or "failed"), reason str, since_unix_ms int
//	dedup_entries      uint   only when the queue deduplicates, with the three below
//	dedup_evicted_early uint
//	dedup_oldest_unix_ms int  0 when the table is empty
//	duplicates_refused uint
//
// Limits a reader enforces: name is present and not empty, at most
// MaxReplicas replicas per queue and MaxQueueListEntries queues per list.
package wire

import (
	"fmt"
	"math"
)

// MaxReplicas caps the replicas one queue info lists.
const MaxReplicas = 64

// QueueInfo describes one queue. Every position and count says which
// boundary it means; a durable field never carries written progress.
type QueueInfo struct {
	Name    string
	Mode    Mode         // durable or buffered
	Policy  string       // effective replication policy; empty on a single node
	Options QueueOptions // the declared options

	Ready        uint64 // messages selectable now
	Leased       uint64 // delivered, not yet settled
	Delayed      uint64 // waiting out a nack or redelivery delay
	DeadLettered uint64 // dead-lettered (moved or dropped) since the queue was declared
	Consumers    uint32 // live subscriptions

	WrittenNext     uint64 // log offset after the last record handed to the OS (written)
	DurableNext     uint64 // log offset after the last fsynced record (durable)
	UnsyncedRecords uint64 // records written but not yet durable
	UnsyncedBytes   uint64 // bytes written but not yet durable
	LastSyncUnixMs  int64  // when the last sync completed; 0 when none has
	SyncIntervalMs  uint32 // background sync target; 0 = off, the OS alone decides
	SyncPending     bool   // a sync is in flight
	LastSyncError   string // the last sync failure, if any

	Fenced     bool   // the queue refuses publishes after a storage fault
	FenceError string // why it is fenced

	// Cluster fields, empty on a single node.
	Owner    string        // node id of the owner
	Epoch    uint64        // ownership epoch
	Replicas []ReplicaInfo // every copy, owner included
	// CommittedNext is the quorum frontier: the log offset below which the
	// policy's copies hold every record at the queue's boundary (written
	// for a buffered queue, durable for a durable one). Confirms,
	// deliveries and settles apply only below it. Set by the owner.
	CommittedNext uint64
	// WrittenOn and DurableOn count the copies (owner included, of
	// len(Replicas)) whose written and durable positions are at or past
	// CommittedNext: every confirmed message is written on WrittenOn copies
	// and durable on DurableOn. Set by the owner.
	WrittenOn uint32
	DurableOn uint32
	// CommitWaitMs is how long the oldest record the owner holds at the
	// queue's boundary and the quorum frontier has not reached has waited
	// (0 when none waits): a partition whose confirms and deliveries are
	// stuck shows it growing while its log grows. Set by the owner.
	CommitWaitMs uint64

	// Dedup is the deduplication table's state; nil when the queue does
	// not deduplicate.
	Dedup *DedupStats

	// Mode revisions (docs/durability.md, "Changing the mode of an
	// existing queue"): Mode is the mode in force (applied); DesiredMode is
	// the mode the newest recorded revision names (unset: Mode);
	// ModeRevision is the revision that set Mode (0: as declared);
	// ModeChange is the pending or failed change, nil when none.
	DesiredMode  Mode
	ModeRevision uint64
	ModeChange   *ModeChangeInfo
}

// ModeChangeInfo describes a mode change that has not applied.
type ModeChangeInfo struct {
	Revision    uint64
	Mode        Mode   // the mode it switches to
	Offset      uint64 // the revision record's log offset: it applies once W copies are durable past it
	State       string // "pending" or "failed"
	Reason      string // what it waits for, or why it failed
	SinceUnixMs int64  // when it was recorded (or, after a failover, first seen)
}

// DedupStats describes a queue's deduplication table (docs/protocol.md 6.2).
type DedupStats struct {
	Entries      uint64 // dedup_entries: keys held (derived from the log: the same on every copy)
	EvictedEarly uint64 // dedup_evicted_early: entries that left at dedup_max_entries before their window ended
	OldestUnixMs int64  // dedup_oldest_unix_ms: publish time of the oldest entry held; 0 when empty
	Refused      uint64 // duplicates_refused: publishes not stored as duplicates since the owner opened the queue
}

// ReplicaInfo is one copy of a queue's log as its owner last heard of it.
type ReplicaInfo struct {
	Node        string
	WrittenNext uint64 // offset after the copy's last written record
	DurableNext uint64 // offset after the copy's last fsynced record
	// State is the copy's replication state as the owner sees it: "owner",
	// or a follower's link state ("in sync", "catching up", "probing",
	// "unreachable", "latched", "stale", with a reason in parentheses).
	// Empty when the answering node is not the owner.
	State string
	// AppliedMode and ModeRevision are the mode revision this copy has
	// applied as the owner derives it from the copy's durable position
	// (unset/0 when the owner cannot tell).
	AppliedMode  Mode
	ModeRevision uint64
}

// String gives a one-line summary, for logs.
func (q *QueueInfo) String() string {
	return fmt.Sprintf("%s mode=%s ready=%d leased=%d written_next=%d durable_next=%d",
		q.Name, q.Mode, q.Ready, q.Leased, q.WrittenNext, q.DurableNext)
}

func (q *QueueInfo) appendMsgpack(dst []byte) []byte {
	optional := 0
	for _, present := range []bool{q.Policy != "", q.LastSyncError != "", q.FenceError != "",
		q.Owner != "", q.Epoch != 0, len(q.Replicas) != 0, q.CommittedNext != 0, q.WrittenOn != 0, q.DurableOn != 0, q.CommitWaitMs != 0} {
		if present {
			optional++
		}
	}
	if q.Dedup != nil {
		optional += 4
	}
	for _, present := range []bool{q.DesiredMode != ModeUnset && q.DesiredMode != q.Mode, q.ModeRevision != 0, q.ModeChange != nil} {
		if present {
			optional++
		}
	}
	const always = 16
	dst = appendMsgpackMapHeader(dst, always+optional)
	dst = appendMsgpackString(appendMsgpackString(dst, "name"), q.Name)
	dst = appendMsgpackString(appendMsgpackString(dst, "mode"), q.Mode.String())
	if q.Policy != "" {
		dst = appendMsgpackString(appendMsgpackString(dst, "policy"), q.Policy)
	}
	dst = q.Options.appendMsgpack(appendMsgpackString(dst, "options"))
	for _, entry := range []struct {
		key   string
		value uint64
	}{{"ready", q.Ready}, {"leased", q.Leased}, {"delayed", q.Delayed},
		{"dead_lettered", q.DeadLettered}, {"consumers", uint64(q.Consumers)},
		{"written_next", q.WrittenNext}, {"durable_next", q.DurableNext},
		{"unsynced_records", q.UnsyncedRecords}, {"unsynced_bytes", q.UnsyncedBytes}} {
		dst = appendMsgpackUint(appendMsgpackString(dst, entry.key), entry.value)
	}
	dst = appendMsgpackInt(appendMsgpackString(dst, "last_sync_unix_ms"), q.LastSyncUnixMs)
	dst = appendMsgpackUint(appendMsgpackString(dst, "sync_interval_ms"), uint64(q.SyncIntervalMs))
	dst = appendMsgpackBool(appendMsgpackString(dst, "sync_pending"), q.SyncPending)
	if q.LastSyncError != "" {
		dst = appendMsgpackString(appendMsgpackString(dst, "last_sync_error"), q.LastSyncError)
	}
	dst = appendMsgpackBool(appendMsgpackString(dst, "fenced"), q.Fenced)
	if q.FenceError != "" {
		dst = appendMsgpackString(appendMsgpackString(dst, "fence_error"), q.FenceError)
	}
	if q.Owner != "" {
		dst = appendMsgpackString(appendMsgpackString(dst, "owner"), q.Owner)
	}
	if q.Epoch != 0 {
		dst = appendMsgpackUint(appendMsgpackString(dst, "epoch"), q.Epoch)
	}
	if q.CommittedNext != 0 {
		dst = appendMsgpackUint(appendMsgpackString(dst, "committed_next"), q.CommittedNext)
	}
	if q.WrittenOn != 0 {
		dst = appendMsgpackUint(appendMsgpackString(dst, "written_on"), uint64(q.WrittenOn))
	}
	if q.DurableOn != 0 {
		dst = appendMsgpackUint(appendMsgpackString(dst, "durable_on"), uint64(q.DurableOn))
	}
	if q.CommitWaitMs != 0 {
		dst = appendMsgpackUint(appendMsgpackString(dst, "commit_wait_ms"), q.CommitWaitMs)
	}
	if len(q.Replicas) > MaxReplicas {
		panic(fieldTooLong{field: "replicas", length: len(q.Replicas), limit: MaxReplicas})
	}
	if len(q.Replicas) != 0 {
		dst = appendMsgpackArrayHeader(appendMsgpackString(dst, "replicas"), len(q.Replicas))
		for _, replica := range q.Replicas {
			fields := 3
			for _, present := range []bool{replica.State != "", replica.AppliedMode != ModeUnset, replica.ModeRevision != 0} {
				if present {
					fields++
				}
			}
			dst = appendMsgpackMapHeader(dst, fields)
			dst = appendMsgpackString(appendMsgpackString(dst, "node"), replica.Node)
			dst = appendMsgpackUint(appendMsgpackString(dst, "written_next"), replica.WrittenNext)
			dst = appendMsgpackUint(appendMsgpackString(dst, "durable_next"), replica.DurableNext)
			if replica.State != "" {
				dst = appendMsgpackString(appendMsgpackString(dst, "state"), replica.State)
			}
			if replica.AppliedMode != ModeUnset {
				dst = appendMsgpackString(appendMsgpackString(dst, "applied_mode"), replica.AppliedMode.String())
			}
			if replica.ModeRevision != 0 {
				dst = appendMsgpackUint(appendMsgpackString(dst, "mode_revision"), replica.ModeRevision)
			}
		}
	}
	if d := q.Dedup; d != nil {
		dst = appendMsgpackUint(appendMsgpackString(dst, "dedup_entries"), d.Entries)
		dst = appendMsgpackUint(appendMsgpackString(dst, "dedup_evicted_early"), d.EvictedEarly)
		dst = appendMsgpackInt(appendMsgpackString(dst, "dedup_oldest_unix_ms"), d.OldestUnixMs)
		dst = appendMsgpackUint(appendMsgpackString(dst, "duplicates_refused"), d.Refused)
	}
	if q.DesiredMode != ModeUnset && q.DesiredMode != q.Mode {
		dst = appendMsgpackString(appendMsgpackString(dst, "desired_mode"), q.DesiredMode.String())
	}
	if q.ModeRevision != 0 {
		dst = appendMsgpackUint(appendMsgpackString(dst, "mode_revision"), q.ModeRevision)
	}
	if c := q.ModeChange; c != nil {
		dst = appendMsgpackMapHeader(appendMsgpackString(dst, "mode_change"), 6)
		dst = appendMsgpackUint(appendMsgpackString(dst, "revision"), c.Revision)
		dst = appendMsgpackString(appendMsgpackString(dst, "mode"), c.Mode.String())
		dst = appendMsgpackUint(appendMsgpackString(dst, "offset"), c.Offset)
		dst = appendMsgpackString(appendMsgpackString(dst, "state"), c.State)
		dst = appendMsgpackString(appendMsgpackString(dst, "reason"), c.Reason)
		dst = appendMsgpackInt(appendMsgpackString(dst, "since_unix_ms"), c.SinceUnixMs)
	}
	return dst
}

// Desired is the mode the newest recorded revision names.
func (q *QueueInfo) Desired() Mode {
	if q.DesiredMode != ModeUnset {
		return q.DesiredMode
	}
	return q.Mode
}

func (r *msgpackReader) modeChange() (*ModeChangeInfo, error) {
	c := new(ModeChangeInfo)
	err := r.mapEntries(func(key string) error {
		var err error
		switch key {
		case "revision":
			c.Revision, err = r.uint(math.MaxUint64)
		case "mode":
			err = r.mode(&c.Mode)
		case "offset":
			c.Offset, err = r.uint(math.MaxUint64)
		case "state":
			c.State, err = r.str()
		case "reason":
			c.Reason, err = r.str()
		case "since_unix_ms":
			c.SinceUnixMs, err = r.int()
		default:
			err = r.skip()
		}
		return err
	})
	return c, err
}

// dedupStats returns q.Dedup, allocating it on the first dedup key read.
func (q *QueueInfo) dedupStats() *DedupStats {
	if q.Dedup == nil {
		q.Dedup = new(DedupStats)
	}
	return q.Dedup
}

// parseQueueInfo decodes one queue info map that fills all of b.
func parseQueueInfo(b []byte) (QueueInfo, error) {
	var info QueueInfo
	if err := checkMsgpack(b); err != nil {
		return info, err
	}
	reader := msgpackReader{b: b}
	err := reader.queueInfo(&info)
	return info, err
}

// parseQueueList decodes an array of queue info maps into dst's storage.
func parseQueueList(b []byte, dst []QueueInfo) ([]QueueInfo, error) {
	if err := checkMsgpack(b); err != nil {
		return dst[:0], err
	}
	reader := msgpackReader{b: b}
	n, err := reader.arrayLen(MaxQueueListEntries)
	if err != nil {
		return dst[:0], err
	}
	dst = growSlice(dst, n)
	for i := range dst {
		dst[i] = QueueInfo{Replicas: dst[i].Replicas[:0]}
		if err := reader.queueInfo(&dst[i]); err != nil {
			return dst[:0], fmt.Errorf("queue %d: %w", i, err)
		}
	}
	if n == 0 {
		return nil, nil
	}
	return dst, nil
}

// queueInfo reads one queue info map. A map without a name is refused,
// which also bounds how many entries a list body can claim.
func (r *msgpackReader) queueInfo(q *QueueInfo) error {
	err := r.mapEntries(func(key string) error {
		var err error
		switch key {
		case "name":
			q.Name, err = r.str()
		case "mode":
			err = r.mode(&q.Mode)
		case "policy":
			q.Policy, err = r.str()
		case "options":
			q.Options, err = r.queueOptions(false)
		case "ready":
			q.Ready, err = r.uint(math.MaxUint64)
		case "leased":
			q.Leased, err = r.uint(math.MaxUint64)
		case "delayed":
			q.Delayed, err = r.uint(math.MaxUint64)
		case "dead_lettered":
			q.DeadLettered, err = r.uint(math.MaxUint64)
		case "consumers":
			q.Consumers, err = r.uint32()
		case "written_next":
			q.WrittenNext, err = r.uint(math.MaxUint64)
		case "durable_next":
			q.DurableNext, err = r.uint(math.MaxUint64)
		case "unsynced_records":
			q.UnsyncedRecords, err = r.uint(math.MaxUint64)
		case "unsynced_bytes":
			q.UnsyncedBytes, err = r.uint(math.MaxUint64)
		case "last_sync_unix_ms":
			q.LastSyncUnixMs, err = r.int()
		case "sync_interval_ms":
			q.SyncIntervalMs, err = r.uint32()
		case "sync_pending":
			q.SyncPending, err = r.boolean()
		case "last_sync_error":
			q.LastSyncError, err = r.str()
		case "fenced":
			q.Fenced, err = r.boolean()
		case "fence_error":
			q.FenceError, err = r.str()
		case "committed_next":
			q.CommittedNext, err = r.uint(math.MaxUint64)
		case "written_on":
			q.WrittenOn, err = r.uint32()
		case "durable_on":
			q.DurableOn, err = r.uint32()
		case "commit_wait_ms":
			q.CommitWaitMs, err = r.uint(math.MaxUint64)
		case "owner":
			q.Owner, err = r.str()
		case "epoch":
			q.Epoch, err = r.uint(math.MaxUint64)
		case "replicas":
			q.Replicas, err = r.replicas(q.Replicas[:0])
		case "dedup_entries":
			q.dedupStats().Entries, err = r.uint(math.MaxUint64)
		case "dedup_evicted_early":
			q.dedupStats().EvictedEarly, err = r.uint(math.MaxUint64)
		case "dedup_oldest_unix_ms":
			q.dedupStats().OldestUnixMs, err = r.int()
		case "duplicates_refused":
			q.dedupStats().Refused, err = r.uint(math.MaxUint64)
		case "desired_mode":
			err = r.mode(&q.DesiredMode)
		case "mode_revision":
			q.ModeRevision, err = r.uint(math.MaxUint64)
		case "mode_change":
			q.ModeChange, err = r.modeChange()
		default:
			err = r.skip()
		}
		return err
	})
	if err == nil && q.Name == "" {
		err = fmt.Errorf("queue info has no name")
	}
	return err
}

func (r *msgpackReader) replicas(dst []ReplicaInfo) ([]ReplicaInfo, error) {
	n, err := r.arrayLen(MaxReplicas)
	if err != nil {
		return dst[:0], err
	}
	dst = growSlice(dst, n)
	for i := range dst {
		replica := &dst[i]
		*replica = ReplicaInfo{}
		err := r.mapEntries(func(key string) error {
			var err error
			switch key {
			case "node":
				replica.Node, err = r.str()
			case "written_next":
				replica.WrittenNext, err = r.uint(math.MaxUint64)
			case "durable_next":
				replica.DurableNext, err = r.uint(math.MaxUint64)
			case "state":
				replica.State, err = r.str()
			case "applied_mode":
				err = r.mode(&replica.AppliedMode)
			case "mode_revision":
				replica.ModeRevision, err = r.uint(math.MaxUint64)
			default:
				err = r.skip()
			}
			return err
		})
		if err != nil {
			return dst[:0], fmt.Errorf("replica %d: %w", i, err)
		}
	}
	if n == 0 {
		return nil, nil
	}
	return dst, nil
}

func (r *msgpackReader) uint32() (uint32, error) {
	value, err := r.uint(math.MaxUint32)
	return uint32(value), err
}

func (r *msgpackReader) mode(m *Mode) error {
	name, err := r.str()
	if err != nil || name == "" {
		*m = ModeUnset
		return err
	}
	*m, err = ParseMode(name)
	return err
}
