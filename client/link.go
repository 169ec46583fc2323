package client

// A link is the Client's relationship with one node (the home link may
// name several addresses for it): the connection in use, if any, the
// subscriptions it carries, and the supervisor goroutine that replaces
// the connection when it breaks.
//
// The supervisor's cycle: connect (with backoff between failed rounds);
// publish the connection; start bringing every subscription of the link
// back onto it (rebind.go); serve (keepalive pings) until it ends; withdraw it, wait for its
// reader and writer to exit, drop the deliveries that arrived on it and
// were not yet received (they are stale: the node hands them out again);
// repeat until the Client closes.
//
// Invariant: a subscription in subscriptions is either bound to current,
// or has a rebind loop running that retries until it is (rebind.go).

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

type link struct {
	client    *Client
	addresses []string

	mu            sync.Mutex
	current       *conn                      // nil while (re)connecting
	changed       chan struct{}              // closed and replaced on every change below
	attempted     bool                       // a connect attempt has finished
	lastFailure   error                      // why the last connection or attempt failed
	dialFailed    bool                       // a connect attempt failed since the last connection was made
	session       Session                    // of the last connection
	subscriptions map[*Subscription]struct{} // established subscriptions routed here
	nextAddress   int                        // where the next reconnect round starts

	started bool
	stopped chan struct{} // closed when the supervisor returns
}

func newLink(c *Client, addresses []string) *link {
	return &link{
		client: c, addresses: addresses,
		changed:       make(chan struct{}),
		subscriptions: make(map[*Subscription]struct{}),
		stopped:       make(chan struct{}),
	}
}

// start runs the supervisor; first is a connection already made, or nil.
func (l *link) start(first *conn) {
	l.mu.Lock()
	l.started = true
	if first != nil {
		l.current, l.session, l.attempted = first, first.session, true
	}
	l.mu.Unlock()
	go l.supervise(first)
}

// awaitStopped waits for the supervisor to return (after Close).
func (l *link) awaitStopped() {
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if started {
		<-l.stopped
	}
}

// connection returns the live connection. While the link has never
// finished an attempt it waits for one; afterwards, while reconnecting, it
// fails at once with ErrConnectionLost unless Options.WaitForReconnect.
func (l *link) connection(ctx context.Context) (*conn, error) {
	return l.connectionUntil(ctx, nil)
}

// connectionUntil is connection whose wait also ends, with errStopped,
// when stop closes (a publish's done: its deadline passed).
func (l *link) connectionUntil(ctx context.Context, stop <-chan struct{}) (*conn, error) {
	for {
		current, changed, err := l.poll()
		if current != nil || err != nil {
			return current, err
		}
		select {
		case <-changed:
		case <-stop:
			return nil, errStopped
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.client.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// poll returns the live connection; or, when there is none, the error
// connection would fail with at once; or neither and the channel that
// closes when that may change.
func (l *link) poll() (*conn, <-chan struct{}, error) {
	l.mu.Lock()
	current, changed, attempted, lastFailure := l.current, l.changed, l.attempted, l.lastFailure
	l.mu.Unlock()
	switch {
	case l.client.isClosed():
		return nil, nil, ErrClosed
	case current != nil && !current.isDead():
		return current, nil, nil
	case current == nil && attempted && !l.client.options.WaitForReconnect:
		return nil, nil, connectionLost(lastFailure)
	}
	return nil, changed, nil
}

// lost reports whether the link has no connection after having tried:
// its node went away (or never answered).
func (l *link) lost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return (l.current == nil || l.current.isDead()) && l.attempted
}

// unreachable reports whether the link has no connection and a connect
// attempt failed since it last had one: its node is down, not merely slow
// (a slow node keeps its connection) nor between a connection that ended
// and the reconnect that may follow at once.
func (l *link) unreachable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return (l.current == nil || l.current.isDead()) && l.dialFailed
}

// failure returns the error a request waiting for an unreachable link
// fails with: the last connect attempt's, as a lost connection.
func (l *link) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return connectionLost(l.lastFailure)
}

// errUnreachable: a link's node cannot be reached (see unreachable).
var errUnreachable = errors.New("client: the node cannot be reached")

// reach is connection for a node a redirect named: its wait also ends,
// with errUnreachable, once the link is unreachable (a connect attempt
// failed), whatever Options.WaitForReconnect says, so the request can be
// sent through another node instead.
func (l *link) reach(ctx context.Context) (*conn, error) {
	for {
		if l.unreachable() {
			return nil, errUnreachable
		}
		current, changed, err := l.poll()
		if current != nil || err != nil {
			return current, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.client.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// notifyLocked wakes everyone waiting for a change. Lock must be held.
func (l *link) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *link) currentSession() (Session, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.session, l.current != nil
}

func (l *link) currentAddress() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil {
		return ""
	}
	return l.current.session.Address
}

// address returns the address of the link's node: the one it is
// connected to, else its only one; "" for a home link of several
// addresses while it reconnects.
func (l *link) address() string {
	if address := l.currentAddress(); address != "" {
		return address
	}
	if len(l.addresses) == 1 {
		return l.addresses[0]
	}
	return ""
}

func (l *link) supervise(first *conn) {
	defer close(l.stopped)
	current := first
	failures := 0
	for {
		if current == nil {
			current = l.reconnect(&failures)
			if current == nil {
				return
			}
		}
		failures = 0
		l.becomeConnected(current)
		l.resubscribe(current)
		reason := l.serve(current)
		l.becomeDisconnected(current, reason)
		if l.client.isClosed() {
			return
		}
		current = nil
	}
}

// reconnect tries every address in turn, backing off between failed
// rounds; nil when the Client closes first. A link that has connected
// before waits one backoff step before its first round, so a node that
// accepts and drops connections is not hammered.
func (l *link) reconnect(failures *int) *conn {
	l.mu.Lock()
	waitFirst := l.session.SessionID != ""
	l.mu.Unlock()
	options := l.client.options
	for {
		if waitFirst || *failures > 0 {
			delay := backoffDelay(*failures, options.Backoff.Initial, options.Backoff.Max, l.client.randomFloat)
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-l.client.ctx.Done():
				timer.Stop()
				return nil
			}
		}
		waitFirst = false
		for range l.addresses {
			l.mu.Lock()
			address := l.addresses[l.nextAddress%len(l.addresses)]
			l.nextAddress++
			previous := l.session.SessionID
			l.mu.Unlock()
			connected, err := l.client.connect(l.client.ctx, l, address, previous)
			if err == nil {
				return connected
			}
			if l.client.isClosed() {
				return nil
			}
			l.noteFailure(address, *failures+1, err)
		}
		*failures++
	}
}

func (l *link) noteFailure(address string, round int, err error) {
	l.mu.Lock()
	l.attempted, l.lastFailure, l.dialFailed = true, err, true
	l.notifyLocked()
	l.mu.Unlock()
	options := l.client.options
	if options.OnReconnectFailed != nil {
		options.OnReconnectFailed(address, round, err)
	}
	if options.OnDisconnect != nil {
		options.OnDisconnect(address, err)
	}
}

func (l *link) becomeConnected(c *conn) {
	l.mu.Lock()
	l.current, l.session, l.attempted, l.lastFailure, l.dialFailed = c, c.session, true, nil, false
	for i, address := range l.addresses {
		if address == c.session.Address {
			l.nextAddress = i // reconnect to the same node first
		}
	}
	l.notifyLocked()
	l.mu.Unlock()
	if l.client.options.OnConnect != nil {
		l.client.options.OnConnect(c.session)
	}
}

// serve waits for the connection to end, watching it for silence
// (keepaliveWatch), and returns why it ended.
func (l *link) serve(c *conn) error {
	interval := l.client.options.KeepaliveInterval
	var tick <-chan time.Time
	if interval > 0 {
		ticker := time.NewTicker(keepaliveTick(interval))
		defer ticker.Stop()
		tick = ticker.C
	}
	ctx, cancel := context.WithCancel(l.client.ctx)
	defer cancel()
	watch := keepaliveWatch{interval: interval, heard: c.heard.Load(), heardAt: time.Now()}
	for {
		select {
		case <-c.done:
			return c.failure
		case <-l.client.ctx.Done():
			c.closeGracefully(ErrClosed)
			return ErrClosed
		case now := <-tick:
			if watch.silentTooLong(now, c.heard.Load()) {
				c.fail(connectionLost(errKeepaliveTimeout))
				continue // c.done closes
			}
			if watch.shouldPing(now) {
				answered := make(chan struct{})
				watch.pinged(answered)
				go func() {
					defer close(answered)
					_, _ = c.request(ctx, call{build: func(id uint64) wire.Frame { return &wire.Ping{RequestID: id} }})
				}()
			}
		}
	}
}

// keepaliveTick is how often a connection is looked at: a quarter of the
// keepalive interval, so that a silent node is found within a quarter
// interval of the whole interval of silence that closes its connection.
func keepaliveTick(interval time.Duration) time.Duration {
	return max(interval/4, time.Millisecond)
}

// keepaliveWatch decides, on each tick, whether a connection gets a ping
// and whether it has gone silent. It pings once nothing came from the node
// for a quarter of the interval (and no ping of its own is unanswered),
// and it ends the connection only when a ping is unanswered and nothing at
// all came from the node for a whole interval: a node that sends other
// frames (deliveries, confirms, a long reply the pong waits behind) is
// there, however late the pong. The node takes any frame for a sign of
// life the same way (docs/protocol.md 4.7). A node that went away or
// stopped (a pause, a cut network) sends nothing, and is found between one
// and one and a quarter intervals after its last byte (a ping every
// interval, each given an interval to answer, took one to two).
//
// Invariant: heardAt is the tick (or the start) at which heard, the count
// of bytes read from the node, last changed.
type keepaliveWatch struct {
	interval time.Duration
	heard    uint64
	heardAt  time.Time
	answered chan struct{} // the outstanding ping's: closed once it is answered (or fails); nil: none
}

// silentTooLong notes the bytes heard so far and reports whether the
// connection must end: a ping is unanswered and nothing came for a whole
// interval.
func (w *keepaliveWatch) silentTooLong(now time.Time, heard uint64) bool {
	if heard != w.heard {
		w.heard, w.heardAt = heard, now
	}
	if w.answered != nil && isClosed(w.answered) {
		w.answered = nil
	}
	return w.answered != nil && now.Sub(w.heardAt) >= w.interval
}

// shouldPing reports whether a ping goes out now: none is unanswered and
// nothing came for a quarter interval.
func (w *keepaliveWatch) shouldPing(now time.Time) bool {
	return w.answered == nil && now.Sub(w.heardAt) >= keepaliveTick(w.interval)
}

// pinged records the ping just sent.
func (w *keepaliveWatch) pinged(answered chan struct{}) { w.answered = answered }

// passOverSilentLocked starts the next reconnect round after address, a
// node that went silent (its keepalive went unanswered for a whole
// interval: paused, cut off, or stalled). A link reconnects to the node it
// had first (becomeConnected), which keeps a session on a node that merely
// dropped the connection; a silent node, though, usually still accepts
// TCP connections (its kernel does) and never answers hello, so a round
// that began there waited out Options.DialTimeout before it tried the
// next address. A link of one address has no other to try.
func (l *link) passOverSilentLocked(address string) {
	for i, candidate := range l.addresses {
		if candidate == address {
			l.nextAddress = i + 1
		}
	}
}

// becomeDisconnected withdraws the connection and cleans up after it.
func (l *link) becomeDisconnected(c *conn, reason error) {
	l.mu.Lock()
	if l.current == c {
		l.current = nil
	}
	l.lastFailure = reason
	if errors.Is(reason, errKeepaliveTimeout) {
		l.passOverSilentLocked(c.session.Address)
	}
	l.notifyLocked()
	subscriptions := l.subscriptionsLocked()
	l.mu.Unlock()
	<-c.readerDone
	<-c.writerDone
	for _, s := range subscriptions {
		s.dropStale(c)
	}
	if reason == ErrClosed {
		return
	}
	if l != l.client.home {
		// A redirect target went away: its queues may have failed over to
		// another node. Their subscriptions ask where each queue lives now
		// (home redirects) instead of waiting for this node to return.
		for _, s := range subscriptions {
			l.forget(s)
			s.startRebind(l.client.dropRoute(s.queue, l))
		}
	}
	if options := l.client.options; options.OnConnectionLost != nil {
		options.OnConnectionLost(c.session.Address, reason)
	}
	if options := l.client.options; options.OnDisconnect != nil {
		options.OnDisconnect(c.session.Address, reason)
	}
}

// resubscribe starts binding every subscription of the link to the
// connection (rebind.go): each retries on its own, so one slow or refused
// resubscribe never holds up the others or the keepalive.
func (l *link) resubscribe(c *conn) {
	l.mu.Lock()
	subscriptions := l.subscriptionsLocked()
	l.mu.Unlock()
	for _, s := range subscriptions {
		if !s.boundTo(c) {
			s.startRebind(l)
		}
	}
}

// live returns the link's current connection, or nil while reconnecting.
func (l *link) live() *conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

func (l *link) subscriptionsLocked() []*Subscription {
	subscriptions := make([]*Subscription, 0, len(l.subscriptions))
	for s := range l.subscriptions {
		subscriptions = append(subscriptions, s)
	}
	return subscriptions
}

// adopt records an established subscription on this link. It reports
// whether the subscription's binding is on the link's live connection; if
// not, the caller binds it again (or, with keepStale, leaves that to the
// supervisor's next pass).
func (l *link) adopt(s *Subscription, b *binding, keepStale bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.isEnded() {
		return true // unsubscribed meanwhile: nothing to keep
	}
	live := l.current == b.conn && !b.conn.isDead()
	if live || keepStale {
		l.subscriptions[s] = struct{}{}
	}
	return live
}

// forget removes a subscription from the link.
func (l *link) forget(s *Subscription) {
	l.mu.Lock()
	delete(l.subscriptions, s)
	l.mu.Unlock()
}

// takeSubscriptions empties the link's subscriptions (Close).
func (l *link) takeSubscriptions() []*Subscription {
	l.mu.Lock()
	defer l.mu.Unlock()
	subscriptions := l.subscriptionsLocked()
	clear(l.subscriptions)
	return subscriptions
}
