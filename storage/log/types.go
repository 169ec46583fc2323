package log

import (
	"log/slog"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// Durability is the level an append waits for.
type Durability uint8

// Durability levels, weakest first.
const (
	// AfterWrite: accepted into the writer's staging buffer (staged).
	AfterWrite Durability = 1
	// AfterFlush: handed to the OS with write(2) (written). Survives a
	// process crash, not a power loss.
	AfterFlush Durability = 2
	// AfterFsync: an fdatasync covering the record completed (durable).
	AfterFsync Durability = 3
)

func (d Durability) String() string {
	switch d {
	case AfterWrite:
		return "AfterWrite"
	case AfterFlush:
		return "AfterFlush"
	case AfterFsync:
		return "AfterFsync"
	}
	return "Durability(invalid)"
}

// Entry is what callers append.
type Entry struct {
	Epoch uint64
	Type  uint8
	Body  []byte
}

// Record is what scans deliver. Body aliases an internal buffer that is
// valid only during the callback; copy it to keep it.
type Record struct {
	Offset uint64
	Epoch  uint64
	Type   uint8
	Body   []byte
}

// Result reports an append: the assigned offsets are [First, Next).
type Result struct {
	First, Next uint64
	Err         error
}

// Frontiers are the three exclusive progress offsets.
//
// Invariant: Durable <= Written <= Staged.
type Frontiers struct {
	Staged, Written, Durable uint64
}

// FrontierKind names one frontier for Watch.
type FrontierKind uint8

// Frontier kinds.
const (
	FrontierStaged FrontierKind = iota
	FrontierWritten
	FrontierDurable
	frontierKinds
)

// EpochStart is one epoch's first offset in this log.
type EpochStart struct {
	Epoch, FirstOffset uint64
}

// Status is a log's health and progress snapshot.
type Status struct {
	Frontiers   Frontiers
	FirstOffset uint64
	// LastSyncTime is when the last successful sync completed (zero when
	// none completed since Open; Open's own recovery sync counts).
	LastSyncTime time.Time
	// DurableLagRecords and DurableLagBytes are written minus durable.
	DurableLagRecords uint64
	DurableLagBytes   int64
	// SyncPending is true while a sync is in flight.
	SyncPending bool
	// LastError is the last storage error (nil when none).
	LastError error
	// Latched is true after a failed write or sync.
	Latched bool
	// SyncInterval is the background sync interval in force (0 = off).
	SyncInterval time.Duration
	// Incarnation changes at every Open and every suffix cut.
	Incarnation uint64
	// TailCacheBytes is the memory this log's tail cache holds now.
	TailCacheBytes int64
	// FileSyncs and DirectorySyncs count the fdatasync calls on this log's
	// files and the fsync calls on its directory since Open (Open's own
	// recovery syncs included).
	FileSyncs, DirectorySyncs uint64
}

// Options configure a log. The zero value of every field but SyncInterval
// means its default; SyncInterval 0 turns background sync off, so start
// from DefaultOptions.
type Options struct {
	// FS is the filesystem; default vfs.OS.
	FS vfs.FS
	// SegmentBytes is the rollover size; default 64 MiB, at most 1 GiB.
	SegmentBytes int64
	// BaseOffset is the first offset of a new, empty log.
	BaseOffset uint64
	// SyncInterval is the background sync interval; 0 turns it off and
	// leaves syncing to the OS (and to AfterFsync appends).
	SyncInterval time.Duration
	// ExternalTicks: the caller drives background sync through Tick; no
	// ticker goroutine runs.
	ExternalTicks bool
	// Clock is the time source for sync decisions and status; default
	// time.Now.
	Clock func() time.Time
	// TailCacheBytes caps this log's tail cache; default 8 MiB. The cache
	// is also the writer's staging buffer, so it never goes below four
	// 64 KiB blocks; a negative value asks for that minimum. Its blocks
	// come from Budget, shared by every log of the node.
	TailCacheBytes int64
	// Budget is the node-wide tail-cache memory, descriptor cache and
	// sync counters this log draws on (budget.go); create one per node
	// with NewBudget and pass it to every log. Nil gives the log a private
	// budget with room for its own cache and the default descriptor bound.
	Budget *Budget
	// Logger receives storage failures; default slog.Default().
	Logger *slog.Logger
	// IndexIntervalBytes is the spacing of sparse index entries; default
	// 4 KiB.
	IndexIntervalBytes int64
	// MaxRecordBytes is the largest body an append accepts; default 4 MiB,
	// at most 64 MiB.
	MaxRecordBytes int
	// MaxGroupBytes bounds one grouped write; default 1 MiB.
	MaxGroupBytes int
	// RequestQueueLength bounds the appends waiting for the writer;
	// default 1024. AppendAsync waits for room when it is full.
	RequestQueueLength int
	// PreallocateSegments reserves each new segment's blocks up front
	// with fallocate (keeping the visible size) when the FS supports it.
	PreallocateSegments bool
	// ValidType, when set, is the type check applied to records read from
	// files; a record whose type it rejects is reported as ErrCorrupt.
	ValidType func(recordType uint8) bool
	// SyncDone is required by OpenDirect and ignored by Open: the log's
	// sync goroutine calls it each time a sync finishes, and any goroutine
	// that latches the log calls it, so that the appender's owner calls
	// Appender.SyncFinished on its own goroutine. It must not block and
	// must not call into the log (send a message; wake-ups may fold).
	SyncDone func()
}

// Default option values.
const (
	DefaultSegmentBytes       = 64 << 20
	DefaultSyncInterval       = 100 * time.Millisecond
	DefaultTailCacheBytes     = 8 << 20
	DefaultIndexIntervalBytes = 4 << 10
	DefaultMaxRecordBytes     = 4 << 20
	DefaultMaxGroupBytes      = 1 << 20
	DefaultRequestQueueLength = 1024
	maxSegmentBytes           = 1 << 30
)

// DefaultOptions returns the defaults, including the 100 ms background
// sync interval.
func DefaultOptions() Options {
	return Options{SyncInterval: DefaultSyncInterval}
}

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.SegmentBytes > maxSegmentBytes {
		o.SegmentBytes = maxSegmentBytes
	}
	if o.SyncInterval < 0 {
		o.SyncInterval = 0
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = DefaultTailCacheBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.IndexIntervalBytes <= 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.MaxRecordBytes > recordBodyMax {
		o.MaxRecordBytes = recordBodyMax
	}
	if o.MaxGroupBytes <= 0 {
		o.MaxGroupBytes = DefaultMaxGroupBytes
	}
	if o.RequestQueueLength <= 0 {
		o.RequestQueueLength = DefaultRequestQueueLength
	}
	if o.Budget == nil {
		o.Budget = NewBudget(BudgetOptions{TailCacheBytes: max(o.TailCacheBytes, cacheBlocksMin*cacheBlockBytesMin)})
	}
	return o
}
