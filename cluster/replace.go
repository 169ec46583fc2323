package cluster

// Replacing a node's Raft replica after its data directory was lost.
//
// A node whose data directory is wiped has lost its Raft logs; if it came
// back under its old replica id it could vote as if it remembered terms
// and entries it no longer has, which breaks Raft's safety. So it comes
// back as a new replica: it picks a new replica id, keeps it in its
// identity file marked pending, asks a live node to replace it (this
// file), and starts with StartOptions.Join. If it gives up before the
// answer, its next start asks again under the same id. The live node
//
//  1. records in the catalog that the node is being replaced by the new
//     id (commandBeginReplace): a replacement under way under another id
//     is superseded and its id retired;
//  2. in the catalog shard, then in the coordination shard of every
//     partition the node replicates, removes every member that is the
//     node under another id (staleMembers: an id the catalog records or
//     retired for it, the id derived from its node id, or any id at its
//     Raft address) and adds the new one at the node's Raft address;
//  3. records the new id in the catalog (commandReplaceReplica, refused
//     if another replacement began since), so every node maps it to the
//     node id and the node joins those shards;
//  4. runs step 2 again, to remove what a superseded replacement still
//     running elsewhere may have added meanwhile.
//
// Invariant: once a replacement recorded its id, no shard keeps a voting
// member that is the node under another id, so a shard of three never
// becomes four with one member that never runs (which needs three of
// four).
//
// Every step is idempotent: removing an id already gone, adding an id
// already a member, beginning or recording again change nothing, so a
// rerun after a crash, or two runs under the same id at once, finish the
// job. Dragonboat never adds back a removed id, so a superseded run
// cannot re-add its id to a shard a later one cleaned. Removing before
// adding keeps a three-member shard at quorum 2 throughout (adding first
// would make it four members with one that is not running yet).
//
// The node's queue data is gone too; it rejoins every partition as a new
// replica instance and catches up from the owner like any empty follower.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lni/dragonboat/v4"
)

// replacementRaft is what a replacement needs of Raft: linearizable
// catalog reads and proposals, and membership reads and changes. A Node
// is one (through its NodeHost); tests pass fakes.
type replacementRaft interface {
	catalog(ctx context.Context) (*CatalogState, error)
	propose(ctx context.Context, command catalogCommand) error
	members(ctx context.Context, shardID uint64) (map[uint64]string, error)
	removeReplica(ctx context.Context, shardID, replicaID uint64) error
	addReplica(ctx context.Context, shardID, replicaID uint64, address string) error
}

// replacedNode is the node a replacement moves to a new replica id.
type replacedNode struct {
	id        string
	address   string // its Raft address (the config's)
	replicaID uint64 // the new id
	// former holds every other id the node is known to have had.
	former map[uint64]bool
}

// staleMembers lists, sorted, the members that are the node under an id
// other than its new one: a former id, or any id at its Raft address.
func (r replacedNode) staleMembers(members map[uint64]string) []uint64 {
	var stale []uint64
	for replicaID, address := range members {
		if replicaID != r.replicaID && (r.former[replicaID] || address == r.address) {
			stale = append(stale, replicaID)
		}
	}
	slices.Sort(stale)
	return stale
}

// ReplaceReplica replaces nodeID's Raft replica with newReplicaID in the
// catalog and in every coordination shard it is a member of. It runs on a
// live member, on behalf of the node that lost its data. Blocks on Raft.
func (n *Node) ReplaceReplica(ctx context.Context, nodeID string, newReplicaID uint64) error {
	if nodeID == n.self.ID {
		return fmt.Errorf("%w: a node cannot replace its own replica", ErrInvalidSetting)
	}
	peer, found := n.nodesByID[nodeID]
	if !found {
		return fmt.Errorf("%w: %q", ErrUnknownNode, nodeID)
	}
	return replaceReplica(ctx, nodeRaft{n}, replacedNode{id: nodeID, address: peer.RaftAddress,
		replicaID: newReplicaID, former: map[uint64]bool{peer.ReplicaID(): true}}, n.beforeReplaceRecorded.Load())
}

// SetBeforeReplaceRecorded installs a test seam: hook runs in every later
// ReplaceReplica on this node after the memberships changed and before
// the catalog records the new id. Nil removes it.
func (n *Node) SetBeforeReplaceRecorded(hook func(nodeID string, replicaID uint64)) {
	n.beforeReplaceRecorded.Store(&hook)
}

// replaceReplica runs the steps of the file comment. beforeRecorded, when
// set, is called between steps 2 and 3 (a test seam).
func replaceReplica(ctx context.Context, raft replacementRaft, node replacedNode, beforeRecorded *func(nodeID string, replicaID uint64)) error {
	if node.replicaID == 0 {
		return fmt.Errorf("%w: replica id 0", ErrInvalidSetting)
	}
	if err := raft.propose(ctx, catalogCommand{Kind: commandBeginReplace, Name: node.id, ReplicaID: node.replicaID}); err != nil {
		return fmt.Errorf("cluster: begin replacing %s by %d: %w", node.id, node.replicaID, err)
	}
	if err := replaceInEveryShard(ctx, raft, node); err != nil {
		return err
	}
	if beforeRecorded != nil && *beforeRecorded != nil {
		(*beforeRecorded)(node.id, node.replicaID)
	}
	if err := raft.propose(ctx, catalogCommand{Kind: commandReplaceReplica, Name: node.id, ReplicaID: node.replicaID}); err != nil {
		return fmt.Errorf("cluster: record %s's replica %d: %w", node.id, node.replicaID, err)
	}
	return replaceInEveryShard(ctx, raft, node)
}

// replaceInEveryShard runs step 2 in the catalog shard and in every
// coordination shard naming the node. Before each shard it reads the
// catalog: the node's former ids grow as replacements are superseded, and
// a superseded replacement stops there (it must not remove the id of the
// one that superseded it).
func replaceInEveryShard(ctx context.Context, raft replacementRaft, node replacedNode) error {
	shards := []uint64{CatalogShardID}
	for next := 0; next < len(shards); next++ {
		state, err := raft.catalog(ctx)
		if err != nil {
			return err
		}
		info, found := state.node(node.id)
		if !found {
			return fmt.Errorf("%w: %q is not in the catalog", ErrUnknownNode, node.id)
		}
		if !replacementCurrent(info, node.replicaID) {
			return fmt.Errorf("%w: %s's replacement by %d was superseded (the catalog records %d, replacing by %d)",
				ErrInvalidSetting, node.id, node.replicaID, info.ReplicaID, info.Replacing)
		}
		for _, retired := range append(slices.Clone(info.Retired), info.ReplicaID, info.Replacing) {
			if retired != 0 && retired != node.replicaID {
				node.former[retired] = true
			}
		}
		if next == 0 {
			shards = append(shards, partitionShards(state, node.id)...)
		}
		if err := replaceInShard(ctx, raft, shards[next], node); err != nil {
			return fmt.Errorf("cluster: replace %s in shard %d: %w", node.id, shards[next], err)
		}
	}
	return nil
}

// replacementCurrent says whether a replacement by replicaID is the one
// the catalog's record of the node names: begun and not superseded, or
// recorded with none begun since.
func replacementCurrent(info NodeInfo, replicaID uint64) bool {
	return info.Replacing == replicaID || (info.Replacing == 0 && info.ReplicaID == replicaID)
}

// partitionShards lists, sorted, the coordination shards of every
// partition whose members name the node.
func partitionShards(state *CatalogState, nodeID string) []uint64 {
	var shards []uint64
	for _, queue := range state.Queues {
		for _, partition := range queue.Partitions {
			if _, member := partition.Members[nodeID]; member {
				shards = append(shards, partition.ShardID)
			}
		}
	}
	slices.Sort(shards)
	return shards
}

// replaceInShard removes the node's stale members from shardID and adds
// its new id, each only if needed.
func replaceInShard(ctx context.Context, raft replacementRaft, shardID uint64, node replacedNode) error {
	members, err := raft.members(ctx, shardID)
	if err != nil {
		return err
	}
	for _, stale := range node.staleMembers(members) {
		// Rejected: removed meanwhile (another run), which is the aim.
		if err := raft.removeReplica(ctx, shardID, stale); err != nil && !errors.Is(err, dragonboat.ErrRejected) {
			return fmt.Errorf("remove replica %d: %w", stale, err)
		}
	}
	if _, present := members[node.replicaID]; present {
		return nil
	}
	err = raft.addReplica(ctx, shardID, node.replicaID, node.address)
	if err == nil || !errors.Is(err, dragonboat.ErrRejected) {
		return err
	}
	// Rejected: added meanwhile by another run under the same id, or
	// removed before (dragonboat never adds a removed id back).
	if members, err = raft.members(ctx, shardID); err != nil {
		return err
	}
	if _, present := members[node.replicaID]; !present {
		return fmt.Errorf("add replica %d: %w (a removed replica id is never added again)", node.replicaID, dragonboat.ErrRejected)
	}
	return nil
}

// nodeRaft is a Node's replacementRaft.
type nodeRaft struct{ n *Node }

func (r nodeRaft) catalog(ctx context.Context) (*CatalogState, error) {
	value, err := r.n.read(ctx, CatalogShardID, catalogQuery{})
	if err != nil {
		return nil, err
	}
	return value.(*CatalogState), nil
}

func (r nodeRaft) propose(ctx context.Context, command catalogCommand) error {
	_, err := r.n.proposeCatalog(ctx, command)
	return err
}

func (r nodeRaft) members(ctx context.Context, shardID uint64) (map[uint64]string, error) {
	return r.n.shardMembers(ctx, shardID)
}

func (r nodeRaft) removeReplica(ctx context.Context, shardID, replicaID uint64) error {
	return r.n.retry(ctx, shardID, func(attempt context.Context) error {
		return r.n.nodeHost.SyncRequestDeleteReplica(attempt, shardID, replicaID, 0)
	})
}

func (r nodeRaft) addReplica(ctx context.Context, shardID, replicaID uint64, address string) error {
	return r.n.retry(ctx, shardID, func(attempt context.Context) error {
		return r.n.nodeHost.SyncRequestAddReplica(attempt, shardID, replicaID, address, 0)
	})
}

// shardMembers is a linearizable read of a shard's voting members.
func (n *Node) shardMembers(ctx context.Context, shardID uint64) (map[uint64]string, error) {
	var members map[uint64]string
	err := n.retry(ctx, shardID, func(attempt context.Context) error {
		membership, err := n.nodeHost.SyncGetShardMembership(attempt, shardID)
		if err == nil {
			members = membership.Nodes
		}
		return err
	})
	return members, err
}

// ShardMembers is a linearizable read of a shard's voting members: Raft
// replica id to Raft address.
func (n *Node) ShardMembers(ctx context.Context, shardID uint64) (map[uint64]string, error) {
	return n.shardMembers(ctx, shardID)
}

// CatalogMember says what the catalog knows of a node: whether it is
// initialised, and the node's current replica id.
func (n *Node) CatalogMember(nodeID string) (initialized bool, replicaID uint64, err error) {
	view, err := n.LocalCatalog()
	if err != nil {
		return false, 0, err
	}
	replicaID, _ = catalogReplicaID(view, nodeID)
	return view.Initialized, replicaID, nil
}

func catalogReplicaID(view CatalogView, nodeID string) (uint64, bool) {
	for _, node := range view.Nodes {
		if node.ID == nodeID {
			return node.ReplicaID, true
		}
	}
	return 0, false
}

// NewReplicaID returns a random replica id for a node that rejoins: not
// 0, positive in signed encodings, and unlike any id derived from a node id
// only by chance (one in 2^63).
func NewReplicaID() uint64 { return newInstance() }
