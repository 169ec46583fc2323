package actors

// Replication on three in-process brokers over loopback (cluster_test.go
// has the harness): a confirm stands on the policy's copies at the queue's
// boundary, deliveries stop at the same frontier, a follower that was away
// catches up through the pull path, a latched follower stops confirms
// while fewer than W copies remain, and retention keeps what the slowest
// follower still needs.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// gatedCluster starts three brokers, each on a gateFS over the OS.
func gatedCluster(t *testing.T, options ...brokerClusterOption) (*brokerCluster, map[string]*gateFS) {
	t.Helper()
	gates := map[string]*gateFS{}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		gates[id] = newGateFS(vfs.OS)
		options = append(options, withBrokerFS(id, gates[id]))
	}
	c := startBrokerCluster(t, 3, options...)
	t.Cleanup(func() {
		for _, gate := range gates {
			gate.release() // a held log would keep its broker from closing
		}
	})
	return c, gates
}

// declareServed declares a queue through node1 and waits until its owner
// serves it; it returns the owner and the two followers.
func (c *brokerCluster) declareServed(name string, config client.QueueConfig) (owner string, followers []string) {
	c.t.Helper()
	ctx := testContext(c.t)
	if _, err := c.dialSDK("node1").Declare(ctx, name, config); err != nil {
		c.t.Fatalf("declare %s: %v", name, err)
	}
	owner = c.ownerOf(name)
	waitUntil(c.t, owner+" serves "+name, func() bool { return servesHere(c.members[owner].broker, name) })
	return owner, c.others(owner)
}

// copyAt is a node's own copy of a queue: its log's positions.
func (c *brokerCluster) copyAt(id, name string) wire.QueueInfo {
	c.t.Helper()
	info, ok := c.members[id].broker.QueueInfo(name)
	if !ok {
		c.t.Fatalf("%s has no copy of %s", id, name)
	}
	return info
}

// boundaryNext is a copy's position at the queue's boundary.
func boundaryNext(info wire.QueueInfo, buffered bool) uint64 {
	if buffered {
		return info.WrittenNext
	}
	return info.DurableNext
}

// Every policy, both modes: with one follower's log held (its fsyncs for a
// durable queue, its writes for a buffered one), a queue whose policy
// needs two copies confirms on the owner and the other follower, and the
// confirm finds that follower's log past the message at the boundary; a
// queue that needs three neither confirms nor delivers until the held
// follower's disk answers, and then does both.
func TestReplicationConfirmsStandOnThePolicysCopies(t *testing.T) {
	c, gates := gatedCluster(t)
	cases := []struct {
		policy   string
		mode     client.Mode
		buffered bool
		copies   int
	}{
		{"replica_durable:2", client.ModeDurable, false, 2},
		{"majority_durable", client.ModeDurable, false, 2},
		{"replica_durable:3", client.ModeDurable, false, 3},
		{"replica_buffered:2", client.ModeBuffered, true, 2},
		{"replica_buffered:3", client.ModeBuffered, true, 3},
	}
	for i, tc := range cases {
		ctx := testContext(t) // one bound per case: five of them outlast one on a loaded machine
		name := fmt.Sprintf("copies-%d", i)
		owner, followers := c.declareServed(name, client.QueueConfig{Mode: tc.mode, Policy: tc.policy})
		held, other := followers[0], followers[1]
		sdk := c.dialSDK(owner)
		subscription, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 10})
		if err != nil {
			t.Fatalf("%s: subscribe: %v", tc.policy, err)
		}
		ops := gateSyncs
		if tc.buffered {
			ops = gateWrites
		}
		gates[held].hold(ops)
		future, err := sdk.PublishAsync(ctx, name, client.Message{Payload: []byte(tc.policy)})
		if err != nil {
			t.Fatalf("%s: publish: %v", tc.policy, err)
		}
		if tc.copies == 2 {
			confirm, err := future.Wait(ctx)
			if err != nil {
				t.Fatalf("%s: confirm with %s held: %v", tc.policy, held, err)
			}
			if position := boundaryNext(c.copyAt(other, name), tc.buffered); position < 1 {
				t.Fatalf("%s: confirmed (%v) while %s holds the message at %d only", tc.policy, confirm.Boundary, other, position)
			}
			if position := boundaryNext(c.copyAt(held, name), tc.buffered); position != 0 {
				t.Fatalf("%s: the held follower %s is at %d", tc.policy, held, position)
			}
		} else {
			waitUntil(t, held+"'s log is held", func() bool { return gates[held].held() > 0 })
			waitUntil(t, other+" holds the message", func() bool {
				return boundaryNext(c.copyAt(other, name), tc.buffered) >= 1
			})
			time.Sleep(100 * time.Millisecond) // room for a wrong confirm or delivery to show
			select {
			case <-future.Done():
				t.Fatalf("%s: confirmed with %s's log held", tc.policy, held)
			case delivery := <-subscription.Deliveries():
				t.Fatalf("%s: delivered %q with %s's log held", tc.policy, delivery.Payload, held)
			default:
			}
			if info := c.copyAt(owner, name); info.CommittedNext != 0 {
				t.Fatalf("%s: the quorum frontier is %d with %s's log held", tc.policy, info.CommittedNext, held)
			}
		}
		gates[held].release()
		if _, err := future.Wait(ctx); err != nil {
			t.Fatalf("%s: confirm: %v", tc.policy, err)
		}
		select {
		case delivery := <-subscription.Deliveries():
			if string(delivery.Payload) != tc.policy {
				t.Fatalf("%s: delivered %q", tc.policy, delivery.Payload)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no delivery", tc.policy)
		}
		for _, id := range c.order {
			waitUntil(t, id+" holds the message", func() bool { return boundaryNext(c.copyAt(id, name), tc.buffered) >= 1 })
		}
		_ = subscription.Unsubscribe(ctx)
	}
}

// serverErrorCode is the code of a *client.ServerError in err, or 0.
func serverErrorCode(err error) wire.Code {
	var refused *client.ServerError
	if errors.As(err, &refused) {
		return refused.Code
	}
	return 0
}

// metricValue reads one series of a broker's metrics: the value of the
// line that starts with series (name and labels as the text format writes
// them); -1 when there is none.
func metricValue(broker *Broker, series string) float64 {
	var text strings.Builder
	broker.Metrics().WritePrometheus(&text)
	for _, line := range strings.Split(text.String(), "\n") {
		if rest, found := strings.CutPrefix(line, series+" "); found {
			value, err := strconv.ParseFloat(rest, 64)
			if err == nil {
				return value
			}
		}
	}
	return -1
}

// publishMany publishes count messages of size bytes and waits for every
// confirm.
func publishMany(t *testing.T, ctx context.Context, sdk *client.Client, name string, count, size int) {
	t.Helper()
	futures := make([]*client.PublishFuture, 0, count)
	for i := range count {
		payload := make([]byte, size)
		copy(payload, fmt.Sprintf("%s-%d", name, i))
		future, err := sdk.PublishAsync(ctx, name, client.Message{Payload: payload})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures = append(futures, future)
	}
	for i, future := range futures {
		if _, err := future.Wait(ctx); err != nil {
			t.Fatalf("confirm %d: %v", i, err)
		}
	}
}

// consumeAndAck takes count deliveries and acks each.
func consumeAndAck(t *testing.T, ctx context.Context, sdk *client.Client, name string, count int) {
	t.Helper()
	subscription, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 256})
	if err != nil {
		t.Fatalf("subscribe %s: %v", name, err)
	}
	for i := range count {
		select {
		case delivery := <-subscription.Deliveries():
			if err := delivery.Ack(); err != nil {
				t.Fatalf("ack %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("delivery %d of %d did not come", i, count)
		}
	}
	if err := subscription.Unsubscribe(ctx); err != nil {
		t.Fatalf("unsubscribe: %v", err)
	}
}

// replicaOf finds node's entry in an owner's queue info.
func replicaOf(info wire.QueueInfo, node string) (wire.ReplicaInfo, bool) {
	for _, replica := range info.Replicas {
		if replica.Node == node {
			return replica, true
		}
	}
	return wire.ReplicaInfo{}, false
}

// A follower whose broker was away while the owner took 750 publishes and
// the acks of most, and checkpointed (small segments, a checkpoint every
// 100 records) comes back, is refused pushes while it is behind,
// fetches what it lacks from the owner's files (the pull path) and rejoins
// in sync with every record: retention kept what it still needed.
func TestReplicationFollowerAwayCatchesUpThroughThePullPath(t *testing.T) {
	c := startBrokerCluster(t, 3, withBrokerConfig(func(_ string, config *Config) {
		config.SegmentBytes, config.CheckpointEveryRecords = 64<<10, 100
	}))
	ctx := testContext(t)
	owner, followers := c.declareServed("pull", client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	away := followers[1]
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, "pull", 50, 1024)
	waitUntil(t, away+" holds the first 50", func() bool { return c.copyAt(away, "pull").DurableNext >= 50 })
	if err := c.members[away].broker.Close(); err != nil {
		t.Fatal(err)
	}
	c.members[away].broker = nil
	publishMany(t, ctx, sdk, "pull", 600, 1024)
	consumeAndAck(t, ctx, sdk, "pull", 650)
	// A checkpoint taken now covers only settled messages below its live
	// offset: without the floor, compaction would drop what away lacks.
	publishMany(t, ctx, sdk, "pull", 150, 1024)
	c.startBroker(away)
	ownerInfo := func() wire.QueueInfo { return c.copyAt(owner, "pull") }
	waitUntil(t, away+" rejoins in sync with the owner's log", func() bool {
		info := ownerInfo()
		replica, ok := replicaOf(info, away)
		return ok && replica.State == "in sync" && replica.DurableNext == info.DurableNext &&
			c.copyAt(away, "pull").DurableNext == info.DurableNext
	})
	fetched := metricValue(c.members[away].broker, `fibril_replication_fetched_records_total{queue="pull"}`)
	if behind := ownerInfo().DurableNext - 50; fetched < float64(min(behind, 600)) {
		t.Fatalf("%s fetched %v records; it lacked at least %d", away, fetched, min(behind, 600))
	}
	if info := ownerInfo(); info.DurableOn != 3 || info.WrittenOn != 3 {
		t.Fatalf("after the catch-up: written on %d, durable on %d of 3", info.WrittenOn, info.DurableOn)
	}
	// The caught-up follower takes pushes again.
	publishMany(t, ctx, sdk, "pull", 10, 100)
	waitUntil(t, away+" takes the next pushes", func() bool {
		return c.copyAt(away, "pull").DurableNext == ownerInfo().DurableNext
	})
}

// A follower whose log latches (its disk fails an fsync) is reported
// latched; while fewer than W copies count, the owner refuses publishes
// with unavailable (211) and appends nothing; once the follower's queue is
// reopened on a working disk it rejoins and publishes confirm again.
func TestReplicationLatchedFollowerStopsConfirmsUntilRepaired(t *testing.T) {
	disks := map[string]*vfs.Mem{}
	var options []brokerClusterOption
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		disks[id] = vfs.NewMem()
		options = append(options, withBrokerFS(id, disks[id]))
	}
	c := startBrokerCluster(t, 3, options...)
	ctx := testContext(t)
	owner, followers := c.declareServed("fragile", client.QueueConfig{Mode: client.ModeDurable, Policy: "replica_durable:3"})
	sick := followers[0]
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, "fragile", 5, 64)
	disks[sick].InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	// The next record makes the sick follower fsync, fail and latch; the
	// publish carrying it waits (it is appended, W is 3).
	pending, err := sdk.PublishAsync(ctx, "fragile", client.Message{Payload: []byte("pending")})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the owner reports "+sick+" latched", func() bool {
		replica, ok := replicaOf(c.copyAt(owner, "fragile"), sick)
		return ok && strings.HasPrefix(replica.State, "latched")
	})
	_, err = sdk.Publish(ctx, "fragile", client.Message{Payload: []byte("refused")})
	if code := serverErrorCode(err); code != wire.CodeUnavailable || !strings.Contains(err.Error(), sick) {
		t.Fatalf("publish with %s latched: %v", sick, err)
	}
	written := c.copyAt(owner, "fragile").WrittenNext
	select {
	case <-pending.Done():
		t.Fatalf("a publish confirmed on fewer than 3 copies")
	default:
	}
	disks[sick].ClearFaults()
	if err := c.members[sick].broker.ReopenQueue("fragile"); err != nil {
		t.Fatalf("reopen the sick follower's copy: %v", err)
	}
	if _, err := pending.Wait(ctx); err != nil {
		t.Fatalf("the publish that waited: %v", err)
	}
	if _, err := sdk.Publish(ctx, "fragile", client.Message{Payload: []byte("after")}); err != nil {
		t.Fatalf("publish after the repair: %v", err)
	}
	if after := c.copyAt(owner, "fragile").WrittenNext; after <= written {
		t.Fatalf("the owner's log did not grow after the repair: %d then %d", written, after)
	}
	consumeAndAck(t, ctx, sdk, "fragile", 7)
}

// A follower that is gone stops holding its owner's compaction once
// Config.FollowerRetentionHold has passed (before, one follower lost for
// good kept every owner's log from offset 0): the owner compacts the
// segments its checkpoint covers while the follower is still down.
func TestReplicationAGoneFollowerStopsHoldingCompaction(t *testing.T) {
	c := startBrokerCluster(t, 3, withBrokerConfig(func(_ string, config *Config) {
		config.SegmentBytes, config.CheckpointEveryRecords = 64<<10, 100
		config.FollowerRetentionHold = 2 * time.Second
	}))
	ctx := testContext(t)
	name := "gone"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	gone := followers[1]
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, name, 50, 1024)
	waitUntil(t, gone+" holds the first 50", func() bool { return c.copyAt(gone, name).DurableNext >= 50 })
	c.stop(gone)
	firstSegment := filepath.Join(c.members[owner].config.DataDir, "queues", name, "0", "log", fmt.Sprintf("%020d.log", 0))
	if _, err := os.Stat(firstSegment); err != nil {
		t.Fatalf("the owner's first segment: %v", err)
	}
	// Publish, ack and checkpoint until compaction may drop the first
	// segment: it does once the gone follower's hold has passed.
	waitUntil(t, "the owner compacts its first segment with "+gone+" down", func() bool {
		publishMany(t, ctx, sdk, name, 200, 1024)
		consumeAndAck(t, ctx, sdk, name, 200)
		_, err := os.Stat(firstSegment)
		return os.IsNotExist(err)
	})
	if replica, ok := replicaOf(c.copyAt(owner, name), gone); !ok || replica.State == "in sync" {
		t.Fatalf("the gone follower shows %q", replica.State)
	}
}
