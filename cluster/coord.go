package cluster

// Each queue partition has a coordination shard, a small Raft group on the
// partition's replica set. Its state is the partition's ownership record:
// the epoch, the owner of that epoch and the accepted history, one entry
// {epoch, first offset} per epoch. Failover (next) advances the epoch;
// here the shard only elects and records the first owner.
//
// Ownership changes by compare-and-set on the epoch: becomeOwner names the
// epoch it expects to replace and is refused when another claim got there
// first, so two nodes claiming at once never both win.
//
// Invariant: Epoch == len(History), History epochs are 1, 2, 3, ... in
// order, and Owner is empty exactly when Epoch is 0.

import (
	"fmt"
	"io"
	"slices"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/vmihailenco/msgpack/v5"
)

// CoordState is a partition's ownership record.
type CoordState struct {
	Epoch   uint64         `msgpack:"epoch" json:"epoch"`
	Owner   string         `msgpack:"owner" json:"owner"`
	History []HistoryEntry `msgpack:"history" json:"history"`
}

// HistoryEntry says that epoch Epoch's records start at FirstOffset.
type HistoryEntry struct {
	Epoch       uint64 `msgpack:"epoch" json:"epoch"`
	FirstOffset uint64 `msgpack:"first_offset" json:"first_offset"`
}

// becomeOwnerCommand claims the next epoch for Owner if the current epoch is
// still ExpectEpoch.
type becomeOwnerCommand struct {
	Owner       string `msgpack:"owner"`
	ExpectEpoch uint64 `msgpack:"expect_epoch"`
	FirstOffset uint64 `msgpack:"first_offset"`
}

// Result values of a becomeOwner command.
const (
	claimAccepted uint64 = 0
	claimRefused  uint64 = 1
)

func (s *CoordState) clone() CoordState {
	out := *s
	out.History = slices.Clone(s.History)
	return out
}

// becomeOwner applies a claim; it reports whether the claim won.
func (s *CoordState) becomeOwner(claim becomeOwnerCommand) bool {
	if claim.ExpectEpoch != s.Epoch || claim.Owner == "" {
		return false
	}
	s.Epoch++
	s.Owner = claim.Owner
	s.History = append(s.History, HistoryEntry{Epoch: s.Epoch, FirstOffset: claim.FirstOffset})
	return true
}

// shouldClaim decides whether this node should claim the first epoch of an
// ownerless partition: the preferred owner claims at once; any other
// replica claims when it leads the coordination shard and the partition has
// stayed ownerless for the grace period (the preferred owner is down).
func shouldClaim(state CoordState, self, preferred string, selfIsLeader bool, ownerlessFor, grace time.Duration) bool {
	if state.Epoch != 0 {
		return false
	}
	if self == preferred {
		return true
	}
	return selfIsLeader && ownerlessFor >= grace
}

// coordQuery asks a coordination machine for its state.
type coordQuery struct{}

// coordMachine is the IStateMachine of a coordination shard; see
// catalogMachine for the locking and error rules, which are the same.
type coordMachine struct {
	state   CoordState
	changed func()
}

func newCoordMachine(changed func()) sm.CreateStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IStateMachine {
		return &coordMachine{changed: changed}
	}
}

func (m *coordMachine) Update(entry sm.Entry) (sm.Result, error) {
	var claim becomeOwnerCommand
	if err := msgpack.Unmarshal(entry.Cmd, &claim); err != nil {
		panic(fmt.Sprintf("cluster: coordination entry %d does not decode: %v", entry.Index, err))
	}
	if !m.state.becomeOwner(claim) {
		return sm.Result{Value: claimRefused}, nil
	}
	if m.changed != nil {
		m.changed()
	}
	return sm.Result{Value: claimAccepted}, nil
}

func (m *coordMachine) Lookup(query any) (any, error) {
	if _, ok := query.(coordQuery); !ok {
		return nil, fmt.Errorf("cluster: coordination lookup of %T", query)
	}
	return m.state.clone(), nil
}

func (m *coordMachine) SaveSnapshot(writer io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return msgpack.NewEncoder(writer).Encode(&m.state)
}

func (m *coordMachine) RecoverFromSnapshot(reader io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	var state CoordState
	if err := msgpack.NewDecoder(reader).Decode(&state); err != nil {
		return fmt.Errorf("cluster: coordination snapshot: %w", err)
	}
	m.state = state
	if m.changed != nil {
		m.changed()
	}
	return nil
}

func (m *coordMachine) Close() error { return nil }
