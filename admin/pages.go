package admin

// The dashboard's pages, rendered on the server so each shows its data
// before any script runs; /assets/dashboard.js then refreshes them from
// the JSON endpoints every two seconds and draws the live charts with
// uPlot (vendored in assets/, MIT licensed, served from this binary: the
// pages make no external request). The pages:
//
//	GET /                 overview: node, resources, totals, rate and latency charts, queues, connections
//	GET /queues/{name}    one queue: counts in messages, options, charts, consumers, replicas, failovers, actions
//	GET /cluster          nodes up or down, catalog leader, every queue's owner and replicas (cluster only)
//
// Counts are messages (ready, leased, delayed); log positions are shown
// only on the queue page, as records, labelled with their boundary.
// html/template escapes everything a node reports; the script builds rows
// with textContent only.

import (
	"bytes"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// pageData is what every page's layout reads.
type pageData struct {
	Title     string
	Page      string // "overview", "queue", "cluster": the script's mode
	Queue     string // the queue page's queue
	Node      nodeView
	Health    healthView
	HealthOK  bool
	Resources resourcesView
	Cluster   bool // the node runs in a cluster
	Body      any  // the page's own data
}

// overviewData is the overview page's own data.
type overviewData struct {
	Totals      totalsView
	Queues      []QueueStatus
	Connections []ConnectionStatus
	Listed      bool // the node lists connections
}

type totalsView struct {
	Queues, Ready, Leased, Delayed, Consumers, Unsynced uint64
	Connections                                         int
}

// queuePageData is the queue page's own data.
type queuePageData struct {
	Queue     QueueStatus
	Consumers []consumerRow
	Actions   bool // the node serves the queue actions
}

// consumerRow is a consumer with its connection's name and address.
type consumerRow struct {
	ConsumerStatus
	ClientName, RemoteAddress string
}

func (s *Server) basePage(ctx *fasthttp.RequestCtx, title, page string) pageData {
	info := s.node.NodeInfo()
	view := nodeView{NodeID: info.NodeID, Version: info.Version, DataDir: info.DataDir,
		Settings: map[string]any{"sync_interval_ms": durationMs(info.SyncInterval)}}
	if !info.StartedAt.IsZero() {
		view.UptimeSeconds = s.options.Clock().Sub(info.StartedAt).Seconds()
	}
	_, clustered := s.node.(ClusterNode)
	health := s.node.Health()
	data := pageData{Title: title, Page: page, Node: view, Cluster: clustered, Resources: readResources(info.DataDir),
		Health: healthView{Status: "serving", Fatal: health.Fatal, Fenced: health.Fenced}}
	switch {
	case health.Fatal != "":
		data.Health.Status = "failed"
	case len(health.Fenced) > 0:
		data.Health.Status = "fenced"
	}
	data.HealthOK = data.Health.Status == "serving"
	return data
}

func (s *Server) handleDashboard(ctx *fasthttp.RequestCtx, _ string) {
	data := s.basePage(ctx, "Fibril", "overview")
	body := overviewData{Queues: s.node.Queues()}
	sortQueues(body.Queues)
	for _, q := range body.Queues {
		body.Totals.Queues++
		body.Totals.Ready += q.Counts.Ready
		body.Totals.Leased += q.Counts.Leased
		body.Totals.Delayed += q.Counts.Delayed
		body.Totals.Consumers += uint64(q.ConsumerCount)
		body.Totals.Unsynced += q.UnsyncedRecords
	}
	if lister, ok := s.node.(ConnectionLister); ok {
		body.Listed, body.Connections = true, lister.Connections()
		body.Totals.Connections = len(body.Connections)
	}
	data.Body = body
	s.renderPage(ctx, overviewPage, data)
}

func (s *Server) handleQueuePage(ctx *fasthttp.RequestCtx, name string) {
	status, ok := s.node.Queue(name)
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, "no queue named %q on this node", clip(name))
		return
	}
	data := s.basePage(ctx, "Fibril · "+name, "queue")
	data.Queue = name
	body := queuePageData{Queue: status}
	_, body.Actions = s.node.(QueueActor)
	connections := map[string]ConnectionStatus{}
	if lister, ok := s.node.(ConnectionLister); ok {
		for _, c := range lister.Connections() {
			connections[c.Session] = c
		}
	}
	for _, consumer := range status.Consumers {
		row := consumerRow{ConsumerStatus: consumer}
		if c, ok := connections[sessionIDOf(consumer.Session)]; ok {
			row.ClientName, row.RemoteAddress = c.ClientName, c.RemoteAddress
		}
		body.Consumers = append(body.Consumers, row)
	}
	data.Body = body
	s.renderPage(ctx, queuePage, data)
}

// sessionIDOf takes a session id out of what a consumer names: the id
// itself, or an actor path ending in it.
func sessionIDOf(session string) string {
	return session[strings.LastIndex(session, "/")+1:]
}

func (s *Server) handleClusterPage(ctx *fasthttp.RequestCtx, _ string) {
	data := s.basePage(ctx, "Fibril · cluster", "cluster")
	clusterNode, ok := s.node.(ClusterNode)
	if !ok {
		data.Body = (*clusterOverview)(nil)
		s.renderPage(ctx, clusterPage, data)
		return
	}
	var status clusterStatusView
	if err := reencode(clusterNode.ClusterStatus(), &status); err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "reading the cluster status: %v", err)
		return
	}
	overview := buildOverview(status, s.gatherReports(status, string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))))
	data.Body = &overview
	s.renderPage(ctx, clusterPage, data)
}

func (s *Server) renderPage(ctx *fasthttp.RequestCtx, page *template.Template, data pageData) {
	var out bytes.Buffer
	if err := page.ExecuteTemplate(&out, "layout", data); err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "rendering the page failed: %v", err)
		return
	}
	writeHTML(ctx, out.Bytes())
}

// templateFuncs format what the pages show.
var templateFuncs = template.FuncMap{
	"bytes":    formatBytes,
	"duration": func(seconds float64) string { return formatDuration(time.Duration(seconds * float64(time.Second))) },
	"since": func(unixMs int64) string {
		if unixMs == 0 {
			return "never"
		}
		return time.UnixMilli(unixMs).UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"deref": func(value any) any {
		switch v := value.(type) {
		case *uint64:
			if v == nil {
				return "n/a"
			}
			return *v
		case *int:
			if v == nil {
				return "n/a"
			}
			return *v
		}
		return value
	},
	"derefBytes": func(value *uint64) string {
		if value == nil {
			return "n/a"
		}
		return formatBytes(*value)
	},
	"join": strings.Join,
	"failoverTook": func(f FailoverStatus) string {
		if len(f.Stages) == 0 {
			return ""
		}
		return formatDuration(time.Duration(f.Stages[len(f.Stages)-1].Micros) * time.Microsecond)
	},
	"failoverStages": formatFailoverStages,
	"sortedKeys": func(m map[string]string) []string {
		keys := make([]string, 0, len(m))
		for key := range m {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		return keys
	},
}

func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	value, exponent := float64(n), 0
	for value >= unit && exponent < 5 {
		value /= unit
		exponent++
	}
	return fmt.Sprintf("%.1f %ciB", value, "KMGTP"[exponent-1])
}

func formatDuration(d time.Duration) string {
	d = d.Round(time.Second)
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	if days > 0 {
		return fmt.Sprintf("%dd %s", days, d)
	}
	return d.String()
}

// The templates. "layout" wraps every page; each page defines "content".
const layoutTemplate = `{{define "layout"}}<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<link rel="stylesheet" href="/assets/uplot.min.css">
<link rel="stylesheet" href="/assets/dashboard.css">
</head>
<body data-page="{{.Page}}" data-queue="{{.Queue}}">
<header>
<h1><a href="/">Fibril</a></h1>
<nav><a href="/">overview</a>{{if .Cluster}} · <a href="/cluster">cluster</a>{{end}} · <a href="/debug/actors">actors</a> · <a href="/metrics">metrics</a></nav>
<span class="node">node <b id="node-id">{{.Node.NodeID}}</b> · <span id="node-version">{{.Node.Version}}</span> · up <span id="node-uptime">{{duration .Node.UptimeSeconds}}</span></span>
<span>health: <b id="health" class="{{if .HealthOK}}ok{{else}}bad{{end}}">{{.Health.Status}}</b></span>
<label class="token">admin token <input id="token" type="password" autocomplete="off" placeholder="for actions"></label>
</header>
<div id="error" class="banner" hidden></div>
<ul id="fenced" class="banner-list">{{range .Health.Fenced}}<li>{{.Queue}}/{{.Partition}}: {{.Error}}</li>{{end}}{{if .Health.Fatal}}<li>fatal: {{.Health.Fatal}}</li>{{end}}</ul>
<main>{{template "content" .}}</main>
<footer class="muted">written = handed to the OS; durable = covered by an fsync; unsynced = written, not yet durable. <span id="updated">rendered by the node</span></footer>
<script src="/assets/uplot.iife.min.js"></script>
<script src="/assets/dashboard.js"></script>
</body>
</html>{{end}}
{{define "resources"}}<section class="cards" id="resources">
<div class="card"><h3>memory</h3><p><b id="res-rss">{{derefBytes .ResidentBytes}}</b> resident</p><p class="muted"><span id="res-heap">{{bytes .HeapBytes}}</span> Go heap of <span id="res-runtime">{{bytes .RuntimeBytes}}</span></p></div>
<div class="card"><h3>file descriptors</h3><p><b id="res-fds">{{deref .OpenFiles}}</b> open</p><p class="muted">limit <span id="res-fds-max">{{deref .MaxOpenFiles}}</span></p></div>
<div class="card"><h3>data disk</h3><p><b id="res-disk-free">{{derefBytes .DiskFreeBytes}}</b> free</p><p class="muted">of <span id="res-disk-total">{{derefBytes .DiskTotalBytes}}</span>{{if .DiskError}} · {{.DiskError}}{{end}}</p></div>
<div class="card"><h3>goroutines</h3><p><b id="res-goroutines">{{.Goroutines}}</b></p></div>
</section>{{end}}`

const overviewTemplate = `{{define "content"}}{{template "resources" .Resources}}
{{with .Body}}<section class="cards" id="totals">
<div class="card"><h3>queues</h3><p><b id="total-queues">{{.Totals.Queues}}</b></p></div>
<div class="card"><h3>ready</h3><p><b id="total-ready">{{.Totals.Ready}}</b> messages</p></div>
<div class="card"><h3>leased</h3><p><b id="total-leased">{{.Totals.Leased}}</b> messages</p></div>
<div class="card"><h3>delayed</h3><p><b id="total-delayed">{{.Totals.Delayed}}</b> messages</p></div>
<div class="card"><h3>consumers</h3><p><b id="total-consumers">{{.Totals.Consumers}}</b></p></div>
<div class="card"><h3>connections</h3><p><b id="total-connections">{{.Totals.Connections}}</b></p></div>
<div class="card"><h3>unsynced</h3><p><b id="total-unsynced">{{.Totals.Unsynced}}</b> records</p></div>
</section>
<section class="charts">
<div class="chart-box"><h2>Message rates (per second)</h2><div id="chart-rates" class="chart" data-points="0"></div></div>
<div class="chart-box"><h2>Latency (milliseconds)</h2><div id="chart-latency" class="chart" data-points="0"></div></div>
</section>
<h2>Queues (<span id="queue-count">{{len .Queues}}</span>)</h2>
<div class="scroll"><table id="queues-table">
<thead><tr><th>queue</th><th class="text">mode</th><th>ready</th><th>leased</th><th>delayed</th><th>dead-lettered</th><th>consumers</th><th>publish/s</th><th>deliver/s</th><th>unsynced records</th><th>last sync</th><th class="text">state</th></tr></thead>
<tbody id="queues">{{range .Queues}}<tr data-queue="{{.Name}}"><td class="text"><a href="/queues/{{.Name}}">{{.Name}}</a></td><td class="text">{{.Mode}}{{if .Policy}} · {{.Policy}}{{end}}</td><td>{{.Counts.Ready}}</td><td>{{.Counts.Leased}}</td><td>{{.Counts.Delayed}}</td><td>{{.Counts.DeadLettered}}</td><td>{{.ConsumerCount}}</td><td>–</td><td>–</td><td>{{.UnsyncedRecords}}</td><td>{{since .LastSyncUnixMs}}</td><td class="text {{if .Fenced}}bad{{else}}ok{{end}}">{{if .Fenced}}fenced: {{.FenceError}}{{else}}serving{{end}}</td></tr>{{else}}<tr class="empty"><td colspan="12">no queues yet: <code>fibrilctl declare NAME</code></td></tr>{{end}}</tbody>
</table></div>
<h2>Connections (<span id="connection-count">{{len .Connections}}</span>)</h2>
{{if .Listed}}<div class="scroll"><table id="connections-table">
<thead><tr><th class="text">client</th><th class="text">address</th><th class="text">session</th><th>connected</th><th>subscriptions</th><th class="text">state</th></tr></thead>
<tbody id="connections">{{range .Connections}}<tr><td class="text">{{if .ClientName}}{{.ClientName}}{{else}}(unnamed){{end}}</td><td class="text">{{.RemoteAddress}}</td><td class="text mono">{{.Session}}</td><td>{{since .ConnectedUnixMs}}</td><td>{{.Subscriptions}}</td><td class="text">{{.State}}</td></tr>{{else}}<tr class="empty"><td colspan="6">no client connected</td></tr>{{end}}</tbody>
</table></div>{{else}}<p class="muted">this node does not list its connections</p>{{end}}{{end}}{{end}}`

const queueTemplate = `{{define "content"}}{{with .Body}}{{with .Queue}}
<h2>Queue <span class="mono">{{.Name}}</span> · <span id="q-mode">{{.Mode}}{{if .ModeRevision}} (revision {{.ModeRevision}}){{end}}</span>{{if .Policy}} · {{.Policy}}{{end}}{{if .Owner}} · owner {{.Owner}} (epoch {{.Epoch}}){{end}}</h2>
<section class="cards" id="queue-counts">
<div class="card"><h3>ready</h3><p><b id="q-ready">{{.Counts.Ready}}</b> messages</p></div>
<div class="card"><h3>leased</h3><p><b id="q-leased">{{.Counts.Leased}}</b> messages</p></div>
<div class="card"><h3>delayed</h3><p><b id="q-delayed">{{.Counts.Delayed}}</b> messages</p></div>
<div class="card"><h3>dead-lettered</h3><p><b id="q-dead">{{.Counts.DeadLettered}}</b> since declared</p></div>
<div class="card"><h3>consumers</h3><p><b id="q-consumers">{{.ConsumerCount}}</b></p></div>
<div class="card"><h3>unsynced</h3><p><b id="q-unsynced">{{.UnsyncedRecords}}</b> records, <span id="q-unsynced-bytes">{{bytes .UnsyncedBytes}}</span></p><p class="muted">last sync <span id="q-last-sync">{{since .LastSyncUnixMs}}</span></p></div>
<div class="card"><h3>state</h3><p><b id="q-state" class="{{if .Fenced}}bad{{else}}ok{{end}}">{{if .Fenced}}fenced{{else}}serving{{end}}</b></p><p class="muted">{{.FenceError}}</p></div>
<div class="card"><h3>mode change</h3><p><b id="q-mode-change" class="{{if .ModeChange}}bad{{else}}ok{{end}}">{{with .ModeChange}}{{.State}}: to {{.Mode}} (revision {{.Revision}}){{else}}none pending{{end}}</b></p><p class="muted" id="q-mode-reason">{{with .ModeChange}}{{.Reason}}{{end}}</p></div>
</section>
<p class="muted">Log: written next <span id="q-written">{{.WrittenNext}}</span>, durable next <span id="q-durable">{{.DurableNext}}</span> (records, acks and leases included; written = reached the OS, durable = fsynced). Background sync {{if .SyncIntervalMs}}every {{.SyncIntervalMs}} ms{{else}}off{{end}}.</p>
<p class="muted">Options: {{with .Options}}lease {{.LeaseTimeoutMs}} ms{{if .MaxDeliveries}} · max deliveries {{.MaxDeliveries}}{{end}}{{if .DeadLetterQueue}} · dead letters to {{.DeadLetterQueue}}{{end}}{{if .MessageTTLMs}} · ttl {{.MessageTTLMs}} ms{{end}}{{if .MaxLength}} · max length {{.MaxLength}}{{end}}{{if .MaxBytes}} · max bytes {{.MaxBytes}}{{end}}{{if .Overflow}} · overflow {{.Overflow}}{{end}}{{if .RedeliveryDelayMs}} · redelivery delay {{.RedeliveryDelayMs}} ms{{end}}{{end}}</p>
{{end}}
<section class="charts">
<div class="chart-box"><h2>Rates (per second)</h2><div id="chart-queue-rates" class="chart" data-points="0"></div></div>
</section>
{{if .Actions}}<section class="actions" id="actions">
<h2>Actions</h2>
<p class="muted">Writes: they need the admin token when the node has one (enter it above).</p>
<button id="action-peek" type="button">peek</button> <input id="peek-count" type="number" min="1" max="1000" value="10"> messages (leased and released at once: they stay, marked redelivered next time)
<button id="action-purge" type="button">purge ready messages</button>
<button id="action-reopen" type="button">reopen</button>
<button id="action-delete" type="button" class="danger">delete queue</button>
<p id="action-result" class="muted"></p>
<div class="scroll"><table id="peek-table" hidden><thead><tr><th class="text">message id</th><th>offset</th><th>attempt</th><th>published</th><th class="text">headers</th><th class="text">body</th></tr></thead><tbody id="peeked"></tbody></table></div>
</section>{{end}}
<h2>Consumers</h2>
<div class="scroll"><table id="consumers-table">
<thead><tr><th class="text">client</th><th class="text">address</th><th class="text">session</th><th>subscription</th><th>prefetch</th><th>outstanding</th></tr></thead>
<tbody id="consumers">{{range .Consumers}}<tr><td class="text">{{if .ClientName}}{{.ClientName}}{{else}}(unknown){{end}}</td><td class="text">{{.RemoteAddress}}</td><td class="text mono">{{.Session}}</td><td>{{.Subscription}}</td><td>{{.Prefetch}}</td><td>{{.Outstanding}}</td></tr>{{else}}<tr class="empty"><td colspan="6">no consumer</td></tr>{{end}}</tbody>
</table></div>
<h2>Replicas</h2>
<p class="muted">Confirms and deliveries stop at the quorum frontier: committed next <span id="q-committed">{{if .Queue.CommittedNext}}{{.Queue.CommittedNext}}{{end}}</span>; the oldest record waiting for it has waited <span id="q-commit-wait">{{.Queue.CommitWaitMs}} ms</span>.</p>
<div class="scroll"><table id="replicas-table">
<thead><tr><th class="text">node</th><th class="text">state</th><th>written next</th><th>durable next</th><th class="text">applied mode</th></tr></thead>
<tbody id="replicas">{{range .Queue.Replicas}}<tr><td class="text">{{.Node}}</td><td class="text">{{.State}}</td><td>{{.WrittenNext}}</td><td>{{.DurableNext}}</td><td class="text">{{if .AppliedMode}}{{.AppliedMode}} (revision {{.ModeRevision}}){{end}}</td></tr>{{else}}<tr class="empty"><td colspan="5">a single node: one copy</td></tr>{{end}}</tbody>
</table></div>
<h2>Recent failovers</h2>
<div class="scroll"><table id="failovers-table">
<thead><tr><th class="text">started</th><th>epoch</th><th class="text">outcome</th><th>took</th><th class="text">timeline (ms since the recovery began)</th></tr></thead>
<tbody id="failovers">{{range .Queue.Failovers}}<tr><td class="text">{{.StartedAt.Format "2006-01-02 15:04:05.000"}}</td><td>{{.Epoch}}</td><td class="text">{{.Outcome}}</td><td>{{failoverTook .}}</td><td class="text mono">{{failoverStages .}}</td></tr>{{else}}<tr class="empty"><td colspan="5">none run by this node since it started</td></tr>{{end}}</tbody>
</table></div>{{end}}{{end}}`

const clusterTemplate = `{{define "content"}}{{with .Body}}
<h2>Cluster, as node {{.AnsweredBy}} sees it</h2>
<p>Catalog leader: <b id="catalog-leader">{{if .CatalogLeader}}{{.CatalogLeader}}{{else}}none known{{end}}</b> · catalog revision <span id="catalog-revision">{{.CatalogRevision}}</span> · data served: {{.Serving}}{{if .CatalogError}} · <span class="bad">{{.CatalogError}}</span>{{end}}</p>
<h2>Nodes</h2>
<div class="scroll"><table id="nodes-table">
<thead><tr><th class="text">node</th><th class="text">state</th><th class="text">client</th><th class="text">HTTP</th><th class="text">version</th><th>uptime</th><th>memory</th><th>open files</th><th>disk free</th><th>queues open</th><th class="text">leader it sees</th><th class="text">Raft view from {{.AnsweredBy}}</th></tr></thead>
<tbody id="nodes">{{range .Nodes}}<tr data-node="{{.ID}}"><td class="text">{{.ID}}{{if .Self}} (this node){{end}}</td><td class="text {{if .Up}}ok{{else}}bad{{end}}">{{if .Up}}up{{else}}down{{end}}</td><td class="text">{{.ClientAddress}}</td><td class="text"><a href="http://{{.HTTPAddress}}/">{{.HTTPAddress}}</a></td><td class="text">{{.Version}}</td><td>{{if .Up}}{{duration .UptimeSeconds}}{{end}}</td>{{with .Resources}}<td>{{derefBytes .ResidentBytes}}</td><td>{{deref .OpenFiles}}</td><td>{{derefBytes .DiskFreeBytes}}</td>{{else}}<td>–</td><td>–</td><td>–</td>{{end}}<td>{{.OpenQueues}}</td><td class="text">{{.CatalogLeader}}</td><td class="text">{{.Liveness}}{{if .Error}} · {{.Error}}{{end}}</td></tr>{{end}}</tbody>
</table></div>
<h2>Queues and owners (<span id="cluster-queue-count">{{len .Queues}}</span>)</h2>
<div class="scroll"><table id="owners-table">
<thead><tr><th>queue</th><th class="text">mode</th><th class="text">policy</th><th class="text">owner</th><th>epoch</th><th>ready</th><th>leased</th><th>consumers</th><th class="text">replica set</th></tr></thead>
<tbody id="owners">{{range .Queues}}<tr><td class="text">{{.Name}}</td><td class="text">{{.Mode}}</td><td class="text">{{.Policy}}</td><td class="text {{if not .OwnerUp}}bad{{end}}">{{if .Owner}}{{.Owner}}{{else}}(electing){{end}}</td><td>{{.Epoch}}</td><td>{{with .Counts}}{{.Ready}}{{else}}–{{end}}</td><td>{{with .Counts}}{{.Leased}}{{else}}–{{end}}</td><td>{{.ConsumerCount}}</td><td class="text">{{join .ReplicaSet ", "}}</td></tr>{{else}}<tr class="empty"><td colspan="9">no queues</td></tr>{{end}}</tbody>
</table></div>
{{else}}<p>This node runs alone: there is no cluster to show. <code>fibril serve --config FILE --node ID</code> runs a node of a cluster (docs/cluster.md).</p>{{end}}{{end}}`

var (
	overviewPage = template.Must(template.New("overview").Funcs(templateFuncs).Parse(layoutTemplate + overviewTemplate))
	queuePage    = template.Must(template.New("queue").Funcs(templateFuncs).Parse(layoutTemplate + queueTemplate))
	clusterPage  = template.Must(template.New("cluster").Funcs(templateFuncs).Parse(layoutTemplate + clusterTemplate))
)

// formatFailoverStages is one line per recovery: each stage with its peer
// and its time since the recovery began, in milliseconds.
func formatFailoverStages(f FailoverStatus) string {
	parts := make([]string, 0, len(f.Stages))
	for _, stage := range f.Stages {
		part := stage.Stage
		if stage.Peer != "" {
			part += " " + stage.Peer
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", part, float64(stage.Micros)/1000))
	}
	return strings.Join(parts, " · ")
}
