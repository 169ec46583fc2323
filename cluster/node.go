package cluster

// Node is the shell around one dragonboat NodeHost. Start creates the
// NodeHost (Raft logs under <data_dir>/raft), starts the catalog shard with
// every configured node as an initial member and starts the reconcile loop
// (reconcile.go), the one goroutine that owns the set of coordination
// shards this node hosts.
//
// Requests to Raft go through retry: dragonboat's transient errors (no
// leader yet, busy, timeout, shard not started yet) are retried with a
// short backoff until the caller's context ends; a context without a
// deadline gets DefaultRequestTimeout. Proposals use dragonboat's no-op
// session (no exactly-once), which is safe because every catalog and
// coordination command is idempotent or compare-and-set.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/cluster/rafttransport"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	sm "github.com/lni/dragonboat/v4/statemachine"
)

// DefaultRequestTimeout bounds a Node request whose context has no deadline.
const DefaultRequestTimeout = 5 * time.Second

// StartOptions are the process-local parts of starting a node.
type StartOptions struct {
	// Logger receives the node's own log lines and, at the config's
	// raft.log_level, dragonboat's. Nil means slog.Default().
	Logger *slog.Logger
	// FS replaces the disk for Raft logs (tests pass vfs.NewStrictMem()). Keep
	// the same FS to restart a node with its state.
	FS config.IFS
	// TransportFactory replaces the Raft transport (tests pass a channel
	// transport). Nil means rafttransport: TCP on the node's raft_address,
	// with mutual TLS when the node has tls files.
	TransportFactory config.TransportFactory
	// BuiltinRaftTransport starts dragonboat's own TCP transport instead of
	// rafttransport (which speaks the same bytes); the test that proves
	// the two interoperate uses it, as a node of an older version would.
	BuiltinRaftTransport bool
	// ReplicaID is this node's Raft replica id, as its data directory
	// recorded it (the broker's identity file). 0 means the id derived from
	// the node id, which every node of a new cluster starts with.
	ReplicaID uint64
	// Join says this node rejoins under a new replica id after its data
	// directory was lost: another node already replaced its old replica in
	// the catalog (ReplaceReplica), so it joins the catalog shard, and every
	// coordination shard that names it joined, instead of starting them as
	// an initial member.
	Join bool
}

// Node is one running cluster node.
type Node struct {
	config    Config
	self      NodeConfig
	replicaID uint64
	instance  uint64 // this process's replica instance (partition_api.go)
	nodesByID map[string]NodeConfig
	byReplica map[uint64]string // the config's derived ids; the view adds replaced ones
	logger    *slog.Logger
	nodeHost  *dragonboat.NodeHost
	events    *eventListener

	rtt             time.Duration
	electionTimeout time.Duration // the catalog's
	// coordinationElectionTimeout is the coordination shards' election
	// timeout: the time a dead owner goes undetected.
	coordinationElectionTimeout time.Duration

	kick      chan struct{} // capacity 1: "something changed, reconcile"
	stop      chan struct{} // closed by Close
	loopDone  chan struct{} // closed when the reconcile loop returns
	closeOnce sync.Once

	view atomic.Pointer[localView] // published by the reconcile loop

	// leaderChanges holds, per shard, a channel closed at the next leader
	// change, so requests waiting on a lost leader retry at once. Written by
	// dragonboat's event goroutine and by requests, so it has its own lock.
	leaderMu      sync.Mutex
	leaderChanges map[uint64]chan struct{}

	watchMu  sync.Mutex
	watchers map[*Watch]struct{} // nil after Close; guarded by watchMu

	peerTLS *tlsconfig.Node // the node's tls files; nil without them (tls.go)

	// beforeReplaceRecorded is a test seam of ReplaceReplica (replace.go).
	beforeReplaceRecorded atomic.Pointer[func(nodeID string, replicaID uint64)]
	// beforeCatalogUpdate is a test seam of the catalog state machine
	// (SetBeforeCatalogUpdate).
	beforeCatalogUpdate atomic.Pointer[func(command string)]
}

// PeerTLS is the mutual TLS of this node's links to the others, built at
// start from its tls files (NodeConfig.PeerTLS); nil without them.
func (n *Node) PeerTLS() *tlsconfig.Node { return n.peerTLS }

// ReloadTLS re-reads the node's tls files (on SIGHUP) for every link that
// uses PeerTLS: the peer links and Raft's transport, both their dialing
// and accepting sides, from the next handshake on. A broken file keeps
// the ones in force, and the error says why. Without tls files it does
// nothing.
func (n *Node) ReloadTLS() error {
	if n.peerTLS == nil {
		return nil
	}
	return n.peerTLS.Reload()
}

// Start starts node nodeID of cfg. It returns once the NodeHost and the
// catalog shard are started, without waiting for a leader; WaitReady waits
// for the catalog.
func Start(cfg *Config, nodeID string, options StartOptions) (*Node, error) {
	effective := cfg.WithDefaults()
	if err := effective.Validate(); err != nil {
		return nil, err
	}
	self, err := effective.Node(nodeID)
	if err != nil {
		return nil, err
	}
	logger := options.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("node", nodeID)
	level, _ := parseLogLevel(effective.Cluster.Raft.LogLevel) // checked by Validate
	installRaftLogging(logger, level)
	warnAboutSettingsFiles(logger)

	node := newNode(effective, self, logger)
	if node.peerTLS, err = self.PeerTLS(); err != nil { // tls.go: checked before Raft reads the files
		return nil, err
	}
	if options.ReplicaID != 0 {
		node.replicaID = options.ReplicaID
	}
	nodeHost, err := dragonboat.NewNodeHost(node.nodeHostConfig(options))
	if err != nil {
		return nil, fmt.Errorf("cluster: start node %s: %w", nodeID, err)
	}
	node.nodeHost = nodeHost
	members, join := node.catalogMembers(), false
	if options.Join {
		members, join = nil, true
	}
	if nodeHost.HasNodeInfo(CatalogShardID, node.replicaID) {
		members, join = nil, false // a restart: the bootstrap record is in force (reconcile.go)
	}
	catalogMachine := withBeforeUpdate(newCatalogMachine(node.kickReconcile), &node.beforeCatalogUpdate)
	if err := nodeHost.StartReplica(members, join, catalogMachine, node.raftConfig(CatalogShardID)); err != nil {
		nodeHost.Close()
		return nil, fmt.Errorf("cluster: start catalog shard on %s: %w", nodeID, err)
	}
	go node.runReconcile()
	return node, nil
}

func newNode(effective Config, self NodeConfig, logger *slog.Logger) *Node {
	raft := effective.Cluster.Raft
	node := &Node{
		config:                      effective,
		self:                        self,
		replicaID:                   self.ReplicaID(),
		instance:                    newInstance(),
		nodesByID:                   map[string]NodeConfig{},
		byReplica:                   map[uint64]string{},
		logger:                      logger,
		rtt:                         time.Duration(raft.RTT),
		electionTimeout:             time.Duration(raft.RTT) * time.Duration(raft.ElectionRTT),
		coordinationElectionTimeout: time.Duration(raft.RTT) * time.Duration(raft.CoordinationElectionRTT),
		kick:                        make(chan struct{}, 1),
		stop:                        make(chan struct{}),
		loopDone:                    make(chan struct{}),
		watchers:                    map[*Watch]struct{}{},
		leaderChanges:               map[uint64]chan struct{}{},
	}
	for _, peer := range effective.Nodes {
		node.nodesByID[peer.ID] = peer
		node.byReplica[peer.ReplicaID()] = peer.ID
	}
	node.events = newEventListener(node.kickReconcile, node.noteLeaderChange, time.Now)
	node.view.Store(&localView{})
	return node
}

func (n *Node) nodeHostConfig(options StartOptions) config.NodeHostConfig {
	raftDir := filepath.Join(n.self.DataDir, "raft")
	if options.FS == nil {
		if absolute, err := filepath.Abs(raftDir); err == nil {
			raftDir = absolute
		}
	}
	transport := options.TransportFactory
	if transport == nil && !options.BuiltinRaftTransport { // TCP on raft_address, with the peer links' TLS
		var peers []string // with TLS, an accepted connection must be from one of them
		for _, node := range n.config.Nodes {
			peers = append(peers, node.RaftAddress)
		}
		transport = &rafttransport.Factory{TLS: n.peerTLS, Peers: peers, Logger: n.logger}
	}
	var mutualTLS bool
	var caFile, certFile, keyFile string
	if tls := n.self.TLS; tls != nil && transport == nil { // the built-in transport reads the files itself
		mutualTLS, caFile, certFile, keyFile = true, tls.CAFile, tls.CertFile, tls.KeyFile
	}
	return config.NodeHostConfig{
		MutualTLS: mutualTLS, CAFile: caFile, CertFile: certFile, KeyFile: keyFile,
		NodeHostDir:         raftDir,
		RTTMillisecond:      uint64(n.rtt / time.Millisecond),
		RaftAddress:         n.self.RaftAddress,
		DeploymentID:        n.config.Cluster.DeploymentID,
		RaftEventListener:   n.events,
		SystemEventListener: n.events,
		Expert: config.ExpertConfig{
			LogDB:            config.GetTinyMemLogDBConfig(),
			FS:               options.FS,
			TransportFactory: transport,
		},
	}
}

// raftConfig is the replica config of this node in shard shardID: the
// catalog's election settings for the catalog, the coordination ones for
// partitions.
func (n *Node) raftConfig(shardID uint64) config.Config {
	raft := n.config.Cluster.Raft
	election, heartbeat := raft.ElectionRTT, raft.HeartbeatRTT
	if shardID != CatalogShardID {
		election, heartbeat = raft.CoordinationElectionRTT, raft.CoordinationHeartbeatRTT
	}
	return config.Config{
		ShardID:            shardID,
		ReplicaID:          n.replicaID,
		ElectionRTT:        election,
		HeartbeatRTT:       heartbeat,
		CheckQuorum:        true,
		PreVote:            true,
		SnapshotEntries:    raft.SnapshotEntries,
		CompactionOverhead: raft.CompactionOverhead,
		Quiesce:            raft.Quiesce,
	}
}

func (n *Node) catalogMembers() map[uint64]string {
	members := map[uint64]string{}
	for _, peer := range n.config.Nodes {
		members[peer.ReplicaID()] = peer.RaftAddress
	}
	return members
}

// ReplicaID is this node's Raft replica id.
func (n *Node) ReplicaID() uint64 { return n.replicaID }

// nodeOfReplica names the node a Raft replica id belongs to: the catalog's
// current ids first (a node that rejoined has a new one), then the ids
// derived from the config.
func (n *Node) nodeOfReplica(replicaID uint64) (string, bool) {
	if name, found := n.view.Load().replicaNames[replicaID]; found {
		return name, true
	}
	name, found := n.byReplica[replicaID]
	return name, found
}

// replicaIDOf is a node's current Raft replica id.
func (n *Node) replicaIDOf(nodeID string) (uint64, bool) {
	for replicaID, name := range n.view.Load().replicaNames {
		if name == nodeID {
			return replicaID, true
		}
	}
	peer, found := n.nodesByID[nodeID]
	return peer.ReplicaID(), found
}

// partitionMembers maps a partition's coordination shard members to Raft
// addresses: the replica ids the catalog recorded for it, or, for a
// partition recorded before it kept them, the ids derived from node ids.
func (n *Node) partitionMembers(partition PartitionInfo) map[uint64]string {
	if len(partition.Members) == 0 {
		return n.members(partition.Replicas)
	}
	members := map[uint64]string{}
	for id, replicaID := range partition.Members {
		if peer, found := n.nodesByID[id]; found {
			members[replicaID] = peer.RaftAddress
		}
	}
	return members
}

// members maps the replica set of a partition to Raft addresses.
func (n *Node) members(replicas []string) map[uint64]string {
	members := map[uint64]string{}
	for _, id := range replicas {
		if peer, found := n.nodesByID[id]; found {
			members[peer.ReplicaID()] = peer.RaftAddress
		}
	}
	return members
}

// kickReconcile asks the reconcile loop for a pass. It never blocks: a kick
// already pending covers this one.
func (n *Node) kickReconcile() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// ID is this node's id.
func (n *Node) ID() string { return n.self.ID }

// Config is the effective config (defaults filled in) the node runs with.
func (n *Node) Config() Config { return n.config }

// Close stops the reconcile loop, closes the NodeHost (stopping every
// shard) and closes every Watch. Stop proposing before calling it.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		close(n.stop)
		<-n.loopDone
		n.nodeHost.Close()
		n.closeWatchers()
	})
}

func (n *Node) closed() bool {
	select {
	case <-n.stop:
		return true
	default:
		return false
	}
}

// nextLeaderChange returns a channel closed at the next leader change of
// shardID.
func (n *Node) nextLeaderChange(shardID uint64) <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	changed, found := n.leaderChanges[shardID]
	if !found {
		changed = make(chan struct{})
		n.leaderChanges[shardID] = changed
	}
	return changed
}

// noteLeaderChange wakes requests waiting on shardID's old leader. It runs
// on dragonboat's event goroutine and never blocks.
func (n *Node) noteLeaderChange(shardID uint64) {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if changed, found := n.leaderChanges[shardID]; found {
		close(changed)
		delete(n.leaderChanges, shardID)
	}
}

// retryable reports whether an attempt's error is transient. A context
// error here is the attempt's own (leader change or attempt timeout); the
// caller's context is checked separately.
func retryable(err error) bool {
	for _, transient := range []error{
		context.Canceled, context.DeadlineExceeded,
		dragonboat.ErrShardNotReady, dragonboat.ErrSystemBusy, dragonboat.ErrTimeout,
		dragonboat.ErrShardNotFound, dragonboat.ErrShardNotInitialized, dragonboat.ErrAborted,
		dragonboat.ErrCanceled, dragonboat.ErrRejected, dragonboat.ErrTimeoutTooSmall,
		// The attempt's deadline passed before dragonboat read it: the
		// calling goroutine was descheduled longer than the attempt timeout
		// (seen on a loaded machine). The caller's own deadline is checked
		// separately.
		dragonboat.ErrInvalidDeadline,
	} {
		if errors.Is(err, transient) {
			return true
		}
	}
	return false
}

// retry runs attempt against shardID until it succeeds, fails for good or
// ctx ends. An attempt ends early when the shard's leader changes (a
// request forwarded to a lost leader would otherwise wait out its timeout)
// and otherwise after two election timeouts.
func (n *Node) retry(ctx context.Context, shardID uint64, attempt func(context.Context) error) error {
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	attemptTimeout := max(2*n.electionTimeout, 20*n.rtt)
	backoff := max(n.rtt/2, time.Millisecond)
	for {
		if n.closed() {
			return ErrClosed
		}
		err := n.runAttempt(ctx, shardID, attemptTimeout, attempt)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, dragonboat.ErrClosed) || errors.Is(err, dragonboat.ErrShardClosed):
			return fmt.Errorf("%w: %w", ErrClosed, err)
		case !retryable(err) && ctx.Err() == nil:
			return err
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w: %w (last: %w)", ErrNotReady, ctx.Err(), err)
		case <-n.stop:
			timer.Stop()
			return ErrClosed
		case <-timer.C:
		}
		backoff = min(2*backoff, max(2*n.rtt, time.Millisecond))
	}
}

func (n *Node) runAttempt(ctx context.Context, shardID uint64, timeout time.Duration, attempt func(context.Context) error) error {
	leaderChanged := n.nextLeaderChange(shardID)
	attemptContext, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-leaderChanged:
			cancel()
		case <-attemptContext.Done():
		}
	}()
	return attempt(attemptContext)
}

// propose proposes command to shardID and returns the applied result.
func (n *Node) propose(ctx context.Context, shardID uint64, command []byte) (sm.Result, error) {
	var result sm.Result
	err := n.retry(ctx, shardID, func(attemptContext context.Context) error {
		var err error
		result, err = n.nodeHost.SyncPropose(attemptContext, n.nodeHost.GetNoOPSession(shardID), command)
		return err
	})
	return result, err
}

// read runs a linearizable read (ReadIndex) against shardID.
func (n *Node) read(ctx context.Context, shardID uint64, query any) (any, error) {
	var value any
	err := n.retry(ctx, shardID, func(attemptContext context.Context) error {
		var err error
		value, err = n.nodeHost.SyncRead(attemptContext, shardID, query)
		return err
	})
	return value, err
}

// staleRead reads this node's replica of shardID without a Raft round trip.
func (n *Node) staleRead(shardID uint64, query any) (any, error) {
	if n.closed() {
		return nil, ErrClosed
	}
	value, err := n.nodeHost.StaleRead(shardID, query)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return value, nil
}

// warnAboutSettingsFiles logs a warning for dragonboat settings files in
// the working directory: dragonboat applies them silently to every NodeHost
// of the process, and a bad value panics inside StartReplica.
func warnAboutSettingsFiles(logger *slog.Logger) {
	for _, name := range []string{"dragonboat-soft-settings.json", "dragonboat-hard-settings.json"} {
		if _, err := os.Stat(name); err == nil {
			logger.Warn("raft settings file in the working directory overrides built-in Raft settings", "file", name)
		}
	}
}
