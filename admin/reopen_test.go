package admin

import (
	"testing"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// POST /api/queues/{name}/reopen brings a fenced queue back: 200 with its
// status (no longer fenced), /healthz is 200 again, publishes confirm; a
// serving queue is 409, an unknown one 404, and GET is 405.
func TestLiveReopenOfAFencedQueue(t *testing.T) {
	mem := vfs.NewMem()
	node := startLiveNode(t, func(config *actors.Config) {
		config.FS = mem
		config.DataDir = "/data"
	})
	client := dialLive(t, node)
	client.declare("bad", wire.ModeDurable)
	client.declare("good", wire.ModeDurable)
	client.mustPublish("bad", 2)
	// One failed write: the log latches and records its pending cut
	// (a disk that also refuses that record is a known storage defect,
	// docs/durability.md).
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultWrite, Pattern: "/data/queues/bad/0/log/*"})
	for seq, confirmed := range client.publish("bad", 1) {
		if confirmed {
			t.Fatalf("seq %d confirmed on a log whose write fails", seq)
		}
	}
	do(t, node.server, "GET", "/healthz", "").expectStatus(t, 503)
	do(t, node.server, "POST", "/api/queues/good/reopen", "").expectStatus(t, 409)
	do(t, node.server, "POST", "/api/queues/missing/reopen", "").expectStatus(t, 404)
	do(t, node.server, "GET", "/api/queues/bad/reopen", "").expectStatus(t, 405)

	mem.ClearFaults()
	answer := do(t, node.server, "POST", "/api/queues/bad/reopen", "")
	answer.expectStatus(t, 200)
	var status QueueStatus
	answer.decode(t, &status)
	if status.Name != "bad" || status.Fenced || status.FenceError != "" || status.Counts.Ready != 2 {
		t.Fatalf("status after the reopen: %+v", status)
	}
	do(t, node.server, "GET", "/healthz", "").expectStatus(t, 200)
	// The refusal fenced the queue on this connection: resume it first
	// (docs/protocol.md 4.3, "Order across a refusal").
	client.send(&wire.ResumePublishing{Queue: "bad"})
	client.mustPublish("bad", 1)
}
