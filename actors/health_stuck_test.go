package actors

// Health never calls a lagging copy healthy (partition_commit.go,
// cluster_health.go): a follower whose disk stops answering is shown
// stalled within a second, is not counted in fibril_queue_copies, and when
// the queue needs it for every confirm, /healthz's Stuck names the queue
// once its oldest unconfirmed record has waited commitStuckAfter.

import (
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

func TestAStalledFollowerIsShownAndAStuckQueueIsUnhealthy(t *testing.T) {
	c, gates := gatedCluster(t)
	ctx := testContext(t)
	cases := []struct {
		name, policy string
		stuck        bool // the held follower is one of the copies every confirm needs
	}{
		{"stall-majority", "majority_durable", false},
		{"stall-every-copy", "replica_durable:3", true},
	}
	for _, tc := range cases {
		owner, followers := c.declareServed(tc.name, client.QueueConfig{Policy: tc.policy})
		held := followers[0]
		sdk := c.dialSDK(owner)
		confirmedPayloads(t, ctx, sdk, tc.name, "before", 5)
		waitUntil(t, held+" is in sync", func() bool {
			replica, ok := replicaOf(c.copyAt(owner, tc.name), held)
			return ok && replica.State == "in sync"
		})
		gates[held].hold(gateSyncs)
		future, err := sdk.PublishAsync(ctx, tc.name, client.Message{Payload: []byte("while held")})
		if err != nil {
			t.Fatalf("%s: publish: %v", tc.name, err)
		}
		waitUntil(t, tc.name+": "+held+" shows stalled", func() bool {
			replica, ok := replicaOf(c.copyAt(owner, tc.name), held)
			return ok && strings.HasPrefix(replica.State, "stalled")
		})
		broker := c.members[owner].broker
		if value := metricValue(broker, `fibril_queue_replica_in_sync{queue="`+tc.name+`",replica="`+held+`"}`); value != 0 {
			t.Fatalf("%s: fibril_queue_replica_in_sync of the stalled %s is %v", tc.name, held, value)
		}
		if info := c.copyAt(owner, tc.name); info.DurableOn != 2 {
			t.Fatalf("%s: durable on %d copies with %s stalled, want 2 (the owner and the other follower)",
				tc.name, info.DurableOn, held)
		}
		health := broker.Health()
		if !containsQueueHealth(health.Lagging, tc.name, held) {
			t.Fatalf("%s: health does not list the stalled %s as lagging: %+v", tc.name, held, health.Lagging)
		}
		if tc.stuck {
			waitUntil(t, tc.name+" is unhealthy as stuck", func() bool {
				health := broker.Health()
				return !health.OK && containsQueueHealth(health.Stuck, tc.name, "confirms and deliveries are stuck")
			})
			t.Logf("%s: %s", tc.name, broker.Health().Stuck[0].Error)
			if wait := metricValue(broker, `fibril_queue_commit_wait_seconds{queue="`+tc.name+`"}`); wait < commitStuckAfter.Seconds() {
				t.Fatalf("%s: commit wait %v s while stuck", tc.name, wait)
			}
		} else {
			if _, err := future.Wait(ctx); err != nil {
				t.Fatalf("%s: confirm on the other copies: %v", tc.name, err)
			}
			time.Sleep(commitStuckAfter + time.Second) // a queue that still confirms never counts as stuck
			if health := broker.Health(); containsQueueHealth(health.Stuck, tc.name, "") {
				t.Fatalf("%s: a queue that confirms on the other copies is reported stuck: %+v", tc.name, health.Stuck)
			}
		}
		gates[held].release()
		if _, err := future.Wait(ctx); err != nil {
			t.Fatalf("%s: confirm after the release: %v", tc.name, err)
		}
		waitUntil(t, tc.name+" is healthy again", func() bool {
			health := broker.Health()
			replica, _ := replicaOf(c.copyAt(owner, tc.name), held)
			return !containsQueueHealth(health.Stuck, tc.name, "") && replica.State == "in sync"
		})
	}
}

// containsQueueHealth reports whether list names queue with an error that
// contains part.
func containsQueueHealth(list []QueueHealth, queue, part string) bool {
	for _, entry := range list {
		if entry.Name == queue && strings.Contains(entry.Error, part) {
			return true
		}
	}
	return false
}
