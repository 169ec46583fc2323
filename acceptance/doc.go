// Package acceptance proves, on a single node and on a cluster, the
// promises of the mode table in DESIGN.md: what a confirm means in a
// durable and in a buffered queue, and which failures may take which
// confirmed messages.
//
// The package has two parts.
//
// A small checker library (history.go, checker.go, summary.go): a History
// records only what clients saw (publishes sent, confirms and refusals
// received, deliveries received, acks handed to the SDK, queue frontiers
// read from queue info) and the boundaries of broker lives (a process
// kill, a power loss, a storage failure, a clean stop). Check turns a
// history into a Result: confirmed, lost, allowed to go (and gone),
// duplicates, and every broken rule (order, identity, unmarked or
// uncounted redeliveries, acked messages coming back within one broker
// life, phantoms). The checker believes only what a client saw: a loss is
// allowed only when the mode's promise allows it and the history cannot
// prove the message had become durable.
//
// The cluster checker (cluster_checker.go) applies the same rules to each
// queue of a cluster history, where a queue's lives end only at faults that
// take its serving copy (a failover, or a power loss of every copy), and
// measures each failover: the time to the first new confirm and to the
// first fresh delivery.
//
// The tests (files ending in _test.go), one per failure case:
//
//	process kill      SIGKILL of the real `fibril serve` under load, restart, drain
//	power loss        in-process broker on vfs.Mem, clients cut, CrashClone, restart
//	storage failure   fsync failure, write failure and ENOSPC on one queue's log
//	checkpoints       power loss before and after a snapshot is published
//	bad input         garbage frames from fuzzed clients beside real clients
//	memory            ready backlog and a stalled consumer against the broker's RSS
//	sustained         a paced run with background sync, checkpoints, rollover, retention
//
// and the cluster fault classes of docs/durability.md ("Cluster faults"):
// three real `fibril serve` processes in network namespaces
// (netns_test.go, cluster_process_test.go) under SIGKILL, SIGSTOP, cuts,
// isolation, wiped data dirs (one followed by the owner's SIGKILL before
// the wiped copy caught up) and a follower down while its owner compacts
// past it (cluster_faults_test.go), and in-process
// clusters on crash-simulating filesystems for power loss, corruption and
// an owner whose queue disk fails while its process runs on
// (cluster_memory_test.go, cluster_disk_test.go); two publishers and two competing consumers
// (cluster_load_test.go) on both modes at a majority and at every copy.
// Compound schedules bring the next kill or pause while the cluster still
// recovers from the last (cluster_compound_test.go), two soak classes
// measure how long a paused or cut-off owner takes to be replaced
// (cluster_failover_time_test.go), and both keep a timeline of every
// node's view of their queue that a failed trial dumps
// (cluster_timeline_test.go).
// The sub-cases that need a new owner to take over sit behind the
// replicationAndFailover switch (cluster_switch_test.go), on since
// replication and failover are merged; TestExactlyOnceAcrossFailover
// publishes idempotently across owner failovers.
//
// `go test ./acceptance` runs the short version of every case. With
// FIBRIL_SOAK=1 the long versions run instead (20 process kills, 200 power
// losses, one million ready messages, the ten-minute sustained run), and
// the test binary prints a summary table at the end. Randomized tests print
// their seed on failure and take FIBRIL_SEED; other knobs are listed in
// docs/durability.md.
package acceptance
