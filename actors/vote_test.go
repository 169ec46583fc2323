package actors

// A copy earns its vote (docs/cluster.md, "A copy earns its vote"): a
// replica whose queue disk came back empty while its Raft state survived
// seals as incomplete, and no recovery counts or chooses it until it has
// caught up. Each test gives the empty copy every chance to win a recovery
// alone (it leads the coordination shard while the copies that hold the
// confirmed messages are not there to seal), then brings those back and
// checks that every confirmed message is delivered. Before seals carried
// completeness, the empty copy's seal was enough, its empty history was
// activated, and the other copies were cut to it.

import (
	"fmt"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// startNodeOnly starts a stopped member's cluster node (its Raft state)
// without its broker: the node votes in the shards, no partition runs.
func (c *brokerCluster) startNodeOnly(id string) {
	c.t.Helper()
	node, err := cluster.Start(c.config, id, cluster.StartOptions{Logger: c.logger})
	if err != nil {
		c.t.Fatalf("start cluster node %s: %v", id, err)
	}
	c.members[id].node = node
}

// leadShard moves the leadership of a coordination shard to id (asking
// every live node's replica) and waits until id's view says it leads.
func (c *brokerCluster) leadShard(shardID uint64, id string) {
	c.t.Helper()
	waitUntil(c.t, id+" leads shard", func() bool {
		view, ok := c.members[id].node.Partition(shardID)
		if ok && view.SelfLeads {
			return true
		}
		for _, other := range c.order {
			if node := c.members[other].node; node != nil {
				_ = node.TransferLeadership(shardID, id)
			}
		}
		time.Sleep(50 * time.Millisecond)
		return false
	})
}

// waitForOwnClaim waits until id's view shows a claim by id newer than
// epoch, and returns the state.
func (c *brokerCluster) waitForOwnClaim(shardID uint64, id string, epoch uint64) cluster.CoordState {
	c.t.Helper()
	var state cluster.CoordState
	waitUntil(c.t, fmt.Sprintf("%s claims an epoch after %d", id, epoch), func() bool {
		view, ok := c.members[id].node.Partition(shardID)
		state = view.State
		return ok && state.Epoch > epoch && state.Owner == id
	})
	return state
}

// emptyCopyTrial is one interleaving: stop every node; bring back
// emptied (its queue disk empty, its Raft state intact) leading the
// partition's shard, beside Raft-only nodes (raftOnly, no broker) and
// brokers that hold what they held (kept, possibly behind); give the
// empty copy time to recover alone; then start everything and drain.
func emptyCopyTrial(t *testing.T, c *brokerCluster, name string, shardID uint64, epoch uint64, emptied string,
	raftOnly, kept []string, confirmed []string) {
	t.Helper()
	for _, id := range c.order {
		c.stop(id)
	}
	for _, id := range raftOnly {
		c.startNodeOnly(id)
	}
	c.fs[emptied] = vfs.NewMem()
	c.restart(emptied)
	for _, id := range kept {
		c.restart(id)
	}
	c.leadShard(shardID, emptied)
	state := c.waitForOwnClaim(shardID, emptied, epoch)
	// The empty copy sealed itself at once; give a recovery that counted
	// that seal time to plan and activate its empty history.
	time.Sleep(2 * time.Second)
	if view, _ := c.members[emptied].node.Partition(shardID); view.State.Phase == cluster.PhaseActive &&
		view.State.Owner == emptied && len(view.State.History) > 0 &&
		view.State.History[len(view.State.History)-1].FirstOffset < uint64(len(confirmed)) {
		t.Errorf("%s activated epoch %d from offset %d with an empty copy (%d confirmed messages)", emptied,
			view.State.Epoch, view.State.History[len(view.State.History)-1].FirstOffset, len(confirmed))
	}
	t.Logf("%s claimed epoch %d (%s) and waits for copies that earned their vote", emptied, state.Epoch, state.Phase)
	for _, id := range raftOnly {
		c.startBroker(id)
	}
	for _, id := range c.order {
		if c.members[id].node == nil {
			c.restart(id)
		}
	}
	serving := c.servingOwner(name)
	drainPayloads(t, testContext(t), c.dialSDKHome(serving, "consumer"), name, confirmed)
}

// W = E (replica_durable:3, one seal is enough): the owner stays down, a
// follower comes back with an empty queue disk and leads the shard while
// the other follower's broker is still starting. The empty copy must not
// recover alone; once the other follower seals, its history is chosen.
func TestAnEmptyCopyDoesNotWinARecoveryWhenEveryCopyIsRequired(t *testing.T) {
	c, _ := memCluster(t, nil)
	ctx := testContext(t)
	name := "every-copy"
	owner, followers := c.declareServed(name, client.QueueConfig{Policy: "replica_durable:3"})
	for _, follower := range followers {
		c.waitInSync(owner, follower, name)
	}
	confirmed := confirmedPayloads(t, ctx, c.dialSDKHome(owner, "publisher"), name, "m", 100)
	found, err := c.members[owner].node.WaitOwner(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	emptied, starting := followers[0], followers[1]
	emptyCopyTrial(t, c, name, found.ShardID, found.Epoch, emptied, []string{starting}, nil, confirmed)
}

// W < E (majority_durable: two seals): the owner (its disk intact) is down;
// one follower comes back with an empty queue disk and the other, which
// missed the later confirms, comes back behind. Their two seals must not
// be enough: the empty one does not count, so the recovery waits for the
// owner, whose history holds every confirm.
func TestAnEmptyCopyAndALaggingCopyDoNotOutvoteTheOwner(t *testing.T) {
	c, _ := memCluster(t, nil)
	ctx := testContext(t)
	name := "majority"
	owner, followers := c.declareServed(name, client.QueueConfig{Policy: "majority_durable"})
	for _, follower := range followers {
		c.waitInSync(owner, follower, name)
	}
	publisher := c.dialSDKHome(owner, "publisher")
	confirmed := confirmedPayloads(t, ctx, publisher, name, "early", 20)
	lagging, emptied := followers[0], followers[1]
	c.stop(lagging)
	confirmed = append(confirmed, confirmedPayloads(t, ctx, publisher, name, "late", 80)...)
	found, err := c.members[owner].node.WaitOwner(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.stop(owner)
	// The owner's Raft node comes back (the shard needs two of three
	// replicas to elect), its broker does not until the end.
	emptyCopyTrial(t, c, name, found.ShardID, found.Epoch, emptied, []string{owner}, []string{lagging}, confirmed)
}

// A W = 1 durable queue confirms on its owner alone, and a recovery of it
// needs E seals, so a restarted owner waited for every follower. The
// restarted owner's own complete copy is enough (it held every confirm of
// its epoch, durably): it serves again while a follower is still down.
func TestARestartedOwnerOfADurableQueueRecoversFromItsOwnCopy(t *testing.T) {
	c, _ := memCluster(t, nil)
	ctx := testContext(t)
	name := "owner-alone"
	owner, followers := c.declareServed(name, client.QueueConfig{Policy: "replica_durable:1"})
	confirmed := confirmedPayloads(t, ctx, c.dialSDKHome(owner, "publisher"), name, "m", 50)
	c.stop(followers[0])
	c.stop(owner)
	c.restart(owner)
	serving := c.servingOwner(name)
	drainPayloads(t, ctx, c.dialSDKHome(serving, "consumer"), name, confirmed)
}

// A copy created empty on a node that was never a voter counts: it never
// counted toward a confirm, so it lost nothing one stood on. A follower is
// down (Raft and broker) from before the first confirm, so the owner
// records only itself and the other follower as voters; the follower's
// queue disk comes back empty and its copy is created after the confirms;
// the owner goes down before that copy caught up. The two remaining copies
// must recover the queue without the owner (W = 2 of 3), from the copy that
// holds the confirms. When every copy created after the first confirm
// counted as having lost data, this recovery waited for the owner for good
// (the binary failover tests' "no node serves" under load).
func TestACopyCreatedOnANodeThatNeverCountedSealsComplete(t *testing.T) {
	c, _ := memCluster(t, nil)
	ctx := testContext(t)
	name := "late-copy"
	owner, followers := c.declareServed(name, client.QueueConfig{Policy: "majority_durable"})
	late, holder := followers[0], followers[1]
	c.stop(late)
	confirmed := confirmedPayloads(t, ctx, c.dialSDKHome(owner, "publisher"), name, "m", 50)
	found, err := c.members[owner].node.WaitOwner(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	view, _ := c.members[holder].node.Partition(found.ShardID)
	if view.State.MayHaveCounted(late) || !view.State.MayHaveCounted(holder) {
		t.Fatalf("voters %v (known %v): %s must not be one, %s must", view.State.Voters, view.State.VotersKnown,
			late, holder)
	}
	c.stop(owner)
	c.startNodeOnly(owner) // the shard keeps a majority; the owner's copy stays away
	c.fs[late] = vfs.NewMem()
	c.restart(late)
	// The owner's Raft-only node may have taken the shard's leadership, and
	// a node without its broker runs no recovery (a real node runs both):
	// left there, the trial waited for good (3 of 30 runs failed before
	// this and the claim-state seal rule, 1 of 35 with this alone). The
	// leadership goes to a broker node, as it would once a real owner's
	// process had its partition open.
	c.leadShard(found.ShardID, holder)
	serving := c.servingOwner(name)
	if serving == owner {
		t.Fatalf("the stopped owner %s serves", owner)
	}
	drainPayloads(t, ctx, c.dialSDKHome(serving, "consumer"), name, confirmed)
}
