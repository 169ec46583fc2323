package netlimit

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// fakeConn is one end of a pipe that says it comes from ip.
type fakeConn struct {
	net.Conn
	ip     string
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.ParseIP(c.ip), Port: 40000} }

func (c *fakeConn) Close() error {
	c.closed = true
	return c.Conn.Close()
}

// pipeFrom returns the accepting end (from ip) and the dialing end of a
// connection.
func pipeFrom(t *testing.T, ip string) (*fakeConn, net.Conn) {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	return &fakeConn{Conn: server, ip: ip}, client
}

func newGate(t *testing.T, limits Limits) *Gate {
	t.Helper()
	gate, err := NewGate(limits)
	if err != nil {
		t.Fatal(err)
	}
	return gate
}

var testLimits = Limits{PendingPerSource: 2, Pending: 3, Connections: 2, FirstByte: time.Second}

// A source at its cap loses its oldest pending connection; other sources
// keep theirs.
func TestAdmitDropsTheOldestOfASourceAtItsCap(t *testing.T) {
	gate := newGate(t, testLimits)
	other, _ := pipeFrom(t, "10.0.0.2")
	gate.Admit(other)
	var raws []*fakeConn
	for range 3 {
		raw, _ := pipeFrom(t, "10.0.0.1")
		raws = append(raws, raw)
		gate.Admit(raw)
	}
	if !raws[0].closed || raws[1].closed || raws[2].closed || other.closed {
		t.Fatalf("closed: oldest %v, newer %v %v, other source %v; want only the oldest of 10.0.0.1",
			raws[0].closed, raws[1].closed, raws[2].closed, other.closed)
	}
	if stats := gate.Stats(); stats.Pending != 3 || stats.Dropped != 1 {
		t.Fatalf("stats %+v, want 3 pending and 1 dropped", stats)
	}
}

// The listener at its cap loses its oldest pending connection, whatever
// its source.
func TestAdmitDropsTheOldestOfAllAtTheListenersCap(t *testing.T) {
	gate := newGate(t, testLimits)
	var raws []*fakeConn
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		raw, _ := pipeFrom(t, ip)
		raws = append(raws, raw)
		gate.Admit(raw)
	}
	if !raws[0].closed || raws[1].closed || raws[2].closed || raws[3].closed {
		t.Fatalf("closed %v %v %v %v; want only the oldest", raws[0].closed, raws[1].closed, raws[2].closed, raws[3].closed)
	}
}

// An established connection leaves the pending ones; past the cap one
// is refused; Close gives its place back, once.
func TestEstablishedConnectionsAreCapped(t *testing.T) {
	gate := newGate(t, testLimits)
	var conns []*Conn
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		raw, _ := pipeFrom(t, ip)
		conns = append(conns, gate.Admit(raw))
	}
	for _, conn := range conns[:2] {
		if err := conn.Established(); err != nil {
			t.Fatal(err)
		}
	}
	if err := conns[2].Established(); !errors.Is(err, ErrTooManyConnections) {
		t.Fatalf("a third established connection: %v, want ErrTooManyConnections", err)
	}
	if stats := gate.Stats(); stats.Pending != 0 || stats.Established != 2 || stats.Refused != 1 {
		t.Fatalf("stats %+v", stats)
	}
	_ = conns[0].Close()
	_ = conns[0].Close()
	if stats := gate.Stats(); stats.Established != 1 {
		t.Fatalf("after closing one twice: %+v, want 1 established", stats)
	}
	raw, _ := pipeFrom(t, "10.0.0.4")
	if err := gate.Admit(raw).Established(); err != nil {
		t.Fatalf("after a close, a new connection: %v", err)
	}
}

// A dropped connection cannot become established.
func TestADroppedConnectionIsNotEstablished(t *testing.T) {
	gate := newGate(t, testLimits)
	first, _ := pipeFrom(t, "10.0.0.1")
	oldest := gate.Admit(first)
	for range 2 {
		raw, _ := pipeFrom(t, "10.0.0.1")
		gate.Admit(raw)
	}
	if err := oldest.Established(); !errors.Is(err, ErrDropped) {
		t.Fatalf("the dropped connection: %v, want ErrDropped", err)
	}
	if stats := gate.Stats(); stats.Pending != 2 || stats.Established != 0 {
		t.Fatalf("stats %+v", stats)
	}
}

// The first byte must come within FirstByte; when it does, Read returns
// it before the rest.
func TestFirstByte(t *testing.T) {
	gate := newGate(t, Limits{PendingPerSource: 4, Pending: 4, Connections: 4, FirstByte: 50 * time.Millisecond})
	silent, _ := pipeFrom(t, "10.0.0.1")
	if err := gate.Admit(silent).AwaitFirstByte(); !errors.Is(err, ErrNoFirstByte) {
		t.Fatalf("a silent connection: %v, want ErrNoFirstByte", err)
	}
	speaking, client := pipeFrom(t, "10.0.0.2")
	conn := gate.Admit(speaking)
	go func() { _, _ = client.Write([]byte("hello")) }()
	if err := conn.AwaitFirstByte(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v; want hello", got, err)
	}
}

func TestNewGateRefusesLimitsThatAreNotPositive(t *testing.T) {
	for _, limits := range []Limits{
		{Pending: 1, Connections: 1, FirstByte: time.Second},
		{PendingPerSource: 1, Connections: 1, FirstByte: time.Second},
		{PendingPerSource: 1, Pending: 1, FirstByte: time.Second},
		{PendingPerSource: 1, Pending: 1, Connections: 1},
	} {
		if _, err := NewGate(limits); err == nil {
			t.Errorf("limits %+v were accepted", limits)
		}
	}
}
