package cluster

import (
	"testing"

	"github.com/fibrilmq/fibril/replication"
)

// A refused claim or activation whose first attempt applied is in force
// for the process that proposed it; any other state is not.
func TestARetriedCoordinationCommandCountsWhenItsFirstAttemptApplied(t *testing.T) {
	claim := coordCommand{Kind: coordClaim, Owner: "node3", Instance: 42, Epoch: 7}
	mine := CoordState{Epoch: 8, Phase: PhaseRecovering, Owner: "node3", OwnerInstance: 42,
		History: []replication.HistoryEntry{{Epoch: 7, FirstOffset: 90}}}
	if !mine.inForce(claim) {
		t.Fatal("the state shows this claim, but it was not counted as in force")
	}
	first := CoordState{Epoch: 1, Phase: PhaseActive, Owner: "node3", OwnerInstance: 42,
		History: []replication.HistoryEntry{{Epoch: 1, FirstOffset: 0}}}
	if !first.inForce(coordCommand{Kind: coordClaim, Owner: "node3", Instance: 42, Epoch: 0}) {
		t.Fatal("a first claim, active at once, was not counted as in force")
	}
	for name, state := range map[string]CoordState{
		"another owner":   {Epoch: 8, Phase: PhaseRecovering, Owner: "node1", OwnerInstance: 42},
		"another process": {Epoch: 8, Phase: PhaseRecovering, Owner: "node3", OwnerInstance: 41},
		"a newer claim":   {Epoch: 9, Phase: PhaseRecovering, Owner: "node3", OwnerInstance: 42},
		"the old epoch":   {Epoch: 7, Phase: PhaseActive, Owner: "node3", OwnerInstance: 42},
		"already active":  {Epoch: 8, Phase: PhaseActive, Owner: "node3", OwnerInstance: 42},
	} {
		if state.inForce(claim) {
			t.Errorf("claim, %s: counted as in force: %+v", name, state)
		}
	}

	activation := coordCommand{Kind: coordActivate, Owner: "node3", Instance: 42, Epoch: 7, FirstOffset: 90}
	landed := CoordState{Epoch: 7, Phase: PhaseActive, Owner: "node3", OwnerInstance: 42,
		History: []replication.HistoryEntry{{Epoch: 5, FirstOffset: 10}, {Epoch: 7, FirstOffset: 90}}}
	if !landed.inForce(activation) {
		t.Fatal("the state shows this activation in force, but it was not counted")
	}
	other := func(change func(*CoordState)) CoordState {
		state := landed
		state.History = append([]replication.HistoryEntry(nil), landed.History...)
		change(&state)
		return state
	}
	for name, state := range map[string]CoordState{
		"still recovering":        other(func(s *CoordState) { s.Phase = PhaseRecovering; s.History = s.History[:1] }),
		"another owner":           other(func(s *CoordState) { s.Owner = "node1" }),
		"another process":         other(func(s *CoordState) { s.OwnerInstance = 41 }),
		"a newer epoch":           other(func(s *CoordState) { s.Epoch = 8; s.Phase = PhaseRecovering }),
		"another first offset":    other(func(s *CoordState) { s.History[1].FirstOffset = 91 }),
		"an older epoch in force": other(func(s *CoordState) { s.Epoch = 5; s.History = s.History[:1] }),
	} {
		if state.inForce(activation) {
			t.Errorf("activation, %s: counted as in force: %+v", name, state)
		}
	}
}
