package actors

// The bounds that keep one client from exhausting a node
// (docs/security.md, "Bounds"). Each has a setting with a default, and
// each counts in fibril_limit_reached_total{limit} when a client meets
// it. What a client sees at each:
//
//	connections_node, connections_address
//	                       the node refuses the connection at accept: one
//	                       plain FER1 connection_limit (107), then close
//	hello_frame_too_large  before hello, a frame over wire.MaxHelloBodyBytes:
//	                       FER1 frame_too_large (101), then close; its body is
//	                       never read (the reader reads under that limit until
//	                       the hello is accepted)
//	hello_deadline         no hello (TLS handshake included) within
//	                       Config.HelloTimeout: FER1 protocol_violation, close
//	publish_bytes, publishes
//	                       publish credit per session, in bytes and messages:
//	                       the reader stops reading until answers free credit
//	                       (TCP slows the client); nothing is refused
//	requests_in_flight     requests of every kind but publish and plain settle
//	                       read and not yet answered, per session: the reader
//	                       stops reading the same way
//	subscriptions          per session: a subscribe over it is answered
//	                       FER1 resource_limit (215)
//	queues                 per node: a declare that would create a queue over
//	                       it is answered FER1 resource_limit (215)
//	outbox_bytes_session   frames queued behind the batch being written to a
//	                       client that does not read, per session: the
//	                       connection is closed (an error frame would wait
//	                       behind them)
//	outbox_bytes_node      the same, all sessions together: a session whose
//	                       push takes the node over it is closed if it holds
//	                       at least outboxFairShareBytes itself
//	write_timeout          a write to the socket the client has not read
//	                       within Limits.WriteTimeout (plus a second per MiB
//	                       it holds): the connection is closed
//
// List requests gather their answer off the queues manager, at most
// Limits.MaxConcurrentLists at once node-wide; the others wait, in order.
//
// Invariant (connectionLimiter): open <= MaxConnections and, for every
// address, perAddress[address] <= MaxConnectionsPerAddress; every slot
// acquired is released exactly once (connectionSlot.release).

import (
	"cmp"
	"fmt"
	"net"
	"sync"
	"time"
)

// Defaults of Limits.
const (
	DefaultMaxConnections           = 4096
	DefaultMaxConnectionsPerAddress = 1024
	DefaultMaxPublishBytesInFlight  = 32 << 20
	DefaultMaxPublishesInFlight     = 1 << 15
	DefaultMaxRequestsInFlight      = 1024
	DefaultMaxSubscriptions         = 1024
	DefaultMaxQueues                = 10000
	DefaultMaxOutboxBytes           = 64 << 20
	DefaultMaxOutboxBytesTotal      = 1 << 30
	DefaultMaxConcurrentLists       = 4
	DefaultWriteTimeout             = 30 * time.Second
)

// publishCreditMessages is the most MaxPublishesInFlight may be: a
// partition's wait for its log holds that many frames (partition_publish.go),
// so one session alone never fills it.
const publishCreditMessages = DefaultMaxPublishesInFlight

// outboxFairShareBytes: when the node's outboxes together pass
// MaxOutboxBytesTotal, a session is closed for it only if its own outbox
// holds at least this much (or its whole cap, if smaller), so a client
// that reads keeps working while the ones that do not are closed.
const outboxFairShareBytes = 1 << 20

// outboxFramesMax bounds the frames waiting for one writer goroutine, on
// top of the byte bound (a frame also costs memory beyond its bytes).
const outboxFramesMax = 1 << 16

// Limits are the bounds of docs/security.md, "Bounds". Zero values mean
// the defaults above; a negative value is an invalid configuration.
type Limits struct {
	// MaxConnections bounds the client connections open at once (TLS
	// handshakes and sessions awaiting hello included).
	MaxConnections int
	// MaxConnectionsPerAddress bounds them per source IP address.
	MaxConnectionsPerAddress int
	// MaxPublishBytesInFlight and MaxPublishesInFlight are one session's
	// publish credit: frame bytes and messages read and not yet answered.
	// A frame always passes when nothing is in flight, so one larger than
	// the byte credit still goes, alone. MaxPublishesInFlight is at most
	// DefaultMaxPublishesInFlight.
	MaxPublishBytesInFlight int64
	MaxPublishesInFlight    int
	// MaxRequestsInFlight bounds one session's requests (declare,
	// subscribe, unsubscribe, info, list, delete, purge, ack-sync, ping)
	// read and not yet answered.
	MaxRequestsInFlight int
	// MaxSubscriptions bounds one session's subscriptions.
	MaxSubscriptions int
	// MaxQueues bounds the queues of the node (in a cluster, of the
	// catalog, as this node's replica knows it). Each open queue holds
	// files open: keep it below the process's file limit.
	MaxQueues int
	// MaxOutboxBytes bounds the bytes of frames one session has waiting
	// for its client (an estimate of their encoded size). Keep a
	// subscription's prefetch times its message size below it.
	MaxOutboxBytes int64
	// MaxOutboxBytesTotal bounds the same across all sessions.
	MaxOutboxBytesTotal int64
	// MaxConcurrentLists bounds the list-queues answers gathered at once.
	MaxConcurrentLists int
	// WriteTimeout bounds how long one write to a client's socket may
	// wait for the client to read (plus a second per MiB it holds); a
	// client that reads nothing for that long is disconnected.
	WriteTimeout time.Duration
}

// withDefaults fills zero values and refuses negative ones.
func (l Limits) withDefaults() (Limits, error) {
	if l.MaxConnections < 0 || l.MaxConnectionsPerAddress < 0 || l.MaxPublishBytesInFlight < 0 ||
		l.MaxPublishesInFlight < 0 || l.MaxRequestsInFlight < 0 || l.MaxSubscriptions < 0 || l.MaxQueues < 0 ||
		l.MaxOutboxBytes < 0 || l.MaxOutboxBytesTotal < 0 || l.MaxConcurrentLists < 0 || l.WriteTimeout < 0 {
		return l, fmt.Errorf("%w: a negative limit: %+v", ErrInvalidConfig, l)
	}
	if l.MaxPublishesInFlight > publishCreditMessages {
		return l, fmt.Errorf("%w: MaxPublishesInFlight %d is over %d, the publishes a queue's log wait holds",
			ErrInvalidConfig, l.MaxPublishesInFlight, publishCreditMessages)
	}
	l.MaxConnections = cmp.Or(l.MaxConnections, DefaultMaxConnections)
	l.MaxConnectionsPerAddress = cmp.Or(l.MaxConnectionsPerAddress, DefaultMaxConnectionsPerAddress)
	l.MaxPublishBytesInFlight = cmp.Or(l.MaxPublishBytesInFlight, DefaultMaxPublishBytesInFlight)
	l.MaxPublishesInFlight = cmp.Or(l.MaxPublishesInFlight, DefaultMaxPublishesInFlight)
	l.MaxRequestsInFlight = cmp.Or(l.MaxRequestsInFlight, DefaultMaxRequestsInFlight)
	l.MaxSubscriptions = cmp.Or(l.MaxSubscriptions, DefaultMaxSubscriptions)
	l.MaxQueues = cmp.Or(l.MaxQueues, DefaultMaxQueues)
	l.MaxOutboxBytes = cmp.Or(l.MaxOutboxBytes, DefaultMaxOutboxBytes)
	l.MaxOutboxBytesTotal = cmp.Or(l.MaxOutboxBytesTotal, DefaultMaxOutboxBytesTotal)
	l.MaxConcurrentLists = cmp.Or(l.MaxConcurrentLists, DefaultMaxConcurrentLists)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, DefaultWriteTimeout)
	return l, nil
}

// Names of the bounds in fibril_limit_reached_total.
const (
	limitConnectionsNode    = "connections_node"
	limitConnectionsAddress = "connections_address"
	limitHelloFrame         = "hello_frame_too_large"
	limitHelloDeadline      = "hello_deadline"
	limitPublishBytes       = "publish_bytes"
	limitPublishes          = "publishes"
	limitRequestsInFlight   = "requests_in_flight"
	limitSubscriptions      = "subscriptions"
	limitQueues             = "queues"
	limitOutboxSession      = "outbox_bytes_session"
	limitOutboxNode         = "outbox_bytes_node"
	limitWriteTimeout       = "write_timeout"
)

// limitNames lists them, so every series exists from the start.
var limitNames = []string{limitConnectionsNode, limitConnectionsAddress, limitHelloFrame, limitHelloDeadline,
	limitPublishBytes, limitPublishes, limitRequestsInFlight, limitSubscriptions, limitQueues,
	limitOutboxSession, limitOutboxNode, limitWriteTimeout}

// connectionLimiter counts open client connections, per node and per
// source address. The accept loop acquires; a connection's close releases.
type connectionLimiter struct {
	maxTotal, maxPerAddress int

	mu         sync.Mutex
	open       int            // Lock mu
	perAddress map[string]int // Lock mu
}

func newConnectionLimiter(limits Limits) *connectionLimiter {
	return &connectionLimiter{maxTotal: limits.MaxConnections, maxPerAddress: limits.MaxConnectionsPerAddress,
		perAddress: make(map[string]int)}
}

// connectionSlot is one connection's place in the limiter.
type connectionSlot struct {
	limiter *connectionLimiter
	address string
	once    sync.Once
}

// acquire takes a slot for a connection from remote, or says which limit
// refuses it ("" and a slot when none does).
func (l *connectionLimiter) acquire(remote net.Addr) (*connectionSlot, string) {
	address := sourceAddress(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.maxTotal:
		return nil, limitConnectionsNode
	case l.perAddress[address] >= l.maxPerAddress:
		return nil, limitConnectionsAddress
	}
	l.open++
	l.perAddress[address]++
	return &connectionSlot{limiter: l, address: address}, ""
}

// release gives the slot back; a second call does nothing.
func (s *connectionSlot) release() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		l := s.limiter
		l.mu.Lock()
		l.open--
		if l.perAddress[s.address]--; l.perAddress[s.address] <= 0 {
			delete(l.perAddress, s.address)
		}
		l.mu.Unlock()
	})
}

// openConnections returns the connections counted now.
func (l *connectionLimiter) openConnections() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// sourceAddress is the IP a connection comes from (its whole address when
// it has no IP, as on a pipe in tests).
func sourceAddress(remote net.Addr) string {
	if tcp, ok := remote.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	if host, _, err := net.SplitHostPort(remote.String()); err == nil {
		return host
	}
	return remote.String()
}

// refusalText says which connection limit refused a connection.
func refusalText(limit string, limits Limits) string {
	if limit == limitConnectionsAddress {
		return fmt.Sprintf("this node already has %d connections from your address, its limit; close some or retry later",
			limits.MaxConnectionsPerAddress)
	}
	return fmt.Sprintf("this node already has %d client connections, its limit; retry later or connect to another node",
		limits.MaxConnections)
}
