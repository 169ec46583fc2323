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
	// ErrInteriorCorruption: Open found damage followed by a valid record,
	// which a torn write cannot produce. Nothing was deleted.
	ErrInteriorCorruption = errors.New("log: interior corruption (a valid record follows damage); refusing to open, nothing deleted")
	// ErrUnverifiedTail: Open found a damaged tail and could not prove,
	// within its work bound, that no valid record follows it. Nothing was
	// deleted.
	ErrUnverifiedTail = errors.New("log: damaged tail could not be verified within the recovery work bound; refusing to open, nothing deleted")
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
	// ErrInvalidDurability: the durability level is not one of AfterWrite,
	// AfterFlush, AfterFsync.
	ErrInvalidDurability = errors.New("log: invalid durability level")
	// ErrTruncated: TruncateAfter removed the append's records before they
	// reached the requested level.
	ErrTruncated = errors.New("log: records removed by TruncateAfter")
)
