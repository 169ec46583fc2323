package actors

// The gauges of each queue's state, read at scrape time. Collect asks the
// broker for every queue's info (each partition answers from its own
// state, within infoTimeout) and turns the answers into constant metrics,
// so a scrape sees exactly what GET /api/queues would say at that moment
// and no partition keeps gauges of its own up to date.
//
// Families (label queue on each; docs/operations.md has the full list):
//
//	fibril_queue_ready_messages, _leased_messages, _delayed_messages  counts in messages
//	fibril_queue_consumers                                             live subscriptions
//	fibril_queue_unsynced_records, _unsynced_bytes                     written, not yet durable
//	fibril_queue_last_sync_timestamp_seconds                           last completed sync (absent before one)
//	fibril_queue_fenced, fibril_log_latched                            0 or 1
//	fibril_queue_info                                                  1, with mode, policy and owner labels
//	fibril_queue_replica_lag_records                                   per replica (labels queue, replica):
//	                                                                   emitted once replication reports progress
//	fibril_queue_dedup_entries, fibril_queue_dedup_evicted_early_total queues that deduplicate only
//	fibril_queue_mode                                                  1 per (mode, state): state "applied" or "desired"
//	fibril_queue_mode_revision                                         the applied mode revision (0: as declared)
//	fibril_queue_mode_change_pending                                   1 while a change is pending (label mode: its target)
//	fibril_queue_mode_change_pending_seconds                           how long it has been pending
//	fibril_queue_replica_mode_revision                                 per replica, from the owner: the revision it applied
//
// The replica gauge is described from the start so dashboards and alerts
// can be written against it; replicaLag is where replication will fill it.

import (
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/wire"
	"github.com/prometheus/client_golang/prometheus"
)

type queueStateCollector struct {
	metrics *Metrics
	source  atomic.Pointer[func() []wire.QueueInfo]

	ready, leased, delayed, consumers *prometheus.Desc
	unsyncedRecords, unsyncedBytes    *prometheus.Desc
	lastSync, fenced, latched, info   *prometheus.Desc
	replicaLag, copies                *prometheus.Desc
	dedupEntries, dedupEvictedEarly   *prometheus.Desc
	mode, modeRevision, modePending   *prometheus.Desc
	modePendingSeconds, replicaMode   *prometheus.Desc
	commitWait, replicaAdmits         *prometheus.Desc
}

func newQueueStateCollector(m *Metrics) *queueStateCollector {
	queue := []string{"queue"}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(append([]string(nil), queue...), labels...), nil)
	}
	return &queueStateCollector{
		metrics: m,
		ready:   desc("fibril_queue_ready_messages", "Messages ready for delivery now."),
		leased:  desc("fibril_queue_leased_messages", "Messages delivered and not yet settled."),
		delayed: desc("fibril_queue_delayed_messages", "Messages waiting out a nack or redelivery delay."),
		consumers: desc("fibril_queue_consumers",
			"Live subscriptions on the queue."),
		unsyncedRecords: desc("fibril_queue_unsynced_records",
			"Log records written (handed to the OS) but not yet durable (covered by an fsync); acks and leases are records too."),
		unsyncedBytes: desc("fibril_queue_unsynced_bytes", "Log bytes written but not yet durable."),
		lastSync: desc("fibril_queue_last_sync_timestamp_seconds",
			"When the queue's log last completed a sync (Unix time); absent before the first."),
		fenced:  desc("fibril_queue_fenced", "1 while the queue refuses publishes after a storage fault."),
		latched: desc("fibril_log_latched", "1 once the queue's log latched after a failed write or fsync."),
		info: desc("fibril_queue_info", "Always 1; the labels carry the queue's mode, replication policy and owner.",
			"mode", "policy", "owner"),
		replicaLag: desc("fibril_queue_replica_lag_records",
			"Records a replica is behind the owner at the queue's boundary (emitted once replication reports progress).",
			"replica"),
		copies: desc("fibril_queue_copies",
			"Copies (owner included) that hold every confirmed message at the boundary and keep up: a follower stalled, catching up or unreachable is not counted; reported by the owner.",
			"boundary"),
		commitWait: desc("fibril_queue_commit_wait_seconds",
			"How long the oldest record the owner holds at the queue's boundary has waited for the quorum frontier; it grows while confirms and deliveries are stuck. Reported by the owner."),
		replicaAdmits: desc("fibril_queue_replica_in_sync",
			"1 while a follower's link keeps up (in sync or pushing); 0 while it is stalled, catching up, probing, unreachable or latched. Reported by the owner.",
			"replica"),
		dedupEntries: desc("fibril_queue_dedup_entries",
			"Keys the queue's deduplication table holds (producer pairs and publisher-given message ids); only for queues with a dedup window."),
		dedupEvictedEarly: desc("fibril_queue_dedup_evicted_early_total",
			"Deduplication entries that left at dedup_max_entries before their window ended; while it grows the effective window is shorter than declared."),
		mode: desc("fibril_queue_mode",
			"Always 1: the mode in force (state applied) and the mode the newest recorded revision names (state desired).",
			"mode", "state"),
		modeRevision: desc("fibril_queue_mode_revision", "The applied mode revision; 0 means the mode the queue was declared with."),
		modePending: desc("fibril_queue_mode_change_pending",
			"1 while a mode change is recorded and not applied (it waits for the copies it needs to be durable past it).", "mode"),
		modePendingSeconds: desc("fibril_queue_mode_change_pending_seconds",
			"How long the pending mode change has waited; absent when none is pending."),
		replicaMode: desc("fibril_queue_replica_mode_revision",
			"The mode revision a replica applied, as the owner derives it from the replica's durable position.", "replica"),
	}
}

func (c *queueStateCollector) setSource(read func() []wire.QueueInfo) { c.source.Store(&read) }

func (c *queueStateCollector) Describe(descs chan<- *prometheus.Desc) {
	for _, desc := range []*prometheus.Desc{c.ready, c.leased, c.delayed, c.consumers, c.unsyncedRecords,
		c.unsyncedBytes, c.lastSync, c.fenced, c.latched, c.info, c.replicaLag, c.copies, c.dedupEntries, c.dedupEvictedEarly,
		c.mode, c.modeRevision, c.modePending, c.modePendingSeconds, c.replicaMode, c.commitWait, c.replicaAdmits} {
		descs <- desc
	}
}

func (c *queueStateCollector) Collect(metrics chan<- prometheus.Metric) {
	read := c.source.Load()
	if read == nil {
		return
	}
	gauge := func(desc *prometheus.Desc, value float64, labels ...string) {
		metrics <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, value, labels...)
	}
	for _, info := range (*read)() {
		name := info.Name
		gauge(c.ready, float64(info.Ready), name)
		gauge(c.leased, float64(info.Leased), name)
		gauge(c.delayed, float64(info.Delayed), name)
		gauge(c.consumers, float64(info.Consumers), name)
		gauge(c.unsyncedRecords, float64(info.UnsyncedRecords), name)
		gauge(c.unsyncedBytes, float64(info.UnsyncedBytes), name)
		if info.LastSyncUnixMs != 0 {
			gauge(c.lastSync, float64(info.LastSyncUnixMs)/1000, name)
		}
		gauge(c.fenced, boolGauge(info.Fenced), name)
		gauge(c.latched, boolGauge(c.isLatched(name)), name)
		gauge(c.info, 1, name, info.Mode.String(), info.Policy, info.Owner)
		for _, lag := range replicaLag(info) {
			gauge(c.replicaLag, float64(lag.records), name, lag.replica)
		}
		if info.WrittenOn != 0 {
			gauge(c.copies, float64(info.WrittenOn), name, "written")
			gauge(c.copies, float64(info.DurableOn), name, "durable")
			gauge(c.commitWait, float64(info.CommitWaitMs)/1000, name)
			for _, replica := range info.Replicas {
				if isFollowerState(replica.State) {
					gauge(c.replicaAdmits, boolGauge(followerKeepsUp(replica.State)), name, replica.Node)
				}
			}
		}
		gauge(c.mode, 1, name, info.Mode.String(), "applied")
		gauge(c.mode, 1, name, info.Desired().String(), "desired")
		gauge(c.modeRevision, float64(info.ModeRevision), name)
		if change := info.ModeChange; change != nil && change.State == "pending" {
			gauge(c.modePending, 1, name, change.Mode.String())
			gauge(c.modePendingSeconds, max(float64(time.Now().UnixMilli()-change.SinceUnixMs)/1000, 0), name)
		} else {
			gauge(c.modePending, 0, name, info.Desired().String())
		}
		for _, replica := range info.Replicas {
			if replica.AppliedMode != wire.ModeUnset {
				gauge(c.replicaMode, float64(replica.ModeRevision), name, replica.Node)
			}
		}
		if d := info.Dedup; d != nil {
			gauge(c.dedupEntries, float64(d.Entries), name)
			metrics <- prometheus.MustNewConstMetric(c.dedupEvictedEarly, prometheus.CounterValue, float64(d.EvictedEarly), name)
		}
	}
}

func (c *queueStateCollector) isLatched(name string) bool {
	c.metrics.mu.Lock()
	q, ok := c.metrics.queues[name]
	c.metrics.mu.Unlock()
	return ok && q.latched.Load()
}

// replicaProgress is one follower's distance from the owner.
type replicaProgress struct {
	replica string
	records uint64
}

// replicaLag is each follower's lag behind the owner at the queue's
// boundary, from the owner's queue info (only the owner lists its
// followers' progress with their states; elsewhere nothing is reported).
func replicaLag(info wire.QueueInfo) []replicaProgress {
	var owner *wire.ReplicaInfo
	for i := range info.Replicas {
		if info.Replicas[i].State == "owner" {
			owner = &info.Replicas[i]
		}
	}
	if owner == nil {
		return nil
	}
	buffered := info.Mode == wire.ModeBuffered
	at := func(replica wire.ReplicaInfo) uint64 {
		if buffered {
			return max(replica.WrittenNext, replica.DurableNext)
		}
		return replica.DurableNext
	}
	lags := make([]replicaProgress, 0, len(info.Replicas)-1)
	for _, replica := range info.Replicas {
		if replica.Node == owner.Node {
			continue
		}
		lag := uint64(0)
		if ahead, behind := at(*owner), at(replica); ahead > behind {
			lag = ahead - behind
		}
		lags = append(lags, replicaProgress{replica: replica.Node, records: lag})
	}
	return lags
}

func boolGauge(value bool) float64 {
	if value {
		return 1
	}
	return 0
}
