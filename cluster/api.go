package cluster

// The broker-facing API of a Node. Methods taking a context talk to Raft
// and may block for a few Raft round trips (longer while no leader is
// elected); call them off any actor goroutine. Methods named Local read
// this node's replica without a round trip and may lag the leader.
//
// Owner information comes from two places. A node in a partition's replica
// set hosts its coordination shard and reports that shard's state. Other
// nodes report the owner hint the owner copied into the catalog. Either may
// lag a change of owner; a redirect is a hint and the owner checks its own
// coordination state before serving.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lni/dragonboat/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/vmihailenco/msgpack/v5"
)

// CatalogView is a copy of the catalog with owners merged in.
type CatalogView struct {
	Revision    uint64      `json:"revision"`
	Initialized bool        `json:"initialized"`
	Nodes       []NodeInfo  `json:"nodes"`
	Settings    Settings    `json:"settings"`
	Queues      []QueueInfo `json:"queues"`
}

// OwnerInfo locates the owner of a queue partition, for redirects.
type OwnerInfo struct {
	Queue         string `json:"queue"`
	Partition     int    `json:"partition"`
	ShardID       uint64 `json:"shard_id"`
	NodeID        string `json:"node_id"`
	ClientAddress string `json:"client_address"`
	PeerAddress   string `json:"peer_address"`
	Epoch         uint64 `json:"epoch"`
	// IsSelf is true when this node is the owner.
	IsSelf bool `json:"is_self"`
	// FromCoordination is true when the answer comes from this node's own
	// replica of the coordination shard rather than the catalog hint.
	FromCoordination bool `json:"from_coordination"`
}

// DeclareOutcome is the catalog's answer to a declare.
type DeclareOutcome struct {
	// Queue is the queue as declared (the existing declaration for a
	// re-declare), with owners merged in.
	Queue QueueInfo
	// Created is true when this declare created the queue.
	Created bool
	// Warnings are for people: deprecated policy names.
	Warnings []string
}

// Declare declares a queue through the catalog. A new queue gets its
// placement and coordination shards; an existing one is returned unchanged
// if the declaration agrees with it (ErrModeConflict or
// ErrDeclarationConflict otherwise). Warnings (deprecated policy names) are
// also logged. The owner is elected after the declaration commits: use
// WaitOwner to wait for it. Blocks on Raft: never call from an actor's
// Receive.
func (n *Node) Declare(ctx context.Context, decl QueueDecl) (QueueInfo, []string, error) {
	outcome, err := n.DeclareQueue(ctx, decl)
	return outcome.Queue, outcome.Warnings, err
}

// DeclareQueue is Declare that also says whether this declare created the
// queue. Blocks on Raft: never call from an actor's Receive.
func (n *Node) DeclareQueue(ctx context.Context, decl QueueDecl) (DeclareOutcome, error) {
	if err := n.ensureInitialized(ctx); err != nil {
		return DeclareOutcome{}, err
	}
	result, err := n.proposeCatalog(ctx, catalogCommand{Kind: commandDeclare, Declare: &decl})
	if err != nil {
		return DeclareOutcome{}, err
	}
	for _, warning := range result.Warnings {
		n.logger.Warn("queue declare", "queue", decl.Name, "warning", warning)
	}
	if result.Queue == nil {
		panic("cluster: a successful declare returned no queue")
	}
	return DeclareOutcome{Queue: n.withOwners(*result.Queue), Created: result.Created, Warnings: result.Warnings}, nil
}

// DeleteQueue removes a queue from the catalog; its replicas stop their
// coordination shards. ErrQueueNotFound if there is no such queue.
//
// A proposal attempt that ended without an answer (it timed out, or a
// leader change cancelled it) may still have been applied, and the retry
// then finds the queue gone: that delete took effect (this request's, or
// another's meanwhile), so it is answered as done, not ErrQueueNotFound.
func (n *Node) DeleteQueue(ctx context.Context, name string) error {
	_, answerLost, err := n.proposeCatalogNoting(ctx, catalogCommand{Kind: commandDelete, Name: name})
	if answerLost && errors.Is(err, ErrQueueNotFound) {
		n.logger.Info("delete-queue: an attempt whose answer was lost deleted the queue", "queue", name)
		return nil
	}
	return err
}

// RecordAppliedMode records in the catalog that a queue's owner applied
// mode revision revision (a mode change): the catalog's mode for the queue
// becomes mode unless it holds that revision or a newer one already.
// Blocks on Raft.
func (n *Node) RecordAppliedMode(ctx context.Context, queue string, mode Mode, revision uint64) error {
	_, err := n.proposeCatalog(ctx, catalogCommand{Kind: commandAppliedMode,
		Mode: &appliedMode{Queue: queue, Mode: mode, Revision: revision}})
	return err
}

// SetSetting changes a runtime setting (Setting* keys) cluster-wide.
func (n *Node) SetSetting(ctx context.Context, key, value string) error {
	if err := n.ensureInitialized(ctx); err != nil {
		return err
	}
	_, err := n.proposeCatalog(ctx, catalogCommand{Kind: commandSetSetting, Key: key, Value: value})
	return err
}

// CatchUpCatalog returns once this node's catalog replica has applied
// every change committed before the call (a linearizable read of the
// revision: ReadIndex, then the local apply): local reads after it
// (LocalCatalog, LookupLocal, Owner) see those changes.
func (n *Node) CatchUpCatalog(ctx context.Context) error {
	_, err := n.read(ctx, CatalogShardID, catalogRevisionQuery{})
	return err
}

// SetBeforeCatalogUpdate installs a test seam: hook runs in this node's
// catalog state machine, with the command's name ("declare", "delete",
// ...), before each command applies, so a test can slow one node's apply.
// Nil removes it.
func (n *Node) SetBeforeCatalogUpdate(hook func(command string)) {
	n.beforeCatalogUpdate.Store(&hook)
}

// Catalog is a linearizable read of the whole catalog.
func (n *Node) Catalog(ctx context.Context) (CatalogView, error) {
	value, err := n.read(ctx, CatalogShardID, catalogQuery{})
	if err != nil {
		return CatalogView{}, err
	}
	return n.viewOf(value.(*CatalogState)), nil
}

// LocalCatalog reads this node's replica of the catalog.
func (n *Node) LocalCatalog() (CatalogView, error) {
	state, err := n.localCatalogState()
	if err != nil {
		return CatalogView{}, err
	}
	return n.viewOf(state), nil
}

// Queues is a linearizable list of every queue, sorted by name.
func (n *Node) Queues(ctx context.Context) ([]QueueInfo, error) {
	view, err := n.Catalog(ctx)
	return view.Queues, err
}

// Lookup is a linearizable read of one queue; ErrQueueNotFound if absent.
func (n *Node) Lookup(ctx context.Context, name string) (QueueInfo, error) {
	value, err := n.read(ctx, CatalogShardID, catalogQuery{Name: name})
	if err != nil {
		return QueueInfo{}, err
	}
	return n.queueOrNotFound(name, value.(*QueueInfo))
}

// LookupLocal reads one queue from this node's replica of the catalog.
func (n *Node) LookupLocal(name string) (QueueInfo, error) {
	value, err := n.staleRead(CatalogShardID, catalogQuery{Name: name})
	if err != nil {
		return QueueInfo{}, err
	}
	return n.queueOrNotFound(name, value.(*QueueInfo))
}

func (n *Node) queueOrNotFound(name string, queue *QueueInfo) (QueueInfo, error) {
	if queue == nil {
		return QueueInfo{}, fmt.Errorf("%w: %q", ErrQueueNotFound, name)
	}
	return n.withOwners(*queue), nil
}

// Owner locates the owner of a queue partition from local state (no Raft
// round trip), for redirects. ErrOwnerUnknown until one is recorded.
func (n *Node) Owner(name string, partition int) (OwnerInfo, error) {
	queue, err := n.LookupLocal(name)
	if err != nil {
		return OwnerInfo{}, err
	}
	if partition < 0 || partition >= len(queue.Partitions) {
		return OwnerInfo{}, fmt.Errorf("%w: queue %q has %d partitions, asked for %d", ErrPartitionNotFound, name, len(queue.Partitions), partition)
	}
	info := queue.Partitions[partition]
	if info.Owner == "" {
		return OwnerInfo{}, fmt.Errorf("%w: queue %q partition %d", ErrOwnerUnknown, name, partition)
	}
	owner, found := n.nodesByID[info.Owner]
	if !found {
		return OwnerInfo{}, fmt.Errorf("%w: owner %q of queue %q is not in the config", ErrUnknownNode, info.Owner, name)
	}
	_, hosted := n.view.Load().shards[info.ShardID]
	return OwnerInfo{
		Queue: name, Partition: partition, ShardID: info.ShardID, NodeID: owner.ID,
		ClientAddress: owner.ClientAddress, PeerAddress: owner.PeerAddress, Epoch: info.Epoch,
		IsSelf: owner.ID == n.self.ID, FromCoordination: hosted,
	}, nil
}

// WaitOwner waits until Owner knows the owner of the partition or ctx ends.
func (n *Node) WaitOwner(ctx context.Context, name string, partition int) (OwnerInfo, error) {
	watch := n.Watch()
	defer watch.Close()
	for {
		owner, err := n.Owner(name, partition)
		if err == nil {
			return owner, nil
		}
		select {
		case <-ctx.Done():
			return OwnerInfo{}, fmt.Errorf("%w (waiting: %w)", err, ctx.Err())
		case _, open := <-watch.C:
			if !open {
				return OwnerInfo{}, ErrClosed
			}
		case <-time.After(n.electionTimeout):
			// Recheck now and then: a queue declared elsewhere reaches this
			// node's replica without a signal if it was applied before the
			// watch started.
		}
	}
}

// WaitReady waits until the catalog has a leader, answers a linearizable
// read and has been initialised.
func (n *Node) WaitReady(ctx context.Context) error {
	if err := n.ensureInitialized(ctx); err != nil {
		return err
	}
	_, err := n.Catalog(ctx)
	return err
}

// ensureInitialized proposes the init command (nodes and settings from this
// node's config) unless the local catalog already holds it. The command
// applies once cluster-wide, so proposing it again is harmless.
func (n *Node) ensureInitialized(ctx context.Context) error {
	if n.view.Load().initialized {
		return nil
	}
	if state, err := n.localCatalogState(); err == nil && state.Initialized {
		return nil
	}
	_, err := n.proposeCatalog(ctx, n.initCommand())
	return err
}

func (n *Node) initCommand() catalogCommand {
	init := &initCommand{Settings: Settings{
		DefaultReplicas:          n.config.Cluster.DefaultReplicas,
		DefaultPolicy:            n.config.Cluster.DefaultPolicy,
		BackgroundSyncIntervalMs: time.Duration(*n.config.Cluster.BackgroundSyncInterval).Milliseconds(),
	}}
	for _, peer := range n.config.Nodes {
		init.Nodes = append(init.Nodes, NodeInfo{
			ID: peer.ID, ClientAddress: peer.ClientAddress, PeerAddress: peer.PeerAddress,
			RaftAddress: peer.RaftAddress, HTTPAddress: peer.HTTPAddress, ReplicaID: peer.ReplicaID(),
		})
	}
	return catalogCommand{Kind: commandInit, Init: init}
}

// proposeCatalog proposes a catalog command and decodes its result; a
// refused command comes back as its package error.
func (n *Node) proposeCatalog(ctx context.Context, command catalogCommand) (catalogResult, error) {
	result, _, err := n.proposeCatalogNoting(ctx, command)
	return result, err
}

// proposeCatalogNoting is proposeCatalog, also saying whether an attempt
// before the one answered ended without an answer (answerLost), so the
// command may have applied more than once.
func (n *Node) proposeCatalogNoting(ctx context.Context, command catalogCommand) (result catalogResult, answerLost bool, err error) {
	data, err := msgpack.Marshal(&command)
	if err != nil {
		panic(fmt.Sprintf("cluster: catalog command does not encode: %v", err))
	}
	var raw sm.Result
	err = n.retry(ctx, CatalogShardID, func(attemptContext context.Context) error {
		var err error
		raw, err = n.nodeHost.SyncPropose(attemptContext, n.nodeHost.GetNoOPSession(CatalogShardID), data)
		answerLost = answerLost || mayHaveApplied(err)
		return err
	})
	if err != nil {
		return catalogResult{}, answerLost, err
	}
	if err := msgpack.Unmarshal(raw.Data, &result); err != nil {
		panic(fmt.Sprintf("cluster: catalog result does not decode: %v", err))
	}
	return result, answerLost, result.err()
}

// mayHaveApplied says whether a proposal that failed with err may still
// have been committed and applied: it was handed to Raft and its answer
// did not come (timeout, cancellation, abort).
func mayHaveApplied(err error) bool {
	for _, lost := range []error{dragonboat.ErrTimeout, dragonboat.ErrCanceled, dragonboat.ErrAborted,
		context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, lost) {
			return true
		}
	}
	return false
}

func (n *Node) localCatalogState() (*CatalogState, error) {
	value, err := n.staleRead(CatalogShardID, catalogQuery{})
	if err != nil {
		return nil, err
	}
	return value.(*CatalogState), nil
}

func (n *Node) viewOf(state *CatalogState) CatalogView {
	view := CatalogView{
		Revision: state.Revision, Initialized: state.Initialized,
		Nodes: state.Nodes, Settings: state.Settings, Queues: make([]QueueInfo, 0, len(state.Queues)),
	}
	for _, queue := range state.Queues {
		view.Queues = append(view.Queues, n.withOwners(*queue))
	}
	slices.SortFunc(view.Queues, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return view
}

// withOwners replaces each partition's owner hint with this node's
// coordination state where it hosts the partition and that state is newer.
func (n *Node) withOwners(queue QueueInfo) QueueInfo {
	shards := n.view.Load().shards
	queue.Partitions = slices.Clone(queue.Partitions)
	for index, partition := range queue.Partitions {
		hosted, found := shards[partition.ShardID]
		if found && hosted.State.Epoch >= partition.Epoch {
			queue.Partitions[index].Owner = hosted.State.Owner
			queue.Partitions[index].Epoch = hosted.State.Epoch
		}
	}
	return queue
}
