package actors

import (
	"testing"

	"github.com/fibrilmq/fibril/cluster"
)

// A refused activation whose first attempt applied is a won recovery; any
// other refusal is not.
func TestActivationLandedOnlyWhenTheStateShowsIt(t *testing.T) {
	landed := cluster.CoordState{Epoch: 7, Phase: cluster.PhaseActive, Owner: "node3", OwnerInstance: 42,
		History: []cluster.HistoryEntry{{Epoch: 5, FirstOffset: 10}, {Epoch: 7, FirstOffset: 90}}}
	if !activationLanded(landed, "node3", 42, 7, 90) {
		t.Fatal("the state shows this activation in force, but it was not counted as landed")
	}
	other := func(change func(*cluster.CoordState)) cluster.CoordState {
		state := landed
		state.History = append([]cluster.HistoryEntry(nil), landed.History...)
		change(&state)
		return state
	}
	refusals := map[string]cluster.CoordState{
		"still recovering":        other(func(s *cluster.CoordState) { s.Phase = cluster.PhaseRecovering; s.History = s.History[:1] }),
		"another owner":           other(func(s *cluster.CoordState) { s.Owner = "node1" }),
		"another process":         other(func(s *cluster.CoordState) { s.OwnerInstance = 41 }),
		"a newer epoch":           other(func(s *cluster.CoordState) { s.Epoch = 8; s.Phase = cluster.PhaseRecovering }),
		"another first offset":    other(func(s *cluster.CoordState) { s.History[1].FirstOffset = 91 }),
		"an older epoch in force": other(func(s *cluster.CoordState) { s.Epoch = 5; s.History = s.History[:1] }),
	}
	for name, state := range refusals {
		if activationLanded(state, "node3", 42, 7, 90) {
			t.Errorf("%s: counted as landed: %+v", name, state)
		}
	}
}

// A refused claim whose first attempt applied is a won claim; a claim of
// another node, another process or another epoch is not.
func TestClaimLandedOnlyWhenTheStateShowsIt(t *testing.T) {
	mine := cluster.CoordState{Epoch: 8, Phase: cluster.PhaseRecovering, Owner: "node3", OwnerInstance: 42,
		History: []cluster.HistoryEntry{{Epoch: 7, FirstOffset: 90}}}
	if !claimLanded(mine, "node3", 42, 7) {
		t.Fatal("the state shows this claim, but it was not counted as landed")
	}
	for name, state := range map[string]cluster.CoordState{
		"another owner":   {Epoch: 8, Phase: cluster.PhaseRecovering, Owner: "node1", OwnerInstance: 42},
		"another process": {Epoch: 8, Phase: cluster.PhaseRecovering, Owner: "node3", OwnerInstance: 41},
		"a newer claim":   {Epoch: 9, Phase: cluster.PhaseRecovering, Owner: "node3", OwnerInstance: 42},
		"the old epoch":   {Epoch: 7, Phase: cluster.PhaseActive, Owner: "node3", OwnerInstance: 42},
		"already active":  {Epoch: 8, Phase: cluster.PhaseActive, Owner: "node3", OwnerInstance: 42},
	} {
		if claimLanded(state, "node3", 42, 7) {
			t.Errorf("%s: counted as landed: %+v", name, state)
		}
	}
}
