package rafttransport

// The bounds of the Raft listener (docs/security.md, "Bounds of the links
// between nodes"). Every accepted connection goes through a
// netlimit.Gate: it is pending from the accept until its first frame
// arrived (past the TLS handshake and the identity check), and the accept
// loop never waits for it. At most DefaultLimits.Pending connections are
// pending at once, DefaultLimits.PendingPerSource from one address; a
// newer one makes the oldest close. A connection sends its first byte
// within FirstByte of the accept and its first frame within
// handshakeTimeout, or it is dropped. At most Connections are
// established at once: each holds a descriptor, which the queue logs
// share.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fibrilmq/fibril/netlimit"
)

// DefaultLimits bound a Raft listener. dragonboat opens a few
// connections to each peer (message lanes, snapshot streams), so a
// cluster of tens of nodes stays far below them.
var DefaultLimits = netlimit.Limits{PendingPerSource: 32, Pending: 256, Connections: 512, FirstByte: time.Second}

// limits are the factory's limits, or DefaultLimits.
func (f *Factory) limits() netlimit.Limits {
	if f.Limits == (netlimit.Limits{}) {
		return DefaultLimits
	}
	return f.Limits
}

// Stats returns the counts of the listener's gate.
func (t *Transport) Stats() netlimit.Stats { return t.gate.Stats() }

// refused logs a connection that did not become established: at warn
// level when its dialer did something wrong (a refused certificate, a
// bad frame), at debug level when the gate dropped it to make room or it
// sent nothing in time, which says nothing about who dialled and would
// fill the log under a flood.
func (t *Transport) refused(conn *netlimit.Conn, err error) {
	level := slog.LevelWarn
	if conn.Dropped() || errors.Is(err, netlimit.ErrNoFirstByte) {
		level = slog.LevelDebug
	}
	t.logger.Log(context.Background(), level, "raft connection refused", "remote", conn.RemoteAddr().String(), "err", err)
}
