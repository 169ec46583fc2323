package client

// Lanes keep a publisher's order per queue across redirects.
//
// A connection's requests take effect in the order they were sent
// (docs/protocol.md), so publishes to one queue that all go out on one
// connection are stored in the order they were made. The order can break
// only where the queue's publishes change connection: a publish refused
// with not_owner (not stored) must be sent again to the owner the redirect
// names (one refused with unavailable or fenced, to the next node the
// Client knows, detour.go), and the publishes made after it must not get
// there first; a publish still unanswered on the old connection may yet
// be refused so, and nothing may overtake it either.
//
// A lane per queue with publishes in flight therefore counts the publishes
// it handed to one connection and that are not yet answered (unresolved).
// A publish goes straight to the connection that serves its queue only
// while its lane has no drainer (below) and nothing unresolved on another
// connection; otherwise it is held. Held publishes are kept in publish
// number order (the order of the Publish calls, for calls one after
// another), and refused ones join them in that order. A drainer goroutine,
// one per lane that holds publishes, sends them out in that order on one
// connection once nothing is unresolved elsewhere and, for refused ones,
// once the redirect has named their queue's owner (or the connection that
// refused them ended: they then go wherever the queue is routed; when the
// named node is down they go through another node, see drain). It exits
// when the lane holds nothing.
//
// A held publish keeps its window place, so the window bounds what lanes
// hold. Its deadline completes it where it is (expirePublish), and its
// completion takes it out of the lane (release); so does Close.
//
// States of a lane: direct (unresolved publishes on conn, nothing held),
// holding (held non-empty, a drainer runs), awaiting (holding refused
// publishes whose redirect has not come). A lane with nothing unresolved
// or held is forgotten.
//
// Invariants: len(held) > 0 implies draining, and while a drainer runs
// it alone hands the lane's publishes over (so nothing overtakes its
// batch); held is sorted by publish number; every counted publish is
// counted once, on its lane's conn; a publish is held or counted, never
// both. Lock order: laneSet.mu, then a future's mu; nothing is completed,
// and no route is looked up, under laneSet.mu.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// errStopped: a wait ended because the publish it was for completed (its
// deadline passed); the publish's outcome is on its future.
var errStopped = errors.New("client: the publish completed while it waited")

type laneSet struct {
	mu      sync.Mutex
	byQueue map[string]*lane
	closed  bool // Close: no drainer starts any more
}

type lane struct {
	queue      string
	conn       *conn            // the connection its unresolved publishes were handed to
	unresolved int              // publishes handed to conn, not yet answered
	held       []*PublishFuture // waiting to go out, by publish number
	awaiting   *conn            // refused publishes wait for this connection's redirect; nil: none
	// target is where the held publishes go while refused ones are among
	// them: the node their redirect named; nil: the queue's route.
	target *link
	// resumeAt paces held publishes sent back to a node that refused them
	// with unavailable in their round, because another node's redirect
	// names it (an owner still taking the queue over): the drainer sends
	// them no earlier. Zero: no pause.
	resumeAt time.Time
	draining bool          // a drainer runs
	changed  chan struct{} // while draining: closed and replaced when the drainer should look again
}

func newLaneSet() laneSet { return laneSet{byQueue: make(map[string]*lane)} }

// laneLocked returns the queue's lane, making one when it has none.
func (s *laneSet) laneLocked(queue string) *lane {
	l := s.byQueue[queue]
	if l == nil {
		l = &lane{queue: queue}
		s.byQueue[queue] = l
	}
	return l
}

// signalLocked wakes the lane's drainer, if it has one.
func (l *lane) signalLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// forgetIfIdleLocked drops a lane that has nothing in flight.
func (s *laneSet) forgetIfIdleLocked(l *lane) {
	if l.unresolved == 0 && len(l.held) == 0 && !l.draining && s.byQueue[l.queue] == l {
		delete(s.byQueue, l.queue)
	}
}

// holdLocked puts a publish in the lane's held list, in publish number
// order, and starts the drainer when none runs. It reports what became of
// the publish: held, done already (nothing to do), expired (its deadline
// passed while it was sent: the caller completes it with
// ErrPublishTimeout), or closed (the caller completes it with ErrClosed).
func (c *Client) holdLocked(l *lane, future *PublishFuture) holdOutcome {
	future.mu.Lock()
	switch {
	case future.phase == phaseDone:
		future.mu.Unlock()
		return holdDone
	case future.expired:
		future.phase = phaseDone
		future.mu.Unlock()
		return holdExpired
	case c.lanes.closed:
		future.phase = phaseDone
		future.mu.Unlock()
		return holdClosed
	}
	future.phase, future.conn = phaseHeld, nil
	future.mu.Unlock()
	at, _ := slices.BinarySearchFunc(l.held, future.seq, func(f *PublishFuture, seq uint64) int { return compareUint64(f.seq, seq) })
	l.held = slices.Insert(l.held, at, future)
	future.lane, future.held = l, true
	if !l.draining {
		l.draining, l.changed = true, make(chan struct{})
		c.resending.Add(1)
		go c.drain(l)
	}
	return holdOK
}

type holdOutcome uint8

const (
	holdOK holdOutcome = iota
	holdDone
	holdExpired
	holdClosed
)

// finishUnheld completes a publish holdLocked did not hold.
func (c *Client) finishUnheld(future *PublishFuture, outcome holdOutcome) {
	switch outcome {
	case holdExpired:
		c.complete(future, Confirm{Err: ErrPublishTimeout})
	case holdClosed:
		c.complete(future, Confirm{Err: ErrClosed})
	}
}

// sendInOrder hands a new publish to the connection that serves its
// queue, or holds it behind the publishes of its queue that must go
// first. It waits for a connection (bounded by ctx and by the publish's
// deadline) only when nothing of its queue is held.
func (c *Client) sendInOrder(ctx context.Context, future *PublishFuture) error {
	target := c.linkFor(future.queue)
	connection := target.live()
	if connection == nil || connection.isDead() {
		if c.holdIfBusy(future) {
			return nil
		}
		var err error
		if connection, err = target.connectionUntil(ctx, future.done); err != nil {
			return err
		}
	}
	if c.holdOrCount(future, connection) {
		return nil
	}
	return c.handOver(ctx, future, connection)
}

// holdIfBusy holds the publish when its lane's drainer runs (it holds
// publishes, or is handing some over).
func (c *Client) holdIfBusy(future *PublishFuture) bool {
	c.lanes.mu.Lock()
	l := c.lanes.byQueue[future.queue]
	if l == nil || !l.draining {
		c.lanes.mu.Unlock()
		return false
	}
	outcome := c.holdLocked(l, future)
	c.lanes.forgetIfIdleLocked(l)
	c.lanes.mu.Unlock()
	c.finishUnheld(future, outcome)
	return true
}

// holdOrCount holds the publish when anything of its queue must go out
// before it on another connection, or its queue is fenced on connection
// (the drainer resumes it, fence.go), and otherwise counts it as
// unresolved on connection, where the caller sends it.
func (c *Client) holdOrCount(future *PublishFuture, connection *conn) bool {
	c.lanes.mu.Lock()
	l := c.lanes.laneLocked(future.queue)
	if l.draining || (l.unresolved > 0 && l.conn != connection) || connection.fencedLocked(future.queue) {
		outcome := c.holdLocked(l, future)
		c.lanes.forgetIfIdleLocked(l)
		c.lanes.mu.Unlock()
		c.finishUnheld(future, outcome)
		return true
	}
	l.conn = connection
	l.unresolved++
	future.lane, future.counted = l, true
	c.lanes.mu.Unlock()
	return false
}

// handOver puts a publish in the connection's outbox; errStopped when the
// publish completed (its deadline) while it waited for room.
func (c *Client) handOver(ctx context.Context, future *PublishFuture, connection *conn) error {
	if c.publishFrameOverhead()+len(future.queue)+future.encodedBytes > int(connection.peerMaxBody) {
		return ErrMessageTooLarge
	}
	return connection.enqueueUntil(ctx, outbound{publish: future}, future.done)
}

// release takes a completed publish, or one handed to a retry, out of its
// lane: it is no longer unresolved there, nor held.
func (c *Client) release(future *PublishFuture) {
	c.lanes.mu.Lock()
	defer c.lanes.mu.Unlock()
	l := future.lane
	if l == nil {
		return
	}
	leaveLaneLocked(future)
	if future.held {
		future.held = false
		if at := slices.Index(l.held, future); at >= 0 {
			l.held = slices.Delete(l.held, at, at+1)
		}
	}
	l.signalLocked()
	c.lanes.forgetIfIdleLocked(l)
}

// leaveLaneLocked takes a publish out of its lane's count of unresolved
// publishes (when it was counted) and off the lane. Call it with the lanes'
// lock held.
func leaveLaneLocked(future *PublishFuture) {
	if future.counted {
		future.counted = false
		future.lane.unresolved--
		if future.lane.unresolved < 0 {
			panic("client: a lane released more publishes than it counted")
		}
	}
	future.lane = nil
}

// refuse holds publishes a connection refused with not_owner (they were
// not stored) until the redirect names their queue's owner, or sends them
// there when a route already names another node. A publish past its
// redirect budget fails with ErrTooManyRedirects.
func (c *Client) refuse(connection *conn, queue string, futures []*PublishFuture) {
	routed := c.routedLink(queue)
	var overBudget []*PublishFuture
	var unheld []*PublishFuture
	var outcomes []holdOutcome
	held := false
	c.lanes.mu.Lock()
	l := c.lanes.laneLocked(queue)
	for _, future := range futures {
		leaveLaneLocked(future)
		if future.rerouted {
			future.rerouted = false // a detour around a node that is down (drain)
		} else {
			future.redirects++
		}
		if future.redirects > c.options.MaxRedirects {
			overBudget = append(overBudget, future)
			continue
		}
		if outcome := c.holdLocked(l, future); outcome != holdOK {
			unheld, outcomes = append(unheld, future), append(outcomes, outcome)
			continue
		}
		future.refusedBy, held = connection, true
	}
	switch {
	case !held:
	case routed != nil && routed != connection.link:
		l.target, l.awaiting = routed, nil // the redirect came first
	default:
		l.awaiting = connection
	}
	l.signalLocked()
	c.lanes.forgetIfIdleLocked(l)
	c.lanes.mu.Unlock()
	for _, future := range overBudget {
		c.finishPublish(future, Confirm{Err: fmt.Errorf("%w: queue %q", ErrTooManyRedirects, queue)})
	}
	for i, future := range unheld {
		c.finishUnheld(future, outcomes[i])
	}
}

// refuseUnavailable holds publishes a connection refused with unavailable
// or fenced (they were not stored) and lets its drainer send them, ahead
// of the queue's later publishes, to the node the queue is detoured to
// (detour.go). A publish refused by every node the Client knows (its
// round is done), or refused where no other node is known, fails with
// refusal.
func (c *Client) refuseUnavailable(connection *conn, queue string, futures []*PublishFuture, refusal *ServerError) {
	next := c.avoid(queue, connection)
	nodes := c.knownNodes()
	var failed, unheld []*PublishFuture
	var outcomes []holdOutcome
	c.lanes.mu.Lock()
	l := c.lanes.laneLocked(queue)
	for _, future := range futures {
		leaveLaneLocked(future)
		future.refusedAt, future.refusals = noteRefusal(future.refusedAt, connection.session.Address), future.refusals+1
		if next == nil || next == connection.link || roundDone(future.refusedAt, future.refusals, nodes) {
			failed = append(failed, future)
			continue
		}
		if outcome := c.holdLocked(l, future); outcome != holdOK {
			unheld, outcomes = append(unheld, future), append(outcomes, outcome)
			continue
		}
		// A detour: the not_owner the next node may answer with, naming
		// the node that refused (an owner taking the queue over), is not
		// a disagreement between nodes and does not count against
		// MaxRedirects; the round (roundDone) bounds these refusals.
		future.refusedBy, future.rerouted = connection, true
	}
	if l.target == connection.link {
		l.target = nil // sent there after a redirect: they go the queue's way now
	}
	l.resumeAt = time.Time{}
	l.signalLocked()
	c.lanes.forgetIfIdleLocked(l)
	c.lanes.mu.Unlock()
	for _, future := range failed {
		if next == nil {
			c.finishPublish(future, Confirm{Err: ErrClosed})
		} else {
			c.finishPublish(future, Confirm{Err: refusal})
		}
	}
	for i, future := range unheld {
		c.finishUnheld(future, outcomes[i])
	}
}

// redirected tells the lane of queue that connection's redirect named
// target: the publishes it refused go there (also when a route known at
// the refusal had sent them elsewhere: the redirect is newer). A redirect back to the node
// that refused them fails them with refusal; once the Client is closed
// (target nil) they fail with ErrClosed.
func (c *Client) redirected(connection *conn, queue string, target *link, refusal error) {
	var failed []*PublishFuture
	targetAddress := ""
	if target != nil {
		targetAddress = target.address()
	}
	c.lanes.mu.Lock()
	l := c.lanes.byQueue[queue]
	refusedHere := func(f *PublishFuture) bool { return f.refusedBy == connection }
	if l == nil || (l.awaiting != connection && !slices.ContainsFunc(l.held, refusedHere)) {
		c.lanes.mu.Unlock()
		return
	}
	if l.awaiting == connection {
		l.awaiting = nil
	}
	if target == nil {
		refusal = ErrClosed
	}
	if target == nil || target == connection.link {
		kept := l.held[:0]
		for _, future := range l.held {
			if refusedHere(future) {
				future.lane, future.held = nil, false
				failed = append(failed, future)
			} else {
				kept = append(kept, future)
			}
		}
		clear(l.held[len(kept):])
		l.held = kept
	} else {
		l.target = target
		l.resumeAt = c.resumeAtLocked(l, targetAddress, refusedHere)
	}
	l.signalLocked()
	c.lanes.mu.Unlock()
	for _, future := range failed {
		c.finishHeld(future, Confirm{Err: refusal})
	}
}

// resumeAtLocked is when publishes a redirect sends to the node at address
// may go: at once, unless that node refused one of them with unavailable
// in its round (it is named the owner, but is still taking the queue
// over, or has not heard that it lost it); then after a backoff that grows
// with the publish's refusals (Options.Backoff), so that a node which
// refuses and a node which redirects to it do not bounce the publishes
// between them as fast as the network allows. The round (roundDone) still
// ends them once they have been refused often enough.
func (c *Client) resumeAtLocked(l *lane, address string, refusedHere func(*PublishFuture) bool) time.Time {
	if address == "" {
		return time.Time{}
	}
	refusals := 0
	for _, future := range l.held {
		if refusedHere(future) && slices.Contains(future.refusedAt, address) {
			refusals = max(refusals, future.refusals)
		}
	}
	if refusals == 0 {
		return time.Time{}
	}
	options := c.options.Backoff
	return time.Now().Add(backoffDelay(refusals-1, options.Initial, options.Max, c.randomFloat))
}

// connectionEnded lets the publishes a connection refused go on without
// its redirect: to wherever their queue is routed now.
//
// A lane whose queue the ended connection had fenced (fence.go) fails what
// it holds with the connection's error: those publishes were held for
// that connection's answers, which its end turned into failures, so they
// fail with the publishes sent before them, as they would have had the
// fence not held them back, and the application sends them again in its
// own order. Held on, they would wait for a reconnect that may be long in
// coming, while everything sent before them has already failed.
func (c *Client) connectionEnded(connection *conn) {
	var failed []*PublishFuture
	c.lanes.mu.Lock()
	for _, l := range c.lanes.byQueue {
		if l.awaiting == connection {
			l.awaiting, l.target = nil, nil
			l.signalLocked()
		}
		if connection.fencedLocked(l.queue) && len(l.held) > 0 {
			failed = append(failed, c.takeHeldLocked(l)...)
			l.signalLocked()
		}
	}
	c.lanes.mu.Unlock()
	err := connection.failure
	if err == nil {
		err = ErrConnectionLost
	}
	for _, future := range failed {
		c.finishHeld(future, Confirm{Err: err})
	}
}

// finishHeld completes a publish taken out of a lane, unless its deadline
// completed it first.
func (c *Client) finishHeld(future *PublishFuture, result Confirm) {
	future.mu.Lock()
	if future.phase == phaseDone {
		future.mu.Unlock()
		return
	}
	future.phase = phaseDone
	future.mu.Unlock()
	c.complete(future, result)
}

// drain is a lane's drainer: it sends the held publishes out, in order, as
// the file comment says, and returns when the lane holds nothing.
//
// While refused publishes are held, they go to the node their redirect
// named. While that node's connection is down and no attempt to get it
// back has failed yet, the drainer waits (without WaitForReconnect it
// fails only the refused ones, with ErrConnectionLost). Once an attempt
// has failed, the node is down, and the node that redirected there has
// not heard so: the refused publishes go through the next node the
// Client knows instead (detourAround: the redirecting node is avoided for
// the queue, as one that refused it is, detour.go), which serves the
// queue, redirects to the owner it knows, or refuses. When every node of
// their round has named a node that is down, they wait for that node's
// next failed attempt (its reconnect backoff paces the rounds) and then
// go wherever the queue is routed (home, or a detour), a new round;
// without WaitForReconnect they fail with ErrConnectionLost instead.
// Neither the detours nor the rounds count against MaxRedirects; every
// publish's deadline ends its wait.
func (c *Client) drain(l *lane) {
	defer c.resending.Done()
	var lostLink *link            // the named node, when it was seen down
	var lostSince <-chan struct{} // its change channel then: closed once it failed again
	for {
		changed, named, awaiting, resumeAt, running := c.drainLook(l)
		if !running {
			return
		}
		if awaiting {
			c.awaitChange(changed, nil)
			continue
		}
		if wait := time.Until(resumeAt); wait > 0 {
			c.awaitChangeFor(changed, wait)
			continue
		}
		target := named
		if target == nil {
			target = c.linkFor(l.queue)
		}
		connection, linkChanged, err := target.poll()
		switch {
		case connection == nil && named != nil && target.unreachable():
			if lostLink != target && c.detourAround(l, target) {
				continue // on to another node the Client knows
			}
			// Every node of the round named a node that is down (or is).
			if !c.options.WaitForReconnect {
				c.failHeld(l, target.failure(), true)
				continue
			}
			if lostLink == target && isClosed(lostSince) {
				c.reroute(l, target)
				lostLink, lostSince = nil, nil
				continue
			}
			if lostLink != target {
				lostLink, lostSince = target, linkChanged
			}
			c.awaitChange(changed, linkChanged)
			continue
		case err != nil:
			c.failHeld(l, err, named != nil)
			continue
		case connection == nil && named == nil && target.unreachable():
			// The queue's own node is down (an attempt to get it back
			// failed). What the lane holds were publishes already: they
			// fail as the ones sent on the lost connection did, and the
			// application sends them again in its own order
			// (WaitForReconnect makes only a Publish call made while no
			// connection is up wait, before it becomes a future). Held on,
			// they would wait out a node that may stay down.
			c.failHeld(l, target.failure(), false)
			continue
		case connection == nil:
			c.awaitChange(changed, linkChanged)
			continue
		}
		lostLink, lostSince = nil, nil
		batch, resume, ready := c.takeBatch(l, changed, connection)
		if !ready {
			c.awaitChange(changed, nil)
			continue
		}
		if resume {
			// Ahead of the batch: the node serves the queue's publishes on
			// this connection again from here on (fence.go). Should it
			// fail, the connection is gone and so is the batch.
			_ = connection.enqueueUntil(c.ctx, resumeFrame(l.queue), nil)
		}
		for _, future := range batch {
			if err := c.handOver(c.ctx, future, connection); err != nil {
				if c.isClosed() {
					err = ErrClosed
				}
				c.finishQueued(future, Confirm{Err: err})
			}
		}
	}
}

// drainLook is where each round of a drainer begins: it returns what the
// drainer waits on and where the held publishes go (the named node, or
// nil: the queue's route), and false when the drainer is done (the lane
// holds nothing, or the Client closed: what it held fails with
// ErrClosed).
func (c *Client) drainLook(l *lane) (changed <-chan struct{}, named *link, awaiting bool, resumeAt time.Time, running bool) {
	c.lanes.mu.Lock()
	if len(l.held) == 0 || c.isClosed() {
		held := c.takeHeldLocked(l)
		l.draining, l.awaiting, l.target, l.changed, l.resumeAt = false, nil, nil, nil, time.Time{}
		c.lanes.forgetIfIdleLocked(l)
		c.lanes.mu.Unlock()
		for _, future := range held {
			c.finishHeld(future, Confirm{Err: ErrClosed})
		}
		return nil, nil, false, time.Time{}, false
	}
	if l.target != nil && !slices.ContainsFunc(l.held, isRefused) {
		// The refused publishes ended (their deadlines): the rest were
		// never refused and go wherever their queue is routed now.
		l.target, l.resumeAt = nil, time.Time{}
	}
	changed, named, awaiting, resumeAt = l.changed, l.target, l.awaiting != nil, l.resumeAt
	c.lanes.mu.Unlock()
	return changed, named, awaiting, resumeAt, true
}

func isRefused(f *PublishFuture) bool { return f.refusedBy != nil }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// failHeld fails the held publishes with err: the refused ones only when
// err is about the node their redirect named (the others go on to the
// queue's route).
func (c *Client) failHeld(l *lane, err error, onlyRefused bool) {
	var failed []*PublishFuture
	c.lanes.mu.Lock()
	if onlyRefused {
		kept := l.held[:0]
		for _, future := range l.held {
			if isRefused(future) {
				future.lane, future.held, future.refusedBy = nil, false, nil
				failed = append(failed, future)
			} else {
				kept = append(kept, future)
			}
		}
		clear(l.held[len(kept):])
		l.held = kept
	} else {
		failed = c.takeHeldLocked(l)
	}
	c.lanes.mu.Unlock()
	for _, future := range failed {
		c.finishHeld(future, Confirm{Err: err})
	}
}

// detourAround sends the refused publishes to the next node the Client
// knows instead of the node their redirect named, which is down (see
// drain): the nodes that redirected them there are avoided for the queue,
// as refusing nodes are (detour.go), and each publish's round counts them
// and the node that is down. It reports false when the round of any of
// them is over (no other node is left to ask: the drainer then waits for
// the named node's next attempt); the refusal the detour may meet is not
// counted against MaxRedirects.
func (c *Client) detourAround(l *lane, down *link) bool {
	c.lanes.mu.Lock()
	if l.target != down {
		c.lanes.mu.Unlock()
		return true // changed meanwhile: look again
	}
	var by []*conn
	for _, future := range l.held {
		if isRefused(future) && !slices.Contains(by, future.refusedBy) {
			by = append(by, future.refusedBy)
		}
	}
	c.lanes.mu.Unlock()
	next := c.avoidAround(l.queue, by, down)
	if next == nil {
		return true // closed: the drainer's next look ends it
	}
	c.lanes.mu.Lock()
	if l.target != down {
		c.lanes.mu.Unlock()
		return true
	}
	var rounds [][]string
	var counts []int
	for _, future := range l.held {
		if isRefused(future) {
			future.refusedAt, future.refusals = noteUnreachable(future.refusedAt, future.refusals,
				[]string{future.refusedBy.session.Address}, down)
			rounds, counts = append(rounds, slices.Clone(future.refusedAt)), append(counts, future.refusals)
		}
	}
	c.lanes.mu.Unlock()
	for i := range rounds {
		if !c.roundGoesOn(rounds[i], counts[i], next, down) {
			return false
		}
	}
	c.lanes.mu.Lock()
	defer c.lanes.mu.Unlock()
	if l.target == down {
		l.target = nil
		for _, future := range l.held {
			if isRefused(future) {
				future.rerouted = true
			}
		}
	}
	return true
}

// reroute sends the refused publishes to the queue's route instead of the
// node their redirect named, which is down, once every node of their
// round named a node that is down and that node has failed one more
// connection attempt (see drain): a new round begins. The refusal the
// detour may meet is not counted against MaxRedirects.
func (c *Client) reroute(l *lane, down *link) {
	c.lanes.mu.Lock()
	defer c.lanes.mu.Unlock()
	if l.target != down {
		return
	}
	l.target = nil
	for _, future := range l.held {
		if isRefused(future) {
			future.rerouted = true
			future.refusedAt, future.refusals = nil, 0
		}
	}
}

// awaitChange waits for the lane (or the link) to change, or the Client
// to close.
func (c *Client) awaitChange(lane, link <-chan struct{}) {
	select {
	case <-lane:
	case <-link:
	case <-c.ctx.Done():
	}
}

// awaitChangeFor waits for the lane to change, the Client to close, or
// wait to pass.
func (c *Client) awaitChangeFor(lane <-chan struct{}, wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-lane:
	case <-timer.C:
	case <-c.ctx.Done():
	}
}

// takeBatch takes every held publish to send on connection, counting them
// there, unless something must happen first (a redirect to wait for,
// publishes unresolved on another connection, or on this one while the
// queue is fenced here, or a change since the drainer looked). resume says
// the queue is fenced on connection: the batch goes right after a resume,
// and the mark is cleared.
func (c *Client) takeBatch(l *lane, looked <-chan struct{}, connection *conn) (batch []*PublishFuture, resume, ready bool) {
	c.lanes.mu.Lock()
	defer c.lanes.mu.Unlock()
	fenced := connection.fencedLocked(l.queue)
	if l.changed != looked || l.awaiting != nil || (l.unresolved > 0 && (l.conn != connection || fenced)) {
		return nil, false, false
	}
	batch = make([]*PublishFuture, 0, len(l.held))
	for _, future := range l.held {
		future.held, future.refusedBy = false, nil
		future.mu.Lock()
		if future.phase == phaseDone {
			future.mu.Unlock()
			future.lane = nil // completing: its release finds nothing to do
			continue
		}
		future.phase = phaseQueued
		future.mu.Unlock()
		future.counted = true
		l.unresolved++
		batch = append(batch, future)
	}
	clear(l.held)
	l.held = l.held[:0]
	l.conn, l.target, l.resumeAt = connection, nil, time.Time{}
	if fenced && len(batch) > 0 {
		delete(connection.fenced, l.queue)
		resume = true
	}
	return batch, resume, true
}

// takeHeldLocked empties the lane's held list and returns what was in it.
func (c *Client) takeHeldLocked(l *lane) []*PublishFuture {
	held := l.held
	l.held = nil
	for _, future := range held {
		future.lane, future.held, future.refusedBy = nil, false, nil
	}
	return held
}

// closeLanes stops drainers from starting (Close, before it waits for the
// running ones, which fail what they hold with ErrClosed).
func (c *Client) closeLanes() {
	c.lanes.mu.Lock()
	c.lanes.closed = true
	for _, l := range c.lanes.byQueue {
		l.signalLocked()
	}
	c.lanes.mu.Unlock()
}
