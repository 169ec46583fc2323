package client

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/fibrilmq/fibril/tlsconfig"
)

// Defaults for the zero values of Options.
const (
	DefaultMaxPendingPublishes = 4096
	DefaultWriteQueueLength    = 1024
	DefaultMaxRedirects        = 4
	DefaultDialTimeout         = 5 * time.Second
	DefaultKeepaliveInterval   = 30 * time.Second
	DefaultBackoffInitial      = 50 * time.Millisecond
	DefaultBackoffMax          = 5 * time.Second
	DefaultMaxBatchMessages    = 1024
)

// Options configure a Client. Every zero value means its default.
type Options struct {
	// Addresses of the nodes to connect to (host:port), tried in order on
	// the first dial and in rotation on every reconnect. At least one.
	Addresses []string
	// AuthToken is sent in hello; empty when the node needs none.
	AuthToken []byte
	// ClientName is free text the node shows in logs and the dashboard.
	ClientName string

	// MaxPendingPublishes bounds the publishes in flight (sent or queued,
	// not yet confirmed) across the whole Client; Publish and PublishAsync
	// wait for room. With Confirms set, a publish also holds its place until
	// its confirm has been received from the Confirms channel.
	MaxPendingPublishes int
	// WriteQueueLength bounds each connection's queue of frames waiting for
	// its writer goroutine.
	WriteQueueLength int
	// MaxBatchMessages bounds the messages the writer packs into one
	// publish frame (messages to the same queue that are queued together
	// travel in one frame).
	MaxBatchMessages int
	// MaxBodyBytes is the largest frame body this client accepts (told to
	// the node in hello). 0 means 16 MiB, the node's default limit. Keep it
	// at least as large as the node's (Session.MaxBodyBytes): a message
	// whose delivery does not fit ends the subscription that meets it (its
	// Err says so) and stays in the queue for consumers that accept it.
	MaxBodyBytes uint32

	// Confirms, when set, makes Confirms() return a channel that receives
	// the outcome of every PublishAsync, in the order outcomes complete.
	// The channel must be drained: publishes wait for room while their
	// confirms sit unreceived (they never stall the connection).
	Confirms bool

	// WaitForReconnect makes requests made while a connection is being
	// re-established wait for it (bounded by their context) instead of
	// failing at once with ErrConnectionLost.
	WaitForReconnect bool
	// Backoff paces reconnect attempts.
	Backoff Backoff
	// DialTimeout bounds one connection attempt, hello included.
	DialTimeout time.Duration
	// KeepaliveInterval is how long a connection may hear nothing from the
	// node: one that heard nothing for a quarter of it pings the node, and
	// a ping unanswered while nothing else came for a whole interval closes
	// the connection (and so triggers a reconnect), within a quarter
	// interval after that: a busy node whose pong waits behind other
	// frames is not taken for a dead one. Negative turns keepalive off.
	KeepaliveInterval time.Duration
	// MaxRedirects bounds how many redirects one request follows.
	MaxRedirects int
	// PublishTimeout bounds how long a publish waits for its confirm,
	// from the moment it is queued, whatever it waits for (a connection,
	// a redirect's node, the answer); when it passes, the publish fails
	// with ErrPublishTimeout (outcome unknown) and leaves the window. 0 means
	// no bound beyond the connection's own (a stalled node is found by the
	// keepalive). WithPublishTimeout and WithDeadline set it per publish,
	// and Publish also ends at its context's deadline.
	PublishTimeout time.Duration

	// Idempotent makes every publish carry this Client's producer id (one
	// the SDK chooses at Dial, kept across reconnects: Client.ProducerID)
	// and its publish number (Confirm.Seq) as the producer sequence, in
	// FPB2 frames. A queue with a dedup window then stores each message
	// once however often it is sent within the window, and confirms a
	// repeat with Confirm.Duplicate set. It needs a node that speaks FPB2
	// (this version and later); an older node closes the connection.
	Idempotent bool
	// RetryUnknownPublishes sends a publish again, on the next connection,
	// when its connection ended before its outcome was known, instead of
	// failing it with ErrConnectionLost, but only when that is safe: the
	// publish carries a dedup key (Idempotent, or a MessageID of the
	// caller's), its queue deduplicates (the SDK reads the queue's
	// dedup_window_ms from its info after the reconnect), and less than
	// half that window has passed since the publish was first sent. Every
	// other publish fails as before. The publish's deadline still bounds
	// it. The confirm of a retry that the queue had stored already says
	// Duplicate.
	RetryUnknownPublishes bool

	// OnConnect is called after every successful hello (the first one and
	// each reconnect, on the home connection and on redirect targets),
	// from the connection's supervising goroutine; keep it short.
	OnConnect func(Session)
	// OnConnectionLost is called when an established connection ends
	// (the node closed it, the network failed, a keepalive went
	// unanswered), with its address and the reason. Everything pending on
	// it has failed with ErrConnectionLost; a reconnect follows.
	OnConnectionLost func(address string, err error)
	// OnReconnectFailed is called for every failed attempt to connect
	// after Dial (again after a connection was lost, or to a node a
	// redirect named), for each address of each round, with the address,
	// the number of the round (1 for the first) and the reason. The Client
	// keeps trying, with backoff, until it closes. It is called from the
	// link's supervising goroutine; keep it short.
	OnReconnectFailed func(address string, round int, err error)
	// OnDisconnect is called for both of the above: when a connection
	// ends, and when an attempt to make one fails.
	//
	// Deprecated: use OnConnectionLost and OnReconnectFailed, which tell
	// the two apart.
	OnDisconnect func(address string, err error)
	// OnError receives node errors that answer no request (request id 0,
	// for example unknown_delivery_tag). A subscription the node ends is
	// reported on that Subscription (Done, Err), not here. It is called
	// from a connection's reader goroutine; keep it short.
	OnError func(error)

	// TLS, when set, makes every connection TLS (TLS 1.2 or later): see
	// TLSOptions. Leave it nil for a node that speaks plain TCP.
	TLS *TLSOptions

	// Dialer opens the byte stream to an address; nil means TCP (or TLS
	// with TLS set; the two exclude each other). Tests use it to inject
	// failures.
	Dialer func(ctx context.Context, address string) (net.Conn, error)
}

// TLSOptions are a client's TLS files and the name it expects. The files
// are read when Dial is called (a missing or broken one fails Dial with a
// sentence naming it); the CA file is read again for each reconnect.
type TLSOptions struct {
	// CAFile holds the CAs that sign the node's certificate (PEM). Empty:
	// the system's roots.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key, for a
	// node that asks for one; both or neither.
	CertFile, KeyFile string
	// ServerName is the name the node's certificate must carry. Empty:
	// the host of the address dialed (or redirected to).
	ServerName string
}

// tlsDialer builds the Dialer of o.TLS.
func (o Options) tlsDialer() (func(ctx context.Context, address string) (net.Conn, error), error) {
	if o.Dialer != nil {
		return nil, fmt.Errorf("%w: TLS and Dialer exclude each other (a Dialer can do TLS itself)", ErrInvalidConfig)
	}
	tlsClient, err := tlsconfig.NewClient(tlsconfig.ClientSettings{CAFile: o.TLS.CAFile, CertFile: o.TLS.CertFile,
		KeyFile: o.TLS.KeyFile, ServerName: o.TLS.ServerName})
	if err != nil {
		return nil, fmt.Errorf("%w: TLS: %w", ErrInvalidConfig, err)
	}
	return func(ctx context.Context, address string) (net.Conn, error) {
		return tlsClient.DialContext(ctx, "tcp", address)
	}, nil
}

// Backoff is the reconnect schedule: the n-th consecutive failed round of
// attempts waits a random duration in [d/2, d], where d = Initial·2ⁿ capped
// at Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// Session describes the session hello-ok opened.
type Session struct {
	Address       string // the address dialed
	NodeID        string // the node serving the connection
	SessionID     string // opaque; the SDK names it when it reconnects
	Resumed       bool   // the node restarted since the session named in hello: held deliveries are stale, unconfirmed publishes have an unknown outcome
	ServerVersion string
	MaxBodyBytes  uint32 // the largest body the node accepts
}

// withDefaults returns a copy with every zero value replaced by its default.
func (o Options) withDefaults() Options {
	if o.MaxPendingPublishes <= 0 {
		o.MaxPendingPublishes = DefaultMaxPendingPublishes
	}
	if o.WriteQueueLength <= 0 {
		o.WriteQueueLength = DefaultWriteQueueLength
	}
	if o.MaxBatchMessages <= 0 {
		o.MaxBatchMessages = DefaultMaxBatchMessages
	}
	if o.Backoff.Initial <= 0 {
		o.Backoff.Initial = DefaultBackoffInitial
	}
	if o.Backoff.Max <= 0 {
		o.Backoff.Max = DefaultBackoffMax
	}
	if o.Backoff.Max < o.Backoff.Initial {
		o.Backoff.Max = o.Backoff.Initial
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.KeepaliveInterval == 0 {
		o.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = DefaultMaxRedirects
	}
	if o.Dialer == nil {
		dialer := &net.Dialer{}
		o.Dialer = func(ctx context.Context, address string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", address)
		}
	}
	return o
}

// backoffDelay is the wait before reconnect round `failures` (0 for the
// first retry): uniformly random in [d/2, d] with d = initial·2^failures
// capped at max. random returns a value in [0, 1).
func backoffDelay(failures int, initial, max time.Duration, random func() float64) time.Duration {
	ceiling := initial
	for i := 0; i < failures && ceiling < max; i++ {
		ceiling *= 2
	}
	if ceiling > max {
		ceiling = max
	}
	half := ceiling / 2
	return half + time.Duration(random()*float64(ceiling-half))
}
