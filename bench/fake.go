package bench

// FakeDriver is an in-memory broker for tests of the benchmark itself and
// of the code that wires it to a command line. It keeps the Driver contract
// and simulates a broker's timing and faults:
//
//   - each publish is confirmed ConfirmDelay after it arrives, at the
//     boundary of the queue's mode, and delivered DeliverDelay after it
//     arrives, in publish order;
//   - every DropDeliveryEvery-th publish (counting from 1) is confirmed but
//     never delivered, to exercise the loss counter;
//   - every DuplicateDeliveryEvery-th publish is delivered twice, the second
//     copy marked redelivered unless DuplicatesUnflagged is set;
//   - Stall holds every confirm and delivery due in a window after the
//     AfterPublishes-th publish until the window ends, as a broker pause does;
//   - WrongBoundary confirms at the other mode's boundary.
//
// One goroutine per queue owns the queue's pending confirms and deliveries
// and makes every callback; Publish hands it messages over a bounded channel
// and blocks when the channel is full. Deliveries wait while the queue has
// no subscriber. Time is the real clock: the fake only runs under tests that
// measure nothing against a target.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Errors of the fake driver.
var (
	ErrFakeNoQueue      = errors.New("bench: fake driver: no such queue")
	ErrFakeModeConflict = errors.New("bench: fake driver: queue exists with another mode")
	ErrFakeQueueDeleted = errors.New("bench: fake driver: queue deleted")
)

// FakeStall is a simulated broker pause.
type FakeStall struct {
	AfterPublishes uint64
	For            time.Duration
}

// FakeOptions configure a FakeDriver.
type FakeOptions struct {
	ConfirmDelay           time.Duration
	DeliverDelay           time.Duration
	DropDeliveryEvery      uint64
	DuplicateDeliveryEvery uint64
	DuplicatesUnflagged    bool
	Stall                  FakeStall
	WrongBoundary          bool
	// Backlog bounds the publishes waiting for a queue's goroutine;
	// 0 means 4096.
	Backlog int
}

// FakeDeclare is one Declare call the fake saw.
type FakeDeclare struct {
	Queue string
	Mode  Mode
}

// FakeDriver is an in-memory Driver; see the file comment.
type FakeDriver struct {
	options FakeOptions

	mu       sync.Mutex // guards queues, declares and maxUnconfirmed
	queues   map[string]*fakeQueue
	declares []FakeDeclare
	// maxUnconfirmed is the most publishes any queue held unconfirmed.
	maxUnconfirmed int
}

// NewFakeDriver returns a fake broker with no queues.
func NewFakeDriver(options FakeOptions) *FakeDriver {
	if options.Backlog <= 0 {
		options.Backlog = 4096
	}
	return &FakeDriver{options: options, queues: make(map[string]*fakeQueue)}
}

// Declares returns every Declare call so far, in order.
func (f *FakeDriver) Declares() []FakeDeclare {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FakeDeclare(nil), f.declares...)
}

// MaxUnconfirmed returns the most publishes one queue had unconfirmed at once.
func (f *FakeDriver) MaxUnconfirmed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxUnconfirmed
}

func (f *FakeDriver) noteUnconfirmed(count int) {
	f.mu.Lock()
	f.maxUnconfirmed = max(f.maxUnconfirmed, count)
	f.mu.Unlock()
}

func (f *FakeDriver) queue(name string) (*fakeQueue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.queues[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrFakeNoQueue, name)
	}
	return q, nil
}

// Declare creates the queue, or accepts a re-declare with the same mode.
func (f *FakeDriver) Declare(_ context.Context, queue string, mode Mode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.declares = append(f.declares, FakeDeclare{Queue: queue, Mode: mode})
	if existing, ok := f.queues[queue]; ok {
		if existing.mode != mode {
			return fmt.Errorf("%w: %s is %s", ErrFakeModeConflict, queue, existing.mode)
		}
		return nil
	}
	boundary := mode.Boundary()
	if f.options.WrongBoundary {
		boundary = map[Boundary]Boundary{BoundaryDurable: BoundaryWritten, BoundaryWritten: BoundaryDurable}[boundary]
	}
	q := &fakeQueue{driver: f, mode: mode, boundary: boundary, options: f.options,
		publishes: make(chan fakePublish, f.options.Backlog), control: make(chan fakeControl),
		done: make(chan struct{})}
	f.queues[queue] = q
	go q.loop()
	return nil
}

// Publish hands the message to the queue's goroutine.
func (f *FakeDriver) Publish(ctx context.Context, queue string, seq uint64, payload []byte, onConfirm ConfirmFunc) error {
	q, err := f.queue(queue)
	if err != nil {
		return err
	}
	message := fakePublish{seq: seq, payload: append([]byte(nil), payload...), onConfirm: onConfirm, arrived: time.Now()}
	select {
	case q.publishes <- message:
		return nil
	case <-q.done:
		return fmt.Errorf("%w: %s", ErrFakeQueueDeleted, queue)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Subscribe attaches the queue's only subscriber.
func (f *FakeDriver) Subscribe(ctx context.Context, queue string, _ int, onDeliver DeliverFunc) (StopFunc, error) {
	q, err := f.queue(queue)
	if err != nil {
		return nil, err
	}
	if err := q.send(ctx, fakeControl{onDeliver: onDeliver}); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return q.send(ctx, fakeControl{unsubscribe: true}) }, nil
}

// Delete stops the queue; publishes still unconfirmed fail.
func (f *FakeDriver) Delete(ctx context.Context, queue string) error {
	q, err := f.queue(queue)
	if err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.queues, queue)
	f.mu.Unlock()
	return q.send(ctx, fakeControl{delete: true})
}

type fakePublish struct {
	seq       uint64
	payload   []byte
	onConfirm ConfirmFunc
	arrived   time.Time
}

type fakeControl struct {
	onDeliver   DeliverFunc
	unsubscribe bool
	delete      bool
	processed   chan struct{}
}

type fakeDue struct {
	at          time.Time
	message     *fakePublish
	redelivered bool
}

// fakeQueue is owned by its loop goroutine, except the fields set at
// construction.
type fakeQueue struct {
	driver    *FakeDriver
	mode      Mode
	boundary  Boundary
	options   FakeOptions
	publishes chan fakePublish
	control   chan fakeControl
	done      chan struct{}

	// Owned by loop.
	received   uint64
	stallFrom  time.Time
	stallUntil time.Time
	confirms   []fakeDue // in due order, since the delay is constant
	deliveries []fakeDue // in due order, except stalled ones share one time
	subscriber DeliverFunc
}

// send hands a control message to the loop and waits until it is processed.
func (q *fakeQueue) send(ctx context.Context, message fakeControl) error {
	message.processed = make(chan struct{})
	select {
	case q.control <- message:
	case <-q.done:
		return ErrFakeQueueDeleted
	case <-ctx.Done():
		return ctx.Err()
	}
	<-message.processed
	return nil
}

func (q *fakeQueue) loop() {
	defer close(q.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case message := <-q.publishes:
			q.accept(message)
		case control := <-q.control:
			if q.handle(control) {
				return
			}
		case <-timer.C:
		}
		q.fireDue(time.Now())
		timer.Reset(q.nextDue())
	}
}

// accept schedules the confirm and deliveries of one publish.
func (q *fakeQueue) accept(message fakePublish) {
	q.received++
	if q.options.Stall.For > 0 && q.received == q.options.Stall.AfterPublishes {
		q.stallFrom, q.stallUntil = message.arrived, message.arrived.Add(q.options.Stall.For)
	}
	stored := &message
	q.confirms = append(q.confirms, fakeDue{at: q.due(message.arrived, q.options.ConfirmDelay), message: stored})
	q.driver.noteUnconfirmed(len(q.confirms))
	if every := q.options.DropDeliveryEvery; every > 0 && q.received%every == 0 {
		return
	}
	deliverAt := q.due(message.arrived, q.options.DeliverDelay)
	q.deliveries = append(q.deliveries, fakeDue{at: deliverAt, message: stored})
	if every := q.options.DuplicateDeliveryEvery; every > 0 && q.received%every == 0 {
		q.deliveries = append(q.deliveries, fakeDue{at: deliverAt, message: stored, redelivered: !q.options.DuplicatesUnflagged})
	}
}

// due is arrival + delay, held to the end of a stall it falls into.
func (q *fakeQueue) due(arrived time.Time, delay time.Duration) time.Time {
	at := arrived.Add(delay)
	if !q.stallUntil.IsZero() && !at.Before(q.stallFrom) && at.Before(q.stallUntil) {
		return q.stallUntil
	}
	return at
}

// handle applies a control message; it returns true when the queue ends.
func (q *fakeQueue) handle(control fakeControl) bool {
	defer close(control.processed)
	switch {
	case control.delete:
		for _, pending := range q.confirms {
			pending.message.onConfirm(pending.message.seq, "", ErrFakeQueueDeleted)
		}
		q.confirms, q.deliveries = nil, nil
		return true
	case control.unsubscribe:
		q.subscriber = nil
	default:
		q.subscriber = control.onDeliver
	}
	return false
}

func (q *fakeQueue) fireDue(now time.Time) {
	for len(q.confirms) > 0 && !q.confirms[0].at.After(now) {
		message := q.confirms[0].message
		q.confirms = q.confirms[1:]
		message.onConfirm(message.seq, q.boundary, nil)
	}
	for q.subscriber != nil && len(q.deliveries) > 0 && !q.deliveries[0].at.After(now) {
		due := q.deliveries[0]
		q.deliveries = q.deliveries[1:]
		q.subscriber(due.message.payload, due.redelivered)
	}
}

// nextDue returns how long until the next confirm or delivery is due.
func (q *fakeQueue) nextDue() time.Duration {
	next := time.Hour
	if len(q.confirms) > 0 {
		next = min(next, time.Until(q.confirms[0].at))
	}
	if q.subscriber != nil && len(q.deliveries) > 0 {
		next = min(next, time.Until(q.deliveries[0].at))
	}
	return max(next, 0)
}
