package admin

// The endpoints behind the dashboard's live parts and actions:
//
//	GET  /api/connections              client sessions (ConnectionLister)
//	GET  /api/stats                    counters and latency histograms, summed and per queue (MetricsGatherer)
//	POST /api/queues/{name}/purge      {"removed": n}  (QueueActor; a write: needs the admin token)
//	POST /api/queues/{name}/delete     {"removed": n}
//	POST /api/queues/{name}/peek?count=N  {"messages": [...]}: up to N from the head, released again
//
// /api/stats gives cumulative values; the dashboard turns two reads into
// rates and latency quantiles (over the interval between them), the way
// Prometheus' rate() and histogram_quantile() would.

import (
	"context"
	"errors"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/valyala/fasthttp"
)

// statsView is the body of GET /api/stats.
type statsView struct {
	TimeUnixMs int64                         `json:"time_unix_ms"`
	Totals     map[string]float64            `json:"totals"`
	Queues     map[string]map[string]float64 `json:"queues"`
	Histograms map[string]histogramView      `json:"histograms"`
}

// histogramView is a histogram summed over queues: cumulative counts per
// upper bound (the last is +Inf), as Prometheus' le buckets.
type histogramView struct {
	UpperBounds []float64 `json:"upper_bounds"`
	Counts      []uint64  `json:"counts"`
	Count       uint64    `json:"count"`
	Sum         float64   `json:"sum"`
}

// statsCounters are the counter families /api/stats reports, by the key
// it reports them under.
var statsCounters = map[string]string{
	"publishes": "fibril_publishes_total", "confirms": "fibril_confirms_total", "deliveries": "fibril_deliveries_total",
	"redeliveries": "fibril_redeliveries_total", "settles": "fibril_settles_total", "dead_letters": "fibril_dead_letters_total",
	"refusals": "fibril_refusals_total",
}

// statsHistograms are the histogram families it sums over queues.
var statsHistograms = map[string]string{
	"confirm_latency_seconds": "fibril_confirm_latency_seconds", "delivery_latency_seconds": "fibril_delivery_latency_seconds",
	"log_fsync_seconds": "fibril_log_fsync_seconds",
}

func (s *Server) handleStats(ctx *fasthttp.RequestCtx, _ string) {
	source, ok := s.node.(MetricsGatherer)
	if !ok {
		writeError(ctx, fasthttp.StatusNotImplemented, "this node does not report statistics")
		return
	}
	families, err := source.Gatherer().Gather()
	if err != nil && len(families) == 0 {
		writeError(ctx, fasthttp.StatusInternalServerError, "gathering metrics failed: %v", err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, buildStats(families, s.options.Clock().UnixMilli()))
}

func buildStats(families []*dto.MetricFamily, nowMs int64) statsView {
	view := statsView{TimeUnixMs: nowMs, Totals: map[string]float64{}, Queues: map[string]map[string]float64{},
		Histograms: map[string]histogramView{}}
	byName := map[string]*dto.MetricFamily{}
	for _, family := range families {
		byName[family.GetName()] = family
	}
	for key, name := range statsCounters {
		view.Totals[key] = 0
		family := byName[name]
		if family == nil {
			continue
		}
		for _, metric := range family.GetMetric() {
			value := metric.GetCounter().GetValue()
			if key == "settles" {
				if kind := labelOf(metric, "kind"); kind != "" {
					addStat(&view, "settles_"+kind, labelOf(metric, "queue"), value)
				}
			}
			addStat(&view, key, labelOf(metric, "queue"), value)
		}
	}
	for key, name := range statsHistograms {
		if family := byName[name]; family != nil {
			view.Histograms[key] = sumHistograms(family)
		}
	}
	return view
}

// addStat adds value to the total and, when the series has a queue, to
// that queue's.
func addStat(view *statsView, key, queue string, value float64) {
	view.Totals[key] += value
	if queue == "" {
		return
	}
	if view.Queues[queue] == nil {
		view.Queues[queue] = map[string]float64{}
	}
	view.Queues[queue][key] += value
}

func labelOf(metric *dto.Metric, name string) string {
	for _, pair := range metric.GetLabel() {
		if pair.GetName() == name {
			return pair.GetValue()
		}
	}
	return ""
}

// sumHistograms adds a family's histograms bucket by bucket; every series
// of a family has the same bounds.
func sumHistograms(family *dto.MetricFamily) histogramView {
	var view histogramView
	for _, metric := range family.GetMetric() {
		histogram := metric.GetHistogram()
		if histogram == nil {
			continue
		}
		if view.UpperBounds == nil {
			for _, bucket := range histogram.GetBucket() {
				view.UpperBounds = append(view.UpperBounds, bucket.GetUpperBound())
			}
			view.Counts = make([]uint64, len(view.UpperBounds))
		}
		for i, bucket := range histogram.GetBucket() {
			if i < len(view.Counts) {
				view.Counts[i] += bucket.GetCumulativeCount()
			}
		}
		view.Count += histogram.GetSampleCount()
		view.Sum += histogram.GetSampleSum()
	}
	return view
}

// connectionsView is the body of GET /api/connections.
type connectionsView struct {
	Count       int                `json:"count"`
	Connections []ConnectionStatus `json:"connections"`
}

func (s *Server) handleConnections(ctx *fasthttp.RequestCtx, _ string) {
	lister, ok := s.node.(ConnectionLister)
	if !ok {
		writeError(ctx, fasthttp.StatusNotImplemented, "this node does not list its connections")
		return
	}
	connections := lister.Connections()
	if connections == nil {
		connections = []ConnectionStatus{}
	}
	writeJSON(ctx, fasthttp.StatusOK, connectionsView{Count: len(connections), Connections: connections})
}

// removedView answers purge and delete.
type removedView struct {
	Queue   string `json:"queue"`
	Removed uint64 `json:"removed"`
}

// peekView answers peek.
type peekView struct {
	Queue    string          `json:"queue"`
	Messages []PeekedMessage `json:"messages"`
	Note     string          `json:"note"`
}

func (s *Server) handleQueuePurge(ctx *fasthttp.RequestCtx, name string) {
	s.queueAction(ctx, name, "purge", func(actor QueueActor) (any, error) {
		removed, err := actor.PurgeQueue(context.Background(), name)
		return removedView{Queue: name, Removed: removed}, err
	})
}

func (s *Server) handleQueueDelete(ctx *fasthttp.RequestCtx, name string) {
	s.queueAction(ctx, name, "delete", func(actor QueueActor) (any, error) {
		removed, err := actor.DeleteQueue(context.Background(), name)
		return removedView{Queue: name, Removed: removed}, err
	})
}

func (s *Server) handleQueuePeek(ctx *fasthttp.RequestCtx, name string) {
	count := 10
	if text := string(ctx.QueryArgs().Peek("count")); text != "" {
		parsed, err := strconv.Atoi(text)
		if err != nil || parsed < 1 || parsed > 1000 {
			writeError(ctx, fasthttp.StatusBadRequest, "count %q: want a whole number from 1 to 1000", clip(text))
			return
		}
		count = parsed
	}
	s.queueAction(ctx, name, "peek", func(actor QueueActor) (any, error) {
		messages, err := actor.PeekQueue(context.Background(), name, count)
		if messages == nil {
			messages = []PeekedMessage{}
		}
		return peekView{Queue: name, Messages: messages,
			Note: "released again: still in the queue, marked redelivered on their next delivery, the attempt not counted"}, err
	})
}

// queueAction runs one action and answers with its result, or the error
// as 404 (no such queue), 501 (the node cannot) or 502 (the node refused).
func (s *Server) queueAction(ctx *fasthttp.RequestCtx, name, action string, run func(QueueActor) (any, error)) {
	actor, ok := s.node.(QueueActor)
	if !ok {
		writeError(ctx, fasthttp.StatusNotImplemented, "this node cannot %s a queue over HTTP", action)
		return
	}
	result, err := run(actor)
	switch {
	case errors.Is(err, ErrNoSuchQueue):
		writeError(ctx, fasthttp.StatusNotFound, "no queue named %q", clip(name))
		return
	case err != nil:
		s.logger.Warn("admin: queue action failed", "action", action, "queue", name, "err", err)
		writeError(ctx, fasthttp.StatusBadGateway, "%s of queue %q failed: %v", action, clip(name), err)
		return
	}
	s.logger.Info("admin: queue action", "action", action, "queue", name, "remote", ctx.RemoteAddr().String())
	writeJSON(ctx, fasthttp.StatusOK, result)
}
