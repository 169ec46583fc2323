package replication

import (
	"strings"
	"testing"
	"time"
)

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

// TestLinkSaysWhenItIsBehindOrStalled is the truth of a link's state: a
// follower behind the owner is never "in sync", and one that has not
// moved for StallAfter while the owner is ahead says it is stalled,
// stops counting toward admission after AdmitStallMax, and starts over
// once it moves.
func TestLinkSaysWhenItIsBehindOrStalled(t *testing.T) {
	limits := LinkLimits{WindowBytes: 1 << 20, PushBytes: 1 << 10, CatchUpRecords: 50,
		StallAfter: time.Second, AdmitStallMax: 5 * time.Second, RetentionHoldMax: time.Minute, ReprobeAfter: 2 * time.Second}
	link := NewLink("node2", 3, limits)
	owner := ownerLog(0, 100, h(3, 0))
	start := time.Unix(1000, 0)
	link.LinkUp()
	link.OnProgress(3, 7, 100, 100, owner)
	if health := link.Observe(owner, start, false); health.Text != "in sync" || !health.Admits || health.LagRecords != 0 {
		t.Fatalf("a level follower: %+v", health)
	}
	owner.Written = 140
	health := link.Observe(owner, start.Add(200*time.Millisecond), false)
	if health.Text != "pushing, 40 records behind" || health.Stalled || !health.Admits {
		t.Fatalf("a follower 40 behind for 200 ms: %+v", health)
	}
	health = link.Observe(owner, start.Add(1300*time.Millisecond), false)
	if !health.Stalled || !health.Admits || health.LagRecords != 40 {
		t.Fatalf("a follower that has not moved for 1.3 s: %+v", health)
	}
	if health := link.Observe(owner, start.Add(1900*time.Millisecond), false); link.ShouldReprobe(health, start.Add(1900*time.Millisecond)) {
		t.Fatalf("a link stalled for 1.9 s is probed again before ReprobeAfter: %+v", health)
	}
	health = link.Observe(owner, start.Add(6300*time.Millisecond), false)
	if health.Admits || !health.Stalled {
		t.Fatalf("a follower stalled for 6.3 s still admits: %+v", health)
	}
	if !link.ShouldReprobe(health, start.Add(6300*time.Millisecond)) {
		t.Fatalf("a link stalled for 6.3 s is not probed again: %+v", health)
	}
	// It moves: the stall clock starts over.
	link.OnProgress(3, 7, 120, 120, owner)
	if health := link.Observe(owner, start.Add(6400*time.Millisecond), false); health.Stalled || !health.Admits ||
		health.LagRecords != 20 {
		t.Fatalf("a follower that moved: %+v", health)
	}
	// The written boundary counts the written position (a buffered queue).
	link.OnProgress(3, 7, 120, 140, owner)
	if health := link.Observe(owner, start.Add(6500*time.Millisecond), true); health.Text != "in sync" {
		t.Fatalf("a buffered follower written to the end: %+v", health)
	}
	if health := link.Observe(owner, start.Add(6500*time.Millisecond), false); health.LagRecords != 20 {
		t.Fatalf("a durable follower 20 records short of durable: %+v", health)
	}
}

// TestLinkCatchingUpAdmits: a follower fetching what it lacks counts
// toward the frontier (its positions are real) and toward admission, and
// says it is catching up.
func TestLinkCatchingUpAdmits(t *testing.T) {
	link := NewLink("node2", 3, DefaultLinkLimits)
	owner := ownerLog(0, 200000, h(3, 0))
	link.LinkUp()
	if action := link.OnRefused(Refusal{Epoch: 3, Instance: 7, Reason: RefusedBehind, StagedNext: 10, DurableNext: 10,
		History: []HistoryEntry{h(3, 0)}}, owner); action != LinkWait || link.State != LinkCatchingUp {
		t.Fatalf("after a behind refusal: action %d, %+v", action, link)
	}
	health := link.Observe(owner, time.Unix(1000, 0), false)
	if !link.Counts() || !health.Admits || health.Text != "catching up, 199990 records behind (the follower fetches from 10)" {
		t.Fatalf("a catching-up follower: counts %v, %+v", link.Counts(), health)
	}
}

// TestLinkRetentionHold: a counting follower holds retention at its
// durable position; one that stopped counting holds it at its last one for
// RetentionHoldMax, then no longer.
func TestLinkRetentionHold(t *testing.T) {
	limits := DefaultLinkLimits
	limits.RetentionHoldMax = time.Minute
	link := NewLink("node2", 3, limits)
	owner := ownerLog(0, 100, h(3, 0))
	start := time.Unix(1000, 0)
	link.LinkUp()
	link.OnProgress(3, 7, 80, 90, owner)
	link.Observe(owner, start, false)
	if position, holds := link.RetentionHold(start); !holds || position != 80 {
		t.Fatalf("a counting follower holds %d, %v", position, holds)
	}
	link.LinkDown("peer link down")
	link.Observe(owner, start.Add(time.Second), false)
	if position, holds := link.RetentionHold(start.Add(30 * time.Second)); !holds || position != 80 {
		t.Fatalf("a follower down for 29 s holds %d, %v", position, holds)
	}
	if _, holds := link.RetentionHold(start.Add(62 * time.Second)); holds {
		t.Fatal("a follower down for 61 s still holds retention")
	}
	link.LinkUp()
	link.OnProgress(3, 8, 85, 85, owner)
	link.Observe(owner, start.Add(70*time.Second), false)
	if position, holds := link.RetentionHold(start.Add(70 * time.Second)); !holds || position != 85 {
		t.Fatalf("a follower back holds %d, %v", position, holds)
	}
}

// A follower below the owner's first retained offset (its copy came back
// empty after the owner compacted) is left probing and counts for nothing;
// once it has restarted its log at the owner's first offset with the
// owner's history below it (a snapshot catch-up), its next refusal starts
// the catch-up, and its progress brings it back to pushing.
func TestLinkFollowerBelowTheOwnersRetentionResumesAfterItsRebase(t *testing.T) {
	limits := LinkLimits{WindowBytes: 1 << 20, PushBytes: 1 << 10, CatchUpRecords: 50}
	for _, c := range []struct {
		name     string
		owner    OwnerLog
		rebased  []HistoryEntry // the follower's history after its rebase at 100
		resumeAt uint64
	}{
		{"an epoch that started below the base", ownerLog(100, 300, h(1, 0), h(3, 90)), []HistoryEntry{h(1, 0), h(3, 90)}, 100},
		{"an epoch that starts at the base", ownerLog(100, 300, h(1, 0), h(3, 100)), []HistoryEntry{h(1, 0)}, 100},
	} {
		link := NewLink("node2", 3, limits)
		link.LinkUp()
		empty := Refusal{Epoch: 3, Instance: 9, Reason: RefusedBehind}
		if action := link.OnRefused(empty, c.owner); action != LinkWait || link.State != LinkProbing || link.Counts() {
			t.Fatalf("%s: an empty follower below the retention: action %d, state %s, counts %v", c.name, action,
				link.State, link.Counts())
		}
		if !strings.Contains(link.Reason, "snapshot") {
			t.Errorf("%s: the reason does not say how it catches up: %q", c.name, link.Reason)
		}
		rebased := Refusal{Epoch: 3, Instance: 9, Reason: RefusedBehind, StagedNext: 100, DurableNext: 100, History: c.rebased}
		if action := link.OnRefused(rebased, c.owner); action != LinkWait || link.State != LinkCatchingUp || !link.Counts() ||
			link.Progress().DurableNext != c.resumeAt {
			t.Fatalf("%s: after the rebase: action %d, state %s, progress %+v", c.name, action, link.State, link.Progress())
		}
		link.OnProgress(3, 9, 260, 260, c.owner)
		if link.State != LinkPushing || link.Next != 260 {
			t.Fatalf("%s: at 260 of 300 with a threshold of 50: %s, next %d", c.name, link.State, link.Next)
		}
	}
}

// TestLinkGoingRoundWithoutProgressIsStalled: a follower that answers
// every probe and then refuses the next push, its log never growing, goes
// round probing and pushing every 100 ms. Each time round it counts for a
// moment at the same position; that is no progress, so the link is stalled
// once StallAfter of counting has passed, and a cut-off owner stops
// counting it as keeping up. (Seen in the owner-cut class: the stall clock
// started over at every probe, so a link that could not make progress
// never said so, and a cut-off owner went on serving for the whole cut.)
func TestLinkGoingRoundWithoutProgressIsStalled(t *testing.T) {
	limits := DefaultLinkLimits
	link := NewLink("node2", 3, limits)
	owner := ownerLog(0, 100, h(3, 0))
	start := time.Unix(1000, 0)
	link.LinkUp()
	link.OnProgress(3, 7, 100, 100, owner)
	link.Observe(owner, start, false)
	stalledAt := time.Duration(-1)
	for step := 1; step <= 20; step++ {
		now := start.Add(time.Duration(step) * 50 * time.Millisecond)
		owner.Written += 10
		if step%2 == 1 {
			link.OnRefused(Refusal{Epoch: 3, Instance: 7, Reason: RefusedUnknown, Message: "waiting to see epoch 3 activated"}, owner)
			link.Observe(owner, now, false)
			link.LinkUp()
		} else {
			link.OnProgress(3, 7, 100, 100, owner)
		}
		health := link.Observe(owner, now, false)
		if health.Stalled && stalledAt < 0 {
			stalledAt = now.Sub(start)
		}
		if link.Counts() && now.Sub(start) >= limits.StallAfter+100*time.Millisecond && !health.Stalled {
			t.Fatalf("step %d, %v after the last progress: a follower that has not grown is not stalled: %+v",
				step, now.Sub(start), health)
		}
	}
	if stalledAt < 0 || stalledAt > limits.StallAfter+100*time.Millisecond {
		t.Fatalf("stalled first at %v, want within %v", stalledAt, limits.StallAfter+100*time.Millisecond)
	}
	// A real move starts the clock over.
	link.OnProgress(3, 7, 150, 150, owner)
	if health := link.Observe(owner, start.Add(1100*time.Millisecond), false); health.Stalled {
		t.Fatalf("a follower that grew is still stalled: %+v", health)
	}
}

// TestLinkReprobesAtMostOncePerReprobeAfter: the stall clock does not
// start over at a reprobe, so a link back to counting after one waits
// ReprobeAfter before the next.
func TestLinkReprobesAtMostOncePerReprobeAfter(t *testing.T) {
	link := NewLink("node2", 3, DefaultLinkLimits)
	owner := ownerLog(0, 100, h(3, 0))
	start := time.Unix(1000, 0)
	link.LinkUp()
	link.OnProgress(3, 7, 100, 100, owner)
	link.Observe(owner, start, false)
	owner.Written = 200
	at := start.Add(2500 * time.Millisecond)
	health := link.Observe(owner, at, false)
	if !link.ShouldReprobe(health, at) {
		t.Fatalf("a link stalled for 2.5 s is not probed again: %+v", health)
	}
	link.LinkUp()
	link.Observe(owner, at, false)
	link.OnProgress(3, 7, 100, 100, owner)
	at = at.Add(100 * time.Millisecond)
	health = link.Observe(owner, at, false)
	if !health.Stalled {
		t.Fatalf("back at the same position after a reprobe, the link is not stalled: %+v", health)
	}
	if link.ShouldReprobe(health, at) {
		t.Fatal("a link probed again 100 ms after its last reprobe")
	}
	at = at.Add(DefaultLinkLimits.ReprobeAfter)
	if !link.ShouldReprobe(link.Observe(owner, at, false), at) {
		t.Fatal("a link still stalled ReprobeAfter after its reprobe is not probed again")
	}
}

// TestLinkARepeatedRefusalDoesNotRestartThePushes: a follower refuses
// every push of a window that no longer fits, each with the same account
// of its log. The first refusal restarts the pushes from the resume point;
// the repeats, refusals of pushes sent before the restart, leave the new
// pushes in flight and the counted position alone. A refusal that says
// something new restarts again. (Seen in the owner-cut class: each repeat
// pushed the window again, 4,005 refusals in 5 s, and the follower's
// counted position was dragged back to the resume point each time.)
func TestLinkARepeatedRefusalDoesNotRestartThePushes(t *testing.T) {
	owner := ownerLog(0, 200, h(1, 0), h(3, 100))
	link := NewLink("node2", 3, LinkLimits{WindowBytes: 1 << 20, PushBytes: 1 << 10, CatchUpRecords: 500})
	link.LinkUp()
	refusal := Refusal{Epoch: 3, Instance: 9, Reason: RefusedOffset, StagedNext: 150, DurableNext: 150,
		History: []HistoryEntry{h(1, 0), h(3, 100)}}
	if action := link.OnRefused(refusal, owner); action != LinkPush || link.Next != 150 || link.State != LinkPushing {
		t.Fatalf("the first refusal: action %d, %+v", action, link)
	}
	link.Pushed(150, 180, 300)
	link.OnProgress(3, 9, 160, 170, owner)
	if action := link.OnRefused(refusal, owner); action != LinkWait {
		t.Fatalf("a repeat of the refusal restarted the pushes: action %d", action)
	}
	if link.Next != 180 || link.InFlightBytes() != 300 || link.Progress().WrittenNext != 170 || link.Progress().DurableNext != 160 {
		t.Fatalf("a repeat of the refusal changed the link: next %d, in flight %d, progress %+v",
			link.Next, link.InFlightBytes(), link.Progress())
	}
	moved := refusal
	moved.StagedNext, moved.DurableNext = 175, 170
	if action := link.OnRefused(moved, owner); action != LinkPush || link.Next != 175 || link.InFlightBytes() != 0 {
		t.Fatalf("a refusal with a new account: action %d, next %d, in flight %d", action, link.Next, link.InFlightBytes())
	}
	// After a probe the same account is news again.
	link.LinkUp()
	if action := link.OnRefused(moved, owner); action != LinkPush || link.State != LinkPushing {
		t.Fatalf("the first refusal after a probe: action %d, %+v", action, link)
	}
}
