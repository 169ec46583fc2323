package admin

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func httpGetNoKeepAlive(url string) (int, error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	answer, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	answer.Body.Close()
	return answer.StatusCode, nil
}

// treeJSON fetches the actor tree as JSON.
func treeJSON(t *testing.T, server *Server, headers ...string) actorTreeView {
	t.Helper()
	answer := do(t, server, "GET", "/debug/actors", "", headers...)
	answer.expectStatus(t, 200)
	var view actorTreeView
	answer.decode(t, &view)
	return view
}

// findActor returns the tree node at path, or nil.
func findActor(nodes []*actorNode, path string) *actorNode {
	for _, node := range nodes {
		if node.Path == path {
			return node
		}
		if found := findActor(node.Children, path); found != nil {
			return found
		}
	}
	return nil
}

func TestActorTreeJSONFollowsStartsAndStops(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.startActor("node", "node", "serving", 0)
	node.startActor("node/sessions", "sessions", "1 open", 0)
	node.startActor("node/queues", "queues", "2 queues", 0)
	node.startActor("node/queues/orders/0", "partition", "ready 7, leased 2", 3)
	node.startActor("node/queues/orders/0/log", "log", "written_next 40, durable_next 31", 1)
	node.startActor("node/queues/orders/0/sync", "sync", "every 100ms", 0)
	node.startActor("node/queues/orders/10", "partition", "ready 0", 0)
	node.startActor("node/queues/orders/2", "partition", "ready 0", 0)
	server := testServer(t, node, Options{})

	view := treeJSON(t, server)
	if view.ActorCount != 8 || len(view.Tree) != 1 || view.Tree[0].Path != "node" {
		t.Fatalf("tree %+v", view)
	}
	group := findActor(view.Tree, "node/queues/orders")
	if group == nil || group.Kind != "group" || group.Name != "orders" {
		t.Fatalf("queue name segment must be a group node: %+v", group)
	}
	var partitions []string
	for _, child := range group.Children {
		partitions = append(partitions, child.Name)
	}
	if strings.Join(partitions, ",") != "0,2,10" {
		t.Fatalf("partitions in order %v, want numeric order", partitions)
	}
	partition := findActor(view.Tree, "node/queues/orders/0")
	if partition.Kind != "partition" || partition.MailboxDepth != 3 || partition.Summary != "ready 7, leased 2" ||
		partition.StartedUnixMs != 1_700_000_000_000 || len(partition.Children) != 2 {
		t.Fatalf("partition %+v", partition)
	}
	if findActor(view.Tree, "node/sessions/s1") != nil {
		t.Fatal("a session before it started")
	}

	node.startActor("node/sessions/s1", "session", "client 127.0.0.1:5555", 0)
	if session := findActor(treeJSON(t, server).Tree, "node/sessions/s1"); session == nil || session.Kind != "session" {
		t.Fatalf("started session missing: %+v", session)
	}
	node.stopActor("node/sessions/s1")
	after := treeJSON(t, server)
	if findActor(after.Tree, "node/sessions/s1") != nil || after.ActorCount != 8 {
		t.Fatalf("stopped session still shown: %+v", after)
	}
	raw := do(t, server, "GET", "/debug/actors", "").body
	if !bytes.Contains(raw, []byte(`"children": []`)) {
		t.Fatalf("leaves must have empty children, not null: %s", raw)
	}
}

func TestActorTreeHTMLForBrowsers(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.startActor("node", "node", "serving", 0)
	node.startActor("node/queues/orders/0", "partition", `ready <b>7</b> & "more"`, 5)
	server := testServer(t, node, Options{})

	page := do(t, server, "GET", "/debug/actors", "", "Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	page.expectStatus(t, 200)
	if got := page.header.Get("Content-Type"); !strings.HasPrefix(got, "text/html") {
		t.Fatalf("content type %q", got)
	}
	html := string(page.body)
	for _, want := range []string{"2 live actors", `<span class="name">orders</span> <span class="kind">group</span>`,
		"mailbox 5", "ready &lt;b&gt;7&lt;/b&gt; &amp; &#34;more&#34;", "<ul>"} {
		if !strings.Contains(html, want) {
			t.Fatalf("page lacks %q:\n%s", want, html)
		}
	}
	if strings.Contains(html, "<b>7</b>") {
		t.Fatal("a summary was rendered as markup")
	}
	if got := strings.Count(html, "<li>"); got != 4 {
		t.Fatalf("%d list items, want 4 (node, queues, orders, 0):\n%s", got, html)
	}
	checkNoExternalAssets(t, server, page)

	forcedJSON := do(t, server, "GET", "/debug/actors?format=json", "", "Accept", "text/html")
	if !strings.HasPrefix(forcedJSON.header.Get("Content-Type"), "application/json") {
		t.Fatalf("?format=json ignored: %s", forcedJSON.header.Get("Content-Type"))
	}
	forcedHTML := do(t, server, "GET", "/debug/actors?format=html", "")
	if !strings.HasPrefix(forcedHTML.header.Get("Content-Type"), "text/html") {
		t.Fatalf("?format=html ignored")
	}
	do(t, server, "GET", "/debug/actors?format=xml", "").expectError(t, 400, `unknown format "xml"`)
}

func TestPrefersHTML(t *testing.T) {
	for accept, want := range map[string]bool{
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": true,
		"text/html":                         true,
		"TEXT/HTML; q=1":                    true,
		"text/*":                            true,
		"*/*":                               false,
		"":                                  false,
		"application/json":                  false,
		"application/json, text/html;q=0.5": false,
		"text/html;q=0":                     false,
		"text/html;q=0.4, */*;q=0.5":        false,
		"text/html, application/json":       true,
	} {
		if got := prefersHTML(accept); got != want {
			t.Fatalf("prefersHTML(%q) = %v, want %v", accept, got, want)
		}
	}
}

func TestBuildActorTreeWithoutAncestorsAndEmpty(t *testing.T) {
	if roots := buildActorTree(nil); len(roots) != 0 || roots == nil {
		t.Fatalf("empty tree %v", roots)
	}
	roots := buildActorTree([]ActorInfo{{Path: "a/b/c", Kind: "leaf"}, {Path: "a", Kind: "root"}})
	if len(roots) != 1 || roots[0].Kind != "root" || roots[0].Children[0].Kind != "group" ||
		roots[0].Children[0].Children[0].Kind != "leaf" {
		t.Fatalf("tree %+v", roots)
	}
}

// checkNoExternalAssets fails unless a page loads nothing from elsewhere
// and its policy pins its inline style and script by hash.
// checkNoExternalAssets checks that a page loads nothing from elsewhere:
// every script and stylesheet comes from this endpoint's /assets/ (and is
// served), the policy allows requests to this origin only, and inline
// styles are pinned by hash.
func checkNoExternalAssets(t *testing.T, server *Server, page response) {
	t.Helper()
	html := string(page.body)
	for _, banned := range []string{"@import", "url(", `src="http`, `src="//`} {
		if strings.Contains(html, banned) {
			t.Fatalf("page refers to %q", banned)
		}
	}
	references := regexp.MustCompile(`<(?:script|link)[^>]*(?:src|href)="([^"]*)"`)
	found := references.FindAllStringSubmatch(html, -1)
	if len(found) == 0 && strings.Contains(html, "<script") {
		t.Fatal("no script reference found")
	}
	for _, match := range found {
		if !strings.HasPrefix(match[1], "/assets/") {
			t.Fatalf("page loads %q from outside /assets/", match[1])
		}
		asset := do(t, server, "GET", match[1], "")
		asset.expectStatus(t, 200)
		if asset.header.Get("Content-Security-Policy") == "" {
			t.Fatalf("asset %s is served without the policy", match[1])
		}
	}
	policy := page.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "script-src 'self'"} {
		if !strings.Contains(policy, want) {
			t.Fatalf("policy %q lacks %q", policy, want)
		}
	}
	if strings.Contains(policy, "unsafe-inline") || strings.Contains(policy, "unsafe-eval") {
		t.Fatalf("policy %q allows inline code", policy)
	}
	for _, element := range []string{"style", "script"} {
		pattern := regexp.MustCompile(`(?s)<` + element + `>(.*?)</` + element + `>`)
		for _, match := range pattern.FindAllStringSubmatch(html, -1) {
			if hash := sourceHash(match[1]); !strings.Contains(policy, "'"+hash+"'") {
				t.Fatalf("inline %s with hash %s is not allowed by the policy %q", element, hash, policy)
			}
		}
	}
}

// The dashboard is rendered on the server: its rows are in the HTML before
// any script runs, and its script (an asset) refreshes them.
func TestDashboardIsRenderedOnTheServerAndRefreshes(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.setQueue(QueueStatus{Name: "orders", Mode: "durable", Counts: QueueCounts{Ready: 7, Leased: 2}, ConsumerCount: 1})
	server := testServer(t, node, Options{})
	page := do(t, server, "GET", "/", "")
	page.expectStatus(t, 200)
	if got := page.header.Get("Content-Type"); got != "text/html; charset=utf-8" {
		t.Fatalf("content type %q", got)
	}
	checkNoExternalAssets(t, server, page)
	html := string(page.body)
	for _, want := range []string{`<tr data-queue="orders">`, `<a href="/queues/orders">orders</a>`, "<td>7</td>",
		`id="chart-rates"`, `id="chart-latency"`, `href="/debug/actors"`, "unsynced records", `id="res-rss"`} {
		if !strings.Contains(html, want) {
			t.Fatalf("dashboard lacks %q:\n%s", want, html)
		}
	}
	script := string(do(t, server, "GET", "/assets/dashboard.js", "").body)
	for _, want := range []string{`getJSON("/api/queues")`, `getJSON("/healthz")`, `getJSON("/api/stats")`,
		`getJSON("/api/cluster/overview")`, "setTimeout(refresh, refreshMs)", "new uPlot("} {
		if !strings.Contains(script, want) {
			t.Fatalf("dashboard script lacks %q", want)
		}
	}
	if strings.Contains(html+script, "innerHTML") {
		t.Fatal("the dashboard must build its tables with textContent")
	}
	queuePage := do(t, server, "GET", "/queues/orders", "")
	queuePage.expectStatus(t, 200)
	checkNoExternalAssets(t, server, queuePage)
	if !strings.Contains(string(queuePage.body), `id="q-ready">7</b>`) {
		t.Fatalf("queue page:\n%s", queuePage.body)
	}
	do(t, server, "GET", "/queues/missing", "").expectStatus(t, 404)
	if cluster := do(t, server, "GET", "/cluster", ""); !strings.Contains(string(cluster.body), "This node runs alone") {
		t.Fatalf("cluster page of a single node:\n%s", cluster.body)
	}
	if license := do(t, server, "GET", "/assets/LICENSE-uPlot", ""); !strings.Contains(string(license.body), "MIT License") {
		t.Fatal("uPlot's license is not served")
	}
	do(t, server, "GET", "/assets/../go.mod", "").expectStatus(t, 404)
}

func TestMetricsParseAsPrometheusText(t *testing.T) {
	node := newFakeNode(time.Time{})
	publishes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fibril_publishes_total", Help: "h"}, []string{"queue"})
	confirms := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fibril_confirms_total", Help: "h"},
		[]string{"queue", "boundary"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fibril_confirm_latency_seconds", Help: "h",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 19)}, []string{"queue"})
	node.metrics.MustRegister(publishes, confirms, latency)
	publishes.WithLabelValues("orders").Add(42)
	confirms.WithLabelValues("orders", "written").Add(40)
	for _, seconds := range []float64{0.0004, 0.0011, 0.0011, 0.02} {
		latency.WithLabelValues("orders").Observe(seconds)
	}
	server := testServer(t, node, Options{})

	answer := do(t, server, "GET", "/metrics", "")
	answer.expectStatus(t, 200)
	if got := answer.header.Get("Content-Type"); !strings.HasPrefix(got, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", got)
	}
	families := checkExposition(t, answer.body)
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		family, ok := families[name]
		if !ok {
			t.Fatalf("no family %s", name)
		}
		for _, metric := range family.GetMetric() {
			if labelsMatch(metric, labels) {
				return sampleValue(metric)
			}
		}
		t.Fatalf("no %s with labels %v", name, labels)
		return 0
	}
	if got := value("fibril_publishes_total", map[string]string{"queue": "orders"}); got != 42 {
		t.Fatalf("publishes %v", got)
	}
	if got := value("fibril_confirms_total", map[string]string{"queue": "orders", "boundary": "written"}); got != 40 {
		t.Fatalf("confirms %v", got)
	}
	histogram := families["fibril_confirm_latency_seconds"].GetMetric()[0].GetHistogram()
	if histogram.GetSampleCount() != 4 || histogram.GetSampleSum() < 0.0225 || histogram.GetSampleSum() > 0.0227 {
		t.Fatalf("confirm latency histogram %v", histogram)
	}
	// histogram_quantile needs cumulative le buckets: 0.0004 s is under
	// the 0.0008 s bound, the two 0.0011 s under 0.0016 s.
	for _, bucket := range histogram.GetBucket() {
		switch bucket.GetUpperBound() {
		case 0.0008:
			if bucket.GetCumulativeCount() != 1 {
				t.Fatalf("le=0.0008: %d", bucket.GetCumulativeCount())
			}
		case 0.0016:
			if bucket.GetCumulativeCount() != 3 {
				t.Fatalf("le=0.0016: %d", bucket.GetCumulativeCount())
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_open_fds", "process_resident_memory_bytes",
		"fibril_data_disk_free_bytes", "fibril_build_info"} {
		if _, ok := families[name]; !ok {
			t.Fatalf("/metrics lacks %s", name)
		}
	}
}

// checkExposition parses a /metrics body with Prometheus' own text parser
// and checks the rules a scraper and histogram_quantile rely on: every
// family has HELP and TYPE lines, and every histogram has cumulative le
// buckets ending in +Inf. It returns the parsed families by name.
func checkExposition(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v\n%s", err, body)
	}
	help, types := map[string]bool{}, map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[0] == "#" && fields[1] == "HELP":
			help[fields[2]] = len(fields) > 3
		case len(fields) == 4 && fields[0] == "#" && fields[1] == "TYPE":
			types[fields[2]] = fields[3]
		}
	}
	for name, family := range families {
		if !help[name] {
			t.Errorf("family %s has no HELP text", name)
		}
		if types[name] == "" {
			t.Errorf("family %s has no TYPE line", name)
		}
		if family.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		if !bytes.Contains(body, []byte(name+"_bucket{")) || !strings.Contains(string(body), `le="+Inf"`) {
			t.Errorf("histogram %s has no le buckets in the text", name)
		}
		for _, metric := range family.GetMetric() {
			buckets := metric.GetHistogram().GetBucket()
			if len(buckets) == 0 {
				t.Errorf("histogram %s%v has no buckets", name, metric.GetLabel())
				continue
			}
			for i := 1; i < len(buckets); i++ {
				if buckets[i].GetUpperBound() <= buckets[i-1].GetUpperBound() ||
					buckets[i].GetCumulativeCount() < buckets[i-1].GetCumulativeCount() {
					t.Errorf("histogram %s: buckets not cumulative in le order", name)
				}
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return families
}

func labelsMatch(metric *dto.Metric, labels map[string]string) bool {
	found := 0
	for _, pair := range metric.GetLabel() {
		if want, ok := labels[pair.GetName()]; ok {
			if want != pair.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(labels)
}

func sampleValue(metric *dto.Metric) float64 {
	switch {
	case metric.Counter != nil:
		return metric.GetCounter().GetValue()
	case metric.Gauge != nil:
		return metric.GetGauge().GetValue()
	default:
		return metric.GetUntyped().GetValue()
	}
}
