package actors

// list-queues in cluster mode names every queue of the catalog, not only
// those open on the answering node, so a client that connects to any node
// sees the cluster's queues. A queue open here is reported from its
// partition as always; any other carries the catalog's declaration
// (mode, policy, options) and, through withClusterInfo, its owner, epoch
// and replica set, with zero counts and positions: its counts live on its
// owner, where get-queue-info (redirected there) reads them.
//
// The list is read-your-writes across nodes: before the manager lists, the
// session waits for a linearizable read of the catalog (clusterList), so
// this node's replica has applied every declare and delete confirmed
// anywhere before the list was asked (a replica that lags answered with
// some of them missing). The session holds later frames meanwhile (a
// barrier, session_order.go), so the list keeps its place in the
// connection's order. It costs one ReadIndex round per list.

import (
	"context"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/wire"
)

// clusterList sends request to the queues manager once this node's
// catalog replica has caught up (a linearizable read on a goroutine);
// false outside cluster mode. A catalog that cannot be read answers the
// list with the failure (unavailable: retry).
func (s *session) clusterList(ctx actor.Context, request listRequest) bool {
	node := s.core.config.Cluster
	if node == nil {
		return false
	}
	s.beginBarrier("list")
	manager, self, system := s.core.queuesManager, ctx.Self(), ctx.ActorSystem()
	go func() {
		readCtx, cancel := context.WithTimeout(context.Background(), clusterRequestTimeout)
		defer cancel()
		if err := node.CatchUpCatalog(readCtx); err != nil {
			system.Root.Send(self, listResult{requestID: request.requestID, failure: failureOfClusterError(err)})
			return
		}
		system.Root.Send(manager, request)
	}()
	return true
}

// catalogOnlyQueues returns, by name, the catalog's queues that match the
// list request and are not open on this node; nil outside cluster mode or
// when the local catalog replica cannot be read.
func (m *queuesManager) catalogOnlyQueues(msg listRequest) map[string]wire.QueueInfo {
	if m.cluster == nil {
		return nil
	}
	view, err := m.cluster.node.LocalCatalog()
	if err != nil {
		m.core.logger.Warn("list-queues: the local catalog cannot be read; listing open queues only", "err", err)
		return nil
	}
	remote := make(map[string]wire.QueueInfo)
	for _, declared := range view.Queues {
		name := declared.Name
		if _, open := m.queues[name]; open || !strings.HasPrefix(name, msg.prefix) || name <= msg.after {
			continue
		}
		info := wire.QueueInfo{Name: name, Mode: wireModeOfCluster(declared.ModeInForce()), Policy: declared.Policy}
		if options, err := storageOptionsOfCatalog(declared); err == nil {
			info.Options = wireOptions(options.WithDefaults())
		}
		remote[name] = info
	}
	return remote
}
