package actors

// Replication's series (docs/operations.md lists them): records and bytes
// an owner pushed to its followers, records a replica fetched (the pull
// path), snapshots a replica installed or refused (partition_snapshot.go),
// and the failovers a node ran as the recovering replica with
// their duration from the start of the recovery to the first admission.

import "github.com/prometheus/client_golang/prometheus"

type replicationMetrics struct {
	pushedRecords, pushedBytes, fetchedRecords, failovers *prometheus.CounterVec
	snapshotsInstalled, snapshotsRefused                  *prometheus.CounterVec
	failoverSeconds                                       *prometheus.HistogramVec
}

func newReplicationMetrics(registry *prometheus.Registry) *replicationMetrics {
	counters := func(name, help string) *prometheus.CounterVec {
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"queue"})
		registry.MustRegister(vec)
		return vec
	}
	m := &replicationMetrics{
		pushedRecords: counters("fibril_replication_pushed_records_total",
			"Records this node pushed to followers as a queue's owner (every follower counts)."),
		pushedBytes: counters("fibril_replication_pushed_bytes_total",
			"Encoded record bytes this node pushed to followers as a queue's owner."),
		fetchedRecords: counters("fibril_replication_fetched_records_total",
			"Records this node's replicas fetched (catch-up and recovery transfers), appended durably."),
		snapshotsInstalled: counters("fibril_replication_snapshots_installed_total",
			"Snapshots this node's replicas installed to catch up from below their source's retained records."),
		snapshotsRefused: counters("fibril_replication_snapshots_refused_total",
			"Snapshots this node's replicas refused (they did not verify, or did not install); the replica asked again."),
		failovers: counters("fibril_failovers_total",
			"Recoveries this node ran that ended with it serving the queue under a new epoch."),
		failoverSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fibril_failover_seconds",
			Help:    "Time from the start of a recovery this node ran to its epoch serving (detection not included).",
			Buckets: latencyBuckets}, []string{"queue"}),
	}
	registry.MustRegister(m.failoverSeconds)
	return m
}

// dropQueue removes a deleted queue's series.
func (m *replicationMetrics) dropQueue(name string) {
	labels := prometheus.Labels{"queue": name}
	for _, vec := range []*prometheus.CounterVec{m.pushedRecords, m.pushedBytes, m.fetchedRecords, m.failovers,
		m.snapshotsInstalled, m.snapshotsRefused} {
		vec.DeletePartialMatch(labels)
	}
	m.failoverSeconds.DeletePartialMatch(labels)
}
