package queue

// State is a queue partition's state as a pure function of the log prefix
// it has applied. Message life cycle (applied statuses):
//
//	publish ─► ready ◄─── release (no attempt) / nack, expire (attempt counted) ───┐
//	           │   ▲ due time passed                                                │
//	           │ delayed ◄── nack with a delay                                      │
//	           ▼                                                                    │
//	          leased ─────────────────────────────────────────────────────────────────┘
//	           │ ack, discard ─────────────────────────► settled (removed)
//	           │ nack, expire reaching MaxDeliveries ──► dead-lettering ─ marker ─► dead-lettered (removed)
//	           │ reject (a nack without requeue) ───────┘
//	ready, delayed ─ TTL discard, purge, overflow drop ─► settled (removed)
//	leased ─ sent mark ─► leased and sent (its delivery left the owner)
//
// Without a dead-letter queue, a message reaching MaxDeliveries, or
// rejected, is dead-lettered (dropped) at once. Settled and dead-lettered
// messages leave only counters behind.
//
// Invariants (checkInvariants verifies them in tests):
//   - every live message has exactly one status: ready, delayed, leased or
//     dead-lettering;
//   - ready and delayed messages are exactly the queued bits, and a queued
//     message is blocked iff it is delayed or claimed;
//   - attempts never decrease; a message enters dead-lettering exactly when
//     its counted attempts reach MaxDeliveries or a consumer rejects it (the
//     reject counts the attempt), so it never holds more than MaxDeliveries;
//   - messages are sorted by offset and every offset is below next;
//   - only a leased message is marked sent, and only by a sent mark applied
//     after the lease that leased it.
//
// Claims are the admission overlay: an operation whose record is appended
// but not yet applied claims its messages so no other operation picks them.
// Claims never change applied state, a snapshot ignores them, and a
// replay from the log has none.

import (
	"fmt"
	"sort"
)

type status uint8

const (
	statusReady status = iota + 1
	statusDelayed
	statusLeased
	statusDeadLettering
	statusGone // settled or dead-lettered; a tombstone until trimmed
)

var statusNames = [...]string{"", "ready", "delayed", "leased", "dead-lettering", "gone"}

func (s status) String() string { return statusNames[s] }

type claim uint8

const (
	claimNone    claim = iota
	claimLease         // selected; the lease record is in flight
	claimSettle        // a settle, lease expiry or TTL discard is in flight
	claimHandoff       // the dead-letter handoff was given to the owner
	claimMarker        // the dead-letter marker is in flight
)

// message is the per-message metadata kept in memory; payloads stay in the
// log. timeMs is the due time of a delayed message and the lease deadline of
// a leased one.
type message struct {
	offset    uint64
	publishMs int64
	timeMs    int64
	holder    uint64
	bytes     uint32
	attempts  uint32
	status    status
	claim     claim
	delivered bool
	// sent: a sent mark (KindSent) says the delivery of the current lease
	// left the owner; false whenever the message is not leased.
	sent bool
}

// Counts are a queue's message counts. The first group is live state; the
// second is cumulative since the queue was created.
type Counts struct {
	Ready         uint64 // ready now (delayed ones whose due time passed included once promoted)
	Delayed       uint64 // waiting for a redelivery delay
	Leased        uint64 // delivered and not settled
	DeadLettering uint64 // waiting for the dead-letter queue to take them
	QueuedBytes   uint64 // payload bytes of ready and delayed messages

	Published    uint64
	Acked        uint64
	Discarded    uint64 // by consumers
	Expired      uint64 // past their TTL
	Dropped      uint64 // by the drop-oldest overflow policy
	Purged       uint64
	DeadLettered uint64
}

// Settled is the number of messages settled in any way but dead-lettering.
func (c Counts) Settled() uint64 {
	return c.Acked + c.Discarded + c.Expired + c.Dropped + c.Purged
}

// Effects collects what applying records changed that the owner acts on.
type Effects struct {
	Leased        []Grant  // messages a lease record actually leased
	DeadLettering []uint64 // offsets that now wait for a dead-letter handoff
}

// Grant is one message a lease record leased.
type Grant struct {
	Offset      uint64
	Attempt     uint32 // counted attempts before this delivery, plus one
	Redelivered bool   // the message was delivered before
	PublishMs   int64
	DeadlineMs  int64
}

func (fx *Effects) reset() {
	if fx != nil {
		fx.Leased, fx.DeadLettering = fx.Leased[:0], fx.DeadLettering[:0]
	}
}

// State is the applied state of one queue partition; see the file comment.
// It is owned by one goroutine.
type State struct {
	limits limits

	next         uint64 // offset after the last applied record
	messages     []message
	head         int // messages[:head] are trimmed
	tombstones   int // gone entries in messages[head:]
	bits         queueBits
	leaseTimers  timerHeap
	dueTimers    timerHeap
	handoffs     []uint64 // dead-lettering offsets not yet given to the owner
	counts       Counts
	checkpointID uint64 // id of the last applied checkpoint marker
	dedup        dedupTable
	keyScratch   []dedupKey
	// mode is the mode in force for the records applied so far, set by
	// the mode record of revision modeRevision at modeOffset (mode.go);
	// revision 0 is the declared mode.
	mode         Mode
	modeRevision uint64
	modeOffset   uint64
	// marking: a sent mark applied (record.go); from then on every owner
	// of the log marks the deliveries it hands out, so a lease without a
	// mark was not sent.
	marking bool
}

// limits are the options State applies, in milliseconds.
type limits struct {
	maxDeliveries  uint32
	deadLetter     string
	messageTtlMs   int64
	maxLength      uint64
	maxBytes       uint64
	dropOldest     bool
	leaseTimeoutMs int64
	delayMs        int64
	dedupWindowMs  int64
	dedupEntries   int
}

func limitsOf(o Options) limits {
	o = o.WithDefaults()
	return limits{
		maxDeliveries:  o.MaxDeliveries,
		deadLetter:     o.DeadLetterQueue,
		messageTtlMs:   durationMs(o.MessageTTL),
		maxLength:      o.MaxLength,
		maxBytes:       o.MaxBytes,
		dropOldest:     o.Overflow == DropOldest,
		leaseTimeoutMs: durationMs(o.LeaseTimeout),
		delayMs:        durationMs(o.RedeliveryDelay),
		dedupWindowMs:  durationMs(o.DedupWindow),
		dedupEntries:   int(o.DedupMaxEntries),
	}
}

// NewState returns the state of an empty log whose first offset is next.
func NewState(opts Options, next uint64) *State {
	l := limitsOf(opts)
	return &State{limits: l, next: next, dedup: newDedupTable(l.dedupWindowMs, l.dedupEntries),
		mode: opts.WithDefaults().Mode}
}

// Next is the offset after the last applied record.
func (s *State) Next() uint64 { return s.next }

// Counts returns the message counts.
func (s *State) Counts() Counts { return s.counts }

// FirstLive is the lowest offset of a message that is not settled or
// dead-lettered, or Next when there is none. Log records below it are
// needed only for history.
func (s *State) FirstLive() uint64 {
	for i := s.head; i < len(s.messages); i++ {
		if s.messages[i].status != statusGone {
			return s.messages[i].offset
		}
	}
	return s.next
}

// find returns the live message at offset, or nil. The pointer is valid
// until the next Apply.
func (s *State) find(offset uint64) *message {
	i, ok := s.locate(offset, s.head)
	if !ok {
		return nil
	}
	return &s.messages[i]
}

// locate returns the index of the live message at offset, searching from
// index from on: it gallops forward and then bisects, so a run of sorted
// lookups (the offsets of one record) costs O(log gap) each.
func (s *State) locate(offset uint64, from int) (int, bool) {
	n := len(s.messages)
	if from < s.head || from >= n || s.messages[from].offset > offset {
		from = s.head
	}
	low, high := from, from+1
	for high < n && s.messages[high].offset <= offset {
		low, high = high, high+2*(high-low)
	}
	high = min(high, n)
	i := low + sort.Search(high-low, func(i int) bool { return s.messages[low+i].offset >= offset })
	if i == n || s.messages[i].offset != offset || s.messages[i].status == statusGone {
		return i, false
	}
	return i, true
}

// findRun finds successive offsets of a sorted run; *hint carries the last
// index between calls.
func (s *State) findRun(offset uint64, hint *int) *message {
	i, ok := s.locate(offset, *hint)
	*hint = i
	if !ok {
		return nil
	}
	return &s.messages[i]
}

// Apply applies the record stored at offset. Records are applied in offset
// order, each once; a record that names a message in a status it does not
// apply to leaves that message alone, which is what replay must do too.
// fx, when not nil, is reset and filled with the owner-visible effects.
func (s *State) Apply(offset uint64, rec *Record, fx *Effects) {
	if offset < s.next {
		panic(fmt.Sprintf("queue: apply of offset %d below next %d", offset, s.next))
	}
	fx.reset()
	s.next = offset + 1
	switch rec.Kind {
	case KindPublish:
		s.applyPublish(offset, rec)
	case KindLease:
		s.applyLease(rec, fx)
	case KindAck, KindDiscard, KindRelease, KindNack, KindExpire, KindReject:
		hint := s.head
		for _, target := range rec.Offsets {
			s.applySettle(s.findRun(target, &hint), rec, fx)
		}
	case KindDeadLetter:
		s.applyDeadLetter(rec)
	case KindCheckpoint:
		s.checkpointID = rec.CheckpointID
	case KindPurge:
		s.applyPurge(rec.UpTo)
	case KindMode:
		s.applyMode(offset, rec)
	case KindSent:
		s.applySent(rec)
	default:
		panic(fmt.Sprintf("queue: apply of %v", rec.Kind))
	}
	s.maybeTrim()
}

func (s *State) applyPublish(offset uint64, rec *Record) {
	if n := len(s.messages); n > s.head && s.messages[n-1].offset >= offset {
		panic("queue: publish offsets must increase")
	}
	s.messages = append(s.messages, message{
		offset: offset, publishMs: rec.PublishMs, bytes: rec.PayloadBytes, status: statusReady,
	})
	s.bits.add(offset, false)
	s.counts.Ready++
	s.counts.QueuedBytes += uint64(rec.PayloadBytes)
	s.counts.Published++
	if s.dedup.enabled() {
		keys := rec.dedupKeys
		if keys == nil {
			s.keyScratch = dedupKeysOf(s.keyScratch[:0], rec)
			keys = s.keyScratch
		}
		s.dedup.enter(keys, offset, rec.PublishMs)
	}
	for s.limits.dropOldest && s.overLimit() {
		oldest, _ := s.bits.nextQueued(0)
		s.removeQueued(s.find(oldest), &s.counts.Dropped)
	}
}

func (s *State) overLimit() bool {
	queued := s.counts.Ready + s.counts.Delayed
	return (s.limits.maxLength > 0 && queued > s.limits.maxLength) ||
		(s.limits.maxBytes > 0 && s.counts.QueuedBytes > s.limits.maxBytes)
}

func (s *State) applyLease(rec *Record, fx *Effects) {
	hint := s.head
	for _, target := range rec.Offsets {
		m := s.findRun(target, &hint)
		if m == nil || (m.status != statusReady && m.status != statusDelayed) {
			continue
		}
		s.unqueue(m)
		redelivered := m.delivered
		m.status, m.claim, m.delivered = statusLeased, claimNone, true
		m.holder, m.timeMs = rec.Holder, rec.DeadlineMs
		s.leaseTimers.push(m.timeMs, m.offset)
		s.counts.Leased++
		if fx != nil {
			fx.Leased = append(fx.Leased, Grant{
				Offset: m.offset, Attempt: m.attempts + 1, Redelivered: redelivered,
				PublishMs: m.publishMs, DeadlineMs: m.timeMs,
			})
		}
	}
}

func (s *State) applySettle(m *message, rec *Record, fx *Effects) {
	if m == nil {
		return
	}
	if rec.Kind == KindDiscard && rec.Reason == ReasonTTL {
		if m.status == statusReady || m.status == statusDelayed {
			s.removeQueued(m, &s.counts.Expired)
		}
		return
	}
	if m.status != statusLeased {
		return
	}
	s.counts.Leased--
	m.holder, m.claim, m.sent = 0, claimNone, false
	switch rec.Kind {
	case KindAck:
		s.becomeGone(m, &s.counts.Acked)
	case KindDiscard:
		s.becomeGone(m, &s.counts.Discarded)
	case KindRelease:
		s.requeue(m, 0)
	case KindNack, KindExpire:
		m.attempts++
		if s.limits.maxDeliveries > 0 && m.attempts >= s.limits.maxDeliveries {
			s.becomeDeadLettering(m, fx)
			return
		}
		s.requeue(m, rec.DueMs)
	case KindReject:
		m.attempts++
		s.becomeDeadLettering(m, fx)
	}
}

// applySent marks the leases of a sent mark's offsets as sent, and puts
// marks in force. A mark is appended after the lease it names applied and
// before anything can end that lease (the owner marks a delivery before it
// hands it out), so a message that is not leased when the mark applies is
// left alone.
func (s *State) applySent(rec *Record) {
	s.marking = true
	hint := s.head
	for _, target := range rec.Offsets {
		if m := s.findRun(target, &hint); m != nil && m.status == statusLeased {
			m.sent = true
		}
	}
}

// requeue returns a message to the queue, delayed until dueMs when it is
// not zero.
func (s *State) requeue(m *message, dueMs int64) {
	if dueMs > 0 {
		m.status, m.timeMs = statusDelayed, dueMs
		s.bits.add(m.offset, true)
		s.dueTimers.push(dueMs, m.offset)
		s.counts.Delayed++
	} else {
		m.status, m.timeMs = statusReady, 0
		s.bits.add(m.offset, false)
		s.counts.Ready++
	}
	s.counts.QueuedBytes += uint64(m.bytes)
}

func (s *State) becomeDeadLettering(m *message, fx *Effects) {
	if s.limits.deadLetter == "" {
		s.becomeGone(m, &s.counts.DeadLettered)
		return
	}
	m.status, m.timeMs = statusDeadLettering, 0
	s.counts.DeadLettering++
	s.handoffs = append(s.handoffs, m.offset)
	if fx != nil {
		fx.DeadLettering = append(fx.DeadLettering, m.offset)
	}
}

func (s *State) applyDeadLetter(rec *Record) {
	hint := s.head
	for _, target := range rec.Offsets {
		m := s.findRun(target, &hint)
		if m == nil || m.status != statusDeadLettering {
			continue
		}
		s.counts.DeadLettering--
		s.becomeGone(m, &s.counts.DeadLettered)
	}
}

func (s *State) applyPurge(upTo uint64) {
	for {
		offset, ok := s.bits.nextQueued(0)
		if !ok || offset >= upTo {
			return
		}
		s.removeQueued(s.find(offset), &s.counts.Purged)
	}
}

// unqueue takes a ready or delayed message out of the queued counts.
func (s *State) unqueue(m *message) {
	s.bits.remove(m.offset)
	if m.status == statusReady {
		s.counts.Ready--
	} else {
		s.counts.Delayed--
	}
	s.counts.QueuedBytes -= uint64(m.bytes)
}

// removeQueued settles a ready or delayed message, counting it in counter.
func (s *State) removeQueued(m *message, counter *uint64) {
	s.unqueue(m)
	s.becomeGone(m, counter)
}

func (s *State) becomeGone(m *message, counter *uint64) {
	m.status, m.claim, m.holder = statusGone, claimNone, 0
	*counter++
	s.tombstones++
}

// maybeTrim drops tombstones from the front of messages, and compacts
// interior ones once they outnumber live messages, so memory follows the
// live count rather than the history.
func (s *State) maybeTrim() {
	for s.head < len(s.messages) && s.messages[s.head].status == statusGone {
		s.messages[s.head] = message{}
		s.head++
		s.tombstones--
	}
	live := len(s.messages) - s.head - s.tombstones
	switch {
	case s.head == len(s.messages) && cap(s.messages) > 1<<16:
		s.messages, s.head = nil, 0
		s.bits.trimBelow(s.next)
	case s.head == len(s.messages):
		s.messages, s.head = s.messages[:0], 0
		s.bits.trimBelow(s.next)
	case s.tombstones > 1024 && s.tombstones > live:
		s.compactMessages()
		s.bits.trimBelow(s.FirstLive())
	case s.head > 1024 && s.head > len(s.messages)/2:
		s.messages, s.head = append(s.messages[:0:0], s.messages[s.head:]...), 0
		s.bits.trimBelow(s.FirstLive())
	}
	if s.leaseTimers.len() > 64 && s.leaseTimers.len() > 2*int(s.counts.Leased) {
		s.leaseTimers.rebuild(s.isLeaseTimerLive)
	}
	if s.dueTimers.len() > 64 && s.dueTimers.len() > 2*int(s.counts.Delayed) {
		s.dueTimers.rebuild(s.isDueTimerLive)
	}
}

func (s *State) compactMessages() {
	kept := make([]message, 0, len(s.messages)-s.head-s.tombstones)
	for _, m := range s.messages[s.head:] {
		if m.status != statusGone {
			kept = append(kept, m)
		}
	}
	s.messages, s.head, s.tombstones = kept, 0, 0
}

func (s *State) isLeaseTimerLive(e timerEntry) bool {
	m := s.find(e.offset)
	return m != nil && m.status == statusLeased && m.timeMs == e.timeMs
}

func (s *State) isDueTimerLive(e timerEntry) bool {
	m := s.find(e.offset)
	return m != nil && m.status == statusDelayed && m.timeMs == e.timeMs
}
