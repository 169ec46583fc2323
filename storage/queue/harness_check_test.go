package queue

import (
	"errors"
	"slices"
	"sort"
)

// applyModel applies model ops up to the queue's applied offset.
func (h *harness) applyModel() {
	target := h.q.machine.state.Next()
	for ; h.applied < target; h.applied++ {
		op := h.ops[h.applied]
		if op == nil {
			h.fail("queue applied offset %d the harness never appended", h.applied)
		}
		h.model.apply(h.applied, &op.rec, op.id)
		for _, o := range op.rec.Offsets {
			if op.rec.Kind != KindSent { // a mark claims nothing
				delete(h.claimed, o)
			}
		}
		switch op.rec.Kind {
		case KindLease:
			h.grants[op.ticket] = append(h.grants[op.ticket], h.model.granted...)
		case KindDeadLetter:
			for _, o := range op.rec.Offsets {
				delete(h.issued, o)
			}
		case KindPublish:
			h.pendingPublishes--
			h.pendingPublishBytes -= uint64(op.rec.PayloadBytes)
		}
	}
}

func (h *harness) advance() {
	before := h.applied
	beforeTicket := h.q.machine.nextTicket
	progress, err := h.q.Advance()
	h.note("advance -> applied %d, %d confirms, %d deliveries, %d lapsed, %d dead letters, %v",
		h.q.machine.state.Next(), len(progress.Confirmed), len(progress.Deliveries), len(progress.Lapsed),
		len(progress.DeadLetters), err)
	if err != nil {
		h.fail("advance: %v", err)
	}
	h.applyModel()
	h.checkBoundary(before)
	h.checkConfirms(progress.Confirmed)
	lapsed := h.checkDeliveries(progress.Deliveries, progress.Lapsed)
	h.checkLapsedRelease(beforeTicket, lapsed)
	h.markSent(progress.Deliveries)
	h.checkDeadLetters(progress.DeadLetters)
	if progress.Checkpoint != nil {
		h.tasks = append(h.tasks, progress.Checkpoint)
	}
}

// checkBoundary: nothing is applied above the mode's frontier, and
// nothing newly applied lies at or above the apply limit.
func (h *harness) checkBoundary(before uint64) {
	f := h.q.log.Frontiers()
	frontier := f.Durable
	if h.opts.Mode == Buffered {
		frontier = f.Written
	}
	if h.applied > frontier {
		h.fail("applied %d above the %v frontier %d", h.applied, h.opts.Mode, frontier)
	}
	if h.applied > before && h.applied > h.limit {
		h.fail("applied up to %d past the apply limit %d", h.applied, h.limit)
	}
}

func (h *harness) checkConfirms(confirms []Confirm) {
	for _, c := range confirms {
		if h.opts.Mode == Durable && c.Boundary != BoundaryDurable {
			h.fail("durable queue confirmed at %v", c.Boundary)
		}
		for i := 0; i < c.Count; i++ {
			offset := c.First + uint64(i)
			op := h.ops[offset]
			if op == nil || op.rec.Kind != KindPublish || offset >= h.applied {
				h.fail("confirm of offset %d that is not an applied publish", offset)
			}
			h.confirmed[op.id] = confirmation{offset, c.Boundary}
		}
	}
}

// checkDeliveries checks the deliveries and lapses of the leases applied
// since the last check against the model's grants: a grant whose deadline
// is a quarter of the lease timeout or less away at the harness's clock
// lapses (machine.go), the others are delivered. A lapsed grant's message
// that was never delivered is not marked redelivered at its next delivery
// by this process. It returns the lapsed offsets.
func (h *harness) checkDeliveries(deliveries []Delivery, lapses []Lapse) []uint64 {
	byTicket := map[Ticket][]Delivery{}
	for _, d := range deliveries {
		byTicket[d.Ticket] = append(byTicket[d.Ticket], d)
	}
	lapsedByTicket := map[Ticket][]uint64{}
	for _, l := range lapses {
		lapsedByTicket[l.Ticket] = append(lapsedByTicket[l.Ticket], l.Offset)
	}
	marginMs := durationMs(h.opts.LeaseTimeout) / 4
	var lapsed []uint64
	for ticket, grants := range h.grants {
		var wantDelivered []modelGrant
		var wantLapsed []uint64
		for _, g := range grants {
			g.redelivered = g.redelivered && !h.unsent[g.offset]
			if g.deadlineMs-h.nowMs <= marginMs {
				wantLapsed = append(wantLapsed, g.offset)
				if !g.redelivered {
					h.unsent[g.offset] = true
				}
				continue
			}
			delete(h.unsent, g.offset)
			wantDelivered = append(wantDelivered, g)
		}
		got := byTicket[ticket]
		sort.Slice(got, func(i, j int) bool { return got[i].Offset < got[j].Offset })
		if len(got) != len(wantDelivered) {
			h.fail("lease %d delivered %d messages, model %d (%d lapsed)", ticket, len(got), len(wantDelivered), len(wantLapsed))
		}
		for i, d := range got {
			h.checkDelivery(d, wantDelivered[i])
		}
		gotLapsed := lapsedByTicket[ticket]
		slices.Sort(gotLapsed)
		if !slices.Equal(gotLapsed, wantLapsed) {
			h.fail("lease %d lapsed %v at %d, model %v", ticket, gotLapsed, h.nowMs, wantLapsed)
		}
		lapsed = append(lapsed, wantLapsed...)
		h.lapses += len(wantLapsed)
		delete(byTicket, ticket)
		delete(lapsedByTicket, ticket)
		delete(h.grants, ticket)
	}
	if len(byTicket) != 0 || len(lapsedByTicket) != 0 {
		h.fail("deliveries %v and lapses %v for leases the model did not apply", byTicket, lapsedByTicket)
	}
	return lapsed
}

// checkLapsedRelease: the Advance that found lapsed leases appended one
// release of them (no attempt counted), and nothing else.
func (h *harness) checkLapsedRelease(before Ticket, lapsed []uint64) {
	appends := h.newAppends(before)
	if len(lapsed) == 0 {
		if len(appends) != 0 {
			h.fail("advance appended %d operations with no lease lapsed", len(appends))
		}
		return
	}
	if len(appends) != 1 {
		h.fail("advance made %d appends for the lapsed leases %v, want 1", len(appends), lapsed)
	}
	h.record(appends[0], Record{Kind: KindRelease, Offsets: sortedUnique(lapsed)})
}

// marks reports whether the queue writes sent marks: a replicated owner
// of a queue with MaxDeliveries.
func (h *harness) marks() bool {
	_, replicated := h.env.(*pairEnv)
	return replicated && h.opts.MaxDeliveries > 0
}

// markSent marks the deliveries of one Advance as sent, as the owner does
// when it hands them out: all but a random few (a holder that is gone) in
// one call. A queue that writes marks appends one mark of them; any other
// appends nothing.
func (h *harness) markSent(deliveries []Delivery) {
	if len(deliveries) == 0 {
		return
	}
	var offsets []uint64
	for _, d := range deliveries {
		if h.rng.IntN(8) != 0 {
			offsets = append(offsets, d.Offset)
		}
	}
	before := h.q.machine.nextTicket
	err := h.q.Sent(offsets)
	h.note("sent %v -> %v", offsets, err)
	if err != nil {
		h.fail("sent: %v", err)
	}
	appends := h.newAppends(before)
	if !h.marks() || len(offsets) == 0 {
		if len(appends) != 0 {
			h.fail("sent %v appended %d operations on a queue that writes no marks or with nothing sent", offsets, len(appends))
		}
		return
	}
	if len(appends) != 1 {
		h.fail("sent %v made %d appends, want 1", offsets, len(appends))
	}
	offsets = sortedUnique(offsets)
	h.record(appends[0], Record{Kind: KindSent, Offsets: offsets})
	for _, o := range offsets {
		r := h.released[o]
		r.marked, r.mark = true, appends[0].first
		h.released[o] = r
	}
}

func (h *harness) checkDelivery(d Delivery, want modelGrant) {
	op := h.ops[d.Offset]
	switch {
	case d.Offset != want.offset || d.Attempt != want.attempt || d.Redelivered != want.redelivered:
		h.fail("delivery %+v, model %+v", d, want)
	case d.MessageID != op.id || string(d.Payload) != string(payloadFor(op.id, int(op.rec.PayloadBytes))):
		h.fail("delivery of %d carries %q, want %q", d.Offset, d.MessageID, op.id)
	case h.delivered[op.id] && !d.Redelivered:
		h.fail("message %s delivered again without the redelivered flag", op.id)
	case !h.recovered[op.id] && h.confirmed[op.id].boundary == 0:
		h.fail("message %s delivered before its publish was confirmed", op.id)
	}
	h.delivered[op.id] = true
	lease, ok := h.leaseAt[d.Ticket]
	if !ok || lease >= h.applied {
		h.fail("delivery of %s by lease %d released before its lease record applied", op.id, d.Ticket)
	}
	h.released[d.Offset] = releasedAt{id: op.id, attempt: d.Attempt, lease: lease}
	h.checkIdentity(d.Incarnation, d.Offset, op.id)
}

func (h *harness) checkIdentity(incarnation, offset uint64, id string) {
	key := [2]uint64{incarnation, offset}
	if seen, ok := h.identity[key]; ok && seen != id {
		h.fail("identity (%x, %d) names %s and %s", incarnation, offset, seen, id)
	}
	h.identity[key] = id
}

func (h *harness) checkDeadLetters(letters []DeadLetter) {
	var got []uint64
	for _, d := range letters {
		op := h.ops[d.Offset]
		if d.Target != h.opts.DeadLetterQueue || d.MessageID != op.id || d.Attempts != h.model.messages[d.Offset].attempts ||
			string(d.Payload) != string(payloadFor(op.id, int(op.rec.PayloadBytes))) {
			h.fail("dead letter %+v for %s", d, op.id)
		}
		h.checkIdentity(d.Incarnation, d.Offset, op.id)
		got = append(got, d.Offset)
	}
	var want []uint64
	for _, o := range h.model.withStatus(mDeadLettering) {
		if !h.issued[o] {
			want = append(want, o)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		h.fail("dead letters %v, model %v", got, want)
	}
	for _, o := range got {
		h.issued[o] = true
	}
}

// check compares the queue with the model and checks attempts.
func (h *harness) check() {
	h.applyModel()
	if err := h.model.compareState(h.q.machine.state, h.nowMs); err != nil {
		h.fail("state differs from the model: %v", err)
	}
	if first, live := h.q.log.FirstOffset(), h.q.machine.state.FirstLive(); first > live {
		h.fail("log retains from %d, above the live message at %d", first, live)
	}
	for _, o := range h.model.offsets {
		msg := h.model.messages[o]
		if last, ok := h.attempts[msg.id]; ok && msg.attempts < last {
			h.fail("attempts of %s went down from %d to %d", msg.id, last, msg.attempts)
		}
		h.attempts[msg.id] = msg.attempts
	}
}

// storageFault fails an fsync: the queue must fence, and the reopen cuts
// the log back to its last successful sync, which the checks treat like a
// power loss.
func (h *harness) storageFault() {
	injector, ok := h.env.(faultInjector)
	if !ok {
		return
	}
	survives := h.q.log.Frontiers().Durable
	fired, err := injector.failSync(h.q, func() {
		survives = h.q.log.Frontiers().Durable
		h.purge() // an append the failing sync covers
	})
	h.note("storage fault: fired %v, sync -> %v", fired, err)
	if !fired {
		return
	}
	if err == nil {
		h.fail("a failed fsync was not reported")
	}
	if _, err := h.q.Purge(); !errors.Is(err, ErrFenced) {
		h.fail("append after a storage failure: %v, want ErrFenced", err)
	}
	if _, err := h.q.Advance(); !errors.Is(err, ErrFenced) {
		h.fail("advance after a storage failure: %v, want ErrFenced", err)
	}
	h.reopen(false, true, survives)
}

// restart crashes the queue and reopens it, then rebuilds the model from
// the records that survived.
func (h *harness) restart(powerLoss bool) {
	if _, ok := h.env.(*pairEnv); ok {
		// A failover: the replica had everything confirmed and every lease
		// behind a released delivery, whatever the owner lost.
		h.reopen(powerLoss, false, 0)
		return
	}
	f := h.q.log.Frontiers()
	survives := f.Written // a process crash keeps what was written
	if powerLoss {
		survives = f.Durable
	}
	h.reopen(powerLoss, powerLoss, survives)
}

// reopen restarts the queue (crash-cloning the filesystem when crash is
// set) and checks recovery; lossy says records past survives may be gone.
func (h *harness) reopen(crash, lossy bool, survives uint64) {
	powerLoss := lossy
	q, err := h.env.restart(h.q, h.opts, h.clock, crash, h.rng)
	if err != nil {
		h.fail("reopen (power loss %v): %v", powerLoss, err)
	}
	h.q = q
	h.unsent = map[uint64]bool{} // the new process remembers no lapse
	recovery := q.Recovery()
	pair, _ := h.env.(*pairEnv)
	if pair != nil {
		recovery = pair.takeover
	}
	end := recovery.LogEnd
	h.note("restart power loss %v: survives %d, log end %d, recovery %+v", powerLoss, survives, end, recovery)
	if end < survives {
		h.fail("log end %d below the %d records that had to survive", end, survives)
	}
	h.checkSurvivors(end, survives, powerLoss)
	h.rebuildModel(end)
	marksInForce := pair != nil && h.model.marking
	h.limit = noLimit
	for o := uint64(0); o < end; o++ {
		if op := h.ops[o]; op != nil && op.rec.Kind == KindPublish {
			if _, ok := h.confirmed[op.id]; !ok {
				h.recovered[op.id] = true
			}
		}
	}
	lostReleased := h.releasedLost(end, lossy)
	if powerLoss {
		h.powerLosses++
		if h.opts.Mode == Buffered {
			h.delivered = map[string]bool{}
			h.attempts = map[string]uint32{}
		}
	} else {
		h.restarts++
	}
	// Once marks are in force a replicated queue counts an attempt only for
	// the leases a sent mark marked and releases the others; a single-node
	// queue counts every lease.
	expired, released := h.model.withStatus(mLeased), []uint64(nil)
	if pair != nil {
		expired, released = h.model.leasedSplit()
	}
	if recovery.ExpiredLeases != len(expired) || recovery.ReleasedLeases != len(released) {
		h.fail("open expired %d leases and released %d, model %d and %d",
			recovery.ExpiredLeases, recovery.ReleasedLeases, len(expired), len(released))
	}
	next := end
	for _, rec := range []Record{
		{Kind: KindExpire, Reason: ReasonRestart, Offsets: expired},
		{Kind: KindRelease, Offsets: released},
	} {
		if len(rec.Offsets) > 0 {
			h.ops[next] = &modelOp{rec: rec}
			next++
		}
	}
	if staged := h.q.machine.nextOffset; staged != next {
		h.fail("the reopen appended up to %d, the model expects %d", staged, next)
	}
	if pair != nil {
		pair.expiredCounted += len(expired)
		pair.releasedUnsent += len(released)
		pair.afterTakeover(h)
	}
	h.applyModel()
	h.advance()
	h.checkReleasedCameBack(lostReleased, end, marksInForce)
}

// releasedLost sorts the released deliveries after a reopen whose log ends
// at end: those with a surviving settle are done with (the model carries
// them); a lost lease record is a broken promise unless lossy covers it on
// a buffered queue. It returns the rest, which must come back.
func (h *harness) releasedLost(end uint64, lossy bool) map[uint64]releasedAt {
	back := map[uint64]releasedAt{}
	for offset, r := range h.released {
		delete(h.released, offset)
		if r.lease >= end {
			if h.opts.Mode == Durable || !lossy {
				h.fail("delivery of %s (attempt %d) was released, and its lease record at %d is gone (log end %d)",
					r.id, r.attempt, r.lease, end)
			}
			continue
		}
		if !h.settledAfter(offset, r.lease, end) {
			back[offset] = r
		}
	}
	return back
}

// settledAfter reports whether a settle of offset lies in (lease, end).
func (h *harness) settledAfter(offset, lease, end uint64) bool {
	for o := lease + 1; o < end; o++ {
		op := h.ops[o]
		if op == nil {
			continue
		}
		switch op.rec.Kind {
		case KindAck, KindNack, KindRelease, KindDiscard, KindReject, KindExpire:
			if slices.Contains(op.rec.Offsets, offset) {
				return true
			}
		}
	}
	return false
}

// checkReleasedCameBack: a message whose released delivery no surviving
// settle covers is back (or dead-lettered at MaxDeliveries), marked
// delivered, with that delivery's attempt counted. After a failover with
// marks in force the attempt is counted exactly when the delivery's sent
// mark is in the log that ends at end, and is not counted otherwise.
func (h *harness) checkReleasedCameBack(back map[uint64]releasedAt, end uint64, marks bool) {
	for offset, r := range back {
		msg := h.model.messages[offset]
		want := r.attempt
		if marks && !(r.marked && r.mark < end) {
			want = r.attempt - 1
		}
		switch {
		case msg == nil || msg.id != r.id:
			h.fail("released message %s at %d is gone after the restart", r.id, offset)
		case msg.status == mLeased:
			h.fail("released message %s still leased after the restart", r.id)
		case !msg.delivered || msg.attempts != want:
			h.fail("released message %s came back with delivered %v and %d attempts counted, its delivery was attempt %d "+
				"(marked %v at %d, log end %d), want %d counted", r.id, msg.delivered, msg.attempts, r.attempt,
				r.marked, r.mark, end, want)
		}
	}
}

// checkSurvivors: every confirmed message the mode promises survived.
func (h *harness) checkSurvivors(end, survives uint64, powerLoss bool) {
	for id, c := range h.confirmed {
		promised := h.opts.Mode == Durable || c.boundary == BoundaryDurable || !powerLoss || c.offset < survives
		intact := c.offset < end && h.ops[c.offset] != nil && h.ops[c.offset].id == id
		if promised && !intact {
			h.fail("confirmed message %s at %d (%v) lost; log end %d", id, c.offset, c.boundary, end)
		}
		if !intact {
			delete(h.confirmed, id)
		}
	}
}

// rebuildModel replays the surviving ops into a fresh model.
func (h *harness) rebuildModel(end uint64) {
	for o := range h.ops {
		if o >= end {
			delete(h.ops, o)
		}
	}
	h.model = newModel(h.opts)
	h.applied = 0
	h.claimed, h.issued = map[uint64]bool{}, map[uint64]bool{}
	h.grants = map[Ticket][]modelGrant{}
	h.pendingPublishes, h.pendingPublishBytes = 0, 0
	h.tasks = nil
	for ; h.applied < end; h.applied++ {
		if op := h.ops[h.applied]; op != nil {
			h.model.apply(h.applied, &op.rec, op.id)
		}
	}
	if h.q.machine.state.Next() < end {
		h.fail("queue state next %d below log end %d after open", h.q.machine.state.Next(), end)
	}
}
