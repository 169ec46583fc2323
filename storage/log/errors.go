package log

import "errors"

// Package errors. Operating errors are returned wrapped with %w, so test
// them with errors.Is.
var (
	// ErrLatched: a write or sync failed earlier, so the log refuses
	// appends until it is reopened (the reopen cuts it back to its last
	// successful sync). The wrapped error carries the original failure.
	ErrLatched = errors.New("log: latched after a storage failure; reopen to recover")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("log: closed")
	// ErrInteriorCorruption: Open found damage, or missing records, inside
	// the prefix the log had proven durable (a sealed segment, or below
	// the durable-end record): a crash cannot produce that, so the disk
	// lost or changed synced data. Nothing was deleted. Damage past the
	// proven end is a torn tail and is truncated (see recovery.go).
	ErrInteriorCorruption = errors.New("log: interior corruption (damage inside the proven durable prefix); refusing to open, nothing deleted")
	// ErrCutNotRecorded: after a storage failure the log could not record
	// its cut (latched-cut.pending) durably either, so only its own process
	// knows where the durable records end. It comes wrapped in the latch
	// error (with the device error that refused the cut file). The log has
	// cut its active segment back in the page cache, so a restart of the
	// process on the same machine does not serve the records past the cut;
	// a node that sees this error must stop rather than keep running on a
	// disk that refuses durable writes.
	ErrCutNotRecorded = errors.New("log: the cut after a storage failure could not be recorded durably; the node must stop")
	// ErrFloorAboveDurable: TruncateBefore was asked to drop records that
	// are not yet durable.
	ErrFloorAboveDurable = errors.New("log: retention floor above the durable frontier")
	// ErrOutOfRange: the offset is below the oldest retained record, or
	// otherwise outside what the call accepts.
	ErrOutOfRange = errors.New("log: offset out of range")
	// ErrTooLarge: an entry's body exceeds Options.MaxRecordBytes, or a
	// batch has too many entries.
	ErrTooLarge = errors.New("log: entry too large")
	// ErrCorrupt: a record or a metadata file read from disk failed its
	// checks (length, CRC, offset, type).
	ErrCorrupt = errors.New("log: corrupt data on disk")
	// ErrEpochRegression: an entry's epoch is below the last appended
	// epoch. Epochs never decrease along a log.
	ErrEpochRegression = errors.New("log: epoch lower than the log's last epoch")
	// ErrOffsetMismatch: encoded records do not start at the log's next
	// offset, or their offsets are not dense (AppendEncoded).
	ErrOffsetMismatch = errors.New("log: encoded records do not continue the log at its next offset")
	// ErrInvalidDurability: the durability level is not one of AfterWrite,
	// AfterFlush, AfterFsync.
	ErrInvalidDurability = errors.New("log: invalid durability level")
	// ErrDirectMode: the log was opened with OpenDirect, so appends, cuts
	// and Close go through its Appender.
	ErrDirectMode = errors.New("log: opened with OpenDirect: append, cut and close through its Appender")
	// ErrTruncated: TruncateAfter removed the append's records before they
	// reached the requested level.
	ErrTruncated = errors.New("log: records removed by TruncateAfter")
)
