package cluster

// The catalog is the cluster-wide record of queue declarations, the node
// list and the runtime settings. It is replicated by the catalog Raft shard
// on every node; this file is its pure core: the state, the commands and the
// deterministic Apply that the state machine (catalog_sm.go) runs on every
// replica. Everything here is encoded with msgpack.
//
// Rules applied here:
//   - A declaration is fixed at first declare. A re-declare that names a
//     different mode is refused (ErrModeConflict); one that names a
//     different policy, replica count, partition count or options is refused
//     (ErrDeclarationConflict); fields left out keep the current value.
//   - Placement and coordination shard ids are chosen inside Apply, so every
//     replica of the catalog agrees on them.
//   - The revision counts state changes; a command that changes nothing
//     (an identical re-declare, a stale owner hint) leaves it alone.
//
// Invariant: every partition's ShardID is >= FirstCoordinationShardID and
// < NextShardID, and no two partitions share one.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

const (
	// CatalogShardID is the Raft shard of the catalog, on every node.
	CatalogShardID uint64 = 1
	// FirstCoordinationShardID is the first shard id handed to a queue
	// partition's coordination shard. Ids are never reused.
	FirstCoordinationShardID uint64 = 1000
	// MaxPartitions bounds the partitions of one queue.
	MaxPartitions = 64
	// MaxQueueNameBytes bounds queue names (the protocol's rule).
	MaxQueueNameBytes = wire.MaxQueueNameBytes
	// ServingReplicated is QueueInfo.Serving: every replica holds the
	// queue's log, the owner serves clients and confirms once the policy's
	// copies hold a record.
	ServingReplicated = "replicated"
)

// QueueDecl is a declare request. Zero fields mean "not named": on a new
// queue they take the defaults, on an existing queue they keep its value.
type QueueDecl struct {
	Name       string            `msgpack:"name" json:"name"`
	Mode       Mode              `msgpack:"mode" json:"mode,omitempty"`
	Policy     string            `msgpack:"policy" json:"policy,omitempty"`
	Replicas   int               `msgpack:"replicas" json:"replicas,omitempty"`
	Partitions int               `msgpack:"partitions" json:"partitions,omitempty"`
	Options    map[string]string `msgpack:"options" json:"options,omitempty"`
}

// QueueInfo is a queue as the catalog records it.
type QueueInfo struct {
	Name string `msgpack:"name" json:"name"`
	Mode Mode   `msgpack:"mode" json:"mode"`
	// Policy is the canonical policy ("majority_durable", "replica_durable:2").
	Policy string `msgpack:"policy" json:"policy"`
	// WriteCopies is the policy's write threshold W, owner included.
	WriteCopies int               `msgpack:"write_copies" json:"write_copies"`
	Replicas    int               `msgpack:"replicas" json:"replicas"`
	Options     map[string]string `msgpack:"options" json:"options,omitempty"`
	// Revision is the catalog revision at which the queue was declared.
	Revision   uint64          `msgpack:"revision" json:"revision"`
	Partitions []PartitionInfo `msgpack:"partitions" json:"partitions"`
	// Serving says who serves the data (ServingReplicated).
	Serving string `msgpack:"serving" json:"serving"`
	// ModeRevision is the newest mode revision the queue's owner applied
	// (0: the mode is the declared one) and AppliedMode that revision's
	// mode. Mode stays the declared one: every copy opens its log with it,
	// and the log's own revisions say what is in force.
	ModeRevision uint64 `msgpack:"mode_revision,omitempty" json:"mode_revision,omitempty"`
	AppliedMode  Mode   `msgpack:"applied_mode,omitempty" json:"applied_mode,omitempty"`
}

// ModeInForce is the mode of the newest applied revision, else the
// declared mode.
func (q *QueueInfo) ModeInForce() Mode {
	if q.ModeRevision != 0 {
		return q.AppliedMode
	}
	return q.Mode
}

// PartitionInfo is one partition of a queue.
type PartitionInfo struct {
	Index int `msgpack:"index" json:"index"`
	// ShardID is the partition's coordination shard.
	ShardID uint64 `msgpack:"shard_id" json:"shard_id"`
	// Replicas is the replica set, preferred owner first.
	Replicas []string `msgpack:"replicas" json:"replicas"`
	// Owner and Epoch are the owner as last recorded. In the catalog they are
	// a hint copied from the coordination shard; a node that replicates the
	// partition reports its own coordination state instead.
	Owner string `msgpack:"owner" json:"owner"`
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
	// Members are the Raft replica ids of the coordination shard's members
	// by node id: the nodes' ids when the partition was created, and a
	// replacement's new id once it replaced one (Joined then names it:
	// it joins the shard instead of starting as an initial member).
	Members map[string]uint64 `msgpack:"members" json:"members,omitempty"`
	Joined  []string          `msgpack:"joined" json:"joined,omitempty"`
}

// NodeInfo is a node as the catalog records it.
type NodeInfo struct {
	ID            string `msgpack:"id" json:"id"`
	ClientAddress string `msgpack:"client_address" json:"client_address"`
	PeerAddress   string `msgpack:"peer_address" json:"peer_address"`
	RaftAddress   string `msgpack:"raft_address" json:"raft_address"`
	HTTPAddress   string `msgpack:"http_address" json:"http_address"`
	// ReplicaID is the node's current Raft replica id; it changes when a
	// node whose data directory was lost rejoins as a new replica.
	ReplicaID uint64 `msgpack:"replica_id" json:"replica_id"`
	// Replaced counts those rejoins.
	Replaced int `msgpack:"replaced" json:"replaced,omitempty"`
	// Replacing is the replica id a replacement under way moves the node
	// to (commandBeginReplace; 0 when none is under way). Only the
	// replacement it names may record its id: a later one supersedes it.
	Replacing uint64 `msgpack:"replacing" json:"replacing,omitempty"`
	// Retired lists every replica id the node had or was being moved to
	// and no longer has. A retired id is never recorded again, and a
	// replacement removes each from every shard it is still a member of.
	Retired []uint64 `msgpack:"retired" json:"retired,omitempty"`
}

// Settings are the runtime settings held by the catalog, first copied from
// the config of the node that initialised it and changed with SetSetting.
type Settings struct {
	DefaultReplicas          int    `msgpack:"default_replicas" json:"default_replicas"`
	DefaultPolicy            string `msgpack:"default_policy" json:"default_policy"`
	BackgroundSyncIntervalMs int64  `msgpack:"background_sync_interval_ms" json:"background_sync_interval_ms"`
}

// Setting keys accepted by SetSetting.
const (
	SettingDefaultReplicas        = "default_replicas"
	SettingDefaultPolicy          = "default_policy"
	SettingBackgroundSyncInterval = "background_sync_interval"
)

// CatalogState is the whole catalog.
type CatalogState struct {
	Revision    uint64                `msgpack:"revision"`
	Initialized bool                  `msgpack:"initialized"`
	Nodes       []NodeInfo            `msgpack:"nodes"`
	Settings    Settings              `msgpack:"settings"`
	Queues      map[string]*QueueInfo `msgpack:"queues"`
	NextShardID uint64                `msgpack:"next_shard_id"`
}

func newCatalogState() *CatalogState {
	return &CatalogState{Queues: map[string]*QueueInfo{}, NextShardID: FirstCoordinationShardID}
}

type commandKind uint8

const (
	commandInit commandKind = iota + 1
	commandDeclare
	commandDelete
	commandSetSetting
	commandOwnerHint
	commandReplaceReplica
	commandAppliedMode
	commandBeginReplace
)

// String names a command kind ("delete", ...), for logs and test seams.
func (kind commandKind) String() string {
	names := map[commandKind]string{commandInit: "init", commandDeclare: "declare", commandDelete: "delete",
		commandSetSetting: "set-setting", commandOwnerHint: "owner-hint", commandReplaceReplica: "replace-replica",
		commandAppliedMode: "applied-mode", commandBeginReplace: "begin-replace"}
	if name, known := names[kind]; known {
		return name
	}
	return fmt.Sprintf("command-%d", uint8(kind))
}

// catalogCommand is one proposal to the catalog shard.
type catalogCommand struct {
	Kind    commandKind  `msgpack:"kind"`
	Init    *initCommand `msgpack:"init,omitempty"`
	Declare *QueueDecl   `msgpack:"declare,omitempty"`
	Name    string       `msgpack:"name,omitempty"`
	Key     string       `msgpack:"key,omitempty"`
	Value   string       `msgpack:"value,omitempty"`
	Hint    *ownerHint   `msgpack:"hint,omitempty"`
	// ReplicaID is the new replica id of a replaced node (Name), for
	// commandBeginReplace and commandReplaceReplica.
	ReplicaID uint64 `msgpack:"replica_id,omitempty"`
	// Mode is a queue's applied mode revision (commandAppliedMode).
	Mode *appliedMode `msgpack:"mode,omitempty"`
}

// appliedMode records that a queue's owner applied a mode revision
// (a mode change on the existing queue): the catalog's mode follows it, so
// declares and listings name the mode in force. Revisions only grow.
type appliedMode struct {
	Queue    string `msgpack:"queue"`
	Mode     Mode   `msgpack:"mode"`
	Revision uint64 `msgpack:"revision"`
}

// initCommand fills an empty catalog from a node's config. It is proposed
// by every node at start and applies only once.
type initCommand struct {
	Nodes    []NodeInfo `msgpack:"nodes"`
	Settings Settings   `msgpack:"settings"`
}

// ownerHint copies a partition's owner from its coordination shard into
// the catalog, so nodes outside the replica set can redirect clients.
type ownerHint struct {
	Queue     string `msgpack:"queue"`
	Partition int    `msgpack:"partition"`
	ShardID   uint64 `msgpack:"shard_id"`
	Owner     string `msgpack:"owner"`
	Epoch     uint64 `msgpack:"epoch"`
}

// resultCode is the outcome of a command, carried in sm.Result.Value.
type resultCode uint64

const (
	resultOK resultCode = iota
	resultNotInitialized
	resultInvalidDeclaration
	resultInvalidPolicy
	resultModeConflict
	resultDeclarationConflict
	resultQueueNotFound
	resultInvalidSetting
)

// catalogResult is what Apply answers; msgpack-encoded in sm.Result.Data.
type catalogResult struct {
	Code     resultCode `msgpack:"code"`
	Detail   string     `msgpack:"detail,omitempty"`
	Queue    *QueueInfo `msgpack:"queue,omitempty"`
	Created  bool       `msgpack:"created,omitempty"`
	Warnings []string   `msgpack:"warnings,omitempty"`
	Revision uint64     `msgpack:"revision"`
}

// err turns a result back into a package error, or nil.
func (r catalogResult) err() error {
	sentinel := map[resultCode]error{
		resultNotInitialized:      ErrNotReady,
		resultInvalidDeclaration:  ErrInvalidDeclaration,
		resultInvalidPolicy:       ErrInvalidPolicy,
		resultModeConflict:        ErrModeConflict,
		resultDeclarationConflict: ErrDeclarationConflict,
		resultQueueNotFound:       ErrQueueNotFound,
		resultInvalidSetting:      ErrInvalidSetting,
	}[r.Code]
	if r.Code == resultOK {
		return nil
	}
	if sentinel == nil {
		return fmt.Errorf("cluster: unknown catalog result code %d: %s", r.Code, r.Detail)
	}
	return fmt.Errorf("%w: %s", sentinel, r.Detail)
}

func failure(code resultCode, format string, args ...any) catalogResult {
	return catalogResult{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Apply runs one command. It is deterministic: the same state and command
// give the same result and state on every replica.
func (s *CatalogState) Apply(command catalogCommand) catalogResult {
	var result catalogResult
	switch command.Kind {
	case commandInit:
		result = s.applyInit(command.Init)
	case commandDeclare:
		result = s.applyDeclare(command.Declare)
	case commandDelete:
		result = s.applyDelete(command.Name)
	case commandSetSetting:
		result = s.applySetSetting(command.Key, command.Value)
	case commandOwnerHint:
		result = s.applyOwnerHint(command.Hint)
	case commandReplaceReplica:
		result = s.applyReplaceReplica(command.Name, command.ReplicaID)
	case commandAppliedMode:
		result = s.applyAppliedMode(command.Mode)
	case commandBeginReplace:
		result = s.applyBeginReplace(command.Name, command.ReplicaID)
	default:
		result = failure(resultInvalidDeclaration, "unknown command kind %d", command.Kind)
	}
	result.Revision = s.Revision
	return result
}

func (s *CatalogState) applyInit(init *initCommand) catalogResult {
	if s.Initialized {
		return catalogResult{}
	}
	if init == nil || len(init.Nodes) == 0 {
		return failure(resultInvalidSetting, "init needs at least one node")
	}
	s.Initialized = true
	s.Nodes = slices.Clone(init.Nodes)
	s.Settings = init.Settings
	s.Revision++
	return catalogResult{}
}

func (s *CatalogState) applyDeclare(decl *QueueDecl) catalogResult {
	if !s.Initialized {
		return failure(resultNotInitialized, "the catalog has not been initialised")
	}
	if decl == nil {
		return failure(resultInvalidDeclaration, "empty declaration")
	}
	if err := validateQueueName(decl.Name); err != nil {
		return failure(resultInvalidDeclaration, "name: %v", err)
	}
	if decl.Mode > ModeBuffered {
		return failure(resultInvalidDeclaration, "mode: unknown mode %d", decl.Mode)
	}
	if existing, found := s.Queues[decl.Name]; found {
		return checkRedeclare(existing, decl)
	}
	return s.createQueue(decl)
}

// checkRedeclare applies the fixed-at-first-declare rule.
func checkRedeclare(existing *QueueInfo, decl *QueueDecl) catalogResult {
	if decl.Mode != ModeUnset && decl.Mode != existing.ModeInForce() {
		if existing.ModeRevision != 0 {
			return failure(resultModeConflict, "queue %q runs %s since its mode change (revision %d); a re-declare named %s",
				existing.Name, existing.ModeInForce(), existing.ModeRevision, decl.Mode)
		}
		return failure(resultModeConflict, "queue %q was declared %s; a re-declare named %s (the mode is fixed at first declare)", existing.Name, existing.Mode, decl.Mode)
	}
	var warnings []string
	if decl.Policy != "" {
		policy, policyWarnings, err := ResolvePolicy(decl.Policy, existing.Replicas)
		if err != nil {
			return failure(resultInvalidPolicy, "policy: %v", err)
		}
		if policy.String() != existing.Policy {
			return failure(resultDeclarationConflict, "policy: queue %q has %s; a re-declare named %s", existing.Name, existing.Policy, policy)
		}
		warnings = policyWarnings
	}
	if decl.Replicas != 0 && decl.Replicas != existing.Replicas {
		return failure(resultDeclarationConflict, "replicas: queue %q has %d; a re-declare named %d", existing.Name, existing.Replicas, decl.Replicas)
	}
	if decl.Partitions != 0 && decl.Partitions != len(existing.Partitions) {
		return failure(resultDeclarationConflict, "partitions: queue %q has %d; a re-declare named %d", existing.Name, len(existing.Partitions), decl.Partitions)
	}
	if decl.Options != nil && !maps.Equal(decl.Options, existing.Options) {
		return failure(resultDeclarationConflict, "options: queue %q has %v; a re-declare named %v", existing.Name, existing.Options, decl.Options)
	}
	return catalogResult{Queue: existing.clone(), Warnings: warnings}
}

func (s *CatalogState) createQueue(decl *QueueDecl) catalogResult {
	replicas := decl.Replicas
	if replicas == 0 {
		replicas = min(s.Settings.DefaultReplicas, len(s.Nodes))
	}
	if replicas < 1 || replicas > len(s.Nodes) {
		return failure(resultInvalidDeclaration, "replicas: must be between 1 and the number of nodes (%d), got %d", len(s.Nodes), replicas)
	}
	partitions := decl.Partitions
	if partitions == 0 {
		partitions = 1
	}
	if partitions < 1 || partitions > MaxPartitions {
		return failure(resultInvalidDeclaration, "partitions: must be between 1 and %d, got %d", MaxPartitions, partitions)
	}
	policy, warnings, result := s.choosePolicy(decl, replicas)
	if result.Code != resultOK {
		return result
	}
	nodeIDs := make([]string, 0, len(s.Nodes))
	replicaIDs := map[string]uint64{}
	for _, node := range s.Nodes {
		nodeIDs = append(nodeIDs, node.ID)
		replicaIDs[node.ID] = node.ReplicaID
	}
	s.Revision++
	queue := &QueueInfo{
		Name: decl.Name, Mode: policy.Mode(), Policy: policy.String(), WriteCopies: policy.Copies,
		Replicas: replicas, Options: maps.Clone(decl.Options), Revision: s.Revision, Serving: ServingReplicated,
	}
	for index, replicaSet := range place(nodeIDs, loadOf(s.Queues), replicas, partitions) {
		members := map[string]uint64{}
		for _, id := range replicaSet {
			members[id] = replicaIDs[id]
		}
		queue.Partitions = append(queue.Partitions, PartitionInfo{Index: index, ShardID: s.NextShardID,
			Replicas: replicaSet, Members: members})
		s.NextShardID++
	}
	s.Queues[queue.Name] = queue
	return catalogResult{Queue: queue.clone(), Created: true, Warnings: warnings}
}

// choosePolicy picks the policy of a new queue: the named one (which must
// agree with a named mode), else the mode's default, else the cluster's.
func (s *CatalogState) choosePolicy(decl *QueueDecl, replicas int) (Policy, []string, catalogResult) {
	switch {
	case decl.Policy != "":
		policy, warnings, err := ResolvePolicy(decl.Policy, replicas)
		if err != nil {
			return Policy{}, nil, failure(resultInvalidPolicy, "policy: %v", err)
		}
		if decl.Mode != ModeUnset && decl.Mode != policy.Mode() {
			return Policy{}, nil, failure(resultInvalidDeclaration, "mode: %s contradicts policy %s (mode %s)", decl.Mode, policy, policy.Mode())
		}
		return policy, warnings, catalogResult{}
	case decl.Mode != ModeUnset:
		return defaultPolicyFor(decl.Mode, replicas), nil, catalogResult{}
	case s.Settings.DefaultPolicy != "":
		policy, warnings, err := ResolvePolicy(s.Settings.DefaultPolicy, replicas)
		if err != nil {
			return Policy{}, nil, failure(resultInvalidPolicy, "cluster default policy: %v", err)
		}
		return policy, warnings, catalogResult{}
	}
	return defaultPolicyFor(ModeBuffered, replicas), nil, catalogResult{}
}

func (s *CatalogState) applyDelete(name string) catalogResult {
	if _, found := s.Queues[name]; !found {
		return failure(resultQueueNotFound, "queue %q", name)
	}
	delete(s.Queues, name)
	s.Revision++
	return catalogResult{}
}

func (s *CatalogState) applySetSetting(key, value string) catalogResult {
	settings := s.Settings
	switch key {
	case SettingDefaultReplicas:
		replicas, err := strconv.Atoi(value)
		if err != nil || replicas < 1 || replicas > len(s.Nodes) {
			return failure(resultInvalidSetting, "%s: must be between 1 and %d, got %q", key, len(s.Nodes), value)
		}
		settings.DefaultReplicas = replicas
	case SettingDefaultPolicy:
		if value != "" {
			if _, _, err := ResolvePolicy(value, settings.DefaultReplicas); err != nil {
				return failure(resultInvalidSetting, "%s: %v", key, err)
			}
		}
		settings.DefaultPolicy = value
	case SettingBackgroundSyncInterval:
		interval, err := time.ParseDuration(value)
		if err != nil || interval < 0 || interval > time.Minute {
			return failure(resultInvalidSetting, "%s: want a duration between 0s and 1m, got %q", key, value)
		}
		settings.BackgroundSyncIntervalMs = interval.Milliseconds()
	default:
		return failure(resultInvalidSetting, "unknown key %q", key)
	}
	if settings != s.Settings {
		s.Settings = settings
		s.Revision++
	}
	return catalogResult{}
}

func (s *CatalogState) applyOwnerHint(hint *ownerHint) catalogResult {
	if hint == nil {
		return failure(resultInvalidDeclaration, "empty owner hint")
	}
	queue, found := s.Queues[hint.Queue]
	if !found || hint.Partition < 0 || hint.Partition >= len(queue.Partitions) {
		return failure(resultQueueNotFound, "queue %q partition %d", hint.Queue, hint.Partition)
	}
	partition := &queue.Partitions[hint.Partition]
	// A hint for a deleted and re-declared queue names the old shard; an
	// older epoch is stale. Both are ignored without error.
	if partition.ShardID != hint.ShardID || hint.Epoch <= partition.Epoch {
		return catalogResult{}
	}
	partition.Owner, partition.Epoch = hint.Owner, hint.Epoch
	s.Revision++
	return catalogResult{}
}

// applyAppliedMode takes a queue's newer applied mode revision; an older
// or equal revision, or one for a queue no longer declared, changes
// nothing.
func (s *CatalogState) applyAppliedMode(applied *appliedMode) catalogResult {
	if applied == nil || applied.Revision == 0 || applied.Mode < ModeDurable || applied.Mode > ModeBuffered {
		return failure(resultInvalidDeclaration, "an applied mode needs a queue, a mode and a revision above 0")
	}
	queue, found := s.Queues[applied.Queue]
	if !found {
		return failure(resultQueueNotFound, "queue %q", applied.Queue)
	}
	if applied.Revision <= queue.ModeRevision {
		return catalogResult{Queue: queue.clone()}
	}
	queue.AppliedMode, queue.ModeRevision = applied.Mode, applied.Revision
	s.Revision++
	return catalogResult{Queue: queue.clone()}
}

// applyBeginReplace records that a replacement of node's replica by
// replicaID starts (Node.ReplaceReplica, before any membership change): a
// replacement under way under another id is superseded, its id retired.
// Beginning again under the same id, or under the id already recorded,
// changes nothing.
func (s *CatalogState) applyBeginReplace(node string, replicaID uint64) catalogResult {
	index, refusal := s.replacementTarget(node, replicaID)
	if refusal != nil {
		return *refusal
	}
	info := &s.Nodes[index]
	if info.ReplicaID == replicaID || info.Replacing == replicaID {
		return catalogResult{} // begun or finished already
	}
	if info.Replacing != 0 {
		info.Retired = append(slices.Clone(info.Retired), info.Replacing)
	}
	info.Replacing = replicaID
	s.Revision++
	return catalogResult{}
}

// applyReplaceReplica records that node rejoined with a new Raft replica
// id (its data directory was lost): its entry and every partition it
// replicates name the new id, and it joins those shards. The membership
// changes of the shards themselves were made before (Node.ReplaceReplica).
// It is refused when another replacement began since (the node's
// Replacing names another id) or the id was retired.
func (s *CatalogState) applyReplaceReplica(node string, replicaID uint64) catalogResult {
	index, refusal := s.replacementTarget(node, replicaID)
	if refusal != nil {
		return *refusal
	}
	info := &s.Nodes[index]
	if info.ReplicaID == replicaID {
		return catalogResult{} // applied already
	}
	if info.Replacing != 0 && info.Replacing != replicaID {
		return failure(resultInvalidSetting, "replace replica: %s's replacement by %d was superseded by one by %d",
			node, replicaID, info.Replacing)
	}
	info.Retired = append(slices.Clone(info.Retired), info.ReplicaID)
	info.ReplicaID, info.Replacing = replicaID, 0
	info.Replaced++
	for _, queue := range s.Queues {
		for i := range queue.Partitions {
			partition := &queue.Partitions[i]
			if _, member := partition.Members[node]; member {
				partition.Members[node] = replicaID
				if !slices.Contains(partition.Joined, node) {
					partition.Joined = append(partition.Joined, node)
				}
			}
		}
	}
	s.Revision++
	return catalogResult{}
}

// replacementTarget finds node's entry for a replacement by replicaID, or
// the refusal: an unknown node, id 0, another node's id or a retired one.
func (s *CatalogState) replacementTarget(node string, replicaID uint64) (int, *catalogResult) {
	index := slices.IndexFunc(s.Nodes, func(info NodeInfo) bool { return info.ID == node })
	if index < 0 || replicaID == 0 {
		refusal := failure(resultInvalidSetting, "replace replica: unknown node %q or replica id 0", node)
		return 0, &refusal
	}
	for _, other := range s.Nodes {
		if other.ID != node && (other.ReplicaID == replicaID || other.Replacing == replicaID || slices.Contains(other.Retired, replicaID)) {
			refusal := failure(resultInvalidSetting, "replace replica: id %d is %s's", replicaID, other.ID)
			return 0, &refusal
		}
	}
	if slices.Contains(s.Nodes[index].Retired, replicaID) {
		refusal := failure(resultInvalidSetting, "replace replica: id %d of %s was retired (a later replacement superseded it)", replicaID, node)
		return 0, &refusal
	}
	return index, nil
}

// validateQueueName applies the protocol's queue-name rule to every
// declaration the catalog applies, including commands proposed through
// Raft directly, which pass no session.
func validateQueueName(name string) error { return wire.ValidateQueueName(name) }

// clone is a deep copy, so callers never share slices or maps with the
// state machine.
func (q *QueueInfo) clone() *QueueInfo {
	out := *q
	out.Options = maps.Clone(q.Options)
	out.Partitions = make([]PartitionInfo, len(q.Partitions))
	for index, partition := range q.Partitions {
		partition.Replicas = slices.Clone(partition.Replicas)
		partition.Members = maps.Clone(partition.Members)
		partition.Joined = slices.Clone(partition.Joined)
		out.Partitions[index] = partition
	}
	return &out
}

func (s *CatalogState) clone() *CatalogState {
	out := *s
	out.Nodes = slices.Clone(s.Nodes)
	out.Queues = make(map[string]*QueueInfo, len(s.Queues))
	for name, queue := range s.Queues {
		out.Queues[name] = queue.clone()
	}
	return &out
}

// node returns the catalog's record of a node.
func (s *CatalogState) node(id string) (NodeInfo, bool) {
	for _, node := range s.Nodes {
		if node.ID == id {
			return node, true
		}
	}
	return NodeInfo{}, false
}
