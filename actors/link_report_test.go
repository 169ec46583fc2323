package actors

import (
	"strings"
	"testing"
	"time"
)

// A follower link's report older than linkReportStaleAfter says so in the
// replicas table: the link stopped reporting, and its last state is not
// the follower's state now.
func TestAStaleLinkReportSaysItIsStale(t *testing.T) {
	now := time.Unix(1000, 0)
	fresh := linkProgress{state: "in sync", at: now.Add(-linkReportStaleAfter / 2)}
	if got := fresh.stateAt(now); got != "in sync" {
		t.Fatalf("fresh report reads %q", got)
	}
	stale := linkProgress{state: "pushing, 10 records behind", at: now.Add(-3 * time.Second)}
	if got := stale.stateAt(now); !strings.HasPrefix(got, "no report for 3.0s") || !strings.Contains(got, "pushing, 10 records behind") {
		t.Fatalf("stale report reads %q", got)
	}
	if got := (linkProgress{state: "starting"}).stateAt(now); got != "starting" {
		t.Fatalf("a link that never reported reads %q", got)
	}
	// Only a fresh report admits, counts at the frontier, or keeps a
	// cut-off owner serving.
	if !fresh.freshAt(now) || stale.freshAt(now) || (linkProgress{admits: true}).freshAt(now) {
		t.Fatalf("freshAt: fresh %v, stale %v, never reported %v", fresh.freshAt(now), stale.freshAt(now),
			(linkProgress{admits: true}).freshAt(now))
	}
}
