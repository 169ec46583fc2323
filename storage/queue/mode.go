package queue

// Mode revisions: changing an existing queue's mode (durable ⇄ buffered)
// through the log itself, so every copy and every recovery rebuilds the
// same applied mode from the records it holds.
//
// A mode record (KindMode, record.go) at offset M with revision R names
// the mode of every record after it. The rule that picks the frontier a
// record applies at is a function of the log prefix only:
//
//   - a mode record applies at the durable frontier (capped by the durable
//     apply limit on a replicated queue), whatever the mode before it;
//   - any other record applies at the frontier of the mode in force when
//     it is reached: written for buffered, durable for durable.
//
// Records apply in offset order, so nothing after M applies before M, and
// M applies only once every record up to it is durable (on W copies when
// the caller supplies the quorum's durable frontier). Hence:
//
//   - buffered → durable: the records below M were admitted buffered and
//     are confirmed and delivered at the written frontier until M applies;
//     when it applies every one of them is durable, and every record after
//     it applies at the durable frontier. After the switch nothing that is
//     only written is delivered or confirmed.
//   - durable → buffered: the records below M keep the durable promise; a
//     record after M (admitted buffered) is released at the written
//     frontier only once M is durable, so no publish is confirmed under
//     the weaker rule before the revision is applied.
//
// A confirm reports the boundary it stands on (Confirm.Boundary), which is
// at least the mode in force when its publish was appended.
//
// Admission: publishes appended after M are admitted under the new mode
// and wait for M to apply. At most one revision is pending (appended, not
// applied) at a time: ChangeMode refuses another with ErrModeChangePending.
//
// The applied mode, revision and the offset of the record that set it are
// part of State and of the snapshot (snapshot.go), so compaction never
// loses them. A queue without any mode record runs its declared mode
// (Options.Mode) at revision 0.
//
// Invariant: state.modeRevision <= machine.tailRevision <=
// state.modeRevision + 1; tailRevision > modeRevision iff modeTicket != 0.

import (
	"errors"
	"fmt"

	"github.com/fibrilmq/fibril/storage/log"
)

// Mode change errors.
var (
	// ErrModeChangePending: a mode change is already appended and not yet
	// applied; at most one is pending at a time.
	ErrModeChangePending = errors.New("queue: a mode change is pending")
	// ErrModeUnknown: the mode named is neither durable nor buffered.
	ErrModeUnknown = errors.New("queue: unknown mode")
)

// ModeInfo is where a queue's mode stands.
type ModeInfo struct {
	// Applied is the mode in force for the records applied so far, set by
	// revision Revision (0: the declared mode, no revision recorded) at
	// offset RevisionOffset.
	Applied        Mode
	Revision       uint64
	RevisionOffset uint64
	// Pending is set while a revision is appended but not applied: its
	// mode, number and offset. Publishes appended since are admitted under
	// Pending and released once it applies.
	Pending         Mode
	PendingRevision uint64
	PendingOffset   uint64
	// PendingTicket is the ticket of the pending revision on the owner
	// that appended it (0 on a replica or after a restart).
	PendingTicket Ticket
}

// Desired is the mode the newest revision in the log names: Pending when
// a change is pending, Applied otherwise.
func (m ModeInfo) Desired() Mode {
	if m.Pending != 0 {
		return m.Pending
	}
	return m.Applied
}

// ModeChange is what ChangeMode did.
type ModeChange struct {
	// Unchanged is true when the queue's mode already was the one asked
	// for (applied, no change pending): nothing was appended.
	Unchanged bool
	// Revision is the revision that sets the mode asked for: the new one,
	// the pending one when it asks for the same mode, or the applied one.
	Revision uint64
	// Offset is the revision record's offset (0 for revision 0).
	Offset uint64
	// Ticket is the new revision's ticket: a later Advance lists it in
	// Progress.Applied once the revision applies. 0 when nothing was
	// appended.
	Ticket Ticket
	// Pending is true when the revision asked for is appended but not
	// applied yet.
	Pending bool
}

// applyMode is State.Apply of a mode record.
func (s *State) applyMode(offset uint64, rec *Record) {
	if rec.Revision <= s.modeRevision && s.modeRevision != 0 {
		// Revisions increase along a log; a lower one is a corrupt log or a
		// bug, never an operating condition.
		panic(fmt.Sprintf("queue: mode revision %d at %d after revision %d", rec.Revision, offset, s.modeRevision))
	}
	s.mode, s.modeRevision, s.modeOffset = rec.Mode, rec.Revision, offset
}

// AppliedMode is the mode in force for the records applied so far.
func (s *State) AppliedMode() Mode { return s.mode }

// ModeRevision is the applied mode's revision (0: the declared mode).
func (s *State) ModeRevision() uint64 { return s.modeRevision }

// recordLimit is the frontier record rec applies at, given the written
// and durable apply frontiers: see the file comment.
func (s *State) recordLimit(rec *Record, written, durable uint64) uint64 {
	if rec.Kind == KindMode || s.mode != Buffered {
		return durable
	}
	return written
}

// modeFrontier is the frontier of the applied mode.
func (s *State) modeFrontier(written, durable uint64) uint64 {
	if s.mode == Buffered {
		return written
	}
	return durable
}

// changeMode builds a mode record for mode, unless mode is the one the
// newest revision names.
func (m *machine) changeMode(mode Mode) (*pendingAppend, []entry, ModeChange, error) {
	if mode != Durable && mode != Buffered {
		return nil, nil, ModeChange{}, fmt.Errorf("%w: %d", ErrModeUnknown, mode)
	}
	if m.modeTicket != 0 {
		change := ModeChange{Revision: m.tailRevision, Offset: m.tailOffset, Pending: true}
		if mode == m.tailMode {
			return nil, nil, change, nil // the same request again: it is the pending one
		}
		return nil, nil, change, fmt.Errorf("%w: revision %d to %s at offset %d", ErrModeChangePending,
			m.tailRevision, m.tailMode, m.tailOffset)
	}
	if mode == m.state.mode {
		return nil, nil, ModeChange{Unchanged: true, Revision: m.state.modeRevision, Offset: m.state.modeOffset}, nil
	}
	p, err := m.begin(opMode)
	if err != nil {
		return nil, nil, ModeChange{}, err
	}
	rec := Record{Kind: KindMode, Mode: mode, Revision: m.state.modeRevision + 1}
	p.records = []Record{rec}
	m.submit(p)
	m.tailMode, m.tailRevision, m.tailOffset, m.modeTicket = mode, rec.Revision, p.first, p.ticket
	return p, []entry{{KindMode, encodeRecord(nil, &rec)}}, ModeChange{Revision: rec.Revision, Offset: p.first,
		Ticket: p.ticket, Pending: true}, nil
}

// modeApplied clears the pending revision once its record applied.
func (m *machine) modeApplied(p *pendingAppend) {
	if p.op == opMode && p.ticket == m.modeTicket {
		m.modeTicket = 0
	}
}

// resetTail makes the newest revision the applied one (a machine over a
// state rebuilt from the log has nothing pending).
func (m *machine) resetTail() {
	m.tailMode, m.tailRevision, m.tailOffset, m.modeTicket = m.state.mode, m.state.modeRevision, m.state.modeOffset, 0
}

// modeInfo reports the machine's view of the mode.
func (m *machine) modeInfo() ModeInfo {
	info := ModeInfo{Applied: m.state.mode, Revision: m.state.modeRevision, RevisionOffset: m.state.modeOffset}
	if m.tailRevision > m.state.modeRevision {
		info.Pending, info.PendingRevision, info.PendingOffset = m.tailMode, m.tailRevision, m.tailOffset
		info.PendingTicket = m.modeTicket
	}
	return info
}

// ChangeMode appends a revision switching the queue to mode (file
// comment). The revision applies once the durable frontier (capped by the
// durable apply limit) passes it; a later Advance lists its ticket in
// Progress.Applied, and Mode reports it applied. Asking for the mode
// already applied with nothing pending appends nothing (Unchanged); asking
// for the pending revision's mode returns it again; asking for the other
// mode while one is pending is refused with ErrModeChangePending.
func (q *Queue) ChangeMode(mode Mode) (ModeChange, error) {
	if err := q.owner(); err != nil {
		return ModeChange{}, err
	}
	p, entries, change, err := q.machine.changeMode(mode)
	if err != nil || p == nil {
		return change, err
	}
	if err := q.submit([]*pendingAppend{p}, entries); err != nil {
		q.machine.resetTail()
		return ModeChange{}, err
	}
	return change, nil
}

// Mode reports the applied mode and any pending revision.
func (q *Queue) Mode() ModeInfo { return q.machine.modeInfo() }

// SetApplyLimits caps the apply frontiers of a replicated owner: written
// is the quorum's frontier at the written boundary (W copies written),
// durable at the durable boundary (W copies durable). A record applies
// below the limit of the frontier its mode picks (file comment); a mode
// record below durable only. Neither ever moves back: a lower value than
// the one in force is ignored (Promote starts both at 0).
func (q *Queue) SetApplyLimits(written, durable uint64) {
	if q.applyLimit == noLimit || written > q.applyLimit {
		q.applyLimit = written
	}
	if q.durableLimit == noLimit || durable > q.durableLimit {
		q.durableLimit = durable
	}
}

// ApplyLimits returns the written and durable apply limits in force.
func (q *Queue) ApplyLimits() (written, durable uint64) { return q.applyLimit, q.durableLimit }

// frontiers returns the written and durable apply frontiers: the log's,
// capped by the apply limits. The written limit caps the durable frontier
// too (a record not written on W copies is not durable on them), so the
// written frontier is never below the durable one.
func (q *Queue) frontiers(f log.Frontiers) (written, durable uint64) {
	return min(f.Written, q.applyLimit), min(f.Durable, q.durableLimit, q.applyLimit)
}
