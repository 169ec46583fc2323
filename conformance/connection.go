package conformance

// One connection of a case: a reader goroutine decodes frames into
// values and hands them over a channel; the case goroutine files them
// (wait) into pending frames, publish outcomes and deliveries.

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// errWaitTimeout: nothing arrived before the deadline.
var errWaitTimeout = errors.New("timed out")

type received struct {
	frame map[string]any
	err   error // the stream ended (io.EOF) or broke; final
}

type outcome struct {
	confirmed bool
	boundary  uint64
	duplicate *bool // FCF2 only: whether the number was a duplicate
	code      uint64
	message   string
}

func (o outcome) value() map[string]any {
	if o.confirmed {
		value := map[string]any{"boundary": o.boundary}
		if o.duplicate != nil {
			value["duplicate"] = *o.duplicate
		}
		return value
	}
	return map[string]any{"code": o.code, "message": o.message}
}

func (o outcome) String() string {
	if o.confirmed {
		return fmt.Sprintf("confirmed at boundary %d", o.boundary)
	}
	return fmt.Sprintf("refused with code %d (%s)", o.code, o.message)
}

type connection struct {
	conn          net.Conn
	frames        chan received
	nextRequestID uint64
	published     map[uint64]bool
	pending       []map[string]any
	outcomes      map[uint64]outcome
	deliveries    map[uint64][]map[string]any
	closed        bool
	endErr        error
}

func newConnection(conn net.Conn) *connection {
	c := &connection{conn: conn, frames: make(chan received, 1024), published: map[uint64]bool{},
		outcomes: map[uint64]outcome{}, deliveries: map[uint64][]map[string]any{}}
	go c.readLoop()
	return c
}

// readLoop reads until the stream ends. The suite accepts bodies up to
// the protocol's default limit, as the hello it sends says.
func (c *connection) readLoop() {
	reader := wire.NewReader(c.conn, 0)
	for {
		tag, body, err := reader.Next()
		if err != nil {
			c.frames <- received{err: err}
			close(c.frames)
			return
		}
		frame, err := frameValue(tag, body)
		if err != nil {
			c.frames <- received{err: fmt.Errorf("the node sent a frame the protocol does not allow: %w", err)}
			close(c.frames)
			return
		}
		c.frames <- received{frame: frame}
	}
}

// wait files the next received frame, or returns an error at the
// deadline or once the stream has ended.
func (c *connection) wait(deadline time.Time) error {
	if c.closed {
		return fmt.Errorf("the connection is closed (%v)", c.endErr)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case got, ok := <-c.frames:
		if !ok || got.err != nil {
			c.closed = true
			c.endErr = got.err
			if got.err != nil && !isEndOfStream(got.err) {
				return got.err
			}
			return fmt.Errorf("the connection is closed")
		}
		c.file(got.frame)
		return nil
	case <-timer.C:
		return errWaitTimeout
	}
}

func isEndOfStream(err error) bool {
	var netErr net.Error
	return err.Error() == "EOF" || errors.As(err, &netErr) || errors.Is(err, net.ErrClosed)
}

func (c *connection) file(frame map[string]any) {
	switch frame["tag"] {
	case "FCF1", "FCF2", "FNC1":
		for _, item := range frame["ranges"].([]any) {
			r := item.(map[string]any)
			first, last := r["first_seq"].(uint64), r["last_seq"].(uint64)
			answer := outcome{confirmed: true, boundary: 0}
			switch frame["tag"] {
			case "FCF1":
				answer.boundary = r["boundary"].(uint64)
			case "FCF2":
				duplicate := r["duplicate"].(bool)
				answer.boundary, answer.duplicate = r["boundary"].(uint64), &duplicate
			default:
				answer = outcome{code: r["code"].(uint64), message: r["message"].(string)}
			}
			// A range covers the published numbers inside it; walk
			// whichever is shorter, the range or the published set.
			if last-first < uint64(len(c.published)) {
				for seq := first; ; seq++ {
					if c.published[seq] {
						c.outcomes[seq] = answer
					}
					if seq == last {
						break
					}
				}
				continue
			}
			for seq := range c.published {
				if seq >= first && seq <= last {
					c.outcomes[seq] = answer
				}
			}
		}
	case "FDL1":
		id := frame["subscription_id"].(uint64)
		for _, d := range frame["deliveries"].([]any) {
			c.deliveries[id] = append(c.deliveries[id], d.(map[string]any))
		}
	default:
		c.pending = append(c.pending, frame)
	}
}
