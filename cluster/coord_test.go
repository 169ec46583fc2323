package cluster

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/replication"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/vmihailenco/msgpack/v5"
)

func claimOf(owner string, instance, expect uint64) coordCommand {
	return coordCommand{Kind: coordClaim, Owner: owner, Instance: instance, Epoch: expect, UnixMs: 1}
}

func activationOf(owner string, instance, epoch, first uint64) coordCommand {
	return coordCommand{Kind: coordActivate, Owner: owner, Instance: instance, Epoch: epoch, FirstOffset: first, UnixMs: 2}
}

func TestCoordinationIsCompareAndSet(t *testing.T) {
	var state CoordState
	if !state.apply(claimOf("node1", 11, 0)) {
		t.Fatal("first claim refused")
	}
	if state.Phase != PhaseActive || !state.Serving("node1", 11) {
		t.Fatalf("epoch 1 is not active at once: %+v", state)
	}
	if state.apply(claimOf("node2", 22, 0)) {
		t.Fatal("a second claim of epoch 1 won")
	}
	if state.apply(claimOf("", 22, 1)) || state.apply(claimOf("node2", 0, 1)) {
		t.Fatal("a claim without an owner or an instance won")
	}
	if !state.apply(claimOf("node2", 22, 1)) {
		t.Fatal("claim of epoch 2 refused")
	}
	if state.Phase != PhaseRecovering || state.Serving("node2", 22) || state.Serving("node1", 11) {
		t.Fatalf("after the claim of epoch 2 someone serves: %+v", state)
	}
	for name, command := range map[string]coordCommand{
		"another instance":  activationOf("node2", 23, 2, 42),
		"another node":      activationOf("node3", 22, 2, 42),
		"another epoch":     activationOf("node2", 22, 1, 42),
		"below the history": activationOf("node2", 22, 2, 0),
	} {
		probe := state.clone()
		if command.FirstOffset == 0 {
			probe.History[0].FirstOffset = 5 // make 0 fall below the history
		}
		if probe.apply(command) {
			t.Errorf("activation by %s won", name)
		}
	}
	if !state.apply(activationOf("node2", 22, 2, 42)) {
		t.Fatal("the claimer's activation was refused")
	}
	if state.apply(activationOf("node2", 22, 2, 42)) {
		t.Fatal("a second activation won")
	}
	want := CoordState{Epoch: 2, Owner: "node2", OwnerInstance: 22, Phase: PhaseActive,
		History: []replication.HistoryEntry{{Epoch: 1, FirstOffset: 0}, {Epoch: 2, FirstOffset: 42}}, ClaimedUnixMs: 1, ActivatedUnixMs: 2}
	if !reflect.DeepEqual(state, want) {
		t.Fatalf("state = %+v", state)
	}
	// A claim during recovery replaces the claimer that never activated.
	if !state.apply(claimOf("node3", 33, 2)) || !state.apply(claimOf("node1", 12, 3)) || state.Owner != "node1" {
		t.Fatalf("claims during recovery: %+v", state)
	}
	if len(state.History) != 2 {
		t.Fatalf("epochs that never served entered the history: %+v", state.History)
	}
}

func TestShouldClaimFirst(t *testing.T) {
	grace := time.Second
	owned := CoordState{Epoch: 1, Owner: "node1", Phase: PhaseActive}
	cases := []struct {
		name         string
		state        CoordState
		self         string
		selfIsLeader bool
		ownerlessFor time.Duration
		want         bool
	}{
		{"preferred leader claims at once", CoordState{}, "node1", true, 0, true},
		{"preferred follower waits for the leadership", CoordState{}, "node1", false, time.Hour, false},
		{"other leader waits", CoordState{}, "node2", true, grace / 2, false},
		{"other leader claims after grace", CoordState{}, "node2", true, grace, true},
		{"other follower never claims", CoordState{}, "node2", false, time.Hour, false},
		{"owned is never claimed", owned, "node1", true, time.Hour, false},
	}
	for _, tc := range cases {
		if got := shouldClaimFirst(tc.state, tc.self, "node1", tc.selfIsLeader, tc.ownerlessFor, grace); got != tc.want {
			t.Errorf("%s: shouldClaimFirst = %v", tc.name, got)
		}
	}
}

func TestCoordMachine(t *testing.T) {
	changes := 0
	machine := newCoordMachine(func() { changes++ })(FirstCoordinationShardID, 1).(*coordMachine)
	apply := func(command coordCommand) uint64 {
		data, err := msgpack.Marshal(&command)
		if err != nil {
			t.Fatal(err)
		}
		result, err := machine.Update(sm.Entry{Cmd: data})
		if err != nil {
			t.Fatal(err)
		}
		return result.Value
	}
	if apply(claimOf("node3", 3, 0)) != claimAccepted || apply(claimOf("node1", 1, 0)) != claimRefused {
		t.Fatal("claims not compare-and-set")
	}
	if changes != 1 {
		t.Fatalf("changes = %d", changes)
	}
	var snapshot bytes.Buffer
	if err := machine.SaveSnapshot(&snapshot, nil, nil); err != nil {
		t.Fatal(err)
	}
	recovered := newCoordMachine(nil)(FirstCoordinationShardID, 2).(*coordMachine)
	if err := recovered.RecoverFromSnapshot(&snapshot, nil, nil); err != nil {
		t.Fatal(err)
	}
	value, err := recovered.Lookup(coordQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if state := value.(CoordState); !state.Serving("node3", 3) || state.Epoch != 1 || len(state.History) != 1 {
		t.Fatalf("recovered = %+v", state)
	}
}

// TestConfirmedIsRecordedOnlyByTheServingOwner: the mark that a partition
// has confirmed something comes only from the instance serving the
// current epoch, once, and survives later claims and activations.
func TestConfirmedIsRecordedOnlyByTheServingOwner(t *testing.T) {
	var state CoordState
	confirmedBy := func(owner string, instance, epoch uint64) coordCommand {
		return coordCommand{Kind: coordConfirmed, Owner: owner, Instance: instance, Epoch: epoch, UnixMs: 3}
	}
	state.apply(claimOf("node1", 11, 0))
	for name, command := range map[string]coordCommand{
		"another instance": confirmedBy("node1", 12, 1),
		"another node":     confirmedBy("node2", 11, 1),
		"another epoch":    confirmedBy("node1", 11, 2),
	} {
		if probe := state.clone(); probe.apply(command) || probe.Confirmed {
			t.Errorf("confirmed recorded by %s", name)
		}
	}
	if !state.apply(confirmedBy("node1", 11, 1)) || !state.Confirmed {
		t.Fatalf("the serving owner's mark was refused: %+v", state)
	}
	if state.apply(confirmedBy("node1", 11, 1)) || !state.inForce(confirmedBy("node1", 11, 1)) {
		t.Fatal("a second mark applied, or the first does not count as in force for a retry")
	}
	state.apply(claimOf("node2", 22, 1))
	if state.apply(confirmedBy("node2", 22, 2)) {
		t.Fatal("a recovering claimer recorded the mark")
	}
	state.apply(activationOf("node2", 22, 2, 40))
	if !state.Confirmed {
		t.Fatal("the mark did not survive a claim and an activation")
	}
}

// TestVotersAreRecordedByTheServingOwnerAndOnlyGrow: the first confirmed
// command records its voters and makes them known; later ones add nodes;
// only a recorded node may have counted; a retry of a recorded set is in
// force, one naming a node not recorded is not; a state an earlier
// version confirmed (no voters known) lets every node have counted.
func TestVotersAreRecordedByTheServingOwnerAndOnlyGrow(t *testing.T) {
	var state CoordState
	confirmedWith := func(voters ...string) coordCommand {
		return coordCommand{Kind: coordConfirmed, Owner: "node1", Instance: 11, Epoch: 1, UnixMs: 3, Voters: voters}
	}
	state.apply(claimOf("node1", 11, 0))
	if state.MayHaveCounted("node1") {
		t.Fatal("a copy counted before the partition confirmed")
	}
	if !state.apply(confirmedWith("node1", "node2")) || !state.VotersKnown {
		t.Fatalf("the first voters were refused: %+v", state)
	}
	if !state.MayHaveCounted("node2") || state.MayHaveCounted("node3") {
		t.Fatalf("voters %v: node2 must have counted, node3 not", state.Voters)
	}
	if state.inForce(confirmedWith("node3")) || !state.inForce(confirmedWith("node2")) {
		t.Fatal("in force for a node not recorded, or not for a recorded one")
	}
	if !state.apply(confirmedWith("node3")) || state.apply(confirmedWith("node3", "node1")) {
		t.Fatal("a new voter was not added, or a known set changed the state")
	}
	if want := []string{"node1", "node2", "node3"}; !slices.Equal(state.Voters, want) {
		t.Fatalf("voters = %v, want %v", state.Voters, want)
	}
	state.apply(claimOf("node2", 22, 1))
	if !state.MayHaveCounted("node3") {
		t.Fatal("the voters did not survive a claim")
	}
	legacy := CoordState{Confirmed: true}
	if !legacy.MayHaveCounted("node9") {
		t.Fatal("a state confirmed without known voters must let any node have counted")
	}
	// An owner of an earlier version confirms without naming voters: it
	// counts every copy, so no voters are known, then or later.
	var mixed CoordState
	mixed.apply(claimOf("node1", 11, 0))
	if !mixed.apply(confirmedWith()) || mixed.VotersKnown || !mixed.MayHaveCounted("node3") {
		t.Fatalf("a confirm without voters: %+v; want confirmed, voters unknown", mixed)
	}
	mixed.apply(confirmedWith("node1"))
	if mixed.VotersKnown || !mixed.MayHaveCounted("node3") {
		t.Fatal("voters named after a confirm without them became known")
	}
}

// TestShouldOfferFirstTransfer: before the first claim the leader and the
// preferred owner ask for the leadership to move to the preferred owner,
// and stop once the grace is over, when the leader claims itself.
func TestShouldOfferFirstTransfer(t *testing.T) {
	grace := time.Second
	cases := []struct {
		name         string
		self         string
		selfIsLeader bool
		ownerlessFor time.Duration
		want         bool
	}{
		{"other leader offers within the grace", "node2", true, grace / 2, true},
		{"preferred follower asks within the grace", "node1", false, grace / 2, true},
		{"preferred leader has nothing to move", "node1", true, 0, false},
		{"other follower does not ask", "node2", false, 0, false},
		{"other leader stops at the grace: it claims", "node2", true, grace, false},
		{"preferred follower stops at the grace", "node1", false, 2 * grace, false},
	}
	for _, tc := range cases {
		if got := shouldOfferFirstTransfer(tc.self, "node1", tc.selfIsLeader, tc.ownerlessFor, grace); got != tc.want {
			t.Errorf("%s: shouldOfferFirstTransfer = %v", tc.name, got)
		}
	}
}
