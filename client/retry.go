package client

// Retrying publishes whose outcome is unknown (Options.RetryUnknownPublishes).
//
// When a connection ends, the publishes it had sent and not yet heard about
// may or may not have been stored. Sending one again is safe only when the
// queue will not store a second copy: the publish carries a dedup key (the
// Client's producer pair, or the caller's message id) and its queue has a
// dedup window that has not passed since the publish was first sent. The
// connection hands such publishes here instead of failing them; one
// goroutine per ended connection waits for the link's next connection,
// asks each queue's info for its window, and sends again the publishes the
// window still covers (with new wire sequence numbers, the same producer
// pair and id). The rest fail with the connection's error, as without the
// option. A queue that had stored the first copy confirms the retry as a
// duplicate; one that had not stores it now.
//
// Invariant: a publish handed here is completed exactly once: by the
// retry's own connection (its confirm or its failure), by its deadline, or
// here (window passed, no dedup, Client closed).

import (
	"context"
	"errors"
	"time"
)

// maxPublishRetries bounds how often one publish is sent again.
const maxPublishRetries = 16

// mayRetry reports whether a publish whose connection ended may be sent
// again under the Client's options (the queue's window is checked later).
func (c *Client) mayRetry(future *PublishFuture) bool {
	return c.options.RetryUnknownPublishes && future.retries < maxPublishRetries &&
		(c.producerID != "" || len(future.messageID) > 0)
}

// splitRetries returns the publishes to fail now, and starts retrying the
// others on l once it reconnects.
func (c *Client) splitRetries(l *link, futures []*PublishFuture, cause error) []*PublishFuture {
	if !c.options.RetryUnknownPublishes || l == nil || c.isClosed() || errors.Is(cause, ErrClosed) {
		return futures
	}
	var fail, retry []*PublishFuture
	for _, future := range futures {
		if c.mayRetry(future) {
			retry = append(retry, future)
		} else {
			fail = append(fail, future)
		}
	}
	for _, future := range retry {
		c.release(future) // out of its lane: a retry may be stored after later publishes
	}
	if len(retry) > 0 {
		c.resending.Add(1)
		go c.retryUnknown(l, retry, cause)
	}
	return fail
}

// retryUnknown waits for l's next connection and sends the publishes again
// where their queue's window allows; it fails the others with cause.
func (c *Client) retryUnknown(l *link, futures []*PublishFuture, cause error) {
	defer c.resending.Done()
	windows := map[string]time.Duration{}
	for _, future := range futures {
		if !c.becomeRequeued(future) {
			continue // done, or its deadline passed
		}
		window, known := windows[future.queue]
		if !known {
			window = c.dedupWindowOf(future.queue)
			windows[future.queue] = window
		}
		if window <= 0 || time.Since(future.firstSent) >= window/2 {
			if c.isClosed() {
				c.finishQueued(future, Confirm{Err: ErrClosed})
			} else {
				c.finishQueued(future, Confirm{Err: cause})
			}
			continue
		}
		future.retries++
		if err := c.sendPublish(c.ctx, future, c.linkFor(future.queue)); err != nil {
			if errors.Is(err, ErrConnectionLost) && c.mayRetry(future) {
				// The new connection ended too: the next round takes it.
				c.resending.Add(1)
				go c.retryUnknown(l, []*PublishFuture{future}, cause)
				continue
			}
			c.finishQueued(future, Confirm{Err: err})
		}
	}
}

// dedupWindowOf waits for the link that serves the queue now to be
// connected and reads the queue's dedup window from its info; 0 when the queue does not deduplicate, or
// when the info cannot be had (the Client closed, the queue is gone).
func (c *Client) dedupWindowOf(queue string) time.Duration {
	ctx, cancel := context.WithTimeout(c.ctx, retryInfoTimeout)
	defer cancel()
	for ctx.Err() == nil {
		// The queue's current link: a route whose node is gone is dropped
		// (the queue may have failed over), so this asks home instead.
		if err := c.linkFor(queue).awaitConnected(ctx); err != nil {
			return 0
		}
		info, err := c.QueueInfo(ctx, queue)
		switch {
		case err == nil:
			return time.Duration(info.Options.DedupWindowMs) * time.Millisecond
		case !errors.Is(err, ErrConnectionLost):
			return 0
		}
	}
	return 0
}

// retryInfoTimeout bounds the wait for a reconnect and the queue's info
// before a retry is given up.
const retryInfoTimeout = 30 * time.Second

// awaitConnected waits until the link has a live connection.
func (l *link) awaitConnected(ctx context.Context) error {
	for {
		l.mu.Lock()
		current, changed := l.current, l.changed
		l.mu.Unlock()
		if current != nil && !current.isDead() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// becomeRequeued moves a publish its ended connection handed over back to
// the queued phase, so that its deadline timer, a new writer or this file
// may complete it; false when it is done already, or when its deadline
// passed meanwhile (it is then completed here with ErrPublishTimeout: the
// timer found it in no pending table).
func (c *Client) becomeRequeued(f *PublishFuture) bool {
	f.mu.Lock()
	switch {
	case f.phase == phaseDone:
		f.mu.Unlock()
		return false
	case f.expired:
		f.phase = phaseDone
		f.mu.Unlock()
		c.complete(f, Confirm{Err: ErrPublishTimeout})
		return false
	}
	f.phase, f.conn = phaseQueued, nil
	f.mu.Unlock()
	return true
}
