package main

// Cluster mode of `fibril serve`: --config FILE --node ID starts node ID of
// the cluster the file describes. The file names the node's data dir
// (queues, and Raft logs under raft/), its client and HTTP addresses and
// the background sync interval, so the flags that set those on a single
// node are refused next to --config. A config problem stops start-up with
// a message that names the field.
//
// Start order: the node's Raft identity (actors.PrepareClusterIdentity: a
// node with an empty data directory asks its peers whether it is new or
// lost its data; one whose data the cluster knows refuses to start unless
// --rejoin-empty says the data is lost for good), the cluster node (Raft
// host and catalog), then the broker on top of it; shutdown runs the
// other way round, so the broker stops proposing before Raft closes.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/cluster"
)

// identityDecisionTimeout bounds how long a node with an empty data
// directory waits for a peer to tell it whether the cluster is new.
const identityDecisionTimeout = 2 * time.Minute

// clusterOwnedFlags are the single-node flags the cluster config replaces,
// with the config field that does their job.
var clusterOwnedFlags = map[string]string{
	"data":          "nodes[i].data_dir",
	"listen":        "nodes[i].client_address",
	"http":          "nodes[i].http_address",
	"sync-interval": "cluster.background_sync_interval",
}

// checkClusterFlags refuses --config without --node (and the reverse),
// --rejoin-empty without them, and single-node flags the config replaces.
func checkClusterFlags(set *flag.FlagSet, f serveFlags) error {
	if f.configFile == "" && f.nodeID == "" {
		if f.rejoinEmpty {
			return errors.New("--rejoin-empty is for a node of a cluster: it goes with --config and --node")
		}
		return nil
	}
	if f.configFile == "" || f.nodeID == "" {
		return errors.New("--config and --node go together: --config FILE names the cluster, --node ID this node")
	}
	var err error
	set.Visit(func(given *flag.Flag) {
		field, owned := clusterOwnedFlags[given.Name]
		if !owned {
			field, owned = clusterOwnedSecurityFlags[given.Name]
		}
		if owned && err == nil {
			err = fmt.Errorf("--%s cannot be combined with --config: the cluster config sets it (%s)", given.Name, field)
		}
	})
	return err
}

// maybeStartClusterNode starts the cluster node named by --config and
// --node and points config at it; nil without --config.
func maybeStartClusterNode(config *actors.Config, flags serveFlags, logger *slog.Logger) (*cluster.Node, error) {
	if flags.configFile == "" {
		return nil, nil
	}
	clusterConfig, err := cluster.LoadConfig(flags.configFile)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", flags.configFile, err)
	}
	self, err := clusterConfig.Node(flags.nodeID)
	if err != nil {
		return nil, fmt.Errorf("--node: %w", err)
	}
	if err := checkNodeLinkSecurity(self, flags.security.allowInsecureListen, logger); err != nil {
		return nil, err
	}
	routeStandardLog(logger)
	identityCtx, cancel := context.WithTimeout(context.Background(), identityDecisionTimeout)
	defer cancel()
	identity, err := actors.PrepareClusterIdentity(identityCtx, clusterConfig, flags.nodeID,
		actors.IdentityOptions{Logger: logger, RejoinEmpty: flags.rejoinEmpty})
	if errors.Is(err, actors.ErrEmptyDataDir) {
		return nil, fmt.Errorf("%w: start it once with --rejoin-empty (docs/operations.md, \"A cluster node "+
			"whose data directory is empty\")", err)
	}
	if err != nil {
		return nil, err
	}
	logger.Info("raft identity", "replica_id", identity.ReplicaID, "decided", identity.Decided)
	node, err := cluster.Start(clusterConfig, flags.nodeID, cluster.StartOptions{Logger: logger,
		ReplicaID: identity.ReplicaID, Join: identity.Join})
	if err != nil {
		return nil, err
	}
	config.DataDir, config.ListenAddr, config.HTTPAddr = self.DataDir, self.ClientAddress, self.HTTPAddress
	config.SyncInterval = time.Duration(*clusterConfig.Cluster.BackgroundSyncInterval)
	config.NodeID, config.Cluster = self.ID, node
	return node, nil
}

// routeStandardLog sends lines written through Go's standard log package
// (the Raft log store writes a few there) to the node's logger at debug
// level, so they are quiet unless asked for.
func routeStandardLog(logger *slog.Logger) {
	slog.SetDefault(logger)
	slog.SetLogLoggerLevel(slog.LevelDebug)
}
