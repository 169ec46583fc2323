package actors

// Messages between actors. Each is sent with Send (never a blocking
// request) and answered, when it needs an answer, by a message to the PID
// it names. Slices in a message belong to the receiver once sent.

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// requestFailure is the error a request answers with: a wire code and a
// message for people. The zero value means success.
type requestFailure struct {
	code    wire.Code
	message string
	// cutOff marks the not_owner route of an owner that stepped down cut
	// off from its peers (replication.OwnerCutOff): while its own view
	// still names it, the session answers unavailable at once instead of
	// holding requests for the queue to open (cluster_session.go).
	cutOff bool
}

func (f requestFailure) failed() bool { return f.code != 0 }

func (f requestFailure) frame(requestID uint64) *wire.ErrorFrame {
	return &wire.ErrorFrame{RequestID: requestID, Code: f.code, Message: f.message}
}

// --- session → queues manager, and back ---

type declareRequest struct {
	replyTo   *actor.PID
	requestID uint64
	name      string
	options   wire.QueueOptions
	mode      wire.Mode // wire.ModeUnset: keep the queue's mode, or the default for a new one
}

type declareResult struct {
	requestID uint64
	created   bool
	mode      wire.Mode // the queue's effective mode
	warnings  []string
	failure   requestFailure
}

type deleteRequest struct {
	replyTo   *actor.PID
	requestID uint64
	name      string
}

type deleteResult struct {
	requestID uint64
	removed   uint64
	failure   requestFailure
}

type listRequest struct {
	replyTo   *actor.PID
	requestID uint64
	prefix    string
	after     string
	limit     int
	// visible, when set, keeps only the queues the session's user may see
	// (it is safe to call from any goroutine).
	visible func(name string) bool
}

type listResult struct {
	requestID uint64
	more      bool
	queues    []wire.QueueInfo
	failure   requestFailure // set when the list could not be made
}

// --- session → partition (hot path), and back ---

// publishBatch is one publish frame's messages for one partition.
type publishBatch struct {
	replyTo *actor.PID
	batchID uint64 // the session's id for the batch; the result names it
	// generation is the session's fence generation for the queue
	// (publish_fence.go); 0: the session does not fence.
	generation uint64
	messages   []queue.Message
	bytes      int
}

// publishResult answers a batch: messages [0, confirmed) are confirmed at
// boundary, the rest (if any) are rejected with failure. duplicates lists
// the confirmed indices the queue did not store again because it had
// stored them already (its dedup window), increasing.
type publishResult struct {
	batchID    uint64
	confirmed  int
	duplicates []int
	boundary   wire.Boundary
	failure    requestFailure
}

type subscribeRequest struct {
	replyTo        *actor.PID
	sessionID      string // for queue info's consumer list
	requestID      uint64
	subscriptionID uint64
	prefetch       uint32
	maxFrameBytes  uint32 // the client's body limit, for splitting deliveries
}

type subscribeResult struct {
	requestID      uint64
	subscriptionID uint64
	prefetch       uint32
	failure        requestFailure
}

type unsubscribeRequest struct {
	replyTo        *actor.PID
	requestID      uint64
	subscriptionID uint64
}

type unsubscribeResult struct {
	requestID      uint64
	subscriptionID uint64
	released       uint64
	failure        requestFailure
}

// deliverBatch carries deliveries for one subscription; the session wraps
// them in a deliver frame as they are.
type deliverBatch struct {
	subscriptionID uint64
	deliveries     []wire.Delivery
}

type settleRequest struct {
	replyTo        *actor.PID
	requestID      uint64 // not 0 for an ack-sync: answered once applied (partition_acksync.go)
	subscriptionID uint64
	kind           settleKind
	tags           []uint64
	requeue        bool
	delay          time.Duration // nack: negative means the queue's default
}

// settleFailed reports tags a settle could not apply.
type settleFailed struct {
	requestID      uint64 // the ack-sync's request id; 0 for fire-and-forget settles
	subscriptionID uint64
	tags           []uint64
	failure        requestFailure
}

// subscriptionEnded tells a session the partition ended one of its
// subscriptions (queue deleted or fenced).
type subscriptionEnded struct {
	subscriptionID uint64
	failure        requestFailure
}

// partitionNotice is an informational error for the sessions that use a
// partition (it restarted after a failure).
type partitionNotice struct {
	queue   string
	failure requestFailure
}

type infoRequest struct {
	replyTo   *actor.PID // nil: respond to the request's future
	requestID uint64
}

type infoResult struct {
	requestID uint64
	info      wire.QueueInfo
	// failure is set when the partition cannot tell: it is stopping (a
	// restart, a delete or the node's shutdown).
	failure requestFailure
}

type purgeRequest struct {
	replyTo   *actor.PID
	requestID uint64
}

type purgeResult struct {
	requestID uint64
	removed   uint64
	failure   requestFailure
}
