package actors

// A connection has two goroutines besides its session actor. The reader
// decodes frames and sends them to the session actor (connection.go); the
// writer (this file) owns the socket's write side and a wire.Writer.
//
// The session actor never writes to the socket: it pushes finished frames
// into the outbox, and the writer goroutine takes everything queued at once,
// encodes it into one buffer and writes it with a single flush, so a burst
// of confirms and deliveries leaves in one write(2).
//
// The outbox is bounded in bytes (an estimate of the frames' encoded size,
// frameBytes) and in frames, per session and, for bytes, across the node.
// The session's bound counts the frames queued behind the batch the
// writer is writing: a push that finds the outbox empty always goes (a
// subscription's prefetch may deliver a large burst at once to a client
// that reads), and frames that pile up behind it while the client does
// not read are what the bound stops. The node's bound counts everything,
// the batch being written included. A client that reads nothing at all
// is also stopped by the writer's deadline (connection.go): a write(2)
// not done within Limits.WriteTimeout (plus a second per MiB) closes it.
// The flow control upstream (publish credit in the reader, prefetch in the
// partitions, one reply per request) keeps it far below its bounds while
// the client reads; reaching one means the client stopped reading (or
// asked for more than it reads: a prefetch times a message size above the
// session's bound), and the session closes the connection instead of
// buffering without end (docs/security.md, "Bounds").
//
// Invariant: queuedBytes is the estimate of the frames in frames;
// writingBytes that of the batch the writer took and has not finished
// writing; the node's total (shared) holds the sum of both over every
// outbox. closed outboxes hold nothing.

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/fibrilmq/fibril/wire"
)

// Errors of push: the client is not reading its frames.
var (
	errOutboxFull      = errors.New("actors: client is not reading its frames (send queue full)")
	errOutboxNodeBytes = errors.New("actors: client is not reading its frames while the node's send queues are full")
)

// outboxBounds are an outbox's limits and the node's shared total.
type outboxBounds struct {
	maxBytes      int64         // this session
	maxTotalBytes int64         // every session together
	total         *atomic.Int64 // bytes queued or being written, every session
}

// outbox hands frames from a session actor to its writer goroutine.
type outbox struct {
	bounds outboxBounds

	mu           sync.Mutex
	frames       []wire.Frame // waiting; owned by the writer once taken
	queuedBytes  int64        // estimate of frames
	writingBytes int64        // estimate of the batch the writer holds
	closing      bool         // write what is queued, then close the connection
	closed       bool         // push refuses everything
	kick         chan struct{}
}

func newOutbox(bounds outboxBounds) *outbox {
	if bounds.total == nil {
		bounds.total = new(atomic.Int64)
	}
	return &outbox{bounds: bounds, kick: make(chan struct{}, 1)}
}

// push queues frames for writing. It never blocks; it reports
// errOutboxFull or errOutboxNodeBytes when a bound is reached (nothing is
// queued then).
func (o *outbox) push(frames ...wire.Frame) error {
	var bytes int64
	for _, frame := range frames {
		bytes += frameBytes(frame)
	}
	o.mu.Lock()
	if o.closed || o.closing {
		o.mu.Unlock()
		return nil // the connection is going away; the frames have no reader
	}
	held := o.queuedBytes + o.writingBytes
	switch {
	case len(o.frames)+len(frames) > outboxFramesMax || o.queuedBytes+bytes > o.bounds.maxBytes && o.queuedBytes > 0:
		o.mu.Unlock()
		return errOutboxFull
	case o.bounds.total.Load()+bytes > o.bounds.maxTotalBytes && held >= min(outboxFairShareBytes, o.bounds.maxBytes):
		o.mu.Unlock()
		return errOutboxNodeBytes
	}
	o.frames = append(o.frames, frames...)
	o.queuedBytes += bytes
	o.bounds.total.Add(bytes)
	o.mu.Unlock()
	o.maybeKick()
	return nil
}

// closeAfter queues last frames (an error, typically) and asks the writer
// to close the connection once they are written. They are not bounded:
// at most a few small frames.
func (o *outbox) closeAfter(frames ...wire.Frame) {
	o.mu.Lock()
	if !o.closed && !o.closing {
		var bytes int64
		for _, frame := range frames {
			bytes += frameBytes(frame)
		}
		o.frames = append(o.frames, frames...)
		o.queuedBytes += bytes
		o.bounds.total.Add(bytes)
		o.closing = true
	}
	o.mu.Unlock()
	o.maybeKick()
}

// take moves every waiting frame into into (reused) and reports whether the
// connection should close after writing them. The writer calls written
// once it has written (or failed to write) them.
func (o *outbox) take(into []wire.Frame) ([]wire.Frame, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	into = append(into, o.frames...)
	clear(o.frames)
	o.frames = o.frames[:0]
	o.writingBytes += o.queuedBytes
	o.queuedBytes = 0
	if o.closing {
		o.closed = true
	}
	return into, o.closing
}

// written releases the bytes of the batch the writer took.
func (o *outbox) written() {
	o.mu.Lock()
	o.bounds.total.Add(-o.writingBytes)
	o.writingBytes = 0
	o.mu.Unlock()
}

// discard drops everything queued and refuses later pushes (the socket is
// closed); the writer's batch is released by written.
func (o *outbox) discard() {
	o.mu.Lock()
	clear(o.frames)
	o.frames = nil
	o.bounds.total.Add(-o.queuedBytes)
	o.queuedBytes = 0
	o.closed = true
	o.mu.Unlock()
}

// heldBytes is the estimate of the frames queued or being written.
func (o *outbox) heldBytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queuedBytes + o.writingBytes
}

func (o *outbox) maybeKick() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// frameOverheadBytes is what a frame costs in the estimate beyond what
// frameBytes counts: its envelope, and the frame value itself.
const frameOverheadBytes = wire.HeaderBytes + 56

// frameBytes estimates a frame's encoded size: exact for the frames of
// the hot path (deliveries, confirms), close for the rest, in a few
// additions (no encoding).
func frameBytes(frame wire.Frame) int64 {
	n := frameOverheadBytes
	switch f := frame.(type) {
	case *wire.Deliver:
		n += wire.DeliverHeadBytes
		for i := range f.Deliveries {
			n += f.Deliveries[i].EncodedBytes()
		}
	case *wire.Confirm:
		n += 4 + 17*len(f.Ranges)
	case *wire.NegativeConfirm:
		for i := range f.Ranges {
			n += 20 + len(f.Ranges[i].Message)
		}
	case *wire.ErrorFrame:
		n += 12 + len(f.Message)
	case *wire.SubscriptionEnded:
		n += 12 + len(f.Message)
	case *wire.QueueList:
		for i := range f.Queues {
			n += queueInfoBytes(&f.Queues[i])
		}
	case *wire.QueueInfoReply:
		n += queueInfoBytes(&f.Info)
	case *wire.DeclareOKMode:
		n += 16 + len(f.Policy)
		for _, warning := range f.Warnings {
			n += 2 + len(warning)
		}
	}
	return int64(n)
}

// queueInfoBytes estimates one queue info's msgpack size: its strings and
// a bound on its fixed fields.
func queueInfoBytes(info *wire.QueueInfo) int {
	n := 512 + len(info.Name) + len(info.FenceError) + len(info.Policy) + len(info.Owner) + len(info.LastSyncError) +
		len(info.Options.DeadLetterQueue)
	for _, replica := range info.Replicas {
		n += 64 + len(replica.Node)
	}
	return n
}
