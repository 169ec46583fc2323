package cluster

// Replacing a node's Raft replica after its data directory was lost.
//
// A node whose data directory is wiped has lost its Raft logs; if it came
// back under its old replica id it could vote as if it remembered terms
// and entries it no longer has, which breaks Raft's safety. So it comes
// back as a new replica: it picks a new replica id, asks a live node to
// replace it (this file), and starts with StartOptions.Join. The live node
//
//  1. removes the old replica id from the catalog shard and adds the new
//     one at the node's Raft address;
//  2. does the same in the coordination shard of every partition the node
//     replicates;
//  3. records the new id in the catalog (commandReplaceReplica), so every
//     node maps it to the node id and the node joins those shards.
//
// Each step is idempotent: a replica already removed or already added is
// not an error, and a rerun after a crash finishes the job. Removing
// before adding keeps a three-member shard at quorum 2 throughout (adding
// first would make it four members with one that is not running yet).
//
// The node's queue data is gone too; it rejoins every partition as a new
// replica instance and catches up from the owner like any empty follower.

import (
	"context"
	"errors"
	"fmt"

	"github.com/lni/dragonboat/v4"
)

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
	view, err := n.Catalog(ctx)
	if err != nil {
		return err
	}
	old, found := catalogReplicaID(view, nodeID)
	if !found {
		return fmt.Errorf("%w: %q is not in the catalog", ErrUnknownNode, nodeID)
	}
	if old == newReplicaID {
		return nil // replaced already
	}
	if err := n.replaceMember(ctx, CatalogShardID, old, newReplicaID, peer.RaftAddress); err != nil {
		return fmt.Errorf("cluster: replace %s in the catalog: %w", nodeID, err)
	}
	for _, queue := range view.Queues {
		for _, partition := range queue.Partitions {
			replicaID, member := partition.Members[nodeID]
			if !member {
				continue
			}
			if err := n.replaceMember(ctx, partition.ShardID, replicaID, newReplicaID, peer.RaftAddress); err != nil {
				return fmt.Errorf("cluster: replace %s in queue %s partition %d: %w", nodeID, queue.Name, partition.Index, err)
			}
		}
	}
	_, err = n.proposeCatalog(ctx, catalogCommand{Kind: commandReplaceReplica, Name: nodeID, ReplicaID: newReplicaID})
	return err
}

// replaceMember removes old from shardID's membership and adds replacement.
func (n *Node) replaceMember(ctx context.Context, shardID, old, replacement uint64, address string) error {
	members, err := n.shardMembers(ctx, shardID)
	if err != nil {
		return err
	}
	if _, present := members[old]; present {
		err := n.retry(ctx, shardID, func(attempt context.Context) error {
			return n.nodeHost.SyncRequestDeleteReplica(attempt, shardID, old, 0)
		})
		if err != nil && !errors.Is(err, dragonboat.ErrRejected) {
			return fmt.Errorf("remove replica %d: %w", old, err)
		}
	}
	if _, present := members[replacement]; present {
		return nil
	}
	err = n.retry(ctx, shardID, func(attempt context.Context) error {
		return n.nodeHost.SyncRequestAddReplica(attempt, shardID, replacement, address, 0)
	})
	if err != nil && !errors.Is(err, dragonboat.ErrRejected) {
		return fmt.Errorf("add replica %d: %w", replacement, err)
	}
	return nil
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
