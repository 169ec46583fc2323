package bench

// The collector owns one run's ledger. The pacer's sender, the driver's
// confirm callbacks and its delivery callbacks all run on other goroutines;
// each stamps the time at once and sends the event to the collector over one
// bounded channel, and only the collector's goroutine touches the ledger.
//
// Ordering: the sender posts a publish's "sent" event before it calls
// Driver.Publish, and the driver can only confirm or deliver the message
// after that call, so the collector always sees "sent" before the confirm
// or delivery of the same seq (sends on one channel are received in the
// order they happened).
//
// The window of unconfirmed publishes is a buffered channel of slots: the
// sender puts a token in before each publish (blocking while the window is
// full) and the confirm callback takes one out.
//
// Ending: after the last publish the sender posts "publishing done"; once
// the ledger is settled the collector closes drained. The runner then asks
// for the final tally, which ends the collector; callbacks that arrive later
// (a confirm after the drain timed out) are dropped through the finished
// channel instead of blocking the driver forever.

import (
	"context"
	"time"
)

type eventKind uint8

const (
	eventBegin eventKind = iota + 1
	eventSent
	eventConfirm
	eventDeliver
	eventPublishingDone
)

type collectorEvent struct {
	kind eventKind
	seq  uint64
	// at is when the event happened on the run's clock; for eventBegin it
	// is the end of the warm-up.
	at time.Duration
	// intended is the publish's intended time; for eventBegin it is the
	// planned end of the run.
	intended    time.Duration
	paced       bool
	boundary    Boundary
	err         error
	header      PayloadHeader
	headerValid bool
	redelivered bool
	// limitReached marks an eventPublishingDone whose run stopped at the
	// message limit, at time at.
	limitReached bool
}

// eventSlackCapacity is added to the window and prefetch when sizing the
// event channel, so callbacks rarely wait for the collector.
const eventSlackCapacity = 1024

type collector struct {
	clock  Clock
	ledger *ledger // owned by the loop goroutine

	events         chan collectorEvent
	window         chan struct{}
	finishRequests chan chan tally
	drained        chan struct{} // closed by the loop once settled after publishing
	finished       chan struct{} // closed by the loop when it returns
}

func newCollector(clock Clock, ledger *ledger, window, prefetch int) *collector {
	return &collector{
		clock:          clock,
		ledger:         ledger,
		events:         make(chan collectorEvent, window+prefetch+eventSlackCapacity),
		window:         make(chan struct{}, window),
		finishRequests: make(chan chan tally),
		drained:        make(chan struct{}),
		finished:       make(chan struct{}),
	}
}

// loop is the collector's goroutine.
func (c *collector) loop() {
	defer close(c.finished)
	publishingDone, drainedClosed := false, false
	for {
		select {
		case event := <-c.events:
			publishingDone = c.apply(event) || publishingDone
		case reply := <-c.finishRequests:
			// Events already queued happened before the finish request.
			for len(c.events) > 0 {
				c.apply(<-c.events)
			}
			reply <- c.ledger.close()
			return
		}
		if publishingDone && !drainedClosed && c.ledger.settled() {
			close(c.drained)
			drainedClosed = true
		}
	}
}

// apply hands one event to the ledger; it returns true for publishing done.
func (c *collector) apply(event collectorEvent) bool {
	switch event.kind {
	case eventBegin:
		c.ledger.measureFrom, c.ledger.runEnd = event.at, event.intended
	case eventSent:
		c.ledger.onSent(event.seq, event.intended, event.at, event.paced)
	case eventConfirm:
		c.ledger.onConfirm(event.seq, event.at, event.boundary, event.err)
	case eventDeliver:
		var header *PayloadHeader
		if event.headerValid {
			header = &event.header
		}
		c.ledger.onDeliver(header, event.at, event.redelivered)
	case eventPublishingDone:
		c.ledger.endPublishing(event.at, event.limitReached)
		return true
	}
	return false
}

// post hands an event to the loop, or drops it once the loop has finished.
func (c *collector) post(event collectorEvent) {
	select {
	case c.events <- event:
	case <-c.finished:
	}
}

// acquire takes a window slot for one publish.
func (c *collector) acquire(ctx context.Context) error {
	select {
	case c.window <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release frees a window slot. It never blocks: a release with no slot
// taken only happens for a confirm the driver should not have sent, which
// the ledger counts as an anomaly.
func (c *collector) release() {
	select {
	case <-c.window:
	default:
	}
}

// onConfirm is the ConfirmFunc given to Driver.Publish.
func (c *collector) onConfirm(seq uint64, boundary Boundary, err error) {
	at := c.clock.Now()
	c.release()
	c.post(collectorEvent{kind: eventConfirm, seq: seq, at: at, boundary: boundary, err: err})
}

// onDeliver is the DeliverFunc given to Driver.Subscribe.
func (c *collector) onDeliver(payload []byte, redelivered bool) {
	at := c.clock.Now()
	header, err := DecodePayloadHeader(payload)
	c.post(collectorEvent{kind: eventDeliver, at: at, header: header, headerValid: err == nil, redelivered: redelivered})
}

// finish ends the loop and returns the run's tally.
func (c *collector) finish() tally {
	reply := make(chan tally, 1)
	c.finishRequests <- reply
	return <-reply
}
