package admin

// Tests against a running node: a real actors.Broker on a temporary
// directory (or the fault-injecting in-memory FS), clients speaking raw
// wire frames over TCP, and the endpoint read over HTTP. Waits for the
// broker's asynchronous work (a session actor stopping, a background sync
// completing) poll with a generous bound that only guards against a hang.

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
	"github.com/prometheus/common/expfmt"
)

// liveWait bounds every wait for the broker; never a latency assertion.
const liveWait = 10 * time.Second

// liveNode is a broker with the endpoint in front of it.
type liveNode struct {
	broker *actors.Broker
	server *Server
}

// startLiveNode starts a broker with background sync off and the endpoint.
func startLiveNode(t *testing.T, mutate func(*actors.Config)) *liveNode {
	t.Helper()
	config := actors.DefaultConfig()
	config.DataDir = t.TempDir()
	config.ListenAddr = "127.0.0.1:0"
	config.SyncInterval = 0
	if mutate != nil {
		mutate(&config)
	}
	broker, err := actors.Start(config)
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() {
		if err := broker.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return &liveNode{broker: broker, server: testServer(t, NewBrokerNode(broker), Options{})}
}

// putSyncInterval changes the node's sync interval through an endpoint
// with an HTTP token (the write needs one).
func putSyncInterval(t *testing.T, node *liveNode, body string) {
	t.Helper()
	server := testServer(t, NewBrokerNode(node.broker), Options{Token: settingsToken})
	do(t, server, "PUT", "/api/settings/sync-interval", body, "Authorization", "Bearer "+settingsToken).expectStatus(t, 200)
}

// wireClient is a minimal client: hello, declare, publish and wait for
// confirms.
type wireClient struct {
	t       *testing.T
	conn    net.Conn
	reader  *wire.Reader
	writer  *wire.Writer
	nextID  uint64
	nextSeq uint64
	session string
}

func dialLive(t *testing.T, node *liveNode) *wireClient {
	t.Helper()
	conn, err := net.Dial("tcp", node.broker.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &wireClient{t: t, conn: conn, reader: wire.NewReader(conn, 0), writer: wire.NewWriter(conn, 0)}
	c.send(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "admin-test"})
	hello, ok := c.next().(*wire.HelloOK)
	if !ok {
		t.Fatal("hello was not answered with hello-ok")
	}
	c.session = hello.SessionID
	return c
}

func (c *wireClient) send(frame wire.Frame) {
	c.t.Helper()
	if err := c.writer.WriteFrame(frame); err != nil {
		c.t.Fatalf("write %T: %v", frame, err)
	}
	if err := c.writer.Flush(); err != nil {
		c.t.Fatalf("flush: %v", err)
	}
}

func (c *wireClient) next() wire.Frame {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(liveWait))
	tag, body, err := c.reader.Next()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	frame, err := wire.DecodeFrame(tag, body)
	if err != nil {
		c.t.Fatalf("decode %v: %v", tag, err)
	}
	return frame
}

func (c *wireClient) declare(name string, mode wire.Mode) {
	c.t.Helper()
	c.nextID++
	c.send(&wire.Declare{RequestID: c.nextID, Queue: name, Mode: mode})
	switch reply := c.next().(type) {
	case *wire.DeclareOK, *wire.DeclareOKMode:
	default:
		c.t.Fatalf("declare %s answered %T %+v", name, reply, reply)
	}
}

// publish sends count messages in one frame and waits until each is
// confirmed (true) or refused (false).
func (c *wireClient) publish(queueName string, count int) map[uint64]bool {
	c.t.Helper()
	frame := &wire.Publish{Queue: []byte(queueName)}
	for i := 0; i < count; i++ {
		c.nextSeq++
		frame.Messages = append(frame.Messages,
			wire.PublishMessage{Seq: c.nextSeq, Payload: []byte(fmt.Sprintf("message %d", c.nextSeq))})
	}
	c.send(frame)
	outcomes := map[uint64]bool{}
	for len(outcomes) < count {
		switch reply := c.next().(type) {
		case *wire.Confirm:
			for _, r := range reply.Ranges {
				for seq := r.First; seq <= r.Last; seq++ {
					outcomes[seq] = true
				}
			}
		case *wire.NegativeConfirm:
			for _, r := range reply.Ranges {
				for seq := r.First; seq <= r.Last; seq++ {
					outcomes[seq] = false
				}
			}
		}
	}
	return outcomes
}

func (c *wireClient) mustPublish(queueName string, count int) {
	c.t.Helper()
	for seq, confirmed := range c.publish(queueName, count) {
		if !confirmed {
			c.t.Fatalf("publish seq %d to %s refused", seq, queueName)
		}
	}
}

// eventually polls check until it holds, failing after liveWait.
func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(liveWait)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func liveQueue(t *testing.T, node *liveNode, name string) QueueStatus {
	t.Helper()
	answer := do(t, node.server, "GET", "/api/queues/"+name, "")
	answer.expectStatus(t, 200)
	var status QueueStatus
	answer.decode(t, &status)
	return status
}

// The node view reports what the broker runs with.
func TestLiveNodeView(t *testing.T) {
	node := startLiveNode(t, func(config *actors.Config) { config.NodeID = "live-1" })
	var view nodeView
	do(t, node.server, "GET", "/api/node", "").decode(t, &view)
	if view.NodeID != "live-1" || view.Version != actors.Version || view.DataDir != node.broker.Config().DataDir {
		t.Fatalf("node view %+v", view)
	}
	if view.Listen["client"] != node.broker.Addr().String() || view.Listen["http"] != node.server.Addr().String() {
		t.Fatalf("listen %v", view.Listen)
	}
	if view.Settings["sync_interval_ms"] != 0.0 || view.StartedUnixMs == 0 || view.UptimeSeconds < 0 {
		t.Fatalf("settings %v started %d uptime %v", view.Settings, view.StartedUnixMs, view.UptimeSeconds)
	}
	do(t, node.server, "GET", "/api/queues/missing", "").expectError(t, 404, `no queue named "missing"`)
	do(t, node.server, "POST", "/api/queues/missing/sync", "").expectError(t, 404, `no queue named "missing"`)
	if answer := do(t, node.server, "GET", "/healthz", ""); answer.status != 200 {
		t.Fatalf("a fresh node is not healthy: %s", answer.body)
	}
}

// With background sync off, a buffered queue's written records stay
// unsynced until a sync; an explicit sync makes them durable; a sync interval set through the endpoint reaches logs opened
// after the change, which then sync in the background.
func TestLiveUnsyncedRecordsAndSyncIntervalForLaterLogs(t *testing.T) {
	node := startLiveNode(t, nil)
	client := dialLive(t, node)
	client.declare("orders", wire.ModeBuffered)
	client.mustPublish("orders", 5)

	before := liveQueue(t, node, "orders")
	if before.Mode != "buffered" || before.Counts.Ready != 5 || before.SyncIntervalMs != 0 {
		t.Fatalf("before: %+v", before)
	}
	if before.UnsyncedRecords != 5 || before.UnsyncedBytes == 0 || before.WrittenNext != before.DurableNext+5 {
		t.Fatalf("with background sync off, 5 written records must be unsynced: %+v", before)
	}

	synced := do(t, node.server, "POST", "/api/queues/orders/sync", "")
	synced.expectStatus(t, 200)
	var status QueueStatus
	synced.decode(t, &status)
	if status.UnsyncedRecords != 0 || status.DurableNext != status.WrittenNext || status.WrittenNext != 5 {
		t.Fatalf("after an explicit sync: %+v", status)
	}

	putSyncInterval(t, node, "5ms")
	if got := node.broker.SyncInterval(); got != 5*time.Millisecond {
		t.Fatalf("broker interval %v after PUT", got)
	}
	client.declare("later", wire.ModeBuffered)
	client.mustPublish("later", 3)
	eventually(t, "a log opened after the change syncs in the background", func() bool {
		status := liveQueue(t, node, "later")
		return status.SyncIntervalMs == 5 && status.UnsyncedRecords == 0 && status.WrittenNext == 3 &&
			status.DurableNext == 3
	})
}

// A sync interval set through the endpoint reaches a log that is already
// open: its background sync starts and makes the written records durable,
// and turning it off again is reported.
func TestLiveSyncIntervalChangeReachesAnOpenLog(t *testing.T) {
	node := startLiveNode(t, nil)
	client := dialLive(t, node)
	client.declare("orders", wire.ModeBuffered)
	client.mustPublish("orders", 5)
	if status := liveQueue(t, node, "orders"); status.UnsyncedRecords != 5 {
		t.Fatalf("with background sync off, 5 written records must be unsynced: %+v", status)
	}
	var tree actorTreeView
	do(t, node.server, "GET", "/debug/actors", "").decode(t, &tree)
	// The broker drives an open log's interval through the partition's sync
	// scheduler actor, and watches the log through the log actor.
	for _, child := range []string{"node/queues/orders/0/sync", "node/queues/orders/0/log"} {
		if findActor(tree.Tree, child) == nil {
			t.Fatalf("no %s actor: a changed interval cannot reach the open log", child)
		}
	}

	putSyncInterval(t, node, "5ms")
	eventually(t, "the open log syncs in the background", func() bool {
		status := liveQueue(t, node, "orders")
		return status.SyncIntervalMs == 5 && status.UnsyncedRecords == 0 && status.DurableNext == status.WrittenNext
	})
	putSyncInterval(t, node, `{"interval_ms": 0}`)
	// The queue reports the interval its log runs with, which the change
	// reaches through the partition and its sync scheduler.
	eventually(t, "the open log reports background sync off", func() bool {
		return liveQueue(t, node, "orders").SyncIntervalMs == 0
	})
}

// A failed fsync latches a log: /healthz turns 503 naming the fenced
// queue, the queue reports it, and the metrics count the latched log.
func TestLiveHealthzFlipsWhenALogLatches(t *testing.T) {
	mem := vfs.NewMem()
	node := startLiveNode(t, func(config *actors.Config) {
		config.FS = mem
		config.DataDir = "/data"
	})
	client := dialLive(t, node)
	client.declare("bad", wire.ModeDurable)
	client.declare("good", wire.ModeDurable)
	client.mustPublish("bad", 1)
	do(t, node.server, "GET", "/healthz", "").expectStatus(t, 200)

	// Only the segments fail: a disk that refuses the cut file too stops the node.
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "/data/queues/bad/0/log/*.log", Sticky: true})
	for seq, confirmed := range client.publish("bad", 1) {
		if confirmed {
			t.Fatalf("seq %d confirmed on a log whose fsync fails", seq)
		}
	}
	client.mustPublish("good", 1)

	health := do(t, node.server, "GET", "/healthz", "")
	health.expectStatus(t, 503)
	var view healthView
	health.decode(t, &view)
	if view.Status != "fenced" || len(view.Fenced) != 1 || view.Fenced[0].Queue != "bad" ||
		view.Fenced[0].Partition != 0 || view.Fenced[0].Error == "" {
		t.Fatalf("healthz %+v", view)
	}
	if status := liveQueue(t, node, "bad"); !status.Fenced || status.FenceError == "" {
		t.Fatalf("fenced queue status %+v", status)
	}
	if status := liveQueue(t, node, "good"); status.Fenced {
		t.Fatalf("the other queue is fenced too: %+v", status)
	}
	families := liveMetrics(t, node)
	if got := gaugeValue(t, families, "fibril_log_latched", map[string]string{"queue": "bad"}); got != 1 {
		t.Fatalf("fibril_log_latched{queue=bad} %v", got)
	}
	if got := gaugeValue(t, families, "fibril_latched_logs", nil); got != 1 {
		t.Fatalf("fibril_latched_logs %v", got)
	}
}

// sessionPaths returns the paths of the live session actors.
func sessionPaths(t *testing.T, node *liveNode) []string {
	var view actorTreeView
	do(t, node.server, "GET", "/debug/actors", "").decode(t, &view)
	sessions := findActor(view.Tree, "node/sessions")
	if sessions == nil || sessions.Kind == groupKind {
		t.Fatalf("no sessions actor in %+v", view.Tree)
	}
	var paths []string
	for _, child := range sessions.Children {
		paths = append(paths, child.Path)
	}
	return paths
}

// The actor tree shows a new session and loses it after disconnect.
func TestLiveActorTreeFollowsSessions(t *testing.T) {
	node := startLiveNode(t, nil)
	if paths := sessionPaths(t, node); len(paths) != 0 {
		t.Fatalf("sessions before any client: %v", paths)
	}
	client := dialLive(t, node)
	client.declare("orders", wire.ModeDurable)
	paths := sessionPaths(t, node)
	if len(paths) != 1 {
		t.Fatalf("sessions with one client: %v", paths)
	}
	var view actorTreeView
	do(t, node.server, "GET", "/debug/actors", "").decode(t, &view)
	session := findActor(view.Tree, paths[0])
	if session.Kind != "session" || !strings.Contains(session.Summary, "admin-test") {
		t.Fatalf("session node %+v", session)
	}
	if partition := findActor(view.Tree, "node/queues/orders/0"); partition == nil || partition.Kind == groupKind {
		t.Fatalf("no partition actor for the declared queue")
	}
	page := do(t, node.server, "GET", "/debug/actors", "", "Accept", "text/html")
	name := paths[0][strings.LastIndex(paths[0], "/")+1:]
	if !strings.Contains(string(page.body), `<span class="name">`+name+`</span> <span class="kind">session</span>`) {
		t.Fatalf("HTML tree lacks the session %s:\n%s", name, page.body)
	}

	client.conn.Close()
	eventually(t, "the session actor disappears after disconnect", func() bool {
		return len(sessionPaths(t, node)) == 0
	})
}

// /metrics parses with Prometheus' own parser, has HELP and TYPE for every
// family and le buckets on every histogram, and counts a known workload:
// the families an operator alerts on are all there, with the right values.
func TestLiveMetricsAfterAWorkload(t *testing.T) {
	node := startLiveNode(t, nil)
	sdk, err := client.Dial(t.Context(), client.Options{Addresses: []string{node.broker.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ctx := t.Context()
	if _, err := sdk.Declare(ctx, "orders", client.QueueConfig{MaxDeliveries: 1, DeadLetterQueue: "orders.dead"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.Declare(ctx, "clicks", client.QueueConfig{Mode: client.ModeBuffered}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := sdk.Publish(ctx, "orders", client.Message{Payload: []byte("order")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sdk.Publish(ctx, "clicks", client.Message{Payload: []byte("click")}); err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.Publish(ctx, "missing", client.Message{Payload: []byte("x")}); client.CodeOf(err) != wire.CodeUnknownQueue {
		t.Fatalf("publish to an undeclared queue: %v", err)
	}
	sub, err := sdk.Subscribe(ctx, "orders", client.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := (<-sub.Deliveries()).AckSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := (<-sub.Deliveries()).Nack(false, 0); err != nil { // dead-lettered
		t.Fatal(err)
	}
	eventually(t, "the dead letter arrives", func() bool {
		status, ok := node.broker.QueueInfo("orders.dead")
		return ok && status.Ready == 1
	})

	answer := do(t, node.server, "GET", "/metrics", "")
	answer.expectStatus(t, 200)
	checkExposition(t, answer.body)
	families := liveMetrics(t, node)
	orders := map[string]string{"queue": "orders"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fibril_publishes_total", orders, 4},
		{"fibril_confirms_total", map[string]string{"queue": "orders", "boundary": "durable"}, 4},
		{"fibril_confirms_total", map[string]string{"queue": "clicks", "boundary": "written"}, 1},
		{"fibril_deliveries_total", orders, 4}, // two more reach the subscription as the first two settle
		{"fibril_settles_total", map[string]string{"queue": "orders", "kind": "ack"}, 1},
		{"fibril_settles_total", map[string]string{"queue": "orders", "kind": "nack"}, 1},
		{"fibril_dead_letters_total", orders, 1},
		{"fibril_refusals_total", map[string]string{"code": "unknown_queue", "kind": "publish"}, 1},
		{"fibril_queue_ready_messages", orders, 0},
		{"fibril_queue_leased_messages", orders, 2},
		{"fibril_queue_delayed_messages", orders, 0},
		{"fibril_queue_consumers", orders, 1},
		{"fibril_queue_ready_messages", map[string]string{"queue": "orders.dead"}, 1},
		{"fibril_queue_info", map[string]string{"queue": "clicks", "mode": "buffered"}, 1},
		{"fibril_log_latched", orders, 0},
		{"fibril_sessions_open", nil, 1},
		{"fibril_latched_logs", nil, 0},
		{"fibril_actor_restarts_total", nil, 0},
	} {
		if got := gaugeValue(t, families, c.name, c.labels); got != c.want {
			t.Fatalf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// SyncInterval 0: the buffered queue's one record stays written, not durable.
	if got := gaugeValue(t, families, "fibril_queue_unsynced_records", map[string]string{"queue": "clicks"}); got != 1 {
		t.Fatalf("unsynced records of the buffered queue: %v", got)
	}
	if got := gaugeValue(t, families, "fibril_queue_unsynced_bytes", map[string]string{"queue": "clicks"}); got <= 0 {
		t.Fatalf("unsynced bytes of the buffered queue: %v", got)
	}
	for _, name := range []string{"fibril_confirm_latency_seconds", "fibril_delivery_latency_seconds",
		"fibril_log_write_seconds", "fibril_log_fsync_seconds"} {
		if got := gaugeValue(t, families, name+"_count", orders); got < 1 {
			t.Fatalf("%s observed %v times for orders", name, got)
		}
	}
}

func liveMetrics(t *testing.T, node *liveNode) map[string]*familyValues {
	t.Helper()
	answer := do(t, node.server, "GET", "/metrics", "")
	answer.expectStatus(t, 200)
	var parser expfmt.TextParser
	parsed, err := parser.TextToMetricFamilies(bytes.NewReader(answer.body))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	families := map[string]*familyValues{}
	add := func(name string, labels map[string]string, value float64) {
		if families[name] == nil {
			families[name] = &familyValues{}
		}
		families[name].samples = append(families[name].samples, sample{labels: labels, value: value})
	}
	for name, family := range parsed {
		for _, metric := range family.GetMetric() {
			labels := map[string]string{}
			for _, pair := range metric.GetLabel() {
				labels[pair.GetName()] = pair.GetValue()
			}
			if histogram := metric.GetHistogram(); histogram != nil {
				add(name+"_count", labels, float64(histogram.GetSampleCount()))
				add(name+"_sum", labels, histogram.GetSampleSum())
				continue
			}
			add(name, labels, sampleValue(metric))
		}
	}
	return families
}

type sample struct {
	labels map[string]string
	value  float64
}

type familyValues struct{ samples []sample }

// gaugeValue returns the value of the sample of family name whose labels
// include every pair given.
func gaugeValue(t *testing.T, families map[string]*familyValues, name string, labels map[string]string) float64 {
	t.Helper()
	family, ok := families[name]
	if !ok {
		t.Fatalf("no %s family", name)
	}
	for _, s := range family.samples {
		matched := true
		for key, value := range labels {
			if s.labels[key] != value {
				matched = false
			}
		}
		if matched {
			return s.value
		}
	}
	t.Fatalf("no %s sample with %v", name, labels)
	return 0
}

// A queue's status lists its subscriptions as the broker reports them:
// session, subscription id, prefetch and deliveries held unsettled.
func TestLiveQueueListsItsConsumers(t *testing.T) {
	node := startLiveNode(t, nil)
	client := dialLive(t, node)
	client.declare("orders", wire.ModeBuffered)
	if status := liveQueue(t, node, "orders"); status.Consumers == nil || len(status.Consumers) != 0 {
		t.Fatalf("consumers of a queue nobody consumes: %#v", status.Consumers)
	}
	client.mustPublish("orders", 3)
	client.nextID++
	client.send(&wire.Subscribe{RequestID: client.nextID, Queue: "orders", Prefetch: 2})
	var subscription uint64
	delivered := 0
	for subscription == 0 || delivered < 2 {
		switch frame := client.next().(type) {
		case *wire.SubscribeOK:
			subscription = frame.SubscriptionID
		case *wire.Deliver:
			delivered += len(frame.Deliveries)
		}
	}
	status := liveQueue(t, node, "orders")
	want := ConsumerStatus{Session: client.session, Subscription: subscription, Prefetch: 2, Outstanding: 2}
	if status.ConsumerCount != 1 || len(status.Consumers) != 1 || status.Consumers[0] != want {
		t.Fatalf("consumers %+v (count %d), want %+v", status.Consumers, status.ConsumerCount, want)
	}
	var all struct{ Queues []QueueStatus }
	do(t, node.server, "GET", "/api/queues", "").decode(t, &all)
	if len(all.Queues) != 1 || len(all.Queues[0].Consumers) != 1 || all.Queues[0].Consumers[0] != want {
		t.Fatalf("queue list %+v", all)
	}
}
