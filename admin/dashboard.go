package admin

// The dashboard (GET /) and what the HTML pages share. The dashboard is a
// static page: its inline script reads /api/node, /api/queues and /healthz
// (and /api/cluster when the node says it has one) every two seconds and
// rebuilds the tables with textContent only, so nothing a node reports is
// ever parsed as markup. There is no build step and no external asset: the
// Content-Security-Policy pins the inline script and style by their SHA-256
// and allows requests only to this origin.

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/valyala/fasthttp"
)

// pageStyle is the stylesheet of every HTML page.
const pageStyle = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
header { display: flex; gap: 1.5em; align-items: baseline; flex-wrap: wrap; }
h1 { font-size: 1.4em; margin: 0; } h2 { font-size: 1.1em; margin: 1.5em 0 .5em; }
a { color: #0645ad; }
table { border-collapse: collapse; }
th, td { padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th:first-child, td:first-child, td.text { text-align: left; }
th { background: #f4f4f4; font-weight: 600; }
.ok { color: #176117; font-weight: 600; } .bad { color: #a31515; font-weight: 600; }
.muted { color: #666; } .banner { background: #fde8e8; padding: .5em 1em; margin: 1em 0; }
pre { background: #f7f7f7; padding: .8em; overflow: auto; }
ul.tree, ul.tree ul { list-style: none; padding-left: 1.4em; border-left: 1px dotted #bbb; }
ul.tree { padding-left: 0; border: 0; }
.name { font-weight: 600; } .kind { color: #555; font-style: italic; }
.depth, .restarts { color: #0645ad; } .restarts { color: #a31515; } .summary { color: #333; }
`

// dashboardScript refreshes the dashboard. It must not use innerHTML.
const dashboardScript = `
"use strict";
const refreshMs = 2000;
const $ = (id) => document.getElementById(id);
function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}
async function getJSON(path) {
  const response = await fetch(path, {cache: "no-store", credentials: "same-origin"});
  if (response.status === 401) throw new Error("the admin token is needed: reload the page and sign in");
  const body = await response.json();
  return {status: response.status, body: body};
}
function syncTime(unixMs) {
  return unixMs ? new Date(unixMs).toLocaleTimeString() : "never";
}
function renderNode(node) {
  $("node").textContent = node.node_id + " · version " + node.version + " · up " +
    Math.floor(node.uptime_seconds) + " s · background sync " +
    (node.settings.sync_interval_ms ? "every " + node.settings.sync_interval_ms + " ms" : "off");
}
function renderHealth(health) {
  const status = $("health");
  status.textContent = health.body.status;
  status.className = health.status === 200 ? "ok" : "bad";
  const list = $("fenced");
  list.replaceChildren();
  for (const fenced of health.body.fenced) {
    const item = document.createElement("li");
    item.textContent = fenced.queue + "/" + fenced.partition + ": " + fenced.error;
    list.appendChild(item);
  }
  if (health.body.fatal) {
    const item = document.createElement("li");
    item.textContent = "fatal: " + health.body.fatal;
    list.appendChild(item);
  }
}
function renderQueues(view) {
  const rows = $("queues");
  rows.replaceChildren();
  for (const q of view.queues) {
    const row = document.createElement("tr");
    cell(row, q.name);
    cell(row, q.mode, "text");
    cell(row, q.counts.ready); cell(row, q.counts.leased); cell(row, q.counts.delayed);
    cell(row, q.counts.dead_lettered); cell(row, q.consumer_count);
    cell(row, q.written_next); cell(row, q.durable_next);
    cell(row, q.unsynced_records); cell(row, q.unsynced_bytes);
    cell(row, syncTime(q.last_sync_unix_ms));
    cell(row, q.sync_interval_ms ? q.sync_interval_ms + " ms" : "off");
    if (q.fenced) cell(row, "fenced: " + (q.fence_error || "storage fault"), "text bad");
    else cell(row, "serving", "text ok");
    rows.appendChild(row);
  }
  $("queue-count").textContent = String(view.count);
}
async function refresh() {
  try {
    const [node, queues, health] = await Promise.all([getJSON("/api/node"), getJSON("/api/queues"), getJSON("/healthz")]);
    renderNode(node.body);
    renderHealth(health);
    renderQueues(queues.body);
    $("cluster-section").hidden = !node.body.cluster;
    if (node.body.cluster) {
      const cluster = await getJSON("/api/cluster");
      $("cluster").textContent = JSON.stringify(cluster.body, null, 2);
    }
    $("error").hidden = true;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    $("error").textContent = "refresh failed: " + error.message;
    $("error").hidden = false;
  } finally {
    setTimeout(refresh, refreshMs);
  }
}
refresh();
`

// dashboardPage is the whole dashboard document.
var dashboardPage = []byte(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Fibril</title>
<style>` + pageStyle + `</style>
</head>
<body>
<header><h1>Fibril</h1><span id="node" class="muted">loading</span>
<span>health: <span id="health">unknown</span></span>
<nav><a href="/debug/actors">actor tree</a> · <a href="/metrics">metrics</a> · <a href="/api/queues">queues JSON</a> · <a href="/api/node">node JSON</a></nav></header>
<div id="error" class="banner" hidden></div>
<ul id="fenced"></ul>
<h2>Queues (<span id="queue-count">0</span>)</h2>
<p class="muted">written = handed to the OS; durable = covered by an fsync. Unsynced = written, not yet durable.</p>
<table>
<thead><tr><th>queue</th><th>mode</th><th>ready</th><th>leased</th><th>delayed</th><th>dead-lettered</th><th>consumers</th>
<th>written next</th><th>durable next</th><th>unsynced records</th><th>unsynced bytes</th><th>last sync</th><th>sync interval</th><th>health</th></tr></thead>
<tbody id="queues"></tbody>
</table>
<section id="cluster-section" hidden><h2>Cluster</h2><pre id="cluster"></pre></section>
<p class="muted" id="updated"></p>
<script>` + dashboardScript + `</script>
</body>
</html>
`)

// contentSecurityPolicy allows the pages' own inline style and script,
// requests to this origin, and nothing else.
var contentSecurityPolicy = strings.Join([]string{
	"default-src 'none'",
	"script-src '" + sourceHash(dashboardScript) + "'",
	"style-src '" + sourceHash(pageStyle) + "'",
	"connect-src 'self'",
	"img-src 'self'",
	"base-uri 'none'",
	"form-action 'none'",
	"frame-ancestors 'none'",
}, "; ")

// sourceHash is the CSP hash source of an inline element's text.
func sourceHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

func (s *Server) handleDashboard(ctx *fasthttp.RequestCtx, _ string) {
	writeHTML(ctx, dashboardPage)
}

// writeHTML answers 200 with an HTML page under the endpoint's policy.
func writeHTML(ctx *fasthttp.RequestCtx, page []byte) {
	ctx.Response.Header.Set("Content-Security-Policy", contentSecurityPolicy)
	ctx.Response.Header.Set("Referrer-Policy", "no-referrer")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(page)
}
