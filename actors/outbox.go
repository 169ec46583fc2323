package actors

// A connection has two goroutines besides its session actor. The reader
// decodes frames and sends them to the session actor (reader.go); the
// writer (this file) owns the socket's write side and a wire.Writer.
//
// The session actor never writes to the socket: it pushes finished frames
// into the outbox, and the writer goroutine takes everything queued at once,
// encodes it into one buffer and writes it with a single flush, so a burst
// of confirms and deliveries leaves in one write(2). The outbox is bounded
// by a frame count; the flow control upstream (publish credit in the reader,
// prefetch in the partitions, one reply per request) keeps it far below the
// bound, so reaching it means the client stopped reading, and the session
// closes the connection instead of buffering without end.

import (
	"errors"
	"sync"

	"github.com/fibrilmq/fibril/wire"
)

// outboxFramesMax bounds the frames waiting for the writer goroutine.
const outboxFramesMax = 1 << 16

// errOutboxFull is reported when a client stopped reading its frames.
var errOutboxFull = errors.New("actors: client is not reading its frames (send queue full)")

// outbox hands frames from a session actor to its writer goroutine.
type outbox struct {
	mu      sync.Mutex
	frames  []wire.Frame // waiting; owned by the writer once taken
	closing bool         // write what is queued, then close the connection
	closed  bool         // push refuses everything
	kick    chan struct{}
}

func newOutbox() *outbox {
	return &outbox{kick: make(chan struct{}, 1)}
}

// push queues frames for writing. It never blocks; it reports
// errOutboxFull when the bound is reached (nothing is queued then).
func (o *outbox) push(frames ...wire.Frame) error {
	o.mu.Lock()
	if o.closed || o.closing {
		o.mu.Unlock()
		return nil // the connection is going away; the frames have no reader
	}
	if len(o.frames)+len(frames) > outboxFramesMax {
		o.mu.Unlock()
		return errOutboxFull
	}
	o.frames = append(o.frames, frames...)
	o.mu.Unlock()
	o.maybeKick()
	return nil
}

// closeAfter queues last frames (an error, typically) and asks the writer
// to close the connection once they are written.
func (o *outbox) closeAfter(frames ...wire.Frame) {
	o.mu.Lock()
	if !o.closed && !o.closing {
		o.frames = append(o.frames, frames...)
		o.closing = true
	}
	o.mu.Unlock()
	o.maybeKick()
}

// take moves every waiting frame into into (reused) and reports whether the
// connection should close after writing them.
func (o *outbox) take(into []wire.Frame) ([]wire.Frame, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	into = append(into, o.frames...)
	clear(o.frames)
	o.frames = o.frames[:0]
	if o.closing {
		o.closed = true
	}
	return into, o.closing
}

func (o *outbox) maybeKick() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}
