package cluster

// The broker-facing API of coordination: what this node knows about the
// partitions it replicates, and the two compare-and-set commands a
// recovery makes (claim the next epoch, activate it). Local methods read
// this node's view without a Raft round trip; the others talk to Raft and
// must run off any actor goroutine.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// PartitionView is a partition this node replicates, as it last saw it.
type PartitionView struct {
	Queue     string
	Partition int
	ShardID   uint64
	// Replicas is the replica set in placement order (the first is the
	// preferred owner).
	Replicas []string
	State    CoordState
	// Leader is the node leading the coordination shard, empty while none
	// is known; Term is its Raft term.
	Leader string
	Term   uint64
	// SelfLeads is true when this node leads the shard.
	SelfLeads bool
}

// Instance is this process's replica instance: a random non-zero number
// chosen at Start. A restarted process is a new instance, so it never
// counts as the owner or follower the partition knew before.
func (n *Node) Instance() uint64 { return n.instance }

// Partition returns this node's view of a partition it replicates.
func (n *Node) Partition(shardID uint64) (PartitionView, bool) {
	hosted, found := n.view.Load().shards[shardID]
	if !found {
		return PartitionView{}, false
	}
	return n.partitionView(shardID, hosted), true
}

// Partitions returns every partition this node replicates, by shard id.
func (n *Node) Partitions() []PartitionView {
	shards := n.view.Load().shards
	views := make([]PartitionView, 0, len(shards))
	for shardID, hosted := range shards {
		views = append(views, n.partitionView(shardID, hosted))
	}
	sort.Slice(views, func(i, j int) bool { return views[i].ShardID < views[j].ShardID })
	return views
}

func (n *Node) partitionView(shardID uint64, hosted hostedView) PartitionView {
	view := PartitionView{
		Queue: hosted.Queue, Partition: hosted.Partition, ShardID: shardID,
		Replicas: append([]string(nil), hosted.Replicas...), State: hosted.State.clone(),
		Term: hosted.LeaderTerm, SelfLeads: hosted.LeaderID == n.replicaID && hosted.LeaderID != 0,
	}
	if name, found := n.nodeOfReplica(hosted.LeaderID); found {
		view.Leader = name
	}
	return view
}

// PeerAddress returns a node's peer address from the config.
func (n *Node) PeerAddress(nodeID string) (string, bool) {
	peer, found := n.nodesByID[nodeID]
	return peer.PeerAddress, found
}

// ClaimEpoch proposes that this node's instance takes the epoch after
// expect. It reports the state after the command and whether the claim
// won; a lost claim is not an error (another node won, or the epoch moved).
// Blocks on Raft.
func (n *Node) ClaimEpoch(ctx context.Context, shardID, expect uint64) (CoordState, bool, error) {
	command := coordCommand{Kind: coordClaim, Owner: n.self.ID, Instance: n.instance, Epoch: expect,
		UnixMs: time.Now().UnixMilli()}
	return n.coordinate(ctx, shardID, command)
}

// ActivateEpoch proposes that this node's claim of epoch starts serving
// with its records from firstOffset. Blocks on Raft.
func (n *Node) ActivateEpoch(ctx context.Context, shardID, epoch, firstOffset uint64) (CoordState, bool, error) {
	command := coordCommand{Kind: coordActivate, Owner: n.self.ID, Instance: n.instance, Epoch: epoch,
		FirstOffset: firstOffset, UnixMs: time.Now().UnixMilli()}
	return n.coordinate(ctx, shardID, command)
}

// RecordConfirmed proposes that the partition, served by this node's
// claim of epoch, has confirmed a record (CoordState.Confirmed) and that
// the copies of voters count toward its quorum frontier
// (CoordState.Voters). Blocks on Raft; won is true once the state shows
// it, by this call or an earlier one.
func (n *Node) RecordConfirmed(ctx context.Context, shardID, epoch uint64, voters []string) (CoordState, bool, error) {
	command := coordCommand{Kind: coordConfirmed, Owner: n.self.ID, Instance: n.instance, Epoch: epoch,
		UnixMs: time.Now().UnixMilli(), Voters: slices.Clone(voters)}
	return n.coordinate(ctx, shardID, command)
}

// TransferLeadership asks a coordination shard's Raft leadership to move
// to node: best effort, the request is queued and the call returns; the
// next view says whether it moved. A leader that finds the serving owner
// alive gives the leadership back instead of taking the partition over.
func (n *Node) TransferLeadership(shardID uint64, node string) error {
	replicaID, found := n.replicaIDOf(node)
	if !found {
		return fmt.Errorf("%w: %q", ErrUnknownNode, node)
	}
	return n.nodeHost.RequestLeaderTransfer(shardID, replicaID)
}

// ReadCoordination is a linearizable read of a partition's ownership
// record. Blocks on Raft.
func (n *Node) ReadCoordination(ctx context.Context, shardID uint64) (CoordState, error) {
	value, err := n.read(ctx, shardID, coordQuery{})
	if err != nil {
		return CoordState{}, err
	}
	return value.(CoordState), nil
}

func (n *Node) coordinate(ctx context.Context, shardID uint64, command coordCommand) (CoordState, bool, error) {
	result, err := n.proposeCoordination(ctx, shardID, command)
	if err != nil {
		return CoordState{}, false, err
	}
	state, err := n.ReadCoordination(ctx, shardID)
	if err != nil {
		return CoordState{}, false, err
	}
	n.kickReconcile() // publish the new state to watchers at once
	// A refusal of a retried proposal whose first attempt applied is a win.
	return state, result == claimAccepted || state.inForce(command), nil
}

// proposeCoordination proposes a command to a coordination shard and
// returns its result value.
func (n *Node) proposeCoordination(ctx context.Context, shardID uint64, command coordCommand) (uint64, error) {
	data, err := msgpack.Marshal(&command)
	if err != nil {
		panic(fmt.Sprintf("cluster: coordination command does not encode: %v", err))
	}
	result, err := n.propose(ctx, shardID, data)
	if err != nil {
		return 0, err
	}
	return result.Value, nil
}

// newInstance returns a random non-zero instance number.
func newInstance() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("cluster: no randomness for an instance: %v", err))
		}
		if id := binary.BigEndian.Uint64(b[:]) &^ (1 << 63); id != 0 {
			return id
		}
	}
}
