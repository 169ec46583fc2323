package client

// The writer goroutine of a connection. Publishes that reach the outbox
// together and name the same queue travel in one publish frame; the frame
// is cut when the queue changes, when it holds MaxBatchMessages messages,
// or when the next message would take it over the node's body limit. Each
// message gets its wire sequence number here, from a counter only this
// goroutine touches, so numbers always increase on the wire, and it is
// registered in the pending table before its frame can leave, so a confirm
// always finds it.

import (
	"github.com/fibrilmq/fibril/wire"
)

// maxSettleTags bounds the delivery tags one settle frame carries.
const maxSettleTags = 8192

// publishFrameOverhead is the body size of a publish frame without its
// queue name bytes and messages: the name's length prefix and the count.
const publishFrameOverhead = 2 + 4

type writerState struct {
	writer       *wire.Writer
	nextSeq      uint64
	batch        wire.Publish
	idempotent   wire.PublishIdempotent // the frame batch becomes on an idempotent Client
	batchFutures []*PublishFuture       // parallel to batch.Messages
	batchQueue   string
	batchBytes   int

	ack      wire.Ack
	nack     wire.Nack
	release  wire.Release
	discard  wire.Discard
	settles  settleBatch
	bindings []*binding
}

func (c *conn) writeLoop() {
	defer close(c.writerDone)
	defer c.closeOutbox()
	for {
		select {
		case item := <-c.outbox:
			c.write(item)
		case <-c.settleKick:
			c.writeDirtySettles()
		case <-c.done:
			return
		}
		c.writeQueued()
		c.emitPublishBatch()
		if err := c.writing.writer.Flush(); err != nil {
			c.fail(connectionLost(err))
		}
		if c.isDead() {
			return
		}
	}
}

// writeQueued writes what is already waiting, without blocking, up to one
// outbox's worth so a steady stream still gets flushed.
func (c *conn) writeQueued() {
	for range cap(c.outbox) + 1 {
		select {
		case item := <-c.outbox:
			c.write(item)
		case <-c.settleKick:
			c.writeDirtySettles()
		default:
			return
		}
	}
}

func (c *conn) write(item outbound) {
	if item.publish != nil {
		c.addToBatch(item.publish)
		return
	}
	c.emitPublishBatch()
	if item.unsubscribe != nil {
		c.writeSettles(item.unsubscribe)
	}
	if item.frame != nil {
		c.writeFrame(item.frame)
	}
	if item.closeAfter != nil {
		c.writeDirtySettles()
		c.writing.writer.Flush()
		c.fail(item.closeAfter)
	}
}

// writeFrame encodes one frame. A frame the codec refuses fails only its
// own request; a failed write fails the connection.
func (c *conn) writeFrame(frame wire.Frame) {
	err := c.writing.writer.WriteFrame(frame)
	if err == nil {
		return
	}
	if !isFrameError(err) {
		c.fail(connectionLost(err))
		return
	}
	if id := requestIDOf(frame); id != 0 {
		if waiting := c.pending.takeRequest(id); waiting != nil {
			waiting.done <- reply{err: err}
		}
	}
}

// addToBatch adds a publish to the frame being built, cutting the frame
// first when the message does not belong in it.
func (c *conn) addToBatch(future *PublishFuture) {
	w := &c.writing
	if len(w.batch.Messages) > 0 && (w.batchQueue != future.queue ||
		len(w.batch.Messages) >= c.client.options.MaxBatchMessages ||
		w.batchBytes+future.encodedBytes > int(c.peerMaxBody)) {
		c.emitPublishBatch()
	}
	if !c.client.enterBatch(future, c) {
		return // its deadline passed while it was queued
	}
	if c.client.publishFrameOverhead()+len(future.queue)+future.encodedBytes > int(c.peerMaxBody) {
		c.client.finishPublish(future, Confirm{Err: ErrMessageTooLarge})
		return
	}
	w.nextSeq++
	message := wire.PublishMessage{Seq: w.nextSeq, MessageID: future.messageID, Headers: future.headers, Payload: future.payload}
	if c.client.producerID != "" {
		message.ProducerSeq = future.seq // the Client-wide publish number: the same on every retry
	}
	future.wireSeq = w.nextSeq
	if err := c.pending.addPublish(w.nextSeq, future); err != nil {
		c.client.finishPublish(future, Confirm{Err: err})
		return
	}
	if len(w.batch.Messages) == 0 {
		w.batchQueue = future.queue
		w.batch.Queue = append(w.batch.Queue[:0], future.queue...)
		w.batchBytes = c.client.publishFrameOverhead() + len(future.queue)
	}
	w.batch.Messages = append(w.batch.Messages, message)
	w.batchFutures = append(w.batchFutures, future)
	w.batchBytes += future.encodedBytes
}

// emitPublishBatch encodes the frame being built, if any.
func (c *conn) emitPublishBatch() {
	w := &c.writing
	if len(w.batch.Messages) == 0 {
		return
	}
	var frame wire.Frame = &w.batch
	if producer := c.client.producerID; producer != "" {
		w.idempotent.Queue, w.idempotent.Messages = w.batch.Queue, w.batch.Messages
		w.idempotent.ProducerID = append(w.idempotent.ProducerID[:0], producer...)
		frame = &w.idempotent
	}
	err := w.writer.WriteFrame(frame)
	if err != nil && !isFrameError(err) {
		c.fail(connectionLost(err))
	} else if err != nil {
		for _, message := range w.batch.Messages {
			taken := c.pending.takePublishRange(message.Seq, message.Seq, nil)
			for _, future := range taken {
				c.client.finishPublish(future, Confirm{Err: err})
			}
		}
	}
	// The frame is encoded (or failed): the payloads are no longer read.
	// A publish whose deadline passed while it was in the frame is
	// completed now, if nothing else took it.
	for i, future := range w.batchFutures {
		if future.leaveBatch() && c.pending.removePublish(w.batch.Messages[i].Seq, future) {
			c.client.finishPublish(future, Confirm{Err: ErrPublishTimeout})
		}
	}
	clear(w.batch.Messages)
	w.batch.Messages = w.batch.Messages[:0]
	clear(w.batchFutures)
	w.batchFutures = w.batchFutures[:0]
}

func (c *conn) writeDirtySettles() {
	w := &c.writing
	w.bindings = c.takeDirty(w.bindings[:0])
	for _, b := range w.bindings {
		c.writeSettles(b)
	}
	clear(w.bindings)
}

// writeSettles writes the settles a binding has gathered, one frame per
// kind (and per nack variant), each at most maxSettleTags tags.
func (c *conn) writeSettles(b *binding) {
	w := &c.writing
	b.takeSettles(&w.settles)
	for _, tags := range chunks(w.settles.acks) {
		w.ack.SubscriptionID, w.ack.DeliveryTags = b.id, tags
		c.writeFrame(&w.ack)
	}
	for _, tags := range chunks(w.settles.releases) {
		w.release.SubscriptionID, w.release.DeliveryTags = b.id, tags
		c.writeFrame(&w.release)
	}
	for _, tags := range chunks(w.settles.discards) {
		w.discard.SubscriptionID, w.discard.DeliveryTags = b.id, tags
		c.writeFrame(&w.discard)
	}
	for _, group := range w.settles.nacks {
		for _, tags := range chunks(group.tags) {
			w.nack = wire.Nack{SubscriptionID: b.id, Requeue: group.requeue, DelayMs: group.delayMs, DeliveryTags: tags}
			c.writeFrame(&w.nack)
		}
	}
}

// chunks splits tags into slices of at most maxSettleTags.
func chunks(tags []uint64) [][]uint64 {
	if len(tags) <= maxSettleTags {
		if len(tags) == 0 {
			return nil
		}
		return [][]uint64{tags}
	}
	var out [][]uint64
	for len(tags) > 0 {
		n := min(len(tags), maxSettleTags)
		out = append(out, tags[:n])
		tags = tags[n:]
	}
	return out
}

// closeOutbox shuts the gate so nothing more enters the outbox, then fails
// whatever is still in it. It runs as the writer exits, after fail.
func (c *conn) closeOutbox() {
	c.gate.Lock()
	c.gateClosed = true
	c.gate.Unlock()
	var unsent []*PublishFuture
	defer func() {
		// Never sent, so not stored: with RetryUnknownPublishes they go to
		// the next connection like the unknown ones.
		for _, future := range c.client.splitRetries(c.link, unsent, c.failure) {
			c.client.finishQueued(future, Confirm{Err: c.failure})
		}
	}()
	for {
		select {
		case item := <-c.outbox:
			if item.publish != nil {
				unsent = append(unsent, item.publish)
			}
			// Requests were registered before they were queued, so fail
			// has already answered them.
		default:
			clear(c.writing.batch.Messages)
			c.writing.batch.Messages = c.writing.batch.Messages[:0]
			for _, future := range c.writing.batchFutures {
				future.leaveBatch() // registered before fail, so fail completed them
			}
			clear(c.writing.batchFutures)
			c.writing.batchFutures = c.writing.batchFutures[:0]
			return
		}
	}
}

// requestIDOf returns the request id of a request frame, or 0.
func requestIDOf(frame wire.Frame) uint64 {
	switch f := frame.(type) {
	case *wire.Declare:
		return f.RequestID
	case *wire.Subscribe:
		return f.RequestID
	case *wire.Unsubscribe:
		return f.RequestID
	case *wire.GetQueueInfo:
		return f.RequestID
	case *wire.ListQueues:
		return f.RequestID
	case *wire.DeleteQueue:
		return f.RequestID
	case *wire.PurgeQueue:
		return f.RequestID
	case *wire.Ping:
		return f.RequestID
	case *wire.AckSync:
		return f.RequestID
	}
	return 0
}
