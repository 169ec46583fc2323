package acceptance

// The classes that need a crash-simulating filesystem, on in-process
// clusters (cluster_memory_test.go): power loss of one node (6), of every
// node at once (7), and on-disk corruption of a minority (8). Each trial
// starts three members, places the test queues on a member that is not the
// catalog leader, runs the traffic of cluster_load_test.go, injects its
// faults with calm gaps, drains and checks, like the process trials.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// memTrial is one trial on an in-process cluster.
type memTrial struct {
	t      *testing.T
	random *rand.Rand
	class  string
	mc     *memCluster
	h      *History
	load   *clusterLoad
	admin  *client.Client
	queues []string
	roles  agreement
}

// startMemTrial starts three members, places the test queues on a member
// that is not the catalog leader and starts the traffic.
func startMemTrial(t *testing.T, class string, random *rand.Rand) *memTrial {
	t.Helper()
	mc := startMemCluster(t, class, 3)
	r := &memTrial{t: t, random: random, class: class, mc: mc, h: NewHistory()}
	traffic := clusterLoadConfig{payloadBytes: 128, ratePerQueue: 50, prefetch: 32, sampleEvery: 20 * time.Millisecond,
		pauseEvery: 200 * time.Millisecond, pauseFor: 150 * time.Millisecond, addresses: mc.addresses(), dial: mc.dial}
	r.admin = dialClient(t, traffic.clientOptions("admin", 0, &errorLog{}, &atomic.Int64{}))
	t.Cleanup(func() { _ = r.admin.Close() })
	roles := mc.converge(nil)
	var candidates []string
	for _, m := range mc.members {
		if m.config.ID != roles.leader {
			candidates = append(candidates, m.config.ID)
		}
	}
	target := candidates[random.IntN(len(candidates))]
	traffic.queues = placeQueuesOn(t, r.admin, target, clusterQueueSpecs, len(mc.members))
	for _, q := range traffic.queues {
		r.queues = append(r.queues, q.name)
	}
	r.roles = mc.converge(r.queues)
	r.load = startClusterLoad(t, r.h, traffic)
	time.Sleep(time.Second)
	return r
}

// ownerAndFollowers returns the member owning the test queues and the
// others.
func (r *memTrial) ownerAndFollowers() (*memMember, []*memMember) {
	r.roles = r.mc.converge(r.queues)
	owner := r.mc.member(r.roles.owners[r.queues[0]])
	var followers []*memMember
	for _, m := range r.mc.members {
		if m != owner {
			followers = append(followers, m)
		}
	}
	return owner, followers
}

// crashOptions keeps only synced bytes, or in one trial of four a random
// prefix of the unsynced writes with the last one torn.
func (r *memTrial) crashOptions() vfs.CrashOptions {
	if r.random.IntN(4) == 0 {
		return vfs.CrashOptions{Rand: r.random, TearLastWrite: true}
	}
	return vfs.CrashOptions{}
}

// powerLoss runs one power loss of victims as a recorded fault.
func (r *memTrial) powerLoss(name string, victims []*memMember, damage func(*memMember, *vfs.Mem)) {
	r.t.Helper()
	time.Sleep(time.Duration(300+r.random.IntN(700)) * time.Millisecond)
	var ids, failover []string
	for _, m := range victims {
		ids = append(ids, m.config.ID)
	}
	if len(victims) < len(r.mc.members) {
		for _, queue := range r.queues {
			if slices.Contains(ids, r.roles.owners[queue]) {
				failover = append(failover, queue)
			}
		}
	}
	index := r.h.FaultStarted(Fault{Class: r.class, Name: name, Nodes: ids, Failover: failover})
	downtime := time.Duration(200+r.random.IntN(800)) * time.Millisecond
	took := r.mc.powerLoss(r.load, victims, r.roles, r.crashOptions(), damage, downtime)
	r.roles = r.mc.converge(r.queues)
	r.h.FaultEnded(index)
	r.t.Logf("%s: %s; down %v, started again in %v", r.class, name, downtime.Round(time.Millisecond), took.Round(time.Millisecond))
}

// finish drains, checks and returns the verdict.
func (r *memTrial) finish() ClusterTrial {
	r.t.Helper()
	r.mc.converge(r.queues)
	time.Sleep(time.Second)
	r.load.drain(90 * time.Second)
	record := r.h.Record()
	trial := checkAndReport(r.t, record, r.load)
	changes := r.load.ownerChanges()
	for _, queue := range r.queues {
		for _, change := range changes[queue] {
			explained := slices.ContainsFunc(record.Faults, func(f Fault) bool {
				return slices.Contains(f.Failover, queue) && !change.at.Before(f.Start)
			})
			if !explained && !failoverEnabled() {
				r.t.Errorf("%s: owner changed to %s at epoch %d with no fault on its owner", queue, change.owner, change.epoch)
			}
		}
	}
	r.load.close()
	return trial
}

// runMemoryClass runs trials of an in-process class, each a fresh cluster.
func runMemoryClass(t *testing.T, title, variable string, short, long int, waits string,
	body func(r *memTrial)) {
	if waits != "" {
		clusterSummary.Add(ClusterRow{Class: title, Waiting: waits})
		t.Skipf("%s: %s", title, waits)
	}
	if testing.Short() {
		t.Skip("starts in-process clusters")
	}
	seed := testSeed(t)
	row := ClusterRow{Class: title}
	for trial := range trials(t, variable, short, long) {
		trialSeed := seed + uint64(trial)
		ok := t.Run(fmt.Sprintf("trial-%d", trial), func(t *testing.T) {
			r := startMemTrial(t, fmt.Sprintf("%s trial %d", title, trial), newRandom(trialSeed))
			body(r)
			row.AddTrial(r.finish())
		})
		if !ok {
			t.Logf("trial %d failed; replay it alone with FIBRIL_SEED=%d %s=1", trial, trialSeed, variable)
		}
	}
	clusterSummary.Add(row)
}

func waitsUnlessFailover(reason string) string {
	if failoverEnabled() {
		return ""
	}
	return reason
}

// 6. Power loss of one node of the written set: nothing confirmed lost. A
// member that owns none of the queues today; the owner once another copy
// can take over.
func TestClusterPowerLossOfOneNode(t *testing.T) {
	runMemoryClass(t, "6. power loss of one node: a node owning none of the queues", "FIBRIL_CLUSTER_POWER_ONE_TRIALS",
		1, 20, "", func(r *memTrial) {
			_, followers := r.ownerAndFollowers()
			victim := followers[r.random.IntN(len(followers))]
			r.powerLoss("power loss of "+victim.config.ID+" (follower)", []*memMember{victim}, nil)
		})
}

func TestClusterPowerLossOfTheOwner(t *testing.T) {
	runMemoryClass(t, "6. power loss of one node: owner", "FIBRIL_CLUSTER_POWER_OWNER_TRIALS", 1, 20,
		waitsUnlessFailover(waitsForFailover), func(r *memTrial) {
			owner, _ := r.ownerAndFollowers()
			r.powerLoss("power loss of "+owner.config.ID+" (owner)", []*memMember{owner}, nil)
		})
}

// 7. Power loss of every node at once: durable queues lose nothing;
// buffered queues lose at most what was past the last completed sync on
// every copy, and the queue recovers and keeps serving (the drain and the
// calm after it need confirms and deliveries).
func TestClusterPowerLossOfEveryNode(t *testing.T) {
	runMemoryClass(t, "7. power loss of every node at once", "FIBRIL_CLUSTER_POWER_ALL_TRIALS", 1, 20, "",
		func(r *memTrial) {
			r.powerLoss("power loss of every node", r.mc.members, nil)
		})
}

// 8. On-disk corruption of a minority: bit flips in, or truncation of,
// one follower's segment files of the test queues while it is down; then
// the owner loses power, so the damaged copy is one of the two a new
// owner can recover from. It must be detected, not counted as evidence,
// and repaired from the other copy: nothing confirmed is lost, and the
// damaged copy catches up with the owner's.
func TestClusterCorruptionOfAMinority(t *testing.T) {
	runMemoryClass(t, "8. corruption of one follower's segment files", "FIBRIL_CLUSTER_CORRUPTION_TRIALS", 1, 20,
		waitsUnlessFailover(waitsForFailover), func(r *memTrial) {
			owner, followers := r.ownerAndFollowers()
			victim := followers[r.random.IntN(len(followers))]
			truncate := r.random.IntN(2) == 0
			how := "bit flips in"
			if truncate {
				how = "truncation of"
			}
			damaged := 0
			r.powerLoss(fmt.Sprintf("power loss of %s (follower), %s its segment files", victim.config.ID, how),
				[]*memMember{victim}, func(m *memMember, image *vfs.Mem) {
					for _, queue := range r.queues {
						damaged += damageSegments(r.t, r.random, image, queue, truncate)
					}
				})
			if damaged == 0 {
				r.t.Fatalf("%s holds no segment file of the test queues to damage", victim.config.ID)
			}
			r.powerLoss("power loss of "+owner.config.ID+" (owner), after the follower's damage", []*memMember{owner}, nil)
			for _, queue := range r.queues {
				awaitMemReplica(r, queue, victim.config.ID)
			}
		})
}

// damageSegments flips bits in, or truncates, one segment file of queue in
// image and returns how many files it damaged.
func damageSegments(t *testing.T, random *rand.Rand, image *vfs.Mem, queue string, truncate bool) int {
	t.Helper()
	files := segmentFiles(image, queue)
	if len(files) == 0 {
		return 0
	}
	name := files[random.IntN(len(files))]
	data, err := image.ReadFile(name)
	if err != nil || len(data) < 2 {
		return 0
	}
	if truncate {
		data = data[:random.IntN(len(data))]
	} else {
		data = bytes.Clone(data)
		for range 1 + random.IntN(8) {
			data[random.IntN(len(data))] ^= byte(1 << random.IntN(8))
		}
	}
	if err := image.WriteFile(name, data); err != nil {
		t.Fatal(err)
	}
	return 1
}

// awaitMemReplica waits until the owner reports node's copy of queue
// durable up to its own written frontier.
func awaitMemReplica(r *memTrial, queue, node string) {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		owner := r.mc.member(r.mc.converge([]string{queue}).owners[queue])
		if info, ok := owner.broker.QueueInfo(queue); ok {
			for _, replica := range info.Replicas {
				if replica.Node == node && replica.DurableNext >= info.WrittenNext {
					return
				}
				if replica.Node == node {
					last = fmt.Sprintf("durable %d of the owner's written %d", replica.DurableNext, info.WrittenNext)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Errorf("%s's copy of %s did not catch up: %s", node, queue, last)
}
