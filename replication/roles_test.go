package replication

import (
	"slices"
	"testing"
)

// A fenced copy never owns, recovers or keeps the leadership, whatever its
// part; a healthy one keeps its part.
func TestDecideRole(t *testing.T) {
	cases := []struct {
		standing CopyStanding
		want     RoleDecision
	}{
		{CopyStanding{Role: CopyOwner, Leads: true}, RoleDecision{MayLead: true}},
		{CopyStanding{Role: CopyReplica}, RoleDecision{MayLead: true}},
		{CopyStanding{Role: CopyOwner, Fenced: true, Leads: true}, RoleDecision{StepDown: true, HandOffLeadership: true}},
		{CopyStanding{Role: CopyOwner, Fenced: true}, RoleDecision{StepDown: true}},
		{CopyStanding{Role: CopyRecovering, Fenced: true, Leads: true}, RoleDecision{StepDown: true, HandOffLeadership: true}},
		{CopyStanding{Role: CopyReplica, Fenced: true, Leads: true}, RoleDecision{HandOffLeadership: true}},
		{CopyStanding{Role: CopyReplica, Fenced: true}, RoleDecision{}},
	}
	for _, c := range cases {
		if got := DecideRole(c.standing); got != c.want {
			t.Errorf("DecideRole(%+v) = %+v, want %+v", c.standing, got, c.want)
		}
	}
}

// Successors asks a reachable, counted, further copy first, and
// keeps the placement order among equals.
func TestSuccessors(t *testing.T) {
	counted := func(durable uint64) ReplicaProgress { return ReplicaProgress{Counts: true, DurableNext: durable} }
	cases := []struct {
		name       string
		candidates []Successor
		want       []string
	}{
		{"placement order among equals", []Successor{{Node: "b", Reachable: true}, {Node: "c", Reachable: true}},
			[]string{"b", "c"}},
		{"reachable first", []Successor{{Node: "b", Progress: counted(90)}, {Node: "c", Reachable: true}},
			[]string{"c", "b"}},
		{"counted before uncounted", []Successor{
			{Node: "b", Reachable: true, Progress: ReplicaProgress{DurableNext: 90}}, {Node: "c", Reachable: true, Progress: counted(10)}},
			[]string{"c", "b"}},
		{"the furthest durable first", []Successor{
			{Node: "b", Reachable: true, Progress: counted(10)}, {Node: "c", Reachable: true, Progress: counted(20)}},
			[]string{"c", "b"}},
		{"none", nil, []string{}},
	}
	for _, c := range cases {
		if got := Successors(c.candidates); !slices.Equal(got, c.want) {
			t.Errorf("%s: Successors = %v, want %v", c.name, got, c.want)
		}
	}
}
