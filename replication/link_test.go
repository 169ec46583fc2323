package replication

import "testing"

func ownerLog(first, written uint64, history ...HistoryEntry) OwnerLog {
	return OwnerLog{FirstOffset: first, Written: written, History: history}
}

func TestLinkProbeThenPush(t *testing.T) {
	link := NewLink("node2", 3, LinkLimits{WindowBytes: 100, PushBytes: 50, CatchUpRecords: 10})
	owner := ownerLog(0, 20, h(1, 0), h(3, 10))
	if link.Counts() {
		t.Fatal("an unreachable follower counts")
	}
	link.LinkUp()
	if start, previous := link.ProbeAt(owner); start != 20 || previous != 3 {
		t.Fatalf("probe at %d after epoch %d, want 20 after 3", start, previous)
	}
	if link.Counts() {
		t.Fatal("a follower counts before it answered the probe")
	}
	if !link.OnProgress(3, 77, 20, 20, owner) || link.State != LinkPushing || link.Next != 20 || !link.Counts() {
		t.Fatalf("after the probe's progress: %+v", link)
	}
	owner.Written = 30
	from, upTo, ok := link.NextPush(owner)
	if !ok || from != 20 || upTo != 30 {
		t.Fatalf("NextPush = %d, %d, %v", from, upTo, ok)
	}
	link.Pushed(20, 30, 60)
	owner.Written = 40
	link.Pushed(30, 40, 60)
	if _, _, ok := link.NextPush(ownerLog(0, 50, h(1, 0), h(3, 10))); ok {
		t.Fatal("pushed past a full window")
	}
	link.OnProgress(3, 77, 20, 30, owner)
	if link.InFlightBytes() != 60 || link.Progress().WrittenNext != 30 || link.Progress().DurableNext != 20 {
		t.Fatalf("after an ack of 30: in flight %d, progress %+v", link.InFlightBytes(), link.Progress())
	}
	// A report from another epoch or a restarted instance.
	if link.OnProgress(2, 77, 99, 99, owner) {
		t.Fatal("a report of another epoch moved the follower")
	}
	link.OnProgress(3, 78, 0, 0, owner)
	if link.State != LinkProbing || link.Counts() {
		t.Fatalf("a new instance still counts: %+v", link)
	}
}

func TestLinkRefusals(t *testing.T) {
	owner := ownerLog(0, 200, h(1, 0), h(3, 100))
	limits := LinkLimits{WindowBytes: 1 << 20, PushBytes: 1 << 10, CatchUpRecords: 50}
	cases := []struct {
		name    string
		refusal Refusal
		action  LinkAction
		state   LinkState
		next    uint64
	}{
		{"sealed at a newer epoch", Refusal{Epoch: 4, Reason: RefusedEpoch}, LinkStepDown, LinkStale, 0},
		{"latched", Refusal{Epoch: 3, Reason: RefusedLatched}, LinkWait, LinkLatched, 0},
		{"not hosted yet", Refusal{Epoch: 3, Reason: RefusedUnknown}, LinkWait, LinkProbing, 0},
		// A follower that says it is behind fetches, even when close: the
		// link waits for its reports rather than push into refusals.
		{"a little behind: it fetches", Refusal{Epoch: 3, Instance: 9, Reason: RefusedBehind, StagedNext: 180, DurableNext: 170,
			History: []HistoryEntry{h(1, 0), h(3, 100)}}, LinkWait, LinkCatchingUp, 0},
		{"far behind: it fetches", Refusal{Epoch: 3, Instance: 9, Reason: RefusedBehind, StagedNext: 40, DurableNext: 40,
			History: []HistoryEntry{h(1, 0)}}, LinkWait, LinkCatchingUp, 0},
		{"a divergent suffix of epoch 2", Refusal{Epoch: 3, Instance: 9, Reason: RefusedOffset, StagedNext: 130, DurableNext: 130,
			History: []HistoryEntry{h(1, 0), h(2, 100)}}, LinkPush, LinkPushing, 100},
	}
	for _, c := range cases {
		link := NewLink("node2", 3, limits)
		link.LinkUp()
		if action := link.OnRefused(c.refusal, owner); action != c.action || link.State != c.state ||
			(c.state == LinkPushing && link.Next != c.next) {
			t.Errorf("%s: action %d, state %s, next %d; want %d, %s, %d", c.name, action, link.State, link.Next,
				c.action, c.state, c.next)
		}
	}
	// A follower catching up is pushed to again once it is close.
	link := NewLink("node2", 3, limits)
	link.LinkUp()
	link.OnRefused(Refusal{Epoch: 3, Instance: 9, Reason: RefusedBehind, StagedNext: 40, DurableNext: 40,
		History: []HistoryEntry{h(1, 0)}}, owner)
	if !link.Counts() || link.Progress().DurableNext != 40 {
		t.Fatalf("a catching-up follower's durable prefix does not count: %+v", link.Progress())
	}
	link.OnProgress(3, 9, 120, 120, owner)
	if link.State != LinkCatchingUp {
		t.Fatalf("at 120 of 200 with a threshold of 50: %s", link.State)
	}
	link.OnProgress(3, 9, 160, 160, owner)
	if link.State != LinkPushing || link.Next != 160 {
		t.Fatalf("at 160 of 200: %s next %d", link.State, link.Next)
	}
}

func TestLinkDownStopsCounting(t *testing.T) {
	link := NewLink("node2", 3, DefaultLinkLimits)
	owner := ownerLog(0, 10, h(3, 0))
	link.LinkUp()
	link.OnProgress(3, 1, 10, 10, owner)
	link.LinkDown("connection reset")
	if link.Counts() || link.State != LinkUnreachable || link.Reason != "connection reset" {
		t.Fatalf("after the link went down: %+v", link)
	}
}

// The first progress after a probe changes the link's state (the follower
// now counts) even when its positions stay at 0: the caller must hear of it.
func TestLinkReportsTheAcceptedProbeEvenAtOffsetZero(t *testing.T) {
	link := NewLink("node2", 1, DefaultLinkLimits)
	link.LinkUp()
	owner := OwnerLog{History: []HistoryEntry{{Epoch: 1, FirstOffset: 0}}}
	if changed := link.OnProgress(1, 7, 0, 0, owner); !changed {
		t.Fatal("the accepted probe was not reported")
	}
	if !link.Progress().Counts {
		t.Fatalf("the follower does not count after its probe was accepted: %+v", link.Progress())
	}
	if changed := link.OnProgress(1, 7, 0, 0, owner); changed {
		t.Fatal("a repeated report with nothing new was reported")
	}
}
