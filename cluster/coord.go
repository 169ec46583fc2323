package cluster

// Each queue partition has a coordination shard, a small Raft group on the
// partition's replica set. Its state is the partition's ownership record:
// the current epoch, who claimed it (node and process instance), whether
// that owner is still recovering or already serving, and the accepted
// history, one entry {epoch, first offset} per epoch that served.
//
// Authority. The owner of a partition is the node whose process instance
// claimed the current epoch; it serves only while it leads the shard and
// the epoch is active. Whoever leads the shard and is not that serving
// owner claims the next epoch for itself and recovers the partition
// (actors/recovery.go): a dead owner is replaced within an election of
// this shard, a restarted owner is a new instance and recovers too.
//
// Commands, both compare-and-set so two nodes acting at once never both
// win:
//
//   - claim {owner, instance, expect_epoch}: when the current epoch is still
//     expect_epoch, the claimer takes epoch expect_epoch+1. A claim of epoch
//     1 (a partition nobody ever served) is active at once with first offset
//     0; any later claim starts recovering.
//   - activate {owner, instance, epoch, first_offset}: when the claim of that
//     epoch by that instance is still the current one and recovering, it
//     becomes active; the history gains {epoch, first_offset}.
//   - confirmed {owner, instance, epoch, voters}: when that instance serves
//     that epoch (active), the partition is marked as having confirmed a
//     record, and the nodes in voters join Voters, the nodes whose copies
//     an owner counts toward its quorum frontier. The owner records a node
//     before the first frontier that node's copy counts toward applies: so
//     once for the copies counting at the partition's first confirm or
//     delivery, and once more for each node whose copy starts counting
//     later. Until the partition confirmed, no copy can have lost a
//     confirmed record, so a recovery counts the seal of a copy that opened
//     empty (replication.SealReport's Incomplete); from then on it does not.
//     A copy created empty on a node that is not a voter starts complete:
//     no copy on that node ever counted, so it lost nothing a confirm stood
//     on (docs/cluster.md, "A copy earns its vote"). A state confirmed by
//     a node of an earlier version has Confirmed without VotersKnown: any
//     node may have counted.
//
// Invariant: History epochs strictly increase and never pass Epoch; first
// offsets never decrease; Phase is PhaseActive exactly when Epoch > 0 and
// the last history entry is Epoch's; Owner and OwnerInstance are empty
// exactly when Epoch is 0.

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fibrilmq/fibril/replication"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/vmihailenco/msgpack/v5"
)

// Phase says whether the current epoch's owner serves yet.
type Phase uint8

// Phases of an epoch.
const (
	// PhaseNone: no epoch was ever claimed.
	PhaseNone Phase = 0
	// PhaseRecovering: the epoch is claimed; its owner is sealing the
	// replicas and installing the chosen history. Nobody serves.
	PhaseRecovering Phase = 1
	// PhaseActive: the owner installed the history and serves.
	PhaseActive Phase = 2
)

func (p Phase) String() string {
	switch p {
	case PhaseNone:
		return "none"
	case PhaseRecovering:
		return "recovering"
	case PhaseActive:
		return "active"
	}
	return "phase(?)"
}

// MarshalJSON makes phases readable in the cluster API (msgpack keeps the
// number).
func (p Phase) MarshalJSON() ([]byte, error) { return []byte(`"` + p.String() + `"`), nil }

// CoordState is a partition's ownership record.
type CoordState struct {
	Epoch         uint64                     `msgpack:"epoch" json:"epoch"`
	Owner         string                     `msgpack:"owner" json:"owner"`
	OwnerInstance uint64                     `msgpack:"owner_instance" json:"owner_instance"`
	Phase         Phase                      `msgpack:"phase" json:"phase"`
	History       []replication.HistoryEntry `msgpack:"history" json:"history"`
	// Confirmed says an owner of the partition has let a quorum frontier
	// apply: a record may have been confirmed or delivered. It never goes
	// back to false.
	Confirmed bool `msgpack:"confirmed" json:"confirmed"`
	// Voters names the nodes (sorted) whose copies an owner has counted
	// toward a quorum frontier; it only grows. VotersKnown says Voters has
	// been recorded since the partition's first confirm, so a node it does
	// not name never counted.
	Voters      []string `msgpack:"voters,omitempty" json:"voters,omitempty"`
	VotersKnown bool     `msgpack:"voters_known,omitempty" json:"voters_known,omitempty"`
	// ClaimedUnixMs and ActivatedUnixMs time the current epoch (from the
	// claimer's and activator's clocks), for the failover timeline.
	ClaimedUnixMs   int64 `msgpack:"claimed_unix_ms" json:"claimed_unix_ms"`
	ActivatedUnixMs int64 `msgpack:"activated_unix_ms" json:"activated_unix_ms"`
}

// Serving reports whether instance of node is the serving owner.
func (s CoordState) Serving(node string, instance uint64) bool {
	return s.Phase == PhaseActive && s.Owner == node && s.OwnerInstance == instance
}

// MayHaveCounted reports whether a copy on node may have counted toward a
// confirm or delivery of the partition: then a copy of it created empty
// may have lost a record a confirm stood on. An owner counts a copy toward
// its quorum frontier only once this says so.
func (s CoordState) MayHaveCounted(node string) bool {
	return s.Confirmed && (!s.VotersKnown || slices.Contains(s.Voters, node))
}

type coordCommandKind uint8

const (
	coordClaim coordCommandKind = iota + 1
	coordActivate
	coordConfirmed
)

// coordCommand is one coordination shard proposal.
type coordCommand struct {
	Kind        coordCommandKind `msgpack:"kind"`
	Owner       string           `msgpack:"owner"`
	Instance    uint64           `msgpack:"instance"`
	Epoch       uint64           `msgpack:"epoch"` // claim: the epoch expected now; activate: the epoch to activate
	FirstOffset uint64           `msgpack:"first_offset"`
	UnixMs      int64            `msgpack:"unix_ms"`
	Voters      []string         `msgpack:"voters,omitempty"` // confirmed: the nodes to record as voters
}

// Result values of a coordination command.
const (
	claimAccepted uint64 = 0
	claimRefused  uint64 = 1
)

func (s *CoordState) clone() CoordState {
	out := *s
	out.History = slices.Clone(s.History)
	out.Voters = slices.Clone(s.Voters)
	return out
}

// apply runs a command; it reports whether it changed the state.
func (s *CoordState) apply(command coordCommand) bool {
	switch command.Kind {
	case coordClaim:
		return s.claim(command)
	case coordActivate:
		return s.activate(command)
	case coordConfirmed:
		return s.confirmed(command)
	}
	return false
}

// confirmed marks the partition as having confirmed a record and records
// the command's voters, when the command's instance serves the command's
// epoch. Voters are known from a first confirm that names them on; a
// state an earlier version marked confirmed never knows them.
func (s *CoordState) confirmed(command coordCommand) bool {
	if !s.Serving(command.Owner, command.Instance) || s.Epoch != command.Epoch {
		return false
	}
	changed := false
	if !s.Confirmed {
		// A command of an earlier version names no voters (and its owner
		// counts every copy): the voters are then never known.
		s.Confirmed, s.VotersKnown, changed = true, len(command.Voters) > 0, true
	}
	for _, node := range command.Voters {
		if !slices.Contains(s.Voters, node) {
			s.Voters = append(s.Voters, node)
			changed = true
		}
	}
	slices.Sort(s.Voters)
	return changed
}

func (s *CoordState) claim(command coordCommand) bool {
	if command.Epoch != s.Epoch || command.Owner == "" || command.Instance == 0 {
		return false
	}
	s.Epoch++
	s.Owner, s.OwnerInstance = command.Owner, command.Instance
	s.ClaimedUnixMs, s.ActivatedUnixMs = command.UnixMs, 0
	s.Phase = PhaseRecovering
	if s.Epoch == 1 {
		// Nobody ever served this partition: no replica holds a record, so
		// there is nothing to recover.
		s.Phase = PhaseActive
		s.ActivatedUnixMs = command.UnixMs
		s.History = append(s.History, replication.HistoryEntry{Epoch: 1, FirstOffset: 0})
	}
	return true
}

// inForce reports whether s shows command applied by the process that
// proposed it: the claim of the epoch after the expected one (recovering,
// or active at once for epoch 1), or the activation of its epoch from its
// first offset. A proposal retried after a timeout or a leader change may
// have applied on its first attempt; the retry is refused, and the
// refusal must not undo it.
func (s CoordState) inForce(command coordCommand) bool {
	if s.Owner != command.Owner || s.OwnerInstance != command.Instance {
		return false
	}
	switch command.Kind {
	case coordClaim:
		return s.Epoch == command.Epoch+1 && (s.Phase == PhaseRecovering || command.Epoch == 0)
	case coordActivate:
		n := len(s.History)
		return s.Epoch == command.Epoch && s.Phase == PhaseActive && n > 0 &&
			s.History[n-1] == replication.HistoryEntry{Epoch: command.Epoch, FirstOffset: command.FirstOffset}
	case coordConfirmed:
		for _, node := range command.Voters {
			if !slices.Contains(s.Voters, node) {
				return false
			}
		}
		return s.Confirmed
	}
	return false
}

func (s *CoordState) activate(command coordCommand) bool {
	if command.Epoch != s.Epoch || s.Phase != PhaseRecovering || command.Owner != s.Owner ||
		command.Instance != s.OwnerInstance {
		return false
	}
	if n := len(s.History); n > 0 && command.FirstOffset < s.History[n-1].FirstOffset {
		return false // an activation below an earlier epoch's start is a bug in the caller
	}
	s.Phase = PhaseActive
	s.ActivatedUnixMs = command.UnixMs
	s.History = append(s.History, replication.HistoryEntry{Epoch: s.Epoch, FirstOffset: command.FirstOffset})
	return true
}

// shouldClaimFirst decides whether this node claims the first epoch of a
// partition nobody ever served: its leader does, once it is the preferred
// owner or the partition has stayed ownerless for the grace period under
// its leadership (the preferred owner did not take the leadership it was
// offered).
// shouldOfferFirstTransfer says whether this node asks for the shard's
// leadership to move to the preferred owner before the first claim. The
// first owner is the shard's leader, so the leadership moves to the
// preferred owner (placement spreads those): both the leader and the
// preferred owner ask, once per election timeout, until it moves or the
// leader's grace runs out. Then they stop: the leader claims itself, and a
// transfer still asked for would drop its claim's proposal (a shard that
// transfers takes none) again and again on a starved machine.
func shouldOfferFirstTransfer(self, preferred string, selfIsLeader bool, ownerlessFor, grace time.Duration) bool {
	if ownerlessFor >= grace {
		return false
	}
	return self != preferred && selfIsLeader || self == preferred && !selfIsLeader
}

func shouldClaimFirst(state CoordState, self, preferred string, selfIsLeader bool, ownerlessFor, grace time.Duration) bool {
	if state.Epoch != 0 || !selfIsLeader {
		return false
	}
	return self == preferred || ownerlessFor >= grace
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
	var command coordCommand
	if err := msgpack.Unmarshal(entry.Cmd, &command); err != nil {
		panic(fmt.Sprintf("cluster: coordination entry %d does not decode: %v", entry.Index, err))
	}
	if !m.state.apply(command) {
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
