package actors

// Health in a cluster: besides fenced queues, /healthz names every queue
// partition this node replicates that has no serving owner as this node
// sees it: its coordination shard has no active epoch (a recovery runs, or
// the first owner is not chosen yet), or the active owner's node is
// unreachable from here (its Raft transport or its peer link says so), or this node is the owner and its copy does not
// serve (it restarted and waits for a recovery). Reads local state only.

import (
	"fmt"
	"strings"
	"time"

	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/wire"
)

// unownedQueues lists the partitions this node replicates that no node
// serves now, with the reason.
func (b *Broker) unownedQueues() []QueueHealth {
	node := b.core.config.Cluster
	if node == nil {
		return nil
	}
	unreachable := map[string]bool{}
	for _, peer := range node.Status().Nodes {
		unreachable[peer.ID] = peer.Liveness == cluster.LivenessUnreachable
	}
	var unowned []QueueHealth
	for _, view := range node.Partitions() {
		state := view.State
		reason := ""
		switch {
		case state.Epoch == 0:
			reason = "no owner chosen yet"
		case state.Phase != cluster.PhaseActive:
			reason = fmt.Sprintf("%s is recovering it under epoch %d", state.Owner, state.Epoch)
		case unreachable[state.Owner] || b.core.peerUnreachable(state.Owner):
			reason = fmt.Sprintf("its owner %s (epoch %d) is unreachable from this node", state.Owner, state.Epoch)
		case state.Owner == node.ID() && !b.servesHere(view.Queue):
			reason = fmt.Sprintf("this node owns epoch %d but its copy does not serve (it restarted; a recovery will choose the owner)", state.Epoch)
		}
		if reason != "" {
			unowned = append(unowned, QueueHealth{Name: view.Queue, Error: "no serving owner: " + reason})
		}
	}
	return unowned
}

// stuckQueues names the queue of info when it is owned here and its
// quorum frontier has not reached records written commitStuckAfter ago.
func stuckQueues(info wire.QueueInfo) []QueueHealth {
	wait := time.Duration(info.CommitWaitMs) * time.Millisecond
	if wait < commitStuckAfter {
		return nil
	}
	states := make([]string, 0, len(info.Replicas))
	for _, replica := range info.Replicas {
		states = append(states, fmt.Sprintf("%s %s at %d", replica.Node, replica.State, boundaryPosition(info, replica)))
	}
	return []QueueHealth{{Name: info.Name, Error: fmt.Sprintf(
		"confirms and deliveries are stuck: the quorum frontier (%d) has not reached records written %.1fs ago (%s)",
		info.CommittedNext, wait.Seconds(), strings.Join(states, "; "))}}
}

// laggingReplicas names each follower of a queue owned here whose link
// does not admit: stalled, catching up, probing, unreachable, latched.
func laggingReplicas(info wire.QueueInfo) []QueueHealth {
	var lagging []QueueHealth
	for _, replica := range info.Replicas {
		if !isFollowerState(replica.State) || followerKeepsUp(replica.State) {
			continue
		}
		lagging = append(lagging, QueueHealth{Name: info.Name, Error: fmt.Sprintf("replica %s is %s at %d",
			replica.Node, replica.State, boundaryPosition(info, replica))})
	}
	return lagging
}

// isFollowerState reports whether an owner's replica state names a
// follower's link (not the owner's own copy, not a node that is not the
// owner).
func isFollowerState(state string) bool {
	return state != "" && state != "owner" && !strings.HasPrefix(state, "recovering")
}

// followerKeepsUp reports whether a follower's link state
// (replication.LinkHealth.Text) says it keeps up with the owner.
func followerKeepsUp(state string) bool {
	return state == "in sync" || strings.HasPrefix(state, "pushing")
}

// boundaryPosition is a copy's position at the queue's boundary.
func boundaryPosition(info wire.QueueInfo, replica wire.ReplicaInfo) uint64 {
	if info.Mode == wire.ModeBuffered {
		return max(replica.WrittenNext, replica.DurableNext)
	}
	return replica.DurableNext
}

// servesHere reports whether this node's directory lists the queue as
// served here.
func (b *Broker) servesHere(name string) bool {
	route, ok := b.core.directory.lookup(name)
	return ok && !route.failure.failed()
}
