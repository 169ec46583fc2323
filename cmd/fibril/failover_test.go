package main

// Failover of the real binaries: the owner of a queue is killed (SIGKILL),
// paused (SIGSTOP) or loses its data directory, under traffic from the Go
// SDK; another node serves the queue and nothing confirmed is lost.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

// queueStatusView is the part of GET /api/queues/{name} these tests read.
type queueStatusView struct {
	Owner         string `json:"owner"`
	Epoch         uint64 `json:"epoch"`
	CommittedNext uint64 `json:"committed_next"`
	DurableNext   uint64 `json:"durable_next"`
	WrittenNext   uint64 `json:"written_next"`
	Replicas      []struct {
		Node        string `json:"node"`
		State       string `json:"state"`
		DurableNext uint64 `json:"durable_next"`
		WrittenNext uint64 `json:"written_next"`
	} `json:"replicas"`
	Failovers []struct {
		Epoch     uint64    `json:"epoch"`
		StartedAt time.Time `json:"started_at"`
		Outcome   string    `json:"outcome"`
		Stages    []struct {
			Stage  string `json:"stage"`
			Micros int64  `json:"micros"`
		} `json:"stages"`
	} `json:"failovers"`
}

// serves reports whether node serves the queue as its owner now.
func serves(node *clusterProcess, name string) (queueStatusView, bool) {
	var status queueStatusView
	if err := tryGetJSON(node, "/api/queues/"+name, &status); err != nil {
		return status, false
	}
	for _, replica := range status.Replicas {
		if replica.Node == node.id && replica.State == "owner" {
			return status, status.Owner == node.id
		}
	}
	return status, false
}

// servingNode waits until one of the candidates serves the queue.
func (c *binaryCluster) servingNode(name string, candidates ...*clusterProcess) (*clusterProcess, queueStatusView) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, node := range candidates {
			if status, ok := serves(node, name); ok {
				return node, status
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("no node of %d serves %s", len(candidates), name)
	return nil, queueStatusView{}
}

func (c *binaryCluster) others(node *clusterProcess) []*clusterProcess {
	var out []*clusterProcess
	for _, other := range c.nodes {
		if other != node {
			out = append(out, other)
		}
	}
	return out
}

// sdkFor dials the Go SDK with home first and the others as fallbacks.
func (c *binaryCluster) sdkFor(home *clusterProcess, name string) *client.Client {
	c.t.Helper()
	addresses := []string{home.clientAddress}
	for _, other := range c.others(home) {
		addresses = append(addresses, other.clientAddress)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sdk, err := client.Dial(ctx, client.Options{Addresses: addresses, ClientName: name})
	if err != nil {
		c.t.Fatalf("dial %s: %v", home.id, err)
	}
	c.t.Cleanup(func() { _ = sdk.Close() })
	return sdk
}

// declareAndFindOwner declares a queue through node1 and waits until a
// node serves it.
func (c *binaryCluster) declareAndFindOwner(name string, config client.QueueConfig) (*clusterProcess, queueStatusView) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.sdkFor(c.nodes[0], "declare").Declare(ctx, name, config); err != nil {
		c.t.Fatalf("declare %s: %v", name, err)
	}
	return c.servingNode(name, c.nodes...)
}

// trafficRecord is what a publisher and a consumer under test saw.
type trafficRecord struct {
	mu        sync.Mutex
	confirmed map[string]time.Time
	failures  int
	delivered sync.Map // payload → first delivery time
}

func (r *trafficRecord) confirmedAfter(at time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, when := range r.confirmed {
		if when.After(at) {
			n++
		}
	}
	return n
}

// publishLoop publishes one message at a time until stop closes.
func publishLoop(sdk *client.Client, name string, stop <-chan struct{}, record *trafficRecord) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		payload := fmt.Sprintf("%s-%d", name, i)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := sdk.Publish(ctx, name, client.Message{Payload: []byte(payload)})
		cancel()
		record.mu.Lock()
		if err == nil {
			record.confirmed[payload] = time.Now()
		} else {
			record.failures++
		}
		record.mu.Unlock()
		if err != nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// missing lists the confirmed payloads never delivered.
func (r *trafficRecord) missing() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for payload := range r.confirmed {
		if _, ok := r.delivered.Load(payload); !ok {
			out = append(out, payload)
		}
	}
	return out
}

func waitFor(t *testing.T, what string, timeout time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The owner's process is killed with SIGKILL while a publisher confirms
// one message at a time and a consumer acks everything, in both modes
// (majority of three): another node serves, every confirmed message is
// delivered, publishes confirm again, and the killed node, started again,
// rejoins as an in-sync follower.
func TestBinaryFailoverOwnerKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	for _, mode := range []client.Mode{client.ModeDurable, client.ModeBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			c := startBinaryCluster(t, server, 10*time.Millisecond)
			name := "killed-" + mode.String()
			owner, before := c.declareAndFindOwner(name, client.QueueConfig{Mode: mode})
			others := c.others(owner)
			record := &trafficRecord{confirmed: map[string]time.Time{}}
			consumer := c.sdkFor(others[1], "consumer")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := consumer.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 256, Handler: func(d *client.Delivery) {
				record.delivered.LoadOrStore(string(d.Payload), time.Now())
				_ = d.Ack()
			}}); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			stop, stopped := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(stopped)
				publishLoop(c.sdkFor(others[0], "publisher"), name, stop, record)
			}()
			waitFor(t, "200 confirms", 30*time.Second, func() bool { return record.confirmedAfter(time.Time{}) >= 200 })
			killed := time.Now()
			if err := owner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = owner.cmd.Wait()
			next, after := c.servingNode(name, others...)
			waitFor(t, "200 confirms after the kill", 30*time.Second, func() bool { return record.confirmedAfter(killed) >= 200 })
			close(stop)
			<-stopped
			if after.Epoch <= before.Epoch {
				t.Fatalf("%s serves at epoch %d, not above %d", next.id, after.Epoch, before.Epoch)
			}
			waitFor(t, "every confirmed message is delivered", 30*time.Second, func() bool { return len(record.missing()) == 0 })
			t.Logf("%s: %s killed, %s serves at epoch %d; %d failed publishes", mode, owner.id, next.id, after.Epoch, record.failures)

			c.start(owner)
			waitFor(t, owner.id+" rejoins as an in-sync follower", 30*time.Second, func() bool {
				status, ok := serves(next, name)
				if !ok {
					return false
				}
				for _, replica := range status.Replicas {
					if replica.Node == owner.id {
						return replica.State == "in sync"
					}
				}
				return false
			})
		})
	}
}

// The owner's process is paused (SIGSTOP) past the coordination election:
// another node serves and confirms. A publish sent to the paused owner
// meanwhile is never confirmed once it resumes (its followers are sealed
// at the newer epoch), and the resumed node stops serving the queue.
func TestBinaryFailoverPausedOwnerConfirmsNothingAfterTheSeal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	c := startBinaryCluster(t, server, 10*time.Millisecond)
	name := "paused"
	owner, before := c.declareAndFindOwner(name, client.QueueConfig{Mode: client.ModeDurable})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	direct, err := client.Dial(ctx, client.Options{Addresses: []string{owner.clientAddress}, ClientName: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.Publish(ctx, name, client.Message{Payload: []byte("before")}); err != nil {
		t.Fatalf("publish before the pause: %v", err)
	}
	if err := owner.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = owner.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	stale, err := direct.PublishAsync(ctx, name, client.Message{Payload: []byte("to the paused owner")})
	if err != nil {
		t.Fatal(err)
	}
	next, after := c.servingNode(name, c.others(owner)...)
	if after.Epoch <= before.Epoch {
		t.Fatalf("%s serves at epoch %d, not above %d", next.id, after.Epoch, before.Epoch)
	}
	if _, err := c.sdkFor(next, "publisher").Publish(ctx, name, client.Message{Payload: []byte("on the new owner")}); err != nil {
		t.Fatalf("publish on the new owner: %v", err)
	}
	if err := owner.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	waitCtx, waitCancel := context.WithTimeout(ctx, 20*time.Second)
	defer waitCancel()
	// The old owner cannot confirm it: its followers are sealed. It may
	// refuse it with not_owner once it learns the new epoch (so it was not
	// stored), and the SDK then sends it to the new owner, which may
	// confirm it. Either way a confirm must stand on the new owner's
	// history: the message is delivered from there.
	confirm, staleErr := stale.Wait(waitCtx)
	t.Logf("the publish sent to the paused owner: %+v, %v", confirm, staleErr)
	if waitCtx.Err() != nil {
		t.Fatalf("the publish sent to the paused owner got no answer within 20 s of its resuming")
	}
	waitFor(t, owner.id+" stops serving", 20*time.Second, func() bool {
		_, ok := serves(owner, name)
		return !ok
	})
	if _, ok := serves(next, name); !ok {
		t.Fatalf("%s no longer serves after the old owner resumed", next.id)
	}
	consumer := c.sdkFor(next, "consumer")
	sub, err := consumer.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	delivered := map[string]bool{}
	for !delivered["before"] || !delivered["on the new owner"] || staleErr == nil && !delivered["to the paused owner"] {
		select {
		case d := <-sub.Deliveries():
			delivered[string(d.Payload)] = true
			_ = d.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("from the new owner: delivered %v; want every confirmed message (the publish to the paused "+
				"owner confirmed: %v)", delivered, staleErr == nil)
		}
	}
}

// The owner loses its data directory (killed, the directory removed,
// started again): it rejoins as a new replica instance, another node has
// served the queue meanwhile, and every confirmed message is still there;
// the rejoined node catches up before it counts.
func TestBinaryFailoverOwnerWithAWipedDataDirLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	server := buildBinary(t, dir, "./cmd/fibril", "fibril")
	c := startBinaryCluster(t, server, 10*time.Millisecond)
	name := "wiped"
	owner, _ := c.declareAndFindOwner(name, client.QueueConfig{Mode: client.ModeDurable})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publisher := c.sdkFor(c.others(owner)[0], "publisher")
	var confirmed []string
	for i := range 300 {
		payload := fmt.Sprintf("m-%d", i)
		if _, err := publisher.Publish(ctx, name, client.Message{Payload: []byte(payload)}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		confirmed = append(confirmed, payload)
	}
	if err := owner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.cmd.Wait()
	if err := os.RemoveAll(owner.dataDir); err != nil {
		t.Fatal(err)
	}
	next, _ := c.servingNode(name, c.others(owner)...)
	owner.rejoinEmpty = true // the data is lost for good
	c.start(owner)
	waitFor(t, owner.id+" catches up and rejoins in sync", 30*time.Second, func() bool {
		status, ok := serves(next, name)
		if !ok {
			return false
		}
		for _, replica := range status.Replicas {
			if replica.Node == owner.id {
				return replica.State == "in sync" && replica.DurableNext == status.DurableNext
			}
		}
		return false
	})
	seen := map[string]bool{}
	subscription, err := c.sdkFor(owner, "consumer").Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 512})
	if err != nil {
		t.Fatal(err)
	}
	for len(seen) < len(confirmed) {
		select {
		case delivery := <-subscription.Deliveries():
			seen[string(delivery.Payload)] = true
			_ = delivery.Ack()
		case <-ctx.Done():
			t.Fatalf("%d of %d confirmed messages delivered after the wipe", len(seen), len(confirmed))
		}
	}
}
