package admin

import (
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleQueue is a buffered queue with written records not yet durable.
func sampleQueue() QueueStatus {
	return QueueStatus{
		Name: "orders", Mode: "buffered",
		Options:     QueueOptions{LeaseTimeoutMs: 30000, MaxDeliveries: 5, DeadLetterQueue: "orders.dead"},
		Counts:      QueueCounts{Ready: 7, Leased: 2, Delayed: 1, DeadLettered: 3},
		WrittenNext: 40, DurableNext: 31, UnsyncedRecords: 9, UnsyncedBytes: 1234,
		LastSyncUnixMs: 1_700_000_000_123, SyncIntervalMs: 100,
		ConsumerCount: 1,
		Consumers:     []ConsumerStatus{{Session: "node/sessions/7", Subscription: 9, Prefetch: 64, Outstanding: 2}},
	}
}

func TestNodeReportsIdentityUptimeListenersAndSettings(t *testing.T) {
	started := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	node := newFakeNode(started)
	clock := func() time.Time { return started.Add(90*time.Second + 250*time.Millisecond) }
	server := testServer(t, node, Options{Clock: clock, Token: "secret"})

	answer := do(t, server, "GET", "/api/node", "")
	answer.expectStatus(t, 200)
	var view struct {
		NodeID        string            `json:"node_id"`
		Version       string            `json:"version"`
		StartedUnixMs int64             `json:"started_unix_ms"`
		UptimeSeconds float64           `json:"uptime_seconds"`
		DataDir       string            `json:"data_dir"`
		Listen        map[string]string `json:"listen"`
		Settings      map[string]any    `json:"settings"`
		Cluster       bool              `json:"cluster"`
		Admin         map[string]bool   `json:"admin"`
	}
	answer.decode(t, &view)
	if view.NodeID != "node-a" || view.Version != "9.9.9" || view.DataDir != "/var/lib/fibril" {
		t.Fatalf("identity: %+v", view)
	}
	if view.StartedUnixMs != started.UnixMilli() || view.UptimeSeconds != 90.25 {
		t.Fatalf("started %d uptime %v", view.StartedUnixMs, view.UptimeSeconds)
	}
	wantListen := map[string]string{"client": "127.0.0.1:7420", "http": server.Addr().String()}
	if !reflect.DeepEqual(view.Listen, wantListen) {
		t.Fatalf("listen %v, want %v", view.Listen, wantListen)
	}
	if view.Settings["sync_interval_ms"] != 100.0 || view.Settings["max_body_bytes"] != float64(1<<20) {
		t.Fatalf("settings %v", view.Settings)
	}
	if view.Cluster || !view.Admin["writes_need_token"] || view.Admin["reads_need_token"] {
		t.Fatalf("cluster %v admin %v", view.Cluster, view.Admin)
	}
}

func TestQueueStatusShapeNamesItsBoundaries(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.setQueue(sampleQueue())
	server := testServer(t, node, Options{})

	object := do(t, server, "GET", "/api/queues/orders", "").object(t)
	want := []string{"consumer_count", "consumers", "counts", "desired_mode", "durable_next", "fenced", "last_sync_unix_ms",
		"mode", "mode_revision", "name", "options", "sync_interval_ms", "sync_pending", "unsynced_bytes", "unsynced_records",
		"written_next"}
	if got := keys(object); !reflect.DeepEqual(got, want) {
		t.Fatalf("queue keys %v\nwant %v", got, want)
	}
	if got := keys(object["counts"].(map[string]any)); !reflect.DeepEqual(got,
		[]string{"dead_lettered", "delayed", "leased", "ready"}) {
		t.Fatalf("counts keys %v", got)
	}
	if got := keys(object["options"].(map[string]any)); !reflect.DeepEqual(got,
		[]string{"dead_letter_queue", "lease_timeout_ms", "max_deliveries"}) {
		t.Fatalf("options keys (unset ones must be omitted) %v", got)
	}
	consumer := object["consumers"].([]any)[0].(map[string]any)
	if !reflect.DeepEqual(consumer, map[string]any{"session": "node/sessions/7", "subscription_id": 9.0,
		"prefetch": 64.0, "outstanding": 2.0}) {
		t.Fatalf("consumer %v", consumer)
	}

	var status QueueStatus
	do(t, server, "GET", "/api/queues/orders", "").decode(t, &status)
	if !reflect.DeepEqual(status, sampleQueue()) {
		t.Fatalf("round trip %+v\nwant %+v", status, sampleQueue())
	}
}

func TestQueueListIsSortedAndCounted(t *testing.T) {
	node := newFakeNode(time.Time{})
	for _, name := range []string{"zeta", "alpha", "mid"} {
		q := sampleQueue()
		q.Name = name
		node.setQueue(q)
	}
	server := testServer(t, node, Options{})
	var view struct {
		Count  int           `json:"count"`
		Queues []QueueStatus `json:"queues"`
	}
	do(t, server, "GET", "/api/queues", "").decode(t, &view)
	if view.Count != 3 || len(view.Queues) != 3 {
		t.Fatalf("count %d, %d queues", view.Count, len(view.Queues))
	}
	for i, name := range []string{"alpha", "mid", "zeta"} {
		if view.Queues[i].Name != name {
			t.Fatalf("queue %d is %q, want %q", i, view.Queues[i].Name, name)
		}
	}

	empty := newFakeNode(time.Time{})
	emptyServer := testServer(t, empty, Options{})
	answer := do(t, emptyServer, "GET", "/api/queues", "")
	if !strings.Contains(string(answer.body), `"queues": []`) {
		t.Fatalf("an empty list must be [], not null: %s", answer.body)
	}
}

func TestUnknownQueueIsNotFoundJSON(t *testing.T) {
	server := testServer(t, newFakeNode(time.Time{}), Options{})
	do(t, server, "GET", "/api/queues/missing", "").expectError(t, 404, `no queue named "missing"`)
	do(t, server, "POST", "/api/queues/missing/sync", "").expectError(t, 404, `no queue named "missing"`)
	do(t, server, "GET", "/api/queues/a/b/c", "").expectError(t, 404, "no endpoint")
	do(t, server, "GET", "/nothing-here", "").expectError(t, 404, "no endpoint at /nothing-here")
}

func TestQueueSyncOnRequest(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.setQueue(sampleQueue())
	server := testServer(t, node, Options{})

	answer := do(t, server, "POST", "/api/queues/orders/sync", "")
	answer.expectStatus(t, 200)
	var status QueueStatus
	answer.decode(t, &status)
	if status.UnsyncedRecords != 0 || status.DurableNext != status.WrittenNext {
		t.Fatalf("after sync: %+v", status)
	}

	node.syncErr = errors.New("injected: fsync failed")
	do(t, server, "POST", "/api/queues/orders/sync", "").expectError(t, 500, "injected: fsync failed")

	node.syncErr = fmt.Errorf("fake: %w", errors.ErrUnsupported)
	do(t, server, "POST", "/api/queues/orders/sync", "").expectError(t, 501, "cannot sync")

	plain := testServer(t, plainNode{node}, Options{})
	do(t, plain, "POST", "/api/queues/orders/sync", "").expectError(t, 501, "cannot sync")
}

func TestHealthFlipsTo503NamingEachFencedPartition(t *testing.T) {
	node := newFakeNode(time.Time{})
	server := testServer(t, node, Options{})

	serving := do(t, server, "GET", "/healthz", "")
	serving.expectStatus(t, 200)
	if got := string(serving.body); !strings.Contains(got, `"status": "serving"`) || !strings.Contains(got, `"fenced": []`) {
		t.Fatalf("serving body %s", got)
	}

	node.setHealth(Health{Fenced: []FencedPartition{
		{Queue: "payments", Partition: 0, Error: "storage/log: latched: fsync: injected I/O error"},
		{Queue: "orders", Partition: 1, Error: "storage/log: latched: write: no space left"},
	}})
	fenced := do(t, server, "GET", "/healthz", "")
	fenced.expectStatus(t, 503)
	var view healthView
	fenced.decode(t, &view)
	want := healthView{Status: "fenced", Fenced: []FencedPartition{
		{Queue: "orders", Partition: 1, Error: "storage/log: latched: write: no space left"},
		{Queue: "payments", Partition: 0, Error: "storage/log: latched: fsync: injected I/O error"},
	}}
	if !reflect.DeepEqual(view, want) {
		t.Fatalf("fenced view %+v\nwant %+v", view, want)
	}

	node.setHealth(Health{Fatal: "actors: root supervisor gave up"})
	failed := do(t, server, "GET", "/healthz", "")
	failed.expectStatus(t, 503)
	failed.decode(t, &view)
	if view.Status != "failed" || view.Fatal != "actors: root supervisor gave up" {
		t.Fatalf("failed view %+v", view)
	}

	node.setHealth(Health{})
	do(t, server, "GET", "/healthz", "").expectStatus(t, 200)
}

// A queue whose confirms cannot move makes the node unhealthy (503
// "stuck"); a follower that does not keep up is listed and does not.
func TestHealthNamesStuckQueuesAndLaggingFollowers(t *testing.T) {
	node := newFakeNode(time.Time{})
	server := testServer(t, node, Options{})
	lagging := []FencedPartition{{Queue: "orders", Error: "replica node3 is stalled for 2.0s pushing, 40 records behind at 100"}}
	node.setHealth(Health{Lagging: lagging})
	var view healthView
	response := do(t, server, "GET", "/healthz", "")
	response.expectStatus(t, 200)
	response.decode(t, &view)
	if view.Status != "serving" || !reflect.DeepEqual(view.Lagging, lagging) {
		t.Fatalf("with a lagging follower: %+v", view)
	}
	stuck := []FencedPartition{{Queue: "orders", Error: "confirms and deliveries are stuck: the quorum frontier (100) has not reached records written 6.0s ago"}}
	node.setHealth(Health{Stuck: stuck, Lagging: lagging})
	response = do(t, server, "GET", "/healthz", "")
	response.expectStatus(t, 503)
	response.decode(t, &view)
	if view.Status != "stuck" || !reflect.DeepEqual(view.Stuck, stuck) {
		t.Fatalf("with a stuck queue: %+v", view)
	}
}

func TestClusterSectionOnlyWhenTheNodeHasOne(t *testing.T) {
	node := newFakeNode(time.Time{})
	single := testServer(t, node, Options{})
	do(t, single, "GET", "/api/cluster", "").expectError(t, 404, "not run in a cluster")

	clustered := testServer(t, clusterNode{node}, Options{})
	answer := do(t, clustered, "GET", "/api/cluster", "")
	answer.expectStatus(t, 200)
	if object := answer.object(t); object["leader"] != "node-b" {
		t.Fatalf("cluster %v", object)
	}
	if view := do(t, clustered, "GET", "/api/node", "").object(t); view["cluster"] != true {
		t.Fatalf("node view does not announce the cluster: %v", view)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	server := testServer(t, newFakeNode(time.Time{}), Options{})
	for _, c := range []struct{ method, path, allow string }{
		{"POST", "/metrics", "GET, HEAD"},
		{"DELETE", "/api/queues", "GET, HEAD"},
		{"PUT", "/api/queues/orders", "GET, HEAD"},
		{"GET", "/api/queues/orders/sync", "POST"},
		{"POST", "/api/settings/sync-interval", "GET, HEAD, PUT"},
	} {
		answer := do(t, server, c.method, c.path, "")
		answer.expectError(t, 405, "method "+c.method+" not allowed")
		if got := answer.header.Get("Allow"); got != c.allow {
			t.Fatalf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	head := do(t, server, "HEAD", "/api/node", "")
	if head.status != 200 || len(head.body) != 0 {
		t.Fatalf("HEAD: %d with %d body bytes", head.status, len(head.body))
	}
}

// settingsToken is the HTTP token of the tests that change settings: a
// write that can weaken durability needs one even on loopback.
const settingsToken = "s3cret"

func TestSyncIntervalPutParsesAndApplies(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.setQueue(sampleQueue())
	server := testServer(t, node, Options{Token: settingsToken})

	for _, c := range []struct {
		body string
		want time.Duration
	}{
		{"250ms", 250 * time.Millisecond},
		{` {"interval_ms": 40} `, 40 * time.Millisecond},
		{`"2s"`, 2 * time.Second},
		{"0", 0},
		{"1h", time.Hour},
		{"100ms\n", 100 * time.Millisecond},
	} {
		answer := do(t, server, "PUT", "/api/settings/sync-interval", c.body, "Authorization", "Bearer "+settingsToken)
		answer.expectStatus(t, 200)
		var view struct {
			SyncIntervalMs         uint64  `json:"sync_interval_ms"`
			PreviousSyncIntervalMs *uint64 `json:"previous_sync_interval_ms"`
		}
		answer.decode(t, &view)
		if view.SyncIntervalMs != uint64(c.want/time.Millisecond) || view.PreviousSyncIntervalMs == nil {
			t.Fatalf("body %q: %+v", c.body, view)
		}
		if got := node.NodeInfo().SyncInterval; got != c.want {
			t.Fatalf("body %q: node interval %v, want %v", c.body, got, c.want)
		}
		q, _ := node.Queue("orders")
		if q.SyncIntervalMs != uint64(c.want/time.Millisecond) {
			t.Fatalf("body %q: queue reports %d ms", c.body, q.SyncIntervalMs)
		}
	}
	var view syncIntervalView
	do(t, server, "GET", "/api/settings/sync-interval", "").decode(t, &view)
	if view.SyncIntervalMs != 100 {
		t.Fatalf("GET after the last PUT: %+v", view)
	}
}

func TestSyncIntervalBadBodiesAre400(t *testing.T) {
	node := newFakeNode(time.Time{})
	server := testServer(t, node, Options{Token: settingsToken})
	for _, c := range []struct{ body, fragment string }{
		{"", "the body is empty"},
		{"250", `"250" has no unit`},
		{"fast", `"fast" is not a duration`},
		{"-5ms", "is negative"},
		{"2h", "longer than the most"},
		{"1500us", "not a whole number of milliseconds"},
		{`{"interval_ms": 2.5}`, "not a whole number"},
		{`{"interval_ms": -1}`, "outside 0..3600000"},
		{`{"interval": 250}`, `unknown field "interval"`},
		{`{}`, "no interval_ms"},
		{`{"interval_ms": 250} x`, "text after the JSON object"},
		{`{"interval_ms": 250`, "bad sync interval"},
		{`"250"`, "has no unit"},
	} {
		answer := do(t, server, "PUT", "/api/settings/sync-interval", c.body, "Authorization", "Bearer "+settingsToken)
		answer.expectError(t, 400, c.fragment, "send a duration such as 250ms")
	}
	if len(node.setCalls) != 0 {
		t.Fatalf("a refused body reached the node: %v", node.setCalls)
	}

	node.setErr = fmt.Errorf("fake: %w: too slow for this disk", ErrInvalidSetting)
	do(t, server, "PUT", "/api/settings/sync-interval", "5ms", "Authorization", "Bearer "+settingsToken).
		expectError(t, 400, "too slow for this disk")
	node.setErr = errors.New("fake: the broker is stopping")
	do(t, server, "PUT", "/api/settings/sync-interval", "5ms", "Authorization", "Bearer "+settingsToken).
		expectError(t, 500, "the broker is stopping")
}

func TestTokenProtectsWrites(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.setQueue(sampleQueue())
	server := testServer(t, node, Options{Token: "s3cret"})

	do(t, server, "GET", "/api/queues", "").expectStatus(t, 200)
	do(t, server, "GET", "/healthz", "").expectStatus(t, 200)
	missing := do(t, server, "PUT", "/api/settings/sync-interval", "10ms")
	missing.expectError(t, 401, "admin token")
	if got := missing.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Fatalf("challenge %q", got)
	}
	do(t, server, "PUT", "/api/settings/sync-interval", "10ms", "Authorization", "Bearer wrong").expectStatus(t, 401)
	do(t, server, "POST", "/api/queues/orders/sync", "").expectStatus(t, 401)
	do(t, server, "PUT", "/api/settings/sync-interval", "10ms", "Authorization", "Bearer s3cret").expectStatus(t, 200)
	if got := node.NodeInfo().SyncInterval; got != 10*time.Millisecond {
		t.Fatalf("interval %v after an authorized PUT", got)
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:s3cret"))
	do(t, server, "POST", "/api/queues/orders/sync", "", "Authorization", basic).expectStatus(t, 200)
	if len(node.setCalls) != 1 {
		t.Fatalf("refused writes reached the node: %v", node.setCalls)
	}
}

func TestTokenProtectsReadsWhenAsked(t *testing.T) {
	node := newFakeNode(time.Time{})
	server := testServer(t, node, Options{Token: "s3cret", ProtectReads: true})
	for _, path := range []string{"/", "/api/node", "/api/queues", "/debug/actors", "/healthz", "/metrics", "/nowhere"} {
		do(t, server, "GET", path, "").expectError(t, 401, "admin token")
		do(t, server, "GET", path, "", "Authorization", "Bearer nope").expectStatus(t, 401)
	}
	browser := do(t, server, "GET", "/", "", "Accept", "text/html,*/*;q=0.8")
	if got := browser.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Basic") {
		t.Fatalf("a browser must be offered Basic so it can prompt; got %q", got)
	}
	do(t, server, "GET", "/api/node", "", "Authorization", "Bearer s3cret").expectStatus(t, 200)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(":s3cret"))
	do(t, server, "GET", "/", "", "Authorization", basic).expectStatus(t, 200)

	if _, err := Start("127.0.0.1:0", node, Options{ProtectReads: true}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("ProtectReads without a token: %v", err)
	}
}

func TestTokenMatches(t *testing.T) {
	basic := func(credentials string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(credentials))
	}
	for _, c := range []struct {
		header string
		want   bool
	}{
		{"Bearer tok", true},
		{"bearer tok", true},
		{"Bearer  tok ", true},
		{"Bearer tok2", false},
		{"Bearer to", false},
		{"Bearer ", false},
		{"tok", false},
		{basic("any:tok"), true},
		{basic(":tok"), true},
		{basic("tok"), false},
		{basic("tok:"), false},
		{"Basic !!!", false},
		{"", false},
	} {
		if got := tokenMatches([]byte(c.header), "tok"); got != c.want {
			t.Fatalf("%q: %v, want %v", c.header, got, c.want)
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	node := newFakeNode(time.Time{})
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "example.invalid:0"} {
		if _, err := Start(addr, node, Options{}); !errors.Is(err, ErrNotLoopback) {
			t.Fatalf("%q: %v, want ErrNotLoopback", addr, err)
		}
	}
	if _, err := Start("no-port", node, Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("address without a port: %v", err)
	}
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.8.9.10": true, "::1": true, "[::1]": true, "localhost": true, "LocalHost": true,
		"": false, "0.0.0.0": false, "10.0.0.1": false, "::": false, "localhost.example": false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Fatalf("isLoopbackHost(%q) = %v", host, got)
		}
	}
}

// A write that can weaken durability needs the HTTP token even on
// loopback: without one configured it is refused, with a sentence saying
// how to configure one, and reaches nothing.
func TestSyncIntervalNeedsATokenEvenOnLoopback(t *testing.T) {
	node := newFakeNode(time.Time{})
	server := testServer(t, node, Options{})
	for _, body := range []string{"0", "1h", "5ms"} {
		do(t, server, "PUT", "/api/settings/sync-interval", body).
			expectError(t, 403, "needs the HTTP token even on loopback", "--http-token-file")
	}
	if len(node.setCalls) != 0 {
		t.Fatalf("a refused write reached the node: %v", node.setCalls)
	}
	do(t, server, "GET", "/api/settings/sync-interval", "").expectStatus(t, 200) // reads stay open
}

func TestRequestsMustBeAddressedToLoopback(t *testing.T) {
	node := newFakeNode(time.Time{})
	server := testServer(t, node, Options{Token: settingsToken})
	do(t, server, "GET", "/api/node", "", "Host", "rebound.example:7480").expectError(t, 403, "not a loopback address")
	do(t, server, "GET", "/api/node", "", "Host", "localhost:7480").expectStatus(t, 200)
	do(t, server, "GET", "/api/node", "", "Host", "[::1]:7480").expectStatus(t, 200)

	self := "http://" + server.Addr().String()
	auth := "Bearer " + settingsToken
	do(t, server, "PUT", "/api/settings/sync-interval", "5ms", "Origin", "http://elsewhere.example", "Authorization", auth).
		expectError(t, 403, "cross-origin write refused")
	do(t, server, "PUT", "/api/settings/sync-interval", "5ms", "Origin", "null", "Authorization", auth).expectStatus(t, 403)
	do(t, server, "PUT", "/api/settings/sync-interval", "5ms", "Origin", self, "Authorization", auth).expectStatus(t, 200)
	if len(node.setCalls) != 1 {
		t.Fatalf("refused writes reached the node: %v", node.setCalls)
	}
}

func TestCloseRightAfterStart(t *testing.T) {
	for i := 0; i < 20; i++ {
		server, err := Start("127.0.0.1:0", newFakeNode(time.Time{}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := server.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
}

func TestCloseIsIdempotentAndStopsServing(t *testing.T) {
	server, err := Start("127.0.0.1:0", newFakeNode(time.Time{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	do(t, server, "GET", "/healthz", "").expectStatus(t, 200)
	if err := server.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := server.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	request := "http://" + server.Addr().String() + "/healthz"
	if answer, err := httpGetNoKeepAlive(request); err == nil {
		t.Fatalf("still serving after Close: %d", answer)
	}
}
