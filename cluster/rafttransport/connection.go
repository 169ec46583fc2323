package rafttransport

// A message connection is dragonboat's stream of Raft message batches to
// one peer (one per stream lane). dragonboat writes to it from one
// goroutine and never reads: the receiving side never writes on it. So
// anything a read returns says the peer closed its end (its process ended
// or restarted) or the connection broke. A watcher goroutine blocks in
// that read and closes peerGone when it returns.
//
// SendMessageBatch:
//   - peerGone closed: dial target again first (the old socket would take
//     the write and lose it, and fail the next one);
//   - a write that fails on a connection that looked healthy: dial again
//     and send the batch once more (Raft tolerates a message twice);
//   - only a failed dial, or a failure on the fresh connection, is
//     returned, and opens dragonboat's circuit breaker for the peer.
//
// Invariant: conn and peerGone are replaced together, only by the
// sending goroutine; the watcher of a replaced conn ends when redial
// closes that conn.

import (
	"context"
	"net"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

type messageConnection struct {
	transport *Transport
	target    string
	conn      net.Conn
	peerGone  chan struct{}
	payload   []byte
}

func newMessageConnection(ctx context.Context, t *Transport, target string) (*messageConnection, error) {
	c := &messageConnection{transport: t, target: target}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// connect dials target and starts the watcher of the new connection.
func (c *messageConnection) connect(ctx context.Context) error {
	conn, err := c.transport.dial(ctx, c.target)
	if err != nil {
		return err
	}
	gone := make(chan struct{})
	go watch(conn, gone)
	c.conn, c.peerGone = conn, gone
	return nil
}

// watch blocks in a read of conn until the peer closes it or it breaks.
func watch(conn net.Conn, gone chan<- struct{}) {
	defer close(gone)
	var one [1]byte
	_ = conn.SetReadDeadline(time.Time{})
	_, _ = conn.Read(one[:]) // the peer never writes: any return is its end
}

func (c *messageConnection) peerClosed() bool {
	select {
	case <-c.peerGone:
		return true
	default:
		return false
	}
}

// redial replaces the connection with a fresh one.
func (c *messageConnection) redial() error {
	_ = c.conn.Close()
	return c.connect(context.Background())
}

// Close implements raftio.IConnection.
func (c *messageConnection) Close() { _ = c.conn.Close() }

// SendMessageBatch implements raftio.IConnection.
func (c *messageConnection) SendMessageBatch(batch pb.MessageBatch) error {
	size := batch.SizeUpperLimit()
	if cap(c.payload) < size {
		c.payload = make([]byte, size)
	}
	payload := pb.MustMarshalTo(&batch, c.payload[:size])
	if c.peerClosed() {
		if err := c.redial(); err != nil {
			return err
		}
	}
	err := writeFrame(c.conn, methodMessages, payload, c.transport.encrypted())
	if err == nil {
		return nil
	}
	if redialErr := c.redial(); redialErr != nil {
		return err
	}
	return writeFrame(c.conn, methodMessages, payload, c.transport.encrypted())
}

// snapshotConnection streams the chunks of one snapshot; Close ends the
// stream with poison and waits for the answer, so the receiver has read
// every chunk before the sender calls the stream done.
type snapshotConnection struct {
	conn      net.Conn
	encrypted bool
}

// SendChunk implements raftio.ISnapshotConnection.
func (c *snapshotConnection) SendChunk(chunk pb.Chunk) error {
	payload := pb.MustMarshalTo(&chunk, make([]byte, chunk.Size()))
	return writeFrame(c.conn, methodChunk, payload, c.encrypted)
}

// Close implements raftio.ISnapshotConnection.
func (c *snapshotConnection) Close() {
	defer func() { _ = c.conn.Close() }()
	if err := c.conn.SetWriteDeadline(time.Now().Add(headerTimeout)); err != nil {
		return
	}
	if _, err := c.conn.Write(poison[:]); err != nil {
		return
	}
	var answer [2]byte
	if err := c.conn.SetReadDeadline(time.Now().Add(poisonAckTimeout)); err != nil {
		return
	}
	_, _ = c.conn.Read(answer[:])
}
