package client

// Detours steer a queue's traffic around a node that cannot serve it.
//
// A node that answers a request or a publish for a queue with unavailable
// (211) or fenced (206) carried nothing out (docs/protocol.md: a
// negatively confirmed message was not stored). In a cluster it may be an
// owner cut off from its peers, which cannot confirm and, not hearing of
// the new epoch, does not redirect; its peers meanwhile elect another
// owner and redirect to it. So the SDK stops sending the queue's traffic
// to that node for a while (the avoidance period, Options.Backoff.Max)
// and sends it through another node it knows: the configured addresses,
// then the nodes redirects named, in the order learned. That node serves
// the queue, or redirects to the owner it knows (a redirect to an older
// epoch than one followed is not followed, learnRoute), or refuses too
// and is avoided in turn. The next node is the first one, after the one
// chosen last, that is not avoided and not down; when every one is, the
// one avoided longest ago (after a full round the first comes back).
//
// A node that redirects a queue's request or publish to a node the Client
// cannot reach (its link has no connection and a connect attempt failed:
// link.unreachable; a slow node keeps its connection and is not passed
// over) is treated the same way: it has not heard that the node it names
// lost power, while another node may have (the new owner itself, or a
// node that redirects to it). Its route is dropped, the redirecting node
// is avoided for the queue, and the request or publish goes to the next
// node (passUnreachable; lane.go's detourAround for held publishes); its
// round counts both nodes.
//
// A detour is temporary: it lapses with the avoidance that caused it (the
// queue's traffic then goes to its route, or home, again), and it ends
// when a redirect for the queue is followed or its node stops answering.
// What is re-sent through it: a refused publish, to the next node, until
// every node the SDK knows has refused it (then it fails with the last
// refusal, retryable; the application's retry goes to the node chosen
// next); a request, within roundTrip, the same way. A round that ends
// because every node named a node that is down does not fail a publish
// of a Client that waits for reconnects: it waits for that node's next
// failed attempt and begins again (lane.go, drain); a request fails with
// ErrConnectionLost and a resubscribe tries again after its backoff.
// Nothing spins: each refusal moves to another node, and a round ends
// (roundDone: a node whose avoidance lapsed while the publish waited may
// refuse it once more, so the round also ends at twice as many refusals
// as nodes; roundGoesOn: or when the next node is down or in the round).
//
// State per queue, guarded by Client.routesMu: the detour link and when
// it lapses, the avoided addresses with when each avoidance ends, and the
// rotation's next index into Client.known. A queue's entry is dropped
// when it has neither a detour nor an avoidance in force.
//
// Invariant: a detour's link is never the link the queue's route (or
// home) gives; Client.known holds each address once.

import (
	"slices"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

type detour struct {
	link    *link                // where the queue's traffic goes until until; nil: none
	until   time.Time            // when link lapses
	avoided map[string]time.Time // addresses that refused the queue, until when
	next    int                  // where the next choice in Client.known starts
}

// refusesService reports whether a node's refusal with code means it
// cannot serve the queue right now, so that another node may.
func refusesService(code wire.Code) bool {
	return code == wire.CodeUnavailable || code == wire.CodeFenced
}

// avoidancePeriod is how long a node that refused a queue is not sent
// that queue's traffic.
func (c *Client) avoidancePeriod() time.Duration { return c.options.Backoff.Max }

// roundDone reports whether a publish or request refused by the nodes at
// refusedAt (each address once), refusals times in all, has had its
// round: every known node refused it, or (a node whose avoidance lapsed
// may refuse it again) it was refused twice as often as there are nodes.
func roundDone(refusedAt []string, refusals, nodes int) bool {
	return len(refusedAt) >= nodes || refusals >= 2*nodes
}

// noteRefusal adds address to refusedAt unless it is there.
func noteRefusal(refusedAt []string, address string) []string {
	if slices.Contains(refusedAt, address) {
		return refusedAt
	}
	return append(refusedAt, address)
}

// passUnreachable handles a redirect for queue, given by the nodes behind
// by, to down, a node the Client cannot reach (link.unreachable). Those
// nodes have not heard that it is down (one that has holds the request
// until the new owner serves, then redirects there), but another node may
// have: so the route to down is dropped, each of them is avoided for the
// queue as one that refused it, and the round (refusedAt, refusals)
// counts them and down. It returns the node to ask next and the round;
// no node when the round is over (the next node is down too, or already
// in the round, or every known node is) or the Client closed.
func (c *Client) passUnreachable(queue string, by []*conn, down *link, refusedAt []string, refusals int) (*link, []string, int) {
	next := c.avoidAround(queue, by, down)
	var byAddresses []string
	for _, refusing := range by {
		byAddresses = append(byAddresses, refusing.session.Address)
	}
	refusedAt, refusals = noteUnreachable(refusedAt, refusals, byAddresses, down)
	if !c.roundGoesOn(refusedAt, refusals, next, down) {
		return nil, refusedAt, refusals
	}
	return next, refusedAt, refusals
}

// avoidAround drops queue's route to down and avoids the nodes behind by
// for the queue (see passUnreachable); it returns the link the queue's
// traffic goes to now, nil once the Client is closed.
func (c *Client) avoidAround(queue string, by []*conn, down *link) *link {
	c.dropRoute(queue, down)
	var next *link
	for _, refusing := range by {
		next = c.avoid(queue, refusing)
	}
	return next
}

// noteUnreachable counts in a round that the nodes at by redirected to
// down, which cannot be reached: they and down's addresses were tried.
func noteUnreachable(refusedAt []string, refusals int, by []string, down *link) ([]string, int) {
	for _, address := range by {
		refusedAt = noteRefusal(refusedAt, address)
	}
	for _, address := range down.addresses {
		refusedAt = noteRefusal(refusedAt, address)
	}
	return refusedAt, refusals + 1
}

// roundGoesOn reports whether a round that passed down may go on to next:
// next is another node, not down as well, not tried in the round yet, and
// the round is not done.
func (c *Client) roundGoesOn(refusedAt []string, refusals int, next, down *link) bool {
	return next != nil && next != down && !next.unreachable() && !slices.Contains(refusedAt, next.address()) &&
		!roundDone(refusedAt, refusals, c.knownNodes())
}

// knownNodes returns how many node addresses the Client knows.
func (c *Client) knownNodes() int {
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	return len(c.known)
}

// knowLocked records a node address (configured, or named by a redirect).
func (c *Client) knowLocked(address string) {
	for _, known := range c.known {
		if known == address {
			return
		}
	}
	c.known = append(c.known, address)
}

// avoid records that the node behind refusing cannot serve queue, and
// sends the queue's traffic to the next node (see the file comment). It
// returns the link the queue is served by now, or nil once the Client is
// closed.
func (c *Client) avoid(queue string, refusing *conn) *link {
	homeAddress := c.home.currentAddress()
	c.routesMu.Lock()
	defer c.routesMu.Unlock()
	if c.closed {
		return nil
	}
	now := time.Now()
	d := c.detours[queue]
	if d == nil {
		d = &detour{avoided: make(map[string]time.Time)}
		c.detours[queue] = d
	}
	until := now.Add(c.avoidancePeriod())
	d.avoided[refusing.session.Address] = until
	c.knowLocked(refusing.session.Address)
	next := c.chooseLocked(d, homeAddress, now)
	regular := c.routes[queue]
	if regular == nil {
		regular = c.home
	}
	if next == regular {
		d.link = nil
	} else {
		d.link, d.until = next, until
	}
	return next
}

// chooseLocked picks the node a queue's traffic tries next and returns
// its link, starting one when needed.
func (c *Client) chooseLocked(d *detour, homeAddress string, now time.Time) *link {
	fallback := -1
	var fallbackUntil time.Time
	for i := range c.known {
		at := (d.next + i) % len(c.known)
		address := c.known[at]
		until, avoided := d.avoided[address]
		if avoided && !now.Before(until) {
			delete(d.avoided, address)
			avoided = false
		}
		if !avoided {
			target := c.linkToLocked(address, homeAddress)
			if !target.lost() {
				d.next = at + 1
				return target
			}
			until = time.Time{} // down: a fallback before any avoided node
		}
		if fallback < 0 || until.Before(fallbackUntil) {
			fallback, fallbackUntil = at, until
		}
	}
	d.next = fallback + 1
	return c.linkToLocked(c.known[fallback], homeAddress)
}

// linkToLocked returns the link to address: home when home is connected
// there, else the redirect target's, started when it has none.
func (c *Client) linkToLocked(address, homeAddress string) *link {
	if address == homeAddress {
		return c.home
	}
	target := c.links[address]
	if target == nil {
		target = newLink(c, []string{address})
		c.links[address] = target
		target.start(nil)
	}
	return target
}

// detourLocked returns the queue's detour link while it is in force, or
// nil; a lapsed detour, or one whose node stopped answering, is dropped.
func (c *Client) detourLocked(queue string) *link {
	d := c.detours[queue]
	if d == nil {
		return nil
	}
	now := time.Now()
	if d.link != nil && now.Before(d.until) && !d.link.lost() {
		return d.link
	}
	d.link = nil
	c.maybeForgetDetourLocked(queue, d, now)
	return nil
}

// endDetourLocked ends the queue's detour (a redirect for the queue was
// followed); the avoidances stay in force.
func (c *Client) endDetourLocked(queue string) {
	if d := c.detours[queue]; d != nil {
		d.link = nil
		c.maybeForgetDetourLocked(queue, d, time.Now())
	}
}

// maybeForgetDetourLocked drops the queue's entry when neither a detour
// nor an avoidance is in force.
func (c *Client) maybeForgetDetourLocked(queue string, d *detour, now time.Time) {
	if d.link != nil {
		return
	}
	for address, until := range d.avoided {
		if now.Before(until) {
			return
		}
		delete(d.avoided, address)
	}
	delete(c.detours, queue)
}
