package cluster

import "errors"

// Errors returned by this package. Callers test them with errors.Is; the
// returned errors wrap them with the detail (field, queue, node).
var (
	// ErrInvalidConfig means the cluster config file is malformed or holds a
	// bad value. The wrapping ConfigError names the field.
	ErrInvalidConfig = errors.New("cluster: invalid config")

	// ErrUnknownNode means a node id is not listed in the config or catalog.
	ErrUnknownNode = errors.New("cluster: unknown node")

	// ErrInvalidPolicy means a replication policy string could not be parsed
	// or does not fit the queue's replica count.
	ErrInvalidPolicy = errors.New("cluster: invalid policy")

	// ErrInvalidDeclaration means a declaration is malformed: bad name,
	// replica or partition count out of range, mode contradicting policy.
	ErrInvalidDeclaration = errors.New("cluster: invalid declaration")

	// ErrModeConflict means a re-declare named a mode other than the one the
	// queue was first declared with. The mode is fixed at first declare.
	ErrModeConflict = errors.New("cluster: queue mode conflict")

	// ErrDeclarationConflict means a re-declare named a policy, replica
	// count, partition count or options other than the first declaration's.
	ErrDeclarationConflict = errors.New("cluster: queue declaration conflict")

	// ErrQueueNotFound means the catalog holds no queue of that name.
	ErrQueueNotFound = errors.New("cluster: queue not found")

	// ErrPartitionNotFound means the queue has no partition of that index.
	ErrPartitionNotFound = errors.New("cluster: partition not found")

	// ErrInvalidSetting means an unknown runtime setting key or a bad value.
	ErrInvalidSetting = errors.New("cluster: invalid setting")

	// ErrOwnerUnknown means no owner has been recorded for the partition yet
	// (its coordination shard has not elected one, or this node has not
	// heard of it).
	ErrOwnerUnknown = errors.New("cluster: partition owner unknown")

	// ErrNotReady means the catalog did not answer before the context ended:
	// no leader, no quorum, or the node is still starting. It wraps the last
	// error seen from Raft.
	ErrNotReady = errors.New("cluster: catalog not ready")

	// ErrClosed means the node was closed.
	ErrClosed = errors.New("cluster: node closed")
)
