package actors

// The publish fence end to end (publish_fence.go, docs/protocol.md 4.3,
// "Order across a refusal"): a refusal in the middle of a connection's
// publishes to a queue must not let a later publish of that connection be
// stored before the client has sent the refused one again.

import (
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// fullQueue declares a queue that holds one message and refuses more, and
// fills it; the next publish to it is refused with limit_reached until a
// purge empties it: a refusal whose reason the test ends at will.
func fullQueue(c *testClient, name string) {
	c.t.Helper()
	c.mustDeclare(name, wire.ModeBuffered, wire.QueueOptions{MaxLength: 1, Overflow: wire.OverflowRejectNew})
	c.mustConfirm(name, wire.BoundaryWritten, "first")
}

// purge empties a queue and waits for the purge to apply.
func (c *testClient) purge(name string) {
	c.t.Helper()
	id := c.id()
	c.send(&wire.PurgeQueue{RequestID: id, Queue: name})
	if ok, isOK := c.reply(id).(*wire.OK); !isOK {
		c.t.Fatalf("purge of %s: %+v", name, ok)
	}
}

// outcomeOf publishes one message and waits for its answer.
func (c *testClient) outcomeOf(name, payload string) outcome {
	c.t.Helper()
	seqs := c.publish(name, payload)
	return c.awaitOutcomes(seqs)[seqs[0]]
}

// Before the fence, "later" was stored here once the reason for the
// refusal of "refused" had passed, and a client that sent "refused" again
// got it stored after "later": the order violation of the owner power-loss
// trial, whose refusal was the cluster's admission.
func TestARefusedPublishFencesItsQueueUntilTheClientResumes(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	fullQueue(c, "fenced")
	c.mustDeclare("beside", wire.ModeBuffered, wire.QueueOptions{})

	if out := c.outcomeOf("fenced", "refused"); out.confirmed || out.code != wire.CodeLimitReached {
		t.Fatalf("a publish to the full queue: %+v, want limit_reached", out)
	}
	c.purge("fenced") // the reason has passed: the queue has room
	out := c.outcomeOf("fenced", "later")
	if out.confirmed {
		t.Fatal("a publish sent after a refused one was stored before the client resumed: " +
			"the refused one, sent again, would be stored after it")
	}
	if out.code != wire.CodeLimitReached || !strings.Contains(out.message, "FRS1") {
		t.Fatalf("a publish under the fence: %+v, want the first refusal's code and a message naming the resume", out)
	}
	if out := c.outcomeOf("beside", "other queue"); !out.confirmed {
		t.Fatalf("a publish to another queue of the connection: %+v; the fence is one queue's", out)
	}

	c.send(&wire.ResumePublishing{Queue: "fenced"})
	if out := c.outcomeOf("fenced", "refused again"); !out.confirmed {
		t.Fatalf("the refused publish sent again after the resume: %+v", out)
	}
	sub := c.subscribe("fenced", 1)
	if got := c.deliveries(sub, 1); string(got[0].Payload) != "refused again" {
		t.Fatalf("the queue holds %q, want the publish sent again after the resume", got[0].Payload)
	}
}

// A resume lifts only the fence of publishes sent before it: a refusal
// after it fences again, and a resume of a queue with no fence does
// nothing.
func TestAResumeLiftsOneFence(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	fullQueue(c, "twice")
	c.send(&wire.ResumePublishing{Queue: "twice"}) // nothing to lift
	c.send(&wire.ResumePublishing{Queue: "never-declared"})
	for round := range 2 {
		if out := c.outcomeOf("twice", "over"); out.code != wire.CodeLimitReached {
			t.Fatalf("round %d: a publish to the full queue: %+v, want limit_reached", round, out)
		}
		c.send(&wire.ResumePublishing{Queue: "twice"})
	}
	c.purge("twice")
	if out := c.outcomeOf("twice", "after"); !out.confirmed {
		t.Fatalf("a publish after the last resume: %+v", out)
	}
}

// A session of protocol version 2 knows no resume: the node does not fence
// it, as before version 3.
func TestAVersion2SessionIsNotFenced(t *testing.T) {
	b := startBroker(t, nil)
	c := dialBroker(t, b)
	c.helloWith("", "", 2)
	fullQueue(c, "old-client")
	if out := c.outcomeOf("old-client", "refused"); out.code != wire.CodeLimitReached {
		t.Fatalf("a publish to the full queue: %+v, want limit_reached", out)
	}
	c.purge("old-client")
	if out := c.outcomeOf("old-client", "later"); !out.confirmed {
		t.Fatalf("a version 2 session's publish after a refusal: %+v, want it stored as before", out)
	}
}
