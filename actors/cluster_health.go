package actors

// Health in a cluster: besides fenced queues, /healthz names every queue
// partition this node replicates that has no serving owner as this node
// sees it: its coordination shard has no active epoch (a recovery runs, or
// the first owner is not chosen yet), or the active owner's node is
// unreachable from here (its Raft transport or its peer link says so), or this node is the owner and its copy does not
// serve (it restarted and waits for a recovery). Reads local state only.

import (
	"fmt"

	"github.com/fibrilmq/fibril/cluster"
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

// servesHere reports whether this node's directory lists the queue as
// served here.
func (b *Broker) servesHere(name string) bool {
	route, ok := b.core.directory.lookup(name)
	return ok && !route.failure.failed()
}
