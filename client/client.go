package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/fibrilmq/fibril/wire"
)

// Client is a connection to a Fibril node (and, after redirects, to the
// nodes that own the queues it uses). It is safe for concurrent use.
//
// Goroutines: per connection one reader and one writer; per node address
// one supervisor that reconnects; one per subscription with a handler; one
// for the Confirms channel when it is enabled; one per queue whose
// publishes are held behind a redirect (lane.go), while they are. None per
// message.
type Client struct {
	options Options
	ctx     context.Context // canceled by Close
	cancel  context.CancelFunc

	nextRequestID atomic.Uint64
	nextPublishID atomic.Uint64
	window        *window
	confirms      *confirmPump // nil unless Options.Confirms

	home     *link
	routesMu sync.Mutex
	routes   map[string]*link // queues owned away from home, by queue name
	// routeEpochs is the newest owner epoch a redirect (FRD2) named, by
	// queue: a redirect of an older epoch is not followed.
	routeEpochs map[string]uint64
	links       map[string]*link // redirect targets and detours' nodes, by address
	// detours steer queues around nodes that refused them (detour.go);
	// known is every node address the Client knows, configured first,
	// then as redirects named them.
	detours   map[string]*detour
	known     []string
	closed    bool // guarded by routesMu
	closeOnce sync.Once
	resending sync.WaitGroup // lane drainers (lane.go) and retries of unknown outcomes (retry.go)
	lanes     laneSet        // per queue: keeps the order of publishes across redirects

	randomMu sync.Mutex
	random   *rand.Rand

	// producerID names this Client as a publisher when
	// Options.Idempotent; empty otherwise.
	producerID string
}

// Dial connects to the first of options.Addresses that answers hello and
// returns a Client that keeps a connection up from then on: when it breaks,
// pending requests fail at once with ErrConnectionLost and a supervisor
// reconnects with backoff, rotating through the addresses. Dial itself
// fails when no address answers.
func Dial(ctx context.Context, options Options) (*Client, error) {
	if len(options.Addresses) == 0 {
		return nil, ErrNoAddresses
	}
	if options.TLS != nil {
		dialer, err := options.tlsDialer()
		if err != nil {
			return nil, err
		}
		options.Dialer = dialer
	}
	options = options.withDefaults()
	clientCtx, cancel := context.WithCancel(context.Background())
	c := &Client{
		options: options, ctx: clientCtx, cancel: cancel,
		window: newWindow(options.MaxPendingPublishes),
		routes: make(map[string]*link), links: make(map[string]*link), routeEpochs: make(map[string]uint64),
		detours: make(map[string]*detour),
		lanes:   newLaneSet(),
		random:  rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	if options.Confirms {
		c.confirms = newConfirmPump(options.MaxPendingPublishes, c.window)
	}
	if options.Idempotent {
		c.producerID = fmt.Sprintf("%016x%016x", c.random.Uint64(), c.random.Uint64())
	}
	c.home = newLink(c, options.Addresses)
	for _, address := range options.Addresses {
		c.knowLocked(address)
	}
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	var failures []error
	for _, address := range options.Addresses {
		first, err := c.connect(clientCtx, c.home, address, "")
		if err == nil {
			c.home.start(first)
			return c, nil
		}
		failures = append(failures, err)
	}
	cancel()
	if c.confirms != nil {
		c.confirms.stop()
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("client: dial: %w", errors.Join(failures...))
}

// ProducerID returns the producer id this Client's publishes carry
// (Options.Idempotent), chosen at Dial and kept across reconnects; empty
// when the Client is not idempotent.
func (c *Client) ProducerID() string { return c.producerID }

// Session returns the session of the home connection (the one Dial made),
// and false while it is reconnecting.
func (c *Client) Session() (Session, bool) {
	return c.home.currentSession()
}

// Close ends the Client. It first unsubscribes every subscription (after
// the settles already made, which are sent; the node releases what is
// still unsettled), waiting at most a second for the node, then cuts the
// connections. Everything still pending fails with ErrClosed: requests,
// publishes (their futures, and the Confirms channel, which delivers those
// outcomes and is then closed), publishes waiting for room, and
// subscriptions (their channels are closed; Err reports ErrClosed). Close
// does not wait for handler goroutines to return. Call Flush first to
// wait for outstanding confirms.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.unsubscribeAll()
		c.routesMu.Lock()
		c.closed = true
		links := []*link{c.home}
		for _, l := range c.links {
			links = append(links, l)
		}
		c.routesMu.Unlock()
		c.cancel()
		c.closeLanes()
		for _, l := range links {
			l.awaitStopped()
		}
		c.resending.Wait()
		for _, l := range links {
			for _, s := range l.takeSubscriptions() {
				s.finish(ErrClosed)
			}
		}
		c.window.close()
		if c.confirms != nil {
			c.confirms.stop()
		}
	})
	return nil
}

// Drain ends the Client gracefully, the way a worker shuts down: it
// drains every subscription at once (Subscription.Drain: nothing new is
// handed out, handlers finish and their settles are sent), then waits for
// the confirms of every publish in flight (including those handlers made
// while finishing), then closes. When ctx ends first it closes anyway and
// returns ctx's error with whatever else failed.
func (c *Client) Drain(ctx context.Context) error {
	var subscriptions []*Subscription
	for _, l := range c.allLinks() {
		l.mu.Lock()
		subscriptions = append(subscriptions, l.subscriptionsLocked()...)
		l.mu.Unlock()
	}
	errs := make([]error, len(subscriptions)+1)
	var draining sync.WaitGroup
	for i, s := range subscriptions {
		draining.Add(1)
		go func() {
			defer draining.Done()
			if err := s.Drain(ctx); !errors.Is(err, ErrSubscriptionClosed) {
				errs[i] = err
			}
		}()
	}
	draining.Wait()
	errs[len(subscriptions)] = c.Flush(ctx)
	c.Close()
	return errors.Join(errs...)
}

// allLinks returns the home link and every redirect target's.
func (c *Client) allLinks() []*link {
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	links := []*link{c.home}
	for _, l := range c.links {
		links = append(links, l)
	}
	return links
}

// unsubscribeAll ends every subscription on the node, all at once, within
// closeGrace.
func (c *Client) unsubscribeAll() {
	c.routesMu.Lock()
	links := []*link{c.home}
	for _, l := range c.links {
		links = append(links, l)
	}
	c.routesMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	var ending sync.WaitGroup
	for _, l := range links {
		l.mu.Lock()
		subscriptions := l.subscriptionsLocked()
		l.mu.Unlock()
		for _, s := range subscriptions {
			ending.Add(1)
			go func() {
				defer ending.Done()
				s.end(ctx, ErrClosed)
			}()
		}
	}
	ending.Wait()
}

// isClosed reports whether Close has been called.
func (c *Client) isClosed() bool { return c.ctx.Err() != nil }

// randomFloat returns a random number in [0, 1) for backoff jitter.
func (c *Client) randomFloat() float64 {
	c.randomMu.Lock()
	defer c.randomMu.Unlock()
	return c.random.Float64()
}

// call describes one request for roundTrip.
type call struct {
	queue        string                     // routes the request; "" goes home
	build        func(id uint64) wire.Frame // the frame with its request id
	link         *link                      // overrides routing by queue
	subscription *Subscription              // subscribe: to bind on subscribe-ok
	unsubscribe  *binding                   // unsubscribe: to unbind on ok
}

// roundTrip sends a request to the node that owns its queue, following
// redirects, and returns the reply.
func (c *Client) roundTrip(ctx context.Context, request call) (reply, error) {
	target := request.link
	if target == nil {
		target = c.linkFor(request.queue)
	}
	var refusedAt []string // nodes that answered unavailable or fenced, or redirected to a node that is down (detour.go)
	refusals := 0
	var redirectedBy *conn // while target is what a redirect named: the connection that gave it
	var routed string      // the queue that redirect was about
	for redirects := 0; ; redirects++ {
		var connection *conn
		var err error
		if redirectedBy != nil && routed != "" {
			connection, err = target.reach(ctx)
		} else {
			connection, err = target.connection(ctx)
		}
		if errors.Is(err, errUnreachable) {
			// The node that redirected here has not heard that the node it
			// names is down: ask the next node the Client knows, once per
			// node (detour.go); the redirect that led here is not counted.
			var next *link
			next, refusedAt, refusals = c.passUnreachable(routed, []*conn{redirectedBy}, target, refusedAt, refusals)
			switch {
			case c.isClosed():
				return reply{}, ErrClosed
			case next == nil:
				return reply{}, target.failure()
			}
			target, redirectedBy, redirects = next, nil, redirects-1
			continue
		}
		if err != nil {
			return reply{}, err
		}
		answer, err := connection.request(ctx, request)
		if request.queue != "" && refusesService(CodeOf(err)) {
			// The node carried nothing out and cannot serve the queue
			// now: try the next node, once per node it knows (detour.go).
			next := c.avoid(request.queue, connection)
			refusedAt, refusals = noteRefusal(refusedAt, connection.session.Address), refusals+1
			if next == nil || next == connection.link || roundDone(refusedAt, refusals, c.knownNodes()) {
				return answer, err
			}
			target, redirects = next, redirects-1
			continue
		}
		if err != nil || answer.redirect == nil {
			return answer, err
		}
		if redirects >= c.options.MaxRedirects {
			return reply{}, fmt.Errorf("%w: queue %q, last sent to %s", ErrTooManyRedirects,
				answer.redirect.Queue, answer.redirect.Address)
		}
		queue := request.queue
		if queue == "" {
			queue = answer.redirect.Queue
		}
		if target = c.learnRoute(queue, answer.redirect.Address, answer.redirect.Epoch); target == nil {
			return reply{}, ErrClosed
		}
		redirectedBy, routed = connection, queue
	}
}

// linkFor returns the link that serves a queue: another node's while the
// queue is detoured around one that refused it (detour.go); its owner's,
// once a redirect has named one and while that node answers; and home
// otherwise.
// A route whose link lost its connection is dropped: the owner may have
// failed over, and home (or the next node home reaches) redirects to the
// new one.
func (c *Client) linkFor(queue string) *link {
	detoured, routed := c.routing(queue)
	if detoured != nil {
		return detoured
	}
	if routed != nil {
		if !routed.lost() {
			return routed
		}
		return c.dropRoute(queue, routed)
	}
	return c.home
}

// dropRoute forgets that dead serves queue (its node stopped answering, or
// said it no longer owns the queue) and returns the link to ask next.
func (c *Client) dropRoute(queue string, dead *link) *link {
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	if c.routes[queue] == dead {
		delete(c.routes, queue)
	}
	if d := c.detours[queue]; d != nil && d.link == dead {
		c.endDetourLocked(queue)
	}
	if detoured := c.detourLocked(queue); detoured != nil {
		return detoured
	}
	if routed := c.routes[queue]; routed != nil {
		return routed
	}
	return c.home
}

// routedLink returns the link a redirect named for the queue, or nil.
func (c *Client) routedLink(queue string) *link {
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	return c.routes[queue]
}

// routing returns the queue's detour link, if one is in force, and the
// link a redirect named for it, or nil.
func (c *Client) routing(queue string) (detoured, routed *link) {
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	if len(c.detours) > 0 {
		detoured = c.detourLocked(queue)
	}
	return detoured, c.routes[queue]
}

// learnRoute records that address owns queue and returns the link to it,
// starting one when needed; nil once the Client is closed. A redirect back
// to the address home is connected to clears the route. A redirect that
// names an older epoch than one already followed for the queue is not
// followed: the current route (or home) is returned instead.
func (c *Client) learnRoute(queue, address string, epoch uint64) *link {
	homeAddress := c.home.currentAddress()
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	if c.closed {
		return nil
	}
	if queue != "" && epoch != 0 {
		if epoch < c.routeEpochs[queue] {
			// A node that has not heard of the failover names an older
			// owner: keep the route of the newer epoch (home when the
			// queue has none) and ask there again.
			if target := c.detourLocked(queue); target != nil {
				return target
			}
			if target := c.routes[queue]; target != nil {
				return target
			}
			return c.home
		}
		c.routeEpochs[queue] = epoch
	}
	c.knowLocked(address)
	if queue != "" {
		c.endDetourLocked(queue) // the redirect says where the queue is served
	}
	if address == homeAddress {
		delete(c.routes, queue)
		return c.home
	}
	target := c.linkToLocked(address, homeAddress)
	if queue != "" {
		c.routes[queue] = target
	}
	return target
}
