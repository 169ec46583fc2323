package admin

// BrokerNode adapts a running actors.Broker to Node. It only translates:
// every figure comes from the broker's own reports (queue infos gathered
// from the partitions, the actor registry, the broker's health and metrics
// set), so what the endpoint shows is what the broker says.
//
// QueueStatus.Consumers comes from the broker's list of a queue's
// subscriptions (Broker.QueueConsumers), asked right after its queue info,
// so the count and the list can differ by a subscription that came or went
// in between. SyncQueue uses the broker's SyncQueue(name string) error when
// the broker has it, and answers errors.ErrUnsupported (the endpoint then
// answers 501) otherwise. A queue has one partition today, so fenced queues
// are reported as partition 0.
//
// In a cluster (NodeFor), the adapter is a ClusterBrokerNode, which adds
// the broker's cluster status for /api/cluster; queue statuses then carry
// the owner, epoch and replica set from the broker's queue info.

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/wire"
)

// rootActorPath is the path of the broker's root actor, whose start time
// is the node's.
const rootActorPath = "node"

// BrokerNode is a Node (and QueueSyncer) backed by an actors.Broker.
type BrokerNode struct {
	broker    *actors.Broker
	createdAt time.Time // fallback start time when the root actor is not listed
}

// NewBrokerNode adapts broker, which must be started.
func NewBrokerNode(broker *actors.Broker) *BrokerNode {
	return &BrokerNode{broker: broker, createdAt: broker.Config().Clock()}
}

// Users implements UsersNode: the broker's users file, if it has one. A
// reload (SIGHUP) changes the Store in place, so the endpoint checks each
// request against the users in force.
func (n *BrokerNode) Users() *access.Store { return n.broker.Config().Users }

// brokerQueueSyncer is the explicit-sync method the adapter uses when the
// broker has it.
type brokerQueueSyncer interface {
	SyncQueue(name string) error
}

// NodeInfo implements Node.
func (n *BrokerNode) NodeInfo() NodeInfo {
	config := n.broker.Config()
	started := n.createdAt
	if root, ok := n.broker.Registry().Lookup(rootActorPath); ok && !root.StartedAt.IsZero() {
		started = root.StartedAt
	}
	settings := map[string]any{
		"max_body_bytes":       config.MaxBodyBytes,
		"client_auth_required": config.AuthToken != "",
	}
	if config.SegmentBytes != 0 {
		settings["segment_bytes"] = config.SegmentBytes
	}
	return NodeInfo{
		NodeID:       config.NodeID,
		Version:      actors.Version,
		StartedAt:    started,
		DataDir:      config.DataDir,
		Listen:       listenersOf(n.broker),
		SyncInterval: n.broker.SyncInterval(),
		Settings:     settings,
	}
}

// listenersOf names the broker's listeners: the client one, and Raft's in a
// cluster.
func listenersOf(broker *actors.Broker) map[string]string {
	listen := map[string]string{"client": broker.Addr().String()}
	if node := broker.Config().Cluster; node != nil {
		clusterConfig := node.Config()
		if self, err := clusterConfig.Node(node.ID()); err == nil {
			listen["raft"] = self.RaftAddress
		}
	}
	return listen
}

// Queues implements Node.
func (n *BrokerNode) Queues() []QueueStatus {
	infos := n.broker.Queues()
	queues := make([]QueueStatus, 0, len(infos))
	for i := range infos {
		status := queueStatusOf(&infos[i])
		status.Consumers = consumersOf(n.broker, status.Name)
		queues = append(queues, status)
	}
	return queues
}

// Queue implements Node.
func (n *BrokerNode) Queue(name string) (QueueStatus, bool) {
	info, ok := n.broker.QueueInfo(name)
	if !ok {
		return QueueStatus{}, false
	}
	status := queueStatusOf(&info)
	status.Consumers = consumersOf(n.broker, name)
	status.Failovers = failoversOf(n.broker, name)
	return status, true
}

// failoversOf translates the broker's failover timeline of a queue.
func failoversOf(broker *actors.Broker, name string) []FailoverStatus {
	records, _ := broker.QueueFailovers(name)
	var out []FailoverStatus
	for _, record := range records {
		failover := FailoverStatus{Epoch: record.Epoch, StartedAt: record.StartedAt, Outcome: record.Outcome}
		for _, stage := range record.Stages {
			failover.Stages = append(failover.Stages, FailoverStage{Stage: stage.Stage, Peer: stage.Peer,
				Micros: stage.Micros, Detail: stage.Detail})
		}
		out = append(out, failover)
	}
	return out
}

// consumersOf lists a queue's subscriptions as the broker reports them;
// an empty list (never null) when it has none or the queue went away.
func consumersOf(broker *actors.Broker, name string) []ConsumerStatus {
	infos, _ := broker.QueueConsumers(name)
	consumers := make([]ConsumerStatus, 0, len(infos))
	for _, info := range infos {
		consumers = append(consumers, ConsumerStatus{Session: info.SessionID, Subscription: info.SubscriptionID,
			Prefetch: uint64(info.Prefetch), Outstanding: uint64(info.Outstanding)})
	}
	return consumers
}

// queueStatusOf translates the broker's queue info field by field; the
// boundaries mean the same on both sides.
func queueStatusOf(info *wire.QueueInfo) QueueStatus {
	options := info.Options
	return QueueStatus{
		Name:         info.Name,
		Mode:         info.Mode.String(),
		DesiredMode:  info.Desired().String(),
		ModeRevision: info.ModeRevision,
		ModeChange:   modeChangeStatusOf(info.ModeChange),
		Policy:       info.Policy,
		Options: QueueOptions{
			LeaseTimeoutMs: uint64(options.LeaseTimeoutMs), MaxDeliveries: uint64(options.MaxDeliveries),
			DeadLetterQueue: options.DeadLetterQueue, MessageTTLMs: options.MessageTTLMs,
			MaxLength: options.MaxLength, MaxBytes: options.MaxBytes, Overflow: string(options.Overflow),
			RedeliveryDelayMs: uint64(options.RedeliveryDelayMs), Policy: options.Policy,
			Replicas: uint64(options.Replicas), DedupWindowMs: uint64(options.DedupWindowMs),
			DedupMaxEntries: uint64(options.DedupMaxEntries),
		},
		Counts: QueueCounts{Ready: info.Ready, Leased: info.Leased, Delayed: info.Delayed,
			DeadLettered: info.DeadLettered},
		WrittenNext:     info.WrittenNext,
		DurableNext:     info.DurableNext,
		UnsyncedRecords: info.UnsyncedRecords,
		UnsyncedBytes:   info.UnsyncedBytes,
		LastSyncUnixMs:  info.LastSyncUnixMs,
		SyncIntervalMs:  uint64(info.SyncIntervalMs),
		SyncPending:     info.SyncPending,
		LastSyncError:   info.LastSyncError,
		Fenced:          info.Fenced,
		FenceError:      info.FenceError,
		ConsumerCount:   int(info.Consumers),
		Owner:           info.Owner,
		Epoch:           info.Epoch,
		CommittedNext:   info.CommittedNext,
		WrittenOn:       info.WrittenOn,
		DurableOn:       info.DurableOn,
		CommitWaitMs:    info.CommitWaitMs,
		Replicas:        replicaStatusOf(info.Replicas),
		Dedup:           dedupStatusOf(info.Dedup),
	}
}

func modeChangeStatusOf(change *wire.ModeChangeInfo) *ModeChangeStatus {
	if change == nil {
		return nil
	}
	return &ModeChangeStatus{Revision: change.Revision, Mode: change.Mode.String(), Offset: change.Offset,
		State: change.State, Reason: change.Reason, SinceUnixMs: change.SinceUnixMs}
}

func dedupStatusOf(stats *wire.DedupStats) *DedupStatus {
	if stats == nil {
		return nil
	}
	return &DedupStatus{Entries: stats.Entries, EvictedEarly: stats.EvictedEarly, OldestUnixMs: stats.OldestUnixMs,
		DuplicatesRefused: stats.Refused}
}

// replicaStatusOf translates the cluster replica list; nil on a single
// node.
func replicaStatusOf(replicas []wire.ReplicaInfo) []ReplicaStatus {
	if len(replicas) == 0 {
		return nil
	}
	out := make([]ReplicaStatus, len(replicas))
	for i, replica := range replicas {
		out[i] = ReplicaStatus{Node: replica.Node, WrittenNext: replica.WrittenNext, DurableNext: replica.DurableNext,
			State: replica.State, AppliedMode: replica.AppliedMode.String(), ModeRevision: replica.ModeRevision}
	}
	return out
}

// ClusterBrokerNode adapts a broker that runs in a cluster: a BrokerNode
// that is also a ClusterNode, so GET /api/cluster and the dashboard's
// cluster section are served.
type ClusterBrokerNode struct {
	*BrokerNode
}

// NodeFor adapts broker: a *ClusterBrokerNode when it runs in a cluster, a
// *BrokerNode otherwise.
func NodeFor(broker *actors.Broker) Node {
	node := NewBrokerNode(broker)
	if broker.Config().Cluster != nil {
		return &ClusterBrokerNode{BrokerNode: node}
	}
	return node
}

// ClusterStatus implements ClusterNode: this node's view of the nodes,
// their liveness as its Raft transport sees them, the catalog revision and
// the leader of every shard it hosts, and the catalog's queues.
func (n *ClusterBrokerNode) ClusterStatus() any {
	status, _ := n.broker.ClusterStatus()
	return status
}

// Actors implements Node.
func (n *BrokerNode) Actors() []ActorInfo {
	snapshot := n.broker.Registry().Snapshot()
	infos := make([]ActorInfo, 0, len(snapshot))
	for _, actor := range snapshot {
		infos = append(infos, ActorInfo{Path: actor.Path, Kind: actor.Kind, MailboxDepth: actor.MailboxDepth,
			Summary: actor.Summary, Restarts: actor.Restarts, StartedAt: actor.StartedAt})
	}
	return infos
}

// Health implements Node.
func (n *BrokerNode) Health() Health {
	health := n.broker.Health()
	fenced := make([]FencedPartition, 0, len(health.Queues))
	for _, queue := range health.Queues {
		fenced = append(fenced, FencedPartition{Queue: queue.Name, Partition: 0, Error: queue.Error})
	}
	partitions := func(queues []actors.QueueHealth) []FencedPartition {
		var out []FencedPartition
		for _, queue := range queues {
			out = append(out, FencedPartition{Queue: queue.Name, Partition: 0, Error: queue.Error})
		}
		return out
	}
	return Health{Fatal: health.Fatal, Fenced: fenced, Unowned: partitions(health.Unowned),
		Stuck: partitions(health.Stuck), Lagging: partitions(health.Lagging)}
}

// SetSyncInterval implements Node.
func (n *BrokerNode) SetSyncInterval(interval time.Duration) error {
	if err := n.broker.SetSyncInterval(interval); err != nil {
		if errors.Is(err, actors.ErrInvalidConfig) {
			return fmt.Errorf("%w: %w", ErrInvalidSetting, err)
		}
		return err
	}
	return nil
}

// SyncQueue implements QueueSyncer when the broker can sync a queue on
// request; see the file comment.
func (n *BrokerNode) SyncQueue(name string) error {
	if _, ok := n.broker.QueueInfo(name); !ok {
		return fmt.Errorf("%w: %s", ErrNoSuchQueue, name)
	}
	syncer, ok := any(n.broker).(brokerQueueSyncer)
	if !ok {
		return fmt.Errorf("admin: this broker cannot sync a queue on request: %w", errors.ErrUnsupported)
	}
	err := syncer.SyncQueue(name)
	if errors.Is(err, actors.ErrUnknownQueue) { // deleted since the check above
		return fmt.Errorf("%w: %w", ErrNoSuchQueue, err)
	}
	return err
}

// WritePrometheus implements Node.
func (n *BrokerNode) WritePrometheus(w io.Writer) { n.broker.Metrics().WritePrometheus(w) }
