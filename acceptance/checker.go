package acceptance

// Check reads a Record and says, per queue, what was lost and which rules
// broke. It believes only what clients saw.
//
// Definitions:
//
//   - A message is confirmed when its publisher received a confirm.
//   - A message is consumed when a consumer's ack of it was accepted by the
//     SDK at least once. A consumed message may legitimately be gone later
//     (its ack was applied, or a buffered power loss took it after a
//     consumer processed it).
//   - The run ends with a drain: the last life serves until the queue holds
//     nothing ready, leased or delayed, acking everything. So a confirmed
//     message that was never consumed has no copy left on the node.
//   - A life's end is lossy for a queue when the queue is buffered and the
//     life ended in a power loss or a storage failure that affects it.
//     Durable queues have no lossy ends: their confirms stand on fsync.
//   - The durable cut of a lossy end is the latest time T such that every
//     event a client saw before T is proven durable at the end: a sample
//     sent at T reported written frontier W, and a sample answered before
//     the end's proof time reported a durable frontier >= W. (Anything a
//     client saw before a sample was sent lies below that sample's written
//     frontier, and the written frontier only moves forward within a life
//     until a storage fault, which is why samples after ProofBefore do not
//     count.) Without such a pair the cut is the life's start: everything
//     that survived an earlier end was synced by the reopen.
//   - The durable offset of a lossy end is the highest durable frontier a
//     sample of that life reported before the proof time: a message
//     delivered in that life at a lower offset is durable.
//   - A confirmed message is allowed to go when it was confirmed at the
//     written boundary, its confirm was recorded after the durable cut of
//     the lossy end of its life, and no delivery in that life showed it
//     below the durable offset. (A confirm may be recorded a little after
//     it arrived; that only moves it later, which never proves more.)
//
// Lost = confirmed, never consumed, not allowed to go. Gone = confirmed,
// never consumed, allowed to go.
//
// Rules (each broken one is a violation):
//
//   - phantom: every delivered message was sent, and not refused;
//   - boundary: a durable queue confirms at durable, a buffered one at
//     written, or at durable when the record was already synced (a
//     confirm at durable is never allowed to go);
//   - identity: (incarnation, offset) names one message, and a message keeps
//     one (incarnation, offset) across redeliveries and restarts;
//   - order: within a life, each consumer's first deliveries (redelivered
//     unset) arrive in increasing offset order, and messages delivered in
//     a life have offsets in their publisher's send order. In a cluster the
//     send-order rule covers the messages whose publish was sent and
//     answered within one calm window (sent while no fault was active, and
//     answered before the next one began): a publish caught by a fault may
//     be re-sent to a new owner on another connection, and per-connection
//     order is all the protocol promises; for the same reason the rule
//     starts, in each calm window of a publisher, at its first confirmed
//     publish (a redirected publish can be overtaken until its route is
//     known);
//   - marking: a message delivered before is delivered again with
//     redelivered set, unless its earlier delivery fell after the durable
//     cut of a lossy end between them;
//   - attempts: a redelivery never counts fewer attempts than an earlier
//     delivery, and after an unclean end (kill, power loss, storage failure)
//     counts more, with the same exception;
//   - acks: a message is never delivered again, after an ack of it was
//     accepted, in the broker life that delivery came from (after a
//     restart it may come back: counted; in a cluster also when a
//     connection of the acking client ended between the ack and the
//     comeback, the ack may never have left the client, and when the
//     delivery was taken while the fault that began its life was still
//     active, it may have come from the old owner);
//   - samples: durable <= written in every sample.
//
// Deliveries taken after their connection ended (Delivery.Stale) count as
// deliveries but are left out of the order, marking, attempt and ack
// rules: they were sent in an earlier life than their time suggests.
//
// Counts beside the rules: unexpected (distinct messages delivered that
// were never sent to the queue or were refused), duplicates unflagged
// (deliveries again without the redelivered flag that no lossy end
// excuses: each is also a marking violation), and unflagged duplicates
// the buffered promise excused.
//
// In a cluster each queue has its own lives (Record.QueueLives): a fault
// that leaves the queue's serving copy alone does not end its life, so
// every rule keeps its single-life strictness across it. A failover ends
// the life as an unclean, never lossy end (EndFailover); only a power loss
// of every copy at once is a lossy end, and its durable cut comes from
// samples whose durable frontier is the highest any copy reported.

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// QueueResult is the verdict for one queue.
type QueueResult struct {
	Queue     string
	Mode      wire.Mode
	Sent      int
	Confirmed int
	Refused   int
	Unknown   int
	// Delivered counts distinct messages delivered; Deliveries every one.
	Delivered  int
	Deliveries int
	// Lost: confirmed, never consumed, not allowed to go.
	Lost []string
	// Allowed counts confirmed messages the mode's promise let go; Gone
	// lists those that went.
	Allowed int
	Gone    []string
	// Duplicates is Deliveries - Delivered.
	Duplicates int
	// AckedComebacks counts deliveries of messages an ack had been accepted
	// for in an earlier life.
	AckedComebacks int
	// ReusedOffsets counts offsets that named messages of two incarnations
	// (new publishes after a cut).
	ReusedOffsets int
	// Unexpected counts distinct messages delivered that were never sent
	// to this queue or were refused (each also a phantom violation).
	Unexpected int
	// UnflaggedDuplicates counts deliveries again without the redelivered
	// flag that nothing excuses (each also a marking violation);
	// ExcusedUnflagged those a lossy end of a buffered queue excused.
	UnflaggedDuplicates int
	ExcusedUnflagged    int
	// Violations describes every broken rule (capped per rule).
	Violations []string
}

// Failed reports whether anything confirmed was lost or a rule broke.
func (r QueueResult) Failed() bool { return len(r.Lost) > 0 || len(r.Violations) > 0 }

// Err returns nil, or an error naming the losses and violations.
func (r QueueResult) Err() error {
	if !r.Failed() {
		return nil
	}
	lost := r.Lost
	if len(lost) > 10 {
		lost = lost[:10]
	}
	return fmt.Errorf("queue %s (%s): %d confirmed messages lost (first: %v); %d violations: %v",
		r.Queue, r.Mode, len(r.Lost), lost, len(r.Violations), r.Violations)
}

// String summarizes the result in one line.
func (r QueueResult) String() string {
	return fmt.Sprintf("%s (%s): sent %d, confirmed %d, refused %d, unknown %d, delivered %d, "+
		"lost %d, allowed %d, gone %d, unexpected %d, duplicates %d (unflagged %d, excused %d), "+
		"acked comebacks %d, reused offsets %d, violations %d",
		r.Queue, r.Mode, r.Sent, r.Confirmed, r.Refused, r.Unknown, r.Delivered, len(r.Lost), r.Allowed,
		len(r.Gone), r.Unexpected, r.Duplicates, r.UnflaggedDuplicates, r.ExcusedUnflagged,
		r.AckedComebacks, r.ReusedOffsets, len(r.Violations))
}

// maxViolationsPerRule caps the messages kept per rule.
const maxViolationsPerRule = 5

// Check checks every queue named in modes.
func Check(record Record, modes map[string]wire.Mode) []QueueResult {
	names := make([]string, 0, len(modes))
	for name := range modes {
		names = append(names, name)
	}
	sort.Strings(names)
	results := make([]QueueResult, 0, len(names))
	for _, name := range names {
		results = append(results, checkQueue(record, name, modes[name]))
	}
	return results
}

// queueView is one queue's part of a record, indexed.
type queueView struct {
	name   string
	mode   wire.Mode
	lives  []Life
	faults []Fault
	// connectionLosses are the clients' connection ends.
	connectionLosses []ConnectionLoss
	publishes        map[string]*Publish
	deliveries       []Delivery // in the order taken
	acks             map[string][]Ack
	samples          []Sample
	cuts             []lifeCut // per life
}

// lifeCut is what a life's end allows to go for one queue.
type lifeCut struct {
	lossy         bool
	unclean       bool
	cut           time.Time // durable cut
	durableOffset uint64
}

// violations gathers rule breaks, capped per rule.
type violations struct {
	counts map[string]int
	list   []string
}

func (v *violations) add(rule, format string, args ...any) {
	if v.counts == nil {
		v.counts = map[string]int{}
	}
	v.counts[rule]++
	switch n := v.counts[rule]; {
	case n <= maxViolationsPerRule:
		v.list = append(v.list, rule+": "+fmt.Sprintf(format, args...))
	case n == maxViolationsPerRule+1:
		v.list = append(v.list, rule+": more not shown")
	}
}

func checkQueue(record Record, name string, mode wire.Mode) QueueResult {
	view := newQueueView(record, name, mode)
	result := QueueResult{Queue: name, Mode: mode, Deliveries: len(view.deliveries)}
	var broken violations
	view.countPublishes(&result, &broken)
	view.checkSamples(&broken)
	view.checkLosses(&result)
	view.checkIdentity(&result, &broken)
	view.checkOrder(&broken)
	view.checkRedeliveries(&result, &broken)
	result.Violations = broken.list
	return result
}

func newQueueView(record Record, name string, mode wire.Mode) *queueView {
	view := &queueView{name: name, mode: mode, lives: record.Lives, faults: record.Faults,
		connectionLosses: record.ConnectionLosses,
		publishes:        map[string]*Publish{}, acks: map[string][]Ack{}}
	if lives, own := record.QueueLives[name]; own {
		view.lives = lives
	}
	for i := range record.Publishes {
		if p := &record.Publishes[i]; p.Queue == name {
			view.publishes[p.ID] = p
		}
	}
	for _, d := range record.Deliveries {
		if d.Queue == name {
			view.deliveries = append(view.deliveries, d)
		}
	}
	for _, a := range record.Acks {
		if a.Queue == name {
			view.acks[a.ID] = append(view.acks[a.ID], a)
		}
	}
	for _, s := range record.Samples {
		if s.Queue == name {
			view.samples = append(view.samples, s)
		}
	}
	view.cuts = make([]lifeCut, len(view.lives))
	for i := range view.lives {
		view.cuts[i] = view.cutOf(i)
	}
	return view
}

// lifeOf returns the index of the life an event at t belongs to: the last
// life started at or before t (-1 before the first).
func (v *queueView) lifeOf(t time.Time) int {
	return sort.Search(len(v.lives), func(i int) bool { return v.lives[i].Start.After(t) }) - 1
}

// endKind is how life i ended for this queue.
func (v *queueView) endKind(i int) EndKind {
	life := v.lives[i]
	if life.Kind == EndRunning || life.Affected == nil || slices.Contains(life.Affected, v.name) {
		return life.Kind
	}
	return EndClean
}

// cutOf computes life i's durable cut and durable offset for this queue.
func (v *queueView) cutOf(i int) lifeCut {
	life := v.lives[i]
	kind := v.endKind(i)
	out := lifeCut{
		unclean: kind == EndProcessKill || kind == EndPowerLoss || kind == EndStorageFailure || kind == EndFailover,
		lossy:   v.mode == wire.ModeBuffered && (kind == EndPowerLoss || kind == EndStorageFailure),
		cut:     life.Start,
	}
	if !out.lossy {
		return out
	}
	proofBefore := life.ProofBefore
	if proofBefore.IsZero() {
		proofBefore = life.End
	}
	var inLife []Sample
	for _, s := range v.samples {
		if !s.Sent.Before(life.Start) && !s.Answered.After(proofBefore) {
			inLife = append(inLife, s)
			out.durableOffset = max(out.durableOffset, s.Durable)
		}
	}
	for _, s := range inLife {
		if s.Written <= out.durableOffset && s.Sent.After(out.cut) {
			out.cut = s.Sent
		}
	}
	return out
}

func (v *queueView) countPublishes(result *QueueResult, broken *violations) {
	for _, p := range v.publishes {
		result.Sent++
		switch p.Outcome {
		case OutcomeConfirmed:
			result.Confirmed++
			if p.Boundary != wire.BoundaryDurable && (v.mode != wire.ModeBuffered || p.Boundary != wire.BoundaryWritten) {
				broken.add("boundary", "%s confirmed at %s in a %s queue", p.ID, p.Boundary, v.mode)
			}
		case OutcomeRefused:
			result.Refused++
		case OutcomeUnknown, OutcomePending:
			result.Unknown++
		}
	}
}

func (v *queueView) checkSamples(broken *violations) {
	for _, s := range v.samples {
		if s.Durable > s.Written {
			broken.add("samples", "durable %d above written %d", s.Durable, s.Written)
		}
	}
}

// allowedToGo reports whether the promise lets confirmed p go.
func (v *queueView) allowedToGo(p *Publish, deliveredBelow func(life int, durableOffset uint64) bool) bool {
	life := v.lifeOf(p.At)
	if life < 0 {
		return false
	}
	cut := v.cuts[life]
	if p.Boundary != wire.BoundaryWritten || !cut.lossy || !p.At.After(cut.cut) {
		return false
	}
	return !deliveredBelow(life, cut.durableOffset)
}

func (v *queueView) checkLosses(result *QueueResult) {
	delivered := map[string][]Delivery{}
	for _, d := range v.deliveries {
		delivered[d.ID] = append(delivered[d.ID], d)
	}
	result.Delivered = len(delivered)
	result.Duplicates = result.Deliveries - result.Delivered
	var ids []string
	for id, p := range v.publishes {
		if p.Outcome == OutcomeConfirmed {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return v.publishes[ids[i]].Seq < v.publishes[ids[j]].Seq })
	for _, id := range ids {
		p := v.publishes[id]
		allowed := v.allowedToGo(p, func(life int, durableOffset uint64) bool {
			for _, d := range delivered[id] {
				if v.lifeOf(d.At) == life && d.Offset < durableOffset {
					return true
				}
			}
			return false
		})
		if allowed {
			result.Allowed++
		}
		if len(v.acks[id]) > 0 {
			continue
		}
		if allowed {
			result.Gone = append(result.Gone, id)
		} else {
			result.Lost = append(result.Lost, id)
		}
	}
}

type identity struct{ incarnation, offset uint64 }

func (v *queueView) checkIdentity(result *QueueResult, broken *violations) {
	byIdentity := map[identity]string{}
	byID := map[string]identity{}
	incarnationsAt := map[uint64]map[uint64]bool{}
	unexpected := map[string]bool{}
	for _, d := range v.deliveries {
		p, ok := v.publishes[d.ID]
		switch {
		case !ok:
			broken.add("phantom", "%s delivered but never sent to this queue", d.ID)
			unexpected[d.ID] = true
		case p.Outcome == OutcomeRefused:
			broken.add("phantom", "%s delivered after the node refused it (%s)", d.ID, p.Reason)
			unexpected[d.ID] = true
		}
		key := identity{d.Incarnation, d.Offset}
		if other, seen := byIdentity[key]; seen && other != d.ID {
			broken.add("identity", "(incarnation %d, offset %d) named %s and %s", key.incarnation, key.offset, other, d.ID)
		}
		byIdentity[key] = d.ID
		if earlier, seen := byID[d.ID]; seen && earlier != key {
			broken.add("identity", "%s delivered as (%d, %d), later as (%d, %d)", d.ID,
				earlier.incarnation, earlier.offset, key.incarnation, key.offset)
		}
		byID[d.ID] = key
		if incarnationsAt[d.Offset] == nil {
			incarnationsAt[d.Offset] = map[uint64]bool{}
		}
		incarnationsAt[d.Offset][d.Incarnation] = true
	}
	for _, incarnations := range incarnationsAt {
		if len(incarnations) > 1 {
			result.ReusedOffsets++
		}
	}
	result.Unexpected = len(unexpected)
}

func (v *queueView) checkOrder(broken *violations) {
	type consumerLife struct {
		life     int
		consumer string
	}
	lastFirst := map[consumerLife]uint64{} // offset of the last first delivery
	offsetsInLife := map[int]map[string]uint64{}
	for _, d := range v.deliveries {
		if d.Stale {
			continue
		}
		life := v.lifeOf(d.At)
		if !d.Redelivered {
			key := consumerLife{life, d.Consumer}
			if last, ok := lastFirst[key]; ok && d.Offset <= last {
				broken.add("order", "life %d: first delivery of %s at offset %d after one at %d%s",
					life, d.ID, d.Offset, last, consumerNote(d.Consumer))
			}
			lastFirst[key] = d.Offset
		}
		if offsetsInLife[life] == nil {
			offsetsInLife[life] = map[string]uint64{}
		}
		offsetsInLife[life][d.ID] = d.Offset
	}
	type sendGroup struct {
		life      int
		publisher string
		window    int
	}
	routed := v.routedPublishes()
	for life, offsets := range offsetsInLife {
		groups := map[sendGroup][]string{}
		for id := range offsets {
			p := v.publishes[id]
			if p == nil {
				continue
			}
			window, calm := v.calmWindow(p)
			if calm && routed[id] {
				key := sendGroup{life, p.Publisher, window}
				groups[key] = append(groups[key], id)
			}
		}
		for _, ids := range groups {
			sort.Slice(ids, func(i, j int) bool { return v.publishes[ids[i]].Seq < v.publishes[ids[j]].Seq })
			for i := 1; i < len(ids); i++ {
				if offsets[ids[i]] <= offsets[ids[i-1]] {
					broken.add("order", "life %d: %s sent before %s but stored at offset %d, after %d",
						life, ids[i-1], ids[i], offsets[ids[i-1]], offsets[ids[i]])
				}
			}
		}
	}
}

func consumerNote(consumer string) string {
	if consumer == "" {
		return ""
	}
	return " (consumer " + consumer + ")"
}

// calmWindow returns the index of the window (the stretch between two
// fault boundaries) p was sent in, and whether it is calm: no fault was
// active when it was sent, and none began before its outcome arrived.
// Without faults every publish is calm, in window 0.
// routedPublishes returns the publishes the send-order rule covers. On a
// single node that is every one. In a cluster a publisher's first publishes
// after a fault may go to a node that no longer owns the queue: the SDK
// sends them again to the owner the redirect names, while the publishes
// after them go straight to that owner, on another connection, so they can
// overtake (per-connection order is all the protocol promises). So in each
// calm window of a publisher the rule starts at the first publish it saw
// confirmed: that one, and every publish sent after its confirm arrived
// (its route was known by then).
func (v *queueView) routedPublishes() map[string]bool {
	type publisherWindow struct {
		publisher string
		window    int
	}
	firstConfirm := map[publisherWindow]*Publish{}
	for _, p := range v.publishes {
		if p.Publisher == "" || p.Outcome != OutcomeConfirmed {
			continue
		}
		window, calm := v.calmWindow(p)
		if !calm {
			continue
		}
		key := publisherWindow{p.Publisher, window}
		if first := firstConfirm[key]; first == nil || p.At.Before(first.At) {
			firstConfirm[key] = p
		}
	}
	routed := map[string]bool{}
	for id, p := range v.publishes {
		if p.Publisher == "" {
			routed[id] = true
			continue
		}
		window, _ := v.calmWindow(p)
		first := firstConfirm[publisherWindow{p.Publisher, window}]
		routed[id] = first != nil && (p == first || p.Sent.After(first.At))
	}
	return routed
}

func (v *queueView) calmWindow(p *Publish) (int, bool) {
	window := 0
	calm := !p.At.IsZero()
	for _, fault := range v.faults {
		if !fault.Start.After(p.Sent) && (fault.End.IsZero() || fault.End.After(p.Sent)) {
			calm = false // sent while the fault was active
		}
		for _, boundary := range []time.Time{fault.Start, fault.End} {
			if boundary.IsZero() {
				continue
			}
			if !boundary.After(p.Sent) {
				window++
			} else if !boundary.After(p.At) {
				calm = false
			}
		}
	}
	return window, calm
}

// excused reports whether an earlier delivery at t1 and a later one at t2
// fall on two sides of a lossy end whose durable cut is before t1: the
// lease record of the first may be gone.
func (v *queueView) excused(t1, t2 time.Time) bool {
	first, second := v.lifeOf(t1), v.lifeOf(t2)
	for life := max(first, 0); life < second; life++ {
		cut := v.cuts[life]
		if cut.lossy && t1.After(cut.cut) {
			return true
		}
	}
	return false
}

// uncleanBetween reports whether a life ended uncleanly for this queue
// between t1 and t2.
func (v *queueView) uncleanBetween(t1, t2 time.Time) bool {
	for life := max(v.lifeOf(t1), 0); life < v.lifeOf(t2); life++ {
		if v.cuts[life].unclean {
			return true
		}
	}
	return false
}

// connectionLostBetween reports whether a connection of client ended
// between from and to: an ack it handed to the SDK at from may have been
// lost with it (the SDK sends acks in the background), so the message may
// come back. Such a comeback is counted, not a violation. Unnamed clients
// (a single node's) record no losses.
func (v *queueView) connectionLostBetween(client string, from, to time.Time) bool {
	if client == "" {
		return false
	}
	for _, loss := range v.connectionLosses {
		if loss.Client == client && !loss.At.Before(from) && !loss.At.After(to) {
			return true
		}
	}
	return false
}

// takenAsItsLifeBegan reports whether a delivery taken at t fell inside
// the fault that began its life (a cluster life begins when a fault on the
// queue's owner does): until that fault is over the delivery may come from
// the old owner, whose ack of it may never stand on W copies, so the
// message may come back from the new owner. Such a comeback is counted,
// not a violation.
func (v *queueView) takenAsItsLifeBegan(t time.Time) bool {
	life := v.lifeOf(t)
	if life < 0 {
		return false
	}
	start := v.lives[life].Start
	for _, fault := range v.faults {
		if !fault.Start.After(start) && !fault.Start.After(t) && (fault.End.IsZero() || !fault.End.Before(t)) &&
			(fault.End.IsZero() || !fault.End.Before(start)) {
			return true
		}
	}
	return false
}

func (v *queueView) checkRedeliveries(result *QueueResult, broken *violations) {
	previous := map[string]Delivery{}
	for _, d := range v.deliveries {
		if d.Stale {
			continue // taken after its connection ended: an earlier life's, unsettleable
		}
		ackedEarlierLife, ackedThisLife := false, false
		for _, ack := range v.acks[d.ID] {
			if ack.At.Before(d.At) {
				sameLife := v.lifeOf(ack.DeliveredAt) == v.lifeOf(d.At) &&
					!v.connectionLostBetween(ack.Consumer, ack.At, d.At) && !v.takenAsItsLifeBegan(ack.DeliveredAt)
				ackedThisLife = ackedThisLife || sameLife
				ackedEarlierLife = ackedEarlierLife || !sameLife
			}
		}
		switch {
		case ackedThisLife:
			broken.add("acks", "%s delivered again in the life its ack was accepted in", d.ID)
		case ackedEarlierLife:
			result.AckedComebacks++
		}
		before, seen := previous[d.ID]
		previous[d.ID] = d
		if !seen {
			continue
		}
		if v.excused(before.At, d.At) {
			if !d.Redelivered {
				result.ExcusedUnflagged++
			}
			continue
		}
		if !d.Redelivered {
			result.UnflaggedDuplicates++
			broken.add("marking", "%s delivered again without the redelivered flag (attempt %d)", d.ID, d.Attempt)
		}
		switch {
		case d.Attempt < before.Attempt:
			broken.add("attempts", "%s attempt went from %d down to %d", d.ID, before.Attempt, d.Attempt)
		case d.Attempt == before.Attempt && v.uncleanBetween(before.At, d.At):
			broken.add("attempts", "%s came back after an unclean restart with its attempt (%d) not counted",
				d.ID, d.Attempt)
		}
	}
}
