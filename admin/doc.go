// Package admin is Fibril's HTTP debug and admin endpoint: what an operator
// reads and changes on a running node over HTTP.
//
// The endpoint knows the node only through the Node interface it declares
// (node.go), so it can be built and tested without a broker; broker.go
// adapts the actors.Broker to it. Start binds a listener (loopback only
// unless Options.AllowNonLoopback) and serves, with fasthttp:
//
//	GET  /                          dashboard overview (pages.go): rendered on the server, refreshed by /assets/dashboard.js
//	GET  /queues/{name}             one queue's page; GET /cluster the cluster page
//	GET  /assets/{file}             the dashboard's script and styles and uPlot, embedded
//	GET  /debug/actors              live actor tree: JSON, or HTML when the client prefers text/html
//	GET  /api/node                  node id, version, uptime, data dir, listen addresses, settings, resources
//	GET  /api/queues                every queue's status
//	GET  /api/queues/{name}         one queue's status; 404 JSON for an unknown queue
//	POST /api/queues/{name}/sync    sync the queue's log now (when the node is a QueueSyncer)
//	POST /api/queues/{name}/reopen  reopen a fenced or failed queue, running its log's recovery (reopen.go)
//	POST /api/queues/{name}/mode    change the queue's mode, durable or buffered (mode.go)
//	POST /api/queues/{name}/purge, /delete, /peek   queue actions (when the node is a QueueActor)
//	GET  /api/connections           client sessions (when the node is a ConnectionLister)
//	GET  /api/stats                 counters and latency histograms for the charts (MetricsGatherer)
//	GET  /api/settings/sync-interval
//	PUT  /api/settings/sync-interval  body "250ms", "0" (off) or {"interval_ms":250}
//	GET  /api/cluster               cluster status (when the node is a ClusterNode)
//	GET  /api/cluster/overview      every node's state and every queue's owner, asked of every node
//	GET  /healthz                   200 when every partition serves; 503 naming each fenced, unowned or stuck one
//	GET  /metrics                   Prometheus text format (metrics.go; docs/operations.md lists every family)
//
// Every progress figure says which boundary it means: written_next and
// unsynced_records count what reached the OS, durable_next what an fsync
// covered; a durable field never carries written progress.
//
// Access: the endpoint binds to loopback by default. On a node with a
// users file (UsersNode), every request but the static assets and
// /healthz's status needs the HTTP token or a user's "<user>:<token>"
// whose permissions allow it (credentials.go). Otherwise, when
// Options.Token is set, writes (PUT, POST) need it as "Authorization:
// Bearer <token>" (or as the password of HTTP Basic, so a browser can
// prompt for it); with Options.ProtectReads, reads need it too, /healthz
// and /metrics included.
// While bound to loopback the endpoint also refuses requests whose Host
// header names anything but a loopback address (a page served from a
// rebound DNS name cannot read it), and refuses writes whose Origin is
// another site.
//
// A node's command starts it after the broker and closes it first:
//
//	server, err := admin.Start(addr, admin.NewBrokerNode(broker), admin.Options{Logger: logger})
//	if err != nil { ... }
//	defer server.Close()
//
// Pages carry no external assets: scripts and styles come from /assets/
// (embedded in the binary), and the Content-Security-Policy allows nothing
// else but the actor page's inline style, pinned by its hash.
package admin
