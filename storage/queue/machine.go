package queue

// machine is the queue's logic without I/O: it turns operations into log
// entries, predicts the offsets the log will assign (the queue is the log's
// only appender and the log assigns offsets in append order), keeps the
// appended-but-unapplied operations in a FIFO, and applies them to State
// once the apply frontier passes them.
//
// Pipelined leases: a lease may claim, besides applied ready messages,
// messages whose publish is appended but not yet applied (pending). Its
// record lies after their publish records in the log, so it applies after
// them, and the frontier that releases its deliveries has passed their
// publishes too: one sync covers a publish and the lease of it appended in
// the same group. pendingLeased holds those pending offsets until their
// publish applies; the publish then enters the state already claimed.
//
// Lapsed leases. A lease's deadline is fixed when its record is built
// (now + the lease timeout), but its deliveries are released only when the
// record applies: after a write or a sync on a single node, and on a
// replicated owner once W copies count, which a quorum loss can delay past
// the deadline. A lease that applies with a quarter of the lease timeout
// or less left (deadline - now <= timeout/4, the owner's clock at the
// Advance that applies it) lapses: its deliveries are not released (the
// consumer would get a lease that is over, or about to be, and its expiry
// would count an attempt nobody made); the owner appends a release of
// those messages instead (KindRelease: back to ready, no attempt counted)
// and leases them again later with a fresh deadline. The owner decides
// once, from its clock, and writes the decision as a record: every copy
// and every replay applies the lease and then the release, never a clock.
// Until the release applies the messages stay leased and claimed, so
// neither a settle nor the lease's expiry takes them. A lapsed message that
// had never been delivered is remembered (unsent, bounded, this process
// only) so that its next delivery is not marked redelivered; without that
// memory (after a restart, on another owner) the mark errs on the side of
// "may have been delivered", as it must.
//
// Sent marks. A replicated owner of a queue with MaxDeliveries marks the
// deliveries it hands out (Queue.Sent): one KindSent record per Advance,
// appended without a sync, so a promotion can tell a lease whose delivery
// left from one that never did (replica.go). Without MaxDeliveries an
// attempt never decides a message's fate, and no mark is written. A mark is built for the lease the state shows at the
// call; when the in-flight bound leaves no room, the marks wait in marks,
// with the holder and deadline of their lease, and the next Advance
// appends those still naming that lease. Room is made only by an Advance
// (or a refused append), so a waiting mark is appended before any other
// operation that follows the call. Marks count only once they are in force
// (State.marking): while they are not, the owner's first lease is preceded
// by a mark that names nothing (declaration is its ticket), so every lease
// after it is one whose deliveries are marked.
//
// Invariant: pending holds appends in offset order; pending[0].first +
// pending[0].applied == state.Next() whenever pending is not empty;
// nextOffset == the end of the last pending append (or state.Next());
// every offset in pendingLeased is an unapplied publish of a pending
// append; every unapplied publish below leaseCursor is in pendingLeased or
// was past its TTL when the cursor passed it.

import (
	"fmt"
	"sort"
	"time"
)

// Ticket identifies one queue operation, which is one log append.
type Ticket uint64

// Boundary names the progress point an applied event stands on.
type Boundary uint8

const (
	// BoundaryWritten: the record reached the OS (page cache).
	BoundaryWritten Boundary = 1
	// BoundaryDurable: an fdatasync covering the record completed.
	BoundaryDurable Boundary = 2
)

// String names the boundary.
func (b Boundary) String() string {
	if b == BoundaryDurable {
		return "durable"
	}
	return "written"
}

// Message is what a publisher gives the queue.
type Message struct {
	// ID is the publisher's message id; the queue assigns one when empty.
	// On a queue that deduplicates, a publisher's id is a deduplication
	// key (dedup.go).
	ID      string
	Headers []Header
	Payload []byte
	// ProducerID names the publisher and ProducerSeq is its number for
	// this message (0: none); on a queue that deduplicates, the pair is a
	// deduplication key. ProducerSeq needs a ProducerID.
	ProducerID  string
	ProducerSeq uint64
}

// entry is one log entry the shell appends.
type entry struct {
	kind Kind
	body []byte
}

type operation uint8

const (
	opPublish operation = iota + 1
	opLease
	opSettle
	opDeadLetter
	opCheckpoint
	opPurge
	opMode
	opSent
)

// pendingAppend is an appended operation not yet fully applied.
type pendingAppend struct {
	ticket  Ticket
	op      operation
	first   uint64   // offset of records[0]
	records []Record // metadata form; publish records carry no payload
	applied int
	holder  uint64
	bytes   uint64 // payload bytes of a publish batch
	// Publish deduplication: duplicates are the batch indices not stored
	// because they repeat a stored or pending publish; records then hold
	// the other messages in batch order. dependsNext is the offset after
	// the newest original they repeat: a duplicate's confirm stands on the
	// boundary that covers it.
	duplicates  []int
	dependsNext uint64
	// syncs is true when the append asks the log for a sync: something
	// waits for its application (a confirm, a delivery, a message coming
	// back, an answer). Settles that only end a message do not.
	syncs bool
}

func (p *pendingAppend) next() uint64 { return p.first + uint64(len(p.records)) }

// defaultMaxInflight bounds the appends in flight when the owner sets no
// bound; the shell uses the log's request queue length, so AppendAsync
// never waits for room.
const defaultMaxInflight = 1024

type machine struct {
	state      *State
	nextOffset uint64
	nextTicket Ticket
	pending    []*pendingAppend
	pendHead   int

	pendingPublishes    uint64
	pendingPublishBytes uint64
	checkpointID        uint64 // marker id of the checkpoint in flight, 0 when none
	checkpointTicket    Ticket
	maxInflight         int
	fx                  Effects
	offsetScratch       []uint64

	pendingLeased map[uint64]struct{} // pending publishes claimed by a lease in flight
	leaseCursor   uint64              // see the file comment

	// lapsed are the offsets of lapsed leases whose release is not
	// appended yet; unsent those of lapsed messages never delivered
	// (see the file comment).
	lapsed []uint64
	unsent map[uint64]struct{}
	// marks are the deliveries handed out whose sent mark waits for room;
	// marksDeliveries is set on an owner that marks them (a replicated
	// one, of a queue with MaxDeliveries), and declaration is the ticket
	// of the mark that puts marks in force, 0 when none was appended (see
	// the file comment).
	marks           []sentMark
	marksDeliveries bool
	declaration     Ticket

	// pendingKeys are the dedup keys of appended, unapplied publishes, with
	// their offsets: a duplicate of one waits for its outcome (dedup.go).
	pendingKeys map[dedupKey]uint64
	// duplicatesRefused counts the publishes not stored as duplicates
	// since the queue opened.
	duplicatesRefused uint64

	// The newest mode revision appended (mode.go): its mode, number and
	// offset; modeTicket is its ticket while it is pending (0: none).
	// Appends are admitted under tailMode.
	tailMode     Mode
	tailRevision uint64
	tailOffset   uint64
	modeTicket   Ticket
}

func newMachine(state *State) *machine {
	m := &machine{
		state: state, nextOffset: state.Next(), nextTicket: 1, maxInflight: defaultMaxInflight,
		pendingLeased: map[uint64]struct{}{}, leaseCursor: state.Next(),
		pendingKeys: map[dedupKey]uint64{}, unsent: map[uint64]struct{}{},
	}
	m.resetTail()
	return m
}

func (m *machine) inflight() int { return len(m.pending) - m.pendHead }

// begin checks the in-flight bound and returns a new pending append.
func (m *machine) begin(op operation) (*pendingAppend, error) {
	if m.inflight() >= m.maxInflight {
		return nil, ErrBusy
	}
	p := &pendingAppend{ticket: m.nextTicket, op: op, syncs: true}
	m.nextTicket++
	return p, nil
}

// submit registers p with predicted offsets.
func (m *machine) submit(p *pendingAppend) {
	p.first = m.nextOffset
	m.nextOffset = p.next()
	m.pending = append(m.pending, p)
}

// rollback undoes the last submit after the log refused the append up
// front, releasing its claims.
func (m *machine) rollback(ticket Ticket) {
	last := len(m.pending) - 1
	if last < m.pendHead || m.pending[last].ticket != ticket {
		panic("queue: rollback of an append that is not the last one")
	}
	p := m.pending[last]
	m.pending = m.pending[:last]
	m.nextOffset = p.first
	m.releaseClaims(p)
}

func (m *machine) releaseClaims(p *pendingAppend) {
	switch p.op {
	case opSent:
		if p.ticket == m.declaration {
			m.declaration = 0
		}
		return // a mark claims nothing
	case opPublish:
		m.pendingPublishes -= uint64(len(p.records))
		m.pendingPublishBytes -= p.bytes
		m.leaseCursor = min(m.leaseCursor, p.first)
		for i := range p.records {
			m.forgetPendingKeys(&p.records[i], p.first+uint64(i))
		}
		m.duplicatesRefused -= uint64(len(p.duplicates))
	case opCheckpoint:
		m.checkpointID = 0
	case opMode:
		m.resetTail()
	}
	for i := range p.records {
		for _, offset := range p.records[i].Offsets {
			if _, ok := m.pendingLeased[offset]; ok {
				delete(m.pendingLeased, offset)
				m.leaseCursor = min(m.leaseCursor, offset)
				continue
			}
			m.state.unclaim(offset)
		}
	}
}

// publish builds the entries for the messages of a batch that plan
// (planDedup) does not name as duplicates.
func (m *machine) publish(batch []Message, plan dedupPlan, nowMs int64) (*pendingAppend, []entry, error) {
	if err := m.checkCapacity(batch, plan); err != nil {
		return nil, nil, err
	}
	p, err := m.begin(opPublish)
	if err != nil {
		return nil, nil, err
	}
	stored := len(batch) - len(plan.duplicates)
	entries := make([]entry, 0, stored)
	p.records = make([]Record, 0, stored)
	p.duplicates, p.dependsNext = plan.duplicates, plan.dependsNext
	for i := range batch {
		if plan.isDuplicate(i) {
			continue
		}
		msg := &batch[i]
		dedup := plan.recordDedup(i, msg)
		entries = append(entries, entry{KindPublish, appendPublishBody(nil, []byte(msg.ID), nowMs, msg.Headers, msg.Payload, dedup)})
		p.records = append(p.records, Record{Kind: KindPublish, PublishMs: nowMs, PayloadBytes: uint32(len(msg.Payload)),
			dedupKeys: plan.keysOf(i)})
		p.bytes += uint64(len(msg.Payload))
	}
	m.pendingPublishes += uint64(len(p.records))
	m.pendingPublishBytes += p.bytes
	m.submit(p)
	for i := range p.records {
		for _, key := range p.records[i].dedupKeys {
			m.pendingKeys[key] = p.first + uint64(i)
		}
	}
	m.duplicatesRefused += uint64(len(p.duplicates))
	return p, entries, nil
}

// forgetPendingKeys drops the pending keys of the publish at offset once it
// applied (the state holds them now) or was rolled back.
func (m *machine) forgetPendingKeys(rec *Record, offset uint64) {
	for _, key := range rec.dedupKeys {
		if pending, ok := m.pendingKeys[key]; ok && pending == offset {
			delete(m.pendingKeys, key)
		}
	}
}

// checkCapacity applies the reject-publish overflow policy, counting
// publishes in flight as queued and duplicates not at all.
func (m *machine) checkCapacity(batch []Message, plan dedupPlan) error {
	limits := m.state.limits
	if limits.dropOldest || (limits.maxLength == 0 && limits.maxBytes == 0) {
		return nil
	}
	counts := m.state.counts
	length := counts.Ready + counts.Delayed + m.pendingPublishes + uint64(len(batch)-len(plan.duplicates))
	bytes := counts.QueuedBytes + m.pendingPublishBytes
	for i := range batch {
		if !plan.isDuplicate(i) {
			bytes += uint64(len(batch[i].Payload))
		}
	}
	if limits.maxLength > 0 && length > limits.maxLength {
		return fmt.Errorf("%w: %d messages over max length %d", ErrQueueFull, length, limits.maxLength)
	}
	if limits.maxBytes > 0 && bytes > limits.maxBytes {
		return fmt.Errorf("%w: %d bytes over max bytes %d", ErrQueueFull, bytes, limits.maxBytes)
	}
	return nil
}

// offsetRecords splits a sorted offset list into records shaped like
// template, at most maxOffsetsPerRecord offsets each.
func offsetRecords(template Record, offsets []uint64) ([]Record, []entry) {
	var records []Record
	var entries []entry
	for len(offsets) > 0 {
		n := min(len(offsets), maxOffsetsPerRecord)
		rec := template
		rec.Offsets = offsets[:n:n]
		records = append(records, rec)
		entries = append(entries, entry{rec.Kind, encodeRecord(nil, &rec)})
		offsets = offsets[n:]
	}
	return records, entries
}

// lease claims up to max messages for holder, lowest offsets first: ready
// applied messages, then pending publishes (pipelined). Messages past their
// TTL are skipped. It returns the appends to make, the lease last: on an
// owner that marks its deliveries, the first lease in a log without marks
// comes after the mark that puts them in force (see the file comment). It
// returns nil when nothing is claimable.
func (m *machine) lease(max int, holder uint64, nowMs int64) ([]*pendingAppend, []entry, error) {
	if max <= 0 {
		return nil, nil, nil
	}
	if m.inflight() >= m.maxInflight {
		return nil, nil, ErrBusy
	}
	offsets := m.state.claimReady(max, nowMs, nil)
	offsets = m.claimPending(max, nowMs, offsets)
	if len(offsets) == 0 {
		return nil, nil, nil
	}
	var group []*pendingAppend
	var entries []entry
	// Without room for both, the lease goes alone and counts an attempt
	// at a promotion, as before marks; a later lease puts them in force.
	if m.marksDeliveries && !m.state.marking && m.declaration == 0 && m.inflight()+2 <= m.maxInflight {
		p, _ := m.begin(opSent)
		rec := Record{Kind: KindSent}
		p.records, p.syncs = []Record{rec}, false
		m.submit(p)
		m.declaration = p.ticket
		group, entries = append(group, p), append(entries, entry{KindSent, encodeRecord(nil, &rec)})
	}
	p, _ := m.begin(opLease)
	p.holder = holder
	template := Record{Kind: KindLease, Holder: holder, DeadlineMs: nowMs + m.state.limits.leaseTimeoutMs}
	var leaseEntries []entry
	p.records, leaseEntries = offsetRecords(template, offsets)
	m.submit(p)
	return append(group, p), append(entries, leaseEntries...), nil
}

// lapseFraction: a lease lapses when it applies with 1/lapseFraction of the
// lease timeout or less left.
const lapseFraction = 4

// lapses reports whether a lease with deadlineMs applied at nowMs lapses.
// With a lease timeout under lapseFraction milliseconds the margin is 0: a
// lease lapses only once its deadline is reached, when ExpireLeases would
// take it.
func (m *machine) lapses(deadlineMs, nowMs int64) bool {
	return deadlineMs-nowMs <= m.state.limits.leaseTimeoutMs/lapseFraction
}

// lapse keeps the message of a lapsed lease leased and claimed until its
// release is appended; redelivered is what its delivery would have said.
func (m *machine) lapse(offset uint64, redelivered bool) {
	m.state.find(offset).claim = claimSettle
	m.lapsed = append(m.lapsed, offset)
	if !redelivered {
		m.markUnsent(offset)
	}
}

// maxUnsent bounds the lapsed messages remembered as never delivered; past
// it a lapsed message's next delivery is marked redelivered.
const maxUnsent = 1 << 16

func (m *machine) markUnsent(offset uint64) {
	if len(m.unsent) >= maxUnsent {
		for o := range m.unsent {
			if m.state.find(o) == nil { // settled or dropped since
				delete(m.unsent, o)
			}
		}
	}
	if len(m.unsent) < maxUnsent {
		m.unsent[offset] = struct{}{}
	}
}

// lapsedRelease builds the release of up to expireBatch lapsed leases, or
// returns nil when there are none or the in-flight bound is reached (the
// next Advance tries again).
func (m *machine) lapsedRelease() (*pendingAppend, []entry) {
	if len(m.lapsed) == 0 || m.inflight() >= m.maxInflight {
		return nil, nil
	}
	n := min(len(m.lapsed), expireBatch)
	offsets := sortedUnique(m.lapsed[:n])
	m.lapsed = append(m.lapsed[:0], m.lapsed[n:]...)
	return m.claimed(opSettle, Record{Kind: KindRelease}, offsets)
}

// relapse takes back the lapsed messages of a release the log refused up
// front (rollback released their claims), to be appended again.
func (m *machine) relapse(p *pendingAppend) {
	for i := range p.records {
		for _, offset := range p.records[i].Offsets {
			if msg := m.state.find(offset); msg != nil && msg.status == statusLeased && msg.claim == claimNone {
				msg.claim = claimSettle
				m.lapsed = append(m.lapsed, offset)
			}
		}
	}
}

// claimPending claims unapplied publishes from leaseCursor on until out
// holds limit offsets.
func (m *machine) claimPending(limit int, nowMs int64, out []uint64) []uint64 {
	queued := m.pending[m.pendHead:]
	i := sort.Search(len(queued), func(i int) bool { return queued[i].next() > m.leaseCursor })
	ttlMs := m.state.limits.messageTtlMs
	for ; i < len(queued) && len(out) < limit; i++ {
		p := queued[i]
		if p.op != opPublish {
			continue
		}
		for offset := max(p.first+uint64(p.applied), m.leaseCursor); offset < p.next() && len(out) < limit; offset++ {
			m.leaseCursor = offset + 1
			if ttlMs > 0 && p.records[offset-p.first].PublishMs+ttlMs <= nowMs {
				continue
			}
			m.pendingLeased[offset] = struct{}{}
			out = append(out, offset)
		}
	}
	return out
}

// settle checks and claims offsets leased by holder and builds the records
// of template's kind (Ack, Nack, Release, Discard or Reject).
func (m *machine) settle(holder uint64, offsets []uint64, template Record) (*pendingAppend, []entry, error) {
	offsets = sortedUnique(offsets)
	if len(offsets) == 0 {
		return nil, nil, fmt.Errorf("%w: no offsets", ErrNotLeased)
	}
	if m.inflight() >= m.maxInflight {
		return nil, nil, ErrBusy
	}
	if err := m.state.claimSettle(holder, offsets); err != nil {
		return nil, nil, err
	}
	p, _ := m.begin(opSettle)
	p.syncs = m.settleSyncs(template.Kind)
	var entries []entry
	p.records, entries = offsetRecords(template, offsets)
	m.submit(p)
	return p, entries, nil
}

// settleSyncs says whether a settle of kind asks for a sync: only when the
// message comes back (nack, release) or goes on to a dead-letter queue
// (reject with one). Ack, discard and reject without a dead-letter queue
// end the message; their records are applied by whichever sync covers them
// next (another append's, the background sync's or Close's).
func (m *machine) settleSyncs(kind Kind) bool {
	switch kind {
	case KindNack, KindRelease:
		return true
	case KindReject:
		return m.state.limits.deadLetter != ""
	}
	return false
}

// nackDueMs resolves a nack's delay: negative means the queue's default.
func (m *machine) nackDueMs(delay time.Duration, nowMs int64) int64 {
	delayMs := durationMs(delay)
	if delay < 0 {
		delayMs = m.state.limits.delayMs
	}
	if delayMs <= 0 {
		return 0
	}
	return nowMs + delayMs
}

// claimed builds an append for offsets already claimed by the state.
func (m *machine) claimed(op operation, template Record, offsets []uint64) (*pendingAppend, []entry) {
	p, _ := m.begin(op)
	var entries []entry
	p.records, entries = offsetRecords(template, offsets)
	m.submit(p)
	return p, entries
}

// expireLeases builds a lease expiry for leases past their deadline.
func (m *machine) expireLeases(nowMs int64, max int, reason Reason) (*pendingAppend, []entry, error) {
	if m.inflight() >= m.maxInflight {
		return nil, nil, ErrBusy
	}
	offsets := sortedUnique(m.state.claimExpiredLeases(nowMs, max, nil))
	if len(offsets) == 0 {
		return nil, nil, nil
	}
	p, entries := m.claimed(opSettle, Record{Kind: KindExpire, Reason: reason}, offsets)
	return p, entries, nil
}

// expireMessages builds a TTL discard for queued messages past their TTL.
func (m *machine) expireMessages(nowMs int64, max int) (*pendingAppend, []entry, error) {
	if m.inflight() >= m.maxInflight {
		return nil, nil, ErrBusy
	}
	offsets := m.state.claimExpiredMessages(nowMs, max, nil)
	if len(offsets) == 0 {
		return nil, nil, nil
	}
	p, entries := m.claimed(opSettle, Record{Kind: KindDiscard, Reason: ReasonTTL}, offsets)
	p.syncs = false // a TTL discard only ends messages
	return p, entries, nil
}

// restartExpiry builds what ends every lease found after a restart or at
// a promotion; those leases were held by a process that ended. On a
// single-node queue, and while marks are not in force (no sent mark
// applied: a log an older version wrote), every lease is expired with its
// attempt counted. Once they are, on a replicated queue, only a lease a
// mark shows was sent is; the others are released, no attempt counted,
// since their deliveries never left the owner (their messages stay marked
// as delivered before, so their next delivery is flagged redelivered). It
// returns the appends in offset order (expiry, release) and their entries.
func (m *machine) restartExpiry(replicated bool) ([]*pendingAppend, []entry) {
	sent, unsent := m.state.leasedOffsets(replicated && m.state.marking)
	var group []*pendingAppend
	var entries []entry
	for _, part := range []struct {
		offsets  []uint64
		template Record
	}{
		{sent, Record{Kind: KindExpire, Reason: ReasonRestart}},
		{unsent, Record{Kind: KindRelease}},
	} {
		if len(part.offsets) == 0 {
			continue
		}
		for _, offset := range part.offsets {
			m.state.find(offset).claim = claimSettle
		}
		p, partEntries := m.claimed(opSettle, part.template, part.offsets)
		group, entries = append(group, p), append(entries, partEntries...)
	}
	return group, entries
}

// restartCounts counts the leases a restart group expires and releases.
func restartCounts(group []*pendingAppend) (expired, released int) {
	for _, p := range group {
		for i := range p.records {
			switch p.records[i].Kind {
			case KindExpire:
				expired += len(p.records[i].Offsets)
			case KindRelease:
				released += len(p.records[i].Offsets)
			}
		}
	}
	return expired, released
}

// sentMark is a delivery whose sent mark waits for room: the lease it
// names, by holder and deadline.
type sentMark struct {
	offset     uint64
	holder     uint64
	deadlineMs int64
}

// markSent queues the sent marks of the deliveries of offsets, each for
// the lease the state shows now; offsets that are not leased are skipped.
func (m *machine) markSent(offsets []uint64) {
	for _, offset := range offsets {
		if msg := m.state.find(offset); msg != nil && msg.status == statusLeased {
			m.marks = append(m.marks, sentMark{offset: offset, holder: msg.holder, deadlineMs: msg.timeMs})
		}
	}
}

// sentAppend builds the append of the waiting marks whose lease is still
// the one they name, or returns nil when there are none or the in-flight
// bound is reached (they wait for the next Advance).
func (m *machine) sentAppend() (*pendingAppend, []entry) {
	if len(m.marks) == 0 || m.inflight() >= m.maxInflight {
		return nil, nil
	}
	var offsets []uint64
	for _, mark := range m.marks {
		msg := m.state.find(mark.offset)
		if msg != nil && msg.status == statusLeased && msg.holder == mark.holder && msg.timeMs == mark.deadlineMs {
			offsets = append(offsets, mark.offset)
		}
	}
	offsets = sortedUnique(offsets)
	m.marks = m.marks[:0]
	if len(offsets) == 0 {
		return nil, nil
	}
	p, entries := m.claimed(opSent, Record{Kind: KindSent}, offsets)
	p.syncs = false // nothing waits for a mark; the next sync covers it
	return p, entries
}

// deadLettered builds the markers for messages the dead-letter queue took.
func (m *machine) deadLettered(offsets []uint64) (*pendingAppend, []entry, error) {
	offsets = sortedUnique(offsets)
	if len(offsets) == 0 {
		return nil, nil, fmt.Errorf("%w: no offsets", ErrNotDeadLettering)
	}
	if m.inflight() >= m.maxInflight {
		return nil, nil, ErrBusy
	}
	if err := m.state.claimMarker(offsets); err != nil {
		return nil, nil, err
	}
	target := []byte(m.state.limits.deadLetter)
	p, entries := m.claimed(opDeadLetter, Record{Kind: KindDeadLetter, Target: target}, offsets)
	return p, entries, nil
}

// checkpoint builds a checkpoint marker with a fresh id.
func (m *machine) checkpoint(id uint64) (*pendingAppend, []entry, error) {
	if m.checkpointID != 0 {
		return nil, nil, ErrCheckpointInProgress
	}
	p, err := m.begin(opCheckpoint)
	if err != nil {
		return nil, nil, err
	}
	rec := Record{Kind: KindCheckpoint, CheckpointID: id}
	p.records = []Record{rec}
	m.checkpointID, m.checkpointTicket = id, p.ticket
	m.submit(p)
	return p, []entry{{KindCheckpoint, encodeRecord(nil, &rec)}}, nil
}

// purge builds a purge of every message queued below the next offset.
func (m *machine) purge() (*pendingAppend, []entry, error) {
	p, err := m.begin(opPurge)
	if err != nil {
		return nil, nil, err
	}
	rec := Record{Kind: KindPurge, UpTo: m.nextOffset}
	p.records = []Record{rec}
	m.submit(p)
	return p, []entry{{KindPurge, encodeRecord(nil, &rec)}}, nil
}
