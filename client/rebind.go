package client

// Rebinding a subscription after its connection ended. The link's
// supervisor calls startRebind for every subscription not bound to the
// connection it just made; one loop per subscription then subscribes
// again through the link, and retries with the Client's backoff after
// anything retryable (a timeout, a lost connection, unavailable) until it
// is bound to the link's live connection, the subscription ends or drains,
// or the Client closes. A node that answers unavailable or fenced is
// avoided for the queue as for publishes (detour.go): the subscribe goes
// to the next node the Client knows, which serves the queue or redirects
// to its owner, and the loop's next attempt goes where the queue is
// detoured. A node that redirects the subscribe to a node that is down
// (a connection attempt to it failed) is passed the same way within
// roundTrip. A refusal that cannot succeed later (unknown_queue, for
// example) ends the subscription with that error.
//
// Invariant: at most one loop runs per subscription (rebinding), and it
// leaves only under s.mu after seeing the subscription bound to a live
// connection, ended, or draining, so a connection that fails after a
// successful rebind is never missed: either the loop sees it, or the
// supervisor's next pass starts a new loop.

import (
	"context"
	"errors"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// startRebind starts the subscription's rebind loop on l, or, when one
// runs, tells it to try again now.
func (s *Subscription) startRebind(l *link) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	if s.rebinding {
		s.mu.Unlock()
		select {
		case s.rebindNow <- struct{}{}:
		default:
		}
		return
	}
	s.rebinding = true
	s.mu.Unlock()
	go s.rebind(l)
}

func (s *Subscription) rebind(l *link) {
	client := s.client
	failures := 0
	for {
		if done, target := s.maybeStopRebinding(l); done {
			if target != nil {
				target.forget(s)
			}
			return
		}
		ctx, cancel := context.WithTimeout(client.ctx, client.options.DialTimeout)
		b, err := s.subscribeOn(ctx, l)
		cancel()
		switch {
		case err == nil:
			if !s.attach(b) {
				continue // ended meanwhile: the next turn sees it
			}
			if target := b.conn.link; target != l {
				l.forget(s) // redirected to the queue's owner
				l = target
			}
			l.adopt(s, b, true)
			failures = 0
			continue // the next turn leaves if the binding is live
		case client.isClosed() || errors.Is(err, ErrClosed):
			continue
		case !IsRetryable(err) && !errors.Is(err, context.DeadlineExceeded):
			l.forget(s)
			s.finish(err)
			continue
		case refusesService(CodeOf(err)):
			// Every node roundTrip tried cannot serve the queue now: the
			// next attempt, after the backoff, goes wherever the queue is
			// detoured (detour.go), or back to its route once that lapses.
			if next := client.linkFor(s.queue); next != l {
				l.forget(s)
				l = next
			}
		case l != client.home && (errors.Is(err, ErrConnectionLost) || CodeOf(err) == wire.CodeNotOwner):
			// The queue's owner went away or moved: ask where it lives now,
			// soon (the first backoff step), since the cluster is moving it.
			l.forget(s)
			l = client.dropRoute(s.queue, l)
			failures = 0
		}
		delay := backoffDelay(failures, client.options.Backoff.Initial, client.options.Backoff.Max, client.randomFloat)
		failures++
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-s.rebindNow:
		case <-s.ending:
		case <-client.ctx.Done():
		}
		timer.Stop()
	}
}

// maybeStopRebinding decides, under s.mu, whether the loop is done: the
// subscription is bound to a live connection of l, or ended, or drains,
// or the Client closed. On leaving it clears rebinding; target is the
// link to forget the subscription on, if any.
//
// l's connection is read before s.mu is taken (link locks come first, see
// link.adopt); the binding's connection is checked alive under s.mu, and
// the supervisor calls startRebind only after that connection died.
func (s *Subscription) maybeStopRebinding(l *link) (done bool, target *link) {
	current := l.live()
	s.mu.Lock()
	defer s.mu.Unlock()
	bound := s.binding != nil && s.binding.conn == current && !current.isDead() && !s.binding.ended.Load()
	switch {
	case s.ended, s.client.isClosed():
		s.rebinding = false
		return true, l
	case s.draining.Load():
		s.rebinding = false
		return true, l // Drain ends it; nothing more is delivered
	case bound:
		s.rebinding = false
		return true, nil
	}
	return false, nil
}
