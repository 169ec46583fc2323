package actors

import (
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

// An owner cut off from every peer steps down (replication.OwnerCutOff)
// while its own view of the coordination shard still names it: it cannot
// hear of the next epoch. A publish sent to it then is refused at once
// with unavailable (not stored), so the client goes through another node,
// which knows the new owner. Before, the node held the publish for its
// queue to open here (up to clusterOwnerWait) and its clients waited on it
// for most of a cut (class 13 of the cluster fault suite: 6.7 s to the
// first new confirm at the median, 17.8 s at p95).
func TestASteppedDownOwnerSendsItsClientsElsewhereAtOnce(t *testing.T) {
	c, _ := memCluster(t, nil)
	ctx := testContext(t)
	name := "stepped-down"
	owner, followers := c.declareServed(name, client.QueueConfig{Policy: "majority_durable"})
	sdk := c.dialSDK(owner)
	if _, err := sdk.Publish(ctx, name, client.Message{Payload: []byte("before")}); err != nil {
		t.Fatalf("publish before the cut: %v", err)
	}
	found, err := c.members[owner].node.WaitOwner(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, follower := range followers {
		c.stop(follower) // the owner hears no peer: cut off, as far as it can tell
	}
	waitUntil(t, owner+" steps down", func() bool { return !servesHere(c.members[owner].broker, name) })
	if view, _ := c.members[owner].node.Partition(found.ShardID); view.State.Owner != owner {
		t.Fatalf("the view names %s, not the stepped-down %s: the case is not the one under test", view.State.Owner, owner)
	}
	_, err = sdk.Publish(ctx, name, client.Message{Payload: []byte("after the step-down")})
	if client.CodeOf(err) != wire.CodeUnavailable || !strings.Contains(err.Error(), "stopped serving it") {
		t.Fatalf("publish to the stepped-down owner: %v; want unavailable saying it stopped serving the queue", err)
	}
}
