package queue

// A small reference model of queue semantics, written independently of
// State: maps and linear scans, no bitmaps, heaps or claims bookkeeping
// shared with the implementation. Randomized tests drive the implementation
// and the model with the same operations and compare them after every step.

import (
	"fmt"
	"slices"
)

type modelStatus string

const (
	mReady         modelStatus = "ready"
	mDelayed       modelStatus = "delayed"
	mLeased        modelStatus = "leased"
	mDeadLettering modelStatus = "dead-lettering"
	mAcked         modelStatus = "acked"
	mDiscarded     modelStatus = "discarded"
	mExpired       modelStatus = "expired"
	mDropped       modelStatus = "dropped"
	mPurged        modelStatus = "purged"
	mDeadLettered  modelStatus = "dead-lettered"
)

func (s modelStatus) live() bool {
	return s == mReady || s == mDelayed || s == mLeased || s == mDeadLettering
}

func (s modelStatus) queued() bool { return s == mReady || s == mDelayed }

type modelMessage struct {
	offset     uint64
	id         string
	publishMs  int64
	bytes      uint32
	status     modelStatus
	attempts   uint32
	delivered  bool
	dueMs      int64
	deadlineMs int64
	holder     uint64
	sent       bool // a sent mark marked the current lease
}

// modelGrant is what the model expects a lease to hand out.
type modelGrant struct {
	offset      uint64
	attempt     uint32
	redelivered bool
	deadlineMs  int64
}

type model struct {
	opts     Options
	messages map[uint64]*modelMessage
	offsets  []uint64 // publish offsets, increasing
	// marking: a sent mark applied, so a lease without one was not sent.
	marking bool
	// Effects of the last apply.
	granted       []modelGrant
	deadLettering []uint64
}

func newModel(opts Options) *model {
	return &model{opts: opts.WithDefaults(), messages: map[uint64]*modelMessage{}}
}

// apply applies one operation at offset.
func (m *model) apply(offset uint64, op *Record, id string) {
	m.granted, m.deadLettering = m.granted[:0], m.deadLettering[:0]
	switch op.Kind {
	case KindPublish:
		m.messages[offset] = &modelMessage{offset: offset, id: id, publishMs: op.PublishMs, bytes: op.PayloadBytes, status: mReady}
		m.offsets = append(m.offsets, offset)
		for m.opts.Overflow == DropOldest && m.overLimit() {
			m.oldestQueued().status = mDropped
		}
	case KindLease:
		for _, o := range op.Offsets {
			msg := m.messages[o]
			if msg == nil || !msg.status.queued() {
				continue
			}
			m.granted = append(m.granted, modelGrant{o, msg.attempts + 1, msg.delivered, op.DeadlineMs})
			msg.status, msg.delivered, msg.holder, msg.deadlineMs = mLeased, true, op.Holder, op.DeadlineMs
		}
	case KindDeadLetter:
		for _, o := range op.Offsets {
			if msg := m.messages[o]; msg != nil && msg.status == mDeadLettering {
				msg.status = mDeadLettered
			}
		}
	case KindPurge:
		for _, msg := range m.messages {
			if msg.status.queued() && msg.offset < op.UpTo {
				msg.status = mPurged
			}
		}
	case KindCheckpoint:
	case KindSent:
		m.marking = true
		for _, o := range op.Offsets {
			if msg := m.messages[o]; msg != nil && msg.status == mLeased {
				msg.sent = true
			}
		}
	default:
		for _, o := range op.Offsets {
			m.applySettle(m.messages[o], op)
		}
	}
}

func (m *model) applySettle(msg *modelMessage, op *Record) {
	if msg == nil {
		return
	}
	if op.Kind == KindDiscard && op.Reason == ReasonTTL {
		if msg.status.queued() {
			msg.status = mExpired
		}
		return
	}
	if msg.status != mLeased {
		return
	}
	msg.sent = false
	switch op.Kind {
	case KindAck:
		msg.status = mAcked
	case KindDiscard:
		msg.status = mDiscarded
	case KindRelease:
		msg.status = mReady
	case KindNack, KindExpire:
		msg.attempts++
		switch {
		case m.opts.MaxDeliveries > 0 && msg.attempts == m.opts.MaxDeliveries && m.opts.DeadLetterQueue != "":
			msg.status = mDeadLettering
			m.deadLettering = append(m.deadLettering, msg.offset)
		case m.opts.MaxDeliveries > 0 && msg.attempts == m.opts.MaxDeliveries:
			msg.status = mDeadLettered
		case op.DueMs > 0:
			msg.status, msg.dueMs = mDelayed, op.DueMs
		default:
			msg.status = mReady
		}
	case KindReject:
		msg.attempts++
		if m.opts.DeadLetterQueue != "" {
			msg.status = mDeadLettering
			m.deadLettering = append(m.deadLettering, msg.offset)
		} else {
			msg.status = mDeadLettered
		}
	}
}

func (m *model) queuedTotals() (count, bytes uint64) {
	for _, msg := range m.messages {
		if msg.status.queued() {
			count++
			bytes += uint64(msg.bytes)
		}
	}
	return count, bytes
}

func (m *model) overLimit() bool {
	count, bytes := m.queuedTotals()
	return (m.opts.MaxLength > 0 && count > m.opts.MaxLength) || (m.opts.MaxBytes > 0 && bytes > m.opts.MaxBytes)
}

func (m *model) oldestQueued() *modelMessage {
	for _, o := range m.offsets {
		if msg := m.messages[o]; msg.status.queued() {
			return msg
		}
	}
	return nil
}

// readyAt reports whether msg can be delivered at nowMs.
func (m *model) readyAt(msg *modelMessage, nowMs int64) bool {
	return msg.status == mReady || (msg.status == mDelayed && msg.dueMs <= nowMs)
}

func (m *model) pastTTL(msg *modelMessage, nowMs int64) bool {
	ttl := durationMs(m.opts.MessageTTL)
	return ttl > 0 && msg.publishMs+ttl <= nowMs
}

// expectLease returns the applied messages a lease must pick.
func (m *model) expectLease(max int, nowMs int64, claimed map[uint64]bool) []uint64 {
	var out []uint64
	for _, o := range m.offsets {
		msg := m.messages[o]
		if len(out) == max {
			break
		}
		if m.readyAt(msg, nowMs) && !claimed[o] && !m.pastTTL(msg, nowMs) {
			out = append(out, o)
		}
	}
	return out
}

// expectExpiredMessages returns the offsets a TTL discard must pick.
func (m *model) expectExpiredMessages(nowMs int64, claimed map[uint64]bool) []uint64 {
	var out []uint64
	for _, o := range m.offsets {
		msg := m.messages[o]
		if !msg.status.queued() {
			continue
		}
		if !m.pastTTL(msg, nowMs) {
			break
		}
		if !claimed[o] {
			out = append(out, o)
		}
	}
	return out
}

// leasedSplit returns the leased offsets a sent mark marked and the
// others; while no mark applied, every lease counts as sent.
func (m *model) leasedSplit() (sent, unsent []uint64) {
	for _, o := range m.withStatus(mLeased) {
		if m.messages[o].sent || !m.marking {
			sent = append(sent, o)
		} else {
			unsent = append(unsent, o)
		}
	}
	return sent, unsent
}

// expectExpiredLeases returns the offsets a lease expiry must pick.
func (m *model) expectExpiredLeases(nowMs int64, claimed map[uint64]bool) []uint64 {
	var out []uint64
	for _, o := range m.offsets {
		msg := m.messages[o]
		if msg.status == mLeased && msg.deadlineMs <= nowMs && !claimed[o] {
			out = append(out, o)
		}
	}
	return out
}

// nextDeadline is the earliest time something becomes due.
func (m *model) nextDeadline(nowMs int64, claimed map[uint64]bool) (int64, bool) {
	best, found := int64(0), false
	consider := func(t int64) {
		if !found || t < best {
			best, found = t, true
		}
	}
	ttl := durationMs(m.opts.MessageTTL)
	oldestSeen := false
	for _, o := range m.offsets {
		msg := m.messages[o]
		switch {
		case msg.status == mLeased && !claimed[o]:
			consider(msg.deadlineMs)
		case msg.status == mDelayed && msg.dueMs > nowMs:
			consider(msg.dueMs)
		}
		if ttl > 0 && !oldestSeen && msg.status.queued() && !claimed[o] {
			oldestSeen = true
			consider(msg.publishMs + ttl)
		}
	}
	return best, found
}

// leasedBy returns the offsets leased by holder.
func (m *model) leasedBy(holder uint64) []uint64 {
	var out []uint64
	for _, o := range m.offsets {
		if msg := m.messages[o]; msg.status == mLeased && msg.holder == holder {
			out = append(out, o)
		}
	}
	return out
}

func (m *model) withStatus(status modelStatus) []uint64 {
	var out []uint64
	for _, o := range m.offsets {
		if m.messages[o].status == status {
			out = append(out, o)
		}
	}
	return out
}

func (m *model) counts(nowMs int64) Counts {
	var c Counts
	for _, msg := range m.messages {
		c.Published++
		switch {
		case msg.status == mDelayed && msg.dueMs > nowMs:
			c.Delayed++
		case msg.status.queued():
			c.Ready++
		case msg.status == mLeased:
			c.Leased++
		case msg.status == mDeadLettering:
			c.DeadLettering++
		}
		if msg.status.queued() {
			c.QueuedBytes += uint64(msg.bytes)
		}
		c.Acked += b2u(msg.status == mAcked)
		c.Discarded += b2u(msg.status == mDiscarded)
		c.Expired += b2u(msg.status == mExpired)
		c.Dropped += b2u(msg.status == mDropped)
		c.Purged += b2u(msg.status == mPurged)
		c.DeadLettered += b2u(msg.status == mDeadLettered)
	}
	return c
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// compareState checks s (promoted to nowMs) against the model.
func (m *model) compareState(s *State, nowMs int64) error {
	s.promoteDue(nowMs)
	if err := s.checkInvariants(); err != nil {
		return fmt.Errorf("invariant: %w", err)
	}
	if got, want := s.Counts(), m.counts(nowMs); got != want {
		return fmt.Errorf("counts\n got %+v\nwant %+v", got, want)
	}
	if s.marking != m.marking {
		return fmt.Errorf("marks in force %v, model %v", s.marking, m.marking)
	}
	for _, o := range m.offsets {
		want := m.messages[o]
		got := s.find(o)
		if !want.status.live() {
			if got != nil {
				return fmt.Errorf("offset %d is %v in state, %v in model", o, got.status, want.status)
			}
			continue
		}
		if got == nil {
			return fmt.Errorf("offset %d missing from state, %v in model", o, want.status)
		}
		if err := compareMessage(got, want, nowMs); err != nil {
			return fmt.Errorf("offset %d: %w", o, err)
		}
	}
	return nil
}

func compareMessage(got *message, want *modelMessage, nowMs int64) error {
	wantStatus := map[modelStatus]status{mReady: statusReady, mDelayed: statusDelayed, mLeased: statusLeased, mDeadLettering: statusDeadLettering}[want.status]
	if want.status == mDelayed && want.dueMs <= nowMs {
		wantStatus = statusReady
	}
	switch {
	case got.status != wantStatus:
		return fmt.Errorf("status %v, model %v", got.status, want.status)
	case got.attempts != want.attempts:
		return fmt.Errorf("attempts %d, model %d", got.attempts, want.attempts)
	case got.delivered != want.delivered:
		return fmt.Errorf("delivered %v, model %v", got.delivered, want.delivered)
	case got.sent != want.sent:
		return fmt.Errorf("sent %v, model %v", got.sent, want.sent)
	case got.bytes != want.bytes || got.publishMs != want.publishMs:
		return fmt.Errorf("bytes/publish %d/%d, model %d/%d", got.bytes, got.publishMs, want.bytes, want.publishMs)
	case got.status == statusLeased && (got.holder != want.holder || got.timeMs != want.deadlineMs):
		return fmt.Errorf("lease %d/%d, model %d/%d", got.holder, got.timeMs, want.holder, want.deadlineMs)
	}
	return nil
}

func sortedKeys(set map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
