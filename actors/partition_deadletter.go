package actors

// Dead-letter handoff between partitions. When a message reaches its
// queue's max deliveries, the queue's Advance issues a DeadLetter
// instruction; the message stays "dead-lettering" until the dead-letter
// queue confirms the copy, and only then does the source append its marker
// (queue.DeadLettered). The steps:
//
//	source partition  --deadLetterHandoff-->  queues manager (declares the target if missing)
//	queues manager    --deadLetterPublish-->  target partition (publishes under its own mode)
//	target partition  --deadLettersTaken---->  source partition (after the target's confirm)
//	source partition  appends the markers
//
// A refusal (target fenced, full, busy) comes back as deadLettersRefused and
// the source sends its open handoffs again after handoffRetryInterval. A
// copy can be made twice (a crash between the target's confirm and the
// source's marker reissues the instruction): at-least-once, deduplicated on
// the message id, which the copy keeps.

import (
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
)

// handoffRetryInterval is how long a refused handoff waits to be sent again.
const handoffRetryInterval = time.Second

// Headers a dead-lettered copy carries.
const (
	headerDeadLetterSource   = "fibril-dead-letter-source"
	headerDeadLetterAttempts = "fibril-dead-letter-attempts"
)

type deadLetterHandoff struct {
	source      *actor.PID
	sourceQueue string
	target      string
	letters     []queue.DeadLetter
}

type deadLetterPublish struct {
	source      *actor.PID
	sourceQueue string
	letters     []queue.DeadLetter
}

func (m deadLetterPublish) offsets() []uint64 {
	offsets := make([]uint64, len(m.letters))
	for i := range m.letters {
		offsets[i] = m.letters[i].Offset
	}
	return offsets
}

type deadLettersTaken struct{ offsets []uint64 }

type deadLettersRefused struct {
	offsets []uint64
	failure requestFailure
}

// deadLetterBatch is a copy a target partition published for a source.
type deadLetterBatch struct {
	source  *actor.PID
	offsets []uint64
}

// handOffDeadLetters sends new instructions to the manager.
func (p *partition) handOffDeadLetters(ctx actor.Context, letters []queue.DeadLetter) {
	var fresh []queue.DeadLetter
	for _, letter := range letters {
		if letter.Target == "" {
			continue
		}
		if _, ok := p.handoffs[letter.Offset]; ok {
			continue
		}
		p.handoffs[letter.Offset] = letter
		fresh = append(fresh, letter)
	}
	if len(fresh) > 0 {
		ctx.Send(p.home.manager, deadLetterHandoff{source: ctx.Self(), sourceQueue: p.home.name,
			target: fresh[0].Target, letters: fresh})
	}
}

// publishDeadLetters runs on the target partition.
func (p *partition) publishDeadLetters(ctx actor.Context, msg deadLetterPublish) {
	if p.state == partitionFenced {
		ctx.Send(msg.source, deadLettersRefused{offsets: msg.offsets(), failure: p.fencedFailure()})
		return
	}
	if p.core.draining.Load() {
		ctx.Send(msg.source, deadLettersRefused{offsets: msg.offsets(), failure: drainingFailure})
		return
	}
	messages := make([]queue.Message, len(msg.letters))
	for i, letter := range msg.letters {
		headers := append(append([]queue.Header(nil), letter.Headers...),
			queue.Header{Key: headerDeadLetterSource, Value: msg.sourceQueue},
			queue.Header{Key: headerDeadLetterAttempts, Value: strconv.FormatUint(uint64(letter.Attempts), 10)})
		messages[i] = queue.Message{ID: letter.MessageID, Headers: headers, Payload: letter.Payload}
	}
	ticket, err := p.q.Publish(messages)
	if err != nil {
		ctx.Send(msg.source, deadLettersRefused{offsets: msg.offsets(), failure: p.failureOf(err)})
		p.maybeFence(ctx, err)
		return
	}
	if p.deadLetterBatches == nil {
		p.deadLetterBatches = make(map[uint64]deadLetterBatch)
	}
	p.nextDeadLetterBatch++
	p.deadLetterBatches[p.nextDeadLetterBatch] = deadLetterBatch{source: msg.source, offsets: msg.offsets()}
	p.tickets[ticket] = pendingPublish{batchID: p.nextDeadLetterBatch, count: len(messages), start: p.core.now()}
	p.metrics.publishes.Add(len(messages))
}

// deadLetterConfirmed tells the source its copies are confirmed.
func (p *partition) deadLetterConfirmed(ctx actor.Context, batchID uint64) {
	batch, ok := p.deadLetterBatches[batchID]
	if !ok {
		return
	}
	delete(p.deadLetterBatches, batchID)
	ctx.Send(batch.source, deadLettersTaken{offsets: batch.offsets})
}

// deadLettersTaken runs on the source: append the markers.
func (p *partition) deadLettersTaken(ctx actor.Context, msg deadLettersTaken) {
	var offsets []uint64
	for _, offset := range msg.offsets {
		if _, ok := p.handoffs[offset]; ok {
			delete(p.handoffs, offset)
			offsets = append(offsets, offset)
		}
	}
	if len(offsets) == 0 || p.state != partitionOpen {
		return
	}
	if _, err := p.q.DeadLettered(offsets); err != nil {
		if !p.maybeFence(ctx, err) {
			p.core.logger.Warn("dead-letter marker refused", "queue", p.home.name, "err", err)
		}
		return
	}
	p.metrics.deadLetters.Add(len(offsets))
}

func (p *partition) deadLettersRefused(ctx actor.Context, msg deadLettersRefused) {
	p.core.logger.Warn("dead-letter queue refused a handoff; retrying", "queue", p.home.name,
		"messages", len(msg.offsets), "reason", msg.failure.message)
	if p.handoffRetry {
		return
	}
	p.handoffRetry = true
	self, system := ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(handoffRetryInterval, func() { system.Root.Send(self, retryHandoffs{}) })
}

// resendHandoffs sends every open handoff again.
func (p *partition) resendHandoffs(ctx actor.Context) {
	p.handoffRetry = false
	if len(p.handoffs) == 0 || p.state != partitionOpen {
		return
	}
	byTarget := make(map[string][]queue.DeadLetter)
	for _, letter := range p.handoffs {
		byTarget[letter.Target] = append(byTarget[letter.Target], letter)
	}
	for target, letters := range byTarget {
		ctx.Send(p.home.manager, deadLetterHandoff{source: ctx.Self(), sourceQueue: p.home.name,
			target: target, letters: letters})
	}
}
