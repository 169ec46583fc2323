package admin

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

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
	checkNoExternalAssets(t, page)

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
func checkNoExternalAssets(t *testing.T, page response) {
	t.Helper()
	html := string(page.body)
	for _, banned := range []string{"http://", "https://", "//", " src=", "<link", "@import", "url("} {
		if strings.Contains(html, banned) {
			t.Fatalf("page refers to %q", banned)
		}
	}
	policy := page.header.Get("Content-Security-Policy")
	if !strings.Contains(policy, "default-src 'none'") || !strings.Contains(policy, "connect-src 'self'") {
		t.Fatalf("policy %q", policy)
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

func TestDashboardIsSelfContainedAndRefreshes(t *testing.T) {
	server := testServer(t, newFakeNode(time.Time{}), Options{})
	page := do(t, server, "GET", "/", "")
	page.expectStatus(t, 200)
	if got := page.header.Get("Content-Type"); got != "text/html; charset=utf-8" {
		t.Fatalf("content type %q", got)
	}
	checkNoExternalAssets(t, page)
	html := string(page.body)
	for _, want := range []string{`fetch(path`, `getJSON("/api/queues")`, `getJSON("/healthz")`,
		`getJSON("/api/cluster")`, "setTimeout(refresh, refreshMs)", `href="/debug/actors"`, "unsynced records",
		"q.mode", "q.unsynced_records", "q.fenced"} {
		if !strings.Contains(html, want) {
			t.Fatalf("dashboard lacks %q", want)
		}
	}
	if strings.Contains(html, "innerHTML") {
		t.Fatal("the dashboard must build its tables with textContent")
	}
}

func TestMetricsParseAsPrometheusText(t *testing.T) {
	node := newFakeNode(time.Time{})
	node.metrics.GetOrCreateCounter(`fibril_publishes_total{queue="orders"}`).Add(42)
	node.metrics.GetOrCreateCounter(`fibril_confirms_total{queue="orders",boundary="written"}`).Add(40)
	node.metrics.GetOrCreateGauge(`fibril_durable_lag_records{queue="orders"}`, func() float64 { return 9 })
	histogram := node.metrics.GetOrCreateHistogram(`fibril_append_seconds{queue="orders"}`)
	for _, seconds := range []float64{0.0004, 0.0011, 0.0011, 0.02} {
		histogram.Update(seconds)
	}
	server := testServer(t, node, Options{})

	answer := do(t, server, "GET", "/metrics", "")
	answer.expectStatus(t, 200)
	if got := answer.header.Get("Content-Type"); !strings.HasPrefix(got, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", got)
	}
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(bytes.NewReader(answer.body))
	if err != nil {
		t.Fatalf("not Prometheus text: %v\n%s", err, answer.body)
	}
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
	if got := value("fibril_durable_lag_records", map[string]string{"queue": "orders"}); got != 9 {
		t.Fatalf("lag %v", got)
	}
	if got := value("fibril_append_seconds_count", map[string]string{"queue": "orders"}); got != 4 {
		t.Fatalf("append count %v", got)
	}
	if got := value("fibril_append_seconds_sum", map[string]string{"queue": "orders"}); got < 0.0225 || got > 0.0227 {
		t.Fatalf("append sum %v", got)
	}
	if len(families["fibril_append_seconds_bucket"].GetMetric()) == 0 {
		t.Fatal("no append latency buckets")
	}
	if value("go_goroutines", nil) <= 0 {
		t.Fatal("process metrics missing")
	}
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
