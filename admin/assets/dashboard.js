// The dashboard's live part. The node renders every page with its data;
// this script refreshes it every two seconds from the JSON endpoints and
// draws the charts with uPlot. It builds every row with textContent, so
// nothing a node reports is ever parsed as markup. Rates and latency
// quantiles are computed from two successive reads of /api/stats, the way
// Prometheus' rate() and histogram_quantile() would.
"use strict";
(function () {
  const refreshMs = 2000;
  const keepPoints = 150; // five minutes at one point per refresh
  const $ = (id) => document.getElementById(id);
  const page = document.body.dataset.page;
  const queueName = document.body.dataset.queue;

  // --- token and requests ---
  const tokenInput = $("token");
  if (tokenInput) {
    tokenInput.value = sessionStorage.getItem("fibril-token") || "";
    tokenInput.addEventListener("change", () => sessionStorage.setItem("fibril-token", tokenInput.value));
  }
  function headers() {
    const token = tokenInput ? tokenInput.value : "";
    return token ? {"Authorization": "Bearer " + token} : {};
  }
  async function getJSON(path) {
    const response = await fetch(path, {cache: "no-store", credentials: "same-origin", headers: headers()});
    if (response.status === 401) throw new Error("the admin token is needed: enter it at the top right");
    const body = await response.json();
    return {status: response.status, body: body};
  }
  async function postJSON(path) {
    const response = await fetch(path, {method: "POST", cache: "no-store", credentials: "same-origin", headers: headers()});
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
    return body;
  }

  // --- formatting and rows ---
  function text(id, value) { const el = $(id); if (el) el.textContent = value === undefined || value === null ? "" : String(value); }
  function bytes(n) {
    if (n === undefined || n === null) return "n/a";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }
  function duration(seconds) {
    seconds = Math.floor(seconds);
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600), m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
    return (d ? d + "d " : "") + (d || h ? h + "h" : "") + (d || h || m ? m + "m" : "") + s + "s";
  }
  function when(unixMs) { return unixMs ? new Date(unixMs).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : "never"; }
  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      const value = typeof c === "object" && c !== null && !(c instanceof Node) ? c : {text: c};
      if (value.node) td.appendChild(value.node); else td.textContent = value.text === undefined || value.text === null ? "" : String(value.text);
      if (value.cls) td.className = value.cls;
      tr.appendChild(td);
    }
    return tr;
  }
  function link(href, label) { const a = document.createElement("a"); a.href = href; a.textContent = label; return a; }
  function fill(tbodyId, rows, emptyText, columns) {
    const tbody = $(tbodyId);
    if (!tbody) return;
    tbody.replaceChildren();
    for (const r of rows) tbody.appendChild(r);
    if (rows.length === 0) {
      const tr = document.createElement("tr"); tr.className = "empty";
      const td = document.createElement("td"); td.colSpan = columns; td.textContent = emptyText;
      tr.appendChild(td); tbody.appendChild(tr);
    }
  }

  // --- rates and quantiles from /api/stats ---
  let previousStats = null;
  function rate(now, before, key, queue) {
    const pick = (s) => queue ? ((s.queues[queue] || {})[key] || 0) : (s.totals[key] || 0);
    const seconds = (now.time_unix_ms - before.time_unix_ms) / 1000;
    return seconds > 0 ? Math.max(0, (pick(now) - pick(before)) / seconds) : 0;
  }
  // quantile of the observations between two reads of a histogram, with
  // linear interpolation inside a bucket; null when nothing was observed.
  function quantile(q, now, before) {
    if (!now || !now.counts) return null;
    const counts = now.counts.map((c, i) => c - (before && before.counts ? before.counts[i] || 0 : 0));
    const total = counts[counts.length - 1];
    if (!(total > 0)) return null;
    const rank = q * total;
    for (let i = 0; i < counts.length; i++) {
      if (counts[i] >= rank) {
        const lower = i === 0 ? 0 : now.upper_bounds[i - 1], upper = now.upper_bounds[i];
        if (!isFinite(upper)) return lower;
        const below = i === 0 ? 0 : counts[i - 1], inBucket = counts[i] - below;
        return inBucket > 0 ? lower + (upper - lower) * (rank - below) / inBucket : upper;
      }
    }
    return null;
  }

  // --- charts ---
  function makeChart(id, series) {
    const el = $(id);
    if (!el || typeof uPlot === "undefined") return null;
    const data = [[]].concat(series.map(() => []));
    const options = {
      width: Math.max(320, el.clientWidth || 480), height: 200,
      series: [{}].concat(series.map((s) => ({label: s.label, stroke: s.color, width: 2, spanGaps: true}))),
      axes: [{}, {size: 60}], scales: {x: {time: true}},
    };
    const plot = new uPlot(options, data, el);
    const chart = {el: el, plot: plot, data: data};
    window.addEventListener("resize", () => plot.setSize({width: Math.max(320, el.clientWidth), height: 200}));
    return chart;
  }
  function push(chart, time, values) {
    if (!chart) return;
    chart.data[0].push(time);
    values.forEach((v, i) => chart.data[i + 1].push(v));
    if (chart.data[0].length > keepPoints) chart.data.forEach((column) => column.shift());
    chart.plot.setData(chart.data);
    chart.el.dataset.points = String(chart.data[0].length);
  }
  const charts = {};
  if (page === "overview") {
    charts.rates = makeChart("chart-rates", [
      {label: "published", color: "#0b57d0"}, {label: "confirmed", color: "#188038"},
      {label: "delivered", color: "#e37400"}, {label: "acked", color: "#9334e6"}]);
    charts.latency = makeChart("chart-latency", [
      {label: "confirm p50", color: "#188038"}, {label: "confirm p99", color: "#0b57d0"},
      {label: "delivery p50", color: "#e37400"}, {label: "delivery p99", color: "#b3261e"}]);
  } else if (page === "queue") {
    charts.queue = makeChart("chart-queue-rates", [
      {label: "published", color: "#0b57d0"}, {label: "delivered", color: "#e37400"},
      {label: "acked", color: "#9334e6"}, {label: "redelivered", color: "#b3261e"}]);
  }
  function chartStats(stats) {
    if (previousStats) {
      const t = stats.time_unix_ms / 1000, b = previousStats;
      if (charts.rates) push(charts.rates, t, [rate(stats, b, "publishes"), rate(stats, b, "confirms"),
        rate(stats, b, "deliveries"), rate(stats, b, "settles_ack")]);
      if (charts.latency) {
        const ms = (v) => v === null ? null : v * 1000;
        const c = stats.histograms.confirm_latency_seconds, cb = b.histograms.confirm_latency_seconds;
        const d = stats.histograms.delivery_latency_seconds, db = b.histograms.delivery_latency_seconds;
        push(charts.latency, t, [ms(quantile(0.5, c, cb)), ms(quantile(0.99, c, cb)), ms(quantile(0.5, d, db)), ms(quantile(0.99, d, db))]);
      }
      if (charts.queue) push(charts.queue, t, [rate(stats, b, "publishes", queueName), rate(stats, b, "deliveries", queueName),
        rate(stats, b, "settles_ack", queueName), rate(stats, b, "redeliveries", queueName)]);
    }
  }

  // --- page refreshers ---
  function renderHeader(node, health) {
    text("node-id", node.node_id); text("node-version", node.version); text("node-uptime", duration(node.uptime_seconds));
    const h = $("health");
    if (h) { h.textContent = health.body.status; h.className = health.status === 200 ? "ok" : "bad"; }
    const list = $("fenced");
    if (list) {
      list.replaceChildren();
      for (const f of health.body.fenced) { const li = document.createElement("li"); li.textContent = f.queue + "/" + f.partition + ": " + f.error; list.appendChild(li); }
      if (health.body.fatal) { const li = document.createElement("li"); li.textContent = "fatal: " + health.body.fatal; list.appendChild(li); }
    }
    const r = node.resources || {};
    text("res-rss", bytes(r.resident_bytes)); text("res-heap", bytes(r.heap_bytes)); text("res-runtime", bytes(r.runtime_bytes));
    text("res-fds", r.open_files === undefined ? "n/a" : r.open_files); text("res-fds-max", r.max_open_files === undefined ? "n/a" : r.max_open_files);
    text("res-disk-free", bytes(r.disk_free_bytes)); text("res-disk-total", bytes(r.disk_total_bytes)); text("res-goroutines", r.goroutines);
  }
  async function refreshOverview(stats) {
    const [queues, connections] = await Promise.all([getJSON("/api/queues"), getJSON("/api/connections").catch(() => null)]);
    const totals = {ready: 0, leased: 0, delayed: 0, consumers: 0, unsynced: 0};
    const rows = queues.body.queues.map((q) => {
      totals.ready += q.counts.ready; totals.leased += q.counts.leased; totals.delayed += q.counts.delayed;
      totals.consumers += q.consumer_count; totals.unsynced += q.unsynced_records;
      const pub = previousStats && stats ? rate(stats, previousStats, "publishes", q.name).toFixed(1) : "–";
      const del = previousStats && stats ? rate(stats, previousStats, "deliveries", q.name).toFixed(1) : "–";
      const tr = row([{node: link("/queues/" + encodeURIComponent(q.name), q.name), cls: "text"},
        {text: q.mode + (q.mode_change ? " → " + q.mode_change.mode + " (" + q.mode_change.state + ")" : "") + (q.policy ? " · " + q.policy : ""), cls: "text"}, q.counts.ready, q.counts.leased, q.counts.delayed,
        q.counts.dead_lettered, q.consumer_count, pub, del, q.unsynced_records, when(q.last_sync_unix_ms),
        {text: q.fenced ? "fenced: " + (q.fence_error || "storage fault") : "serving", cls: "text " + (q.fenced ? "bad" : "ok")}]);
      tr.dataset.queue = q.name;
      return tr;
    });
    fill("queues", rows, "no queues yet: fibrilctl declare NAME", 12);
    text("queue-count", queues.body.count); text("total-queues", queues.body.count);
    text("total-ready", totals.ready); text("total-leased", totals.leased); text("total-delayed", totals.delayed);
    text("total-consumers", totals.consumers); text("total-unsynced", totals.unsynced);
    if (connections && connections.status === 200) {
      const list = connections.body.connections;
      fill("connections", list.map((c) => row([{text: c.client_name || "(unnamed)", cls: "text"}, {text: c.remote_address, cls: "text"},
        {text: c.session, cls: "text mono"}, when(c.connected_unix_ms), c.subscriptions, {text: c.state, cls: "text"}])),
        "no client connected", 6);
      text("connection-count", list.length); text("total-connections", list.length);
    }
  }
  async function refreshQueue() {
    const [queue, connections] = await Promise.all([getJSON("/api/queues/" + encodeURIComponent(queueName)),
      getJSON("/api/connections").catch(() => null)]);
    if (queue.status !== 200) throw new Error(queue.body.error || "the queue is gone");
    const q = queue.body;
    text("q-ready", q.counts.ready); text("q-leased", q.counts.leased); text("q-delayed", q.counts.delayed);
    text("q-dead", q.counts.dead_lettered); text("q-consumers", q.consumer_count); text("q-unsynced", q.unsynced_records);
    text("q-unsynced-bytes", bytes(q.unsynced_bytes)); text("q-last-sync", when(q.last_sync_unix_ms));
    text("q-written", q.written_next); text("q-durable", q.durable_next);
    const state = $("q-state");
    if (state) { state.textContent = q.fenced ? "fenced" : "serving"; state.className = q.fenced ? "bad" : "ok"; }
    text("q-mode", q.mode + (q.mode_revision ? " (revision " + q.mode_revision + ")" : ""));
    const change = $("q-mode-change");
    if (change) {
      const c = q.mode_change;
      change.textContent = c ? c.state + ": to " + c.mode + " (revision " + c.revision + ")" : "none pending";
      change.className = c ? "bad" : "ok";
    }
    text("q-mode-reason", q.mode_change ? q.mode_change.reason : "");
    const bySession = {};
    if (connections && connections.status === 200) for (const c of connections.body.connections) bySession[c.session] = c;
    fill("consumers", (q.consumers || []).map((c) => {
      const conn = bySession[c.session.split("/").pop()] || {};
      return row([{text: conn.client_name || "(unknown)", cls: "text"}, {text: conn.remote_address || "", cls: "text"},
        {text: c.session, cls: "text mono"}, c.subscription_id, c.prefetch, c.outstanding]);
    }), "no consumer", 6);
    fill("replicas", (q.replicas || []).map((r) => row([{text: r.node, cls: "text"}, {text: r.state || "", cls: "text"},
      r.written_next, r.durable_next, {text: r.applied_mode ? r.applied_mode + " (revision " + (r.mode_revision || 0) + ")" : "", cls: "text"}])),
      "a single node: one copy", 5);
    text("q-committed", q.committed_next === undefined ? "" : q.committed_next);
    text("q-commit-wait", (q.commit_wait_ms || 0) + " ms");
    fill("failovers", (q.failovers || []).slice().reverse().map((f) => {
      const stages = f.stages || [];
      const took = stages.length ? (stages[stages.length - 1].micros / 1000).toFixed(1) + " ms" : "";
      const line = stages.map((s) => s.stage + (s.peer ? " " + s.peer : "") + " " + (s.micros / 1000).toFixed(1)).join(" · ");
      return row([{text: f.started_at, cls: "text"}, f.epoch, {text: f.outcome, cls: "text"}, took, {text: line, cls: "text mono"}]);
    }), "none run by this node since it started", 5);
  }
  async function refreshCluster() {
    const overview = await getJSON("/api/cluster/overview");
    if (overview.status !== 200) return; // a single node: the page says so
    const o = overview.body;
    text("catalog-leader", o.catalog_leader || "none known"); text("catalog-revision", o.catalog_revision);
    fill("nodes", o.nodes.map((n) => {
      const tr = row([{text: n.id + (n.self ? " (this node)" : ""), cls: "text"}, {text: n.up ? "up" : "down", cls: "text " + (n.up ? "ok" : "bad")},
        {text: n.client_address, cls: "text"}, {node: link("http://" + n.http_address + "/", n.http_address), cls: "text"},
        {text: n.version || "", cls: "text"}, n.up ? duration(n.uptime_seconds) : "",
        n.resources ? bytes(n.resources.resident_bytes) : "–",
        n.resources && n.resources.open_files !== undefined ? n.resources.open_files : "–",
        n.resources ? bytes(n.resources.disk_free_bytes) : "–", n.open_queues,
        {text: n.catalog_leader || "", cls: "text"}, {text: n.liveness + (n.error ? " · " + n.error : ""), cls: "text"}]);
      tr.dataset.node = n.id;
      return tr;
    }), "no nodes", 12);
    fill("owners", o.queues.map((q) => row([{text: q.name, cls: "text"}, {text: q.mode, cls: "text"}, {text: q.policy, cls: "text"},
      {text: q.owner || "(electing)", cls: "text" + (q.owner_up ? "" : " bad")}, q.epoch, q.counts ? q.counts.ready : "–",
      q.counts ? q.counts.leased : "–", q.consumer_count, {text: q.replica_set.join(", "), cls: "text"}])), "no queues", 9);
    text("cluster-queue-count", o.queues.length);
  }

  async function refresh() {
    try {
      const [node, health] = await Promise.all([getJSON("/api/node"), getJSON("/healthz")]);
      renderHeader(node.body, health);
      let stats = null;
      if (page === "overview" || page === "queue") {
        const answer = await getJSON("/api/stats").catch(() => null);
        stats = answer && answer.status === 200 ? answer.body : null;
        if (stats) chartStats(stats);
      }
      if (page === "overview") await refreshOverview(stats);
      if (page === "queue") await refreshQueue();
      if (page === "cluster") await refreshCluster();
      if (stats) previousStats = stats;
      $("error").hidden = true;
      text("updated", "updated " + new Date().toLocaleTimeString());
    } catch (error) {
      text("error", "refresh failed: " + error.message);
      $("error").hidden = false;
    } finally {
      setTimeout(refresh, refreshMs);
    }
  }

  // --- queue actions ---
  function bindActions() {
    const result = $("action-result");
    const say = (message) => { if (result) result.textContent = message; };
    const base = "/api/queues/" + encodeURIComponent(queueName);
    const on = (id, handler) => { const el = $(id); if (el) el.addEventListener("click", () => handler().catch((e) => say(e.message))); };
    on("action-purge", async () => {
      if (!confirm("Remove every ready message of " + queueName + "?")) return;
      const body = await postJSON(base + "/purge"); say("purged: " + body.removed + " messages removed");
    });
    on("action-delete", async () => {
      if (!confirm("Delete queue " + queueName + " and all its messages?")) return;
      const body = await postJSON(base + "/delete"); say("deleted: " + body.removed + " messages removed");
    });
    on("action-reopen", async () => {
      await postJSON(base + "/reopen"); say("reopened");
    });
    on("action-peek", async () => {
      const count = ($("peek-count") || {}).value || "10";
      const body = await postJSON(base + "/peek?count=" + encodeURIComponent(count));
      const table = $("peek-table");
      if (table) table.hidden = false;
      fill("peeked", body.messages.map((m) => row([{text: m.message_id, cls: "text mono"}, m.offset, m.attempt, when(m.publish_unix_ms),
        {text: Object.keys(m.headers || {}).map((k) => k + "=" + m.headers[k]).join(", "), cls: "text"},
        {text: (m.body_base64 ? "(binary, " + m.body_bytes + " bytes)" : m.body) + (m.body_truncated ? "…" : ""), cls: "text"}])),
        "no ready message", 6);
      say("peeked " + body.messages.length + ": " + body.note);
    });
  }
  if (page === "queue") bindActions();
  setTimeout(refresh, 0);
})();
