package actors

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

func TestPurgeDeleteAndList(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("alpha", wire.ModeBuffered, wire.QueueOptions{})
	c.mustDeclare("beta", wire.ModeDurable, wire.QueueOptions{})
	c.mustConfirm("alpha", wire.BoundaryWritten, "1", "2", "3")

	id := c.id()
	c.send(&wire.PurgeQueue{RequestID: id, Queue: "alpha"})
	if ok, isOK := c.reply(id).(*wire.OK); !isOK || ok.Count != 3 {
		t.Fatalf("purge reply %+v", ok)
	}
	if info := c.info("alpha"); info.Ready != 0 {
		t.Fatalf("after purge %+v", info)
	}

	id = c.id()
	c.send(&wire.ListQueues{RequestID: id})
	list, ok := c.reply(id).(*wire.QueueList)
	if !ok || len(list.Queues) != 2 || list.Queues[0].Name != "alpha" || list.Queues[1].Mode != wire.ModeDurable {
		t.Fatalf("list %+v", list)
	}
	id = c.id()
	c.send(&wire.ListQueues{RequestID: id, Limit: 1})
	if list := c.reply(id).(*wire.QueueList); len(list.Queues) != 1 || !list.More {
		t.Fatalf("limited list %+v", list)
	}

	c.mustConfirm("beta", wire.BoundaryDurable, "x", "y")
	sub := c.subscribe("beta", 1)
	c.nextDeliver(sub)
	id = c.id()
	c.send(&wire.DeleteQueue{RequestID: id, Queue: "beta"})
	reply := c.waitFor("delete reply", func(frame wire.Frame) bool {
		okFrame, isOK := frame.(*wire.OK)
		return isOK && okFrame.RequestID == id
	}).(*wire.OK)
	if reply.Count != 2 {
		t.Fatalf("delete removed %d, want 2", reply.Count)
	}
	// The subscription on the deleted queue ended, and the frame names it.
	ended := c.waitFor("subscription ended", func(frame wire.Frame) bool {
		_, ok := frame.(*wire.SubscriptionEnded)
		return ok
	}).(*wire.SubscriptionEnded)
	if ended.SubscriptionID != sub || ended.Code != wire.CodeUnknownQueue {
		t.Fatalf("subscription ended %+v, want subscription %d", ended, sub)
	}
	for _, out := range c.awaitOutcomes(c.publish("beta", "z")) {
		if out.code != wire.CodeUnknownQueue {
			t.Fatalf("publish after delete %+v", out)
		}
	}
	// A deleted queue can be declared again, empty, with another mode.
	fresh := c.mustDeclare("beta", wire.ModeBuffered, wire.QueueOptions{}).(*wire.DeclareOKMode)
	if !fresh.Created || fresh.Mode != wire.ModeBuffered {
		t.Fatalf("re-created %+v", fresh)
	}
	if info := c.info("beta"); info.Ready != 0 || info.WrittenNext != 0 {
		t.Fatalf("re-created queue is not empty: %+v", info)
	}
}

func TestUnsubscribeReleasesHeldDeliveries(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("q", wire.ModeBuffered, wire.QueueOptions{})
	c.mustConfirm("q", wire.BoundaryWritten, "one", "two")
	sub := c.subscribe("q", 2)
	c.deliveries(sub, 2)
	id := c.id()
	c.send(&wire.Unsubscribe{RequestID: id, SubscriptionID: sub})
	if ok, isOK := c.reply(id).(*wire.OK); !isOK || ok.Count != 2 {
		t.Fatalf("unsubscribe reply %+v", ok)
	}
	again := c.subscribe("q", 2)
	for _, d := range c.deliveries(again, 2) {
		if !d.Redelivered || d.Attempt != 1 {
			t.Fatalf("released delivery %+v: a release does not count an attempt", d)
		}
	}
}

func TestTTLAndLengthLimits(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("short-lived", wire.ModeBuffered, wire.QueueOptions{MessageTTLMs: 50})
	c.mustConfirm("short-lived", wire.BoundaryWritten, "stale")
	waitForInfo(t, c, "short-lived", func(info wire.QueueInfo) bool { return info.Ready == 0 })
	sub := c.subscribe("short-lived", 1)
	if !c.quietFor(100*time.Millisecond, isDeliverFor(sub)) {
		t.Fatal("an expired message was delivered")
	}

	c.mustDeclare("bounded", wire.ModeBuffered, wire.QueueOptions{MaxLength: 2})
	c.mustConfirm("bounded", wire.BoundaryWritten, "1", "2")
	for _, out := range c.awaitOutcomes(c.publish("bounded", "3")) {
		if out.confirmed || out.code != wire.CodeLimitReached {
			t.Fatalf("publish over max_length: %+v", out)
		}
	}

	c.mustDeclare("rolling", wire.ModeBuffered, wire.QueueOptions{MaxLength: 2, Overflow: wire.OverflowDropOldest})
	c.mustConfirm("rolling", wire.BoundaryWritten, "1", "2", "3")
	rolling := c.subscribe("rolling", 10)
	got := c.deliveries(rolling, 2)
	if string(got[0].Payload) != "2" || string(got[1].Payload) != "3" {
		t.Fatalf("drop_oldest kept %q and %q", got[0].Payload, got[1].Payload)
	}
}

func TestRegistryShowsTheBrokerTree(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("orders", wire.ModeDurable, wire.QueueOptions{})
	kinds := map[string]string{}
	for _, info := range b.Registry().Snapshot() {
		kinds[info.Path] = info.Kind
	}
	for path, kind := range map[string]string{
		"node": "node", "node/queues": "queues", "node/sessions": "sessions",
		"node/sessions/1": "session", "node/queues/orders/0": "partition",
	} {
		if kinds[path] != kind {
			t.Fatalf("registry has %q as %q, want %q (all: %v)", path, kinds[path], kind, kinds)
		}
	}
	partition, _ := b.Registry().Lookup("node/queues/orders/0")
	if !strings.HasPrefix(partition.Summary, "open durable") {
		t.Fatalf("partition summary %q", partition.Summary)
	}
	roots := b.Registry().Tree()
	if len(roots) != 1 || roots[0].Path != "node" || len(roots[0].Children) != 2 {
		t.Fatalf("tree roots %+v", roots)
	}
	c.conn.Close()
	waitFor(t, "the closed session to leave the registry", func() bool {
		_, ok := b.Registry().Lookup("node/sessions/1")
		return !ok
	})
}

func TestMetricsCountTraffic(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("counted", wire.ModeBuffered, wire.QueueOptions{})
	c.mustDeclare("durably", wire.ModeDurable, wire.QueueOptions{})
	c.mustConfirm("counted", wire.BoundaryWritten, "a", "b")
	c.mustConfirm("durably", wire.BoundaryDurable, "c")
	sub := c.subscribe("counted", 2)
	got := c.deliveries(sub, 2)
	c.ack(sub, got[0].DeliveryTag)
	c.send(&wire.Release{Settle: wire.Settle{SubscriptionID: sub, DeliveryTags: []uint64{got[1].DeliveryTag}}})
	c.nextDeliver(sub) // the released one again
	var text string
	waitFor(t, "the settles to be counted", func() bool {
		var out bytes.Buffer
		b.Metrics().WritePrometheus(&out)
		text = out.String()
		return strings.Contains(text, `fibril_settles_total{kind="release",queue="counted"} 1`)
	})
	for _, want := range []string{
		`fibril_publishes_total{queue="counted"} 2`,
		`fibril_confirms_total{boundary="written",queue="counted"} 2`,
		`fibril_confirms_total{boundary="durable",queue="durably"} 1`,
		`fibril_deliveries_total{queue="counted"} 3`,
		`fibril_redeliveries_total{queue="counted"} 1`,
		`fibril_settles_total{kind="ack",queue="counted"} 1`,
		`fibril_sessions_open 1`,
		`fibril_confirm_latency_seconds_count{queue="counted"}`,
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("metrics lack %s:\n%s", want, text)
		}
	}
}

func TestSyncIntervalIsReportedAndSettable(t *testing.T) {
	b := startBroker(t, func(config *Config) { config.SyncInterval = 40 * time.Millisecond })
	c := connect(t, b)
	c.mustDeclare("synced", wire.ModeBuffered, wire.QueueOptions{})
	if info := c.info("synced"); info.SyncIntervalMs != 40 {
		t.Fatalf("sync interval in info %d", info.SyncIntervalMs)
	}
	c.mustConfirm("synced", wire.BoundaryWritten, "x")
	info := waitForInfo(t, c, "synced", func(info wire.QueueInfo) bool {
		return info.DurableNext == info.WrittenNext && info.UnsyncedRecords == 0
	})
	if info.LastSyncUnixMs == 0 {
		t.Fatalf("background sync never reported: %+v", info)
	}
	if err := b.SetSyncInterval(0); err != nil {
		t.Fatal(err)
	}
	if b.SyncInterval() != 0 {
		t.Fatal("interval not changed")
	}
	c.mustDeclare("later", wire.ModeBuffered, wire.QueueOptions{})
	if info := c.info("later"); info.SyncIntervalMs != 0 {
		t.Fatalf("a queue opened after the change runs with %d ms", info.SyncIntervalMs)
	}
	if err := b.SetSyncInterval(-time.Second); err == nil {
		t.Fatal("a negative interval was accepted")
	}
}
