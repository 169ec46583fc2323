package admin

import (
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// POST /api/queues/{name}/mode switches a queue and reports where it
// stands; the same request again is unchanged; bad input is a 400, an
// unknown queue a 404, and GET /api/queues/{name} shows the revision.
func TestQueueModeEndpoint(t *testing.T) {
	node := startLiveNode(t, nil)
	client := dialLive(t, node)
	client.declare("events", wire.ModeBuffered)
	client.mustPublish("events", 3)

	answer := do(t, node.server, "POST", "/api/queues/events/mode", `{"mode": "durable", "wait_ms": 10000}`)
	answer.expectStatus(t, 200)
	var view ModeChangeView
	answer.decode(t, &view)
	if view.Outcome != "applied" || view.Mode != "durable" || view.Applied != "durable" || view.Revision != 1 {
		t.Fatalf("change: %+v", view)
	}
	answer = do(t, node.server, "POST", "/api/queues/events/mode?mode=durable", "")
	answer.expectStatus(t, 200)
	answer.decode(t, &view)
	if view.Outcome != "unchanged" || view.Revision != 1 {
		t.Fatalf("the same change again: %+v", view)
	}
	var status QueueStatus
	do(t, node.server, "GET", "/api/queues/events", "").decode(t, &status)
	if status.Mode != "durable" || status.DesiredMode != "durable" || status.ModeRevision != 1 || status.ModeChange != nil {
		t.Fatalf("status: mode %q desired %q revision %d change %+v", status.Mode, status.DesiredMode, status.ModeRevision, status.ModeChange)
	}
	client.mustPublish("events", 2)
	do(t, node.server, "POST", "/api/queues/events/mode?mode=fast", "").expectStatus(t, 400)
	do(t, node.server, "POST", "/api/queues/events/mode", `{"mode": `).expectStatus(t, 400)
	do(t, node.server, "POST", "/api/queues/events/mode?mode=buffered&wait_ms=-1", "").expectStatus(t, 400)
	do(t, node.server, "POST", "/api/queues/missing/mode?mode=durable", "").expectStatus(t, 404)
	do(t, node.server, "GET", "/api/queues/events/mode", "").expectStatus(t, 405)
}

// A mode change is a write: with a token set it needs the token.
func TestQueueModeEndpointNeedsTheToken(t *testing.T) {
	node := startLiveNode(t, nil)
	dialLive(t, node).declare("events", wire.ModeDurable)
	server := testServer(t, NewBrokerNode(node.broker), Options{Token: "s3cret"})
	do(t, server, "POST", "/api/queues/events/mode?mode=buffered", "").expectStatus(t, 401)
	do(t, server, "POST", "/api/queues/events/mode?mode=buffered", "", "Authorization", "Bearer s3cret").expectStatus(t, 200)
}
