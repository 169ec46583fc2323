package clienttest

// The fake node's queues. A queue keeps its ready messages in order and
// its leased ones by delivery tag. Every change that may free room or add
// work ends with dispatchLocked, which hands ready messages to
// subscriptions with room under their prefetch, round robin. Everything
// here runs under the server's lock.

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

type queue struct {
	server        *Server
	name          string
	mode          wire.Mode
	options       wire.QueueOptions
	ready         []*message
	leased        map[uint64]*message // by delivery tag
	subscriptions []*subscription
	nextOffset    uint64
	nextTurn      int
	deadLettered  uint64
}

type message struct {
	offset       uint64
	id           string
	headers      []wire.Header
	payload      []byte
	deliveries   uint32 // deliveries that counted
	redelivered  bool
	publishNanos int64
	tag          uint64
	holder       *subscription
}

type subscription struct {
	id       uint64
	conn     *Conn
	queue    *queue
	prefetch uint32
	held     int
}

func (c *Conn) declareLocked(f *wire.Declare) {
	s := c.server
	if c.redirectedLocked(f.RequestID, f.Queue) {
		return
	}
	q, exists := s.queues[f.Queue]
	if exists && f.Mode != wire.ModeUnset && f.Mode != q.mode {
		c.errorLocked(f.RequestID, wire.CodeModeConflict, "queue %q is %s", f.Queue, q.mode)
		return
	}
	if !exists {
		mode := f.Mode
		if mode == wire.ModeUnset {
			mode = s.config.DefaultMode
		}
		if mode == wire.ModeUnset {
			mode = wire.ModeDurable
		}
		q = &queue{server: s, name: f.Queue, mode: mode, leased: make(map[uint64]*message)}
		s.queues[f.Queue] = q
	}
	mergeOptions(&q.options, f.Options)
	if f.Mode == wire.ModeUnset && s.config.LegacyDeclareOK {
		c.sendLocked(&wire.DeclareOK{RequestID: f.RequestID, Created: !exists})
		return
	}
	var warnings []string
	if q.mode == wire.ModeBuffered {
		warnings = append(warnings, "buffered: confirmed messages can be lost if every required copy loses power before the next sync")
	}
	c.sendLocked(&wire.DeclareOKMode{RequestID: f.RequestID, Created: !exists, Mode: q.mode, Warnings: warnings})
}

// mergeOptions sets the options a declare sets and keeps the others.
func mergeOptions(current *wire.QueueOptions, set wire.QueueOptions) {
	if set.LeaseTimeoutMs != 0 {
		current.LeaseTimeoutMs = set.LeaseTimeoutMs
	}
	if set.MaxDeliveries != 0 {
		current.MaxDeliveries = set.MaxDeliveries
	}
	if set.DeadLetterQueue != "" {
		current.DeadLetterQueue = set.DeadLetterQueue
	}
	if set.MessageTTLMs != 0 {
		current.MessageTTLMs = set.MessageTTLMs
	}
	if set.MaxLength != 0 {
		current.MaxLength = set.MaxLength
	}
	if set.RedeliveryDelayMs != 0 {
		current.RedeliveryDelayMs = set.RedeliveryDelayMs
	}
	if set.Dedup && set.DedupWindowMs == 0 && current.DedupWindowMs == 0 {
		current.DedupWindowMs = 120_000 // a node's default window
	}
	if set.DedupWindowMs != 0 {
		current.DedupWindowMs = set.DedupWindowMs
	}
	if set.DedupMaxEntries != 0 {
		current.DedupMaxEntries = set.DedupMaxEntries
	}
}

// publishIdempotentLocked takes an FPB2 like an FPB1 (the double does not
// deduplicate) and confirms it with FCF2.
func (c *Conn) publishIdempotentLocked(f *wire.PublishIdempotent) bool {
	c.server.stats.IdempotentFrames++
	return c.publishMessagesLocked(&wire.Publish{Queue: f.Queue, Messages: f.Messages}, true)
}

func (c *Conn) publishLocked(f *wire.Publish) bool { return c.publishMessagesLocked(f, false) }

func (c *Conn) publishMessagesLocked(f *wire.Publish, idempotent bool) bool {
	s := c.server
	s.stats.PublishFrames++
	first, last := f.Messages[0].Seq, f.Messages[len(f.Messages)-1].Seq
	if first <= c.lastSeq {
		return c.failLocked(wire.CodeProtocolViolation, "publish sequence numbers must increase in the session")
	}
	c.lastSeq = last
	queueName := string(f.Queue)
	if fence, ok := c.fenced[queueName]; ok {
		// An earlier publish to the queue was refused on this connection
		// and no resume came since (docs/protocol.md 4.3).
		c.rejectLocked(first, last, len(f.Messages), fence, "an earlier publish to this queue on this connection was refused; send FRS1")
		if target, ok := s.redirects[queueName]; ok && fence == wire.CodeNotOwner {
			c.sendLocked(target.frame(0, queueName))
		}
		return true
	}
	if target, ok := s.redirects[queueName]; ok {
		c.fenceLocked(queueName, wire.CodeNotOwner)
		redirect := target.frame(0, queueName)
		if s.config.RedirectBeforeReject {
			c.sendLocked(redirect)
		}
		c.rejectLocked(first, last, len(f.Messages), wire.CodeNotOwner, "queue "+queueName+" is owned by "+target.nodeID)
		if !s.config.RedirectBeforeReject {
			c.sendLocked(redirect)
		}
		return true
	}
	if refused, ok := s.refusals[queueName]; ok {
		c.fenceLocked(queueName, refused.code)
		c.rejectLocked(first, last, len(f.Messages), refused.code, refused.message)
		return true
	}
	q := s.queues[queueName]
	if q == nil {
		c.rejectLocked(first, last, len(f.Messages), wire.CodeUnknownQueue, "queue "+queueName+" is not declared")
		return true
	}
	for i := range f.Messages {
		q.appendLocked(&f.Messages[i])
	}
	s.stats.Published += len(f.Messages)
	boundary := wire.BoundaryDurable
	if q.mode == wire.ModeBuffered {
		boundary = wire.BoundaryWritten
	}
	confirmed := heldConfirm{ConfirmRange: wire.ConfirmRange{First: first, Last: last, Boundary: boundary}, idempotent: idempotent}
	if s.holdConfirms {
		c.heldConfirms = append(c.heldConfirms, confirmed)
	} else {
		c.sendLocked(confirmed.frame())
	}
	q.dispatchLocked()
	return true
}

// heldConfirm is a confirm range and the layout its publish asks for.
type heldConfirm struct {
	wire.ConfirmRange
	idempotent bool
}

func (h heldConfirm) frame() wire.Frame {
	if h.idempotent {
		return &wire.ConfirmIdempotent{Ranges: []wire.IdempotentRange{{First: h.First, Last: h.Last, Boundary: h.Boundary}}}
	}
	return &wire.Confirm{Ranges: []wire.ConfirmRange{h.ConfirmRange}}
}

// fenceLocked fences queue on the connection after a refusal with code,
// as a node does for the codes that fence (protocol version 3): its later
// publishes there are refused with the same code until FRS1.
func (c *Conn) fenceLocked(queue string, code wire.Code) {
	switch code {
	case wire.CodeNotOwner, wire.CodeFenced, wire.CodeLimitReached, wire.CodeStorageFailure,
		wire.CodeUnavailable, wire.CodeOverloaded:
	default:
		return
	}
	if c.fenced == nil {
		c.fenced = make(map[string]wire.Code)
	}
	c.fenced[queue] = code
}

func (c *Conn) rejectLocked(first, last uint64, count int, code wire.Code, text string) {
	c.server.stats.Rejected += count
	c.sendLocked(&wire.NegativeConfirm{Ranges: []wire.RejectRange{{First: first, Last: last, Code: code, Message: text}}})
}

// appendLocked stores a copy of a published message (the frame's bytes
// belong to the reader's buffer).
func (q *queue) appendLocked(m *wire.PublishMessage) {
	q.nextOffset++
	stored := &message{offset: q.nextOffset, id: string(m.MessageID), payload: append([]byte(nil), m.Payload...),
		publishNanos: time.Now().UnixNano()}
	if stored.id == "" {
		stored.id = q.name + "-" + strconv.FormatUint(q.nextOffset, 10)
	}
	for _, header := range m.Headers {
		stored.headers = append(stored.headers, wire.Header{
			Key: append([]byte(nil), header.Key...), Value: append([]byte(nil), header.Value...)})
	}
	q.ready = append(q.ready, stored)
}

func (c *Conn) subscribeLocked(f *wire.Subscribe) {
	s := c.server
	if c.redirectedLocked(f.RequestID, f.Queue) {
		return
	}
	q := s.queues[f.Queue]
	if q == nil {
		c.errorLocked(f.RequestID, wire.CodeUnknownQueue, "queue %q is not declared", f.Queue)
		return
	}
	prefetch := f.Prefetch
	if prefetch == 0 {
		prefetch = s.config.DefaultPrefetch
	}
	s.nextSubscription++
	sub := &subscription{id: s.nextSubscription, conn: c, queue: q, prefetch: prefetch}
	c.subscriptions[sub.id] = sub
	q.subscriptions = append(q.subscriptions, sub)
	s.stats.Subscribes++
	s.stats.LastPrefetchAsk = f.Prefetch
	c.sendLocked(&wire.SubscribeOK{RequestID: f.RequestID, SubscriptionID: sub.id, Prefetch: prefetch})
	q.dispatchLocked()
}

func (c *Conn) unsubscribeLocked(f *wire.Unsubscribe) {
	sub := c.subscriptions[f.SubscriptionID]
	if sub == nil {
		c.errorLocked(f.RequestID, wire.CodeUnknownSubscription, "no subscription %d", f.SubscriptionID)
		return
	}
	released := sub.queue.unsubscribeLocked(sub)
	c.server.stats.Unsubscribes++
	c.sendLocked(&wire.OK{RequestID: f.RequestID, Count: released})
	sub.queue.dispatchLocked()
}

// unsubscribeLocked ends a subscription, releasing what it held.
func (q *queue) unsubscribeLocked(sub *subscription) uint64 {
	delete(sub.conn.subscriptions, sub.id)
	for i, other := range q.subscriptions {
		if other == sub {
			q.subscriptions = append(q.subscriptions[:i], q.subscriptions[i+1:]...)
			break
		}
	}
	var held []*message
	for tag, m := range q.leased {
		if m.holder == sub {
			delete(q.leased, tag)
			m.holder, m.redelivered = nil, true
			held = append(held, m)
		}
	}
	slices.SortFunc(held, func(a, b *message) int { return cmp.Compare(a.offset, b.offset) })
	sub.held = 0
	q.ready = append(held, q.ready...)
	q.dispatchLocked()
	return uint64(len(held))
}

// EndSubscriptions ends every subscription on a queue the way a node does
// on its own (the queue was deleted or fenced): what they held is released
// and each client gets a subscription-ended frame with code and message.
// It returns how many subscriptions ended.
func (s *Server) EndSubscriptions(queueName string, code wire.Code, message string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueName]
	if q == nil {
		return 0
	}
	ended := q.subscriptions
	q.subscriptions = nil // released messages wait for a new subscription
	for _, sub := range ended {
		q.unsubscribeLocked(sub)
		sub.conn.sendLocked(&wire.SubscriptionEnded{SubscriptionID: sub.id, Code: code, Message: message})
	}
	s.touchLocked()
	return len(ended)
}

// settleLocked applies a settle to each tag the subscription holds;
// unknown tags are reported with request id 0, as the protocol allows.
func (c *Conn) settleLocked(subscriptionID uint64, tags []uint64, apply func(*queue, *message)) {
	s := c.server
	s.stats.SettleFrames++
	s.stats.MaxSettleTags = max(s.stats.MaxSettleTags, len(tags))
	sub := c.subscriptions[subscriptionID]
	if sub == nil {
		c.errorLocked(0, wire.CodeUnknownSubscription, "no subscription %d", subscriptionID)
		return
	}
	q := sub.queue
	for _, tag := range tags {
		m := q.leased[tag]
		if m == nil || m.holder != sub {
			c.errorLocked(0, wire.CodeUnknownDeliveryTag, "delivery tag %d is not held by subscription %d", tag, sub.id)
			continue
		}
		delete(q.leased, tag)
		m.holder = nil
		sub.held--
		apply(q, m)
	}
	q.dispatchLocked()
}

// ackSyncLocked acks every tag or none, and answers the request: OK with
// the count, or unknown_delivery_tag naming the tags not held.
func (c *Conn) ackSyncLocked(f *wire.AckSync) {
	s := c.server
	s.stats.AckSyncs++
	sub := c.subscriptions[f.SubscriptionID]
	if sub == nil {
		c.errorLocked(f.RequestID, wire.CodeUnknownSubscription, "no subscription %d", f.SubscriptionID)
		return
	}
	q := sub.queue
	for _, tag := range f.DeliveryTags {
		if m := q.leased[tag]; m == nil || m.holder != sub {
			c.errorLocked(f.RequestID, wire.CodeUnknownDeliveryTag,
				"delivery tag %d is not held by subscription %d; none acked", tag, sub.id)
			return
		}
	}
	for _, tag := range f.DeliveryTags {
		m := q.leased[tag]
		delete(q.leased, tag)
		m.holder = nil
		sub.held--
	}
	s.stats.Acked += len(f.DeliveryTags)
	c.sendLocked(&wire.OK{RequestID: f.RequestID, Count: uint64(len(f.DeliveryTags))})
	q.dispatchLocked()
}

// ExpireLease drops a subscription's hold on the leased message with the
// payload, as a node does when the lease times out: the message is ready
// again, marked redelivered, and a later settle of the old tag is refused.
// It reports whether such a lease was found.
func (s *Server) ExpireLease(queueName string, payload []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueName]
	if q == nil {
		return false
	}
	for tag, m := range q.leased {
		if string(m.payload) == string(payload) {
			delete(q.leased, tag)
			m.holder.held--
			m.holder, m.redelivered = nil, true
			q.ready = append([]*message{m}, q.ready...)
			q.dispatchLocked()
			s.touchLocked()
			return true
		}
	}
	return false
}

func (q *queue) ackLocked(*message)     {}
func (q *queue) discardLocked(*message) {}

func (q *queue) releaseLocked(m *message) {
	m.deliveries-- // a release does not count
	m.redelivered = true
	q.ready = append([]*message{m}, q.ready...)
}

func (q *queue) nackLocked(m *message, requeue bool) {
	if requeue && (q.options.MaxDeliveries == 0 || m.deliveries < q.options.MaxDeliveries) {
		m.redelivered = true
		q.ready = append(q.ready, m)
		return
	}
	q.deadLettered++
	if target := q.server.queues[q.options.DeadLetterQueue]; target != nil && target != q {
		target.nextOffset++
		m.offset, m.deliveries, m.redelivered = target.nextOffset, 0, false
		target.ready = append(target.ready, m)
		target.dispatchLocked()
	}
}

// dispatchLocked hands ready messages to subscriptions with room, round
// robin, one deliver frame per subscription per pass.
func (q *queue) dispatchLocked() {
	s := q.server
	for len(q.ready) > 0 && len(q.subscriptions) > 0 {
		batches := make(map[*subscription]*wire.Deliver)
		var order []*subscription
		progressed := false
		for range q.subscriptions {
			if len(q.ready) == 0 {
				break
			}
			q.nextTurn = (q.nextTurn + 1) % len(q.subscriptions)
			sub := q.subscriptions[q.nextTurn]
			if sub.held >= int(sub.prefetch) {
				continue
			}
			m := q.ready[0]
			q.ready = q.ready[1:]
			s.nextTag++
			m.tag, m.holder = s.nextTag, sub
			m.deliveries++
			q.leased[m.tag] = m
			sub.held++
			s.stats.MaxUnsettled = max(s.stats.MaxUnsettled, sub.held)
			s.stats.Delivered++
			frame := batches[sub]
			if frame == nil {
				frame = &wire.Deliver{SubscriptionID: sub.id}
				batches[sub] = frame
				order = append(order, sub)
			}
			frame.Deliveries = append(frame.Deliveries, wire.Delivery{
				DeliveryTag: m.tag, Incarnation: 1, Offset: m.offset, Attempt: max(m.deliveries, 1),
				Redelivered: m.redelivered || m.deliveries > 1, PublishUnixNanos: m.publishNanos,
				MessageID: []byte(m.id), Headers: m.headers, Payload: m.payload,
			})
			progressed = true
		}
		for _, sub := range order {
			sub.conn.sendLocked(batches[sub])
		}
		if !progressed {
			return
		}
	}
}

func (c *Conn) adminLocked(frame wire.Frame) {
	s := c.server
	switch f := frame.(type) {
	case *wire.GetQueueInfo:
		if c.redirectedLocked(f.RequestID, f.Queue) {
			return
		}
		if q := s.queues[f.Queue]; q != nil {
			c.sendLocked(&wire.QueueInfoReply{RequestID: f.RequestID, Info: q.infoLocked()})
		} else {
			c.errorLocked(f.RequestID, wire.CodeUnknownQueue, "queue %q is not declared", f.Queue)
		}
	case *wire.ListQueues:
		c.sendLocked(s.listLocked(f))
	case *wire.DeleteQueue:
		if c.redirectedLocked(f.RequestID, f.Queue) {
			return
		}
		q := s.queues[f.Queue]
		if q == nil {
			c.errorLocked(f.RequestID, wire.CodeUnknownQueue, "queue %q is not declared", f.Queue)
			return
		}
		removed := uint64(len(q.ready) + len(q.leased))
		for len(q.subscriptions) > 0 {
			q.unsubscribeLocked(q.subscriptions[0])
		}
		delete(s.queues, f.Queue)
		c.sendLocked(&wire.OK{RequestID: f.RequestID, Count: removed})
	case *wire.PurgeQueue:
		if c.redirectedLocked(f.RequestID, f.Queue) {
			return
		}
		q := s.queues[f.Queue]
		if q == nil {
			c.errorLocked(f.RequestID, wire.CodeUnknownQueue, "queue %q is not declared", f.Queue)
			return
		}
		removed := uint64(len(q.ready))
		q.ready = nil
		c.sendLocked(&wire.OK{RequestID: f.RequestID, Count: removed})
	}
}

func (q *queue) infoLocked() wire.QueueInfo {
	consumers := uint32(len(q.subscriptions))
	return wire.QueueInfo{
		Name: q.name, Mode: q.mode, Options: q.options,
		Ready: uint64(len(q.ready)), Leased: uint64(len(q.leased)), DeadLettered: q.deadLettered,
		Consumers: consumers, WrittenNext: q.nextOffset + 1, DurableNext: q.nextOffset + 1,
		SyncIntervalMs: 100,
	}
}

func (s *Server) listLocked(f *wire.ListQueues) *wire.QueueList {
	limit := int(f.Limit)
	if limit == 0 || limit > wire.MaxQueueListEntries {
		limit = 100
	}
	var names []string
	for name := range s.queues {
		if len(name) >= len(f.Prefix) && name[:len(f.Prefix)] == f.Prefix && name > f.After {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	reply := &wire.QueueList{RequestID: f.RequestID}
	if len(names) > limit {
		names, reply.More = names[:limit], true
	}
	for _, name := range names {
		reply.Queues = append(reply.Queues, s.queues[name].infoLocked())
	}
	return reply
}

// QueueState is a snapshot of one fake queue, for assertions.
type QueueState struct {
	Mode          wire.Mode
	Options       wire.QueueOptions
	Ready         int
	Leased        int
	Subscriptions int
	DeadLettered  uint64
	Payloads      [][]byte // of the ready messages, in order
}

// Queue returns a snapshot of a queue, and false when it does not exist.
func (s *Server) Queue(name string) (QueueState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return QueueState{}, false
	}
	state := QueueState{Mode: q.mode, Options: q.options, Ready: len(q.ready), Leased: len(q.leased),
		Subscriptions: len(q.subscriptions), DeadLettered: q.deadLettered}
	for _, m := range q.ready {
		state.Payloads = append(state.Payloads, append([]byte(nil), m.payload...))
	}
	return state, true
}
