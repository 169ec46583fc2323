package client

// Subscriptions. A Subscription outlives connections: on each connection
// it is bound (a binding holds the node's subscription id, the prefetch in
// effect and the settles waiting to be sent), and after a reconnect the
// link's supervisor binds it again. Deliveries wait in a channel whose
// capacity is the prefetch the node granted, so the connection's reader,
// which fills it, never waits on a subscriber: the node never has more
// than prefetch deliveries unsettled, and the SDK counts a delivery as
// settled only when the application settles it.
//
// Channel rules: the reader sends under sendMu; finish closes ending (which
// unblocks a waiting send), then takes sendMu, drops what is left and
// closes the channel, so no send ever meets a closed channel.

import (
	"context"
	"errors"
	"sync"

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
// Client.Subscribe; end it with Unsubscribe.
type Subscription struct {
	client  *Client
	queue   string
	handler func(*Delivery)

	mu       sync.Mutex
	binding  *binding // current binding; stale while reconnecting
	prefetch uint32   // requested on every subscribe; the granted one after the first
	ended    bool
	err      error

	sendMu        sync.Mutex
	deliveries    chan *Delivery // created at the first subscribe-ok
	channelClosed bool
	ending        chan struct{} // closed when the subscription ends
	endOnce       sync.Once
}

// Subscribe starts a subscription on a queue (following a redirect to the
// queue's owner) and returns once the node has accepted it. Deliveries
// arrive on Deliveries() or, with options.Handler, through the handler.
// After a reconnect the subscription is re-established by itself;
// deliveries held from before are stale.
func (c *Client) Subscribe(ctx context.Context, queue string, options SubscribeOptions) (*Subscription, error) {
	if err := checkName("queue name", queue); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	s := &Subscription{client: c, queue: queue, handler: options.Handler, prefetch: options.Prefetch,
		ending: make(chan struct{})}
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
// Unsubscribe, ErrClosed after Client.Close, the node's refusal of a
// resubscribe, or, as a *ServerError, the node's reason when it ended the
// subscription on its own: queue deleted or fenced, or a message larger
// than Options.MaxBodyBytes), or nil while it is active.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Unsubscribe ends the subscription. Settles made before it are sent
// first; the node releases the deliveries still unsettled (they are ready
// for other consumers, their attempt not counted) and the channel is
// closed. ctx bounds only the wait for the node's answer.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	return s.end(ctx, ErrSubscriptionClosed)
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

// reestablish binds the subscription again after a reconnect of l (run by
// l's supervisor). A refusal that cannot succeed later ends it; anything
// retryable leaves it for the next pass.
func (s *Subscription) reestablish(l *link) {
	for attempt := 0; attempt < 3; attempt++ {
		s.mu.Lock()
		ended := s.ended
		s.mu.Unlock()
		if ended {
			l.forget(s)
			return
		}
		ctx, cancel := context.WithTimeout(s.client.ctx, s.client.options.DialTimeout)
		b, err := s.subscribeOn(ctx, l)
		cancel()
		if err != nil {
			if !IsRetryable(err) && !errors.Is(err, ErrClosed) && !errors.Is(err, context.DeadlineExceeded) {
				l.forget(s)
				s.finish(err)
			}
			return
		}
		if !s.attach(b) {
			l.forget(s)
			return
		}
		target := b.conn.link
		if target != l {
			l.forget(s)
			l = target
		}
		if target.adopt(s, b, true) {
			return
		}
	}
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

// offer hands a delivery to the subscriber; false when the subscription or
// the connection ended first (the delivery is then dropped: the node hands
// it out again).
func (s *Subscription) offer(d *Delivery, connectionDone <-chan struct{}) bool {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.channelClosed || s.deliveries == nil {
		return false
	}
	select {
	case s.deliveries <- d:
		return true
	case <-s.ending:
		return false
	case <-connectionDone:
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
}

// drainLocked empties the channel. sendMu must be held.
func (s *Subscription) drainLocked() {
	for s.deliveries != nil {
		select {
		case <-s.deliveries:
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
		s.handler(d)
	}
}
