package actors

// Mode changes on three in-process brokers (cluster_test.go has the
// harness): buffered to durable under load with one follower's fsyncs
// held (the change stays pending with its reason, nothing admitted after
// it is confirmed or delivered, and it applies once the follower's disk
// answers), each copy's applied revision in the owner's info, and an
// owner stopped while a change is pending.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

func replicaMode(info wire.QueueInfo, node string) (wire.Mode, uint64) {
	replica, ok := replicaOf(info, node)
	if !ok {
		return wire.ModeUnset, 0
	}
	return replica.AppliedMode, replica.ModeRevision
}

func TestModeChangeOnThreeNodesWaitsForEveryRequiredCopy(t *testing.T) {
	c, gates := gatedCluster(t)
	ctx := testContext(t)
	const name = "switching"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:3"})
	held, other := followers[0], followers[1]
	sdk := c.dialSDK(owner)
	consumer, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 100})
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan *client.Delivery, 1<<16)
	go func() {
		for delivery := range consumer.Deliveries() {
			deliveries <- delivery
		}
	}()
	publishMany(t, ctx, sdk, name, 50, 100)
	load := startModeLoad(t, sdk, name)

	// One follower's fsyncs held: its writes go on, so buffered confirms
	// go on, but the revision cannot be durable on the three copies.
	gates[held].hold(gateSyncs)
	short, cancel := context.WithTimeout(ctx, time.Second)
	pending, err := sdk.ChangeMode(short, name, client.ModeDurable)
	cancel()
	if err != nil || pending.Outcome != wire.ModePending || pending.Revision != 1 || pending.Applied != client.ModeBuffered {
		t.Fatalf("change with %s's fsyncs held: %+v, %v", held, pending, err)
	}
	if !strings.Contains(pending.Message, "of the 3 copies") {
		t.Fatalf("the pending reason does not say what it waits for: %q", pending.Message)
	}
	after := publishFutures(t, ctx, sdk, name, "after", 20)
	expectHeld(t, "publish after the change request", after, deliveries, "after")
	info := c.copyAt(owner, name)
	if info.Mode != wire.ModeBuffered || info.DesiredMode != wire.ModeDurable || info.ModeChange == nil ||
		info.ModeChange.State != "pending" || info.ModeChange.Revision != 1 {
		t.Fatalf("owner's info while pending: mode %v desired %v change %+v", info.Mode, info.DesiredMode, info.ModeChange)
	}
	waitUntil(t, other+" applied the revision, "+held+" not", func() bool {
		info := c.copyAt(owner, name)
		otherMode, otherRevision := replicaMode(info, other)
		heldMode, heldRevision := replicaMode(info, held)
		return otherMode == wire.ModeDurable && otherRevision == 1 && heldMode == wire.ModeBuffered && heldRevision == 0
	})

	// The follower's disk answers: the same request again (idempotent by
	// revision) now reports the switch.
	gates[held].release()
	applied, err := sdk.ChangeMode(ctx, name, client.ModeDurable)
	if err != nil || applied.Outcome != wire.ModeApplied && applied.Outcome != wire.ModeUnchanged || applied.Revision != 1 {
		t.Fatalf("the change once %s's fsyncs answer: %+v, %v", held, applied, err)
	}
	load.switched()
	waitConfirms(t, ctx, "publish after the change request", after, wire.BoundaryDurable)
	drainDeliveries(t, ctx, deliveries, "after", 20)

	// Durable on three copies now: a follower's held fsyncs hold confirms.
	gates[other].hold(gateSyncs)
	stalled := publishFutures(t, ctx, sdk, name, "stalled", 10)
	expectHeld(t, "publish under the applied durable mode", stalled, deliveries, "stalled")
	gates[other].release()
	waitConfirms(t, ctx, "durable publish", stalled, wire.BoundaryDurable)
	load.finish()
	for _, id := range c.order {
		waitUntil(t, id+" runs revision 1", func() bool {
			copy := c.copyAt(id, name)
			return copy.Mode == wire.ModeDurable && copy.ModeRevision == 1
		})
	}
	// The catalog follows: every node's copy of it names the applied mode
	// and its revision, and a declare naming the old mode is refused.
	for _, id := range c.order {
		waitUntil(t, id+"'s catalog names revision 1", func() bool {
			declared, err := c.members[id].node.LookupLocal(name)
			return err == nil && declared.ModeInForce() == cluster.ModeDurable && declared.ModeRevision == 1
		})
	}
	if _, err := c.dialSDK(c.order[0]).Declare(ctx, name, client.QueueConfig{Mode: client.ModeBuffered}); serverErrorCode(err) != wire.CodeModeConflict {
		t.Fatalf("a declare naming the old mode after the switch: %v; want mode_conflict", err)
	}
}

// An owner stopped while a change to durable is pending (both followers'
// fsyncs held, so the revision is written on them and durable nowhere but
// the owner): the client's wait ends with an error, not a switch; the new
// owner either holds the revision in the history it recovers, and then
// runs it, or does not, and then runs the applied mode; every copy agrees,
// and asking again gives a definite answer.
func TestModeChangeOwnerStoppedWhilePending(t *testing.T) {
	c, gates := gatedCluster(t)
	ctx := testContext(t)
	const name = "failing-over"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:2"})
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, name, 50, 100)
	for _, id := range followers {
		gates[id].hold(gateSyncs)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	pending, err := sdk.ChangeMode(short, name, client.ModeDurable)
	cancel()
	if err != nil || pending.Outcome != wire.ModePending {
		t.Fatalf("change with the followers' fsyncs held: %+v, %v", pending, err)
	}
	waitUntil(t, "the followers hold the revision written", func() bool {
		for _, id := range followers {
			if c.copyAt(id, name).WrittenNext <= c.copyAt(owner, name).ModeChange.Offset {
				return false
			}
		}
		return true
	})
	waiting := make(chan error, 1)
	go func() {
		_, err := sdk.ChangeMode(ctx, name, client.ModeDurable)
		waiting <- err
	}()
	time.Sleep(50 * time.Millisecond) // the request reaches the owner and waits there
	c.stop(owner)
	for _, id := range followers {
		gates[id].release()
	}
	if err := <-waiting; err == nil {
		t.Fatal("a change whose owner stopped before it applied was reported done")
	}
	newOwner := c.servingOwner(name)
	info := c.copyAt(newOwner, name)
	switch {
	case info.Mode == wire.ModeDurable && info.ModeRevision == 1 && info.ModeChange == nil:
		t.Logf("%s recovered the revision and runs it (completed)", newOwner)
	case info.Mode == wire.ModeBuffered && info.ModeRevision == 0:
		t.Logf("%s recovered a history without the revision (abandoned)", newOwner)
	default:
		t.Fatalf("new owner %s: mode %v revision %d change %+v", newOwner, info.Mode, info.ModeRevision, info.ModeChange)
	}
	retry := c.dialSDK(newOwner)
	again, err := retry.ChangeMode(ctx, name, client.ModeDurable)
	if err != nil || again.Applied != client.ModeDurable || again.Outcome == wire.ModePending {
		t.Fatalf("asking the new owner again: %+v, %v", again, err)
	}
	for _, id := range c.live() {
		waitUntil(t, id+" runs the durable revision", func() bool {
			copy := c.copyAt(id, name)
			return copy.Mode == wire.ModeDurable && copy.ModeRevision == again.Revision
		})
	}
	future, err := retry.PublishAsync(ctx, name, client.Message{Payload: []byte("after failover")})
	if err != nil {
		t.Fatal(err)
	}
	if confirm, err := future.Wait(ctx); err != nil || confirm.Boundary != wire.BoundaryDurable {
		t.Fatalf("publish on the new owner: %v, %v", confirm.Boundary, err)
	}
}

// A follower stopped while a switch to durable needs all three copies:
// the change stays pending with its reason (it is never applied on fewer
// copies), and applies once the follower is back and caught up.
func TestModeChangeWaitsForAStoppedFollower(t *testing.T) {
	c := startBrokerCluster(t, 3)
	ctx := testContext(t)
	const name = "waiting"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:3"})
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, name, 20, 100)
	stopped := followers[0]
	c.stop(stopped)
	short, cancel := context.WithTimeout(ctx, time.Second)
	pending, err := sdk.ChangeMode(short, name, client.ModeDurable)
	cancel()
	if err != nil || pending.Outcome != wire.ModePending || pending.Revision != 1 {
		t.Fatalf("change with %s stopped: %+v, %v", stopped, pending, err)
	}
	if !strings.Contains(pending.Message, "of the 3 copies") {
		t.Fatalf("the pending reason does not say what it waits for: %q", pending.Message)
	}
	time.Sleep(200 * time.Millisecond)
	if info := c.copyAt(owner, name); info.Mode != wire.ModeBuffered || info.ModeChange == nil || info.ModeChange.State != "pending" {
		t.Fatalf("with %s stopped: mode %v change %+v", stopped, info.Mode, info.ModeChange)
	}
	c.restart(stopped)
	applied, err := sdk.ChangeMode(ctx, name, client.ModeDurable)
	if err != nil || applied.Revision != 1 || applied.Outcome == wire.ModePending {
		t.Fatalf("the change once %s is back: %+v, %v", stopped, applied, err)
	}
	waitUntil(t, stopped+" applied revision 1", func() bool {
		copy := c.copyAt(stopped, name)
		return copy.Mode == wire.ModeDurable && copy.ModeRevision == 1
	})
}

// The abandoned branch, made deterministic: the revision reaches only the
// owner (the followers' writes are held, and then they lose power with the
// write held), every node stops, and the followers recover without it.
// The new owner runs the mode that was applied (buffered, revision 0),
// says nothing is pending, and the old owner, back on its own disk with
// the revision, has its suffix cut: every copy agrees. Asking again
// records the change anew and it applies.
func TestModeChangeAbandonedWhenTheRecoveredHistoryLacksIt(t *testing.T) {
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
	ctx := testContext(t)
	const name = "abandoned"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:2"})
	sdk := c.dialSDKHome(owner, "changer")
	confirmed := confirmedPayloads(t, ctx, sdk, name, "m", 50)
	for _, id := range followers {
		gates[id].hold(gateWrites)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	pending, err := sdk.ChangeMode(short, name, client.ModeDurable)
	cancel()
	if err != nil || pending.Outcome != wire.ModePending || pending.Revision != 1 {
		t.Fatalf("change with the followers' writes held: %+v, %v", pending, err)
	}
	serving := c.restartFollowersFromHeldImages(name, owner, followers, disks, gates)
	if info := c.copyAt(serving, name); info.Mode != wire.ModeBuffered || info.ModeRevision != 0 || info.ModeChange != nil {
		t.Fatalf("new owner %s: mode %v revision %d change %+v, want the applied buffered mode and nothing pending",
			serving, info.Mode, info.ModeRevision, info.ModeChange)
	}
	c.restart(owner)
	waitUntil(t, owner+" cuts the revision and rejoins", func() bool {
		info := c.copyAt(serving, name)
		replica, ok := replicaOf(info, owner)
		return ok && replica.State == "in sync" && c.copyAt(owner, name).WrittenNext == info.WrittenNext
	})
	if copy := c.copyAt(owner, name); copy.Mode != wire.ModeBuffered || copy.ModeRevision != 0 {
		t.Fatalf("the old owner after rejoining: mode %v revision %d", copy.Mode, copy.ModeRevision)
	}
	retry := c.dialSDKHome(serving, "retry")
	again, err := retry.ChangeMode(ctx, name, client.ModeDurable)
	if err != nil || again.Outcome != wire.ModeApplied || again.Revision != 1 {
		t.Fatalf("asking the new owner again: %+v, %v", again, err)
	}
	drainPayloads(t, ctx, retry, name, confirmed)
}
