package queue

// What Advance reports to the queue's owner, and how the machine applies
// pending appends once the mode's frontier passes them.

import "time"

// Confirm reports that a publish batch is applied: its messages are in the
// queue and may be delivered.
type Confirm struct {
	Ticket Ticket
	// First is the offset of the batch's first stored message and Count
	// the number stored: the stored messages, in batch order, are at
	// First, First+1, ... (without duplicates, message i is at First+i).
	First uint64
	Count int
	// Duplicates lists, in increasing order, the indices of the batch's
	// messages that were not stored because the queue had stored them
	// already (dedup.go); nil when there were none.
	Duplicates []int
	// Boundary is what the confirm stands on: durable for a durable queue;
	// written for a buffered one, or durable when the durable frontier
	// already covered the batch and every original its duplicates repeat.
	Boundary Boundary
}

// Delivery is a leased message released to its holder.
type Delivery struct {
	Ticket Ticket // the Lease call that asked for it
	Holder uint64
	// Incarnation and Offset together identify this message in this queue
	// partition, the same on every copy and across restarts: Incarnation
	// is the epoch of the message's publish record (epoch.go); see
	// docs/durability.md. The wire field keeps the name.
	Incarnation uint64
	Offset      uint64
	MessageID   string
	// Attempt is the counted attempts so far plus one; a release does not
	// count an attempt, nor does a lease that lapsed (machine.go).
	Attempt uint32
	// Redelivered is set when the message may have been delivered before.
	// A lease that lapsed delivered nothing: the owner that saw it lapse
	// does not mark the next delivery for it.
	Redelivered bool
	PublishTime time.Time
	Deadline    time.Time
	Headers     []Header
	Payload     []byte
}

// DeadLetter is an instruction to hand a message to its dead-letter queue.
// The owner publishes it to Target and, once Target confirmed, calls
// DeadLettered with Offset. Until then the message stays dead-lettering,
// and after a restart the instruction is issued again.
type DeadLetter struct {
	Target      string
	Incarnation uint64 // the epoch of the publish record, as in Delivery
	Offset      uint64
	MessageID   string
	Attempts    uint32
	PublishTime time.Time
	Headers     []Header
	Payload     []byte
}

// Lapse is a leased message whose delivery was not released because its
// lease applied with too little of the lease timeout left (machine.go):
// the queue appends its release and leases it again later with a fresh
// deadline. The owner gives the holder back the credit the lease took.
type Lapse struct {
	Ticket Ticket // the Lease call that asked for it
	Holder uint64
	Offset uint64
}

// Progress is what one Advance applied.
type Progress struct {
	Confirmed   []Confirm
	Deliveries  []Delivery
	DeadLetters []DeadLetter
	// Lapsed lists the messages of applied leases that were not delivered
	// (Lapse).
	Lapsed []Lapse
	// Applied lists every other operation (settles, expiries, dead-letter
	// markers, purges, checkpoint markers) whose records are now applied.
	Applied []Ticket
	// Checkpoint is set when a checkpoint captured its snapshot; the owner
	// runs it (off its own goroutine if it likes) and reports back with
	// CheckpointDone.
	Checkpoint *CheckpointTask
}

// Empty reports whether p holds nothing.
func (p *Progress) Empty() bool {
	return len(p.Confirmed) == 0 && len(p.Deliveries) == 0 && len(p.DeadLetters) == 0 &&
		len(p.Lapsed) == 0 && len(p.Applied) == 0 && p.Checkpoint == nil
}

// capture is a snapshot taken right after a checkpoint marker applied.
type capture struct {
	id        uint64
	next      uint64
	firstLive uint64
	data      []byte
}

// advance applies pending records below the apply frontiers: written and
// durable, each the log's capped by the caller's apply limit. A record
// applies below the frontier of the mode in force when it is reached, a
// mode record below the durable one (mode.go). Confirms, deliveries and
// settles are all released against that rule. durable also reports
// confirm boundaries. nowMs is the owner's clock, against which applied
// leases are checked for a lapse (machine.go).
func (m *machine) advance(written, durable uint64, nowMs int64, progress *Progress) *capture {
	var captured *capture
	for m.pendHead < len(m.pending) {
		p := m.pending[m.pendHead]
		for p.applied < len(p.records) &&
			p.first+uint64(p.applied) < m.state.recordLimit(&p.records[p.applied], written, durable) {
			offset := p.first + uint64(p.applied)
			rec := &p.records[p.applied]
			m.state.Apply(offset, rec, &m.fx)
			p.applied++
			if rec.Kind == KindPublish {
				// Applied publishes count in the state now, not in flight;
				// a batch can apply in parts (a write split by a rollover).
				m.pendingPublishes--
				m.pendingPublishBytes -= uint64(rec.PayloadBytes)
				m.forgetPendingKeys(rec, offset)
				if _, ok := m.pendingLeased[offset]; ok {
					delete(m.pendingLeased, offset)
					m.state.claimPublished(offset)
				}
			}
			m.collect(p, nowMs, progress)
			if rec.Kind == KindCheckpoint && rec.CheckpointID == m.checkpointID {
				captured = &capture{
					id: rec.CheckpointID, next: offset + 1, firstLive: m.state.FirstLive(),
					data: m.state.EncodeSnapshot(),
				}
			}
		}
		if p.applied < len(p.records) {
			break
		}
		m.complete(p, durable, progress)
		m.pending[m.pendHead] = nil
		m.pendHead++
	}
	if m.pendHead == len(m.pending) {
		m.pending, m.pendHead = m.pending[:0], 0
	} else if m.pendHead > 1024 && m.pendHead > len(m.pending)/2 {
		m.pending, m.pendHead = append(m.pending[:0:0], m.pending[m.pendHead:]...), 0
	}
	m.leaseCursor = max(m.leaseCursor, m.state.Next())
	if m.state.Next() <= m.state.modeFrontier(written, durable) {
		// Dead-letter handoffs stand on the apply frontier too: a replicated
		// owner replays records at open that the limit has not passed yet.
		m.collectHandoffs(progress)
	}
	return captured
}

// collect turns what the last applied record leased into deliveries, or
// into lapses when the lease applied too late (machine.go).
func (m *machine) collect(p *pendingAppend, nowMs int64, progress *Progress) {
	for _, g := range m.fx.Leased {
		_, unsent := m.unsent[g.Offset]
		redelivered := g.Redelivered && !unsent
		if m.lapses(g.DeadlineMs, nowMs) {
			m.lapse(g.Offset, redelivered)
			progress.Lapsed = append(progress.Lapsed, Lapse{Ticket: p.ticket, Holder: p.holder, Offset: g.Offset})
			continue
		}
		if unsent {
			delete(m.unsent, g.Offset)
		}
		progress.Deliveries = append(progress.Deliveries, Delivery{
			Ticket: p.ticket, Holder: p.holder, Offset: g.Offset, Attempt: g.Attempt,
			Redelivered: redelivered, PublishTime: time.UnixMilli(g.PublishMs),
			Deadline: time.UnixMilli(g.DeadlineMs),
		})
	}
}

func (m *machine) complete(p *pendingAppend, durable uint64, progress *Progress) {
	switch p.op {
	case opPublish:
		covered := p.next()
		if len(p.records) == 0 {
			covered = p.dependsNext // only duplicates: their originals lie below
		}
		boundary := BoundaryWritten
		if m.state.mode == Durable || durable >= covered {
			boundary = BoundaryDurable
		}
		progress.Confirmed = append(progress.Confirmed, Confirm{
			Ticket: p.ticket, First: p.first, Count: len(p.records), Duplicates: p.duplicates, Boundary: boundary,
		})
	case opLease, opSent:
	default:
		m.modeApplied(p)
		progress.Applied = append(progress.Applied, p.ticket)
	}
}

func (m *machine) collectHandoffs(progress *Progress) {
	m.offsetScratch = m.state.takeHandoffs(m.offsetScratch[:0])
	for _, offset := range m.offsetScratch {
		msg := m.state.find(offset)
		progress.DeadLetters = append(progress.DeadLetters, DeadLetter{
			Target: m.state.limits.deadLetter, Offset: offset, Attempts: msg.attempts,
			PublishTime: time.UnixMilli(msg.publishMs),
		})
	}
}

// finishCheckpoint clears the checkpoint in flight.
func (m *machine) finishCheckpoint() { m.checkpointID, m.checkpointTicket = 0, 0 }
