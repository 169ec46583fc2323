package acceptance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/admin"
	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// storageFault is one way a queue's disk fails.
type storageFault struct {
	name  string
	rule  vfs.FaultRule
	cause string // what a clear refusal names
}

// storageFaults lists the faults, on the victim's segment files.
func storageFaults(victim string) []storageFault {
	pattern := memDataDir + "/queues/" + victim + "/0/log/*.log"
	return []storageFault{
		{"fsync EIO", vfs.FaultRule{Op: vfs.FaultSync, Pattern: pattern, Sticky: true}, syscall.EIO.Error()},
		{"write EIO, half written", vfs.FaultRule{Op: vfs.FaultWrite, Pattern: pattern, Sticky: true, PartialWrite: true},
			syscall.EIO.Error()},
		{"write ENOSPC", vfs.FaultRule{Op: vfs.FaultWrite, Pattern: pattern, Sticky: true, Err: syscall.ENOSPC},
			syscall.ENOSPC.Error()},
	}
}

// Storage failure: under load on three queues, one queue's log starts
// failing (fsync error, write error with a short write, or a full disk).
// That queue fences itself: publishes are refused with an error naming
// the fence and its cause, /healthz answers 503 naming it, and the other
// queues keep confirming. A restart of the broker (same filesystem, as a
// process restart would find it) cuts the log back to its last good sync
// and the queue serves again. The checker then holds the durable victim
// to "nothing confirmed lost, nothing refused stored", and lets the
// buffered victim lose only confirms after the last proven sync.
//
// Every fault runs against a durable and a buffered victim, failing the
// victim's segment files; with FIBRIL_SOAK=1 each pair runs five times.
// FIBRIL_STORAGE_ROUNDS overrides the rounds. (When every file of the log
// directory fails, the file that records the cut included, the node stops
// instead: TestRefusedPublishStaysRefusedWhenTheCutCannotBeRecorded.)
func TestStorageFailureFencesOnlyTheFailingQueue(t *testing.T) {
	seed := testSeed(t)
	random := newRandom(seed)
	rounds := trials(t, "FIBRIL_STORAGE_ROUNDS", 1, 5)
	row := Row{Case: "storage failure (fsync EIO, write EIO, ENOSPC)"}
	for round := range rounds {
		for _, victimMode := range []wire.Mode{wire.ModeDurable, wire.ModeBuffered} {
			for _, fault := range storageFaults("victim") {
				name := fmt.Sprintf("round-%d/%s-victim/%s", round, victimMode, fault.name)
				t.Run(name, func(t *testing.T) {
					runFor := time.Duration(150+random.IntN(300)) * time.Millisecond
					results, recovery := runStorageFailure(t, victimMode, fault, runFor)
					row.Trials++
					row.Recoveries = append(row.Recoveries, recovery)
					for _, result := range results {
						row.Add(result)
					}
				})
			}
		}
	}
	summary.Add(row)
}

func runStorageFailure(t *testing.T, victimMode wire.Mode, fault storageFault, runFor time.Duration) ([]QueueResult, time.Duration) {
	queues := map[string]wire.Mode{"victim": victimMode, "bystander-durable": wire.ModeDurable,
		"bystander-buffered": wire.ModeBuffered}
	mem := vfs.NewMem()
	node := startMemNode(t, mem, nil, nil)
	h := NewHistory()
	h.LifeStarted()
	l := startLoad(t, h, node.loadConfig(loadConfig{queues: queues, payloadBytes: 100, ratePerQueue: 1000,
		prefetch: 16, sampleEvery: 10 * time.Millisecond}))
	time.Sleep(runFor)

	node.sampleAll(h, []string{"victim"})
	armed := h.Now()
	mem.InjectFault(fault.rule)
	waitUntil(t, "the victim to refuse publishes", func() bool {
		return len(refusals(h.Record(), "victim")) > 0
	})
	if mem.FaultsFired() == 0 {
		t.Fatal("the victim refused publishes but no fault fired")
	}
	fencedAt := h.Now()
	time.Sleep(50 * time.Millisecond) // refusals after the fence settled too
	checkRefusals(t, refusals(h.Record(), "victim"), fault.cause)
	checkFencedHealth(t, node.broker)
	for _, bystander := range []string{"bystander-durable", "bystander-buffered"} {
		waitUntil(t, bystander+" to confirm 100 publishes after the fence", func() bool {
			return confirmedAfter(h.Record(), bystander, fencedAt) >= 100
		})
	}

	// Restart: the page cache still holds what the failed log wrote, as
	// after a process restart; the pending cut must drop it.
	mem.ClearFaults()
	if err := node.broker.Close(); err != nil {
		t.Errorf("close after the fault: %v", err)
	}
	l.awaitOutcomes()
	h.LifeEnded(EndStorageFailure, armed, "victim")
	h.LifeStarted()
	began := time.Now()
	node.start()
	recovery := time.Since(began)
	restartedAt := h.Now()
	waitUntil(t, "the victim to confirm publishes after the restart", func() bool {
		return confirmedAfter(h.Record(), "victim", restartedAt) >= 100
	})
	if health := node.broker.Health(); !health.OK {
		t.Errorf("health after the restart: %+v", health)
	}
	l.drain(60 * time.Second)
	results := checkLoad(t, h, queues)
	for _, result := range results {
		if result.Queue == "victim" && result.Refused == 0 {
			t.Errorf("victim: no publish was refused")
		}
		// The restart's own drain refuses, as not stored, what the node had
		// not appended when it began to shut down: that is the shutdown's
		// answer, not the failed disk's.
		if bystander := refusalsNotByShutdown(h.Record(), result.Queue); result.Queue != "victim" && len(bystander) > 0 {
			t.Errorf("%s refused %d publishes while another queue's disk failed: %v", result.Queue,
				len(bystander), bystander[:1])
		}
	}
	return results, recovery
}

func waitUntil(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func confirmedAfter(record Record, queue string, after time.Time) int {
	n := 0
	for _, p := range record.Publishes {
		if p.Queue == queue && p.Outcome == OutcomeConfirmed && p.At.After(after) {
			n++
		}
	}
	return n
}

// checkRefusals wants every refusal to say that the queue is fenced after
// a storage failure and to carry a cause (not "<nil>"), and at least one
// to name the real cause.
func checkRefusals(t *testing.T, reasons []string, cause string) {
	t.Helper()
	distinct := map[string]int{}
	namesCause := false
	for _, reason := range reasons {
		distinct[reason]++
		if !strings.Contains(reason, "fenced") || !strings.Contains(reason, "storage failure") {
			t.Errorf("refusal that does not say the queue is fenced after a storage failure: %q", reason)
		}
		if strings.HasSuffix(reason, "<nil>") {
			t.Errorf("refusal without its cause: %q", reason)
		}
		namesCause = namesCause || strings.Contains(reason, cause)
	}
	if !namesCause {
		t.Errorf("no refusal names the cause %q; refusals: %v", cause, distinct)
	}
}

// checkFencedHealth wants the broker's health and GET /healthz to report
// the victim, and only it.
func checkFencedHealth(t *testing.T, broker *actors.Broker) {
	t.Helper()
	health := broker.Health()
	if health.OK || len(health.Queues) != 1 || health.Queues[0].Name != "victim" {
		t.Errorf("health while fenced: %+v", health)
	}
	server, err := admin.Start("127.0.0.1:0", admin.NewBrokerNode(broker), admin.Options{})
	if err != nil {
		t.Fatalf("admin endpoint: %v", err)
	}
	defer server.Close()
	response, err := http.Get("http://" + server.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	body, _ := io.ReadAll(response.Body)
	_ = response.Body.Close()
	if response.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"victim"`) ||
		strings.Contains(string(body), "bystander") {
		t.Errorf("GET /healthz while fenced: %d %s", response.StatusCode, body)
	}
}

// A publish refused after a failed fsync must stay refused across a
// restart even when the disk also refuses to record the pending cut (every
// sync in the log directory fails, as on a failing disk). The log cannot
// record where its durable records end, so it cuts its active segment back
// in the page cache and names the failure (log.ErrCutNotRecorded); the
// partition turns that into a fatal stop naming the device error, and the
// broker started again on the same filesystem (as a process restart finds
// it) serves the confirmed messages and not the refused one.
func TestRefusedPublishStaysRefusedWhenTheCutCannotBeRecorded(t *testing.T) {
	mem := vfs.NewMem()
	node := startMemNode(t, mem, nil, nil)
	options := client.Options{Addresses: []string{"node"}, Dialer: node.plug.dial}
	c := dialClient(t, options)
	declareQueues(t, c, map[string]wire.Mode{"victim": wire.ModeDurable})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 10 {
		if _, err := c.Publish(ctx, "victim", client.Message{Payload: []byte("confirmed")}); err != nil {
			t.Fatal(err)
		}
	}
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: memDataDir + "/queues/victim/0/log/*", Sticky: true})
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: memDataDir + "/queues/victim/0/log", Sticky: true})
	if _, err := c.Publish(ctx, "victim", client.Message{Payload: []byte("refused")}); err == nil {
		t.Fatal("a publish on a failing disk was confirmed")
	}
	select {
	case <-node.broker.Fatal():
	case <-ctx.Done():
		t.Fatal("the broker did not stop after the log could not record its cut")
	}
	fatal := node.broker.FatalError()
	if !errors.Is(fatal, log.ErrCutNotRecorded) || !strings.Contains(fatal.Error(), syscall.EIO.Error()) {
		t.Fatalf("fatal failure %v, want it to name the unrecorded cut and the device error", fatal)
	}
	_ = c.Close()
	mem.ClearFaults()
	if err := node.broker.Close(); err != nil {
		t.Errorf("close after the fault: %v", err)
	}
	node.start()
	c = dialClient(t, options)
	defer c.Close()
	info, err := c.QueueInfo(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if info.Ready != 10 {
		t.Fatalf("after the restart the queue holds %d messages: 10 were confirmed and 1 refused", info.Ready)
	}
}

// refusalsNotByShutdown are a queue's refusals other than the ones a
// node's shutdown gives what it had not appended yet.
func refusalsNotByShutdown(record Record, queue string) []string {
	var out []string
	for _, reason := range refusals(record, queue) {
		if !strings.Contains(reason, "the node is shutting down") {
			out = append(out, reason)
		}
	}
	return out
}
