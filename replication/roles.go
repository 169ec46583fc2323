package replication

// What a copy of a partition may be, as one plain decision over what it
// knows of itself: whether its storage failed, what part it plays now and
// whether it leads the partition's coordination shard.
//
// A copy whose log latched after a storage failure, or whose queue failed
// to open, is fenced: it can neither append nor sync, so it cannot confirm
// what it owns, nor seal itself for a recovery (a seal syncs first, then
// records the fence durably). The rule: a fenced copy must not own,
// recover or keep the coordination leadership.
//
//   - An owner or a recovering copy that is fenced steps down at once: it
//     stops its follower links (their keepalives would tell the replicas it
//     is alive, and they would give the leadership back to it), stops its
//     recovery, and answers its clients not_owner so they go elsewhere.
//   - A fenced copy that leads the coordination shard hands the leadership
//     to a healthy replica, and hands it on again whenever it finds itself
//     leading, rather than recover: only a replica that can seal may claim
//     the next epoch.
//   - A fenced copy that does not lead waits, a replica that refuses
//     pushes and seals, until it is reopened on a working disk.
//   - A copy that is not fenced keeps its part; the usual rules decide.
//
// Successors orders the replicas a fenced copy hands the leadership to:
// reachable ones first, then those whose reports counted toward the
// quorum (a latched or catching-up follower does not count), then the
// furthest durable, and the placement order last, so the copy most likely
// to recover at once is asked first and every reachable one in turn.

import "slices"

// CopyRole is the part a copy plays in its partition.
type CopyRole uint8

// Copy roles.
const (
	CopyReplica CopyRole = iota + 1
	CopyRecovering
	CopyOwner
)

func (r CopyRole) String() string {
	switch r {
	case CopyReplica:
		return "replica"
	case CopyRecovering:
		return "recovering"
	case CopyOwner:
		return "owner"
	}
	return "copy-role(?)"
}

// CopyStanding is what a copy knows of itself when it decides.
type CopyStanding struct {
	Role CopyRole
	// Fenced says its log latched after a storage failure or its queue
	// failed to open.
	Fenced bool
	// Leads says it leads the partition's coordination shard.
	Leads bool
}

// RoleDecision is what a copy does.
type RoleDecision struct {
	// StepDown: stop owning or recovering now.
	StepDown bool
	// HandOffLeadership: transfer the coordination leadership to a healthy
	// replica (Successors), and look again shortly.
	HandOffLeadership bool
	// MayLead: the copy may serve as owner or claim the next epoch and
	// recover, when the usual rules say so.
	MayLead bool
}

// DecideRole applies the rule of the file comment.
func DecideRole(standing CopyStanding) RoleDecision {
	if !standing.Fenced {
		return RoleDecision{MayLead: true}
	}
	return RoleDecision{
		StepDown:          standing.Role == CopyOwner || standing.Role == CopyRecovering,
		HandOffLeadership: standing.Leads,
	}
}

// Successor is one replica a fenced copy may hand the leadership to, as
// the copy last knew it.
type Successor struct {
	Node string
	// Reachable says the copy's peer link to the node is up.
	Reachable bool
	// Progress is its last report as the copy's follower link had it
	// (zero when unknown).
	Progress ReplicaProgress
}

// Successors returns the nodes of candidates in the order to ask them
// (see the file comment); candidates is in placement order.
func Successors(candidates []Successor) []string {
	ordered := slices.Clone(candidates)
	slices.SortStableFunc(ordered, func(a, b Successor) int {
		switch {
		case a.Reachable != b.Reachable:
			return boolFirst(a.Reachable)
		case a.Progress.Counts != b.Progress.Counts:
			return boolFirst(a.Progress.Counts)
		case a.Progress.DurableNext != b.Progress.DurableNext:
			if a.Progress.DurableNext > b.Progress.DurableNext {
				return -1
			}
			return 1
		}
		return 0
	})
	nodes := make([]string, len(ordered))
	for i, candidate := range ordered {
		nodes[i] = candidate.Node
	}
	return nodes
}

// boolFirst orders the side that has the property first.
func boolFirst(has bool) int {
	if has {
		return -1
	}
	return 1
}
