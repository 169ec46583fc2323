// Package netlimit bounds what the connections of one listener between
// nodes (the peer links, Raft) can hold before they prove who they are,
// so that no socket that has not authenticated can starve one that has
// (docs/security.md, "Bounds of the links between nodes").
//
// A listener runs every accepted connection through a Gate:
//
//	accept     Admit: the connection is pending; the accept loop goes on at
//	           once, never waiting for a handshake
//	           when the source address already has PendingPerSource pending,
//	           its oldest is closed; else when the listener has Pending
//	           pending, the oldest of all is closed
//	first byte AwaitFirstByte: a connection that sends nothing within
//	           FirstByte is dropped (the handshake deadline is longer)
//	handshake  the listener's own (TLS, a hello, a first frame), under its
//	           own deadline
//	done       Established: the connection counts against Connections
//	           instead; past that cap it is refused
//	end        Close: whatever it counted is given back
//
// So the pending connections of a listener hold at most Pending sockets
// and goroutines whatever arrives, a flood from one address crowds out
// only that address's oldest, and a legitimate dialer's handshake is
// dropped only if Pending (or PendingPerSource, from its own address)
// newer connections arrive while it runs, which takes milliseconds.
package netlimit

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound one listener. Every field must be positive.
type Limits struct {
	// PendingPerSource bounds the connections from one IP address that
	// have not finished their handshake.
	PendingPerSource int
	// Pending bounds the connections from every address that have not
	// finished their handshake.
	Pending int
	// Connections bounds the connections that finished it.
	Connections int
	// FirstByte is how long a new connection has to send its first byte.
	FirstByte time.Duration
}

// Errors of a Gate; test with errors.Is.
var (
	// ErrDropped: the connection was closed to make room for newer ones
	// (or it was closed) before it finished its handshake.
	ErrDropped = errors.New("netlimit: the connection was dropped while pending")
	// ErrTooManyConnections: the listener holds its limit of established
	// connections.
	ErrTooManyConnections = errors.New("netlimit: the listener holds its limit of connections")
	// ErrNoFirstByte: nothing arrived within Limits.FirstByte, or the
	// connection ended first.
	ErrNoFirstByte = errors.New("netlimit: the connection sent nothing in time")
)

// Gate applies Limits to the connections of one listener. Its methods
// are safe for concurrent use.
type Gate struct {
	limits Limits

	mu          sync.Mutex
	pending     *list.List            // of *Conn, oldest first; guarded by mu
	bySource    map[string]*list.List // of *Conn per source IP, oldest first; guarded by mu
	established int                   // guarded by mu

	dropped, refused atomic.Uint64
}

// NewGate returns a Gate for limits, or an error naming a field that is
// not positive.
func NewGate(limits Limits) (*Gate, error) {
	for name, value := range map[string]int64{"PendingPerSource": int64(limits.PendingPerSource),
		"Pending": int64(limits.Pending), "Connections": int64(limits.Connections), "FirstByte": int64(limits.FirstByte)} {
		if value <= 0 {
			return nil, fmt.Errorf("netlimit: Limits.%s must be positive, got %d", name, value)
		}
	}
	return &Gate{limits: limits, pending: list.New(), bySource: map[string]*list.List{}}, nil
}

// Stats are a Gate's counts, for logs, metrics and tests.
type Stats struct {
	Pending     int    // connections in their handshake now
	Established int    // connections past it now
	Dropped     uint64 // pending connections closed to make room, since the start
	Refused     uint64 // connections refused at Established for the cap, since the start
}

// Stats returns the Gate's counts now.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Pending: g.pending.Len(), Established: g.established, Dropped: g.dropped.Load(), Refused: g.refused.Load()}
}

// connState is where a Conn stands in its Gate.
type connState uint8

const (
	statePending connState = iota
	stateEstablished
	stateGone // dropped, refused or closed: it counts for nothing
)

// Conn is a connection a Gate admitted. Close it, not the connection
// under it, so the Gate gives back what it counted.
type Conn struct {
	net.Conn
	gate     *Gate
	source   string
	accepted time.Time
	first    []byte // the first byte, read by AwaitFirstByte and not yet returned by Read

	// guarded by gate.mu
	state        connState
	inPending    *list.Element
	inSource     *list.Element
	closeStarted bool
	dropped      bool // closed by the Gate to make room
}

// Admit counts a newly accepted connection as pending, closing the oldest
// pending one of its source or of the listener when a cap is reached. It
// never blocks.
func (g *Gate) Admit(conn net.Conn) *Conn {
	c := &Conn{Conn: conn, gate: g, source: sourceOf(conn.RemoteAddr()), accepted: time.Now()}
	g.mu.Lock()
	var victim *Conn
	fromSource := g.bySource[c.source]
	switch {
	case fromSource != nil && fromSource.Len() >= g.limits.PendingPerSource:
		victim = fromSource.Front().Value.(*Conn)
	case g.pending.Len() >= g.limits.Pending:
		victim = g.pending.Front().Value.(*Conn)
	}
	if victim != nil {
		g.forgetPending(victim)
		victim.state, victim.dropped = stateGone, true
	}
	if fromSource == nil {
		fromSource = list.New()
		g.bySource[c.source] = fromSource
	}
	c.inPending = g.pending.PushBack(c)
	c.inSource = fromSource.PushBack(c)
	g.mu.Unlock()
	if victim != nil {
		g.dropped.Add(1)
		_ = victim.Conn.Close() // its handshake fails and its goroutine ends
	}
	return c
}

// forgetPending takes a pending connection out of the lists. Hold g.mu.
func (g *Gate) forgetPending(c *Conn) {
	g.pending.Remove(c.inPending)
	fromSource := g.bySource[c.source]
	fromSource.Remove(c.inSource)
	if fromSource.Len() == 0 {
		delete(g.bySource, c.source)
	}
	c.inPending, c.inSource = nil, nil
}

// AwaitFirstByte waits, at most Limits.FirstByte from the accept, for
// the connection's first byte, and keeps it for the next Read. It clears
// the read deadline it set; the handshake sets its own.
func (c *Conn) AwaitFirstByte() error {
	if err := c.Conn.SetReadDeadline(c.accepted.Add(c.gate.limits.FirstByte)); err != nil {
		return err
	}
	var one [1]byte
	n, err := c.Conn.Read(one[:])
	if n == 1 {
		c.first = one[:]
		return c.Conn.SetReadDeadline(time.Time{})
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return fmt.Errorf("%w: %v from the accept", ErrNoFirstByte, c.gate.limits.FirstByte)
	}
	if err == nil {
		return ErrNoFirstByte
	}
	return fmt.Errorf("%w: %w", ErrNoFirstByte, err) // it closed before saying anything
}

// Read returns the byte AwaitFirstByte kept, then reads the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.first) > 0 && len(p) > 0 {
		p[0], c.first = c.first[0], nil
		return 1, nil
	}
	return c.Conn.Read(p)
}

// Established moves a connection that finished its handshake from the
// pending ones to the established ones. It fails with ErrDropped when
// the connection was dropped meanwhile, and with ErrTooManyConnections
// when the listener holds its limit; then the caller closes it.
func (c *Conn) Established() error {
	g := c.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.state != statePending {
		return ErrDropped
	}
	g.forgetPending(c)
	if g.established >= g.limits.Connections {
		c.state = stateGone
		g.refused.Add(1)
		return fmt.Errorf("%w (%d)", ErrTooManyConnections, g.limits.Connections)
	}
	c.state = stateEstablished
	g.established++
	return nil
}

// Dropped reports whether the Gate closed the connection to make room
// for newer ones: its handshake's failure says nothing about its dialer,
// and a listener need not log it.
func (c *Conn) Dropped() bool {
	c.gate.mu.Lock()
	defer c.gate.mu.Unlock()
	return c.dropped
}

// Close closes the connection and gives back what it counted. It is
// safe to call more than once.
func (c *Conn) Close() error {
	g := c.gate
	g.mu.Lock()
	first := !c.closeStarted
	c.closeStarted = true
	switch c.state {
	case statePending:
		g.forgetPending(c)
	case stateEstablished:
		g.established--
	}
	c.state = stateGone
	g.mu.Unlock()
	if !first {
		return nil
	}
	return c.Conn.Close()
}

// sourceOf is the IP of an address: the unit of PendingPerSource.
func sourceOf(address net.Addr) string {
	if tcp, ok := address.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(address.String())
	if err != nil {
		return address.String()
	}
	return host
}
