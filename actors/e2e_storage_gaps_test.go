package actors

// End-to-end tests of the storage side of the broker: the log and sync
// actors over the queue's log, the explicit sync, the sync latency
// histogram.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// A background sync that fails while no publish is in flight latches the
// log; the partition is fenced without waiting for the next publish, and
// queue info, health and metrics say so, with the log's error.
func TestFailedBackgroundSyncFencesPromptly(t *testing.T) {
	mem := vfs.NewMem()
	b := startBroker(t, func(config *Config) {
		config.FS = mem
		config.DataDir = "/data"
		config.SyncInterval = 0
	})
	c := connect(t, b)
	c.mustDeclare("quiet", wire.ModeBuffered, wire.QueueOptions{})
	c.mustConfirm("quiet", wire.BoundaryWritten, "written, not yet durable")
	if info := c.info("quiet"); info.UnsyncedRecords != 1 || info.Fenced {
		t.Fatalf("before the fault: %+v", info)
	}
	// Only the segments fail: a disk that refuses the cut file too stops the node.
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "/data/queues/quiet/0/log/*.log", Sticky: true})
	if err := b.SetSyncInterval(5 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// No request reaches the partition: the log actor reports the latch.
	waitForActor(t, b, "node/queues/quiet/0", func(info runtime.ActorInfo) bool {
		return strings.HasPrefix(info.Summary, "fenced")
	})
	info := c.info("quiet")
	if !info.Fenced || info.FenceError == "" || info.LastSyncError == "" {
		t.Fatalf("info after a failed background sync: %+v", info)
	}
	health := b.Health()
	if health.OK || len(health.Queues) != 1 || health.Queues[0].Name != "quiet" {
		t.Fatalf("health %+v", health)
	}
	var metrics bytes.Buffer
	b.Metrics().WritePrometheus(&metrics)
	if !strings.Contains(metrics.String(), `fibril_log_latched{queue="quiet"} 1`) {
		t.Fatalf("metrics lack the latch:\n%s", metrics.String())
	}
	for _, out := range c.awaitOutcomes(c.publish("quiet", "refused")) {
		if out.confirmed || out.code != wire.CodeFenced {
			t.Fatalf("publish after the latch: %+v", out)
		}
	}
}

// An explicit sync makes everything written durable, through the
// partition and its sync scheduler, and is timed; unknown and fenced
// queues are refused with named errors.
func TestSyncQueueMakesWrittenRecordsDurable(t *testing.T) {
	mem := vfs.NewMem()
	b := startBroker(t, func(config *Config) {
		config.FS = mem
		config.DataDir = "/data"
		config.SyncInterval = 0
	})
	c := connect(t, b)
	c.mustDeclare("lazy", wire.ModeBuffered, wire.QueueOptions{})
	c.mustConfirm("lazy", wire.BoundaryWritten, "a", "b", "c")
	if info := c.info("lazy"); info.UnsyncedRecords != 3 || info.DurableNext+3 != info.WrittenNext {
		t.Fatalf("before the sync: %+v", info)
	}
	if err := b.SyncQueue("lazy"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	// SyncQueue returned: the sync is complete, nothing to wait for.
	if info := c.info("lazy"); info.UnsyncedRecords != 0 || info.DurableNext != info.WrittenNext ||
		info.LastSyncUnixMs == 0 {
		t.Fatalf("after the sync: %+v", info)
	}
	var metrics bytes.Buffer
	b.Metrics().WritePrometheus(&metrics)
	for _, want := range []string{`fibril_sync_seconds_count{queue="lazy"} 1`, "# HELP fibril_sync_seconds "} {
		if !strings.Contains(metrics.String(), want) {
			t.Fatalf("metrics lack %q:\n%s", want, metrics.String())
		}
	}

	if err := b.SyncQueue("missing"); !errors.Is(err, ErrUnknownQueue) {
		t.Fatalf("sync of an unknown queue: %v", err)
	}
	c.mustDeclare("broken", wire.ModeDurable, wire.QueueOptions{})
	// Only the segments fail: a disk that refuses the cut file too stops the node.
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "/data/queues/broken/0/log/*.log", Sticky: true})
	for _, out := range c.awaitOutcomes(c.publish("broken", "x")) {
		if out.confirmed {
			t.Fatalf("publish on a failing disk confirmed: %+v", out)
		}
	}
	if err := b.SyncQueue("broken"); !errors.Is(err, ErrQueueNotServing) {
		t.Fatalf("sync of a fenced queue: %v", err)
	}
}

// Queues with nothing unsynced schedule no sync work: once a durable and a
// buffered queue are idle and synced, their sync schedulers arm no timer
// and tick no more, and the node makes no fsync, over a hundred sync
// intervals. Counted, not timed: the wait only gives timers the chance.
func TestIdleQueuesScheduleNoSyncWork(t *testing.T) {
	b := startBroker(t, func(config *Config) {
		config.FS = vfs.NewMem()
		config.DataDir = "/data"
		config.SyncInterval = 2 * time.Millisecond
	})
	c := connect(t, b)
	c.mustDeclare("steady", wire.ModeDurable, wire.QueueOptions{})
	c.mustDeclare("clicks", wire.ModeBuffered, wire.QueueOptions{})
	c.mustConfirm("steady", wire.BoundaryDurable, "a", "b")
	c.mustConfirm("clicks", wire.BoundaryWritten, "c", "d")
	waitFor(t, "the buffered queue's background sync", func() bool { return c.info("clicks").UnsyncedRecords == 0 })
	idle := func(name string) bool {
		info, ok := b.Registry().Lookup("node/queues/" + name + "/0/sync")
		return ok && !strings.Contains(info.Summary, "armed")
	}
	waitFor(t, "both schedulers to fall idle", func() bool { return idle("steady") && idle("clicks") })
	summaries := func() [2]string {
		var out [2]string
		for i, name := range []string{"steady", "clicks"} {
			info, _ := b.Registry().Lookup("node/queues/" + name + "/0/sync")
			out[i] = info.Summary
		}
		return out
	}
	before, syncs := summaries(), b.core.syncs.Total()
	time.Sleep(100 * 2 * time.Millisecond)
	if after := summaries(); after != before {
		t.Fatalf("idle schedulers moved: %q then %q", before, after)
	}
	if after := b.core.syncs.Total(); after != syncs {
		t.Fatalf("the idle node made %d syncs", after-syncs)
	}
}

// nodeMetric reads one unlabelled series from the broker's metrics.
func nodeMetric(t *testing.T, b *Broker, name string) float64 {
	t.Helper()
	var text bytes.Buffer
	b.Metrics().WritePrometheus(&text)
	for _, line := range strings.Split(text.String(), "\n") {
		var value float64
		if strings.HasPrefix(line, name+" ") {
			if _, err := fmt.Sscanf(line[len(name)+1:], "%g", &value); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return value
		}
	}
	t.Fatalf("no series %s in:\n%s", name, text.String())
	return 0
}

// The node's budgets reach every queue log and /metrics: a queue whose log
// has more sealed segments than the node keeps descriptors for is read
// back whole after a restart (the cache is cold), the descriptor bound
// holds, and the node counts every fsync it made, its logs' among them.
func TestNodeBudgetsBoundEveryLogAndShowInMetrics(t *testing.T) {
	mem := vfs.NewMem()
	config := testConfig(t, "/data")
	config.FS = mem
	config.SegmentBytes = 16 << 10
	first := startBrokerOn(t, config)
	c := connect(t, first)
	c.mustDeclare("long", wire.ModeDurable, wire.QueueOptions{})
	payload := strings.Repeat("x", 1000)
	var payloads []string
	for i := range 200 {
		payloads = append(payloads, fmt.Sprintf("%03d%s", i, payload))
	}
	for start := 0; start < len(payloads); start += 20 {
		c.mustConfirm("long", wire.BoundaryDurable, payloads[start:start+20]...)
	}
	fsyncs, logFsyncs := nodeMetric(t, first, "fibril_fsyncs_total"), nodeMetric(t, first, "fibril_log_fsyncs_total")
	if logFsyncs < 10 || fsyncs < logFsyncs {
		t.Fatalf("fsyncs: node %v, logs %v, after ten durable batches", fsyncs, logFsyncs)
	}
	if got := nodeMetric(t, first, "fibril_tail_cache_limit_bytes"); got != DefaultTailCacheBytes {
		t.Fatalf("tail-cache limit %v", got)
	}
	if got := nodeMetric(t, first, "fibril_tail_cache_bytes"); got <= 0 {
		t.Fatalf("tail-cache bytes %v with a log open", got)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	config.OpenSegmentFiles = 2
	config.TailCacheBytes = 1 << 20
	second := startBrokerOn(t, config)
	c2 := connect(t, second)
	got := drain(t, c2, "long")
	wanted := map[string]bool{}
	for _, want := range payloads {
		wanted[want] = true
	}
	for payload, delivery := range got {
		if !wanted[payload] {
			t.Errorf("read back a payload never published: %d bytes, starting %.40q, ending %.40q, delivery %+v",
				len(payload), payload, payload[max(0, len(payload)-40):], delivery.Offset)
		}
	}
	for _, want := range payloads {
		if _, ok := got[want]; !ok {
			t.Fatalf("message %.3s not read back (%d of %d)", want, len(got), len(payloads))
		}
	}
	if limit := nodeMetric(t, second, "fibril_segment_files_limit"); limit != 2 {
		t.Fatalf("segment files limit %v", limit)
	}
	if open := nodeMetric(t, second, "fibril_segment_files_open"); open > 2 {
		t.Fatalf("%v sealed-segment descriptors open, bound 2", open)
	}
	misses, evictions := nodeMetric(t, second, "fibril_segment_file_misses_total"),
		nodeMetric(t, second, "fibril_segment_file_evictions_total")
	if misses < 3 || evictions < 1 {
		t.Fatalf("reads of more sealed segments than the bound: %v misses, %v evictions", misses, evictions)
	}
	if nodeMetric(t, second, "fibril_tail_cache_misses_total") < float64(len(payloads)) {
		t.Fatal("a cold cache served the messages")
	}
}
