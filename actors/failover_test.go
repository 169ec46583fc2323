package actors

// Failover on three in-process brokers over loopback (cluster_test.go has
// the harness): the owner of a queue is stopped under load and another
// replica recovers the queue under a new epoch; nothing confirmed is lost,
// and the old owner comes back as a follower.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// servingOwner waits until one live broker serves the queue and returns
// it.
func (c *brokerCluster) servingOwner(name string) string {
	c.t.Helper()
	serving := ""
	waitUntil(c.t, "a node serves "+name, func() bool {
		for _, id := range c.live() {
			if servesHere(c.members[id].broker, name) {
				serving = id
				return true
			}
		}
		return false
	})
	return serving
}

// dialSDKHome connects the Go SDK with home at id and every other live
// node as a fallback address.
func (c *brokerCluster) dialSDKHome(id, name string) *client.Client {
	c.t.Helper()
	addresses := []string{c.members[id].config.ClientAddress}
	for _, other := range c.others(id) {
		addresses = append(addresses, c.members[other].config.ClientAddress)
	}
	sdk, err := client.Dial(testContext(c.t), client.Options{Addresses: addresses, ClientName: name})
	if err != nil {
		c.t.Fatalf("dial %s: %v", id, err)
	}
	c.t.Cleanup(func() { _ = sdk.Close() })
	return sdk
}

var debugFailover = false

// loadRecord is what a publisher under test saw.
type loadRecord struct {
	mu        sync.Mutex
	confirmed map[string]time.Time // payload → when its confirm arrived
	failed    map[wire.Code]int    // refusals and unknown outcomes, by code (0: not a node's)
	lastError map[wire.Code]string // the last message of each
}

func (r *loadRecord) confirmedSince(since time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.confirmed {
		if !at.Before(since) {
			n++
		}
	}
	return n
}

// firstConfirmAfter is when the first confirm after since arrived.
func (r *loadRecord) firstConfirmAfter(since time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, at := range r.confirmed {
		if at.After(since) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// publishUntil publishes one message at a time until stop closes,
// recording every confirm and every failure.
func publishUntil(ctx context.Context, sdk *client.Client, name string, stop <-chan struct{}, record *loadRecord) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		payload := fmt.Sprintf("%s-%d", name, i)
		publishCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		started := time.Now()
		_, err := sdk.Publish(publishCtx, name, client.Message{Payload: []byte(payload)})
		cancel()
		if debugFailover && (err != nil || time.Since(started) > 50*time.Millisecond) {
			fmt.Printf("publish %d took %v: %v\n", i, time.Since(started), err)
		}
		record.mu.Lock()
		if err == nil {
			record.confirmed[payload] = time.Now()
		} else {
			record.failed[client.CodeOf(err)]++
			if record.lastError != nil {
				record.lastError[client.CodeOf(err)] = err.Error()
			}
		}
		record.mu.Unlock()
		if err != nil {
			time.Sleep(5 * time.Millisecond) // a failing node is not hammered
		}
	}
}

// consumeAll acks every delivery and records the payloads seen.
func consumeAll(t *testing.T, ctx context.Context, sdk *client.Client, name string, seen *sync.Map) {
	t.Helper()
	_, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 256, Handler: func(d *client.Delivery) {
		seen.Store(string(d.Payload), true)
		_ = d.Ack()
	}})
	if err != nil {
		t.Fatalf("subscribe %s: %v", name, err)
	}
}

// The owner of a majority queue is stopped while a publisher confirms
// messages and a consumer takes them, in both modes: another replica
// serves the queue, every message confirmed before or after the loss is
// delivered, new publishes confirm on the new owner, and the old owner,
// restarted on its data directory, rejoins as a follower and converges.
func TestFailoverOwnerStoppedUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		mode   client.Mode
		policy string
	}{
		{client.ModeDurable, "majority_durable"},
		{client.ModeBuffered, "replica_buffered:2"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			c := startBrokerCluster(t, 3)
			ctx := testContext(t)
			name := "load-" + tc.mode.String()
			owner, followers := c.declareServed(name, client.QueueConfig{Mode: tc.mode, Policy: tc.policy})
			publisher := c.dialSDKHome(followers[0], "publisher")
			consumer := c.dialSDKHome(followers[1], "consumer")
			var seen sync.Map
			consumeAll(t, ctx, consumer, name, &seen)
			record := &loadRecord{confirmed: map[string]time.Time{}, failed: map[wire.Code]int{}, lastError: map[wire.Code]string{}}
			stop := make(chan struct{})
			publishing := make(chan struct{})
			go func() {
				defer close(publishing)
				publishUntil(ctx, publisher, name, stop, record)
			}()
			waitUntil(t, "300 confirms", func() bool { return record.confirmedSince(time.Time{}) >= 300 })
			killed := time.Now()
			c.stop(owner)
			t.Cleanup(func() {
				if t.Failed() {
					record.mu.Lock()
					t.Logf("publisher: %d confirmed, failures by code %v, last of each %q", len(record.confirmed), record.failed, record.lastError)
					record.mu.Unlock()
				}
			})
			waitUntil(t, "300 confirms after the owner stopped", func() bool { return record.confirmedSince(killed) >= 300 })
			close(stop)
			<-publishing
			newOwner := c.servingOwner(name)
			t.Logf("%s: owner %s stopped; %s serves; first confirm %v after the stop; failures by code %v",
				tc.mode, owner, newOwner, record.firstConfirmAfter(killed).Sub(killed), record.failed)

			record.mu.Lock()
			confirmed := make([]string, 0, len(record.confirmed))
			for payload := range record.confirmed {
				confirmed = append(confirmed, payload)
			}
			record.mu.Unlock()
			waitUntil(t, "every confirmed message is delivered", func() bool {
				for _, payload := range confirmed {
					if _, ok := seen.Load(payload); !ok {
						return false
					}
				}
				return true
			})

			c.restart(owner)
			waitUntil(t, owner+" rejoins as an in-sync follower", func() bool {
				info := c.copyAt(newOwner, name)
				replica, ok := replicaOf(info, owner)
				return ok && replica.State == "in sync" && boundaryNext(c.copyAt(owner, name), tc.mode == client.ModeBuffered) ==
					boundaryNext(info, tc.mode == client.ModeBuffered)
			})
			if servesHere(c.members[owner].broker, name) {
				t.Fatalf("the restarted old owner %s serves %s beside %s", owner, name, newOwner)
			}
		})
	}
}

// confirmedPayloads publishes count messages through sdk and returns their
// payloads, every one confirmed.
func confirmedPayloads(t *testing.T, ctx context.Context, sdk *client.Client, name, prefix string, count int) []string {
	t.Helper()
	payloads := make([]string, count)
	futures := make([]*client.PublishFuture, count)
	for i := range count {
		payloads[i] = fmt.Sprintf("%s-%d", prefix, i)
		future, err := sdk.PublishAsync(ctx, name, client.Message{Payload: []byte(payloads[i])})
		if err != nil {
			t.Fatalf("publish %s: %v", payloads[i], err)
		}
		futures[i] = future
	}
	for i, future := range futures {
		if _, err := future.Wait(ctx); err != nil {
			t.Fatalf("confirm of %s: %v", payloads[i], err)
		}
	}
	return payloads
}

// drainPayloads subscribes and acks until every payload in want was
// delivered (at least once).
func drainPayloads(t *testing.T, ctx context.Context, sdk *client.Client, name string, want []string) {
	t.Helper()
	missing := make(map[string]bool, len(want))
	for _, payload := range want {
		missing[payload] = true
	}
	subscription, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 512})
	if err != nil {
		t.Fatalf("subscribe %s: %v", name, err)
	}
	defer func() { _ = subscription.Unsubscribe(context.Background()) }()
	for len(missing) > 0 {
		select {
		case delivery := <-subscription.Deliveries():
			delete(missing, string(delivery.Payload))
			_ = delivery.Ack()
		case <-ctx.Done():
			t.Fatalf("%d confirmed messages were never delivered (one: %v)", len(missing), firstKey(missing))
		}
	}
}

func firstKey(m map[string]bool) string {
	for key := range m {
		return key
	}
	return ""
}

// The seed's scenario: messages confirmed on the owner A and follower B
// while follower C is away (its broker down, so it lacks them), then A is
// lost and C comes back. The recovery needs both B's and C's seals; the
// longer history, B's, is chosen, so whichever of them serves holds every
// confirmed message.
func TestFailoverChoosesTheHistoryTheConfirmsStoodOn(t *testing.T) {
	for _, mode := range []client.Mode{client.ModeDurable, client.ModeBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			c := startBrokerCluster(t, 3)
			ctx := testContext(t)
			policy := map[client.Mode]string{client.ModeDurable: "majority_durable", client.ModeBuffered: "replica_buffered:2"}[mode]
			name := "seed-" + mode.String()
			owner, followers := c.declareServed(name, client.QueueConfig{Mode: mode, Policy: policy})
			behind := followers[1]
			sdk := c.dialSDKHome(followers[0], "publisher")
			before := confirmedPayloads(t, ctx, sdk, name, "both", 50)
			if err := c.members[behind].broker.Close(); err != nil {
				t.Fatal(err)
			}
			c.members[behind].broker = nil
			confirmed := append(before, confirmedPayloads(t, ctx, sdk, name, "a-and-b", 200)...)
			c.stop(owner)
			c.startBroker(behind)
			serving := c.servingOwner(name)
			info := c.copyAt(serving, name)
			t.Logf("%s serves %s at epoch %d after %s was lost; %d confirmed", serving, name, info.Epoch, owner, len(confirmed))
			drainPayloads(t, ctx, c.dialSDKHome(serving, "consumer"), name, confirmed)
			for _, id := range c.live() {
				waitUntil(t, id+" holds the chosen history", func() bool {
					return boundaryNext(c.copyAt(id, name), mode == client.ModeBuffered) >= boundaryNext(info, mode == client.ModeBuffered)
				})
			}
		})
	}
}

// Five failovers in a row: each time the serving owner is stopped, another
// replica serves under a newer epoch, and the stopped one comes back as a
// follower before the next round. Every message confirmed in any round is
// delivered at the end.
func TestFailoverFiveTimesInARow(t *testing.T) {
	c := startBrokerCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	name := "again"
	owner, _ := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	var confirmed []string
	epoch := c.copyAt(owner, name).Epoch
	for round := range 5 {
		sdk := c.dialSDKHome(c.others(owner)[0], fmt.Sprintf("round-%d", round))
		confirmed = append(confirmed, confirmedPayloads(t, ctx, sdk, name, fmt.Sprintf("round-%d", round), 100)...)
		_ = sdk.Close()
		c.stop(owner)
		next := c.servingOwner(name)
		nextEpoch := c.copyAt(next, name).Epoch
		if nextEpoch <= epoch {
			t.Fatalf("round %d: %s serves at epoch %d, not above %d", round, next, nextEpoch, epoch)
		}
		c.restart(owner)
		waitUntil(t, owner+" rejoins", func() bool {
			replica, ok := replicaOf(c.copyAt(next, name), owner)
			return ok && replica.State == "in sync"
		})
		owner, epoch = next, nextEpoch
	}
	drainPayloads(t, ctx, c.dialSDKHome(owner, "consumer"), name, confirmed)
}

// A recovery that needs a replica whose log latched waits for it: with the
// owner lost and C's disk failing its fsyncs, B alone cannot recover (two
// seals are needed), so no node serves; once C's copy is reopened on a
// working disk, the recovery finishes and every confirmed message is
// there.
func TestFailoverWaitsForALatchedReplicaToReopen(t *testing.T) {
	disks := map[string]*vfs.Mem{}
	var options []brokerClusterOption
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		disks[id] = vfs.NewMem()
		options = append(options, withBrokerFS(id, disks[id]))
	}
	c := startBrokerCluster(t, 3, options...)
	ctx := testContext(t)
	name := "latched-recovery"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	sick := followers[1]
	publisher := c.dialSDKHome(followers[0], "publisher")
	confirmed := confirmedPayloads(t, ctx, publisher, name, "m", 100)
	disks[sick].InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	// The next record makes the sick follower fsync and latch; it confirms
	// on the owner and the healthy follower.
	confirmed = append(confirmed, confirmedPayloads(t, ctx, publisher, name, "after-the-fault", 1)...)
	waitUntil(t, sick+"'s copy latches", func() bool { return c.copyAt(sick, name).Fenced })
	c.stop(owner)
	time.Sleep(500 * time.Millisecond) // several election timeouts: room for a wrong recovery to finish
	for _, id := range c.live() {
		if servesHere(c.members[id].broker, name) {
			t.Fatalf("%s serves %s with one seal of the two a recovery needs", id, name)
		}
		health := c.members[id].broker.Health()
		if health.OK || len(health.Unowned) != 1 || health.Unowned[0].Name != name {
			t.Fatalf("%s's health while %s has no owner: %+v", id, name, health)
		}
	}
	disks[sick].ClearFaults()
	if err := c.members[sick].broker.ReopenQueue(name); err != nil {
		t.Fatalf("reopen %s's copy: %v", sick, err)
	}
	serving := c.servingOwner(name)
	drainPayloads(t, ctx, c.dialSDKHome(serving, "consumer"), name, confirmed)
	for _, id := range c.live() {
		waitUntil(t, id+" is healthy again", func() bool { return c.members[id].broker.Health().OK })
	}
}

// restartFollowersFromHeldImages waits until each follower's write is held
// at its gate, takes the followers' power-loss images there (everything
// written before the held write, synced or not), stops every node,
// restarts the followers on those images and returns the node that then
// serves name, which must not be the old owner.
func (c *brokerCluster) restartFollowersFromHeldImages(name, owner string, followers []string, disks map[string]*vfs.Mem,
	gates map[string]*gateFS) string {
	c.t.Helper()
	for _, id := range followers {
		waitUntil(c.t, id+"'s write is held", func() bool { return gates[id].held() > 0 })
	}
	images := map[string]*vfs.Mem{}
	for _, id := range followers {
		images[id] = disks[id].CrashClone(vfs.CrashOptions{KeepUnsynced: true})
		gates[id].release()
	}
	for _, id := range c.order {
		c.stop(id)
	}
	for _, id := range followers {
		c.fs[id] = images[id]
		c.restart(id)
	}
	serving := c.servingOwner(name)
	if serving == owner {
		c.t.Fatalf("the old owner serves")
	}
	return serving
}

// gatedMemCluster is memCluster with a gate (gatefs_test.go) on every
// node's filesystem, all opened again when the test ends.
func gatedMemCluster(t *testing.T) (*brokerCluster, map[string]*vfs.Mem, map[string]*gateFS) {
	t.Helper()
	gates := map[string]*gateFS{}
	c, disks := memCluster(t, func(id string, mem *vfs.Mem) vfs.FS {
		gates[id] = newGateFS(mem)
		return gates[id]
	})
	t.Cleanup(func() {
		for _, gate := range gates {
			gate.release()
		}
	})
	return c, disks, gates
}

// memCluster starts three brokers on in-memory filesystems (each node's
// Raft state stays on the OS disk), with background sync off unless a
// test syncs, so what a power loss keeps is exactly what was synced.
func memCluster(t *testing.T, wrap func(id string, mem *vfs.Mem) vfs.FS) (*brokerCluster, map[string]*vfs.Mem) {
	t.Helper()
	disks := map[string]*vfs.Mem{}
	options := []brokerClusterOption{withBrokerConfig(func(_ string, config *Config) { config.SyncInterval = time.Hour })}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		disks[id] = vfs.NewMem()
		var fs vfs.FS = disks[id]
		if wrap != nil {
			fs = wrap(id, disks[id])
		}
		options = append(options, withBrokerFS(id, fs))
	}
	return startBrokerCluster(t, 3, options...), disks
}

// The owner of a buffered queue loses power: its log restarts shorter
// than its followers' (nothing was synced), under a new process instance.
// It does not serve again as it was: a recovery chooses the longer
// history the followers hold, every confirmed message is delivered, and
// the restarted node catches up as a follower.
func TestFailoverOwnerPowerLossWithAShorterLog(t *testing.T) {
	c, disks := memCluster(t, nil)
	ctx := testContext(t)
	name := "power"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:2"})
	confirmed := confirmedPayloads(t, ctx, c.dialSDKHome(followers[0], "publisher"), name, "m", 200)
	image := disks[owner].CrashClone(vfs.CrashOptions{})
	c.stop(owner)
	c.fs[owner] = image
	c.restart(owner)
	serving := c.servingOwner(name)
	if serving == owner {
		t.Fatalf("%s serves %s again from the log its power loss left", owner, name)
	}
	drainPayloads(t, ctx, c.dialSDKHome(serving, "consumer"), name, confirmed)
	waitUntil(t, owner+" catches up", func() bool {
		info := c.copyAt(serving, name)
		replica, ok := replicaOf(info, owner)
		return ok && replica.State == "in sync" && c.copyAt(owner, name).WrittenNext == info.WrittenNext
	})
}

// The owner holds a record nobody else has (its followers' disks held the
// write, and then lost power with it): the followers recover without it
// under a new epoch, and when the old owner comes back its divergent
// suffix is cut. The record was never confirmed and is never delivered;
// everything confirmed is.
func TestFailoverCutsTheOldOwnersDivergentSuffix(t *testing.T) {
	c, disks, gates := gatedMemCluster(t)
	ctx := testContext(t)
	name := "divergent"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:2"})
	sdk := c.dialSDKHome(owner, "publisher")
	confirmed := confirmedPayloads(t, ctx, sdk, name, "m", 100)
	written := c.copyAt(owner, name).WrittenNext
	for _, id := range followers {
		gates[id].hold(gateWrites)
	}
	if _, err := sdk.PublishAsync(ctx, name, client.Message{Payload: []byte("only on the owner")}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the owner wrote the record", func() bool { return c.copyAt(owner, name).WrittenNext > written })
	serving := c.restartFollowersFromHeldImages(name, owner, followers, disks, gates)
	c.restart(owner) // on its own disk, with the record
	waitUntil(t, owner+" cuts its suffix and rejoins", func() bool {
		info := c.copyAt(serving, name)
		replica, ok := replicaOf(info, owner)
		return ok && replica.State == "in sync" && c.copyAt(owner, name).WrittenNext == info.WrittenNext
	})
	consumer := c.dialSDKHome(serving, "consumer")
	drainPayloads(t, ctx, consumer, name, confirmed)
	subscription, err := consumer.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case delivery := <-subscription.Deliveries():
		t.Fatalf("delivered %q, which no copy the recovery chose held", delivery.Payload)
	case <-time.After(200 * time.Millisecond):
	}
}

// A replica that was away catches up from the owner's files; the owner
// dies while it does. The new owner's history is the one it must follow:
// it drops the catch-up from the dead owner (whose pages will never come)
// and takes the new owner's, so the recovery can install W copies and
// serve. Before, its pushes were refused as "catching up" for ever.
func TestFailoverWhileAReplicaCatchesUpFromTheDeadOwner(t *testing.T) {
	c, _, gates := gatedMemCluster(t)
	ctx := testContext(t)
	name := "catching-up"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	away, survivor := followers[0], followers[1]
	c.stop(away)
	// More than one page (fetchPageRecords) behind, so the catch-up needs
	// another page after the first.
	confirmed := confirmedPayloads(t, ctx, c.dialSDKHome(owner, "publisher"), name, "m", fetchPageRecords+500)
	gates[away].hold(gateWrites)
	c.restart(away)
	waitUntil(t, away+" appends its first fetched page", func() bool { return gates[away].held() > 0 })
	c.stop(owner)
	gates[away].release()
	serving := c.servingOwner(name)
	if serving != survivor && serving != away {
		t.Fatalf("%s serves %s", serving, name)
	}
	drainPayloads(t, ctx, c.dialSDKHome(serving, "consumer"), name, confirmed)
}
