package cluster

// The steps of a replacement (replace.go) against a fake Raft that keeps
// dragonboat's membership rules: adding a member or a removed id is
// rejected, and so is removing an id that is not a member.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/lni/dragonboat/v4"
)

const (
	testCoordinationShard = FirstCoordinationShardID
	node1OldReplica       = 11
)

type fakeShard struct {
	members map[uint64]string
	removed map[uint64]bool
}

// fakeReplacementRaft is a catalog and shard memberships in memory. It is
// shared by concurrent replacements, so it has a lock.
type fakeReplacementRaft struct {
	mu      sync.Mutex
	state   *CatalogState
	shards  map[uint64]*fakeShard
	changes int // membership changes applied
}

// newFakeReplacementRaft is three nodes (node1 at replica 11, node2 12,
// node3 13) in the catalog shard and in the coordination shard of queue
// q's one partition.
func newFakeReplacementRaft() *fakeReplacementRaft {
	state := newCatalogState()
	state.Initialized = true
	members := map[string]uint64{}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		state.Nodes = append(state.Nodes, NodeInfo{ID: id, RaftAddress: id + ":raft", ReplicaID: uint64(10 + i)})
		members[id] = uint64(10 + i)
	}
	state.Queues["q"] = &QueueInfo{Name: "q", Replicas: 3, Partitions: []PartitionInfo{{
		ShardID: testCoordinationShard, Replicas: []string{"node1", "node2", "node3"}, Members: members}}}
	raft := &fakeReplacementRaft{state: state, shards: map[uint64]*fakeShard{}}
	for _, shardID := range []uint64{CatalogShardID, testCoordinationShard} {
		raft.shards[shardID] = &fakeShard{members: map[uint64]string{11: "node1:raft", 12: "node2:raft", 13: "node3:raft"},
			removed: map[uint64]bool{}}
	}
	return raft
}

func (f *fakeReplacementRaft) catalog(context.Context) (*CatalogState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.clone(), nil
}

func (f *fakeReplacementRaft) propose(ctx context.Context, command catalogCommand) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.Apply(command).err()
}

func (f *fakeReplacementRaft) members(ctx context.Context, shardID uint64) (map[uint64]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.shards[shardID].members), nil
}

func (f *fakeReplacementRaft) removeReplica(ctx context.Context, shardID, replicaID uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	shard := f.shards[shardID]
	if _, member := shard.members[replicaID]; !member {
		return dragonboat.ErrRejected
	}
	delete(shard.members, replicaID)
	shard.removed[replicaID] = true
	f.changes++
	return nil
}

func (f *fakeReplacementRaft) addReplica(ctx context.Context, shardID, replicaID uint64, address string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	shard := f.shards[shardID]
	if _, member := shard.members[replicaID]; member || shard.removed[replicaID] {
		return dragonboat.ErrRejected
	}
	shard.members[replicaID] = address
	f.changes++
	return nil
}

// node1As is node1 being replaced by replicaID, as Node.ReplaceReplica
// builds it (the id derived from the node id is a former one).
func node1As(replicaID uint64) replacedNode {
	return replacedNode{id: "node1", address: "node1:raft", replicaID: replicaID, former: map[uint64]bool{node1OldReplica: true}}
}

// checkNode1Is checks that every shard's voting members are exactly
// node2, node3 and node1 under replicaID, and that the catalog records it.
func (f *fakeReplacementRaft) checkNode1Is(t *testing.T, replicaID uint64) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[uint64]string{replicaID: "node1:raft", 12: "node2:raft", 13: "node3:raft"}
	for shardID, shard := range f.shards {
		if !maps.Equal(shard.members, want) {
			t.Errorf("shard %d members = %v, want %v", shardID, shard.members, want)
		}
	}
	info, _ := f.state.node("node1")
	if info.ReplicaID != replicaID || info.Replacing != 0 {
		t.Errorf("catalog records node1 as %d (replacing by %d), want %d", info.ReplicaID, info.Replacing, replicaID)
	}
	if got := f.state.Queues["q"].Partitions[0].Members["node1"]; got != replicaID {
		t.Errorf("the partition names node1 as %d, want %d", got, replicaID)
	}
}

// Every member that is the node under another id goes: a former id
// wherever its address points, and any id at the node's address.
func TestStaleMembersAreEveryOtherIdOfTheNode(t *testing.T) {
	node := replacedNode{id: "node1", address: "node1:raft", replicaID: 30, former: map[uint64]bool{11: true, 21: true}}
	members := map[uint64]string{11: "node1:raft", 12: "node2:raft", 13: "node3:raft",
		21: "moved:raft", 22: "node1:raft", 30: "node1:raft"}
	if got, want := node.staleMembers(members), []uint64{11, 21, 22}; !slices.Equal(got, want) {
		t.Fatalf("stale members = %v, want %v", got, want)
	}
}

// Each shard step is idempotent: a second run changes nothing; an id
// removed meanwhile by another run, or added meanwhile under the same id,
// is not an error.
func TestReplaceInShardIsIdempotent(t *testing.T) {
	ctx := context.Background()
	raft := newFakeReplacementRaft()
	node := node1As(40)
	if err := replaceInShard(ctx, raft, CatalogShardID, node); err != nil {
		t.Fatal(err)
	}
	if raft.changes != 2 {
		t.Fatalf("first run made %d membership changes, want 2 (remove 11, add 40)", raft.changes)
	}
	if err := replaceInShard(ctx, raft, CatalogShardID, node); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if raft.changes != 2 {
		t.Fatalf("second run changed the membership (%d changes in all)", raft.changes)
	}
	// Another run got there between this run's read and its changes: the
	// rejections it meets are the state it wants.
	racing := &racingRaft{fakeReplacementRaft: newFakeReplacementRaft(), node: node}
	if err := replaceInShard(ctx, racing, CatalogShardID, node); err != nil {
		t.Fatalf("a run racing another under the same id: %v", err)
	}
	if members := racing.shards[CatalogShardID].members; len(members) != 3 || members[40] == "" {
		t.Fatalf("members after the race = %v", members)
	}
}

// racingRaft answers the first members read, then lets another run of the
// same replacement finish before any change of this one.
type racingRaft struct {
	*fakeReplacementRaft
	node  replacedNode
	raced bool
}

func (r *racingRaft) members(ctx context.Context, shardID uint64) (map[uint64]string, error) {
	members, err := r.fakeReplacementRaft.members(ctx, shardID)
	if !r.raced {
		r.raced = true
		if err := replaceInShard(ctx, r.fakeReplacementRaft, shardID, r.node); err != nil {
			return nil, err
		}
	}
	return members, err
}

// Dragonboat never adds a removed id back: the step says so instead of
// calling the replacement done.
func TestReplaceInShardRefusesARemovedID(t *testing.T) {
	raft := newFakeReplacementRaft()
	raft.shards[CatalogShardID].removed[40] = true
	err := replaceInShard(context.Background(), raft, CatalogShardID, node1As(40))
	if !errors.Is(err, dragonboat.ErrRejected) {
		t.Fatalf("adding a removed id: %v, want ErrRejected", err)
	}
}

// A replacement interrupted after the memberships changed and before the
// catalog recorded the id, run again under the same id, ends with three
// members in every shard.
func TestInterruptedReplacementRerunsUnderTheSameID(t *testing.T) {
	raft := newFakeReplacementRaft()
	ctx, giveUp := context.WithCancel(context.Background())
	interrupt := func(string, uint64) { giveUp() }
	if err := replaceReplica(ctx, raft, node1As(40), &interrupt); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted replacement: %v", err)
	}
	if err := replaceReplica(context.Background(), raft, node1As(40), nil); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	raft.checkNode1Is(t, 40)
	// Once more, as a node does whose answer was lost: nothing changes.
	changes := raft.changes
	if err := replaceReplica(context.Background(), raft, node1As(40), nil); err != nil || raft.changes != changes {
		t.Fatalf("a rerun of a finished replacement: %v, %d membership changes", err, raft.changes-changes)
	}
}

// A replacement under a new id, while an earlier one for the same node
// stands half-way (it added its id everywhere and did not record it),
// removes the earlier id from every shard; the earlier one, resumed, is
// refused and changes nothing.
func TestLaterReplacementRemovesEveryOtherIDOfTheNode(t *testing.T) {
	raft := newFakeReplacementRaft()
	reached, resume := make(chan struct{}), make(chan struct{})
	hold := func(string, uint64) {
		close(reached)
		<-resume
	}
	earlier := make(chan error, 1)
	go func() { earlier <- replaceReplica(context.Background(), raft, node1As(40), &hold) }()
	<-reached
	for shardID, shard := range raft.shards {
		if shard.members[40] == "" || len(shard.members) != 3 {
			t.Fatalf("half-way: shard %d members %v", shardID, shard.members)
		}
	}
	if err := replaceReplica(context.Background(), raft, node1As(50), nil); err != nil {
		t.Fatalf("later replacement: %v", err)
	}
	close(resume)
	if err := <-earlier; !errors.Is(err, ErrInvalidSetting) {
		t.Fatalf("the superseded replacement, resumed: %v, want refused", err)
	}
	raft.checkNode1Is(t, 50)
	info, _ := raft.state.node("node1")
	if !slices.Contains(info.Retired, 40) || !slices.Contains(info.Retired, node1OldReplica) {
		t.Fatalf("retired ids of node1 = %v, want 11 and 40", info.Retired)
	}
	// The superseded id never comes back.
	if err := replaceReplica(context.Background(), raft, node1As(40), nil); !errors.Is(err, ErrInvalidSetting) {
		t.Fatalf("a replacement under a retired id: %v, want refused", err)
	}
	raft.checkNode1Is(t, 50)
}

// A replacement that stops after its first shard leaves a member behind
// that the next one, under another id, removes (found by the catalog's
// Replacing, or by the node's address alone).
func TestReplacementRemovesAnIDOnlyTheAddressTells(t *testing.T) {
	raft := newFakeReplacementRaft()
	// An id added to the coordination shard by a run the catalog never heard of.
	raft.shards[testCoordinationShard].members[60] = "node1:raft"
	delete(raft.shards[testCoordinationShard].members, node1OldReplica)
	if err := replaceReplica(context.Background(), raft, node1As(70), nil); err != nil {
		t.Fatal(err)
	}
	raft.checkNode1Is(t, 70)
}

// The catalog's side: a begin supersedes the one under way; a record by
// a superseded or retired id is refused; both are idempotent.
func TestCatalogReplacementRecords(t *testing.T) {
	state := newFakeReplacementRaft().state
	apply := func(kind commandKind, replicaID uint64) error {
		return state.Apply(catalogCommand{Kind: kind, Name: "node1", ReplicaID: replicaID}).err()
	}
	steps := []struct {
		kind      commandKind
		replicaID uint64
		refused   bool
	}{
		{commandBeginReplace, 40, false},
		{commandBeginReplace, 40, false},   // again: nothing changes
		{commandBeginReplace, 50, false},   // supersedes 40
		{commandReplaceReplica, 40, true},  // retired
		{commandBeginReplace, 40, true},    // retired
		{commandBeginReplace, 12, true},    // node2's
		{commandReplaceReplica, 50, false}, //
		{commandReplaceReplica, 50, false}, // again
		{commandBeginReplace, 50, false},   // recorded already
	}
	for i, step := range steps {
		if err := apply(step.kind, step.replicaID); (err != nil) != step.refused {
			t.Fatalf("step %d (%d by %d): %v, want refused %v", i, step.kind, step.replicaID, err, step.refused)
		}
	}
	info, _ := state.node("node1")
	if info.ReplicaID != 50 || info.Replacing != 0 || info.Replaced != 1 || !slices.Equal(info.Retired, []uint64{40, 11}) {
		t.Fatalf("node1 = %+v", info)
	}
}
