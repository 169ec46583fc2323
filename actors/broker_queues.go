package actors

// Broker methods about one queue that the HTTP endpoint uses beyond queue
// info: an explicit sync of the queue's log, and the queue's consumers.
// Each asks the queue's partition by message and waits for the answer
// (bounded), so nothing outside the partition touches its state.
//
// An explicit sync goes partition → sync scheduler (sync_scheduler.go),
// which runs log.Sync off every mailbox and answers the waiting future by
// message once everything written before the request is durable.

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Errors of the per-queue Broker methods.
var (
	// ErrUnknownQueue is returned for a queue the node does not have.
	ErrUnknownQueue = errors.New("actors: no such queue")
	// ErrQueueNotServing is returned when the queue exists but cannot serve
	// the request: it is fenced or failed, or it did not answer in time.
	// The error says which.
	ErrQueueNotServing = errors.New("actors: the queue does not serve")
)

// syncQueueTimeout bounds Broker.SyncQueue: the explicit sync's own bound
// plus time for the partition to open.
const syncQueueTimeout = explicitSyncTimeout + 5*time.Second

// syncRequest asks a partition for an explicit sync of its log; syncDone
// answers it at replyTo.
type syncRequest struct{ replyTo *actor.PID }

// consumersRequest asks a partition for its subscriptions; the answer,
// consumersResult, goes to the request's sender (a future).
type consumersRequest struct{}

type consumersResult struct{ consumers []ConsumerInfo }

// ConsumerInfo is one subscription on a queue.
type ConsumerInfo struct {
	// SessionID is the id hello-ok gave the subscribing session.
	SessionID      string
	SubscriptionID uint64
	// Prefetch is the most deliveries the subscription holds unsettled.
	Prefetch uint32
	// Outstanding is the deliveries sent and not yet settled (or expired).
	Outstanding int
}

// SyncQueue syncs the queue's log now and returns once everything written
// to it before the call is durable. It returns an error wrapping
// ErrUnknownQueue for a queue the node does not have, and one wrapping
// ErrQueueNotServing when the queue is fenced, failed or does not answer
// within a bound.
func (b *Broker) SyncQueue(name string) error {
	route, ok := b.core.directory.lookup(name)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownQueue, name)
	}
	if route.failure.failed() {
		return fmt.Errorf("%w: %s", ErrQueueNotServing, route.failure.message)
	}
	future := actor.NewFuture(b.core.system, syncQueueTimeout)
	b.core.system.Root.Send(route.pid, syncRequest{replyTo: future.PID()})
	result, err := future.Result()
	if err != nil {
		return fmt.Errorf("%w: queue %q did not answer the sync: %v", ErrQueueNotServing, name, err)
	}
	done, ok := result.(syncDone)
	if !ok {
		return fmt.Errorf("%w: queue %q answered the sync with %T", ErrQueueNotServing, name, result)
	}
	if done.err != nil {
		return fmt.Errorf("sync of queue %q: %w", name, done.err)
	}
	return nil
}

// QueueConsumers returns the subscriptions on a queue, in the order the
// queue serves them; false when the node has no such queue. A queue that
// does not answer within a bound is reported with none.
func (b *Broker) QueueConsumers(name string) ([]ConsumerInfo, bool) {
	route, ok := b.core.directory.lookup(name)
	if !ok {
		return nil, false
	}
	if route.failure.failed() {
		return []ConsumerInfo{}, true
	}
	result, err := b.core.system.Root.RequestFuture(route.pid, consumersRequest{}, infoTimeout).Result()
	answer, answered := result.(consumersResult)
	if err != nil || !answered {
		return []ConsumerInfo{}, true
	}
	return answer.consumers, true
}

// syncNow starts an explicit sync for a request (held while opening).
func (p *partition) syncNow(ctx actor.Context, msg syncRequest) {
	switch {
	case p.state == partitionFenced:
		ctx.Send(msg.replyTo, syncDone{err: fmt.Errorf("%w: %s", ErrQueueNotServing, p.fencedFailure().message)})
	case p.syncPID == nil:
		ctx.Send(msg.replyTo, syncDone{err: fmt.Errorf("queue %q has no sync scheduler: %w",
			p.home.name, errors.ErrUnsupported)})
	default:
		ctx.Send(p.syncPID, syncNow{replyTo: msg.replyTo})
	}
}

// consumers answers a consumersRequest; it is answered in every state.
func (p *partition) consumers(ctx actor.Context) {
	set := p.home.subscribers
	consumers := make([]ConsumerInfo, 0, set.len())
	for _, sub := range set.order {
		consumers = append(consumers, ConsumerInfo{SessionID: sub.sessionID, SubscriptionID: sub.id,
			Prefetch: uint32(sub.prefetch), Outstanding: len(sub.held)})
	}
	ctx.Respond(consumersResult{consumers: consumers})
}
