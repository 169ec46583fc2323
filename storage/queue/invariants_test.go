package queue

import "fmt"

// checkInvariants verifies the invariants stated in state.go.
func (s *State) checkInvariants() error {
	var counts Counts
	previous, first := uint64(0), true
	tombstones := 0
	for i := s.head; i < len(s.messages); i++ {
		m := &s.messages[i]
		if !first && m.offset <= previous {
			return fmt.Errorf("messages out of order at %d", m.offset)
		}
		previous, first = m.offset, false
		if m.offset >= s.next {
			return fmt.Errorf("message %d at or above next %d", m.offset, s.next)
		}
		if m.status == statusGone {
			tombstones++
			continue
		}
		if err := s.checkMessage(m, &counts); err != nil {
			return fmt.Errorf("message %d: %w", m.offset, err)
		}
	}
	if tombstones != s.tombstones {
		return fmt.Errorf("tombstones %d, counted %d", s.tombstones, tombstones)
	}
	if counts.Ready+counts.Delayed != uint64(s.bits.queuedCount) {
		return fmt.Errorf("queued bits %d, queued messages %d", s.bits.queuedCount, counts.Ready+counts.Delayed)
	}
	live := s.counts
	live.Published, live.Acked, live.Discarded, live.Expired = 0, 0, 0, 0
	live.Dropped, live.Purged, live.DeadLettered = 0, 0, 0
	if live != counts {
		return fmt.Errorf("counts %+v, recomputed %+v", live, counts)
	}
	return nil
}

func (s *State) checkMessage(m *message, counts *Counts) error {
	queued, blocked := s.bits.isQueued(m.offset), s.bits.isBlocked(m.offset)
	if m.sent && m.status != statusLeased {
		return fmt.Errorf("%v but marked sent", m.status)
	}
	switch m.status {
	case statusReady, statusDelayed:
		if !queued {
			return fmt.Errorf("%v but not queued", m.status)
		}
		wantBlocked := m.status == statusDelayed || m.claim != claimNone
		if blocked != wantBlocked {
			return fmt.Errorf("%v claim %d blocked %v", m.status, m.claim, blocked)
		}
		if m.status == statusReady {
			counts.Ready++
		} else {
			counts.Delayed++
		}
		counts.QueuedBytes += uint64(m.bytes)
	case statusLeased:
		counts.Leased++
	case statusDeadLettering:
		counts.DeadLettering++
		// It reached MaxDeliveries, or a reject counted one attempt.
		if m.attempts == 0 || (s.limits.maxDeliveries > 0 && m.attempts > s.limits.maxDeliveries) {
			return fmt.Errorf("dead-lettering with %d attempts, max %d", m.attempts, s.limits.maxDeliveries)
		}
	default:
		return fmt.Errorf("bad status %d", m.status)
	}
	if m.status != statusReady && m.status != statusDelayed && queued {
		return fmt.Errorf("%v but queued", m.status)
	}
	if m.status != statusDeadLettering && s.limits.maxDeliveries > 0 && m.attempts >= s.limits.maxDeliveries {
		return fmt.Errorf("%v with %d attempts, max %d", m.status, m.attempts, s.limits.maxDeliveries)
	}
	return nil
}
