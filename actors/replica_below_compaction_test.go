package actors

// A follower that holds records, stops for longer than the retention hold
// and comes back below its owner's first retained offset catches up from
// the owner's snapshot. The owner answers its fetch with an empty page
// that says it compacted what the follower lacks, and names no epoch for
// the record before it (it keeps none below its first offset); checked as
// a divergence, that page stopped the fetch before the snapshot was asked
// for, and the follower stayed behind for good. Only a follower with an
// empty log (TestSnapshotWipedFollowerOfACompactedQueueCatchesUp) had
// nothing to check. Found by the cluster fault suite's class 16
// (docs/durability.md, "Found by the cluster suite").

import (
	"fmt"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
)

func TestFollowerBelowItsOwnersCompactionCatchesUpFromTheSnapshot(t *testing.T) {
	options := []brokerClusterOption{withBrokerConfig(func(_ string, config *Config) {
		config.SyncInterval = time.Hour
		config.SegmentBytes, config.CheckpointEveryRecords = 64<<10, 100
		config.FollowerRetentionHold = 100 * time.Millisecond
	})}
	for i := 1; i <= 3; i++ {
		options = append(options, withBrokerFS(fmt.Sprintf("node%d", i), vfs.NewMem()))
	}
	c := startBrokerCluster(t, 3, options...)
	ctx := testContext(t)
	name := "behind"
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"})
	behind := followers[0]
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, name, 50, 1024)
	c.waitInSync(owner, behind, name)
	held := c.copyAt(behind, name).WrittenNext
	if held == 0 {
		t.Fatalf("%s holds nothing before it stops", behind)
	}
	c.stop(behind)
	consumeAndAck(t, ctx, sdk, name, 50)
	for round := 0; c.firstRetained(owner, name) <= held; round++ {
		if round == 20 {
			t.Fatalf("%s keeps its log from %d, at or below the %d its stopped follower holds", owner,
				c.firstRetained(owner, name), held)
		}
		publishMany(t, ctx, sdk, name, 100, 1024)
		consumeAndAck(t, ctx, sdk, name, 100)
		time.Sleep(200 * time.Millisecond) // the checkpoint's task runs off the partition's mailbox
	}
	c.restart(behind)
	c.waitInSync(owner, behind, name)
	if installed := metricValue(c.members[behind].broker, snapshotSeries("installed", name)); installed != 1 {
		t.Fatalf("%s installed %v snapshots, want 1", behind, installed)
	}
	waitUntil(t, behind+" applies the owner's state", func() bool {
		return c.copyAt(behind, name).Ready == c.copyAt(owner, name).Ready
	})
}
