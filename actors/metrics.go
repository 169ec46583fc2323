package actors

// Metrics are one broker's counters and gauges, in their own metrics.Set so
// several brokers in one process (tests) never share a series. The HTTP
// endpoint exports them with WritePrometheus. Every series that reports
// progress names its boundary: confirms carry boundary="written" or
// "durable", and lag gauges measure written records not yet durable.
//
// Per-queue series carry a queue label and are removed when the queue is
// deleted. Hot paths update counters once per batch, never per message.
//
// Sync latency (fibril_sync_seconds) covers only the syncs the broker
// issues itself, the explicit ones (Broker.SyncQueue), timed by the sync
// scheduler from the call to log.Sync to its return. Background syncs start
// inside the log on a tick, and durable appends fsync inside its pipeline;
// the log reports neither's duration, so neither is timed, and the series'
// help line says so.

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// Metrics is the broker's metrics hook.
type Metrics struct {
	set *metrics.Set

	sessionsOpen    atomic.Int64
	SessionsOpened  *metrics.Counter // connections accepted since start
	ProtocolErrors  *metrics.Counter // connections closed for a bad frame or hello
	fencedQueues    atomic.Int64
	restartsTotalFn func() uint64

	mu     sync.Mutex
	queues map[string]*queueMetrics
}

// queueMetrics are one queue's series. Gauges read atomics the queue's
// actors store.
type queueMetrics struct {
	name  string
	names []string // every series name, for removal

	publishes        *metrics.Counter // messages accepted for appending
	publishBytes     *metrics.Counter // their payload bytes
	confirms         *metrics.Counter // messages confirmed, at the queue's boundary
	rejects          *metrics.Counter // messages negatively confirmed
	deliveries       *metrics.Counter // deliveries sent (first and repeated)
	redeliveries     *metrics.Counter // deliveries marked redelivered
	deliveryBytes    *metrics.Counter
	acks             *metrics.Counter
	nacks            *metrics.Counter
	releases         *metrics.Counter
	discards         *metrics.Counter
	expiries         *metrics.Counter // leases that expired
	deadLetters      *metrics.Counter // messages handed to a dead-letter queue (or dropped)
	appendSeconds    *metrics.Histogram
	syncSeconds      *metrics.Histogram // explicit syncs only; see syncSecondsHelp
	restarts         *metrics.Counter
	durableLagRecord atomic.Uint64
	durableLagBytes  atomic.Uint64
	latched          atomic.Bool
}

func newMetrics(restartsTotal func() uint64) *Metrics {
	m := &Metrics{set: metrics.NewSet(), queues: make(map[string]*queueMetrics), restartsTotalFn: restartsTotal}
	m.SessionsOpened = m.set.NewCounter("fibril_sessions_opened_total")
	m.ProtocolErrors = m.set.NewCounter("fibril_protocol_errors_total")
	m.set.NewGauge("fibril_sessions_open", func() float64 { return float64(m.sessionsOpen.Load()) })
	m.set.NewGauge("fibril_fenced_queues", func() float64 { return float64(m.fencedQueues.Load()) })
	m.set.NewGauge("fibril_actor_restarts_total", func() float64 { return float64(m.restartsTotalFn()) })
	m.set.NewGauge("fibril_latched_logs", func() float64 { return float64(m.latchedLogs()) })
	return m
}

// Set returns the underlying metrics set.
func (m *Metrics) Set() *metrics.Set { return m.set }

// syncSecondsHelp says what fibril_sync_seconds times, and what it does
// not: the metrics library writes no help of its own, so WritePrometheus
// writes this line.
const syncSecondsHelp = "# HELP fibril_sync_seconds Latency of the log syncs the broker issues itself " +
	"(explicit syncs: POST /api/queues/{name}/sync), from the call to log.Sync to its return, waiting in " +
	"the log's pipeline included. Background syncs the log starts on its own and the fsyncs of durable " +
	"appends are not timed: the log does not report their duration.\n"

// WritePrometheus writes every series in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) {
	_, _ = io.WriteString(w, syncSecondsHelp)
	m.set.WritePrometheus(w)
}

func (m *Metrics) latchedLogs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	count := 0
	for _, q := range m.queues {
		if q.latched.Load() {
			count++
		}
	}
	return count
}

// forQueue returns the queue's series, creating them on first use.
func (m *Metrics) forQueue(name string, boundary string) *queueMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q, ok := m.queues[name]; ok {
		return q
	}
	q := &queueMetrics{name: name}
	counter := func(series string, extra string) *metrics.Counter {
		full := fmt.Sprintf(`%s{queue=%q%s}`, series, name, extra)
		q.names = append(q.names, full)
		return m.set.GetOrCreateCounter(full)
	}
	q.publishes = counter("fibril_publishes_total", "")
	q.publishBytes = counter("fibril_publish_bytes_total", "")
	q.confirms = counter("fibril_confirms_total", fmt.Sprintf(`,boundary=%q`, boundary))
	q.rejects = counter("fibril_publish_rejects_total", "")
	q.deliveries = counter("fibril_deliveries_total", "")
	q.redeliveries = counter("fibril_redeliveries_total", "")
	q.deliveryBytes = counter("fibril_delivery_bytes_total", "")
	q.acks = counter("fibril_settles_total", `,kind="ack"`)
	q.nacks = counter("fibril_settles_total", `,kind="nack"`)
	q.releases = counter("fibril_settles_total", `,kind="release"`)
	q.discards = counter("fibril_settles_total", `,kind="discard"`)
	q.expiries = counter("fibril_lease_expiries_total", "")
	q.deadLetters = counter("fibril_dead_letters_total", "")
	q.restarts = counter("fibril_queue_restarts_total", "")
	histogram := fmt.Sprintf(`fibril_append_seconds{queue=%q}`, name)
	q.names = append(q.names, histogram)
	q.appendSeconds = m.set.GetOrCreateHistogram(histogram)
	histogram = fmt.Sprintf(`fibril_sync_seconds{queue=%q}`, name)
	q.names = append(q.names, histogram)
	q.syncSeconds = m.set.GetOrCreateHistogram(histogram)
	for _, gauge := range []struct {
		series string
		read   func() float64
	}{
		{"fibril_durable_lag_records", func() float64 { return float64(q.durableLagRecord.Load()) }},
		{"fibril_durable_lag_bytes", func() float64 { return float64(q.durableLagBytes.Load()) }},
		{"fibril_log_latched", func() float64 {
			if q.latched.Load() {
				return 1
			}
			return 0
		}},
	} {
		full := fmt.Sprintf(`%s{queue=%q}`, gauge.series, name)
		q.names = append(q.names, full)
		m.set.GetOrCreateGauge(full, gauge.read)
	}
	m.queues[name] = q
	return q
}

// dropQueue removes a deleted queue's series.
func (m *Metrics) dropQueue(name string) {
	m.mu.Lock()
	q, ok := m.queues[name]
	delete(m.queues, name)
	m.mu.Unlock()
	if !ok {
		return
	}
	for _, series := range q.names {
		m.set.UnregisterMetric(series)
	}
}

// settle counts settles of one kind.
func (q *queueMetrics) settle(kind settleKind, count int) {
	switch kind {
	case settleAck:
		q.acks.Add(count)
	case settleNack:
		q.nacks.Add(count)
	case settleRelease:
		q.releases.Add(count)
	case settleDiscard:
		q.discards.Add(count)
	}
}
