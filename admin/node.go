package admin

// The endpoint's view of a node. These structs are what the JSON endpoints
// serve, so their JSON names are part of the admin API: units come last
// (sync_interval_ms, unsynced_bytes) and every progress field names its
// boundary. written_next is the log offset after the last record handed to
// the OS (write(2) returned); durable_next is the offset after the last
// record an fsync covered.
//
// Invariant: durable_next <= written_next, and unsynced_records counts the
// records in [durable_next, written_next).

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Node is everything the endpoint reads and changes on a node.
// Implementations MUST be safe for concurrent use; each call runs on the
// goroutine of one HTTP request and may wait briefly for the node's actors,
// but MUST NOT wait without bound.
type Node interface {
	// NodeInfo describes the node and its settings.
	NodeInfo() NodeInfo
	// Queues returns every queue's status, in any order (the endpoint sorts
	// by name).
	Queues() []QueueStatus
	// Queue returns one queue's status; false when no queue has that name.
	Queue(name string) (QueueStatus, bool)
	// Actors returns every live actor, flat; the endpoint builds the tree
	// from the paths. A stopped actor MUST NOT be listed.
	Actors() []ActorInfo
	// Health reports fenced partitions and any fatal failure.
	Health() Health
	// SetSyncInterval changes the background sync interval of every open
	// log, live, and of every log opened later; 0 turns background sync
	// off. An error wrapping ErrInvalidSetting becomes a 400.
	SetSyncInterval(interval time.Duration) error
	// WritePrometheus writes the node's metrics in the Prometheus text
	// format.
	WritePrometheus(w io.Writer)
}

// QueueSyncer is an optional capability of a Node: POST
// /api/queues/{name}/sync is served only when the node has it.
type QueueSyncer interface {
	// SyncQueue syncs the queue's log and returns once everything written
	// before the call is durable. It returns an error wrapping
	// ErrNoSuchQueue for an unknown queue, and one wrapping
	// errors.ErrUnsupported when it cannot sync on request after all (the
	// endpoint answers 501).
	SyncQueue(name string) error
}

// ClusterNode is an optional capability of a Node: GET /api/cluster and
// the dashboard's cluster section are served only when the node has it.
type ClusterNode interface {
	// ClusterStatus returns a value that encodes to JSON.
	ClusterStatus() any
}

// ErrNoSuchQueue is wrapped by a Node's errors about a queue it does not
// have; the endpoint answers 404.
var ErrNoSuchQueue = errors.New("admin: no such queue")

// ErrInvalidSetting is wrapped by a Node's errors about a setting value it
// refuses; the endpoint answers 400.
var ErrInvalidSetting = errors.New("admin: invalid setting")

// NodeInfo describes a node.
type NodeInfo struct {
	NodeID    string
	Version   string
	StartedAt time.Time // the endpoint reports uptime from it
	DataDir   string
	// Listen maps a listener's role ("client", "peer", "raft") to its
	// address. The endpoint adds its own as "http".
	Listen map[string]string
	// SyncInterval is the node-wide background sync interval in force;
	// 0 means off.
	SyncInterval time.Duration
	// Settings holds the node's other settings as JSON-ready values whose
	// keys carry their unit ("max_body_bytes").
	Settings map[string]any
}

// QueueStatus is one queue as the endpoint reports it.
type QueueStatus struct {
	Name string `json:"name"`
	Mode string `json:"mode"` // "durable" or "buffered": the mode in force (its applied revision)
	// DesiredMode is the mode the newest recorded revision names (Mode
	// unless a change is pending); ModeRevision the revision that set Mode
	// (0: as declared); ModeChange the pending or failed change, omitted
	// when none (docs/durability.md, "Changing the mode of an existing queue").
	DesiredMode  string            `json:"desired_mode"`
	ModeRevision uint64            `json:"mode_revision"`
	ModeChange   *ModeChangeStatus `json:"mode_change,omitempty"`
	Policy       string            `json:"policy,omitempty"`
	Options      QueueOptions      `json:"options"`
	Counts       QueueCounts       `json:"counts"`

	WrittenNext     uint64 `json:"written_next"`     // offset after the last record handed to the OS
	DurableNext     uint64 `json:"durable_next"`     // offset after the last fsynced record
	UnsyncedRecords uint64 `json:"unsynced_records"` // written, not yet durable
	UnsyncedBytes   uint64 `json:"unsynced_bytes"`   // written, not yet durable
	LastSyncUnixMs  int64  `json:"last_sync_unix_ms"`
	SyncIntervalMs  uint64 `json:"sync_interval_ms"` // this log's background sync target; 0 = off
	SyncPending     bool   `json:"sync_pending"`
	LastSyncError   string `json:"last_sync_error,omitempty"`

	Fenced     bool   `json:"fenced"` // refuses publishes after a storage fault
	FenceError string `json:"fence_error,omitempty"`

	// ConsumerCount is the number of live subscriptions. Consumers lists
	// them when the node reports details; null means it does not.
	ConsumerCount int              `json:"consumer_count"`
	Consumers     []ConsumerStatus `json:"consumers"`

	// Cluster fields, omitted on a single node: the owner node, its
	// ownership epoch, the quorum frontier (the offset below which the
	// policy's copies hold every record at the queue's boundary; confirms
	// and deliveries stop there) and the replica set with each copy's
	// progress and state as the owner last heard of it. A non-owner lists
	// its own copy's progress and none for the others.
	Owner         string `json:"owner,omitempty"`
	Epoch         uint64 `json:"epoch,omitempty"`
	CommittedNext uint64 `json:"committed_next,omitempty"`
	// WrittenOn and DurableOn count the copies that hold every confirmed
	// message written and durable ("written on 3 of 3, durable on 2 of 3").
	WrittenOn uint32          `json:"written_on,omitempty"`
	DurableOn uint32          `json:"durable_on,omitempty"`
	Replicas  []ReplicaStatus `json:"replicas,omitempty"`
	// CommitWaitMs is how long the oldest record not yet below
	// CommittedNext has waited (owner only; 0 when none waits): it grows
	// while confirms and deliveries are stuck.
	CommitWaitMs uint64 `json:"commit_wait_ms,omitempty"`

	// Failovers are the recoveries of the queue this node ran (it became
	// the owner), oldest first, each with its stages in microseconds from
	// its start; omitted when none.
	Failovers []FailoverStatus `json:"failovers,omitempty"`

	// Dedup is the deduplication table of a queue with a dedup window;
	// omitted otherwise (docs/protocol.md 6.2).
	Dedup *DedupStatus `json:"dedup,omitempty"`
}

// DedupStatus is a queue's deduplication table.
type DedupStatus struct {
	Entries           uint64 `json:"entries"`       // keys held (derived from the log)
	EvictedEarly      uint64 `json:"evicted_early"` // left at dedup_max_entries before their window ended
	OldestUnixMs      int64  `json:"oldest_unix_ms,omitempty"`
	DuplicatesRefused uint64 `json:"duplicates_refused"` // since the owner opened the queue
}

// FailoverStatus is one recovery of a queue: the epoch it claimed, when it
// started, its stages and how it ended ("serving" or "failed: ...").
type FailoverStatus struct {
	Epoch     uint64          `json:"epoch"`
	StartedAt time.Time       `json:"started_at"`
	Outcome   string          `json:"outcome"`
	Stages    []FailoverStage `json:"stages"`
}

// FailoverStage is one step of a recovery: claimed, sealed (per peer),
// source chosen, truncated, transfer, promoted, installed, activated,
// serving.
type FailoverStage struct {
	Stage  string `json:"stage"`
	Peer   string `json:"peer,omitempty"`
	Micros int64  `json:"micros"` // since the recovery started (monotonic)
	Detail string `json:"detail,omitempty"`
}

// ReplicaStatus is one copy of a queue in a cluster.
type ReplicaStatus struct {
	Node        string `json:"node"`
	WrittenNext uint64 `json:"written_next"` // offset after the last record this copy handed to the OS
	DurableNext uint64 `json:"durable_next"` // offset after the last record this copy fsynced
	// State is "owner", or a follower's replication state as the owner
	// sees it ("in sync", "catching up", "probing", "unreachable",
	// "latched", "stale", with a reason); empty from a non-owner.
	State string `json:"state,omitempty"`
	// AppliedMode and ModeRevision: the revision this copy applied, as
	// the owner derives it from the copy's durable position; omitted when
	// the owner cannot tell.
	AppliedMode  string `json:"applied_mode,omitempty"`
	ModeRevision uint64 `json:"mode_revision,omitempty"`
}

// ModeChangeStatus is a mode change that has not applied.
type ModeChangeStatus struct {
	Revision    uint64 `json:"revision"`
	Mode        string `json:"mode"`   // the mode it switches to
	Offset      uint64 `json:"offset"` // the revision record's log offset
	State       string `json:"state"`  // "pending" or "failed"
	Reason      string `json:"reason"` // what it waits for, or why it failed
	SinceUnixMs int64  `json:"since_unix_ms"`
}

// QueueCounts are a queue's message counts.
type QueueCounts struct {
	Ready        uint64 `json:"ready"`         // selectable now
	Leased       uint64 `json:"leased"`        // delivered, not yet settled
	Delayed      uint64 `json:"delayed"`       // waiting out a nack or redelivery delay
	DeadLettered uint64 `json:"dead_lettered"` // since the queue was declared
}

// QueueOptions are a queue's declaration options; unset ones are omitted.
type QueueOptions struct {
	LeaseTimeoutMs    uint64 `json:"lease_timeout_ms,omitempty"`
	MaxDeliveries     uint64 `json:"max_deliveries,omitempty"`
	DeadLetterQueue   string `json:"dead_letter_queue,omitempty"`
	MessageTTLMs      uint64 `json:"message_ttl_ms,omitempty"`
	MaxLength         uint64 `json:"max_length,omitempty"`
	MaxBytes          uint64 `json:"max_bytes,omitempty"`
	Overflow          string `json:"overflow,omitempty"`
	RedeliveryDelayMs uint64 `json:"redelivery_delay_ms,omitempty"`
	Policy            string `json:"policy,omitempty"`
	Replicas          uint64 `json:"replicas,omitempty"`
	DedupWindowMs     uint64 `json:"dedup_window_ms,omitempty"`
	DedupMaxEntries   uint64 `json:"dedup_max_entries,omitempty"`
}

// ConsumerStatus is one subscription on a queue.
type ConsumerStatus struct {
	Session      string `json:"session"`         // the session's actor path or id
	Subscription uint64 `json:"subscription_id"` // as subscribe-ok gave it; 0 when the node does not say
	Prefetch     uint64 `json:"prefetch"`        // most deliveries held unsettled at once
	Outstanding  uint64 `json:"outstanding"`     // deliveries held unsettled now
}

// ActorInfo is one live actor.
type ActorInfo struct {
	Path         string // hierarchical, "/"-separated: "node/queues/orders/0/log"
	Kind         string // "session", "partition", "log", ...
	MailboxDepth int    // user messages waiting now
	Summary      string // one line the actor published about its state
	Restarts     uint64
	StartedAt    time.Time
}

// Health is a node's health. The node serves when Fatal is empty and no
// partition is fenced.
type Health struct {
	Fatal  string // a failure the node could not contain; empty when none
	Fenced []FencedPartition
	// Unowned lists, in a cluster, the partitions this node replicates
	// that no node serves now, with why (Error).
	Unowned []FencedPartition
	// Stuck lists, in a cluster, the partitions this node owns whose
	// confirms and deliveries cannot move: the quorum frontier has not
	// reached records written seconds ago (Error names each copy's state).
	Stuck []FencedPartition
	// Lagging lists, in a cluster, the followers of partitions this node
	// owns that do not keep up (stalled, catching up, unreachable); they
	// do not make the node unhealthy while the others serve.
	Lagging []FencedPartition
}

// FencedPartition is one queue partition that refuses publishes.
type FencedPartition struct {
	Queue     string `json:"queue"`
	Partition int    `json:"partition"`
	Error     string `json:"error"`
}

// ConnectionLister is an optional capability of a Node: GET
// /api/connections and the dashboard's connection table are served only
// when the node has it.
type ConnectionLister interface {
	// Connections returns every live client session.
	Connections() []ConnectionStatus
}

// ConnectionStatus is one client session.
type ConnectionStatus struct {
	Session         string `json:"session"`        // the session id hello-ok gave
	ClientName      string `json:"client_name"`    // from the client's hello
	RemoteAddress   string `json:"remote_address"` // the client's address
	ConnectedUnixMs int64  `json:"connected_unix_ms"`
	State           string `json:"state"` // "awaiting hello", "open" or "closing"
	Subscriptions   int    `json:"subscriptions"`
	User            string `json:"user,omitempty"` // the authenticated user, with a users file
	TLS             string `json:"tls,omitempty"`  // the TLS version, empty for plain TCP
}

// QueueActor is an optional capability of a Node: the queue actions
// (POST /api/queues/{name}/purge, /delete and /peek) are served only when
// the node has it. Each is a write, so it needs the admin token when one
// is set. Errors wrapping ErrNoSuchQueue become 404.
type QueueActor interface {
	// PurgeQueue removes the queue's ready messages and says how many.
	PurgeQueue(ctx context.Context, name string) (uint64, error)
	// DeleteQueue deletes the queue and says how many messages it held.
	DeleteQueue(ctx context.Context, name string) (uint64, error)
	// PeekQueue shows up to count messages from the queue's head and
	// leaves them there (released: their next delivery is marked
	// redelivered, the attempt not counted).
	PeekQueue(ctx context.Context, name string, count int) ([]PeekedMessage, error)
}

// PeekedMessage is one message a peek saw.
type PeekedMessage struct {
	MessageID     string            `json:"message_id"`
	Offset        uint64            `json:"offset"`
	Attempt       uint32            `json:"attempt"`
	Redelivered   bool              `json:"redelivered"`
	PublishUnixMs int64             `json:"publish_unix_ms"`
	Headers       map[string]string `json:"headers,omitempty"`
	Body          string            `json:"body"`           // the payload when it is UTF-8 text
	BodyBase64    []byte            `json:"body_base64"`    // otherwise, base64
	BodyBytes     int               `json:"body_bytes"`     // the payload's size
	Truncated     bool              `json:"body_truncated"` // Body holds only the first PeekBodyBytes
}

// PeekBodyBytes bounds the body a peek returns per message.
const PeekBodyBytes = 4 << 10

// MetricsGatherer is an optional capability of a Node: GET /api/stats
// (the dashboard's rates and latency charts) is served only when the node
// has it.
type MetricsGatherer interface {
	// Gatherer returns the node's metrics registry.
	Gatherer() prometheus.Gatherer
}
