package actors

// The partition's consume path: subscriptions (competing consumers served
// round-robin), leases bounded by each subscription's prefetch, deliveries
// tagged per process, settles checked against the tags a subscription
// holds, and lease deadlines driven by one timer.
//
// Invariant, per subscription: len(held) + leasing <= prefetch, where held
// are deliveries sent and not settled or expired, and leasing are messages
// claimed by a Lease whose append has not applied yet.
//
// Tags and deadlines. A delivery's tag maps to its offset and lease
// deadline inside the subscription. When the deadline timer fires at now,
// the partition forgets every held tag whose deadline (in whole
// milliseconds, the queue's precision) is at or before now, and asks the
// queue to expire leases by the same rule, so a late settle of an expired
// delivery is refused as an unknown tag instead of settling a later lease
// of the same message.

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// leaseBatchMax bounds the messages one Lease claims for one subscription.
const leaseBatchMax = 512

// deliverFrameBytesMax bounds a deliver frame the node builds (a single
// larger message still goes alone).
const deliverFrameBytesMax = 256 << 10

// tagBlock is how many delivery tags a partition reserves at once.
const tagBlock = 1024

type heldDelivery struct {
	offset     uint64
	deadlineMs int64
}

type subscription struct {
	id            uint64
	session       *actor.PID
	sessionID     string // the session's id, as hello-ok gave it
	prefetch      int
	maxFrameBytes int // deliver frames are packed up to this body size
	// clientMaxBodyBytes is the largest body the client accepts; a single
	// delivery over it ends the subscription (message_size.go).
	clientMaxBodyBytes int
	held               map[uint64]heldDelivery // by delivery tag
	leasing            int
}

func (s *subscription) credit() int { return s.prefetch - len(s.held) - s.leasing }

// subscriptionSet is every subscription on one partition, in round-robin
// order. It lives in partitionHome and survives restarts.
//
// Round-robin: next is the subscription a dispatch pass offers messages to
// first; it moves to the one after a subscription that claimed something,
// and only then, so a pass that finds nothing ready (most passes at a low
// rate: every settle runs one) does not move it, and competing consumers
// with credit take turns at every rate.
//
// Invariant: 0 <= next < len(order), or next == 0 when order is empty.
type subscriptionSet struct {
	byID  map[uint64]*subscription
	order []*subscription
	next  int
	// tags are reserved in blocks from the broker's id counter.
	nextTag, tagsLeft uint64
}

func newSubscriptionSet() *subscriptionSet {
	return &subscriptionSet{byID: make(map[uint64]*subscription)}
}

func (set *subscriptionSet) len() int { return len(set.order) }

func (set *subscriptionSet) add(sub *subscription) {
	set.byID[sub.id] = sub
	set.order = append(set.order, sub)
}

func (set *subscriptionSet) remove(id uint64) {
	delete(set.byID, id)
	for i, sub := range set.order {
		if sub.id == id {
			set.order = append(set.order[:i:i], set.order[i+1:]...)
			if i < set.next {
				set.next-- // the same subscription stays next
			}
			if set.next >= len(set.order) {
				set.next = 0
			}
			return
		}
	}
}

// rotation returns the subscriptions in the order a dispatch pass offers
// messages, next first.
func (set *subscriptionSet) rotation(yield func(index int, sub *subscription) bool) {
	for i := range len(set.order) {
		index := (set.next + i) % len(set.order)
		if !yield(index, set.order[index]) {
			return
		}
	}
}

// claimed records that the subscription at index claimed messages: the
// one after it is offered first next time.
func (set *subscriptionSet) claimed(index int) { set.next = (index + 1) % len(set.order) }

// endAll tells every session its subscriptions ended and forgets them.
func (set *subscriptionSet) endAll(ctx actor.Context, failure requestFailure) {
	for _, sub := range set.order {
		ctx.Send(sub.session, subscriptionEnded{subscriptionID: sub.id, failure: failure})
	}
	clear(set.byID)
	set.order, set.next = nil, 0
}

// forgetHeld drops every held tag and lease in flight (after a restart,
// the reopened queue has returned them all).
func (set *subscriptionSet) forgetHeld() {
	for _, sub := range set.order {
		clear(sub.held)
		sub.leasing = 0
	}
}

// notifySessions sends notice once to each session with a subscription.
func (set *subscriptionSet) notifySessions(ctx actor.Context, notice partitionNotice) {
	seen := make(map[string]bool)
	for _, sub := range set.order {
		if !seen[sub.session.Id] {
			seen[sub.session.Id] = true
			ctx.Send(sub.session, notice)
		}
	}
}

func (set *subscriptionSet) newTag(core *brokerCore) uint64 {
	if set.tagsLeft == 0 {
		set.nextTag, set.tagsLeft = core.newIDBlock(tagBlock), tagBlock
	}
	tag := set.nextTag
	set.nextTag++
	set.tagsLeft--
	return tag
}

func (p *partition) subscribe(ctx actor.Context, msg subscribeRequest) {
	if p.state == partitionFenced {
		ctx.Send(msg.replyTo, subscribeResult{requestID: msg.requestID, subscriptionID: msg.subscriptionID,
			failure: p.fencedFailure()})
		return
	}
	p.home.subscribers.add(&subscription{
		id: msg.subscriptionID, session: msg.replyTo, sessionID: msg.sessionID, prefetch: int(msg.prefetch),
		maxFrameBytes:      int(min(msg.maxFrameBytes, deliverFrameBytesMax)),
		clientMaxBodyBytes: int(msg.maxFrameBytes),
		held:               make(map[uint64]heldDelivery),
	})
	ctx.Watch(msg.replyTo)
	ctx.Send(msg.replyTo, subscribeResult{requestID: msg.requestID, subscriptionID: msg.subscriptionID, prefetch: msg.prefetch})
	p.dispatch(ctx)
	p.armDeadline(ctx)
	p.publishSummary()
}

func (p *partition) unsubscribe(ctx actor.Context, msg unsubscribeRequest) {
	sub, ok := p.home.subscribers.byID[msg.subscriptionID]
	if !ok {
		ctx.Send(msg.replyTo, unsubscribeResult{requestID: msg.requestID, subscriptionID: msg.subscriptionID,
			failure: requestFailure{code: wire.CodeUnknownSubscription,
				message: fmt.Sprintf("subscription %d is not on queue %q", msg.subscriptionID, p.home.name)}})
		return
	}
	released := uint64(len(sub.held) + sub.leasing)
	p.dropSubscription(ctx, sub)
	ctx.Send(msg.replyTo, unsubscribeResult{requestID: msg.requestID, subscriptionID: msg.subscriptionID, released: released})
	p.dispatch(ctx)
}

// dropSubscription releases what a subscription holds and forgets it.
// Deliveries still being leased for it are released when they apply.
func (p *partition) dropSubscription(ctx actor.Context, sub *subscription) {
	p.home.subscribers.remove(sub.id)
	if len(sub.held) == 0 || p.state != partitionOpen {
		return
	}
	if p.core.draining.Load() {
		// The node is stopping: the leases stay in the log, so after the
		// restart every held message comes back with its attempt counted,
		// as after a kill (docs/protocol.md 4.8). A release would not
		// count it.
		return
	}
	offsets := make([]uint64, 0, len(sub.held))
	for _, held := range sub.held {
		offsets = append(offsets, held.offset)
	}
	if _, err := p.q.Release(sub.id, offsets); err != nil && !p.maybeFence(ctx, err) {
		p.core.logger.Warn("release on unsubscribe failed", "queue", p.home.name, "err", err)
	}
	p.metrics.releases.Add(len(offsets))
	p.publishSummary()
}

// sessionGone drops every subscription of a session that stopped.
func (p *partition) sessionGone(ctx actor.Context, session *actor.PID) {
	p.home.publishFences.forget(session.Id)
	for _, sub := range append([]*subscription(nil), p.home.subscribers.order...) {
		if sub.session.Id == session.Id {
			p.dropSubscription(ctx, sub)
		}
	}
	p.dispatch(ctx)
}

// dispatch leases ready messages to subscriptions with credit, one pass in
// round-robin order (see subscriptionSet).
func (p *partition) dispatch(ctx actor.Context) {
	set := p.home.subscribers
	if p.state != partitionOpen || set.len() == 0 {
		return
	}
	for index, sub := range set.rotation {
		credit := sub.credit()
		if credit <= 0 {
			continue
		}
		_, claimed, err := p.q.Lease(min(credit, leaseBatchMax), sub.id)
		if err != nil {
			if !errors.Is(err, queue.ErrBusy) && !p.maybeFence(ctx, err) {
				panic(fmt.Errorf("actors: lease on queue %s: %w", p.home.name, err))
			}
			return
		}
		if claimed == 0 {
			return // nothing claimable
		}
		sub.leasing += claimed
		set.claimed(index)
	}
}

// handOutDeliveries tags applied leases and sends them to their sessions,
// in deliver frames whose bodies stay within each subscription's frame
// size (and so within its client's limit). First the queue records that
// they leave (queue.Sent: on a replicated queue, one sent mark for the
// lot), so that a failover counts an attempt for them and none for the
// leases this owner never sent. Deliveries whose holder is gone are left
// out; one too large for its client is marked too, and released with its
// subscription right after.
func (p *partition) handOutDeliveries(ctx actor.Context, deliveries []queue.Delivery) {
	if len(deliveries) == 0 {
		return
	}
	sent := make([]uint64, 0, len(deliveries))
	for i := range deliveries {
		if _, ok := p.home.subscribers.byID[deliveries[i].Holder]; ok {
			sent = append(sent, deliveries[i].Offset)
		}
	}
	if err := p.q.Sent(sent); err != nil {
		if p.maybeFence(ctx, err) {
			return // the fence ended every subscription
		}
		// The deliveries still go: without their mark a failover counts
		// no attempt for them, and still flags them redelivered.
		p.core.logger.Warn("sent mark refused", "queue", p.home.name, "err", err)
	}
	var orphans map[uint64][]uint64 // holder → offsets with no subscription left
	orphan := func(holder, offset uint64) {
		if orphans == nil {
			orphans = make(map[uint64][]uint64)
		}
		orphans[holder] = append(orphans[holder], offset)
	}
	var batch []wire.Delivery
	var batchSub *subscription
	batchBytes := wire.DeliverHeadBytes
	flush := func() {
		if len(batch) > 0 {
			ctx.Send(batchSub.session, deliverBatch{subscriptionID: batchSub.id, deliveries: batch})
		}
		batch, batchBytes = nil, wire.DeliverHeadBytes
	}
	now := p.core.now()
	for i := range deliveries {
		d := &deliveries[i]
		sub, ok := p.home.subscribers.byID[d.Holder]
		if !ok {
			orphan(d.Holder, d.Offset)
			continue
		}
		sub.leasing = max(sub.leasing-1, 0)
		delivery := wireDelivery(0, d)
		size := delivery.EncodedBytes()
		if wire.DeliverHeadBytes+size > sub.clientMaxBodyBytes {
			if batchSub == sub {
				batch, batchSub, batchBytes = nil, nil, wire.DeliverHeadBytes // released with the subscription
			}
			p.endOversized(ctx, sub, d.Offset, wire.DeliverHeadBytes+size)
			orphan(d.Holder, d.Offset)
			continue
		}
		if sub != batchSub || (len(batch) > 0 && batchBytes+size > sub.maxFrameBytes) {
			flush()
			batchSub = sub
		}
		delivery.DeliveryTag = p.home.subscribers.newTag(p.core)
		sub.held[delivery.DeliveryTag] = heldDelivery{offset: d.Offset, deadlineMs: d.Deadline.UnixMilli()}
		batch = append(batch, delivery)
		batchBytes += size
		p.metrics.deliveries.Inc()
		p.metrics.deliveryBytes.Add(len(d.Payload))
		if d.Redelivered {
			p.metrics.redeliveries.Inc()
		} else {
			p.metrics.deliverySeconds.observeSince(now, d.PublishTime)
		}
	}
	flush()
	for holder, offsets := range orphans {
		if _, err := p.q.Release(holder, offsets); err != nil && !p.maybeFence(ctx, err) {
			p.core.logger.Warn("release of orphaned deliveries failed", "queue", p.home.name, "err", err)
		}
	}
}

// takeBackLapsed gives back the credit of leases that lapsed when they
// applied: the queue sends nothing for them and releases their messages
// (no attempt counted), which the next dispatch leases again with a fresh
// deadline. A lease lapses when it applies with a quarter of the lease
// timeout or less left, as after a quorum loss longer than that
// (storage/queue machine.go).
func (p *partition) takeBackLapsed(lapsed []queue.Lapse) {
	for _, l := range lapsed {
		if sub, ok := p.home.subscribers.byID[l.Holder]; ok {
			sub.leasing = max(sub.leasing-1, 0)
		}
	}
	p.metrics.lapses.Add(len(lapsed))
}

func wireDelivery(tag uint64, d *queue.Delivery) wire.Delivery {
	out := wire.Delivery{
		DeliveryTag: tag, Incarnation: d.Incarnation, Offset: d.Offset, Attempt: max(d.Attempt, 1),
		Redelivered: d.Redelivered, PublishUnixNanos: d.PublishTime.UnixNano(),
		MessageID: []byte(d.MessageID), Payload: d.Payload,
	}
	if len(d.Headers) > 0 {
		out.Headers = make([]wire.Header, len(d.Headers))
		for i, header := range d.Headers {
			out.Headers[i] = wire.Header{Key: []byte(header.Key), Value: []byte(header.Value)}
		}
	}
	return out
}

// settle applies a batch of settles for one subscription. Tags the
// subscription does not hold are reported back, the rest settle.
func (p *partition) settle(ctx actor.Context, msg settleRequest) {
	if msg.requestID != 0 {
		p.ackSync(ctx, msg)
		return
	}
	if p.state == partitionFenced {
		ctx.Send(msg.replyTo, settleFailed{subscriptionID: msg.subscriptionID, tags: msg.tags, failure: p.fencedFailure()})
		return
	}
	sub, ok := p.home.subscribers.byID[msg.subscriptionID]
	if !ok {
		ctx.Send(msg.replyTo, settleFailed{subscriptionID: msg.subscriptionID, tags: msg.tags,
			failure: requestFailure{code: wire.CodeUnknownSubscription,
				message: fmt.Sprintf("subscription %d is not on queue %q", msg.subscriptionID, p.home.name)}})
		return
	}
	offsets := make([]uint64, 0, len(msg.tags))
	var unknown []uint64
	for _, tag := range msg.tags {
		held, ok := sub.held[tag]
		if !ok {
			unknown = append(unknown, tag)
			continue
		}
		delete(sub.held, tag)
		offsets = append(offsets, held.offset)
	}
	if len(unknown) > 0 {
		ctx.Send(msg.replyTo, settleFailed{subscriptionID: msg.subscriptionID, tags: unknown,
			failure: requestFailure{code: wire.CodeUnknownDeliveryTag, message: fmt.Sprintf(
				"%s: subscription %d does not hold delivery tags %v (settled already, expired, or from before a restart)",
				msg.kind, msg.subscriptionID, clipTags(unknown))}})
	}
	if len(offsets) > 0 {
		p.applySettle(ctx, msg, sub, offsets)
	}
	p.dispatch(ctx)
}

func (p *partition) applySettle(ctx actor.Context, msg settleRequest, sub *subscription, offsets []uint64) {
	var err error
	switch msg.kind {
	case settleAck:
		_, err = p.q.Ack(sub.id, offsets)
	case settleRelease:
		_, err = p.q.Release(sub.id, offsets)
	case settleDiscard:
		_, err = p.q.Discard(sub.id, offsets)
	case settleNack:
		switch {
		case msg.requeue:
			_, err = p.q.Nack(sub.id, offsets, msg.delay)
		default:
			// A nack without requeue dead-letters at once, the attempt
			// counted: moved to the dead-letter queue, or dropped when the
			// queue has none, and counted as dead-lettered either way.
			_, err = p.q.Reject(sub.id, offsets)
		}
	}
	if err != nil {
		ctx.Send(msg.replyTo, settleFailed{subscriptionID: msg.subscriptionID, tags: msg.tags, failure: p.failureOf(err)})
		p.maybeFence(ctx, err)
		return
	}
	p.metrics.settle(msg.kind, len(offsets))
}

func clipTags(tags []uint64) []uint64 {
	if len(tags) > 16 {
		return tags[:16]
	}
	return tags
}

// deadlineTimer is the partition's one timer for lease deadlines, delayed
// messages and TTLs. Each arm starts a generation; a firing of an older
// generation is ignored.
type deadlineTimer struct {
	timer      *time.Timer
	at         time.Time
	generation uint64
}

func (t *deadlineTimer) stop() {
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.at = time.Time{}
	t.generation++
}

// armDeadline points the timer at the queue's next deadline.
func (p *partition) armDeadline(ctx actor.Context) {
	if p.state != partitionOpen {
		return
	}
	next, ok := p.q.NextDeadline()
	if !ok {
		p.deadline.stop()
		return
	}
	next = next.Add(time.Millisecond) // the queue counts whole milliseconds
	if p.deadline.timer != nil && !next.Before(p.deadline.at) {
		return // the armed timer fires first; it re-arms for what is left
	}
	p.deadline.stop()
	p.deadline.at = next
	generation, self, system := p.deadline.generation, ctx.Self(), ctx.ActorSystem()
	p.deadline.timer = time.AfterFunc(max(next.Sub(p.core.now()), 0), func() {
		system.Root.Send(self, deadlineReached{generation: generation})
	})
}

// deadlineReached expires due leases and TTLs and makes delayed messages
// deliverable.
func (p *partition) deadlineReached(ctx actor.Context, msg deadlineReached) {
	if msg.generation != p.deadline.generation || p.state != partitionOpen {
		return
	}
	p.deadline.timer = nil
	if p.q.IsReplica() {
		return // armed while it owned the queue: the new owner expires leases now
	}
	now := p.core.now()
	p.forgetExpiredTags(now.UnixMilli())
	for range 1024 { // bounded: each call expires up to one batch
		_, expired, err := p.q.ExpireLeases(now)
		if err != nil {
			if !errors.Is(err, queue.ErrBusy) && !p.maybeFence(ctx, err) {
				panic(fmt.Errorf("actors: expire leases on queue %s: %w", p.home.name, err))
			}
			break
		}
		if expired == 0 {
			break
		}
		p.metrics.expiries.Add(expired)
	}
	if _, _, err := p.q.ExpireMessages(now); err != nil && !errors.Is(err, queue.ErrBusy) {
		p.maybeFence(ctx, err)
	}
	p.dispatch(ctx)
	p.armDeadline(ctx)
}

// forgetExpiredTags drops held tags whose lease deadline has passed.
func (p *partition) forgetExpiredTags(nowMs int64) {
	for _, sub := range p.home.subscribers.order {
		for tag, held := range sub.held {
			if held.deadlineMs <= nowMs {
				delete(sub.held, tag)
			}
		}
	}
}
