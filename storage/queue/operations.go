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

// SetEpoch sets the epoch written with every later record (the cluster
// layer's ownership epoch); epochs never decrease along a log.
func (q *Queue) SetEpoch(epoch uint64) { q.epoch = epoch }

// Publish appends a batch of messages; messages with an empty ID get one
// assigned, written back into batch. The batch is confirmed by a later
// Advance. With the reject-publish overflow policy a batch that does not
// fit is refused whole with ErrQueueFull.
func (q *Queue) Publish(batch []Message) (Ticket, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	for i := range batch {
		if batch[i].ID == "" {
			q.idSequence++
			batch[i].ID = strconv.FormatUint(q.incarnation, 16) + "-" + strconv.FormatUint(q.idSequence, 10)
		}
	}
	ticket, _, err := q.run(func() (*pendingAppend, []entry, error) {
		return q.machine.publish(batch, q.nowMs())
	})
	return ticket, err
}

// Lease selects up to max ready messages below ceiling, oldest offsets
// first, for holder, and appends the lease. The deliveries are released by
// the Advance that applies it, so a delivery always stands on the mode's
// boundary. Messages past their TTL are discarded first. It returns the
// number of messages claimed (0 and ticket 0 when none was ready).
func (q *Queue) Lease(ceiling uint64, max int, holder uint64) (Ticket, int, error) {
	if _, _, err := q.ExpireMessages(q.clock()); err != nil {
		return 0, 0, err
	}
	return q.run(func() (*pendingAppend, []entry, error) {
		return q.machine.lease(ceiling, max, holder, q.nowMs())
	})
}

// Ceiling is the local visibility ceiling: the frontier of the queue's
// boundary. A replicated queue passes a lower ceiling to Lease.
func (q *Queue) Ceiling() uint64 { return q.boundaryFrontier(q.log.Frontiers()) }

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
// or TTL.
func (q *Queue) NextDeadline() (time.Time, bool) {
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
// that applies it returns a CheckpointTask.
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
// durable frontier. It returns the log's first offset afterwards.
func (q *Queue) Compact() (uint64, error) {
	if err := q.usable(); err != nil {
		return 0, err
	}
	if q.checkpointNext == 0 {
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
