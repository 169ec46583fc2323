package cluster

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/vmihailenco/msgpack/v5"
)

func TestBecomeOwnerIsCompareAndSet(t *testing.T) {
	var state CoordState
	if !state.becomeOwner(becomeOwnerCommand{Owner: "node1", ExpectEpoch: 0}) {
		t.Fatal("first claim refused")
	}
	if state.becomeOwner(becomeOwnerCommand{Owner: "node2", ExpectEpoch: 0}) {
		t.Fatal("a second claim of epoch 1 won")
	}
	if state.becomeOwner(becomeOwnerCommand{Owner: "", ExpectEpoch: 1}) {
		t.Fatal("a claim without an owner won")
	}
	if !state.becomeOwner(becomeOwnerCommand{Owner: "node2", ExpectEpoch: 1, FirstOffset: 42}) {
		t.Fatal("claim of epoch 2 refused")
	}
	want := CoordState{Epoch: 2, Owner: "node2", History: []HistoryEntry{{Epoch: 1, FirstOffset: 0}, {Epoch: 2, FirstOffset: 42}}}
	if !reflect.DeepEqual(state, want) {
		t.Fatalf("state = %+v", state)
	}
}

func TestShouldClaim(t *testing.T) {
	grace := time.Second
	owned := CoordState{Epoch: 1, Owner: "node1"}
	cases := []struct {
		name         string
		state        CoordState
		self         string
		selfIsLeader bool
		ownerlessFor time.Duration
		want         bool
	}{
		{"preferred claims at once", CoordState{}, "node1", false, 0, true},
		{"other waits", CoordState{}, "node2", true, grace / 2, false},
		{"other leader claims after grace", CoordState{}, "node2", true, grace, true},
		{"other follower never claims", CoordState{}, "node2", false, time.Hour, false},
		{"owned is never claimed", owned, "node1", true, time.Hour, false},
	}
	for _, tc := range cases {
		if got := shouldClaim(tc.state, tc.self, "node1", tc.selfIsLeader, tc.ownerlessFor, grace); got != tc.want {
			t.Errorf("%s: shouldClaim = %v", tc.name, got)
		}
	}
}

func TestCoordMachine(t *testing.T) {
	changes := 0
	machine := newCoordMachine(func() { changes++ })(FirstCoordinationShardID, 1).(*coordMachine)
	apply := func(claim becomeOwnerCommand) uint64 {
		data, err := msgpack.Marshal(&claim)
		if err != nil {
			t.Fatal(err)
		}
		result, err := machine.Update(sm.Entry{Cmd: data})
		if err != nil {
			t.Fatal(err)
		}
		return result.Value
	}
	if apply(becomeOwnerCommand{Owner: "node3"}) != claimAccepted || apply(becomeOwnerCommand{Owner: "node1"}) != claimRefused {
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
	if state := value.(CoordState); state.Owner != "node3" || state.Epoch != 1 || len(state.History) != 1 {
		t.Fatalf("recovered = %+v", state)
	}
}
