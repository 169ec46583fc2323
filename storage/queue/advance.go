package queue

// Advance: applying what the log's frontiers have passed, and reading the
// contents of released deliveries and dead-letter instructions back from
// the log.

import "fmt"

// Advance applies every appended operation the apply frontier has passed
// (the queue's boundary frontier, capped by the apply limit) and reports
// what changed: confirms, deliveries and settles are released against that
// one frontier. On a replica it applies the replicated records instead
// (replica.go). After a storage failure it returns ErrFenced.
func (q *Queue) Advance() (Progress, error) {
	if err := q.usable(); err != nil {
		return Progress{}, err
	}
	if q.role == roleReplica {
		return q.advanceReplica()
	}
	f := q.log.Frontiers()
	if f.Written < q.machine.state.Next() {
		// Only a latch moves the written frontier back: name its cause,
		// the storage error, rather than the symptom.
		if status := q.log.Status(); status.Latched {
			q.fenceOnLatch(status.LastError)
		} else {
			q.fence(fmt.Errorf("log written frontier %d fell below applied %d", f.Written, q.machine.state.Next()))
		}
		return Progress{}, q.fenced
	}
	progress := q.carry
	q.carry = Progress{}
	written, durable := q.frontiers(f)
	captured := q.machine.advance(written, durable, q.nowMs(), &progress)
	if err := q.fill(&progress); err != nil {
		if status := q.log.Status(); status.Latched {
			// The log latched and cut what was not durable between the
			// frontier read above and this read: the storage error is the
			// cause, the missing record only its symptom.
			q.fenceOnLatch(status.LastError)
		} else {
			q.fence(err)
		}
		return Progress{}, q.fenced
	}
	if err := q.appendMarks(); err != nil {
		if q.fenced != nil {
			return Progress{}, q.fenced
		}
		q.logger.Warn("queue: sent marks lost", "dir", q.dir, "err", err)
	}
	if err := q.releaseLapsed(); err != nil {
		return Progress{}, err
	}
	if captured != nil {
		progress.Checkpoint = q.checkpointTask(q.machine.checkpointTicket, captured)
	}
	return progress, nil
}

// releaseLapsed appends the release of the leases that lapsed when they
// applied (machine.go), in batches while the in-flight bound allows; what
// is left waits for the next Advance. A release the log refuses up front
// without fencing (too large) is kept for the next Advance too.
func (q *Queue) releaseLapsed() error {
	for {
		p, entries := q.machine.lapsedRelease()
		if p == nil {
			return nil
		}
		if err := q.submit([]*pendingAppend{p}, entries); err != nil {
			if q.fenced != nil {
				return q.fenced
			}
			q.machine.relapse(p)
			q.logger.Warn("queue: release of lapsed leases refused", "dir", q.dir, "err", err)
			return nil
		}
	}
}

func (q *Queue) checkpointTask(ticket Ticket, captured *capture) *CheckpointTask {
	return &CheckpointTask{
		Ticket: ticket, Next: captured.next, firstLive: captured.firstLive,
		id: captured.id, data: captured.data,
		fs: q.fs, dir: q.dir, barrier: logBarrier{q.log},
	}
}

// fill reads message contents for deliveries and dead-letter instructions.
func (q *Queue) fill(progress *Progress) error {
	var offsets []uint64
	index := map[uint64]int{}
	for i := range progress.Deliveries {
		offsets = append(offsets, progress.Deliveries[i].Offset)
	}
	for i := range progress.DeadLetters {
		offsets = append(offsets, progress.DeadLetters[i].Offset)
	}
	if len(offsets) == 0 {
		return nil
	}
	offsets = sortedUnique(offsets)
	contents := make([]contentOf, len(offsets))
	for i, o := range offsets {
		index[o] = i
	}
	err := readRecords(q.log, offsets, func(offset, epoch uint64, rec *Record) {
		contents[index[offset]] = contentOf{
			epoch: epoch, id: string(rec.MessageID), headers: rec.Headers, payload: append([]byte(nil), rec.Payload...),
		}
	})
	if err != nil {
		return err
	}
	for i := range progress.Deliveries {
		d := &progress.Deliveries[i]
		c := contents[index[d.Offset]]
		d.Incarnation = c.epoch
		d.MessageID, d.Headers, d.Payload = c.id, c.headers, c.payload
	}
	for i := range progress.DeadLetters {
		d := &progress.DeadLetters[i]
		c := contents[index[d.Offset]]
		d.Incarnation = c.epoch
		d.MessageID, d.Headers, d.Payload = c.id, c.headers, c.payload
	}
	return nil
}

type contentOf struct {
	epoch   uint64
	id      string
	headers []Header
	payload []byte
}
