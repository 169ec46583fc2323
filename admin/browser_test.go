package admin

// The dashboard in a real headless browser (Chromium through chromedp)
// against live brokers: the overview's queue rows and totals render and
// update while traffic flows, its charts draw and gain points, the queue
// page shows its consumer with its client name and runs a peek, and the
// cluster page lists three nodes up with a catalog leader and the queues'
// owners. One screenshot per page is written to docs/images when
// FIBRIL_SCREENSHOTS=1 (and to the test's temporary directory otherwise).
//
// The test needs a Chromium binary; it skips, saying so, when none is
// installed (.ci/run installs Debian's).

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// chromiumPath finds a Chromium (or Chrome) binary, or "".
func chromiumPath() string {
	for _, candidate := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(candidate); err == nil {
			return path
		}
	}
	return ""
}

// browser starts a headless Chromium with a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		t.Skip("no Chromium binary found (looked for /usr/bin/chromium, chromium, chromium-browser, google-chrome); " +
			"install it (apt-get install -y chromium) to run the dashboard's browser test")
	}
	options := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1000),
	}
	allocator, cancelAllocator := chromedp.NewExecAllocator(context.Background(), options...)
	ctx, cancelBrowser := chromedp.NewContext(allocator)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAllocator() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// screenshot saves the page as PNG: into docs/images with
// FIBRIL_SCREENSHOTS=1, else into the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	image, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := t.TempDir()
	if os.Getenv("FIBRIL_SCREENSHOTS") == "1" {
		dir = filepath.Join("..", "docs", "images")
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), image, 0o644); err != nil {
		t.Fatal(err)
	}
}

// evaluate runs JavaScript in the page and returns its result.
func evaluate[T any](t *testing.T, ctx context.Context, expression string) T {
	t.Helper()
	value, err := chromedp.Run(ctx, chromedp.Evaluate[T](expression))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expression, err)
	}
	return value
}

// waitTrue polls a JavaScript condition until it holds.
func waitTrue(t *testing.T, ctx context.Context, what, condition string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](condition, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(45*time.Second))); err != nil {
		t.Fatalf("waiting until %s (%s): %v", what, condition, err)
	}
}

func TestDashboardInAHeadlessBrowser(t *testing.T) {
	ctx := browser(t)
	node := startLiveNode(t, func(config *actors.Config) { config.SyncInterval = 100 * time.Millisecond })
	base := "http://" + node.server.Addr().String()
	sdk, err := client.Dial(t.Context(), client.Options{Addresses: []string{node.broker.Addr().String()}, ClientName: "browser-test-worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	for _, q := range []struct {
		name string
		mode client.Mode
	}{{"orders", client.ModeDurable}, {"clicks", client.ModeBuffered}} {
		if _, err := sdk.Declare(t.Context(), q.name, client.QueueConfig{Mode: q.mode}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sdk.Subscribe(t.Context(), "clicks", client.SubscribeOptions{Prefetch: 16,
		Handler: func(d *client.Delivery) { _ = d.Ack() }}); err != nil {
		t.Fatal(err)
	}
	// A slow consumer of orders: it holds its five and settles nothing.
	if _, err := sdk.Subscribe(t.Context(), "orders", client.SubscribeOptions{Prefetch: 5}); err != nil {
		t.Fatal(err)
	}
	traffic := startTraffic(t, sdk)

	// Overview: rendered rows first, then live updates and charts.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#queues tr[data-queue="orders"]`)); err != nil {
		t.Fatalf("overview: %v", err)
	}
	waitTrue(t, ctx, "the rate chart has points", `Number(document.getElementById("chart-rates").dataset.points) >= 3`)
	waitTrue(t, ctx, "the latency chart has points", `Number(document.getElementById("chart-latency").dataset.points) >= 3`)
	if canvases := evaluate[int](t, ctx, `document.querySelectorAll("#chart-rates canvas, #chart-latency canvas").length`); canvases < 2 {
		t.Fatalf("%d chart canvases drawn", canvases)
	}
	readyBefore := evaluate[string](t, ctx, `document.querySelector('#queues tr[data-queue="orders"] td:nth-child(3)').textContent`)
	traffic.publish(t, "orders", 25) // nobody consumes orders: its ready count grows
	waitTrue(t, ctx, "the orders row shows the new messages",
		fmt.Sprintf(`Number(document.querySelector('#queues tr[data-queue="orders"] td:nth-child(3)').textContent) >= %s + 25`, numberOr0(readyBefore)))
	waitTrue(t, ctx, "a publish rate above zero is shown",
		`Number(document.querySelector('#queues tr[data-queue="clicks"] td:nth-child(8)').textContent) > 0`)
	waitTrue(t, ctx, "the connection table names the worker",
		`document.getElementById("connections").textContent.includes("browser-test-worker")`)
	waitTrue(t, ctx, "the resources show memory", `document.getElementById("res-rss").textContent.includes("iB")`)
	screenshot(t, ctx, "dashboard-overview")

	// Queue page: consumers with their client, a peek through the button.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/queues/clicks"), chromedp.WaitVisible(`#consumers tr`)); err != nil {
		t.Fatalf("queue page: %v", err)
	}
	waitTrue(t, ctx, "the consumer row names its client", `document.getElementById("consumers").textContent.includes("browser-test-worker")`)
	waitTrue(t, ctx, "the queue's chart has points", `Number(document.getElementById("chart-queue-rates").dataset.points) >= 2`)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/queues/orders"), chromedp.WaitVisible(`#action-peek`)); err != nil {
		t.Fatalf("queue page of orders: %v", err)
	}
	waitTrue(t, ctx, "the held deliveries show as outstanding", `[...document.querySelectorAll("#consumers tr")].some(r => r.cells.length === 6 && r.cells[5].textContent === "5")`)
	waitTrue(t, ctx, "the orders chart has points", `Number(document.getElementById("chart-queue-rates").dataset.points) >= 4`)
	if err := chromedp.Do(ctx, chromedp.Click(`#action-peek`)); err != nil {
		t.Fatalf("peek: %v", err)
	}
	waitTrue(t, ctx, "the peek shows messages", `document.querySelectorAll("#peeked tr").length >= 10`)
	screenshot(t, ctx, "dashboard-queue")
	traffic.stop()

	// Cluster page, on a three-node cluster.
	members := startAdminCluster(t)
	clusterBase := "http://" + members[1].server.Addr().String()
	sdk2, err := client.Dial(t.Context(), client.Options{Addresses: []string{members[0].broker.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk2.Close()
	for _, name := range []string{"payments", "emails", "audit"} {
		if _, err := sdk2.Declare(t.Context(), name, client.QueueConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(clusterBase+"/cluster"), chromedp.WaitVisible(`#nodes tr`)); err != nil {
		t.Fatalf("cluster page: %v", err)
	}
	waitTrue(t, ctx, "three nodes are up", `[...document.querySelectorAll("#nodes tr")].filter(r => r.cells[1].textContent === "up").length === 3`)
	waitTrue(t, ctx, "each node reports its memory", `[...document.querySelectorAll("#nodes tr")].every(r => r.cells[6].textContent.includes("iB"))`)
	waitTrue(t, ctx, "a catalog leader is named", `/^node\d$/.test(document.getElementById("catalog-leader").textContent)`)
	waitTrue(t, ctx, "every queue has its owner", `[...document.querySelectorAll("#owners tr")].filter(r => /^node\d$/.test(r.cells[3].textContent)).length === 3`)
	screenshot(t, ctx, "dashboard-cluster")
}

func numberOr0(text string) string {
	if _, err := strconv.ParseUint(strings.TrimSpace(text), 10, 64); err != nil {
		return "0"
	}
	return strings.TrimSpace(text)
}

// traffic publishes to clicks steadily until stopped.
type traffic struct {
	sdk  *client.Client
	done chan struct{}
	wait sync.WaitGroup
}

func startTraffic(t *testing.T, sdk *client.Client) *traffic {
	tr := &traffic{sdk: sdk, done: make(chan struct{})}
	tr.wait.Add(1)
	go func() {
		defer tr.wait.Done()
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-tr.done:
				return
			case <-ticker.C:
				_, _ = sdk.PublishAsync(context.Background(), "clicks", client.Message{Payload: []byte(fmt.Sprintf("click %d", i))})
				if i%4 == 0 {
					_, _ = sdk.PublishAsync(context.Background(), "orders", client.Message{Payload: []byte(fmt.Sprintf("order %d", i)),
						MessageID: fmt.Sprintf("order-t%d", i), Headers: client.Headers{{Key: "source", Value: []byte("web")}}})
				}
			}
		}
	}()
	t.Cleanup(tr.stop)
	return tr
}

func (tr *traffic) publish(t *testing.T, queue string, count int) {
	t.Helper()
	for i := range count {
		if _, err := tr.sdk.Publish(t.Context(), queue, client.Message{Payload: []byte(fmt.Sprintf("order %d", i)),
			MessageID: fmt.Sprintf("order-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (tr *traffic) stop() {
	select {
	case <-tr.done:
	default:
		close(tr.done)
	}
	tr.wait.Wait()
}

// adminMember is one node of an in-process cluster: Raft node, broker and
// HTTP endpoint.
type adminMember struct {
	broker *actors.Broker
	server *Server
}

// startAdminCluster starts three nodes on loopback ports (Raft RTT 10 ms)
// and waits until every catalog answers.
func startAdminCluster(t *testing.T) []adminMember {
	t.Helper()
	dir := t.TempDir()
	var listeners []net.Listener
	free := func() string {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, listener)
		return listener.Addr().String()
	}
	config := &cluster.Config{Cluster: cluster.ClusterSettings{Secret: "admin-test-cluster-secret", Raft: cluster.RaftSettings{
		RTT: cluster.Duration(10 * time.Millisecond), ElectionRTT: 10, HeartbeatRTT: 1}}}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		config.Nodes = append(config.Nodes, cluster.NodeConfig{ID: id, ClientAddress: free(), PeerAddress: free(),
			RaftAddress: free(), HTTPAddress: free(), DataDir: filepath.Join(dir, id)})
	}
	for _, listener := range listeners {
		listener.Close()
	}
	var members []adminMember
	var nodes []*cluster.Node
	log.SetOutput(io.Discard) // the Raft log store writes a few lines through the standard logger
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, nodeConfig := range config.Nodes {
		node, err := cluster.Start(config, nodeConfig.ID, cluster.StartOptions{Logger: quiet})
		if err != nil {
			t.Fatalf("start cluster node %s: %v", nodeConfig.ID, err)
		}
		brokerConfig := actors.DefaultConfig()
		brokerConfig.DataDir, brokerConfig.ListenAddr, brokerConfig.FS = nodeConfig.DataDir, nodeConfig.ClientAddress, vfs.OS
		brokerConfig.Cluster, brokerConfig.Logger = node, quiet
		broker, err := actors.Start(brokerConfig)
		if err != nil {
			node.Close()
			t.Fatalf("start broker %s: %v", nodeConfig.ID, err)
		}
		server, err := Start(nodeConfig.HTTPAddress, NodeFor(broker), Options{})
		if err != nil {
			broker.Close()
			node.Close()
			t.Fatalf("start endpoint %s: %v", nodeConfig.ID, err)
		}
		t.Cleanup(func() {
			if err := server.Close(); err != nil {
				t.Errorf("close endpoint %s: %v", nodeConfig.ID, err)
			}
			if err := broker.Close(); err != nil {
				t.Errorf("close broker %s: %v", nodeConfig.ID, err)
			}
			node.Close()
		})
		members = append(members, adminMember{broker: broker, server: server})
		nodes = append(nodes, node)
	}
	for i, node := range nodes {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := node.WaitReady(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: catalog not ready: %v", config.Nodes[i].ID, err)
		}
	}
	return members
}
