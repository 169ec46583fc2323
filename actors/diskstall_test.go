package actors

// An owner whose queue disk stops answering without failing (a write or
// an fsync that never returns) is replaced (partition_diskwatch.go): its
// followers keep hearing it, so only its own watch of its progress can
// tell. It fences its copy and steps down, another copy serves and
// confirms, and once the disk answers again the old owner reopens by
// itself and catches up as a replica. Before the watch, such an owner kept
// the partition while no publish that needed its disk confirmed.

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

func TestAnOwnerWhoseDiskStopsAnsweringIsReplaced(t *testing.T) {
	cases := []struct {
		name   string
		hold   gateOps
		config client.QueueConfig
	}{
		{"fsync-hangs", gateSyncs, client.QueueConfig{Mode: client.ModeDurable, Policy: "majority_durable"}},
		{"write-hangs", gateWrites, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, gates := gatedCluster(t, withBrokerConfig(func(_ string, config *Config) {
				config.OwnerDiskStallAfter = time.Second
			}))
			ctx := testContext(t)
			name := "stalled-" + tc.name
			owner, followers := c.declareServed(name, tc.config)
			publisher := c.dialSDKHome(followers[0], "publisher")
			confirmed := confirmedPayloads(t, ctx, publisher, name, "before", 50)

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

			stalled := time.Now()
			gates[owner].hold(tc.hold)
			waitUntil(t, owner+"'s log is held", func() bool { return gates[owner].held() > 0 })
			waitUntil(t, owner+"'s copy fences after its disk stalls", func() bool { return c.copyAt(owner, name).Fenced })
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
			waitUntil(t, "50 confirms on "+next+" after the stall", func() bool { return record.confirmedSince(stalled) >= 50 })
			if servesHere(c.members[owner].broker, name) {
				t.Fatalf("the stalled owner %s still serves %s beside %s", owner, name, next)
			}
			health := c.members[owner].broker.Health()
			if health.OK || !containsQueueHealth(health.Queues, name, "stopped answering") {
				t.Fatalf("%s's health while its copy is fenced by the stall: %+v", owner, health)
			}

			gates[owner].release()
			waitUntil(t, owner+" reopens and catches up with "+next, func() bool {
				info := c.copyAt(owner, name)
				replica, ok := replicaOf(c.copyAt(next, name), owner)
				return !info.Fenced && ok && strings.HasPrefix(replica.State, "in sync")
			})
			stopPublishing()
			t.Logf("%s stalled; %s serves; failures by code %v (%v)", owner, next, record.failed, record.lastError)
			record.mu.Lock()
			for payload := range record.confirmed {
				confirmed = append(confirmed, payload)
			}
			record.mu.Unlock()
			drainPayloads(t, ctx, c.dialSDKHome(next, "consumer"), name, confirmed)
			if health := c.members[owner].broker.Health(); !health.OK {
				t.Fatalf("%s unhealthy after its copy came back: %+v", owner, health)
			}
		})
	}
}
