package queue

// Admission: the operations a queue starts before their records are
// appended. Each one checks the applied state plus the claims of operations
// still in flight, and claims the messages it names so that no other
// operation picks them until its record is applied. Times are unix
// milliseconds from the owner's clock.

import "fmt"

// promoteDue makes delayed messages whose due time has passed ready.
func (s *State) promoteDue(nowMs int64) {
	for {
		e, ok := s.dueTimers.top()
		if !ok || e.timeMs > nowMs {
			return
		}
		s.dueTimers.pop()
		m := s.find(e.offset)
		if m == nil || m.status != statusDelayed || m.timeMs != e.timeMs {
			continue
		}
		m.status, m.timeMs = statusReady, 0
		s.counts.Delayed--
		s.counts.Ready++
		if m.claim == claimNone {
			s.bits.setBlocked(m.offset, false)
		}
	}
}

func (s *State) isPastTTL(m *message, nowMs int64) bool {
	return s.limits.messageTtlMs > 0 && m.publishMs+s.limits.messageTtlMs <= nowMs
}

// claimReady claims up to max ready messages for a lease, lowest offsets
// first, skipping messages past their TTL, and appends their offsets to out.
func (s *State) claimReady(max int, nowMs int64, out []uint64) []uint64 {
	s.promoteDue(nowMs)
	from := uint64(0)
	for len(out) < max {
		offset, ok := s.bits.nextSelectable(from)
		if !ok {
			break
		}
		from = offset + 1
		m := s.find(offset)
		if s.isPastTTL(m, nowMs) {
			continue
		}
		m.claim = claimLease
		s.bits.setBlocked(offset, true)
		out = append(out, offset)
	}
	return out
}

// claimExpiredMessages claims up to max queued messages past their TTL,
// oldest first, for a TTL discard.
func (s *State) claimExpiredMessages(nowMs int64, max int, out []uint64) []uint64 {
	if s.limits.messageTtlMs == 0 {
		return out
	}
	from := uint64(0)
	for len(out) < max {
		offset, ok := s.bits.nextQueued(from)
		if !ok {
			break
		}
		from = offset + 1
		m := s.find(offset)
		if !s.isPastTTL(m, nowMs) {
			break
		}
		if m.claim != claimNone {
			continue
		}
		m.claim = claimSettle
		s.bits.setBlocked(offset, true)
		out = append(out, offset)
	}
	return out
}

// claimExpiredLeases claims up to max leases whose deadline is at or
// before nowMs for a lease expiry.
func (s *State) claimExpiredLeases(nowMs int64, max int, out []uint64) []uint64 {
	for len(out) < max {
		e, ok := s.leaseTimers.top()
		if !ok || e.timeMs > nowMs {
			break
		}
		s.leaseTimers.pop()
		m := s.find(e.offset)
		if m == nil || m.status != statusLeased || m.timeMs != e.timeMs || m.claim != claimNone {
			continue
		}
		m.claim = claimSettle
		out = append(out, e.offset)
	}
	return out
}

// claimSettle checks that every offset (sorted, unique) is leased by holder
// with nothing in flight, then claims them all; on error nothing is claimed.
func (s *State) claimSettle(holder uint64, offsets []uint64) error {
	for _, offset := range offsets {
		m := s.find(offset)
		switch {
		case m == nil || m.status != statusLeased:
			return fmt.Errorf("offset %d: %w", offset, ErrNotLeased)
		case m.holder != holder:
			return fmt.Errorf("offset %d: %w", offset, ErrWrongHolder)
		case m.claim != claimNone:
			return fmt.Errorf("offset %d: %w", offset, ErrSettlePending)
		}
	}
	for _, offset := range offsets {
		s.find(offset).claim = claimSettle
	}
	return nil
}

// takeHandoffs returns dead-lettering messages not yet given to the owner
// and marks them given.
func (s *State) takeHandoffs(out []uint64) []uint64 {
	for _, offset := range s.handoffs {
		m := s.find(offset)
		if m == nil || m.status != statusDeadLettering || m.claim != claimNone {
			continue
		}
		m.claim = claimHandoff
		out = append(out, offset)
	}
	s.handoffs = s.handoffs[:0]
	return out
}

// claimMarker checks that every offset (sorted, unique) waits for its
// dead-letter handoff and claims it for the marker.
func (s *State) claimMarker(offsets []uint64) error {
	for _, offset := range offsets {
		m := s.find(offset)
		if m == nil || m.status != statusDeadLettering {
			return fmt.Errorf("offset %d: %w", offset, ErrNotDeadLettering)
		}
		if m.claim == claimMarker {
			return fmt.Errorf("offset %d: %w", offset, ErrSettlePending)
		}
	}
	for _, offset := range offsets {
		s.find(offset).claim = claimMarker
	}
	return nil
}

// claimPublished claims a message whose publish just applied for the
// pipelined lease appended after it. The message may already be gone (the
// drop-oldest policy); the lease then leaves it alone when it applies.
func (s *State) claimPublished(offset uint64) {
	if m := s.find(offset); m != nil && m.status == statusReady && m.claim == claimNone {
		m.claim = claimLease
		s.bits.setBlocked(offset, true)
	}
}

// unclaim releases the claim an operation refused by the log had taken.
// A leased message gets its lease timer back: while it was claimed, a look
// at the next deadline or an expiry run may have dropped the timer as not
// claimable, and without one the lease would never expire.
func (s *State) unclaim(offset uint64) {
	m := s.find(offset)
	switch {
	case m == nil || m.claim == claimNone:
	case m.claim == claimMarker:
		m.claim = claimHandoff
	default:
		m.claim = claimNone
		switch m.status {
		case statusReady:
			s.bits.setBlocked(offset, false)
		case statusLeased:
			s.leaseTimers.push(m.timeMs, m.offset)
		}
	}
}

// rebuildHandoffs lists every dead-lettering message for a handoff, as a
// replica that becomes the owner must hand them all off.
func (s *State) rebuildHandoffs() {
	s.handoffs = s.handoffs[:0]
	for i := s.head; i < len(s.messages); i++ {
		if m := &s.messages[i]; m.status == statusDeadLettering {
			m.claim = claimNone
			s.handoffs = append(s.handoffs, m.offset)
		}
	}
}

// leasedOffsets lists every leased message, for what a restart or a
// promotion writes: with marks, split into those a sent mark marked and the
// others; without, all in sent.
func (s *State) leasedOffsets(marks bool) (sent, unsent []uint64) {
	for i := s.head; i < len(s.messages); i++ {
		m := &s.messages[i]
		switch {
		case m.status != statusLeased:
		case m.sent || !marks:
			sent = append(sent, m.offset)
		default:
			unsent = append(unsent, m.offset)
		}
	}
	return sent, unsent
}

// nextDeadlineMs is the earliest time at which something becomes due: a
// lease deadline, a delayed message's due time, or a ready message's TTL.
func (s *State) nextDeadlineMs() (int64, bool) {
	best, found := int64(0), false
	consider := func(t int64) {
		if !found || t < best {
			best, found = t, true
		}
	}
	if e, ok := s.liveTop(&s.leaseTimers, s.isLeaseTimerClaimable); ok {
		consider(e.timeMs)
	}
	if e, ok := s.liveTop(&s.dueTimers, s.isDueTimerLive); ok {
		consider(e.timeMs)
	}
	if s.limits.messageTtlMs > 0 {
		if m := s.oldestUnclaimedQueued(); m != nil {
			consider(m.publishMs + s.limits.messageTtlMs)
		}
	}
	return best, found
}

func (s *State) isLeaseTimerClaimable(e timerEntry) bool {
	m := s.find(e.offset)
	return m != nil && m.status == statusLeased && m.timeMs == e.timeMs && m.claim == claimNone
}

// liveTop pops stale entries and returns the first live one.
func (s *State) liveTop(h *timerHeap, live func(timerEntry) bool) (timerEntry, bool) {
	for {
		e, ok := h.top()
		if !ok || live(e) {
			return e, ok
		}
		h.pop()
	}
}

// oldestUnclaimedQueued looks at a bounded number of the oldest queued
// messages for one that no operation has claimed.
func (s *State) oldestUnclaimedQueued() *message {
	from := uint64(0)
	for range 1024 {
		offset, ok := s.bits.nextQueued(from)
		if !ok {
			return nil
		}
		if m := s.find(offset); m.claim == claimNone {
			return m
		}
		from = offset + 1
	}
	return nil
}
