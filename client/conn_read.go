package client

// The reader goroutine of a connection. It decodes the hot frames
// (confirm, negative confirm, deliver) into values it reuses, and the slow
// replies into fresh values it hands to the waiting request. It alone
// touches the connection's table of subscription bindings: a binding is
// added when subscribe-ok arrives and removed when the unsubscribe's ok
// arrives, and the node sends no delivery for a subscription after that ok.
//
// A frame it cannot decode, or one only a client sends, is answered with
// an error frame and ends the connection. A delivery beyond the
// subscription's prefetch means the node expired a lease (delivery.go);
// the reader never waits on a subscriber: a delivery that does not fit the
// subscription's channel is withdrawn (the node redelivers it).

import (
	"fmt"
	"slices"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

type readerState struct {
	reader    *wire.Reader
	bindings  map[uint64]*binding // by subscription id
	confirm   wire.Confirm
	confirm2  wire.ConfirmIdempotent
	reject    wire.NegativeConfirm
	deliver   wire.Deliver
	completed []*PublishFuture
}

func (c *conn) readLoop() {
	defer close(c.readerDone)
	for !c.isDead() {
		tag, body, err := c.reading.reader.Next()
		if err != nil {
			if isFrameError(err) {
				c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
			} else {
				c.fail(connectionLost(err))
			}
			return
		}
		c.handleFrame(tag, body)
	}
}

// closeWith sends an error frame (best effort) and then ends the
// connection with reason.
func (c *conn) closeWith(frame *wire.ErrorFrame, reason error) {
	c.gate.RLock()
	sent := false
	if !c.gateClosed {
		select {
		case c.outbox <- outbound{frame: frame, closeAfter: reason}:
			sent = true
		default:
		}
	}
	c.gate.RUnlock()
	if !sent {
		c.fail(reason)
	}
}

// protocolError ends the connection because the node broke the protocol.
func (c *conn) protocolError(code wire.Code, format string, args ...any) {
	message := fmt.Sprintf(format, args...)
	c.closeWith(&wire.ErrorFrame{Code: code, Message: message},
		connectionLost(fmt.Errorf("node broke the protocol: %s", message)))
}

func (c *conn) handleFrame(tag wire.Tag, body []byte) {
	switch tag {
	case wire.TagConfirm:
		c.handleConfirm(body)
	case wire.TagConfirmIdempotent:
		c.handleConfirmIdempotent(body)
	case wire.TagNegativeConfirm:
		c.handleReject(body)
	case wire.TagDeliver:
		c.handleDeliver(body)
	case wire.TagPing:
		var ping wire.Ping
		if err := ping.Decode(body); err != nil {
			c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
			return
		}
		c.enqueue(c.client.ctx, outbound{frame: &wire.Pong{RequestID: ping.RequestID}})
	case wire.TagError:
		c.handleError(body)
	case wire.TagRedirect, wire.TagRedirectEpoch:
		c.handleRedirect(tag, body)
	case wire.TagSubscriptionEnded:
		c.handleSubscriptionEnded(body)
	case wire.TagDeclareOK, wire.TagDeclareOKMode, wire.TagSubscribeOK, wire.TagQueueInfoReply,
		wire.TagQueueList, wire.TagOK, wire.TagPong, wire.TagModeChanged:
		c.handleReply(tag, body)
	default:
		if tag.Known() {
			c.protocolError(wire.CodeProtocolViolation, "a node does not send %s (%s) to a client", tag, tag.Name())
			return
		}
		c.closeWith(wire.UnknownFrameError(tag), connectionLost(fmt.Errorf("node sent unknown frame tag %q", tag.String())))
	}
}

func (c *conn) handleConfirm(body []byte) {
	r := &c.reading
	if err := r.confirm.Decode(body); err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	for _, confirmed := range r.confirm.Ranges {
		r.completed = c.pending.takePublishRange(confirmed.First, confirmed.Last, r.completed[:0])
		for _, future := range r.completed {
			c.client.finishPublish(future, Confirm{Boundary: confirmed.Boundary})
		}
	}
	clear(r.completed)
}

// handleConfirmIdempotent completes publishes an FCF2 confirms, telling
// duplicates apart.
func (c *conn) handleConfirmIdempotent(body []byte) {
	r := &c.reading
	if err := r.confirm2.Decode(body); err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	for _, confirmed := range r.confirm2.Ranges {
		r.completed = c.pending.takePublishRange(confirmed.First, confirmed.Last, r.completed[:0])
		for _, future := range r.completed {
			c.client.finishPublish(future, Confirm{Boundary: confirmed.Boundary, Duplicate: confirmed.Duplicate})
		}
	}
	clear(r.completed)
}

func (c *conn) handleReject(body []byte) {
	r := &c.reading
	if err := r.reject.Decode(body); err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	for _, rejected := range r.reject.Ranges {
		futures := c.pending.takePublishRange(rejected.First, rejected.Last, nil)
		for _, future := range futures {
			c.markFenced(future.queue, rejected.Code) // before the lanes see them (fence.go)
		}
		if rejected.Code == wire.CodeNotOwner {
			c.redirectPublishes(futures)
			continue
		}
		refusal := &ServerError{Code: rejected.Code, Message: rejected.Message}
		if refusesService(rejected.Code) {
			c.detourPublishes(futures, refusal)
			continue
		}
		if rejected.Code == wire.CodeOutcomeUnknown {
			// The queue changed owner or restarted with these appended:
			// like a lost connection, a deduplicating queue may take them
			// again (Options.RetryUnknownPublishes).
			futures = c.client.splitRetries(c.link, futures, refusal)
		}
		for _, future := range futures {
			c.client.finishPublish(future, Confirm{Err: refusal})
		}
	}
}

// redirectPublishes hands publishes refused with not_owner to their
// queues' lanes (lane.go), which send them to the owner a redirect names,
// ahead of every later publish to the queue.
func (c *conn) redirectPublishes(futures []*PublishFuture) {
	forEachQueue(futures, func(queue string, group []*PublishFuture) { c.client.refuse(c, queue, group) })
}

// detourPublishes hands publishes refused with unavailable or fenced (not
// stored) to their queues' lanes, which send them to the next node
// (detour.go), ahead of every later publish to the queue.
func (c *conn) detourPublishes(futures []*PublishFuture, refusal *ServerError) {
	forEachQueue(futures, func(queue string, group []*PublishFuture) {
		c.client.refuseUnavailable(c, queue, group, refusal)
	})
}

// forEachQueue calls fn with the publishes of each queue, in publish
// number order.
func forEachQueue(futures []*PublishFuture, fn func(queue string, group []*PublishFuture)) {
	slices.SortFunc(futures, func(a, b *PublishFuture) int { return compareUint64(a.seq, b.seq) })
	for len(futures) > 0 {
		queue := futures[0].queue
		var group, rest []*PublishFuture
		for _, future := range futures {
			if future.queue == queue {
				group = append(group, future)
			} else {
				rest = append(rest, future)
			}
		}
		fn(queue, group)
		futures = rest
	}
}

func (c *conn) handleRedirect(tag wire.Tag, body []byte) {
	redirect := new(wire.RedirectEpoch)
	var err error
	if tag == wire.TagRedirectEpoch {
		err = redirect.Decode(body)
	} else {
		err = redirect.Redirect.Decode(body)
	}
	if err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	if redirect.RequestID != 0 {
		c.answer(redirect.RequestID, reply{redirect: redirect})
		return
	}
	target := c.client.learnRoute(redirect.Queue, redirect.Address, redirect.Epoch)
	refusal := &ServerError{Code: wire.CodeNotOwner, Message: fmt.Sprintf(
		"queue %q: the node redirected to %s, which is where it was sent", redirect.Queue, redirect.Address)}
	c.client.redirected(c, redirect.Queue, target, refusal)
}

func (c *conn) handleError(body []byte) {
	frame := new(wire.ErrorFrame)
	if err := frame.Decode(body); err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	refusal := &ServerError{Code: frame.Code, Message: frame.Message}
	if frame.RequestID != 0 {
		c.answer(frame.RequestID, reply{err: refusal})
	}
	if frame.Code.ClosesConnection() {
		c.fail(connectionLost(refusal))
		return
	}
	if frame.RequestID == 0 && c.client.options.OnError != nil {
		c.client.options.OnError(refusal)
	}
}

// handleSubscriptionEnded ends a subscription the node ended on its own
// (queue deleted or fenced, a message over this client's MaxBodyBytes).
// The node sends nothing more for it, so the binding goes at once, and the
// Subscription ends with the node's reason instead of being subscribed
// again after a reconnect.
func (c *conn) handleSubscriptionEnded(body []byte) {
	frame := new(wire.SubscriptionEnded)
	if err := frame.Decode(body); err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	b := c.reading.bindings[frame.SubscriptionID]
	if b == nil {
		return // ended here first (an unsubscribe crossed it); nothing is left
	}
	delete(c.reading.bindings, frame.SubscriptionID)
	b.ended.Store(true)
	if s := b.subscription; s != nil && s.boundTo(c) {
		c.link.forget(s)
		if frame.Code == wire.CodeNotOwner {
			// The queue's owner stepped down (a failover): subscribe again
			// wherever the queue is served now.
			s.startRebind(c.client.dropRoute(s.queue, c.link))
			return
		}
		s.finish(&ServerError{Code: frame.Code, Message: frame.Message})
	}
}

// handleReply decodes a slow reply and answers its request.
func (c *conn) handleReply(tag wire.Tag, body []byte) {
	frame, err := wire.DecodeFrame(tag, body)
	if err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	var id uint64
	switch f := frame.(type) {
	case *wire.DeclareOK:
		id = f.RequestID
	case *wire.DeclareOKMode:
		id = f.RequestID
	case *wire.SubscribeOK:
		id = f.RequestID
	case *wire.QueueInfoReply:
		id = f.RequestID
	case *wire.QueueList:
		id = f.RequestID
	case *wire.OK:
		id = f.RequestID
	case *wire.Pong:
		id = f.RequestID
	case *wire.ModeChanged:
		id = f.RequestID
	}
	c.answer(id, reply{frame: frame})
}

// answer completes the request with the id. Subscribe-ok binds the
// subscription here, before any delivery for it can be read; the ok that
// answers an unsubscribe unbinds it.
func (c *conn) answer(id uint64, answer reply) {
	waiting := c.pending.takeRequest(id)
	subscribed, _ := answer.frame.(*wire.SubscribeOK)
	switch {
	case waiting == nil && subscribed != nil:
		c.dropOrphanSubscription(subscribed)
		return
	case waiting == nil:
		return // its caller gave up; nothing else depends on it
	case subscribed != nil && waiting.subscription != nil:
		answer.binding = c.bind(waiting.subscription, subscribed)
	case waiting.unsubscribe != nil && (answer.frame != nil || CodeOf(answer.err) == wire.CodeUnknownSubscription):
		waiting.unsubscribe.ended.Store(true)
		delete(c.reading.bindings, waiting.unsubscribe.id)
	}
	waiting.done <- answer
}

func (c *conn) bind(s *Subscription, ok *wire.SubscribeOK) *binding {
	b := &binding{subscription: s, conn: c, id: ok.SubscriptionID, prefetch: ok.Prefetch,
		leaseTimeout: s.LeaseTimeout()}
	s.ensureChannel(ok.Prefetch)
	c.reading.bindings[ok.SubscriptionID] = b
	return b
}

// dropOrphanSubscription ends a subscription whose subscribe was
// abandoned by its caller: deliveries for it are dropped (the node
// releases them when the unsubscribe arrives).
func (c *conn) dropOrphanSubscription(ok *wire.SubscribeOK) {
	b := &binding{conn: c, id: ok.SubscriptionID, prefetch: ok.Prefetch}
	b.ended.Store(true)
	c.reading.bindings[ok.SubscriptionID] = b
	id := c.client.nextRequestID.Add(1)
	if c.pending.addRequest(id, &pendingRequest{done: make(chan reply, 1), unsubscribe: b}) != nil {
		return
	}
	c.enqueue(c.client.ctx, outbound{frame: &wire.Unsubscribe{RequestID: id, SubscriptionID: b.id}})
}

func (c *conn) handleDeliver(body []byte) {
	r := &c.reading
	if err := r.deliver.Decode(body); err != nil {
		c.closeWith(wire.ErrorFrameFor(0, err), connectionLost(err))
		return
	}
	b := r.bindings[r.deliver.SubscriptionID]
	if b == nil {
		c.protocolError(wire.CodeProtocolViolation, "deliver for subscription %d, which this session does not have",
			r.deliver.SubscriptionID)
		return
	}
	if b.ended.Load() {
		return // unsubscribing: the node releases these when the unsubscribe arrives
	}
	now := time.Now()
	for i := range r.deliver.Deliveries {
		d := newDelivery(b, &r.deliver.Deliveries[i], now)
		b.track(d)
		if !b.subscription.offer(d) {
			// Not handed to the application (drained, ended, or the
			// channel is full of deliveries whose leases expired): the node
			// hands the message out again once it releases or expires it.
			b.leave(d, deliveryWithdrawn)
		}
	}
}
