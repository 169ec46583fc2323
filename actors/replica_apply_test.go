package actors

// A replica applies only below the committed frontier its owner reports
// (maybeCapReplicaApplies, partition_replica.go): what lies above may still
// be cut by a recovery, and a replica that applied it could checkpoint
// and compact against a marker the cut removes. Before, a replica applied
// everything it held at its own boundary.

import (
	"testing"

	"github.com/fibrilmq/fibril/client"
)

func TestAReplicaAppliesOnlyBelowTheCommittedFrontier(t *testing.T) {
	c, gates := gatedCluster(t)
	ctx := testContext(t)
	name := "applies-committed"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:3"})
	for _, follower := range followers {
		c.waitInSync(owner, follower, name)
	}
	sdk := c.dialSDK(owner)
	confirmedPayloads(t, ctx, sdk, name, "committed", 10)
	applier, held := followers[0], followers[1]
	waitUntil(t, applier+" applies the 10 committed messages", func() bool { return c.copyAt(applier, name).Ready == 10 })

	gates[held].hold(gateWrites) // every copy is needed: nothing commits while it cannot write
	before := c.copyAt(applier, name).WrittenNext
	var futures []*client.PublishFuture
	for range 5 {
		future, err := sdk.PublishAsync(ctx, name, client.Message{Payload: []byte("not committed")})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, future)
	}
	waitUntil(t, applier+" writes the 5 uncommitted publishes", func() bool {
		return c.copyAt(applier, name).WrittenNext >= before+5
	})
	if committed := c.copyAt(owner, name).CommittedNext; committed > before {
		t.Fatalf("the committed frontier moved to %d past %d with %s's writes held", committed, before, held)
	}
	waitUntil(t, applier+" hears the owner again (a keepalive)", func() bool {
		replica, ok := replicaOf(c.copyAt(owner, name), applier)
		return ok && replica.WrittenNext >= before+5
	})
	if ready := c.copyAt(applier, name).Ready; ready != 10 {
		t.Fatalf("%s applied past the committed frontier: %d ready, want the 10 committed", applier, ready)
	}

	gates[held].release()
	for _, future := range futures {
		if _, err := future.Wait(ctx); err != nil {
			t.Fatalf("confirm after the release: %v", err)
		}
	}
	waitUntil(t, applier+" applies all 15 once they commit", func() bool { return c.copyAt(applier, name).Ready == 15 })
}
