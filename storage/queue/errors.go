package queue

import "errors"

// Errors returned by the queue layer. Callers test them with errors.Is; the
// returned errors wrap them with the offset or option that caused them.
var (
	// ErrInvalidOptions is returned when queue options fail validation.
	ErrInvalidOptions = errors.New("queue: invalid options")
	// ErrDeclarationMismatch is returned by Open when the options differ from
	// the declaration stored in the queue directory; options are fixed at
	// first declare.
	ErrDeclarationMismatch = errors.New("queue: options differ from the stored declaration")
	// ErrNotLeased is returned when a settle names a message that is not
	// leased (unknown, ready, already settled or dead-lettered).
	ErrNotLeased = errors.New("queue: message is not leased")
	// ErrWrongHolder is returned when a settle names a message leased by
	// another holder.
	ErrWrongHolder = errors.New("queue: message is leased by another holder")
	// ErrSettlePending is returned when a settle names a message whose
	// earlier settle (or lease expiry) is appended but not yet applied.
	ErrSettlePending = errors.New("queue: an earlier settle of this message is not applied yet")
	// ErrNotDeadLettering is returned when a dead-letter confirmation names
	// a message that is not waiting for its dead-letter handoff.
	ErrNotDeadLettering = errors.New("queue: message is not waiting for a dead-letter handoff")
	// ErrQueueFull is returned when a publish would exceed MaxLength or
	// MaxBytes on a queue whose overflow policy rejects new publishes.
	ErrQueueFull = errors.New("queue: queue is full")
	// ErrBusy is returned when too many appends are in flight; the caller
	// retries after Advance has applied some of them.
	ErrBusy = errors.New("queue: too many appends in flight")
	// ErrCheckpointInProgress is returned when a checkpoint is requested
	// while another one has not finished.
	ErrCheckpointInProgress = errors.New("queue: a checkpoint is already in progress")
	// ErrFenced is returned by every operation after a storage failure; the
	// owner must close the queue and open it again, which recovers from
	// the log.
	ErrFenced = errors.New("queue: fenced after a storage failure")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("queue: closed")
	// ErrRecordCorrupt is returned when a log record passes the log's
	// checksum but its body does not decode as a queue record.
	ErrRecordCorrupt = errors.New("queue: record body does not decode")
	// ErrUnknownRecord is returned when the log holds a record type this
	// version does not know.
	ErrUnknownRecord = errors.New("queue: unknown record type")
	// ErrSnapshotCorrupt is returned when a snapshot file fails its checksum
	// or does not decode. Recovery skips such a snapshot.
	ErrSnapshotCorrupt = errors.New("queue: snapshot is damaged")
	// ErrSnapshotStale is returned when a snapshot does not match the log:
	// its checkpoint marker is missing or different (the log was cut below
	// it) or it lies beyond the durable end. Recovery skips such a snapshot.
	ErrSnapshotStale = errors.New("queue: snapshot does not match the log")
	// ErrSnapshotNotDurable is returned when a checkpoint cannot make the
	// log durable up to the captured offset; the snapshot is not published.
	ErrSnapshotNotDurable = errors.New("queue: log is not durable up to the snapshot offset")
	// ErrLogContract is returned when the log assigns offsets other than the
	// queue predicted (the queue must be the log's only appender).
	ErrLogContract = errors.New("queue: log assigned unexpected offsets")
	// ErrFileCorrupt is returned when the declaration or epoch file of a
	// queue directory fails its checksum.
	ErrFileCorrupt = errors.New("queue: queue metadata file is damaged")
	// ErrEpochStale is returned when an owner would append under an epoch
	// that is not above every epoch this copy has appended or stored.
	ErrEpochStale = errors.New("queue: epoch is not above the epochs this copy has used")
	// ErrReplica is returned by operations that append the queue's own
	// records (publish, lease, settle, ...) on a replica.
	ErrReplica = errors.New("queue: a replica appends only replicated records")
	// ErrSnapshotNeeded is returned by Promote on a replica whose log
	// starts past offset 0 with no snapshot behind its state: it must
	// InstallSnapshot the owner's first.
	ErrSnapshotNeeded = errors.New("queue: the replica needs the owner's snapshot")
	// ErrNotReplica is returned by the replica operations (AppendReplicated,
	// TruncateAfter, Promote) on an owner, and by OpenReplica over a log
	// that cannot append encoded records.
	ErrNotReplica = errors.New("queue: not a replica")
)
