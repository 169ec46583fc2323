package replication

// When an owner knows it is cut off (DESIGN.md, "Faults come in bunches"):
// its clients still reach it, its peers do not. It cannot confirm (its
// followers cannot hold new records), and a replica on the other side of
// the cut recovers the partition under a newer epoch; meanwhile the
// publishes it appended stay pending and its clients wait on it. So an
// owner steps down by itself, answering what it owes outcome_unknown and
// sending its clients elsewhere, once all of these have held together for
// CutOffAfter:
//
//   - it does not lead the partition's coordination shard (Raft's check
//     of quorum takes the leadership from a leader that hears no majority:
//     a cut-off owner loses it within an election);
//   - the copies that keep up with it (itself and each follower whose link
//     admits and is not stalled) are fewer than a majority of the replica
//     set: it cannot reach enough copies to matter to either side.
//
// A slow follower alone, or a lost follower of a queue that needs every
// copy, does not make an owner that still leads step down: the shard's
// leadership says a majority still hears it.

import "time"

// CutOffAfter is how long an owner must have been cut off before it
// steps down. Its followers count as not keeping up once they have not
// moved for the link's StallAfter (half a second), so the owner steps down
// after a second without progress on a majority, the same second of
// silence after which a replica on the other side replaces it: the cut
// costs its clients no longer on one side than on the other. It was a
// second on top of the stall; the class 13 trials then had the clients
// leave 1.5 s into the cut, behind a new owner that served at 0.75 s.
const CutOffAfter = 500 * time.Millisecond

// OwnerCutOff is the rule above as one decision: keepingUp counts the
// followers whose links admit and are not stalled, replicas is E, leads
// says the owner leads the coordination shard, and since is when the two
// conditions began to hold together (zero when they do not). It returns
// whether the owner steps down now, and the new since.
func OwnerCutOff(keepingUp, replicas int, leads bool, since, now time.Time) (stepDown bool, cutOffSince time.Time) {
	majority := replicas/2 + 1
	if leads || keepingUp+1 >= majority {
		return false, time.Time{}
	}
	if since.IsZero() {
		return false, now
	}
	return now.Sub(since) >= CutOffAfter, since
}
