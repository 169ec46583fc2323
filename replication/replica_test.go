package replication

import "testing"

func TestDecidePush(t *testing.T) {
	// A follower holding 0..120: epoch 1 from 0, epoch 2 from 90; fenced at 2.
	follower := FollowerLog{FirstOffset: 0, End: 120, History: []HistoryEntry{h(1, 0), h(2, 90)}, Fence: 2}
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
