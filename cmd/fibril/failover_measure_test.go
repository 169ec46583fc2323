package main

// The failover measurement (docs/cluster.md, "Failover timings"): three
// fibril processes with the config's default Raft timing, a queue under
// one of four loads, and the owner's process killed with SIGKILL, trial
// after trial (the killed node is started again and rejoins before the
// next). Per trial, separately, from the instant before the kill:
//
//   detection      the new owner's recovery began (its failover record)
//   first confirm  a message published after the kill is confirmed
//   fresh delivery a subscriber created after the kill gets a message
//                  published after the kill (with a backlog: its first
//                  delivery of any message, which the backlog comes first)
//   original       the subscriber from before the kill gets a message
//                  published after it (warm load only)
//
// A trial fails when any of them takes more than 15 s. A false
// reassignment is an epoch change seen while no node was killed.
//
// Run: FIBRIL_MEASURE_FAILOVER=30 go test ./cmd/fibril -run TestMeasureFailover -v -timeout 120m
// (optionally FIBRIL_MEASURE_CASES=empty,warm and FIBRIL_MEASURE_KILL=owner,leader).

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

// failoverSample is one trial's timings; a zero duration was not reached.
type failoverSample struct {
	detection, firstConfirm, freshDelivery, original time.Duration
	failed                                           string
}

// failoverLoad prepares a queue and, for the warm load, runs traffic.
type failoverLoad struct {
	name    string
	prepare func(t *testing.T, c *binaryCluster, queue string, owner *clusterProcess)
	warm    bool
}

func TestMeasureFailover(t *testing.T) {
	trials, _ := strconv.Atoi(os.Getenv("FIBRIL_MEASURE_FAILOVER"))
	if trials <= 0 {
		t.Skip("set FIBRIL_MEASURE_FAILOVER=<trials per case> to measure failover")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	loads := []failoverLoad{
		{name: "empty"},
		{name: "backlog-10k", prepare: func(t *testing.T, c *binaryCluster, queue string, owner *clusterProcess) {
			publishBulk(t, c.sdkFor(owner, "prepare"), queue, 10_000, 1024)
		}},
		{name: "settled-100k", prepare: func(t *testing.T, c *binaryCluster, queue string, owner *clusterProcess) {
			sdk := c.sdkFor(owner, "prepare")
			publishBulk(t, sdk, queue, 100_000, 1024)
			drainCount(t, sdk, queue, 100_000)
			publishBulk(t, sdk, queue, 1, 1024)
		}},
		{name: "warm-500", warm: true},
	}
	wantLoads := os.Getenv("FIBRIL_MEASURE_CASES")
	wantKills := os.Getenv("FIBRIL_MEASURE_KILL")
	for _, load := range loads {
		for _, kill := range []string{"owner", "leader"} {
			if wantLoads != "" && !slices.Contains(strings.Split(wantLoads, ","), load.name) ||
				wantKills != "" && !slices.Contains(strings.Split(wantKills, ","), kill) {
				continue
			}
			t.Run(load.name+"/"+kill, func(t *testing.T) {
				samples, falseReassignments := measureFailoverCase(t, server, load, kill == "leader", trials)
				reportFailover(t, load.name, kill, samples, falseReassignments)
			})
		}
	}
}

// measureFailoverCase runs the trials of one case on one cluster.
func measureFailoverCase(t *testing.T, server string, load failoverLoad, withLeader bool, trials int) ([]failoverSample, int) {
	c := startBinaryCluster(t, server, 0)
	// One queue per node, so some queue's owner is the catalog leader
	// whichever node leads.
	queues := map[string]string{} // queue -> its owner when declared
	for i := 0; len(queues) < 3 && i < 60; i++ {
		name := fmt.Sprintf("measured-%d", i)
		owner, _ := c.declareAndFindOwner(name, client.QueueConfig{Mode: client.ModeDurable})
		if !slices.Contains(mapValues(queues), owner.id) {
			queues[name] = owner.id
			if load.prepare != nil {
				load.prepare(t, c, name, owner)
			}
		}
	}
	var samples []failoverSample
	falseReassignments := 0
	for trial := 0; trial < trials; trial++ {
		leader := catalogLeader(t, c)
		name, owner, epoch := "", (*clusterProcess)(nil), uint64(0)
		for queue := range queues {
			node, status := c.servingNode(queue, c.nodes...)
			if !withLeader && node.id != leader || withLeader && node.id == leader {
				name, owner, epoch = queue, node, status.Epoch
				break
			}
		}
		for i := len(queues); owner == nil && i < len(queues)+30; i++ {
			// Failovers gather the queues on the survivors: declare another
			// (placement spreads preferred owners) until one fits.
			name = fmt.Sprintf("measured-%d", 60+i)
			node, _ := c.declareAndFindOwner(name, client.QueueConfig{Mode: client.ModeDurable})
			if load.prepare != nil {
				load.prepare(t, c, name, node)
			}
			queues[name] = node.id
			if status, ok := serves(node, name); ok && (!withLeader && node.id != leader || withLeader && node.id == leader) {
				owner, epoch = node, status.Epoch
			}
		}
		if owner == nil {
			t.Logf("trial %d: no queue owned %s the catalog leader %s; skipped", trial,
				map[bool]string{true: "by", false: "away from"}[withLeader], leader)
			continue
		}
		sample := failoverTrial(t, c, name, owner, load.warm)
		samples = append(samples, sample)
		if sample.failed != "" {
			t.Logf("trial %d failed: %s", trial, sample.failed)
		}
		// The killed node comes back; wait until it is in sync, then check
		// that nothing moved while nothing was killed.
		c.start(owner)
		_, status := c.servingNode(name, c.nodes...)
		// A trial kills one node of three: the next must not start while
		// the restarted one still rejoins (its Raft shards or a queue's
		// copy), or it would measure a double fault. Every queue has it in
		// sync and every node knows every shard's leader.
		for queue := range queues {
			server, _ := c.servingNode(queue, c.nodes...)
			waitFor(t, owner.id+" rejoins "+queue, 60*time.Second, func() bool {
				status, ok := serves(server, queue)
				return ok && slices.ContainsFunc(status.Replicas, func(r struct {
					Node        string `json:"node"`
					State       string `json:"state"`
					DurableNext uint64 `json:"durable_next"`
					WrittenNext uint64 `json:"written_next"`
				}) bool {
					return r.Node == owner.id && r.State == "in sync"
				})
			})
		}
		waitFor(t, "every node knows every shard's leader", 60*time.Second, func() bool {
			for _, node := range c.nodes {
				var view clusterView
				if err := tryGetJSON(node, "/api/cluster", &view); err != nil || view.CatalogLeader == "" {
					return false
				}
				for _, shard := range view.Shards {
					if shard.Leader == "" {
						return false
					}
				}
			}
			return true
		})
		if status.Epoch != epoch+1 {
			falseReassignments += int(status.Epoch - epoch - 1)
		}
		time.Sleep(300 * time.Millisecond)
		if _, settled := c.servingNode(name, c.nodes...); settled.Epoch != status.Epoch {
			falseReassignments++
		}
	}
	return samples, falseReassignments
}

func mapValues(m map[string]string) []string {
	values := make([]string, 0, len(m))
	for _, value := range m {
		values = append(values, value)
	}
	return values
}

// catalogLeader reads the catalog leader from any live node.
func catalogLeader(t *testing.T, c *binaryCluster) string {
	t.Helper()
	// A node that just restarted, or an election after it, may leave every
	// node without a known leader for a moment.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, node := range c.nodes {
			var view clusterView
			if err := tryGetJSON(node, "/api/cluster", &view); err == nil && view.CatalogLeader != "" {
				return view.CatalogLeader
			}
		}
	}
	t.Fatal("no node knows the catalog leader")
	return ""
}

// failoverTrial kills owner and measures.
func failoverTrial(t *testing.T, c *binaryCluster, name string, owner *clusterProcess, warm bool) failoverSample {
	others := c.others(owner)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var killedAt atomic.Int64 // unix nanoseconds; 0 before the kill
	var original atomic.Int64 // the original subscriber's first post-kill delivery
	var confirmedPost atomic.Int64
	var stopWarm func()
	isPost := func(payload []byte) bool { return strings.HasPrefix(string(payload), "post-") }
	if warm {
		consumer := c.sdkFor(others[1], "original")
		subscription, err := consumer.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 256, Handler: func(d *client.Delivery) {
			if at := killedAt.Load(); at != 0 && isPost(d.Payload) {
				original.CompareAndSwap(0, time.Now().UnixNano())
			}
			_ = d.Ack()
		}})
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		defer func() { _ = subscription.Unsubscribe(context.Background()) }()
		stopWarm = steadyTraffic(c.sdkFor(others[0], "warm"), name, 500, &killedAt, &confirmedPost)
		time.Sleep(2 * time.Second) // warm
	}
	started := time.Now()
	killedAt.Store(started.UnixNano())
	if err := owner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.cmd.Wait()

	var sample failoverSample
	var fresh atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a subscriber created after the kill
		defer wg.Done()
		sdk := c.sdkFor(others[1], "fresh")
		for ctx.Err() == nil {
			subscription, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 256})
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			for ctx.Err() == nil {
				select {
				case delivery := <-subscription.Deliveries():
					if !warm && !isPost(delivery.Payload) && fresh.Load() == 0 {
						fresh.Store(time.Now().UnixNano()) // a backlog comes first: its first delivery
					}
					if isPost(delivery.Payload) {
						fresh.CompareAndSwap(0, time.Now().UnixNano())
						_ = delivery.Ack()
						_ = subscription.Unsubscribe(context.Background())
						return
					}
					_ = delivery.Release()
				case <-subscription.Done():
				case <-ctx.Done():
				}
				if subscription.Err() != nil {
					break
				}
			}
		}
	}()
	if !warm {
		wg.Add(1)
		go func() { // a publisher after the kill: one message at a time until one confirms
			defer wg.Done()
			sdk := c.sdkFor(others[0], "post")
			for i := 0; ctx.Err() == nil; i++ {
				publishCtx, publishCancel := context.WithTimeout(ctx, time.Second)
				_, err := sdk.Publish(publishCtx, name, client.Message{Payload: []byte(fmt.Sprintf("post-%d", i))})
				publishCancel()
				if err == nil {
					confirmedPost.CompareAndSwap(0, time.Now().UnixNano())
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && (fresh.Load() == 0 || confirmedPost.Load() == 0 || warm && original.Load() == 0) {
		time.Sleep(time.Millisecond)
	}
	if stopWarm != nil {
		stopWarm()
	}
	cancel()
	wg.Wait()
	since := func(at int64) time.Duration {
		if at == 0 {
			return 0
		}
		return time.Unix(0, at).Sub(started)
	}
	sample.firstConfirm, sample.freshDelivery, sample.original = since(confirmedPost.Load()), since(fresh.Load()), since(original.Load())
	switch {
	case sample.firstConfirm == 0:
		sample.failed = "no confirm within 15 s"
	case sample.freshDelivery == 0:
		sample.failed = "no delivery to a fresh subscriber within 15 s"
	case warm && sample.original == 0:
		sample.failed = "the original subscriber got no fresh work within 15 s"
	}
	if _, status := c.servingNode(name, others...); len(status.Failovers) > 0 {
		sample.detection = status.Failovers[len(status.Failovers)-1].StartedAt.Sub(started)
	}
	return sample
}

// steadyTraffic publishes rate messages per second until stopped; once
// killedAt is set, messages are named post-* and the first confirm of one
// published after it is recorded.
func steadyTraffic(sdk *client.Client, name string, rate int, killedAt, confirmedPost *atomic.Int64) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(time.Second / time.Duration(rate))
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ticker.C:
			}
			payload := fmt.Sprintf("pre-%d", i)
			sentAfterKill := killedAt.Load() != 0
			if sentAfterKill {
				payload = fmt.Sprintf("post-%d", i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = sdk.PublishAsync(ctx, name, client.Message{Payload: []byte(payload)},
				client.WithPublishTimeout(5*time.Second), client.WithCallback(func(confirm client.Confirm) {
					if confirm.Err == nil && sentAfterKill {
						confirmedPost.CompareAndSwap(0, time.Now().UnixNano())
					}
				}))
			cancel()
		}
	}()
	return func() { close(stop); <-done }
}

// publishBulk publishes count messages of size bytes, pipelined.
func publishBulk(t *testing.T, sdk *client.Client, name string, count, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	payload := make([]byte, size)
	futures := make([]*client.PublishFuture, 0, 1024)
	for i := range count {
		future, err := sdk.PublishAsync(ctx, name, client.Message{Payload: payload})
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		futures = append(futures, future)
		if len(futures) == cap(futures) || i == count-1 {
			for _, f := range futures {
				if _, err := f.Wait(ctx); err != nil {
					t.Fatalf("confirm: %v", err)
				}
			}
			futures = futures[:0]
		}
	}
}

// drainCount consumes and acks count messages.
func drainCount(t *testing.T, sdk *client.Client, name string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	subscription, err := sdk.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = subscription.Unsubscribe(context.Background()) }()
	for i := range count {
		select {
		case delivery := <-subscription.Deliveries():
			_ = delivery.Ack()
		case <-ctx.Done():
			t.Fatalf("drained %d of %d", i, count)
		}
	}
}

// reportFailover prints one case's figures: median, p95 and max of each
// timing over the trials that reached it, and the failures.
func reportFailover(t *testing.T, load, kill string, samples []failoverSample, falseReassignments int) {
	failures := 0
	for _, sample := range samples {
		if sample.failed != "" {
			failures++
		}
	}
	line := func(what string, pick func(failoverSample) time.Duration) string {
		var values []time.Duration
		for _, sample := range samples {
			if v := pick(sample); v > 0 {
				values = append(values, v)
			}
		}
		if len(values) == 0 {
			return fmt.Sprintf("%s n/a", what)
		}
		slices.Sort(values)
		at := func(q float64) time.Duration { return values[min(len(values)-1, int(q*float64(len(values))))] }
		return fmt.Sprintf("%s %d: median %v p95 %v max %v", what, len(values),
			at(0.5).Round(time.Millisecond), at(0.95).Round(time.Millisecond), values[len(values)-1].Round(time.Millisecond))
	}
	t.Logf("FAILOVER load=%s kill=%s trials=%d failures=%d false_reassignments=%d\n  %s\n  %s\n  %s\n  %s",
		load, kill, len(samples), failures, falseReassignments,
		line("detection", func(s failoverSample) time.Duration { return s.detection }),
		line("first confirm", func(s failoverSample) time.Duration { return s.firstConfirm }),
		line("fresh delivery", func(s failoverSample) time.Duration { return s.freshDelivery }),
		line("original subscriber", func(s failoverSample) time.Duration { return s.original }))
}
