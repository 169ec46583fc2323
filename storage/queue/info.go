package queue

import (
	"fmt"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
)

// Info is a queue partition's state for admin views and metrics. Every
// progress field names its boundary: Written and Durable are the log's
// frontiers and never stand in for each other.
type Info struct {
	// Mode is the applied mode (mode.go); ModeRevision says which revision
	// set it and whether another is pending.
	Mode         Mode
	ModeRevision ModeInfo
	Counts       Counts
	// Settled is Counts.Settled(): acked, discarded, expired, dropped and
	// purged messages.
	Settled uint64
	// Applied is the offset after the last applied record.
	Applied uint64
	// Written and Durable are the log's written and durable frontiers
	// (exclusive).
	Written uint64
	Durable uint64
	// FirstOffset is the oldest record the log retains.
	FirstOffset uint64
	// CheckpointNext is the offset the newest published snapshot covers
	// (0: none since open and none found at open).
	CheckpointNext uint64
	// UnsyncedRecords and UnsyncedBytes are written but not yet durable.
	UnsyncedRecords uint64
	UnsyncedBytes   uint64
	// LastSync is when the log's last sync completed.
	LastSync    time.Time
	SyncPending bool
	// SyncInterval is the background sync interval the log runs with, as
	// the log itself reports it (0: background sync is off).
	SyncInterval time.Duration
	// Latched is true once a write or sync failed: the log refuses appends
	// until it is reopened, and the queue is fenced.
	Latched bool
	// LastError is the log's last storage error (a failed write or sync,
	// background syncs included); nil when none happened since open.
	LastError error
	// InflightAppends are operations appended and not yet applied.
	InflightAppends int
	// Epoch is the epoch this copy appends under (0 on a replica).
	Epoch uint64
	// Replica is true on a copy that applies another copy's records, and
	// AwaitingSnapshot on a replica that needs the owner's snapshot
	// (InstallSnapshot) before it can be promoted.
	Replica          bool
	AwaitingSnapshot bool
	// ApplyLimit is the caller's cap on the apply frontier, and
	// RetentionFloor its cap on compaction; both ^uint64(0) when the caller
	// supplies none (a single-node queue).
	ApplyLimit     uint64
	RetentionFloor uint64
	// Fenced is the storage failure that stopped the queue, if any.
	Fenced error
	// Dedup is the deduplication table's state; zero when the queue does
	// not deduplicate.
	Dedup DedupInfo
}

// DedupInfo describes a queue's deduplication table (dedup.go).
type DedupInfo struct {
	// Window and MaxEntries are the declared settings (defaults applied).
	Window     time.Duration
	MaxEntries int
	// Entries is how many keys the table holds (a message with both a
	// producer pair and an id holds two). It is derived from the log, the
	// same on every copy; entries whose window passed count until a newer
	// publish pushes them out, but no longer match.
	Entries int
	// EvictedEarly counts, since the queue was declared, the entries that
	// left at the MaxEntries bound before their window ended: while it
	// grows, the effective window is shorter than Window.
	EvictedEarly uint64
	// Oldest is the publish time of the oldest entry held (zero when
	// empty): now minus Oldest is how far back the table reaches.
	Oldest time.Time
	// DuplicatesRefused counts the publishes not stored as duplicates
	// since this copy opened the queue (a node-local figure).
	DuplicatesRefused uint64
}

func (q *Queue) dedupInfo() DedupInfo {
	table := &q.machine.state.dedup
	if !table.enabled() {
		return DedupInfo{}
	}
	info := DedupInfo{
		Window: q.opts.DedupWindow, MaxEntries: table.maxEntries, Entries: table.held(),
		EvictedEarly: table.evictedEarly, DuplicatesRefused: q.machine.duplicatesRefused,
	}
	if table.held() > 0 {
		info.Oldest = time.UnixMilli(table.oldestMs())
	}
	return info
}

// Info returns the queue's counts and progress. Delayed messages whose due
// time has passed by the clock are counted as ready. When it finds the log
// latched (a background sync can fail while no append is in flight), it
// fences the queue at once, so Info never reports a latched log under an
// unfenced queue.
func (q *Queue) Info() Info {
	state := q.machine.state
	state.promoteDue(q.nowMs())
	status := q.log.Status()
	if status.Latched {
		q.fenceOnLatch(status.LastError)
	}
	info := Info{
		Mode:             state.mode,
		ModeRevision:     q.machine.modeInfo(),
		Counts:           state.Counts(),
		Applied:          state.Next(),
		Written:          status.Frontiers.Written,
		Durable:          status.Frontiers.Durable,
		FirstOffset:      status.FirstOffset,
		CheckpointNext:   q.checkpointNext,
		UnsyncedRecords:  status.DurableLagRecords,
		UnsyncedBytes:    uint64(max(status.DurableLagBytes, 0)),
		LastSync:         status.LastSyncTime,
		SyncPending:      status.SyncPending,
		SyncInterval:     status.SyncInterval,
		Latched:          status.Latched,
		LastError:        status.LastError,
		InflightAppends:  q.machine.inflight(),
		Epoch:            q.epoch,
		Replica:          q.role == roleReplica,
		AwaitingSnapshot: q.awaitingSnapshot,
		ApplyLimit:       q.applyLimit,
		RetentionFloor:   q.retentionFloor,
		Fenced:           q.fenced,
		Dedup:            q.dedupInfo(),
	}
	info.Settled = info.Counts.Settled()
	return info
}

// fenceOnLatch fences the queue after its log latched with cause (nil when
// the log reported none).
func (q *Queue) fenceOnLatch(cause error) {
	if cause == nil {
		cause = log.ErrLatched
	}
	q.fence(fmt.Errorf("log latched: %w", cause))
}
