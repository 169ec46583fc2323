package client

// Subscriptions. A Subscription outlives connections: on each connection
// it is bound (a binding holds the node's subscription id, the prefetch in
// effect and the settles waiting to be sent), and after a reconnect it is
// bound again by a rebind loop (rebind.go) that retries with backoff until
// it succeeds or the subscription ends. Deliveries wait in a channel whose
// capacity is the prefetch the node granted, so the connection's reader,
// which fills it, never waits on a subscriber: the node never has more
// than prefetch deliveries unsettled, and the SDK counts a delivery as
// settled only when the application settles it (delivery.go says how
// lease expiries are counted).
//
// Channel rules: the reader sends under sendMu, never blocking; finish
// closes ending, then takes sendMu, drops what is left and closes the
// channel, so no send ever meets a closed channel. Drain sets draining
// under sendMu, so no delivery reaches the channel after Drain has taken
// back what it held.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// SubscribeOptions configure a subscription.
type SubscribeOptions struct {
	// Prefetch is the most deliveries held unsettled at once; 0 asks for
	// the node's default. The prefetch in effect is kept across reconnects.
	Prefetch uint32
	// Handler, when set, is called with every delivery, one at a time, from
	// one goroutine owned by the subscription; Deliveries then returns nil.
	Handler func(*Delivery)
}

// Subscription receives deliveries from one queue. Create it with
// Client.Subscribe; end it with Drain (graceful) or Unsubscribe.
type Subscription struct {
	client  *Client
	queue   string
	handler func(*Delivery)

	// leaseTimeoutNanos is the queue's lease timeout as its info gave it
	// at subscribe; 0 when unknown.
	leaseTimeoutNanos atomic.Int64

	mu        sync.Mutex
	binding   *binding // current binding; stale while reconnecting
	prefetch  uint32   // requested on every subscribe; the granted one after the first
	ended     bool
	err       error
	rebinding bool          // a rebind loop runs (rebind.go)
	rebindNow chan struct{} // capacity 1: a new connection is up, retry at once

	sendMu        sync.Mutex
	deliveries    chan *Delivery // created at the first subscribe-ok
	channelClosed bool
	ending        chan struct{} // closed when the subscription ends
	endOnce       sync.Once

	draining atomic.Bool   // set (under sendMu) by Drain: nothing more is handed out
	handling atomic.Bool   // the handler is running
	settled  chan struct{} // capacity 1: kicked on settles while draining
}

// Subscribe starts a subscription on a queue (following a redirect to the
// queue's owner) and returns once the node has accepted it. Deliveries
// arrive on Deliveries() or, with options.Handler, through the handler.
// After a reconnect the subscription is re-established by itself, retrying
// with backoff until it succeeds; deliveries held from before are stale.
//
// Subscribe first reads the queue's info for its lease timeout, so that
// settling a delivery held past it returns ErrLeaseExpired at once.
func (c *Client) Subscribe(ctx context.Context, queue string, options SubscribeOptions) (*Subscription, error) {
	if err := checkName("queue name", queue); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	s := &Subscription{client: c, queue: queue, handler: options.Handler, prefetch: options.Prefetch,
		ending: make(chan struct{}), settled: make(chan struct{}, 1), rebindNow: make(chan struct{}, 1)}
	if info, err := c.QueueInfo(ctx, queue); err == nil {
		s.leaseTimeoutNanos.Store(int64(time.Duration(info.Options.LeaseTimeoutMs) * time.Millisecond))
	}
	b, err := s.subscribeOn(ctx, nil)
	if err == nil && !s.attach(b) {
		err = ErrSubscriptionClosed
	}
	if err == nil && !b.conn.link.adopt(s, b, false) {
		err = connectionLost(b.conn.failure) // the connection ended right after subscribe-ok
	}
	if err != nil {
		s.finish(err)
		return nil, err
	}
	if s.handler != nil {
		go s.runHandler()
	}
	return s, nil
}

// Queue returns the queue's name.
func (s *Subscription) Queue() string { return s.queue }

// Prefetch returns the prefetch the node granted.
func (s *Subscription) Prefetch() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prefetch
}

// LeaseTimeout returns the queue's lease timeout as the node reported it
// at subscribe, or 0 when it is not known.
func (s *Subscription) LeaseTimeout() time.Duration {
	return time.Duration(s.leaseTimeoutNanos.Load())
}

// Deliveries returns the channel of deliveries, closed when the
// subscription ends; nil when the subscription has a handler.
func (s *Subscription) Deliveries() <-chan *Delivery {
	if s.handler != nil {
		return nil
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.deliveries
}

// Done is closed when the subscription ends.
func (s *Subscription) Done() <-chan struct{} { return s.ending }

// Err returns why the subscription ended (ErrSubscriptionClosed after
// Unsubscribe or Drain, ErrClosed after Client.Close, the node's refusal
// of a resubscribe, or, as a *ServerError, the node's reason when it ended
// the subscription on its own: queue deleted or fenced, or a message
// larger than Options.MaxBodyBytes), or nil while it is active.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Unsubscribe ends the subscription at once. Settles made before it are
// sent first; the node releases the deliveries still unsettled (they are
// ready for other consumers, their attempt not counted), so a handler
// still working on one will find it stale. Drain waits for handlers
// instead. ctx bounds only the wait for the node's answer.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	return s.end(ctx, ErrSubscriptionClosed)
}

// Drain ends the subscription gracefully: it stops handing out deliveries
// (those that reached the SDK but not the application are released, their
// attempt not counted), waits until every delivery the application has
// received is settled and, with a handler, the handler has returned, then
// sends those settles and unsubscribes. A handler mid-work when Drain
// starts therefore settles successfully and its message is not delivered
// again. When ctx ends first, Drain unsubscribes anyway (deliveries still
// unsettled are released and their late settles return ErrStaleDelivery)
// and returns ctx's error.
func (s *Subscription) Drain(ctx context.Context) error {
	if s.isEnded() {
		return ErrSubscriptionClosed
	}
	s.withdrawBuffered()
	waitErr := s.awaitSettled(ctx)
	endCtx := ctx
	if waitErr != nil {
		var cancel context.CancelFunc
		endCtx, cancel = context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
	}
	endErr := s.end(endCtx, ErrSubscriptionClosed)
	if errors.Is(endErr, ErrSubscriptionClosed) && waitErr == nil {
		return endErr // ended meanwhile by someone else
	}
	return errors.Join(waitErr, endErr)
}

// withdrawBuffered stops the reader from handing out deliveries and takes
// back those waiting in the channel, which the application has not seen.
// The flag is set last, under sendMu: once IsDraining reports true the
// channel holds nothing the application could still receive.
func (s *Subscription) withdrawBuffered() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	defer s.draining.Store(true)
	for s.deliveries != nil && !s.channelClosed {
		select {
		case d := <-s.deliveries:
			d.binding.leave(d, deliveryWithdrawn)
		default:
			return
		}
	}
}

// IsDraining reports whether Drain has started: nothing more will be
// handed out, so a long-running handler may use it to wind down.
func (s *Subscription) IsDraining() bool { return s.draining.Load() }

// awaitSettled waits until the current binding holds no delivery the
// application has not settled and the handler is idle. A binding whose
// connection ended holds nothing settleable.
func (s *Subscription) awaitSettled(ctx context.Context) error {
	for {
		s.mu.Lock()
		b, ended := s.binding, s.ended
		s.mu.Unlock()
		idle := !s.handling.Load()
		if ended || (idle && (b == nil || b.isStale() || b.live.Load() == 0)) {
			return nil
		}
		var connectionDone <-chan struct{}
		if b != nil {
			connectionDone = b.conn.done
		}
		select {
		case <-s.settled:
		case <-s.ending:
		case <-ctx.Done():
			return ctx.Err()
		case <-connectionDone:
		}
	}
}

// noteSettled wakes Drain when a delivery left state held.
func (s *Subscription) noteSettled() {
	if s.draining.Load() {
		select {
		case s.settled <- struct{}{}:
		default:
		}
	}
}

// end unsubscribes on the node, when connected, and finishes the
// subscription with reason.
func (s *Subscription) end(ctx context.Context, reason error) error {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return ErrSubscriptionClosed
	}
	s.ended = true
	b := s.binding
	s.mu.Unlock()
	var err error
	if b != nil {
		b.conn.link.forget(s)
		if !b.conn.isDead() {
			b.ended.Store(true)
			_, err = b.conn.request(ctx, call{unsubscribe: b,
				build: func(id uint64) wire.Frame { return &wire.Unsubscribe{RequestID: id, SubscriptionID: b.id} }})
			if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) ||
				CodeOf(err) == wire.CodeUnknownSubscription {
				err = nil // the node ended it with the connection
			}
		}
	}
	s.finish(reason)
	return err
}

// subscribeOn sends a subscribe through target (nil: route by queue).
func (s *Subscription) subscribeOn(ctx context.Context, target *link) (*binding, error) {
	s.mu.Lock()
	prefetch := s.prefetch
	s.mu.Unlock()
	answer, err := s.client.roundTrip(ctx, call{queue: s.queue, link: target, subscription: s,
		build: func(id uint64) wire.Frame {
			return &wire.Subscribe{RequestID: id, Queue: s.queue, Prefetch: prefetch}
		}})
	if err != nil {
		return nil, err
	}
	return answer.binding, nil
}

// attach makes b the current binding; false when the subscription ended
// meanwhile, in which case b is unsubscribed.
func (s *Subscription) attach(b *binding) bool {
	s.mu.Lock()
	ended := s.ended
	if !ended {
		s.binding = b
		if s.prefetch == 0 || b.prefetch < s.prefetch {
			s.prefetch = b.prefetch
		}
	}
	s.mu.Unlock()
	if ended {
		b.ended.Store(true)
		b.conn.enqueue(s.client.ctx, outbound{frame: &wire.Unsubscribe{
			RequestID: s.client.nextRequestID.Add(1), SubscriptionID: b.id}})
	}
	return !ended
}

func (s *Subscription) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// boundTo reports whether the current binding is on c.
func (s *Subscription) boundTo(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.binding != nil && s.binding.conn == c
}

// ensureChannel creates the delivery channel at the first subscribe-ok,
// sized to the granted prefetch. The reader calls it before it can read a
// delivery for the subscription.
func (s *Subscription) ensureChannel(prefetch uint32) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.deliveries == nil && !s.channelClosed {
		s.deliveries = make(chan *Delivery, max(int(prefetch), 1))
	}
}

// offer hands a delivery to the subscriber without waiting; false when it
// was not handed out (the subscription ended or drains, or the channel is
// full, which happens only when deliveries whose leases expired fill it).
func (s *Subscription) offer(d *Delivery) bool {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.channelClosed || s.deliveries == nil || s.draining.Load() {
		return false
	}
	select {
	case s.deliveries <- d:
		return true
	default:
		return false
	}
}

// dropStale empties the channel of deliveries that came on c, which has
// ended: they can no longer be settled and the node delivers them again.
func (s *Subscription) dropStale(c *conn) {
	if !s.boundTo(c) {
		return
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.drainLocked()
	s.noteSettled()
}

// drainLocked empties the channel. sendMu must be held.
func (s *Subscription) drainLocked() {
	for s.deliveries != nil {
		select {
		case d := <-s.deliveries:
			d.binding.leave(d, deliveryWithdrawn)
		default:
			return
		}
	}
}

// finish ends the subscription with err (the first reason is kept).
func (s *Subscription) finish(err error) {
	s.mu.Lock()
	s.ended = true
	if s.err == nil {
		s.err = err
	}
	b := s.binding
	s.mu.Unlock()
	if b != nil {
		b.ended.Store(true)
	}
	s.endOnce.Do(func() {
		close(s.ending)
		s.sendMu.Lock()
		s.channelClosed = true
		if s.deliveries != nil {
			s.drainLocked()
			close(s.deliveries)
		}
		s.sendMu.Unlock()
	})
}

func (s *Subscription) runHandler() {
	s.sendMu.Lock()
	deliveries := s.deliveries
	s.sendMu.Unlock()
	if deliveries == nil {
		return
	}
	for d := range deliveries {
		s.handling.Store(true)
		s.handler(d)
		s.handling.Store(false)
		s.noteSettled()
	}
}
