package replication

import "testing"

func TestQuorumFrontier(t *testing.T) {
	counting := func(written, durable uint64) ReplicaProgress {
		return ReplicaProgress{Counts: true, WrittenNext: written, DurableNext: durable}
	}
	cases := []struct {
		name      string
		quorum    Quorum
		owner     uint64
		followers []ReplicaProgress
		want      uint64
		ok        bool
	}{
		{"owner alone", Quorum{Copies: 1}, 40, nil, 40, true},
		{"owner alone ignores followers", Quorum{Copies: 1}, 40, []ReplicaProgress{counting(90, 90)}, 40, true},
		{"majority of three, durable: second highest is the follower's", Quorum{Copies: 2}, 50,
			[]ReplicaProgress{counting(60, 30), counting(70, 45)}, 45, true},
		{"majority of three, written", Quorum{Copies: 2, Written: true}, 50,
			[]ReplicaProgress{counting(60, 30), counting(48, 45)}, 50, true},
		{"followers above the owner do not raise it", Quorum{Copies: 2}, 10,
			[]ReplicaProgress{counting(99, 99), counting(98, 98)}, 10, true},
		{"followers below the owner hold it back", Quorum{Copies: 3}, 100,
			[]ReplicaProgress{counting(80, 80), counting(70, 60)}, 60, true},
		{"all three: the lowest follower", Quorum{Copies: 3, Written: true}, 100,
			[]ReplicaProgress{counting(80, 10), counting(90, 10)}, 80, true},
		{"a follower that does not count is ignored", Quorum{Copies: 2}, 100,
			[]ReplicaProgress{{Counts: false, WrittenNext: 100, DurableNext: 100}, counting(20, 20)}, 20, true},
		{"too few counting followers commit nothing", Quorum{Copies: 3}, 100,
			[]ReplicaProgress{{Counts: false, DurableNext: 100}, counting(100, 100)}, 0, false},
		{"no followers at all", Quorum{Copies: 2}, 100, nil, 0, false},
	}
	for _, c := range cases {
		got, ok := c.quorum.Frontier(c.owner, c.followers)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Frontier = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// A restarted follower is a new instance: the link marks its old reports
// as not counting until the new instance reports, so the frontier cannot
// stand on a copy the restart may have lost.
func TestQuorumFollowerRestartStopsCounting(t *testing.T) {
	quorum := Quorum{Copies: 2}
	before := []ReplicaProgress{{Counts: true, DurableNext: 50}, {Counts: true, DurableNext: 40}}
	if frontier, _ := quorum.Frontier(60, before); frontier != 50 {
		t.Fatalf("before the restart: %d, want 50", frontier)
	}
	// The follower at 50 restarted: its reports no longer count; its new
	// instance reports 30 (a power loss cost it its unsynced tail).
	after := []ReplicaProgress{{Counts: true, DurableNext: 30}, {Counts: true, DurableNext: 40}}
	if frontier, _ := quorum.Frontier(60, after); frontier != 40 {
		t.Fatalf("after the restart: %d, want 40", frontier)
	}
}

func TestSealsNeeded(t *testing.T) {
	for _, c := range []struct{ replicas, copies, want int }{{3, 2, 2}, {3, 3, 1}, {3, 1, 3}, {5, 3, 3}, {1, 1, 1}} {
		if got := SealsNeeded(c.replicas, c.copies); got != c.want {
			t.Errorf("SealsNeeded(%d, %d) = %d, want %d", c.replicas, c.copies, got, c.want)
		}
	}
}

// TestCountVoters: only recorded voters count; the owner and the counting
// followers that are not recorded are named, a follower that does not
// count is not.
func TestCountVoters(t *testing.T) {
	followers := map[string]ReplicaProgress{
		"node2": {Counts: true, WrittenNext: 10, DurableNext: 10},
		"node3": {Counts: true, WrittenNext: 7, DurableNext: 7},
		"node4": {Counts: false, WrittenNext: 3, DurableNext: 3},
	}
	recordedSet := map[string]bool{"node1": true, "node2": true}
	recorded := func(node string) bool { return recordedSet[node] }
	counted, ownerCounts, unrecorded := CountVoters("node1", followers, recorded)
	if !ownerCounts {
		t.Fatal("the recorded owner does not count")
	}
	if len(unrecorded) != 1 || unrecorded[0] != "node3" {
		t.Fatalf("unrecorded = %v, want [node3]", unrecorded)
	}
	if CountingCopies(counted) != 2 {
		t.Fatalf("counting copies = %d, want 2 (the owner and node2)", CountingCopies(counted))
	}
	if frontier, ok := (Quorum{Copies: 3}).Frontier(12, counted); ok {
		t.Fatalf("W=3 reached a frontier (%d) with one recorded follower", frontier)
	}
	if frontier, ok := (Quorum{Copies: 2}).Frontier(12, counted); !ok || frontier != 10 {
		t.Fatalf("W=2 frontier = %d, %v; want 10 from node2", frontier, ok)
	}
	_, ownerCounts, unrecorded = CountVoters("node5", followers, recorded)
	if ownerCounts || len(unrecorded) != 2 || unrecorded[0] != "node5" || unrecorded[1] != "node3" { // node4 does not count
		t.Fatalf("an unrecorded owner: counts %v, unrecorded %v; want false, [node5 node3]", ownerCounts, unrecorded)
	}
}
