package queue

// Recovery decisions, independent of the log implementation: which
// snapshot to trust and how to replay the log suffix after it.
//
// A snapshot is trusted only when it decodes (checksum, format, counts) and
// matches the log: the record just below the offset it covers must be
// present, durable, and the checkpoint marker with the snapshot's id. A
// snapshot published without its log prefix being durable, or one made
// stale by a cut of the log below it, fails that test and an older snapshot
// or a full replay is used instead.

import (
	"errors"
	"fmt"
)

// recordSource is the log as recovery reads it.
type recordSource interface {
	// firstOffset is the oldest retained offset.
	firstOffset() uint64
	// durableNext is the durable frontier; replay stops there.
	durableNext() uint64
	// scan calls fn for every record from `from` up to durableNext, in
	// offset order. body is valid only during fn.
	scan(from uint64, fn func(offset uint64, kind uint8, body []byte) error) error
}

// snapshotCandidate is a snapshot file found in the queue directory.
type snapshotCandidate struct {
	name string
	next uint64
	load func() ([]byte, error)
}

// rebuildReport says what recovery used.
type rebuildReport struct {
	snapshot      string  // the snapshot used, "" for a full replay
	snapshotLive  uint64  // the snapshot state's FirstLive
	skipped       []error // why newer snapshots were not used
	replayedCount uint64
	replayedFrom  uint64
}

var errStopScan = errors.New("stop scan")

// rebuild returns the state of the log: the newest trusted snapshot among
// candidates (ordered newest first) plus the replayed suffix, or a full
// replay from the log's first offset.
func rebuild(opts Options, candidates []snapshotCandidate, src recordSource) (*State, rebuildReport, error) {
	var report rebuildReport
	var state *State
	for _, candidate := range candidates {
		s, err := loadCandidate(opts, candidate, src)
		if err != nil {
			report.skipped = append(report.skipped, fmt.Errorf("snapshot %s: %w", candidate.name, err))
			continue
		}
		state, report.snapshot, report.snapshotLive = s, candidate.name, s.FirstLive()
		break
	}
	if state == nil {
		state = NewState(opts, src.firstOffset())
	}
	report.replayedFrom = state.Next()
	count, err := replay(state, src)
	report.replayedCount = count
	return state, report, err
}

func loadCandidate(opts Options, candidate snapshotCandidate, src recordSource) (*State, error) {
	data, err := candidate.load()
	if err != nil {
		return nil, err
	}
	s, err := DecodeSnapshot(data, opts)
	if err != nil {
		return nil, err
	}
	next := s.Next()
	if next != candidate.next || next == 0 || next > src.durableNext() || next-1 < src.firstOffset() {
		return nil, fmt.Errorf("%w: covers %d, log holds [%d, %d)", ErrSnapshotStale, next, src.firstOffset(), src.durableNext())
	}
	var marker Record
	found := false
	err = src.scan(next-1, func(offset uint64, kind uint8, body []byte) error {
		if offset == next-1 && decodeRecord(kind, body, &marker, false) == nil {
			found = marker.Kind == KindCheckpoint && marker.CheckpointID == s.checkpointID
		}
		return errStopScan
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: no checkpoint marker %x at %d", ErrSnapshotStale, s.checkpointID, next-1)
	}
	return s, nil
}

// replay applies every durable record from state.Next() on.
func replay(state *State, src recordSource) (uint64, error) {
	var rec Record
	var count uint64
	err := src.scan(state.Next(), func(offset uint64, kind uint8, body []byte) error {
		if err := decodeRecord(kind, body, &rec, false); err != nil {
			return fmt.Errorf("offset %d: %w", offset, err)
		}
		state.Apply(offset, &rec, nil)
		count++
		return nil
	})
	return count, err
}
