package cluster

// Status is the node's report for GET /api/cluster: every node with its
// liveness as this node's Raft transport sees it, the catalog revision and
// the leader of every shard this node hosts. It reads only local state.

import (
	"slices"
	"time"
)

// Status is one node's view of the cluster.
type Status struct {
	NodeID             string        `json:"node_id"`
	CatalogRevision    uint64        `json:"catalog_revision"`
	CatalogInitialized bool          `json:"catalog_initialized"`
	CatalogLeader      string        `json:"catalog_leader"`
	Nodes              []NodeStatus  `json:"nodes"`
	Shards             []ShardStatus `json:"shards"`
}

// NodeStatus is one configured node.
type NodeStatus struct {
	ID            string `json:"id"`
	ClientAddress string `json:"client_address"`
	PeerAddress   string `json:"peer_address"`
	RaftAddress   string `json:"raft_address"`
	HTTPAddress   string `json:"http_address"`
	// Liveness is LivenessSelf, LivenessConnected, LivenessUnreachable or
	// LivenessUnknown; see events.go for what each means.
	Liveness      string    `json:"liveness"`
	LivenessSince time.Time `json:"liveness_since,omitzero"`
	// RaftConnectionFailures counts this node's Raft message streams to
	// that node that failed (a dial, or a write), since this node
	// started: climbing while the node is up means messages to it are
	// being dropped.
	RaftConnectionFailures uint64 `json:"raft_connection_failures"`
}

// ShardStatus is one Raft shard hosted by this node.
type ShardStatus struct {
	ShardID uint64 `json:"shard_id"`
	// Kind is "catalog" or "coordination".
	Kind      string `json:"kind"`
	Queue     string `json:"queue,omitempty"`
	Partition int    `json:"partition"`
	// Leader is the node id of the shard's Raft leader, empty if unknown.
	Leader string `json:"leader"`
	Term   uint64 `json:"term"`
	Owner  string `json:"owner,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
}

// Status reports this node's view of the cluster from local state.
func (n *Node) Status() Status {
	view := n.view.Load()
	status := Status{NodeID: n.self.ID, CatalogRevision: view.revision, CatalogInitialized: view.initialized}
	if state, err := n.localCatalogState(); err == nil {
		status.CatalogRevision, status.CatalogInitialized = state.Revision, state.Initialized
	}
	catalog := n.shardStatus(CatalogShardID)
	catalog.Kind = "catalog"
	status.CatalogLeader = catalog.Leader
	status.Shards = append(status.Shards, catalog)
	for shardID, hosted := range view.shards {
		shard := n.shardStatus(shardID)
		shard.Kind, shard.Queue, shard.Partition = "coordination", hosted.Queue, hosted.Partition
		shard.Owner, shard.Epoch = hosted.State.Owner, hosted.State.Epoch
		status.Shards = append(status.Shards, shard)
	}
	slices.SortFunc(status.Shards, func(a, b ShardStatus) int { return compareUint64(a.ShardID, b.ShardID) })
	peers := n.events.snapshot()
	for _, node := range n.config.Nodes {
		nodeStatus := NodeStatus{
			ID: node.ID, ClientAddress: node.ClientAddress, PeerAddress: node.PeerAddress,
			RaftAddress: node.RaftAddress, HTTPAddress: node.HTTPAddress, Liveness: LivenessUnknown,
		}
		if peer, found := peers[node.RaftAddress]; found {
			nodeStatus.Liveness, nodeStatus.LivenessSince = peer.State, peer.Since
			nodeStatus.RaftConnectionFailures = peer.Failures
		}
		if node.ID == n.self.ID {
			nodeStatus.Liveness, nodeStatus.LivenessSince = LivenessSelf, time.Time{}
		}
		status.Nodes = append(status.Nodes, nodeStatus)
	}
	return status
}

func (n *Node) shardStatus(shardID uint64) ShardStatus {
	shard := ShardStatus{ShardID: shardID, Partition: -1}
	if n.closed() {
		return shard
	}
	leaderID, term, valid, err := n.nodeHost.GetLeaderID(shardID)
	if err == nil && valid {
		shard.Leader, shard.Term = n.byReplica[leaderID], term
		if name, found := n.nodeOfReplica(leaderID); found {
			shard.Leader = name
		}
	}
	return shard
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
