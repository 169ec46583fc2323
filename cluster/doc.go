// Package cluster is Fibril's coordination layer: it reads the cluster
// config file, runs one dragonboat NodeHost per node and keeps the cluster
// catalog agreed through Raft.
//
// The pieces, from the pure core outwards:
//
//   - Config (config.go): the JSON file that lists every node and the cluster
//     settings. LoadConfig decodes it strictly and Validate names the field
//     behind every problem.
//   - Policy (policy.go) and placement (placement.go): parsing of replication
//     policies and the deterministic choice of a replica set per queue
//     partition. Both are plain functions.
//   - Catalog (catalog.go): the catalog state and its commands (initialise,
//     declare, delete, set setting, owner hint), applied by a pure Apply
//     function that the Raft state machine (catalog_sm.go) wraps.
//   - Coordination (coord.go): the per-partition state (epoch, owner, accepted
//     history) held by one Raft shard per queue partition on its replica set.
//     In this version it only elects and records the owner.
//   - Node (node.go, reconcile.go, events.go): the shell around one NodeHost.
//     It starts the catalog shard on every node, starts the coordination
//     shard of every partition this node replicates, claims ownership for
//     the preferred owner, and offers the broker its API: Declare, Lookup,
//     Queues, DeleteQueue, Owner, Status, Watch and Close.
//
// Node methods that talk to Raft (Declare, Lookup, Queues, DeleteQueue,
// SetSetting, WaitReady, WaitOwner) block for up to a Raft round trip and
// retry until their context ends. They must never run inside an actor's
// Receive: run them on their own goroutine and send the result back to the
// actor as a message.
//
// Queue data never goes through Raft: the owner pushes records to its
// followers over peer links. The pure rules of that replication (the
// quorum frontier, the follower link, the follower's push rules and the
// recovery plan) live in package replication, which this package imports.
package cluster
