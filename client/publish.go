package client

// Publishing. A publish takes a place in the Client's window (bounded by
// MaxPendingPublishes), gets a client-wide publish number, and goes to the
// outbox of the connection that serves its queue; the writer gives it a
// wire sequence number and packs it with its neighbours. The confirm
// (a range, with its boundary) completes the future. A publish refused
// with not_owner was not stored, so it is sent again to the owner the
// redirect names, ahead of its queue's later publishes (lane.go); so is
// one refused with unavailable or fenced, through the next node the
// Client knows (detour.go); a publish whose connection ends has an
// unknown outcome and fails with ErrConnectionLost.
//
// A publish may have a deadline (Options.PublishTimeout, WithDeadline, or
// Publish's context): when it passes first, the publish fails with
// ErrPublishTimeout wherever it is (waiting for a connection or for room
// in an outbox, held in its queue's lane, or sent: it is then taken out
// of its connection's pending table, so a late confirm finds nothing),
// and whoever waited for it stops. Who may complete a publish at each
// moment is decided by its phase (publishPhase). The publishes of one
// queue keep their order across redirects through its lane (lane.go).
//
// Invariant: every future is completed exactly once (a second completion
// by an owner panics), and each completion returns its window place, at
// once or, for publishes reported on the Confirms channel, when the
// application has received the confirm.

import (
	"context"
	"errors"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fibrilmq/fibril/wire"
)

// Boundary says which progress a confirm stands on.
type Boundary = wire.Boundary

// Boundaries a confirm can stand on: the queue's mode decides.
const (
	// BoundaryWritten: the required copies handed the message to the OS
	// (buffered queues). Power loss on all of them before the next sync
	// can lose it.
	BoundaryWritten = wire.BoundaryWritten
	// BoundaryDurable: the required copies fsynced the message (durable
	// queues).
	BoundaryDurable = wire.BoundaryDurable
)

// Message is what a publish carries.
type Message struct {
	Payload   []byte
	Headers   Headers
	MessageID string // empty: the node assigns one
}

// Confirm is the outcome of one publish.
type Confirm struct {
	Seq      uint64   // the publish number (PublishFuture.Seq); increases with every publish of the Client
	Queue    string   // the queue published to
	Tag      any      // what WithTag attached to the publish; nil without it
	Boundary Boundary // when Err is nil: written (buffered queue) or durable (durable queue)
	// Duplicate is set when the queue had stored this message already
	// (within its dedup window: a retry of a publish whose first outcome
	// was lost, or a repeat of its producer pair or message id) and did
	// not store it again; Boundary is the one the first copy stands on.
	// Only idempotent publishes (Options.Idempotent) learn it: a queue
	// confirms a repeated message id of a plain publish without saying so.
	Duplicate bool
	// Err is nil when the message was stored. A *ServerError means the
	// node refused it and did not store it (see IsRetryable); an error
	// matching ErrConnectionLost or ErrPublishTimeout means the outcome is
	// unknown (it may or may not have been stored); ErrClosed means the
	// Client was closed.
	Err error
}

// PublishOption sets something on one publish.
type PublishOption func(*publishSettings)

type publishSettings struct {
	deadline time.Time
	timeout  time.Duration
	tag      any
	callback func(Confirm)
}

// WithTag attaches a value of the caller's to a publish; its Confirm (on
// the future, the callback and the Confirms channel) carries it back, so
// an outcome can be matched to its message without a table keyed by
// sequence numbers.
func WithTag(tag any) PublishOption {
	return func(s *publishSettings) { s.tag = tag }
}

// WithCallback calls fn once with the publish's outcome, from the
// goroutine that learns it (a connection's reader, a timer, or the caller
// when the publish fails at once): keep it short and never block in it. A
// publish with a callback reports to it instead of the Confirms channel.
func WithCallback(fn func(Confirm)) PublishOption {
	return func(s *publishSettings) { s.callback = fn }
}

// WithPublishTimeout bounds how long this publish waits for its confirm,
// overriding Options.PublishTimeout; when it passes, the publish fails with
// ErrPublishTimeout (outcome unknown).
func WithPublishTimeout(timeout time.Duration) PublishOption {
	return func(s *publishSettings) { s.timeout = timeout }
}

// WithDeadline is WithPublishTimeout with an instant instead of a duration.
func WithDeadline(deadline time.Time) PublishOption {
	return func(s *publishSettings) { s.deadline = deadline }
}

// publishPhase says where a publish is. It decides who completes a
// publish whose deadline passes: the deadline timer while the publish is
// queued or sent, the writer while it is in the frame being built (whose
// encoding still reads the payload).
type publishPhase uint8

const (
	phaseQueued  publishPhase = iota // handed to an outbox, not yet taken by a writer
	phaseBatched                     // in the writer's frame being built
	phaseSent                        // encoded, in its connection's pending table
	phaseHeld                        // held in its queue's lane (lane.go): refused (not_owner, unavailable, fenced), or behind such
	phaseDone                        // completed
)

// PublishFuture is a publish in flight.
type PublishFuture struct {
	seq          uint64
	queue        string
	messageID    []byte
	headers      []wire.Header
	payload      []byte
	encodedBytes int  // the message's size inside a publish frame
	notify       bool // report the outcome on the Confirms channel
	redirects    int
	retries      int       // times sent again after an unknown outcome (retry.go)
	firstSent    time.Time // when it was first handed to a connection
	tag          any
	callback     func(Confirm)

	wireSeq uint64 // set by the writer that sends it

	// mu guards the phase, where the publish is registered and whether
	// its deadline passed; see publishPhase.
	mu       sync.Mutex
	phase    publishPhase
	conn     *conn // the connection whose writer took it last
	expired  bool
	deadline *time.Timer

	// Guarded by Client.lanes.mu (lane.go): the lane that counts or holds
	// the publish, and the connection that refused it with not_owner.
	lane      *lane
	counted   bool // unresolved on lane.conn
	held      bool // in lane.held
	refusedBy *conn
	rerouted  bool     // sent to its queue's route because its redirect's node was down
	refusals  int      // times refused with unavailable or fenced (detour.go)
	refusedAt []string // the addresses of the nodes that refused it so, each once

	result Confirm
	done   chan struct{}
}

// Seq returns the publish number, which the Confirm repeats.
func (f *PublishFuture) Seq() uint64 { return f.seq }

// Queue returns the queue published to.
func (f *PublishFuture) Queue() string { return f.queue }

// Tag returns what WithTag attached to the publish.
func (f *PublishFuture) Tag() any { return f.tag }

// Done is closed when the outcome is known.
func (f *PublishFuture) Done() <-chan struct{} { return f.done }

// Wait waits for the outcome. The error is the Confirm's Err, or ctx's
// error when ctx ends first (the publish stays in flight).
func (f *PublishFuture) Wait(ctx context.Context) (Confirm, error) {
	select {
	case <-f.done:
		return f.result, f.result.Err
	case <-ctx.Done():
		return Confirm{Seq: f.seq, Queue: f.queue, Tag: f.tag}, ctx.Err()
	}
}

// Publish publishes one message and waits for its confirm. The returned
// Confirm says which boundary the message reached; the error is the
// Confirm's Err (or ctx's). ctx's deadline, when it has one, is also the
// publish's deadline: the publish then fails with ErrPublishTimeout and
// leaves the window, so nothing of it stays in flight. The message's
// buffers may be reused once Publish returns.
//
// Order: the publishes to one queue that one Client makes one after
// another (each Publish or PublishAsync returned before the next began)
// are stored in that order, across redirects too: a publish refused with
// not_owner is sent again to the owner before any later publish to its
// queue (one refused with unavailable or fenced through another node, see
// the package doc, "Redirects"), and the later ones wait for it (keeping
// their window places). A refusal in the middle of a pipeline keeps the
// order too: on a node of protocol version 3 it fences the queue on the
// connection, so the later publishes already sent are refused as well and
// sent again after it (fence.go).
// This is not promised across Clients, across queues, or for calls made
// concurrently; a publish that fails is outside it (one refused by the
// node was not stored; one that failed with ErrConnectionLost or
// ErrPublishTimeout may have been, and a copy you publish again comes
// after the later ones; one RetryUnknownPublishes sends again may be
// stored after later ones).
func (c *Client) Publish(ctx context.Context, queue string, message Message, options ...PublishOption) (Confirm, error) {
	if deadline, ok := ctx.Deadline(); ok {
		options = append(options, WithDeadline(deadline))
	}
	future, err := c.publish(ctx, queue, message, false, options)
	if err != nil {
		return Confirm{Queue: queue, Err: err}, err
	}
	select {
	case <-future.done:
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Confirm{Seq: future.seq, Queue: queue, Tag: future.tag}, ctx.Err()
		}
		// The publish's own deadline is the same instant: its outcome (a
		// confirm that raced it, or ErrPublishTimeout) is moments away.
		<-future.done
	}
	return future.result, future.result.Err
}

// PublishAsync queues one message for publishing and returns at once with
// its future; ctx bounds only the wait for room in the window, for a
// connection and for the outbox. Publishes pipeline: many are in flight
// at once, and those queued together for one queue share a frame; one
// queue's are stored in the order of the calls (see Publish, "Order"). With Options.Confirms the outcome
// is also sent on the Confirms channel (unless WithCallback is given).
//
// Buffer ownership: the SDK keeps message.Payload and the header values
// without copying them until the future is done (it reads them when it
// encodes the frame, and again if it must send the message to another
// node after a redirect). Do not modify or reuse them before Done is
// closed (or the callback has run); copy first if you must.
func (c *Client) PublishAsync(ctx context.Context, queue string, message Message, options ...PublishOption) (*PublishFuture, error) {
	return c.publish(ctx, queue, message, c.confirms != nil, options)
}

// Confirms returns the channel of PublishAsync outcomes, in the order they
// complete, when Options.Confirms is set; nil otherwise. Receive from it
// steadily: a publish keeps its window place until its confirm has been
// received here. After Close it delivers the remaining outcomes (failed
// with ErrClosed), then is closed.
func (c *Client) Confirms() <-chan Confirm {
	if c.confirms == nil {
		return nil
	}
	return c.confirms.out
}

// Flush waits until no publish is in flight (every one made before the
// call, and any made concurrently, has its outcome).
func (c *Client) Flush(ctx context.Context) error {
	return c.window.awaitIdle(ctx)
}

func (c *Client) publish(ctx context.Context, queue string, message Message, notify bool, options []PublishOption) (*PublishFuture, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	var settings publishSettings
	for _, option := range options {
		option(&settings)
	}
	future, err := newPublishFuture(queue, message, notify && settings.callback == nil)
	if err != nil {
		return nil, err
	}
	future.tag, future.callback = settings.tag, settings.callback
	if c.producerID != "" {
		future.encodedBytes += 8 // the producer sequence of FPB2
	}
	if err := c.window.acquire(ctx); err != nil {
		return nil, err
	}
	future.seq = c.nextPublishID.Add(1)
	future.firstSent = time.Now()
	c.armDeadline(future, settings)
	if err := c.sendInOrder(ctx, future); err != nil && c.refuseQueued(future, Confirm{Err: err}) {
		return nil, err
	}
	// Sent, held behind its queue's earlier publishes, or completed by its
	// deadline while it waited for a connection.
	return future, nil
}

// armDeadline starts the publish's deadline timer, if it has a deadline:
// the earliest of WithDeadline, and WithPublishTimeout (or
// Options.PublishTimeout) from now.
func (c *Client) armDeadline(future *PublishFuture, settings publishSettings) {
	deadline := settings.deadline
	timeout := settings.timeout
	if timeout == 0 {
		timeout = c.options.PublishTimeout
	}
	if timeout > 0 {
		if byTimeout := time.Now().Add(timeout); deadline.IsZero() || byTimeout.Before(deadline) {
			deadline = byTimeout
		}
	}
	if deadline.IsZero() {
		return
	}
	future.mu.Lock()
	future.deadline = time.AfterFunc(time.Until(deadline), func() { c.expirePublish(future) })
	future.mu.Unlock()
}

// sendPublish hands a publish to the connection of target, outside its
// queue's lane (a retry of an unknown outcome, retry.go); errStopped when
// its deadline completed it while it waited.
func (c *Client) sendPublish(ctx context.Context, future *PublishFuture, target *link) error {
	connection, err := target.connectionUntil(ctx, future.done)
	if err != nil {
		return err
	}
	return c.handOver(ctx, future, connection)
}

// publishFrameOverhead is a publish frame's body size without its queue
// name bytes and messages: FPB1's, plus the producer id in FPB2.
func (c *Client) publishFrameOverhead() int {
	if c.producerID != "" {
		return publishFrameOverhead + 2 + len(c.producerID)
	}
	return publishFrameOverhead
}

// finishPublish completes a future its caller owns alone: it took it out
// of a pending table, or holds it in the frame being built.
func (c *Client) finishPublish(future *PublishFuture, result Confirm) {
	future.mu.Lock()
	if future.phase == phaseDone {
		future.mu.Unlock()
		panic("client: publish completed twice")
	}
	future.phase = phaseDone
	future.mu.Unlock()
	c.complete(future, result)
}

// finishQueued completes a future that was queued (in an outbox, or being
// handed to one), unless its deadline completed it first.
func (c *Client) finishQueued(future *PublishFuture, result Confirm) {
	future.mu.Lock()
	if future.phase == phaseDone {
		future.mu.Unlock()
		return
	}
	future.phase = phaseDone
	future.mu.Unlock()
	c.complete(future, result)
}

// refuseQueued completes a publish that never reached a connection, its
// error returned to the caller rather than notified; unless its deadline
// completed it first (the timer may fire while sendInOrder waits for a
// connection), in which case nothing of it is touched (notify is written
// only under the lock, by whoever completes it) and it reports false.
func (c *Client) refuseQueued(future *PublishFuture, result Confirm) bool {
	future.mu.Lock()
	if future.phase == phaseDone {
		future.mu.Unlock()
		return false
	}
	future.phase, future.notify = phaseDone, false
	future.mu.Unlock()
	c.complete(future, result)
	return true
}

// expirePublish runs when a publish's deadline passes: it completes the
// publish with ErrPublishTimeout unless another path owns it now.
func (c *Client) expirePublish(future *PublishFuture) {
	future.mu.Lock()
	switch future.phase {
	case phaseDone:
		future.mu.Unlock()
	case phaseQueued, phaseHeld:
		// Waiting for a connection, in an outbox, or held in its lane:
		// completed here; whoever waits for it stops (its done closes), a
		// writer skips it, its lane lets it go (release).
		future.phase = phaseDone
		future.mu.Unlock()
		c.complete(future, Confirm{Err: ErrPublishTimeout})
	case phaseBatched:
		future.expired = true // the writer completes it once its frame is encoded
		future.mu.Unlock()
	case phaseSent:
		future.expired = true
		connection, seq := future.conn, future.wireSeq
		future.mu.Unlock()
		if connection != nil && connection.pending.removePublish(seq, future) {
			c.finishPublish(future, Confirm{Err: ErrPublishTimeout})
		}
		// Otherwise a confirm, a refusal or a redirect took it first.
	}
}

// enterBatch moves a publish into the frame a writer builds for c; false
// when it is done already, or it expired, in which case it is completed
// here and must not be sent.
func (c *Client) enterBatch(future *PublishFuture, connection *conn) bool {
	future.mu.Lock()
	switch {
	case future.phase == phaseDone:
		future.mu.Unlock()
		return false
	case future.expired:
		future.phase = phaseDone
		future.mu.Unlock()
		c.complete(future, Confirm{Err: ErrPublishTimeout})
		return false
	}
	future.phase, future.conn = phaseBatched, connection
	future.mu.Unlock()
	return true
}

// leaveBatch records that the publish's frame is encoded; it reports
// whether its deadline passed meanwhile (the writer then completes it).
func (f *PublishFuture) leaveBatch() (expired bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.phase == phaseBatched {
		f.phase = phaseSent
	}
	return f.expired && f.phase == phaseSent
}

// complete records the outcome and hands it on: to the callback, or the
// Confirms channel (which returns the window place on receipt), or
// straight back to the window.
func (c *Client) complete(future *PublishFuture, result Confirm) {
	if timer := future.deadline; timer != nil {
		timer.Stop()
	}
	c.release(future)
	result.Seq, result.Queue, result.Tag = future.seq, future.queue, future.tag
	future.result = result
	future.payload, future.headers, future.messageID = nil, nil, nil
	close(future.done)
	switch {
	case future.callback != nil:
		future.callback(result)
		c.window.release()
	case future.notify:
		c.confirms.push(result)
	default:
		c.window.release()
	}
}

func newPublishFuture(queue string, message Message, notify bool) (*PublishFuture, error) {
	if err := checkName("queue name", queue); err != nil {
		return nil, err
	}
	if message.MessageID != "" {
		if err := checkName("message id", message.MessageID); err != nil {
			return nil, err
		}
	}
	future := &PublishFuture{queue: queue, payload: message.Payload, notify: notify, done: make(chan struct{})}
	size := 8 + 2 + len(message.MessageID) + 2 + 4 + len(message.Payload)
	if message.MessageID != "" {
		future.messageID = []byte(message.MessageID)
	}
	if len(message.Headers) > 0 {
		if len(message.Headers) > 0xffff {
			return nil, ErrMessageTooLarge
		}
		future.headers = make([]wire.Header, len(message.Headers))
		for i, header := range message.Headers {
			if header.Key != "" {
				if err := checkName("header key", header.Key); err != nil {
					return nil, err
				}
			}
			future.headers[i] = wire.Header{Key: []byte(header.Key), Value: header.Value}
			size += 2 + len(header.Key) + 4 + len(header.Value)
		}
	}
	future.encodedBytes = size
	if size > wire.DefaultMaxBodyBytes {
		return nil, ErrMessageTooLarge
	}
	return future, nil
}

// checkName refuses a string the protocol cannot carry: empty, longer than
// a string field, or not UTF-8 (which the node would take as a malformed
// frame and close the connection for).
func checkName(what, name string) error {
	switch {
	case name == "":
		return errorf(ErrInvalidConfig, "%s is empty", what)
	case len(name) > wire.MaxStringBytes:
		return errorf(ErrInvalidConfig, "%s is %d bytes, over the limit of %d", what, len(name), wire.MaxStringBytes)
	case !utf8.ValidString(name):
		return errorf(ErrInvalidConfig, "%s is not valid UTF-8", what)
	}
	return nil
}

// window bounds the publishes in flight. Waiters are served in order.
type window struct {
	mu          sync.Mutex
	limit, held int
	waiters     []*windowWaiter
	idle        []chan struct{} // Flush callers, woken when held reaches 0
	closed      bool
}

// windowWaiter is a publisher waiting for a place; release hands one over
// (granted) or close wakes it without one.
type windowWaiter struct {
	wake    chan struct{}
	granted bool // guarded by window.mu
}

func newWindow(limit int) *window { return &window{limit: limit} }

func (w *window) acquire(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.held < w.limit && len(w.waiters) == 0 {
		w.held++
		w.mu.Unlock()
		return nil
	}
	waiter := &windowWaiter{wake: make(chan struct{})}
	w.waiters = append(w.waiters, waiter)
	w.mu.Unlock()
	select {
	case <-waiter.wake:
	case <-ctx.Done():
	}
	w.mu.Lock()
	granted := waiter.granted
	if !granted {
		for i, other := range w.waiters {
			if other == waiter {
				w.waiters = append(w.waiters[:i], w.waiters[i+1:]...)
				break
			}
		}
	}
	closed := w.closed
	w.mu.Unlock()
	switch {
	case granted && (closed || ctx.Err() != nil):
		w.release() // a place arrived too late: give it back
	case granted:
		return nil
	}
	if closed {
		return ErrClosed
	}
	return ctx.Err()
}

// release returns a place: to the first waiter, or to the pool.
func (w *window) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held <= 0 {
		panic("client: window released more places than it held")
	}
	if len(w.waiters) > 0 && !w.closed {
		waiter := w.waiters[0]
		w.waiters = w.waiters[1:]
		waiter.granted = true
		close(waiter.wake)
		return
	}
	w.held--
	if w.held == 0 {
		for _, idle := range w.idle {
			close(idle)
		}
		w.idle = nil
	}
}

// awaitIdle waits until no place is held.
func (w *window) awaitIdle(ctx context.Context) error {
	w.mu.Lock()
	if w.held == 0 {
		w.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	w.idle = append(w.idle, idle)
	w.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close wakes every waiter without a place.
func (w *window) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, waiter := range w.waiters {
		close(waiter.wake)
	}
	w.waiters = nil
}

// confirmPump delivers PublishAsync outcomes on the Confirms channel. Its
// buffer holds as many outcomes as the window has places, and an outcome
// keeps its place until the application receives it, so push never finds
// the buffer full and the reader that completes a publish never waits.
type confirmPump struct {
	in       chan Confirm
	out      chan Confirm
	window   *window
	stopping chan struct{}
}

func newConfirmPump(places int, w *window) *confirmPump {
	p := &confirmPump{in: make(chan Confirm, places), out: make(chan Confirm), window: w, stopping: make(chan struct{})}
	go p.run()
	return p
}

func (p *confirmPump) push(result Confirm) {
	select {
	case p.in <- result:
	default:
		panic("client: confirm buffer full; the window invariant is broken")
	}
}

// stop ends the pump once every outcome pushed so far has been received.
func (p *confirmPump) stop() { close(p.stopping) }

func (p *confirmPump) run() {
	defer close(p.out)
	for {
		select {
		case result := <-p.in:
			p.out <- result
			p.window.release()
		case <-p.stopping:
			for {
				select {
				case result := <-p.in:
					p.out <- result
					p.window.release()
				default:
					return
				}
			}
		}
	}
}
