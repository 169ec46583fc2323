package actors

// list-queues in cluster mode names every queue of the catalog, not only
// those open on the answering node, so a client that connects to any node
// sees the cluster's queues. A queue open here is reported from its
// partition as always; any other carries the catalog's declaration
// (mode, policy, options) and, through withClusterInfo, its owner, epoch
// and replica set, with zero counts and positions: its counts live on its
// owner, where get-queue-info (redirected there) reads them.

import (
	"strings"

	"github.com/fibrilmq/fibril/wire"
)

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
