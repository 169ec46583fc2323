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
