package actors

// The outbound peer link ("peers/<node id>"): the link this node dials to
// one other node and the requests it sends on it (pushes, fetches, seals).
//
// States:
//
//	down     no link; a redial is scheduled with backoff (50 ms doubling
//	         to 500 ms, reset once a link stayed up for a second)
//	dialing  a goroutine dials and runs the handshake (peer_handshake.go)
//	up       the transport runs; sends go out at once
//	stopping the link is closed, nothing is sent or redialed
//
// Every dial and every transport belongs to a generation; messages of an
// older generation are ignored, so exactly one link is live.
//
// Takes:
//
//	peerSubscribe / peerUnsubscribe  a local actor (a follower link or a
//	                                 recovery) wants the answers about a
//	                                 partition and the link's ups and downs
//	peerSend                         an encoded frame to send, fire and forget
//	                                 (dropped while not up: the subscriber
//	                                 resynchronizes on the next peerLinkUp)
//	peerRequest                      a request with an id whose answer goes
//	                                 back to its sender (fails at once while
//	                                 not up, or when the link goes down)
//
// Sends: peerLinkUp and peerLinkDown to subscribers; followerProgress and
// followerRefused to the subscriber of their partition (routed straight
// from the reader goroutine through the routing table below, without a
// hop through this actor); peerAnswer (a page, a seal, a snapshot or an
// error with the request's id) and peerRequestFailed to a request's sender.
//
// The routing table by partition is written only by this actor and read
// by the reader goroutine of the live transport, under its own lock.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

const (
	peerRedialMin = 50 * time.Millisecond
	// peerRedialMax and peerDialTimeout bound how long a healed peer
	// waits for its link: a dial that was in flight into the cut (a peer
	// on the same network answers one in well under a millisecond) ends
	// within peerDialTimeout, and the next starts within peerRedialMax.
	// Two dials a second to a dead peer cost nothing.
	peerRedialMax   = 500 * time.Millisecond
	peerDialTimeout = time.Second
	// peerStableUp is how long a link must stay up for its backoff to
	// start again from peerRedialMin: a peer that completes the handshake
	// and then closes at once (it is starting) is redialled at the
	// backoff's pace, not 20 times a second.
	peerStableUp = time.Second
)

type peerLinkState uint8

const (
	peerDown peerLinkState = iota + 1
	peerDialing
	peerUp
	peerStopping
)

func (s peerLinkState) String() string {
	switch s {
	case peerDown:
		return "down"
	case peerDialing:
		return "dialing"
	case peerUp:
		return "up"
	case peerStopping:
		return "stopping"
	}
	return "?"
}

// Messages a peer link takes.
type (
	peerSubscribe struct {
		partition uint64
		pid       *actor.PID
	}
	peerUnsubscribe struct {
		partition uint64
		pid       *actor.PID
	}
	peerSend    struct{ frame []byte }
	peerRequest struct {
		requestID uint64
		frame     []byte
		replyTo   *actor.PID
	}
	// Internal to the link.
	peerDialed struct {
		generation uint64
		transport  *peerTransport
		err        error
	}
	peerEnded struct {
		generation uint64
		err        error
	}
	peerRedial      struct{ generation uint64 }
	peerRouteAnswer struct {
		generation uint64
		answer     peerAnswer
	}
)

// Messages a peer link sends.
type (
	peerLinkUp struct {
		node     string
		instance uint64 // the peer process's replica instance
	}
	peerLinkDown struct {
		node string
		err  error
	}
	// followerProgress is an FQP1 or FQP2 (written equals durable for FQP1).
	followerProgress struct {
		node                       string
		partition, epoch, instance uint64
		durableNext, writtenNext   uint64
	}
	followerRefused struct {
		node    string
		refusal wire.PushRefused // History and Message are copies
	}
	// peerAnswer answers a request: a *wire.PageAfter or *wire.Page
	// (records copied), a *wire.SealedVote or *wire.Sealed, a
	// *wire.Snapshot (its bytes copied), or a *wire.ErrorFrame.
	peerAnswer struct {
		node      string
		requestID uint64
		frame     wire.Frame
	}
	peerRequestFailed struct {
		node      string
		requestID uint64
		err       error
	}
)

// peerRoutes is a link's routing table by partition.
type peerRoutes struct {
	mu          sync.RWMutex
	byPartition map[uint64]*actor.PID
}

func (r *peerRoutes) lookup(partition uint64) *actor.PID {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byPartition[partition]
}

type peerLink struct {
	entry   *runtime.Entry
	core    *brokerCore
	node    string
	address string

	state      peerLinkState
	generation uint64
	transport  *peerTransport
	backoff    time.Duration
	upSince    time.Time // when the live link came up
	redial     *time.Timer
	instance   uint64 // the peer's instance while up

	routes        *peerRoutes
	subscribers   map[string]*actor.PID // every subscriber, by PID id
	requests      map[uint64]*actor.PID // requests in flight, by id
	sent, dropped uint64
}

func newPeerLink(entry *runtime.Entry, core *brokerCore, node, address string) *peerLink {
	return &peerLink{entry: entry, core: core, node: node, address: address, state: peerDown,
		backoff: peerRedialMin, routes: &peerRoutes{byPartition: map[uint64]*actor.PID{}},
		subscribers: map[string]*actor.PID{}, requests: map[uint64]*actor.PID{}}
}

func (l *peerLink) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		l.becomeDialing(ctx)
	case *actor.Stopping:
		l.becomeStopping()
	case peerSubscribe:
		l.subscribe(ctx, msg)
	case peerUnsubscribe:
		l.routes.mu.Lock()
		if current := l.routes.byPartition[msg.partition]; current != nil && current.Id == msg.pid.Id {
			delete(l.routes.byPartition, msg.partition)
		}
		l.routes.mu.Unlock()
		delete(l.subscribers, msg.pid.Id)
	case peerSend:
		l.send(msg.frame)
	case peerRequest:
		l.request(ctx, msg)
	case peerDialed:
		l.dialed(ctx, msg)
	case peerEnded:
		if msg.generation == l.generation && l.state == peerUp {
			l.becomeDown(ctx, msg.err)
		}
	case peerRedial:
		if msg.generation == l.generation && l.state == peerDown {
			l.becomeDialing(ctx)
		}
	case peerRouteAnswer:
		if replyTo, ok := l.requests[msg.answer.requestID]; ok {
			delete(l.requests, msg.answer.requestID)
			ctx.Send(replyTo, msg.answer)
		}
	}
	l.entry.SetSummary(fmt.Sprintf("%s to %s (%s), %d subscribers, %d requests, %d frames sent, %d dropped",
		l.state, l.node, l.address, len(l.subscribers), len(l.requests), l.sent, l.dropped))
}

func (l *peerLink) subscribe(ctx actor.Context, msg peerSubscribe) {
	l.routes.mu.Lock()
	l.routes.byPartition[msg.partition] = msg.pid
	l.routes.mu.Unlock()
	l.subscribers[msg.pid.Id] = msg.pid
	if l.state == peerUp {
		ctx.Send(msg.pid, peerLinkUp{node: l.node, instance: l.instance})
	}
}

func (l *peerLink) send(frame []byte) {
	if l.state != peerUp {
		l.dropped++
		return
	}
	if err := l.transport.send(frame); err != nil {
		l.dropped++
		return
	}
	l.sent++
}

func (l *peerLink) request(ctx actor.Context, msg peerRequest) {
	if l.state != peerUp {
		ctx.Send(msg.replyTo, peerRequestFailed{node: l.node, requestID: msg.requestID,
			err: fmt.Errorf("%w: the link to %s is %s", errPeerClosed, l.node, l.state)})
		return
	}
	if err := l.transport.send(msg.frame); err != nil {
		ctx.Send(msg.replyTo, peerRequestFailed{node: l.node, requestID: msg.requestID, err: err})
		return
	}
	l.sent++
	l.requests[msg.requestID] = msg.replyTo
}

// becomeDialing dials and shakes hands on a goroutine.
func (l *peerLink) becomeDialing(ctx actor.Context) {
	l.state = peerDialing
	l.generation++
	generation, self, system := l.generation, ctx.Self(), ctx.ActorSystem()
	address, node, identity, routines := l.address, l.node, l.core.peerIdentity, &l.core.peerRoutines
	peerTLS := l.core.config.Cluster.PeerTLS() // nil: plain TCP (peer_tls.go)
	routines.Add(1)
	go func() {
		defer routines.Done()
		conn, err := dialPeer(context.Background(), peerTLS, address)
		if err != nil {
			system.Root.Send(self, peerDialed{generation: generation, err: err})
			return
		}
		remote, reader, err := dialHandshake(conn, identity, node)
		if err != nil {
			_ = conn.Close()
			system.Root.Send(self, peerDialed{generation: generation, err: err})
			return
		}
		system.Root.Send(self, peerDialed{generation: generation, transport: newPeerTransport(conn, reader, remote, routines)})
	}()
}

func (l *peerLink) dialed(ctx actor.Context, msg peerDialed) {
	if msg.generation != l.generation || l.state != peerDialing {
		if msg.transport != nil {
			msg.transport.close(nil) // a dial that finished after a stop or a newer dial
		}
		return
	}
	if msg.err != nil {
		l.becomeDown(ctx, msg.err)
		return
	}
	l.state = peerUp
	l.core.peersDown.Delete(l.node)
	l.transport = msg.transport
	l.instance = msg.transport.remote.Instance
	l.upSince = time.Now()
	generation, self, system := l.generation, ctx.Self(), ctx.ActorSystem()
	handle := l.answerHandler(generation, self, system)
	msg.transport.start(handle, func(err error) { system.Root.Send(self, peerEnded{generation: generation, err: err}) })
	for _, subscriber := range l.subscribers {
		ctx.Send(subscriber, peerLinkUp{node: l.node, instance: l.instance})
	}
}

// becomeDown fails what waits on the link and schedules a redial.
func (l *peerLink) becomeDown(ctx actor.Context, cause error) {
	if l.transport != nil {
		l.transport.close(nil)
		l.transport = nil
	}
	wasUp := l.state == peerUp
	if wasUp && time.Since(l.upSince) >= peerStableUp {
		l.backoff = peerRedialMin // a link that held: the next dial is prompt
	}
	l.state = peerDown
	l.core.peersDown.Store(l.node, true)
	l.generation++
	for id, replyTo := range l.requests {
		ctx.Send(replyTo, peerRequestFailed{node: l.node, requestID: id, err: fmt.Errorf("%w: %v", errPeerClosed, cause)})
	}
	clear(l.requests)
	if wasUp {
		l.core.logger.Info("peer link down", "peer", l.node, "err", cause)
		for _, subscriber := range l.subscribers {
			ctx.Send(subscriber, peerLinkDown{node: l.node, err: cause})
		}
	}
	generation, self, system := l.generation, ctx.Self(), ctx.ActorSystem()
	l.redial = time.AfterFunc(l.backoff, func() { system.Root.Send(self, peerRedial{generation: generation}) })
	l.backoff = min(2*l.backoff, peerRedialMax)
}

func (l *peerLink) becomeStopping() {
	l.state = peerStopping
	l.generation++
	if l.redial != nil {
		l.redial.Stop()
	}
	if l.transport != nil {
		l.transport.close(nil)
		l.transport = nil
	}
}

// answerHandler decodes the answers that arrive on a link, on its reader
// goroutine: progress and refusals go straight to their partition's
// subscriber, request answers through the link (which owns the table of
// requests).
func (l *peerLink) answerHandler(generation uint64, self *actor.PID, system *actor.ActorSystem) peerFrameHandler {
	node, routes := l.node, l.routes
	var progress wire.Progress
	var progressWritten wire.ProgressWritten
	return func(tag wire.Tag, body []byte) error {
		switch tag {
		case wire.TagProgress:
			if err := progress.Decode(body); err != nil {
				return err
			}
			if pid := routes.lookup(progress.Partition); pid != nil {
				system.Root.Send(pid, followerProgress{node: node, partition: progress.Partition, epoch: progress.Epoch,
					instance: progress.Instance, durableNext: progress.DurableNext, writtenNext: progress.DurableNext})
			}
		case wire.TagProgressWritten:
			if err := progressWritten.Decode(body); err != nil {
				return err
			}
			if pid := routes.lookup(progressWritten.Partition); pid != nil {
				system.Root.Send(pid, followerProgress{node: node, partition: progressWritten.Partition,
					epoch: progressWritten.Epoch, instance: progressWritten.Instance,
					durableNext: progressWritten.DurableNext, writtenNext: progressWritten.WrittenNext})
			}
		case wire.TagPushRefused:
			refusal := new(wire.PushRefused)
			if err := refusal.Decode(body); err != nil {
				return err
			}
			if pid := routes.lookup(refusal.Partition); pid != nil {
				system.Root.Send(pid, followerRefused{node: node, refusal: *refusal})
			}
		case wire.TagPage:
			page := new(wire.Page)
			if err := page.Decode(body); err != nil {
				return err
			}
			page.Records = append([]byte(nil), page.Records...) // the body is reused by the next read
			system.Root.Send(self, peerRouteAnswer{generation: generation,
				answer: peerAnswer{node: node, requestID: page.RequestID, frame: page}})
		case wire.TagPageAfter:
			page := new(wire.PageAfter)
			if err := page.Decode(body); err != nil {
				return err
			}
			page.Records = append([]byte(nil), page.Records...) // the body is reused by the next read
			system.Root.Send(self, peerRouteAnswer{generation: generation,
				answer: peerAnswer{node: node, requestID: page.RequestID, frame: page}})
		case wire.TagSnapshot:
			snapshot := new(wire.Snapshot)
			if err := snapshot.Decode(body); err != nil {
				return err
			}
			snapshot.Snapshot = append([]byte(nil), snapshot.Snapshot...) // the body is reused by the next read
			system.Root.Send(self, peerRouteAnswer{generation: generation,
				answer: peerAnswer{node: node, requestID: snapshot.RequestID, frame: snapshot}})
		case wire.TagSealedVote:
			sealed := new(wire.SealedVote)
			if err := sealed.Decode(body); err != nil {
				return err
			}
			system.Root.Send(self, peerRouteAnswer{generation: generation,
				answer: peerAnswer{node: node, requestID: sealed.RequestID, frame: sealed}})
		case wire.TagSealed:
			sealed := new(wire.Sealed)
			if err := sealed.Decode(body); err != nil {
				return err
			}
			system.Root.Send(self, peerRouteAnswer{generation: generation,
				answer: peerAnswer{node: node, requestID: sealed.RequestID, frame: sealed}})
		case wire.TagError:
			refusal := new(wire.ErrorFrame)
			if err := refusal.Decode(body); err != nil {
				return err
			}
			if refusal.RequestID == 0 {
				return fmt.Errorf("the peer closed the link: %s: %s", refusal.Code, refusal.Message)
			}
			system.Root.Send(self, peerRouteAnswer{generation: generation,
				answer: peerAnswer{node: node, requestID: refusal.RequestID, frame: refusal}})
		default:
			return fmt.Errorf("%w: %s is not an answer", errProtocolViolation, tag)
		}
		return nil
	}
}
