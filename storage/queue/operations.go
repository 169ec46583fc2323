package queue

// The operations the owner starts. Each builds its records in the machine,
// which claims the messages it names, and appends them asynchronously at
// the mode's level; the owner learns the outcome from a later Advance.

import (
	"fmt"
	"strconv"
	"time"
)

// SetNotify sets the function log goroutines call after an append
// completes; the owner typically sends itself a message from it and calls
// Advance. It must not block.
func (q *Queue) SetNotify(fn func()) { q.inbox.setNotify(fn) }

// Offer is a holder's credit for a pipelined lease: Publish claims up to
// Max messages for Holder in the same append.
type Offer struct {
	Holder uint64
	Max    int
}

// Claim is the lease a publish appended for one offer.
type Claim struct {
	Holder uint64
	Ticket Ticket // the lease's ticket: its deliveries carry it
	Count  int
}

// Publish appends a batch of messages; messages with an empty ID get one
// assigned, written back into batch. The batch is confirmed by a later
// Advance. With the reject-publish overflow policy a batch that does not
// fit is refused whole with ErrQueueFull. On a queue that deduplicates
// (Options.DedupWindow), messages that repeat a stored or pending publish
// are not appended; the batch's Confirm lists them (machine_dedup.go).
func (q *Queue) Publish(batch []Message) (Ticket, error) {
	ticket, _, err := q.PublishLeasing(batch, nil)
	return ticket, err
}

// PublishLeasing is Publish plus a pipelined lease for each offer, in
// order: each claims up to Max of the oldest claimable messages, ready ones
// first, then pending ones (this batch's included), for its holder. The
// leases are appended in the same log append right after the publish, so
// one sync (durable) or one write (buffered) covers the batch and its
// deliveries, and the Advance that confirms the batch also releases them.
// A lease still applies only after the publish records it names, and a
// failed append loses both together. Offers that find nothing, and offers
// past the in-flight bound, make no lease. The returned claims list the
// leases made.
func (q *Queue) PublishLeasing(batch []Message, offers []Offer) (Ticket, []Claim, error) {
	if len(batch) == 0 {
		return 0, nil, nil
	}
	if err := q.owner(); err != nil {
		return 0, nil, err
	}
	nowMs := q.nowMs()
	plan := q.machine.planDedup(batch, nowMs)
	for i := range batch {
		if batch[i].ID == "" && !plan.isDuplicate(i) {
			q.idSequence++
			batch[i].ID = q.idPrefix + "-" + strconv.FormatUint(q.idSequence, 10)
		}
	}
	p, entries, err := q.machine.publish(batch, plan, nowMs)
	if err != nil {
		return 0, nil, err
	}
	var group []*pendingAppend
	if len(p.records) > 0 {
		group = append(group, p)
	}
	var claims []Claim
	for _, offer := range offers {
		leases, leaseEntries, err := q.machine.lease(offer.Max, offer.Holder, nowMs)
		if err != nil || len(leases) == 0 {
			continue // ErrBusy: the offer waits for the next dispatch
		}
		group = append(group, leases...)
		entries = append(entries, leaseEntries...)
		lease := leases[len(leases)-1]
		claims = append(claims, Claim{Holder: offer.Holder, Ticket: lease.ticket, Count: lease.count()})
	}
	if len(group) > 0 {
		if err := q.submit(group, entries); err != nil {
			if len(p.records) == 0 {
				q.machine.rollback(p.ticket) // the leases behind it are rolled back already
			}
			return 0, nil, err
		}
	}
	if len(p.records) == 0 {
		// Nothing to append: the batch is answered by the Advance that
		// finds everything before it applied, so make sure one comes.
		q.inbox.wake()
	}
	return p.ticket, claims, nil
}

// Lease claims up to max messages for holder, oldest offsets first: ready
// messages, then messages whose publish is appended but not yet applied
// (pipelined: the lease record follows their publish records in the log).
// Messages past their TTL are discarded first (applied ones) or skipped
// (pending ones). The deliveries are released by the Advance that applies
// the lease, so a delivery stands on the apply frontier, never ahead of
// its message's confirm. It returns the number of messages claimed (0 and
// ticket 0 when none was claimable).
func (q *Queue) Lease(max int, holder uint64) (Ticket, int, error) {
	if _, _, err := q.ExpireMessages(q.clock()); err != nil {
		return 0, 0, err
	}
	if err := q.owner(); err != nil {
		return 0, 0, err
	}
	group, entries, err := q.machine.lease(max, holder, q.nowMs())
	if err != nil || len(group) == 0 {
		return 0, 0, err
	}
	if err := q.submit(group, entries); err != nil {
		return 0, 0, err
	}
	lease := group[len(group)-1]
	return lease.ticket, lease.count(), nil
}

// Sent records that the owner handed the deliveries of offsets, released
// by the Advance just before, to their holders. A replicated owner appends
// a sent mark of them (KindSent, record.go) without asking for a sync, so
// that a promotion of any copy that holds the mark counts an attempt for
// these leases, and releases the leases whose deliveries never left with
// none counted (replica.go). The owner calls it once per Advance with every
// delivery it sends, in the same turn as that Advance and before it hands
// them out; deliveries it does not send (their holder is gone) are left
// out. Offsets that are not leased are skipped. When the in-flight bound
// leaves no room, the marks wait for the next Advance. It records nothing
// on a single-node queue (Open counts an attempt for every lease it finds)
// nor on a queue without MaxDeliveries, where an attempt decides nothing:
// there a promotion counts every lease, as before marks existed.
func (q *Queue) Sent(offsets []uint64) error {
	if err := q.owner(); err != nil {
		return err
	}
	if !q.machine.marksDeliveries || len(offsets) == 0 {
		return nil
	}
	q.machine.markSent(offsets)
	return q.appendMarks()
}

// appendMarks appends the sent marks that wait, if there is room.
func (q *Queue) appendMarks() error {
	p, entries := q.machine.sentAppend()
	if p == nil {
		return nil
	}
	if err := q.submit([]*pendingAppend{p}, entries); err != nil {
		if q.fenced != nil {
			return q.fenced
		}
		return fmt.Errorf("queue: sent mark refused: %w", err)
	}
	return nil
}

// Ceiling is the apply frontier: the offset below which records are
// applied once Advance runs (the queue's boundary frontier, capped by the
// apply limit). Deliveries and confirms are released below it only.
func (q *Queue) Ceiling() uint64 { return q.applyFrontier(q.log.Frontiers()) }

// SetApplyLimit caps the apply frontier at limit: records at or above it
// are not applied, so no confirm, delivery or settle is released for them.
// A replicated owner sets it to the quorum frontier (the W-th highest
// progress at the queue's boundary across copies, its own included) every
// time that moves; a replica may set it to the owner's applied frontier.
// A limit below what is applied already holds back only what follows. On a
// single-node queue there is none (the local boundary frontier rules).
// limit is taken at the declared mode's boundary: on a queue declared
// durable it caps both frontiers; on one declared buffered only the written
// one, so a mode record (which needs durable copies) waits for
// SetApplyLimits. A queue that changes mode sets both with SetApplyLimits.
func (q *Queue) SetApplyLimit(limit uint64) {
	q.applyLimit = limit
	if q.opts.Mode == Durable {
		q.durableLimit = limit
	}
}

// SetRetentionFloor caps compaction: Compact never removes records at or
// above floor. A replicated queue sets it to the lowest durable progress
// across copies, so the owner keeps what a follower may need to repair.
func (q *Queue) SetRetentionFloor(floor uint64) { q.retentionFloor = floor }

func (q *Queue) settle(holder uint64, offsets []uint64, template Record) (Ticket, error) {
	ticket, _, err := q.run(func() (*pendingAppend, []entry, error) {
		return q.machine.settle(holder, offsets, template)
	})
	return ticket, err
}

// Ack settles messages leased by holder as processed.
func (q *Queue) Ack(holder uint64, offsets []uint64) (Ticket, error) {
	return q.settle(holder, offsets, Record{Kind: KindAck})
}

// Nack returns messages leased by holder with an attempt counted, ready
// again after delay (negative: the queue's RedeliveryDelay). A message
// whose attempts reach MaxDeliveries is dead-lettered instead.
func (q *Queue) Nack(holder uint64, offsets []uint64, delay time.Duration) (Ticket, error) {
	return q.settle(holder, offsets, Record{Kind: KindNack, DueMs: q.machine.nackDueMs(delay, q.nowMs())})
}

// Reject dead-letters messages leased by holder at once, with an attempt
// counted: a consumer's nack without requeue. With a dead-letter queue they
// wait for their handoff (a later Advance issues their DeadLetter
// instructions, as for messages reaching MaxDeliveries); without one they
// are dropped and counted as dead-lettered.
func (q *Queue) Reject(holder uint64, offsets []uint64) (Ticket, error) {
	return q.settle(holder, offsets, Record{Kind: KindReject})
}

// Release returns messages leased by holder without counting an attempt.
func (q *Queue) Release(holder uint64, offsets []uint64) (Ticket, error) {
	return q.settle(holder, offsets, Record{Kind: KindRelease})
}

// Discard drops messages leased by holder.
func (q *Queue) Discard(holder uint64, offsets []uint64) (Ticket, error) {
	return q.settle(holder, offsets, Record{Kind: KindDiscard, Reason: ReasonConsumer})
}

// expireBatch bounds one expiry append.
const expireBatch = 4 * maxOffsetsPerRecord

// ExpireLeases appends the expiry of leases whose deadline is at or before
// now; each returns its message with an attempt counted. It returns the
// number of leases expiring.
func (q *Queue) ExpireLeases(now time.Time) (Ticket, int, error) {
	return q.run(func() (*pendingAppend, []entry, error) {
		return q.machine.expireLeases(now.UnixMilli(), expireBatch, ReasonDeadline)
	})
}

// ExpireMessages appends the discard of ready messages past their TTL.
func (q *Queue) ExpireMessages(now time.Time) (Ticket, int, error) {
	return q.run(func() (*pendingAppend, []entry, error) {
		return q.machine.expireMessages(now.UnixMilli(), expireBatch)
	})
}

// NextDeadline is when the owner should next call ExpireLeases,
// ExpireMessages or Lease: the earliest lease deadline, redelivery due time
// or TTL. A replica has none.
func (q *Queue) NextDeadline() (time.Time, bool) {
	if q.role == roleReplica {
		return time.Time{}, false // the owner acts on deadlines; a replica follows its records
	}
	ms, ok := q.machine.state.nextDeadlineMs()
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// DeadLettered records that the dead-letter queue confirmed the messages
// of earlier DeadLetter instructions; it appends their markers.
func (q *Queue) DeadLettered(offsets []uint64) (Ticket, error) {
	ticket, _, err := q.run(func() (*pendingAppend, []entry, error) {
		return q.machine.deadLettered(offsets)
	})
	return ticket, err
}

// Purge drops every ready and delayed message published before the call.
func (q *Queue) Purge() (Ticket, error) {
	ticket, _, err := q.run(q.machine.purge)
	return ticket, err
}

// Checkpoint starts a checkpoint: a marker is appended, and the Advance
// that applies it returns a CheckpointTask. On a replica, checkpoints
// start at the owner's markers instead (replica.go).
func (q *Queue) Checkpoint() (Ticket, error) {
	id, err := randomID()
	if err != nil {
		return 0, err
	}
	ticket, _, err := q.run(func() (*pendingAppend, []entry, error) {
		return q.machine.checkpoint(id)
	})
	return ticket, err
}

// CheckpointDone reports the result of a CheckpointTask's Run. On success
// the snapshot becomes the compaction bound; either way a new checkpoint
// may start.
func (q *Queue) CheckpointDone(task *CheckpointTask, runErr error) error {
	if task.Ticket != q.machine.checkpointTicket {
		return fmt.Errorf("queue: checkpoint task %d is not the one in progress", task.Ticket)
	}
	q.machine.finishCheckpoint()
	if runErr != nil {
		return runErr
	}
	if task.Next > q.checkpointNext {
		q.checkpointNext, q.checkpointLive = task.Next, task.firstLive
	}
	return nil
}

// Compact removes the log prefix that the newest published snapshot covers
// and that holds no message live in it, in whole segments, never above the
// durable frontier; with a retention floor, only once the floor has passed
// that snapshot (so never above the floor either). It returns the log's
// first offset afterwards.
func (q *Queue) Compact() (uint64, error) {
	if err := q.usable(); err != nil {
		return 0, err
	}
	if q.checkpointNext == 0 || q.checkpointNext > q.retentionFloor {
		// A snapshot above the retention floor may cover records a
		// replica's divergent-suffix cut removes (the floor never exceeds
		// the quorum frontier, and cuts never go below it); compacting
		// against it could leave no usable snapshot after such a cut.
		return q.log.FirstOffset(), nil
	}
	// The marker at checkpointNext-1 stays: recovery checks it.
	floor := min(q.checkpointNext-1, q.checkpointLive, q.log.Frontiers().Durable)
	if floor > q.log.FirstOffset() {
		if err := q.log.TruncateBefore(floor); err != nil {
			return q.log.FirstOffset(), fmt.Errorf("queue: compact: %w", err)
		}
	}
	return q.log.FirstOffset(), nil
}
