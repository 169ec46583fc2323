package actors

// Snapshot catch-up (partition_snapshot.go): a follower whose queue disk
// came back empty after its owner compacted past offset 0 catches up from
// the owner's snapshot, on three in-process brokers on in-memory disks
// (cluster_test.go, failover_test.go); and a snapshot that does not verify
// changes nothing on the follower, which asks again until one does. Before
// the catch-up existed, such a follower's fetch stopped at the owner's first
// retained offset for good, and a queue that needs every copy (W = E)
// refused every publish from then on.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// compactingCluster is memCluster with small segments and a checkpoint
// every 100 records, so an owner compacts after a few hundred settled
// messages.
func compactingCluster(t *testing.T) (*brokerCluster, map[string]*vfs.Mem) {
	t.Helper()
	disks := map[string]*vfs.Mem{}
	options := []brokerClusterOption{withBrokerConfig(func(_ string, config *Config) {
		config.SyncInterval = time.Hour
		config.SegmentBytes, config.CheckpointEveryRecords = 64<<10, 100
	})}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		disks[id] = vfs.NewMem()
		options = append(options, withBrokerFS(id, disks[id]))
	}
	return startBrokerCluster(t, 3, options...), disks
}

// queueFiles lists the files of a node's copy of a queue, in its
// directory or the subdirectory under (its log's: "log").
func (c *brokerCluster) queueFiles(id, name, under string) (string, []string) {
	c.t.Helper()
	dir := path.Join(mustPartitionDir(c.t, c.members[id].config.DataDir, name), under)
	names, err := c.fs[id].ReadDir(dir)
	if err != nil {
		return dir, nil // not created yet
	}
	return dir, names
}

// firstRetained is the base of the oldest segment of a node's copy of a
// queue (0 when it has none).
func (c *brokerCluster) firstRetained(id, name string) uint64 {
	c.t.Helper()
	_, names := c.queueFiles(id, name, "log")
	first, found := uint64(0), false
	for _, file := range names {
		var base uint64
		if _, err := fmt.Sscanf(file, "%020d.log", &base); err == nil && strings.HasSuffix(file, ".log") &&
			(!found || base < first) {
			first, found = base, true
		}
	}
	return first
}

// snapshotFiles reads every snapshot file of a node's copy of a queue.
func (c *brokerCluster) snapshotFiles(id, name string) map[string][]byte {
	c.t.Helper()
	dir, names := c.queueFiles(id, name, "")
	files := map[string][]byte{}
	for _, file := range names {
		if !strings.HasPrefix(file, "snapshot-") || !strings.HasSuffix(file, ".snap") {
			continue
		}
		f, err := c.fs[id].Open(path.Join(dir, file))
		if err != nil {
			c.t.Fatal(err)
		}
		data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
		f.Close()
		if err != nil {
			c.t.Fatal(err)
		}
		files[file] = data
	}
	return files
}

// writeQueueFile replaces a file of a node's copy of a queue, durably.
func (c *brokerCluster) writeQueueFile(id, name, file string, data []byte) {
	c.t.Helper()
	dir, _ := c.queueFiles(id, name, "")
	f, err := c.fs[id].Create(path.Join(dir, file))
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		c.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		c.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		c.t.Fatal(err)
	}
}

// compactedQueue declares a queue that needs every copy (W = E), has its
// owner compact past offset 0 (600 publishes, all acked, then publishes of
// 100 until a checkpoint after the acks lets the owner compact: it tries
// once a checkpoint is published, against the retention floor its links
// last reported), and returns the owner, its followers, a client of the
// owner and how many messages are ready.
func compactedQueue(t *testing.T, c *brokerCluster, name string) (string, []string, *client.Client, uint64) {
	t.Helper()
	ctx := testContext(t)
	owner, followers := c.declareServed(name, client.QueueConfig{Mode: client.ModeDurable, Policy: "replica_durable:3"})
	for _, follower := range followers {
		c.waitInSync(owner, follower, name) // W = E admits a publish only once every link pushes
	}
	sdk := c.dialSDK(owner)
	publishMany(t, ctx, sdk, name, 600, 1024)
	consumeAndAck(t, ctx, sdk, name, 600)
	ready := uint64(0)
	for c.firstRetained(owner, name) == 0 {
		if ready >= 1000 {
			t.Fatalf("%s did not compact past offset 0 after %d more publishes", owner, ready)
		}
		publishMany(t, ctx, sdk, name, 100, 1024)
		ready += 100
		time.Sleep(200 * time.Millisecond) // the checkpoint's task runs off the partition's mailbox
	}
	return owner, followers, sdk, ready
}

// wipeQueueDisk restarts a node with an empty queue disk (its Raft state
// intact), as after losing the volume that held its queues.
func (c *brokerCluster) wipeQueueDisk(id string) {
	c.stop(id)
	c.fs[id] = vfs.NewMem()
	c.restart(id)
}

// waitInSync waits until the owner reports the follower in sync and the
// follower's copy holds, durably, every record the owner has written. It
// compares with the owner's written end, not its durable end: an owner
// with a long sync interval may leave its last record (a settle, say)
// unsynced on its own disk for as long as nothing asks for it, while the
// follower syncs every push of a durable queue.
func (c *brokerCluster) waitInSync(owner, follower, name string) {
	c.t.Helper()
	waitUntil(c.t, follower+" catches up in sync with "+owner, func() bool {
		info := c.copyAt(owner, name)
		replica, ok := replicaOf(info, follower)
		return ok && replica.State == "in sync" && replica.DurableNext == info.WrittenNext &&
			c.copyAt(follower, name).DurableNext == info.WrittenNext
	})
}

func snapshotSeries(kind, name string) string {
	return fmt.Sprintf(`fibril_replication_snapshots_%s_total{queue=%q}`, kind, name)
}

// A follower restarted with an empty queue disk after its owner compacted
// past offset 0 installs the owner's snapshot, fetches from the owner's
// first retained offset, reaches the owner's durable end in sync, holds
// the owner's queue state, and the W = E queue confirms again.
func TestSnapshotWipedFollowerOfACompactedQueueCatchesUp(t *testing.T) {
	c, _ := compactingCluster(t)
	ctx := testContext(t)
	name := "compacted"
	owner, followers, sdk, ready := compactedQueue(t, c, name)
	wiped := followers[0]
	c.wipeQueueDisk(wiped)
	c.waitInSync(owner, wiped, name)
	if installed := metricValue(c.members[wiped].broker, snapshotSeries("installed", name)); installed != 1 {
		t.Fatalf("%s installed %v snapshots, want 1", wiped, installed)
	}
	if first, ownerFirst := c.firstRetained(wiped, name), c.firstRetained(owner, name); first == 0 || first > ownerFirst {
		t.Fatalf("%s's log starts at %d; the owner's at %d", wiped, first, ownerFirst)
	}
	waitUntil(t, wiped+" applies the owner's state", func() bool {
		return c.copyAt(wiped, name).Ready == c.copyAt(owner, name).Ready
	})
	if held := c.copyAt(wiped, name).Ready; held != ready {
		t.Fatalf("%s holds %d ready messages, want %d", wiped, held, ready)
	}
	publishCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sdk.Publish(publishCtx, name, client.Message{Payload: []byte("after the catch-up")}); err != nil {
		t.Fatalf("a publish on every copy after the catch-up: %v", err)
	}
	if info := c.copyAt(owner, name); info.DurableOn != 3 {
		t.Fatalf("after the catch-up the confirm stands on %d copies, want 3", info.DurableOn)
	}
	c.waitInSync(owner, wiped, name)
}

// A copy whose log starts past offset 0 reopens without a snapshot (as
// after a restart between its rebase and the install): it holds its
// applies, asks the owner for the snapshot at its next append, installs
// it without another rebase (it fits the log), and holds the owner's
// state again.
func TestSnapshotACopyReopenedWithoutItsSnapshotAsksForItAgain(t *testing.T) {
	c, _ := compactingCluster(t)
	ctx := testContext(t)
	name := "reopened"
	owner, followers, sdk, _ := compactedQueue(t, c, name)
	copyOf := followers[0]
	c.waitInSync(owner, copyOf, name)
	// A replica applies, checkpoints and compacts only below the committed
	// frontier its owner reports, which the next push or keepalive brings.
	waitUntil(t, copyOf+" compacts past offset 0", func() bool { return c.firstRetained(copyOf, name) > 0 })
	first := c.firstRetained(copyOf, name)
	c.stop(copyOf)
	dir, _ := c.queueFiles(copyOf, name, "")
	for file := range c.snapshotFiles(copyOf, name) {
		if err := c.fs[copyOf].Remove(path.Join(dir, file)); err != nil {
			t.Fatal(err)
		}
	}
	c.restart(copyOf)
	c.waitInSync(owner, copyOf, name) // its log is whole: the owner pushes to it at once
	publishMany(t, ctx, sdk, name, 1, 64)
	waitUntil(t, copyOf+" installs the owner's snapshot again", func() bool {
		return metricValue(c.members[copyOf].broker, snapshotSeries("installed", name)) == 1
	})
	if again := c.firstRetained(copyOf, name); again < first {
		t.Fatalf("%s's log starts at %d after the install, before it started at %d", copyOf, again, first)
	}
	waitUntil(t, copyOf+" holds the owner's state", func() bool {
		return c.copyAt(copyOf, name).Ready == c.copyAt(owner, name).Ready
	})
	c.waitInSync(owner, copyOf, name)
}

// The owner's snapshot is damaged on its disk: the wiped follower refuses
// it (its checksum fails), changes nothing, and asks again; once the
// owner's file is whole again the follower installs it and catches up.
func TestSnapshotACorruptedSnapshotIsRefusedAndAskedForAgain(t *testing.T) {
	c, _ := compactingCluster(t)
	name := "corrupted"
	owner, followers, _, _ := compactedQueue(t, c, name)
	wiped := followers[0]
	originals := c.snapshotFiles(owner, name)
	if len(originals) == 0 {
		t.Fatalf("%s compacted without a snapshot file", owner)
	}
	for file, data := range originals {
		damaged := bytes.Clone(data)
		damaged[len(damaged)/2] ^= 0xff
		c.writeQueueFile(owner, name, file, damaged)
	}
	c.wipeQueueDisk(wiped)
	waitUntil(t, wiped+" refuses the damaged snapshot twice", func() bool {
		return metricValue(c.members[wiped].broker, snapshotSeries("refused", name)) >= 2
	})
	if installed := metricValue(c.members[wiped].broker, snapshotSeries("installed", name)); installed > 0 {
		t.Fatalf("%s installed %v snapshots from a damaged file", wiped, installed)
	}
	if info := c.copyAt(wiped, name); info.DurableNext != 0 || len(c.snapshotFiles(wiped, name)) != 0 {
		t.Fatalf("%s changed its copy for a damaged snapshot: durable to %d, %d snapshot files", wiped,
			info.DurableNext, len(c.snapshotFiles(wiped, name)))
	}
	if replica, ok := replicaOf(c.copyAt(owner, name), wiped); !ok || replica.State == "in sync" {
		t.Fatalf("the owner shows %s as %q with a damaged snapshot", wiped, replica.State)
	}
	for file, data := range originals {
		c.writeQueueFile(owner, name, file, data)
	}
	c.waitInSync(owner, wiped, name)
	if installed := metricValue(c.members[wiped].broker, snapshotSeries("installed", name)); installed != 1 {
		t.Fatalf("%s installed %v snapshots once the file was whole, want 1", wiped, installed)
	}
}

// checkSnapshot refuses a snapshot that does not decode or does not fit
// the source's log, before anything is changed for it.
func TestSnapshotCheckRefusesWhatDoesNotVerify(t *testing.T) {
	options := queue.Options{}.WithDefaults()
	state := queue.NewState(options, 0)
	for offset := range uint64(10) {
		state.Apply(offset, &queue.Record{Kind: queue.KindPublish, PayloadBytes: 8}, nil)
	}
	settled := []uint64{0, 1, 2, 3}
	state.Apply(10, &queue.Record{Kind: queue.KindLease, Offsets: settled, Holder: 1, DeadlineMs: 1}, nil)
	state.Apply(11, &queue.Record{Kind: queue.KindAck, Offsets: settled}, nil)
	state.Apply(12, &queue.Record{Kind: queue.KindCheckpoint, CheckpointID: 7}, nil)
	encoded := state.EncodeSnapshot() // covers 13; message 4 is the first live one
	damaged := bytes.Clone(encoded)
	damaged[len(damaged)/2] ^= 0xff
	for _, c := range []struct {
		name  string
		frame wire.Snapshot
		fails string
	}{
		{"whole", wire.Snapshot{Partition: 5, FirstOffset: 4, Snapshot: encoded}, ""},
		{"a damaged byte", wire.Snapshot{Partition: 5, FirstOffset: 4, Snapshot: damaged}, "does not decode"},
		{"truncated", wire.Snapshot{Partition: 5, FirstOffset: 4, Snapshot: encoded[:len(encoded)-1]}, "does not decode"},
		{"another partition", wire.Snapshot{Partition: 6, FirstOffset: 4, Snapshot: encoded}, "partition 6"},
		{"a live message below the source's first offset", wire.Snapshot{Partition: 5, FirstOffset: 5, Snapshot: encoded},
			"live in the snapshot"},
		{"older than the source's first offset", wire.Snapshot{Partition: 5, FirstOffset: 13, Snapshot: encoded},
			"none of those"},
	} {
		covers, firstLive, err := checkSnapshot(&c.frame, 5, options)
		switch {
		case c.fails == "" && (err != nil || covers != 13 || firstLive != 4):
			t.Errorf("%s: covers %d, first live %d, %v; want 13, 4", c.name, covers, firstLive, err)
		case c.fails != "" && (err == nil || !strings.Contains(err.Error(), c.fails)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.fails)
		}
	}
}
