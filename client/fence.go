package client

// The publish fence, the client's side (docs/protocol.md 4.3, "Order
// across a refusal"; protocol version 3).
//
// Once a node refuses a publish to a queue with a fencing code, it refuses
// every later publish to that queue on the connection until the client
// sends FRS1 resume-publishing. So a refusal in the middle of a pipeline
// cannot let a later publish be stored before the refused one is sent
// again. The connection marks the queue fenced when it reads such a
// refusal (before the refused publishes reach their lane); the lane
// (lane.go) then holds the queue's publishes for that connection until
// nothing of the queue is unresolved on it (those answers are refusals
// under the fence, or answers to publishes sent before the first refused
// one), and its drainer sends the resume right before the held publishes,
// which go out in publish number order.
//
// Invariant: a connection's fence marks are read and written under
// Client.lanes.mu; a mark is cleared only by the drainer that puts the
// resume in the outbox ahead of the queue's next publish there.

import "github.com/fibrilmq/fibril/wire"

// fencesQueue reports whether a node's refusal of a publish with code
// fences the queue on the connection (the node's rule: a refusal of a
// publish that was not stored and that may be sent again).
func fencesQueue(code wire.Code) bool {
	switch code {
	case wire.CodeNotOwner, wire.CodeFenced, wire.CodeLimitReached, wire.CodeStorageFailure,
		wire.CodeUnavailable, wire.CodeOverloaded:
		return true
	}
	return false
}

// markFenced notes that the node fenced queue on c: c's session speaks
// protocol version 3 and refused one of its publishes with code.
func (c *conn) markFenced(queue string, code wire.Code) {
	if !c.fences || !fencesQueue(code) {
		return
	}
	lanes := &c.client.lanes
	lanes.mu.Lock()
	if c.fenced == nil {
		c.fenced = make(map[string]bool)
	}
	c.fenced[queue] = true
	lanes.mu.Unlock()
}

// fencedLocked reports whether queue is fenced on c. Call it with the
// lanes' lock held.
func (c *conn) fencedLocked(queue string) bool { return c.fenced[queue] }

// resumeFrame is the frame that lifts queue's fence.
func resumeFrame(queue string) outbound {
	return outbound{frame: &wire.ResumePublishing{Queue: queue}}
}
