package actors

// Reopening a fenced or failed queue without restarting the node.
//
// A queue fences when its log latched after a storage failure: the log
// refuses appends and has recorded the cut back to its last successful
// sync. Only an open of the log carries that cut out, so recovering the
// queue means closing it and opening it again, which is what a node
// restart did for every queue at once. Broker.ReopenQueue does it for one
// (POST /api/queues/{name}/reopen, `fibrilctl reopen NAME`):
//
//	Broker        --reopenRequest-->  queues manager
//	manager       --reopenQueue---->  partition (when it is alive and fenced)
//	partition     stops its log and sync actors, closes the queue, waits for
//	              both children to terminate, then opens the queue again (the
//	              open waits for the close, then recovers: the pending cut,
//	              the index check, the tail walk)
//	partition     --partitionReady or partitionOpenFailed--> manager
//	manager       --reopenResult---> Broker
//
// A queue whose partition actor is gone (it spent its restart budget, or
// stopped unexpectedly) is reopened by spawning its partition again. A
// queue that serves is not reopened (ErrQueueNotFenced): there is nothing
// to recover, and a reopen would end every subscription for nothing.
//
// The texts that tell a client or an operator a queue is fenced or failed
// name the storage error once (storageCause) and this action
// (reopenAdvice).

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/queue"
)

// ErrQueueNotFenced is returned by ReopenQueue for a queue that serves:
// there is nothing to recover.
var ErrQueueNotFenced = errors.New("actors: the queue is not fenced or failed")

// reopenTimeout bounds Broker.ReopenQueue: the close of the old queue and
// the recovery of the new open.
const reopenTimeout = 60 * time.Second

// ReopenQueue closes a fenced or failed queue and opens it again, which
// runs the log's recovery (a pending cut back to the last sync is carried
// out), and returns once the queue serves again. It returns an error
// wrapping ErrUnknownQueue for a queue the node does not have,
// ErrQueueNotFenced for one that serves, and ErrQueueNotServing when the
// reopen did not bring it back (the error says why: the open failed
// again, or it did not finish within a bound).
func (b *Broker) ReopenQueue(name string) error {
	if err := ValidateQueueName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrUnknownQueue, err)
	}
	future := actor.NewFuture(b.core.system, reopenTimeout)
	b.core.system.Root.Send(b.core.queuesManager, reopenRequest{replyTo: future.PID(), name: name})
	result, err := future.Result()
	if err != nil {
		return fmt.Errorf("%w: the reopen of queue %q did not finish: %v", ErrQueueNotServing, name, err)
	}
	answer, ok := result.(reopenResult)
	if !ok {
		return fmt.Errorf("%w: the reopen of queue %q was answered with %T", ErrQueueNotServing, name, result)
	}
	if answer.err == nil {
		b.core.logger.Info("queue reopened", "queue", name)
	}
	return answer.err
}

// reopen starts the reopen of a fenced partition (see the file comment).
func (p *partition) reopen(ctx actor.Context) {
	if p.state != partitionFenced {
		ctx.Send(p.home.manager, reopenRefused{name: p.home.name,
			reason: fmt.Sprintf("queue %q is %s: there is nothing to recover", p.home.name, p.state)})
		return
	}
	p.core.logger.Info("reopening a fenced queue", "queue", p.home.name, "fence", storageCause(p.fenceErr))
	p.core.metrics.fencedQueues.Add(-1)
	p.metrics.latched.Store(false)
	p.fenceErr = nil
	p.beginReopen(ctx)
}

// beginReopen closes the queue on a goroutine and opens it again once the
// log and sync children have stopped; requests wait in opening meanwhile.
func (p *partition) beginReopen(ctx actor.Context) {
	p.state = partitionOpening
	p.closeQueueAsync()
	for _, child := range []*actor.PID{p.logPID, p.syncPID} {
		if child != nil {
			p.reopenWaits++
			p.core.registry.StopActor(ctx, child, runtime.StopRestart)
		}
	}
	p.logPID, p.syncPID = nil, nil
	if p.reopenWaits == 0 {
		p.becomeOpening(ctx)
	}
	p.publishSummary()
}

// isChild reports whether who is one of this partition's children.
func (p *partition) isChild(ctx actor.Context, who *actor.PID) bool {
	return strings.HasPrefix(who.Id, ctx.Self().Id+"/")
}

// childGone counts a child a reopen waits for; the last one starts the open.
func (p *partition) childGone(ctx actor.Context) {
	if p.reopenWaits == 0 {
		return
	}
	p.reopenWaits--
	if p.reopenWaits == 0 && p.state == partitionOpening && p.opening == nil {
		p.becomeOpening(ctx)
	}
}

// reopenAdvice names the action that recovers a fenced or failed queue.
func reopenAdvice(name string) string {
	return fmt.Sprintf("reopen the queue to recover (fibrilctl reopen %s, or POST /api/queues/%s/reopen)", name, name)
}

// storageCause is the storage error behind a fence, said once: the texts
// of the sentinels that the fence message already says in its own words
// (fenced after a storage failure, the log latched) are dropped, and a
// cause that wrapping repeated ("write f: write f") is kept once.
func storageCause(err error) string {
	if err == nil {
		return "no cause was reported"
	}
	text := err.Error()
	for _, said := range []string{queue.ErrFenced.Error(), log.ErrLatched.Error(), "log latched"} {
		text = strings.ReplaceAll(text, said+": ", "")
		text = strings.ReplaceAll(text, said, "")
	}
	parts := slices.DeleteFunc(strings.Split(text, ": "), func(part string) bool { return strings.TrimSpace(part) == "" })
	parts = withoutRepeats(parts)
	if len(parts) == 0 {
		return "the log latched after a storage failure"
	}
	return strings.Join(parts, ": ")
}

// withoutRepeats removes every run of segments that repeats the run just
// before it ("a: b: a: b: c" becomes "a: b: c").
func withoutRepeats(parts []string) []string {
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(parts) && !changed; i++ {
			for length := 1; i+2*length <= len(parts); length++ {
				if slices.Equal(parts[i:i+length], parts[i+length:i+2*length]) {
					parts = slices.Delete(parts, i+length, i+2*length)
					changed = true
					break
				}
			}
		}
	}
	return parts
}
