package actors

// A fenced owner hands its partition on (partition_handover.go), on three
// in-process brokers over loopback, each on an in-memory disk that can
// fail its fsyncs.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// handoverServeBound is how soon after its disk failed the owner must
// have been replaced. Detection is the replicas' silence rule
// (ownerSilenceMax) plus a recovery; the bound leaves room for a loaded
// machine under -race.
const handoverServeBound = 10 * time.Second

// The owner's queue disk fails (every fsync of its logs fails from then
// on) while its process stays up, under a publisher: the owner fences,
// steps down and hands the partition on, another copy serves within a few
// seconds, new publishes confirm there, every confirmed message is
// delivered, and the fenced copy neither serves nor leads. Before the
// handover the fenced owner kept its follower links and their keepalives
// made the replicas give it the leadership back, so the queue answered
// fenced until an operator reopened it.
func TestFailoverOwnerDiskFailsWithItsProcessAlive(t *testing.T) {
	disks := map[string]*vfs.Mem{}
	var options []brokerClusterOption
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		disks[id] = vfs.NewMem()
		options = append(options, withBrokerFS(id, disks[id]))
	}
	c := startBrokerCluster(t, 3, options...)
	ctx := testContext(t)
	name := "disk-fails"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	publisher := c.dialSDKHome(followers[0], "publisher")
	confirmed := confirmedPayloads(t, ctx, publisher, name, "before", 100)

	record := &loadRecord{confirmed: map[string]time.Time{}, failed: map[wire.Code]int{}, lastError: map[wire.Code]string{}}
	stop := make(chan struct{})
	var publishing sync.WaitGroup
	publishing.Add(1)
	go func() {
		defer publishing.Done()
		publishUntil(ctx, publisher, name, stop, record)
	}()
	stopPublishing := sync.OnceFunc(func() { close(stop); publishing.Wait() })
	t.Cleanup(stopPublishing)
	waitUntil(t, "confirms under load", func() bool { return record.confirmedSince(time.Time{}) >= 20 })

	failed := time.Now()
	disks[owner].InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	t.Cleanup(disks[owner].ClearFaults) // before the brokers close (cleanups run last first)
	waitUntil(t, owner+"'s copy fences", func() bool { return c.copyAt(owner, name).Fenced })
	fenced := time.Now()
	next := ""
	waitUntil(t, "another node serves "+name, func() bool {
		for _, id := range followers {
			if servesHere(c.members[id].broker, name) {
				next = id
				return true
			}
		}
		return false
	})
	took := time.Since(failed)
	waitUntil(t, "100 confirms after the disk failed", func() bool { return record.confirmedSince(failed) >= 100 })
	stopPublishing()
	t.Logf("%s's disk failed; it fenced %v later; %s serves %v after the failure; first confirm %v after the fence; "+
		"failures by code %v", owner, fenced.Sub(failed), next, took, record.firstConfirmAfter(fenced).Sub(fenced), record.failed)
	if took > handoverServeBound {
		t.Fatalf("%s served %v after %s's disk failed; want within %v", next, took, owner, handoverServeBound)
	}
	if c.members[owner].broker == nil || servesHere(c.members[owner].broker, name) {
		t.Fatalf("the fenced owner %s is gone or serves %s beside %s", owner, name, next)
	}
	if info := c.copyAt(owner, name); !info.Fenced {
		t.Fatalf("%s's copy is no longer fenced: %+v", owner, info)
	}
	if view, ok := c.members[owner].node.Partition(c.shardOf(name)); ok && view.SelfLeads {
		waitUntil(t, "the fenced "+owner+" hands the leadership on", func() bool {
			view, _ := c.members[owner].node.Partition(c.shardOf(name))
			return !view.SelfLeads
		})
	}

	record.mu.Lock()
	for payload := range record.confirmed {
		confirmed = append(confirmed, payload)
	}
	record.mu.Unlock()
	drainPayloads(t, ctx, c.dialSDKHome(next, "consumer"), name, confirmed)
}

// shardOf is the coordination shard of a queue's partition, from node1's
// catalog.
func (c *brokerCluster) shardOf(name string) uint64 {
	c.t.Helper()
	info, err := c.members[c.live()[0]].node.LookupLocal(name)
	if err != nil || len(info.Partitions) == 0 {
		c.t.Fatalf("look up %s: %+v, %v", name, info, err)
	}
	return info.Partitions[0].ShardID
}
