package acceptance

// 14. The owner's queue disk fails while its process stays up, on an
// in-process cluster (cluster_memory_test.go) under the traffic of
// cluster_load_test.go: from one moment on every fsync of the owner's
// queue logs fails (the crash filesystem's sticky fault; Raft and the
// peer links are untouched). Its copies latch and fence; each must step
// down and hand its partition to a healthy copy at once (docs/cluster.md,
// "A copy whose disk fails hands the partition on"), so the fault passes
// only if, within diskFailoverBound and with the old owner's process
// still running, every test queue with W < E is owned elsewhere under a
// newer epoch and confirms resume. A queue with W = E cannot activate a
// new epoch on two healthy copies: it waits for the repair. The
// operator's repair follows: the fault is cleared and each fenced copy
// reopened (Broker.ReopenQueue, as `fibrilctl reopen` does), which
// rejoins it as a replica. The checker then judges the trial as usual:
// nothing confirmed lost, every confirmed message delivered.
//
// A disk that refuses everything (a read-only remount, a shut-down
// filesystem) refuses the log's record of its cut too, and the node stops
// by design (storage/log ErrCutNotRecorded): that is a process loss, which
// classes 1 and 10 cover, so this class fails fsyncs only.

import (
	"fmt"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// diskFailoverBound is how soon after its disk failed the owner must be
// replaced and confirms resume elsewhere: detection is the replicas'
// silence rule (1 s) and a recovery, with room for a loaded machine.
const diskFailoverBound = 15 * time.Second

func TestClusterOwnerQueueDiskFails(t *testing.T) {
	runMemoryClass(t, "14. owner's queue disk fails, its process alive", "FIBRIL_CLUSTER_DISK_TRIALS", 1, 20,
		waitsUnlessFailover(waitsForFailover), func(r *memTrial) {
			r.ownerQueueDiskFails()
		})
}

// ownerQueueDiskFails runs the fault of the file comment as a recorded
// fault.
func (r *memTrial) ownerQueueDiskFails() {
	r.t.Helper()
	time.Sleep(time.Duration(300+r.random.IntN(700)) * time.Millisecond)
	owner, followers := r.ownerAndFollowers()
	before := r.roles
	name := fmt.Sprintf("every fsync of %s's queue logs fails (owner, its process alive)", owner.config.ID)
	index := r.h.FaultStarted(Fault{Class: r.class, Name: name, Nodes: []string{owner.config.ID}, Failover: r.queues})
	for _, queue := range r.queues {
		r.h.QueueLifeEnded(queue, EndFailover, time.Time{})
		r.h.QueueLifeStarted(queue)
	}
	began := time.Now()
	owner.queueFS.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})

	everyCopy := r.load.everyCopy()
	var movable []string // the queues a new owner can serve on the two healthy copies
	for _, queue := range r.queues {
		if !everyCopy[queue] {
			movable = append(movable, queue)
		}
	}
	deadline := began.Add(diskFailoverBound)
	var replaced time.Duration
	for {
		moved := 0
		for _, queue := range movable {
			ownedElsewhere := true
			for _, m := range followers {
				info, err := m.node.Owner(queue, 0)
				ownedElsewhere = ownedElsewhere && err == nil && info.NodeID != "" && info.NodeID != owner.config.ID &&
					info.Epoch > before.epochs[queue]
			}
			if ownedElsewhere {
				moved++
			}
		}
		if moved == len(movable) {
			replaced = time.Since(began)
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: %d of the %d queues with W < E owned elsewhere %v after %s's disk failed, its process alive",
				name, moved, len(movable), diskFailoverBound, owner.config.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	confirmed := r.load.confirmedSoFar()
	for r.load.confirmedSoFar() < confirmed+20 {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: confirms did not resume on the new owners within %v (%d since they took over)",
				name, diskFailoverBound, r.load.confirmedSoFar()-confirmed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resumed := time.Since(began)
	if owner.broker == nil || owner.node == nil {
		r.t.Fatalf("%s: the old owner's broker is gone", name)
	}

	// The operator's repair: a working disk, and every fenced copy
	// reopened. The fault ends once every member is healthy again (no
	// copy fenced, every queue served, no frontier stuck): the W = E
	// queues recover only now, and a publish sent before they serve may
	// still be overtaken by a later one on another route.
	owner.queueFS.ClearFaults()
	for _, queue := range r.queues {
		if err := owner.broker.ReopenQueue(queue); err != nil {
			r.t.Fatalf("%s: reopen %s's copy of %s: %v", name, owner.config.ID, queue, err)
		}
	}
	healthyBy := time.Now().Add(60 * time.Second)
	for _, m := range r.mc.members {
		for health := m.broker.Health(); !health.OK; health = m.broker.Health() {
			if time.Now().After(healthyBy) {
				r.t.Fatalf("%s: %s is not healthy 60 s after the repair: %+v", name, m.config.ID, health)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	r.roles = r.mc.converge(r.queues)
	r.h.FaultEnded(index)
	r.t.Logf("%s: %s; owned elsewhere after %v, confirms resumed after %v, reopened after %v", r.class, name,
		replaced.Round(time.Millisecond), resumed.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}
