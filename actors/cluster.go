package actors

// Cluster mode. When Config.Cluster is set, the broker is one node of a
// cluster and the cluster catalog (cluster.Node) is the authority on which
// queues exist, how they are declared and where their replicas live; each
// partition's coordination shard says which replica owns it in which
// epoch. What changes from a single node:
//
//   - Declare, on any node, goes through the catalog (cluster_queues.go). The
//     declaration is fixed at its first declare, cluster-wide. The catalog
//     chooses the replica set; every node in it opens its copy of the
//     partition, as a replica (cluster_replicas.go).
//   - One replica owns the partition: it serves clients, pushes every record
//     to the others and confirms once the policy's copies hold it
//     (partition_cluster.go, partition_quorum.go). When it fails, the
//     replica that leads the coordination shard recovers the partition
//     under a new epoch (recovery.go) and serves it.
//   - Publish, subscribe, queue info, purge and delete of a queue this node
//     does not serve are routed by the coordination state
//     (cluster_session.go): a queue owned elsewhere gets a redirect frame
//     naming the owner's node id and client address (publishes are
//     negatively confirmed with not_owner plus one redirect); a queue owned
//     here that does not serve yet waits for it; an unknown queue is
//     refused as on a single node.
//   - Queue info carries the policy, owner, epoch, the quorum frontier and
//     every copy's progress and replication state (from the owner).
//
// Every catalog call that talks to Raft runs on its own goroutine and sends
// its result back to the actor as a message; a Receive only reads the local
// replica of the catalog (cluster.Node.Owner, LookupLocal), which takes no
// Raft round trip.
//
// Options travel through the catalog as a map of strings keyed like the
// declare options on the wire (lease_timeout_ms, ...), with decimal numbers;
// policy and replica count are catalog fields of their own.
//
// Invariant: a partition is open on a node only if the catalog's replica
// set of the partition names the node.

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

const (
	// clusterRequestTimeout bounds one catalog request (a declare, a delete)
	// made for a client.
	clusterRequestTimeout = 10 * time.Second
	// clusterOwnerWait bounds how long a request about a queue without an
	// owner waits for the owner's election before it is refused as
	// unavailable.
	clusterOwnerWait = 5 * time.Second
	// maxStashedPerQueue bounds the requests one session holds for a queue
	// that is still opening on this node.
	maxStashedPerQueue = 4096
)

// Keys of the catalog's options map: the declare option names of the wire.
const (
	optionLeaseTimeoutMs    = "lease_timeout_ms"
	optionMaxDeliveries     = "max_deliveries"
	optionDeadLetterQueue   = "dead_letter_queue"
	optionMessageTTLMs      = "message_ttl_ms"
	optionMaxLength         = "max_length"
	optionMaxBytes          = "max_bytes"
	optionOverflow          = "overflow"
	optionRedeliveryDelayMs = "redelivery_delay_ms"
	optionDedupWindowMs     = "dedup_window_ms"
	optionDedupMaxEntries   = "dedup_max_entries"
)

// clusterBufferedWarning answers every buffered declare in a cluster.
const clusterBufferedWarning = "buffered queue: a confirm means the policy's copies have written the message to " +
	"their operating systems, not that any of them fsynced it; if all of those nodes lose power before their " +
	"background sync, recent confirmed messages can be lost (the sync interval usually bounds the window, but " +
	"slow I/O or failures can extend it)"

// catalogOptions turns a declare's storage options (policy and replica
// count excluded) into the catalog's map; nil when none is set, so a
// re-declare naming no option compares none.
func catalogOptions(options wire.QueueOptions) map[string]string {
	out := map[string]string{}
	number := func(key string, value uint64) {
		if value != 0 {
			out[key] = strconv.FormatUint(value, 10)
		}
	}
	number(optionLeaseTimeoutMs, uint64(options.LeaseTimeoutMs))
	number(optionMaxDeliveries, uint64(options.MaxDeliveries))
	number(optionMessageTTLMs, options.MessageTTLMs)
	number(optionMaxLength, options.MaxLength)
	number(optionMaxBytes, options.MaxBytes)
	number(optionRedeliveryDelayMs, uint64(options.RedeliveryDelayMs))
	window := uint64(options.DedupWindowMs)
	if options.Dedup && window == 0 {
		window = uint64(queue.DefaultDedupWindow / time.Millisecond) // the catalog stores the window in effect
	}
	number(optionDedupWindowMs, window)
	number(optionDedupMaxEntries, uint64(options.DedupMaxEntries))
	if options.DeadLetterQueue != "" {
		out[optionDeadLetterQueue] = options.DeadLetterQueue
	}
	if options.Overflow != "" {
		out[optionOverflow] = string(options.Overflow)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// wireOptionsOfCatalog is the inverse of catalogOptions. An unknown key or
// a bad number is an error: it was written by a newer or broken node.
func wireOptionsOfCatalog(options map[string]string) (wire.QueueOptions, error) {
	var out wire.QueueOptions
	for key, value := range options {
		if err := setCatalogOption(&out, key, value); err != nil {
			return wire.QueueOptions{}, fmt.Errorf("actors: catalog options: %s: %w", key, err)
		}
	}
	return out, nil
}

func setCatalogOption(out *wire.QueueOptions, key, value string) error {
	bits := 64
	switch key {
	case optionDeadLetterQueue:
		out.DeadLetterQueue = value
		return nil
	case optionOverflow:
		out.Overflow = wire.Overflow(value)
		return nil
	case optionLeaseTimeoutMs, optionMaxDeliveries, optionRedeliveryDelayMs, optionDedupWindowMs, optionDedupMaxEntries:
		bits = 32
	case optionMessageTTLMs, optionMaxLength, optionMaxBytes:
	default:
		return errors.New("unknown option")
	}
	number, err := strconv.ParseUint(value, 10, bits)
	if err != nil {
		return fmt.Errorf("%q is not a number below 2^%d", value, bits)
	}
	switch key {
	case optionLeaseTimeoutMs:
		out.LeaseTimeoutMs = uint32(number)
	case optionMaxDeliveries:
		out.MaxDeliveries = uint32(number)
	case optionRedeliveryDelayMs:
		out.RedeliveryDelayMs = uint32(number)
	case optionDedupWindowMs:
		out.DedupWindowMs = uint32(number)
	case optionDedupMaxEntries:
		out.DedupMaxEntries = uint32(number)
	case optionMessageTTLMs:
		out.MessageTTLMs = number
	case optionMaxLength:
		out.MaxLength = number
	case optionMaxBytes:
		out.MaxBytes = number
	}
	return nil
}

// storageOptionsOfCatalog is how the owner opens a queue the catalog
// declares.
func storageOptionsOfCatalog(info cluster.QueueInfo) (queue.Options, error) {
	options, err := wireOptionsOfCatalog(info.Options)
	if err != nil {
		return queue.Options{}, err
	}
	converted, err := storageOptions(info.Name, options, wireModeOfCluster(info.Mode))
	if err != nil {
		return queue.Options{}, fmt.Errorf("actors: catalog options of %q: %w", info.Name, err)
	}
	return converted, nil
}

func clusterModeOfWire(mode wire.Mode) cluster.Mode {
	switch mode {
	case wire.ModeDurable:
		return cluster.ModeDurable
	case wire.ModeBuffered:
		return cluster.ModeBuffered
	}
	return cluster.ModeUnset
}

func wireModeOfCluster(mode cluster.Mode) wire.Mode {
	switch mode {
	case cluster.ModeDurable:
		return wire.ModeDurable
	case cluster.ModeBuffered:
		return wire.ModeBuffered
	}
	return wire.ModeUnset
}

// failureOfClusterError maps a catalog error to the request error a client
// gets. Errors that may pass (no leader, no quorum, no owner yet) are
// unavailable, which clients may retry.
func failureOfClusterError(err error) requestFailure {
	code := wire.CodeInternal
	switch {
	case errors.Is(err, cluster.ErrModeConflict):
		code = wire.CodeModeConflict
	case errors.Is(err, cluster.ErrDeclarationConflict), errors.Is(err, cluster.ErrInvalidPolicy),
		errors.Is(err, cluster.ErrInvalidDeclaration):
		code = wire.CodeInvalidOptions
	case errors.Is(err, cluster.ErrQueueNotFound), errors.Is(err, cluster.ErrPartitionNotFound):
		code = wire.CodeUnknownQueue
	case errors.Is(err, cluster.ErrNotReady), errors.Is(err, cluster.ErrOwnerUnknown), errors.Is(err, cluster.ErrClosed):
		code = wire.CodeUnavailable
	}
	return requestFailure{code: code, message: err.Error()}
}

// clusterWarnings are the warnings of a declare answered in a cluster: the
// catalog's (deprecated policy names) and the buffered-mode warning.
func clusterWarnings(outcome cluster.DeclareOutcome) []string {
	warnings := append([]string(nil), outcome.Warnings...)
	if outcome.Queue.Mode == cluster.ModeBuffered {
		warnings = append(warnings, clusterBufferedWarning)
	}
	return warnings
}

// withClusterInfo adds the catalog's view of a queue to its info: the
// policy, and, unless the owner's partition listed them with their
// progress, the owner, epoch and replica set (this node's own copy with
// its positions, the others without). Without cluster mode, or for a
// queue the catalog does not list, the info is returned unchanged.
func (c *brokerCore) withClusterInfo(info wire.QueueInfo) wire.QueueInfo {
	node := c.config.Cluster
	if node == nil {
		return info
	}
	catalog, err := node.LookupLocal(info.Name)
	if err != nil || len(catalog.Partitions) == 0 {
		return info
	}
	partition := catalog.Partitions[0]
	info.Policy = catalog.Policy
	if len(info.Replicas) != 0 {
		return info
	}
	if info.Owner == "" {
		info.Owner, info.Epoch = ownerOf(node, partition)
	}
	info.Replicas = make([]wire.ReplicaInfo, 0, len(partition.Replicas))
	for _, replica := range partition.Replicas {
		entry := wire.ReplicaInfo{Node: replica}
		if replica == node.ID() {
			entry.WrittenNext, entry.DurableNext = info.WrittenNext, info.DurableNext
		}
		info.Replicas = append(info.Replicas, entry)
	}
	return info
}

// ownerOf returns a partition's owner and epoch: from this node's replica
// of its coordination shard when that is at least as new as the catalog's
// hint (the hint is copied there after the claim, so it lags), else the
// hint.
func ownerOf(node *cluster.Node, partition cluster.PartitionInfo) (string, uint64) {
	if view, found := node.Partition(partition.ShardID); found && view.State.Owner != "" && view.State.Epoch >= partition.Epoch {
		return view.State.Owner, view.State.Epoch
	}
	return partition.Owner, partition.Epoch
}

// withClusterInfos applies withClusterInfo to each info, in place.
func (c *brokerCore) withClusterInfos(infos []wire.QueueInfo) []wire.QueueInfo {
	for i := range infos {
		infos[i] = c.withClusterInfo(infos[i])
	}
	return infos
}

// ClusterStatus is what GET /api/cluster serves: this node's view of the
// cluster (nodes and their liveness as its Raft transport sees them, the
// catalog revision and leader, the leader of every shard it hosts) and the
// catalog's queues with their placement and owners, from the local replica.
type ClusterStatus struct {
	cluster.Status
	// Serving says who serves queue data: "owner_only" until replication
	// lands.
	Serving string              `json:"serving"`
	Queues  []cluster.QueueInfo `json:"queues"`
	// CatalogError is set when the local catalog replica could not be read.
	CatalogError string `json:"catalog_error,omitempty"`
}

// ClusterStatus reports the cluster as this node sees it; false when the
// broker does not run in a cluster.
func (b *Broker) ClusterStatus() (ClusterStatus, bool) {
	node := b.core.config.Cluster
	if node == nil {
		return ClusterStatus{}, false
	}
	status := ClusterStatus{Status: node.Status(), Serving: cluster.ServingReplicated, Queues: []cluster.QueueInfo{}}
	view, err := node.LocalCatalog()
	if err != nil {
		status.CatalogError = err.Error()
		return status, true
	}
	status.Queues = view.Queues
	return status, true
}

// checkClusterConfig checks the cluster-mode parts of a config: the node id
// is the cluster node's.
func (c Config) checkClusterConfig() (Config, error) {
	if c.Cluster == nil {
		return c, nil
	}
	if c.NodeID == "" || c.NodeID == DefaultNodeID {
		c.NodeID = c.Cluster.ID()
	}
	if c.NodeID != c.Cluster.ID() {
		return c, fmt.Errorf("%w: node id %q differs from the cluster node's %q", ErrInvalidConfig, c.NodeID, c.Cluster.ID())
	}
	return c, nil
}
