package replication

import (
	"testing"
	"time"
)

// TestOwnerCutOff: an owner steps down once it has been without the
// shard's leadership and without a majority of copies keeping up for
// CutOffAfter; either one alone keeps it serving.
func TestOwnerCutOff(t *testing.T) {
	start := time.Unix(1000, 0)
	cases := []struct {
		name      string
		keepingUp int
		replicas  int
		leads     bool
		since     time.Time
		now       time.Time
		stepDown  bool
		sinceSet  bool
	}{
		{"leads, no follower keeps up", 0, 3, true, time.Time{}, start, false, false},
		{"does not lead, one follower of two keeps up", 1, 3, false, time.Time{}, start, false, false},
		{"cut off: the clock starts", 0, 3, false, time.Time{}, start, false, true},
		{"cut off for half the time", 0, 3, false, start, start.Add(CutOffAfter / 2), false, true},
		{"cut off for the whole time", 0, 3, false, start, start.Add(CutOffAfter), true, true},
		{"five replicas, one follower keeps up", 1, 5, false, start, start.Add(2 * CutOffAfter), true, true},
		{"five replicas, two followers keep up", 2, 5, false, start, start.Add(2 * CutOffAfter), false, false},
		{"a single copy is never cut off", 0, 1, false, start, start.Add(2 * CutOffAfter), false, false},
	}
	for _, c := range cases {
		stepDown, since := OwnerCutOff(c.keepingUp, c.replicas, c.leads, c.since, c.now)
		if stepDown != c.stepDown || !since.IsZero() != c.sinceSet {
			t.Errorf("%s: OwnerCutOff = %v, since %v; want %v, set %v", c.name, stepDown, since, c.stepDown, c.sinceSet)
		}
	}
}
