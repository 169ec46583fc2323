package replication

// The quorum frontier of a replicated queue partition: how far the
// partition's records stand on the number of copies its policy names.
//
// Terms (DESIGN.md, "Cluster"): E replicas, owner included; W the write
// threshold. Each replica reports two exclusive positions, written (the
// record reached the OS on that copy) and durable (an fdatasync covering it
// completed). A buffered queue counts written positions, a durable queue
// durable ones; nothing else ever mixes the two.
//
// The rule. A record at offset o is committed at a boundary when the owner
// and at least W-1 followers are past o at that boundary. So the frontier
// is the smaller of the owner's own position and the (W-1)-th highest
// follower position; followers above the owner never raise it above the
// owner's own progress, and a follower that does not count (another epoch,
// an earlier instance, latched, unreachable) contributes nothing. With
// fewer than W-1 counting followers nothing new is committed: Frontier
// reports ok false and the caller keeps the frontier it had, which never
// moves back.
//
// Invariant: the frontier returned for W copies never exceeds the W-th
// highest position among the owner and the counting followers.

import (
	"fmt"
	"slices"
)

// ReplicaProgress is one follower's reported positions, as the owner's
// follower link last heard them.
type ReplicaProgress struct {
	// Counts is false for a follower whose reports do not count toward the
	// quorum right now: it reported for another epoch or an earlier
	// instance, its log latched, or it is unreachable or catching up
	// through fetch.
	Counts      bool
	WrittenNext uint64
	DurableNext uint64
}

// Quorum is a partition's write threshold.
type Quorum struct {
	// Copies is W: how many copies, owner included, every confirm stands
	// on. 1 means the owner alone.
	Copies int
	// Written says the copies count at the written boundary (a buffered
	// queue); otherwise at the durable boundary.
	Written bool
}

// Frontier returns the offset below which every record is on Copies
// copies at the quorum's boundary, given the owner's own position at that
// boundary and the followers' reports; ok is false when fewer than
// Copies-1 followers count, so nothing new is committed.
func (q Quorum) Frontier(owner uint64, followers []ReplicaProgress) (frontier uint64, ok bool) {
	if q.Copies < 1 {
		panic(fmt.Sprintf("cluster: quorum of %d copies", q.Copies))
	}
	needed := q.Copies - 1
	if needed == 0 {
		return owner, true
	}
	var positions []uint64
	for _, follower := range followers {
		if !follower.Counts {
			continue
		}
		if q.Written {
			positions = append(positions, follower.WrittenNext)
		} else {
			positions = append(positions, follower.DurableNext)
		}
	}
	if len(positions) < needed {
		return 0, false
	}
	slices.Sort(positions)
	highest := positions[len(positions)-needed] // the (W-1)-th highest
	return min(owner, highest), true
}

// CountingCopies returns how many copies, the owner's included, the
// quorum can count now: 1 + the followers whose reports count.
func CountingCopies(followers []ReplicaProgress) int {
	copies := 1
	for _, follower := range followers {
		if follower.Counts {
			copies++
		}
	}
	return copies
}

// SealsNeeded is how many sealed replicas a recovery waits for, E-W+1:
// that many intersect every set of W copies a confirm stood on.
func SealsNeeded(replicas, copies int) int {
	if copies < 1 || copies > replicas {
		panic(fmt.Sprintf("cluster: %d copies of %d replicas", copies, replicas))
	}
	return replicas - copies + 1
}

// CountVoters applies the voter rule to a quorum (docs/cluster.md, "A copy
// earns its vote"): a copy counts toward the frontier only once the
// coordination shard records its node as a voter (recorded), so that a
// copy created empty on a node that was never a voter can be trusted to
// have lost nothing a confirm stood on. It returns the followers with
// Counts cleared for every node not recorded, whether the owner itself is
// recorded, and the nodes (owner first, then followers in no particular
// order) that count now but are not recorded yet: the owner records them before
// their copies count.
func CountVoters(owner string, followers map[string]ReplicaProgress, recorded func(node string) bool) (
	counted []ReplicaProgress, ownerCounts bool, unrecorded []string) {
	ownerCounts = recorded(owner)
	if !ownerCounts {
		unrecorded = append(unrecorded, owner)
	}
	counted = make([]ReplicaProgress, 0, len(followers))
	for node, progress := range followers {
		if progress.Counts && !recorded(node) {
			progress.Counts = false
			unrecorded = append(unrecorded, node)
		}
		counted = append(counted, progress)
	}
	return counted, ownerCounts, unrecorded
}
