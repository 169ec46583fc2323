package replication

import "testing"

func TestDecidePush(t *testing.T) {
	// A follower holding 0..120: epoch 1 from 0, epoch 2 from 90; fenced at 2.
	follower := FollowerLog{FirstOffset: 0, End: 120, History: []HistoryEntry{h(1, 0), h(2, 90)}, Fence: 2,
		EpochActive: true}
	inactive := follower
	inactive.EpochActive = false
	fetching, pageInFlight := follower, follower
	fetching.CatchingUp = true
	pageInFlight.CatchingUp, pageInFlight.PageInFlight = true, true
	cases := []struct {
		name string
		log  FollowerLog
		push PushHeader
		want PushAction
	}{
		{"next records of the same epoch", follower, PushHeader{Epoch: 2, StartOffset: 120, PreviousEpoch: 2}, PushAppend},
		{"a keepalive at the end", follower, PushHeader{Epoch: 2, StartOffset: 120, PreviousEpoch: 2}, PushAppend},
		{"an older epoch", follower, PushHeader{Epoch: 1, StartOffset: 120, PreviousEpoch: 2}, PushRefuseEpoch},
		{"past the end", follower, PushHeader{Epoch: 2, StartOffset: 130, PreviousEpoch: 2}, PushBehind},
		{"previous epoch disagrees at the end", follower, PushHeader{Epoch: 3, StartOffset: 120, PreviousEpoch: 3}, PushRefuseOffset},
		{"a new epoch cuts a divergent suffix", follower, PushHeader{Epoch: 3, StartOffset: 100, PreviousEpoch: 2}, PushCutThenAppend},
		{"a new epoch cutting back into epoch 1", follower, PushHeader{Epoch: 3, StartOffset: 90, PreviousEpoch: 1}, PushCutThenAppend},
		{"the same epoch never cuts", follower, PushHeader{Epoch: 2, StartOffset: 100, PreviousEpoch: 2}, PushRefuseOffset},
		{"a cut whose previous record disagrees", follower, PushHeader{Epoch: 3, StartOffset: 100, PreviousEpoch: 1}, PushRefuseOffset},
		{"into an empty log", FollowerLog{}, PushHeader{Epoch: 1, StartOffset: 0}, PushAppend},
		{"an empty log is behind", FollowerLog{}, PushHeader{Epoch: 1, StartOffset: 5, PreviousEpoch: 1}, PushBehind},
		{"at the first offset of a log restarted there", FollowerLog{FirstOffset: 50, End: 50, Fence: 2},
			PushHeader{Epoch: 2, StartOffset: 50, PreviousEpoch: 2}, PushAppend},
		{"below the first offset", FollowerLog{FirstOffset: 50, End: 60, History: []HistoryEntry{h(2, 50)}, Fence: 2},
			PushHeader{Epoch: 3, StartOffset: 40, PreviousEpoch: 2}, PushRefuseOffset},
		// A cut destroys records: it waits until the follower sees the
		// push's epoch activated in the coordination shard.
		{"a cut before the epoch is activated waits", inactive, PushHeader{Epoch: 3, StartOffset: 100, PreviousEpoch: 2}, PushWaitForActivation},
		{"appending needs no activation", inactive, PushHeader{Epoch: 2, StartOffset: 120, PreviousEpoch: 2}, PushAppend},
		// While a catch-up fetch runs.
		{"a cut ends a catch-up", fetching, PushHeader{Epoch: 3, StartOffset: 100, PreviousEpoch: 2}, PushCutThenAppend},
		{"a cut ends a catch-up with a page in flight", pageInFlight, PushHeader{Epoch: 3, StartOffset: 100, PreviousEpoch: 2}, PushCutThenAppend},
		{"a push at the end with a page in flight waits for the page", pageInFlight, PushHeader{Epoch: 2, StartOffset: 120, PreviousEpoch: 2}, PushBehind},
		{"a push at the end with no page in flight ends the catch-up", fetching, PushHeader{Epoch: 2, StartOffset: 120, PreviousEpoch: 2}, PushAppend},
		{"a push past the end while fetching", fetching, PushHeader{Epoch: 2, StartOffset: 130, PreviousEpoch: 2}, PushBehind},
		{"an old push below the end while fetching", fetching, PushHeader{Epoch: 2, StartOffset: 100, PreviousEpoch: 2}, PushBehind},
		{"a disagreeing push while fetching", fetching, PushHeader{Epoch: 3, StartOffset: 120, PreviousEpoch: 3}, PushBehind},
		// A copy that opened empty may have lost its fence: only the
		// epoch its view shows active may push to it.
		// A page showed the log diverges below its end: the owner must
		// find where, so the follower refuses with its history.
		{"a diverged log refuses a push past its end", FollowerLog{End: 120, History: []HistoryEntry{h(2, 90)}, Fence: 2,
			Diverged: true}, PushHeader{Epoch: 3, StartOffset: 200, PreviousEpoch: 3}, PushRefuseOffset},
		{"an incomplete copy waits for a deposed owner", FollowerLog{Incomplete: true},
			PushHeader{Epoch: 1, StartOffset: 0}, PushWaitForActivation},
		{"an incomplete copy takes the active epoch's pushes", FollowerLog{Incomplete: true, EpochActive: true},
			PushHeader{Epoch: 2, StartOffset: 0}, PushAppend},
		{"an incomplete copy fetches from the active epoch's owner", FollowerLog{Incomplete: true, EpochActive: true},
			PushHeader{Epoch: 2, StartOffset: 40, PreviousEpoch: 2}, PushBehind},
	}
	for _, c := range cases {
		if got := DecidePush(c.log, c.push); got != c.want {
			t.Errorf("%s: DecidePush = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestResumePoint(t *testing.T) {
	owner := report("owner", 0, 150, h(1, 0), h(3, 110))
	for _, c := range []struct {
		name     string
		follower SealReport
		resume   uint64
		cut      bool
	}{
		{"a prefix", report("f", 0, 80, h(1, 0)), 80, false},
		{"caught up", report("f", 0, 150, h(1, 0), h(3, 110)), 150, false},
		{"an old epoch went on", report("f", 0, 130, h(1, 0)), 110, true},
		{"a replaced epoch", report("f", 0, 125, h(1, 0), h(2, 100)), 100, true},
	} {
		resume, cut := ResumePoint(owner, c.follower)
		if resume != c.resume || cut != c.cut {
			t.Errorf("%s: ResumePoint = %d, %v; want %d, %v", c.name, resume, cut, c.resume, c.cut)
		}
	}
}

// TestPageAgrees is the log-matching check of a fetched page: the wedge
// it prevents is a follower that kept an unconfirmed suffix of an older
// epoch (21841..21895 of epoch 3) and fetched the new owner's records
// (epoch 4 from 21841) from its own end, leaving a log that agreed with
// no owner and refused every push after.
func TestPageAgrees(t *testing.T) {
	follower := FollowerLog{FirstOffset: 0, End: 21895, History: []HistoryEntry{h(1, 0), h(3, 20000)}, Fence: 4}
	cases := []struct {
		name          string
		from          uint64
		previousEpoch uint64
		want          bool
	}{
		{"the source's record before is of the same epoch", 21895, 3, true},
		{"the source holds a newer epoch there: a divergent suffix", 21895, 4, false},
		{"not at the follower's end", 21800, 3, false},
		{"past the follower's end", 21900, 3, false},
	}
	for _, c := range cases {
		if got := PageAgrees(follower, c.from, c.previousEpoch); got != c.want {
			t.Errorf("%s: PageAgrees(%d, %d) = %v, want %v", c.name, c.from, c.previousEpoch, got, c.want)
		}
	}
	if !PageAgrees(FollowerLog{}, 0, 0) {
		t.Error("a first page into an empty log does not agree")
	}
}
