package actors

// Metrics are one broker's series, in their own Prometheus registry
// (github.com/prometheus/client_golang) so several brokers in one process
// (tests) never share a series. The HTTP endpoint exports them with
// WritePrometheus, in the Prometheus text format with HELP and TYPE for
// every family; docs/operations.md lists them all.
//
// Three kinds of source:
//
//   - counters and histograms updated where things happen, through the
//     children a queue resolves once (queueMetrics); hot paths update
//     them once per batch, or per message with a single atomic add;
//   - gauges of a queue's state (ready, leased, delayed, consumers,
//     unsynced records and bytes, last sync), read from fresh queue infos
//     at scrape time (queueStateCollector), so they are exactly what
//     GET /api/queues would say at that moment;
//   - node gauges read from atomics (sessions, fenced queues, latched logs).
//
// Every series that reports progress names its boundary: confirms carry
// boundary="written" or "durable"; unsynced gauges count written records
// not yet durable.
//
// Per-queue series carry a queue label and are removed when the queue is
// deleted.

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibrilmq/fibril/wire"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// latencyBuckets are the upper bounds (seconds) of every latency
// histogram: 50 µs doubling to about 13 s, which spans a page-cache write
// and a stalled disk.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 19)

// Metrics is the broker's metrics hook.
type Metrics struct {
	registry *prometheus.Registry

	sessionsOpen   atomic.Int64
	SessionsOpened counter // connections accepted since start
	ProtocolErrors counter // connections closed for a bad frame or hello
	fencedQueues   atomic.Int64
	refusals       *prometheus.CounterVec
	// Security and bounds (access.go, limits.go).
	denials, authFailures, limits *prometheus.CounterVec
	limitCounters                 map[string]prometheus.Counter // by limit name, resolved once
	denialCounters                map[string]prometheus.Counter // by operation, resolved once
	tlsHandshakeFailures          prometheus.Counter

	publishes, publishBytes, confirms, rejects, duplicates *prometheus.CounterVec
	deliveries, redeliveries, deliveryBytes, settles       *prometheus.CounterVec
	expiries, lapses, deadLetters, restarts                *prometheus.CounterVec
	confirmSeconds, deliverySeconds, syncSeconds           *prometheus.HistogramVec
	logWriteSeconds, logFsyncSeconds                       *prometheus.HistogramVec
	queueState                                             *queueStateCollector
	replication                                            *replicationMetrics
	restartsTotal                                          func() uint64
	mu                                                     sync.Mutex
	queues                                                 map[string]*queueMetrics
}

// counter adapts a Prometheus counter to the call sites' Inc and Add(int).
type counter struct{ prometheus.Counter }

// Add adds n, which must not be negative.
func (c counter) Add(n int) { c.Counter.Add(float64(n)) }

// histogram adapts a Prometheus observer to the call sites' Update.
type histogram struct{ prometheus.Observer }

// Update observes one value in seconds.
func (h histogram) Update(seconds float64) { h.Observe(seconds) }

// queueMetrics are one queue's series.
type queueMetrics struct {
	name string

	publishes    counter // messages accepted for appending
	publishBytes counter // their payload bytes
	confirms     counter // messages confirmed, at the boundary the queue was opened with
	// confirmsWritten and confirmsDurable count by the boundary each
	// confirm stands on (a queue's mode may change, partition_mode.go).
	confirmsWritten, confirmsDurable counter
	rejects                          counter // messages negatively confirmed by the partition
	duplicates                       counter // messages confirmed as duplicates, not stored again
	deliveries                       counter // deliveries sent (first and repeated)
	redeliveries                     counter // deliveries marked redelivered
	deliveryBytes                    counter
	acks                             counter
	nacks                            counter
	releases                         counter
	discards                         counter
	expiries                         counter // leases that expired
	lapses                           counter // leases that applied too late and went back undelivered
	deadLetters                      counter // messages handed to a dead-letter queue (or dropped)
	restarts                         counter
	confirmSeconds                   histogram // partition accepted the batch → confirmed at the boundary
	deliverySeconds                  histogram // publish accepted → first delivery sent
	syncSeconds                      histogram // explicit syncs only
	logWriteSeconds                  histogram // write(2) calls on the log's segment files
	logFsyncSeconds                  histogram // fdatasync calls on the log's segment files
	latched                          atomic.Bool
}

func newMetrics(restartsTotal func() uint64) *Metrics {
	m := &Metrics{registry: prometheus.NewPedanticRegistry(), queues: make(map[string]*queueMetrics),
		restartsTotal: restartsTotal}
	perQueue := func(name, help string, labels ...string) *prometheus.CounterVec {
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"queue"}, labels...))
		m.registry.MustRegister(vec)
		return vec
	}
	latency := func(name, help string) *prometheus.HistogramVec {
		vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets},
			[]string{"queue"})
		m.registry.MustRegister(vec)
		return vec
	}
	m.publishes = perQueue("fibril_publishes_total", "Messages accepted for appending to the queue's log.")
	m.publishBytes = perQueue("fibril_publish_bytes_total", "Payload bytes of the messages accepted for appending.")
	m.confirms = perQueue("fibril_confirms_total",
		"Messages confirmed to publishers, by the boundary the confirm stands on (written: reached the OS; durable: fsynced).",
		"boundary")
	m.rejects = perQueue("fibril_publish_rejects_total",
		"Messages the queue refused after accepting them (storage failure, fence, shutdown); refusals by code are fibril_refusals_total.")
	m.duplicates = perQueue("fibril_publish_duplicates_total",
		"Messages a queue with a dedup window did not store because it had stored them already; each was confirmed as a duplicate.")
	m.deliveries = perQueue("fibril_deliveries_total", "Deliveries sent to consumers, first and repeated.")
	m.redeliveries = perQueue("fibril_redeliveries_total", "Deliveries sent marked redelivered (possible duplicates).")
	m.deliveryBytes = perQueue("fibril_delivery_bytes_total", "Payload bytes delivered.")
	m.settles = perQueue("fibril_settles_total", "Deliveries settled by consumers, by kind: ack, nack, release, discard.", "kind")
	m.expiries = perQueue("fibril_lease_expiries_total", "Leases that expired before their delivery was settled.")
	m.lapses = perQueue("fibril_lease_lapses_total",
		"Leases that applied with a quarter of the lease timeout or less left (a quorum loss, a slow sync): nothing was sent, "+
			"the messages went back to the queue without an attempt counted and were leased again.")
	m.deadLetters = perQueue("fibril_dead_letters_total",
		"Messages dead-lettered (handed to the dead-letter queue, or dropped when the queue has none).")
	m.restarts = perQueue("fibril_queue_restarts_total", "Restarts of the queue's partition actor after a failure.")
	m.confirmSeconds = latency("fibril_confirm_latency_seconds",
		"Time from the partition accepting a publish batch to its confirm at the queue's boundary (written or durable), one observation per batch.")
	m.deliverySeconds = latency("fibril_delivery_latency_seconds",
		"Time from the node accepting a publish to the message's first delivery to a consumer (queueing time included).")
	m.syncSeconds = latency("fibril_sync_seconds",
		"Latency of the log syncs the broker issues itself (explicit syncs: POST /api/queues/{name}/sync), from the call "+
			"to the log's Sync to its return, waiting in the log's pipeline included. Every fdatasync is in fibril_log_fsync_seconds.")
	m.logWriteSeconds = latency("fibril_log_write_seconds",
		"Duration of each write(2) of the queue's log segment files (the step that makes records written).")
	m.logFsyncSeconds = latency("fibril_log_fsync_seconds",
		"Duration of each fdatasync of the queue's log segment files (background, durable appends and explicit syncs alike).")
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fibril_refusals_total",
		Help: "Refusals the node sent to clients, by error code and kind: request (an error frame) or publish (messages in negative confirms)."},
		[]string{"code", "kind"})
	m.registry.MustRegister(m.refusals)
	m.newSecurityMetrics()
	m.SessionsOpened = m.newCounter("fibril_sessions_opened_total", "Client connections accepted since the node started.")
	m.ProtocolErrors = m.newCounter("fibril_protocol_errors_total",
		"Client connections closed for a bad frame, a bad hello or a protocol violation.")
	m.newGauge("fibril_sessions_open", "Client sessions open now.", func() float64 { return float64(m.sessionsOpen.Load()) })
	m.newGauge("fibril_fenced_queues", "Queues refusing publishes after a storage fault.",
		func() float64 { return float64(m.fencedQueues.Load()) })
	m.newGauge("fibril_latched_logs", "Queue logs latched by a failed write or fsync.",
		func() float64 { return float64(m.latchedLogs()) })
	m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fibril_actor_restarts_total",
		Help: "Restarts of any actor of the node since it started."}, func() float64 { return float64(m.restartsTotal()) }))
	m.queueState = newQueueStateCollector(m)
	m.replication = newReplicationMetrics(m.registry)
	m.registry.MustRegister(m.queueState)
	return m
}

// newSecurityMetrics registers the series of access.go and limits.go;
// every label value exists from the start, at 0.
func (m *Metrics) newSecurityMetrics() {
	m.denials = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fibril_denials_total",
		Help: "Requests refused with forbidden (214) because the session's user lacks the permission, by operation: " +
			"declare, publish, consume, admin, info."}, []string{"operation"})
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fibril_auth_failures_total",
		Help: "Sessions closed with unauthorized (104), by reason: hello (unknown user, wrong or malformed token) " +
			"or revoked (a users file reload removed the user or changed its token)."}, []string{"reason"})
	m.limits = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fibril_limit_reached_total",
		Help: "Times a client met one of the node's bounds (docs/security.md, Bounds), by limit: connections refused, " +
			"frames refused before hello, hello deadlines, reader waits for publish or request credit, subscribes and " +
			"declares refused with resource_limit, connections closed for not reading."}, []string{"limit"})
	m.tlsHandshakeFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "fibril_tls_handshake_failures_total",
		Help: "TLS handshakes on the client listener that failed: plain text, a refused or missing client " +
			"certificate, the hello deadline, a broken connection."})
	m.registry.MustRegister(m.denials, m.authFailures, m.limits, m.tlsHandshakeFailures)
	m.limitCounters = make(map[string]prometheus.Counter, len(limitNames))
	for _, name := range limitNames {
		m.limitCounters[name] = m.limits.WithLabelValues(name)
	}
	m.denialCounters = make(map[string]prometheus.Counter)
	for _, operation := range []string{"declare", "publish", "consume", "admin", "info"} {
		m.denialCounters[operation] = m.denials.WithLabelValues(operation)
	}
	for _, reason := range []string{"hello", "revoked"} {
		m.authFailures.WithLabelValues(reason)
	}
}

// setBoundGauges registers the gauges of the node's bounds.
func (m *Metrics) setBoundGauges(core *brokerCore) {
	m.newGauge("fibril_connections_open", "Client connections counted against the connection limits now "+
		"(TLS handshakes and sessions awaiting hello included).",
		func() float64 { return float64(core.limiter.openConnections()) })
	m.newGauge("fibril_outbox_bytes", "Estimated bytes of frames waiting for clients to read them, all sessions "+
		"together (bounded by the node's max outbox bytes).", func() float64 { return float64(core.outboxBytes.Load()) })
}

// limitReached counts a client meeting a bound (a limit* name).
func (m *Metrics) limitReached(limit string) {
	if m == nil {
		return
	}
	if c, ok := m.limitCounters[limit]; ok {
		c.Inc()
		return
	}
	m.limits.WithLabelValues(limit).Inc()
}

// denied counts a request refused with forbidden.
func (m *Metrics) denied(operation string) {
	if c, ok := m.denialCounters[operation]; ok {
		c.Inc()
		return
	}
	m.denials.WithLabelValues(operation).Inc()
}

// authFailed counts a session closed with unauthorized.
func (m *Metrics) authFailed(reason string) { m.authFailures.WithLabelValues(reason).Inc() }

// LimitReached returns fibril_limit_reached_total for one limit (tests
// and the dashboard read it).
func (m *Metrics) LimitReached(limit string) float64 {
	return counterValue(m.limits.WithLabelValues(limit))
}

// Denials returns fibril_denials_total for one operation.
func (m *Metrics) Denials(operation string) float64 {
	return counterValue(m.denials.WithLabelValues(operation))
}

func (m *Metrics) newCounter(name, help string) counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	m.registry.MustRegister(c)
	return counter{c}
}

func (m *Metrics) newGauge(name, help string, read func() float64) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, read))
}

// Gatherer returns the broker's registry, for exporters that combine it
// with others (the HTTP endpoint adds the process's series).
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.registry }

// WritePrometheus writes every series in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) {
	_ = WriteGathered(w, m.registry)
}

// WriteGathered writes what gatherer gathers in the Prometheus text
// format (version 0.0.4). A gathering error still writes what was
// gathered and is returned.
func WriteGathered(w io.Writer, gatherer prometheus.Gatherer) error {
	families, gatherErr := gatherer.Gather()
	encoder := expfmt.NewEncoder(w, expfmt.FmtText)
	for _, family := range families {
		if err := encoder.Encode(family); err != nil {
			return err
		}
	}
	return gatherErr
}

// setQueueInfos tells the state collector where fresh queue infos come
// from (the broker's own Queues).
func (m *Metrics) setQueueInfos(read func() []wire.QueueInfo) { m.queueState.setSource(read) }

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
	q := &queueMetrics{
		name:            name,
		publishes:       counter{m.publishes.WithLabelValues(name)},
		publishBytes:    counter{m.publishBytes.WithLabelValues(name)},
		confirms:        counter{m.confirms.WithLabelValues(name, boundary)},
		confirmsWritten: counter{m.confirms.WithLabelValues(name, wire.BoundaryWritten.String())},
		confirmsDurable: counter{m.confirms.WithLabelValues(name, wire.BoundaryDurable.String())},
		rejects:         counter{m.rejects.WithLabelValues(name)},
		duplicates:      counter{m.duplicates.WithLabelValues(name)},
		deliveries:      counter{m.deliveries.WithLabelValues(name)},
		redeliveries:    counter{m.redeliveries.WithLabelValues(name)},
		deliveryBytes:   counter{m.deliveryBytes.WithLabelValues(name)},
		acks:            counter{m.settles.WithLabelValues(name, "ack")},
		nacks:           counter{m.settles.WithLabelValues(name, "nack")},
		releases:        counter{m.settles.WithLabelValues(name, "release")},
		discards:        counter{m.settles.WithLabelValues(name, "discard")},
		expiries:        counter{m.expiries.WithLabelValues(name)},
		lapses:          counter{m.lapses.WithLabelValues(name)},
		deadLetters:     counter{m.deadLetters.WithLabelValues(name)},
		restarts:        counter{m.restarts.WithLabelValues(name)},
		confirmSeconds:  histogram{m.confirmSeconds.WithLabelValues(name)},
		deliverySeconds: histogram{m.deliverySeconds.WithLabelValues(name)},
		syncSeconds:     histogram{m.syncSeconds.WithLabelValues(name)},
		logWriteSeconds: histogram{m.logWriteSeconds.WithLabelValues(name)},
		logFsyncSeconds: histogram{m.logFsyncSeconds.WithLabelValues(name)},
	}
	m.queues[name] = q
	return q
}

// dropQueue removes a deleted queue's series.
func (m *Metrics) dropQueue(name string) {
	m.mu.Lock()
	_, ok := m.queues[name]
	delete(m.queues, name)
	m.mu.Unlock()
	if !ok {
		return
	}
	labels := prometheus.Labels{"queue": name}
	for _, vec := range []*prometheus.CounterVec{m.publishes, m.publishBytes, m.confirms, m.rejects, m.duplicates, m.deliveries,
		m.redeliveries, m.deliveryBytes, m.settles, m.expiries, m.lapses, m.deadLetters, m.restarts} {
		vec.DeletePartialMatch(labels)
	}
	for _, vec := range []*prometheus.HistogramVec{m.confirmSeconds, m.deliverySeconds, m.syncSeconds,
		m.logWriteSeconds, m.logFsyncSeconds} {
		vec.DeletePartialMatch(labels)
	}
	m.replication.dropQueue(name)
}

// countRefusal counts what the node refuses a client: an error frame (by
// its code) or the messages of a negative confirm. Sessions call it for
// every frame they send; other frames cost one type switch. It reports
// whether the frame answers a client's request (a reply with the
// request's id), which gives back that request's credit.
func (m *Metrics) countRefusal(frame wire.Frame) (answersRequest bool) {
	switch f := frame.(type) {
	case *wire.Confirm, *wire.Deliver:
		return false
	case *wire.ErrorFrame:
		m.refusals.WithLabelValues(f.Code.String(), "request").Inc()
		return f.RequestID != 0
	case *wire.NegativeConfirm:
		for _, r := range f.Ranges {
			if r.Last >= r.First {
				m.refusals.WithLabelValues(r.Code.String(), "publish").Add(float64(r.Last - r.First + 1))
			}
		}
		return false
	case *wire.OK:
		return f.RequestID != 0
	case *wire.DeclareOKMode:
		return f.RequestID != 0
	case *wire.DeclareOK:
		return f.RequestID != 0
	case *wire.SubscribeOK:
		return f.RequestID != 0
	case *wire.QueueInfoReply:
		return f.RequestID != 0
	case *wire.QueueList:
		return f.RequestID != 0
	case *wire.Pong:
		return f.RequestID != 0
	case *wire.Redirect:
		return f.RequestID != 0
	}
	return false
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

// observeSince observes the time since start, in seconds.
func (h histogram) observeSince(now, start time.Time) {
	if elapsed := now.Sub(start); elapsed >= 0 {
		h.Observe(elapsed.Seconds())
	}
}

// counterValue reads a counter's current value.
func counterValue(c prometheus.Counter) float64 {
	var metric dto.Metric
	if err := c.Write(&metric); err != nil || metric.Counter == nil {
		return 0
	}
	return metric.Counter.GetValue()
}
