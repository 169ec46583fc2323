package admin

// The JSON and metrics handlers. Each reads the node through the Node
// interface on the request's goroutine and answers from what it returned;
// none keeps state between requests.

import (
	"errors"
	"sort"
	"time"

	"github.com/valyala/fasthttp"
)

// nodeView is the body of GET /api/node.
type nodeView struct {
	NodeID        string            `json:"node_id"`
	Version       string            `json:"version"`
	StartedUnixMs int64             `json:"started_unix_ms"`
	UptimeSeconds float64           `json:"uptime_seconds"`
	DataDir       string            `json:"data_dir"`
	Listen        map[string]string `json:"listen"`
	Settings      map[string]any    `json:"settings"`
	Cluster       bool              `json:"cluster"` // whether /api/cluster is served
	Admin         adminView         `json:"admin"`
	Resources     resourcesView     `json:"resources"`
}

// adminView says how the endpoint itself is protected.
type adminView struct {
	WritesNeedToken bool `json:"writes_need_token"`
	ReadsNeedToken  bool `json:"reads_need_token"`
}

func (s *Server) handleNode(ctx *fasthttp.RequestCtx, _ string) {
	info := s.node.NodeInfo()
	view := nodeView{
		NodeID:   info.NodeID,
		Version:  info.Version,
		DataDir:  info.DataDir,
		Listen:   map[string]string{"http": s.Addr().String()},
		Settings: map[string]any{},
		Admin:    adminView{WritesNeedToken: s.options.Token != "", ReadsNeedToken: s.options.ProtectReads},
	}
	if !info.StartedAt.IsZero() {
		view.StartedUnixMs = info.StartedAt.UnixMilli()
		view.UptimeSeconds = s.options.Clock().Sub(info.StartedAt).Round(time.Millisecond).Seconds()
	}
	for role, addr := range info.Listen {
		view.Listen[role] = addr
	}
	for key, value := range info.Settings {
		view.Settings[key] = value
	}
	view.Settings["sync_interval_ms"] = durationMs(info.SyncInterval)
	_, view.Cluster = s.node.(ClusterNode)
	view.Resources = readResources(info.DataDir)
	writeJSON(ctx, fasthttp.StatusOK, view)
}

// queuesView is the body of GET /api/queues.
type queuesView struct {
	Count  int           `json:"count"`
	Queues []QueueStatus `json:"queues"`
}

func (s *Server) handleQueues(ctx *fasthttp.RequestCtx, _ string) {
	queues := s.node.Queues()
	if queues == nil {
		queues = []QueueStatus{}
	}
	sortQueues(queues)
	writeJSON(ctx, fasthttp.StatusOK, queuesView{Count: len(queues), Queues: queues})
}

func (s *Server) handleQueue(ctx *fasthttp.RequestCtx, name string) {
	status, ok := s.node.Queue(name)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, "no queue named %q", clip(name))
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, status)
}

// handleQueueSync syncs one queue's log and answers with its status after
// the sync, so the caller sees the new durable_next.
func (s *Server) handleQueueSync(ctx *fasthttp.RequestCtx, name string) {
	syncer, ok := s.node.(QueueSyncer)
	if !ok {
		writeError(ctx, fasthttp.StatusNotImplemented, "this node cannot sync a queue on request")
		return
	}
	if err := syncer.SyncQueue(name); err != nil {
		switch {
		case errors.Is(err, ErrNoSuchQueue):
			writeError(ctx, fasthttp.StatusNotFound, "no queue named %q", clip(name))
			return
		case errors.Is(err, errors.ErrUnsupported):
			writeError(ctx, fasthttp.StatusNotImplemented, "this node cannot sync a queue on request: %v", err)
			return
		}
		s.logger.Warn("admin: queue sync failed", "queue", name, "err", err)
		writeError(ctx, fasthttp.StatusInternalServerError, "sync of queue %q failed: %v", clip(name), err)
		return
	}
	s.logger.Info("admin: queue synced on request", "queue", name, "remote", ctx.RemoteAddr().String())
	status, ok := s.node.Queue(name)
	if !ok { // deleted between the sync and the read
		writeError(ctx, fasthttp.StatusNotFound, "no queue named %q", clip(name))
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, status)
}

// healthView is the body of GET /healthz.
type healthView struct {
	Status string            `json:"status"` // "serving", "fenced", "unowned", "stuck" or "failed"
	Fatal  string            `json:"fatal,omitempty"`
	Fenced []FencedPartition `json:"fenced"`
	// Unowned: partitions this node replicates that no node serves now
	// (cluster only; omitted when there are none).
	Unowned []FencedPartition `json:"unowned,omitempty"`
	// Stuck: partitions this node owns whose confirms and deliveries
	// cannot move (cluster only; omitted when there are none).
	Stuck []FencedPartition `json:"stuck,omitempty"`
	// Lagging: followers of partitions this node owns that do not keep
	// up; they do not change the status (cluster only).
	Lagging []FencedPartition `json:"lagging,omitempty"`
	// Hidden says why the lists are left out: on a node with a users
	// file, only a credential that may read the whole node sees which
	// queues are fenced; the status and code are the same for everyone.
	Hidden string `json:"hidden,omitempty"`
}

// healthHidden is healthView.Hidden when the names are left out.
const healthHidden = "queue names and errors need a credential that may read the whole node (the HTTP token, " +
	"or a user with admin on \"*\")"

// handleHealth answers 200 when the node serves every partition and 503
// otherwise, naming each fenced partition with its error, and in a cluster
// each partition it replicates that has no serving owner.
func (s *Server) handleHealth(ctx *fasthttp.RequestCtx, _ string) {
	health := s.node.Health()
	view := healthView{Status: "serving", Fatal: health.Fatal, Fenced: append([]FencedPartition{}, health.Fenced...),
		Unowned: health.Unowned, Stuck: health.Stuck, Lagging: health.Lagging}
	sort.Slice(view.Fenced, func(i, j int) bool {
		a, b := view.Fenced[i], view.Fenced[j]
		return a.Queue < b.Queue || a.Queue == b.Queue && a.Partition < b.Partition
	})
	status := fasthttp.StatusOK
	switch {
	case health.Fatal != "":
		view.Status, status = "failed", fasthttp.StatusServiceUnavailable
	case len(view.Fenced) > 0:
		view.Status, status = "fenced", fasthttp.StatusServiceUnavailable
	case len(view.Unowned) > 0:
		view.Status, status = "unowned", fasthttp.StatusServiceUnavailable
	case len(view.Stuck) > 0:
		view.Status, status = "stuck", fasthttp.StatusServiceUnavailable
	}
	if !s.healthNamesShown(ctx) {
		view = healthView{Status: view.Status, Fenced: []FencedPartition{}, Hidden: healthHidden}
	}
	writeJSON(ctx, status, view)
}

func (s *Server) handleCluster(ctx *fasthttp.RequestCtx, _ string) {
	cluster, ok := s.node.(ClusterNode)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, "this node does not run in a cluster")
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, cluster.ClusterStatus())
}

// durationMs is d in whole milliseconds.
func durationMs(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Millisecond)
}
