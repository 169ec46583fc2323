// Session frames: the hello exchange, keepalive, the generic reply, errors
// and redirects. Layouts (see docs/protocol.md for the field rules):
//
//	FHL1 hello        versions (u16 list of u16), client_name string, auth_token bytes,
//	                  previous_session string, max_body_bytes u32
//	FHO1 hello-ok     version u16, node_id string, session_id string, session u8,
//	                  max_body_bytes u32, server_version string
//	FPI1 ping         request_id u64
//	FPO1 pong         request_id u64
//	FOK1 ok           request_id u64, count u64
//	FER1 error        request_id u64, code u16, message string
//	FRD1 redirect     request_id u64, queue string, node_id string, address string
//
// Invariant: request ids in requests and in their direct replies are never
// zero; zero in an error or redirect means "not tied to a request".
package wire

import "fmt"

// SessionState says whether hello-ok opened a new session or resumed one.
type SessionState uint8

const (
	// SessionNew: a new session; the client has no state on the node.
	SessionNew SessionState = 0
	// SessionResumedAfterRestart: the client named a session from before
	// the node restarted. Everything the old session held is gone: its
	// unconfirmed publishes may or may not have been stored (publish them
	// again), its subscriptions are closed and its held deliveries will be
	// delivered again, marked redelivered.
	SessionResumedAfterRestart SessionState = 1
)

func (s SessionState) String() string {
	switch s {
	case SessionNew:
		return "new"
	case SessionResumedAfterRestart:
		return "resumed_after_restart"
	}
	return fmt.Sprintf("session_state_%d", uint8(s))
}

// Hello (FHL1) is the first frame a client sends.
type Hello struct {
	Versions        []uint16 // protocol versions the client speaks, at least one
	ClientName      string   // free text for logs and the dashboard
	AuthToken       []byte   // empty when the node needs none
	PreviousSession string   // session id from an earlier hello-ok, or empty
	MaxBodyBytes    uint32   // largest body the client accepts; 0 means DefaultMaxBodyBytes
}

func (*Hello) Tag() Tag { return TagHello }

func (f *Hello) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagHello)
	dst = appendCount16(dst, "versions", len(f.Versions))
	for _, version := range f.Versions {
		dst = appendU16(dst, version)
	}
	dst = appendString(dst, "client_name", f.ClientName)
	dst = appendBytes(dst, "auth_token", f.AuthToken)
	dst = appendString(dst, "previous_session", f.PreviousSession)
	dst = appendU32(dst, f.MaxBodyBytes)
	return endFrame(dst, start)
}

func (f *Hello) Decode(body []byte) error {
	d := newDecoder(TagHello, body)
	n := d.count16("versions", 2)
	if n == 0 && d.err == nil {
		d.failf("versions", "must list at least one version")
	}
	f.Versions = growSlice(f.Versions, n)
	for i := range f.Versions {
		f.Versions[i] = d.u16("version")
	}
	f.ClientName = d.str("client_name")
	f.AuthToken = d.bytes("auth_token")
	f.PreviousSession = d.str("previous_session")
	f.MaxBodyBytes = d.u32("max_body_bytes")
	return d.finish()
}

// HelloOK (FHO1) accepts a hello.
type HelloOK struct {
	Version       uint16       // the protocol version chosen: the highest both speak
	NodeID        string       // the node that serves this connection
	SessionID     string       // opaque; name it in a later hello to resume
	Session       SessionState // new, or resumed after a node restart
	MaxBodyBytes  uint32       // largest body the node accepts
	ServerVersion string       // the node's software version, for people
}

func (*HelloOK) Tag() Tag { return TagHelloOK }

func (f *HelloOK) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagHelloOK)
	dst = appendU16(dst, f.Version)
	dst = appendString(dst, "node_id", f.NodeID)
	dst = appendString(dst, "session_id", f.SessionID)
	dst = appendU8(dst, uint8(f.Session))
	dst = appendU32(dst, f.MaxBodyBytes)
	dst = appendString(dst, "server_version", f.ServerVersion)
	return endFrame(dst, start)
}

func (f *HelloOK) Decode(body []byte) error {
	d := newDecoder(TagHelloOK, body)
	f.Version = d.u16("version")
	f.NodeID = d.str("node_id")
	f.SessionID = d.str("session_id")
	f.Session = SessionState(d.enum("session", 0, uint8(SessionResumedAfterRestart)))
	f.MaxBodyBytes = d.u32("max_body_bytes")
	f.ServerVersion = d.str("server_version")
	return d.finish()
}

// Ping (FPI1) asks the peer for a pong with the same request id. Either
// side may send it.
type Ping struct {
	RequestID uint64
}

func (*Ping) Tag() Tag { return TagPing }

func (f *Ping) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPing)
	dst = appendU64(dst, f.RequestID)
	return endFrame(dst, start)
}

func (f *Ping) Decode(body []byte) error {
	d := newDecoder(TagPing, body)
	f.RequestID = d.nonZeroU64("request_id")
	return d.finish()
}

// Pong (FPO1) answers a ping.
type Pong struct {
	RequestID uint64
}

func (*Pong) Tag() Tag { return TagPong }

func (f *Pong) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagPong)
	dst = appendU64(dst, f.RequestID)
	return endFrame(dst, start)
}

func (f *Pong) Decode(body []byte) error {
	d := newDecoder(TagPong, body)
	f.RequestID = d.nonZeroU64("request_id")
	return d.finish()
}

// OK (FOK1) is the success reply to unsubscribe, delete-queue and
// purge-queue. Count is what the request affected: deliveries released by
// unsubscribe, messages removed by delete-queue or purge-queue.
type OK struct {
	RequestID uint64
	Count     uint64
}

func (*OK) Tag() Tag { return TagOK }

func (f *OK) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagOK)
	dst = appendU64(dst, f.RequestID)
	dst = appendU64(dst, f.Count)
	return endFrame(dst, start)
}

func (f *OK) Decode(body []byte) error {
	d := newDecoder(TagOK, body)
	f.RequestID = d.nonZeroU64("request_id")
	f.Count = d.u64("count")
	return d.finish()
}

// ErrorFrame (FER1) reports a failed request, or, with request id 0, a
// failure not tied to one. Codes 100-199 mean the sender closes the
// connection after it.
type ErrorFrame struct {
	RequestID uint64 // the request that failed, or 0
	Code      Code
	Message   string // for people; never parse it
}

func (*ErrorFrame) Tag() Tag { return TagError }

func (f *ErrorFrame) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagError)
	dst = appendU64(dst, f.RequestID)
	dst = appendU16(dst, uint16(f.Code))
	dst = appendString(dst, "message", f.Message)
	return endFrame(dst, start)
}

func (f *ErrorFrame) Decode(body []byte) error {
	d := newDecoder(TagError, body)
	f.RequestID = d.u64("request_id")
	f.Code = Code(d.u16("code"))
	f.Message = d.str("message")
	return d.finish()
}

// Error lets an ErrorFrame be returned as a Go error by clients.
func (f *ErrorFrame) Error() string {
	return fmt.Sprintf("fibril error %d %s: %s", uint16(f.Code), f.Code, f.Message)
}

// Redirect (FRD1) says another node owns the queue. It answers a request
// (request id set) or accompanies negative confirms of publishes to that
// queue (request id 0).
type Redirect struct {
	RequestID uint64 // the redirected request, or 0
	Queue     string
	NodeID    string
	Address   string // host:port of the owner's client listener
}

func (*Redirect) Tag() Tag { return TagRedirect }

func (f *Redirect) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagRedirect)
	dst = f.appendFields(dst)
	return endFrame(dst, start)
}

func (f *Redirect) Decode(body []byte) error {
	d := newDecoder(TagRedirect, body)
	f.decodeFields(&d)
	return d.finish()
}

// appendFields and decodeFields are the fields FRD1 and FRD2 share.
func (f *Redirect) appendFields(dst []byte) []byte {
	dst = appendU64(dst, f.RequestID)
	dst = appendString(dst, "queue", f.Queue)
	dst = appendString(dst, "node_id", f.NodeID)
	return appendString(dst, "address", f.Address)
}

func (f *Redirect) decodeFields(d *decoder) {
	f.RequestID = d.u64("request_id")
	f.Queue = d.str("queue")
	f.NodeID = d.str("node_id")
	f.Address = d.str("address")
}

// RedirectEpoch (FRD2) is FRD1 with the epoch of the owner it names, sent
// instead of FRD1 on a session of protocol version 2. A client that has
// followed a redirect of a newer epoch for the queue ignores one of an
// older epoch: it comes from a node that has not heard of the failover yet.
type RedirectEpoch struct {
	Redirect
	Epoch uint64 // the owner's epoch; 0 when the answering node does not know it
}

func (*RedirectEpoch) Tag() Tag { return TagRedirectEpoch }

func (f *RedirectEpoch) Encode(dst []byte) []byte {
	dst, start := beginFrame(dst, TagRedirectEpoch)
	dst = f.appendFields(dst)
	dst = appendU64(dst, f.Epoch)
	return endFrame(dst, start)
}

func (f *RedirectEpoch) Decode(body []byte) error {
	d := newDecoder(TagRedirectEpoch, body)
	f.decodeFields(&d)
	f.Epoch = d.u64("epoch")
	return d.finish()
}
