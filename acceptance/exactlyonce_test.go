package acceptance

// Exactly-once publishing through failures: an idempotent publisher (the
// SDK's producer id and numbers, and a message id per message) publishes
// as fast as its window allows to a queue with a dedup window, with
// RetryUnknownPublishes on, while an acking consumer runs, and the
// deployment is disrupted again and again with publishes in flight. Every
// publish whose outcome the SDK could not settle by itself is published
// again by the test with the same message id. Then the queue is drained,
// and the run checks, per message id:
//
//   - it was delivered (nothing confirmed or retried is lost);
//   - every delivery of it names one stored message, one (incarnation,
//     offset): the queue stored it once, however often it was sent;
//   - every delivery after the first is marked redelivered (a redelivery
//     after a restart is allowed, only marked).
//
// runExactlyOnce takes the deployment as an exactlyOnceTarget, so the same
// run applies to a single node killed with SIGKILL, a node on the crash
// filesystem losing power, and (once failover exists) a three-node cluster
// losing its owner: see TestExactlyOnceAcrossFailover.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// exactlyOnceTarget is the deployment a run disrupts.
type exactlyOnceTarget struct {
	name      string
	mode      wire.Mode
	addresses []string
	// dial opens a client connection (nil: TCP to the address).
	dial func(ctx context.Context, address string) (net.Conn, error)
	// disrupt fails the node serving the queue abruptly (SIGKILL, a power
	// loss, the owner's loss in a cluster) and returns once service is
	// back (restarted, or failed over).
	disrupt func(t *testing.T, trial int)
}

// exactlyOnceConfig sizes a run.
type exactlyOnceConfig struct {
	ratePerSecond float64 // publishes per second, until the last disruption is over
	disruptions   int
	payloadBytes  int
	seed          uint64
}

// exactlyOnceResult is what a run saw.
type exactlyOnceResult struct {
	messages      int // message ids published
	confirmed     int // publishes the SDK confirmed without the test's help
	duplicates    int // of those, confirmed as stored before (a retry that found its first copy)
	manualRetries int // publishes the test had to send again (their outcome stayed unknown)
	deliveries    int
	redeliveries  int
}

type deliverySeen struct {
	incarnation, offset uint64
	redelivered         bool
}

const exactlyOnceQueue = "exactly-once"

func runExactlyOnce(t *testing.T, target exactlyOnceTarget, config exactlyOnceConfig) exactlyOnceResult {
	t.Helper()
	random := newRandom(config.seed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	options := func(name string) client.Options {
		return client.Options{Addresses: target.addresses, Dialer: target.dial, ClientName: name, WaitForReconnect: true,
			Backoff: client.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}, MaxPendingPublishes: 256,
			KeepaliveInterval: time.Second}
	}
	publisherOptions := options("exactly-once publisher")
	publisherOptions.Idempotent, publisherOptions.RetryUnknownPublishes = true, true
	publisher := dialClient(t, publisherOptions)
	defer publisher.Close()
	consumer := dialClient(t, options("exactly-once consumer"))
	defer consumer.Close()
	if _, err := publisher.Declare(ctx, exactlyOnceQueue, client.QueueConfig{Mode: target.mode, Dedup: true}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string][]deliverySeen{}
	sub, err := consumer.Subscribe(ctx, exactlyOnceQueue, client.SubscribeOptions{Prefetch: 64, Handler: func(d *client.Delivery) {
		mu.Lock()
		seen[d.MessageID] = append(seen[d.MessageID], deliverySeen{d.Incarnation, d.Offset, d.Redelivered})
		mu.Unlock()
		_ = d.Ack() // a lost ack only brings the message back, marked
	}})
	if err != nil {
		t.Fatal(err)
	}

	payload := make([]byte, config.payloadBytes)
	var outcomes []chan client.Confirm
	stop := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		started := time.Now()
		for i := 0; ; i++ {
			due := started.Add(time.Duration(float64(i) / config.ratePerSecond * float64(time.Second)))
			select {
			case <-stop:
				return
			case <-time.After(time.Until(due)):
			}
			message := client.Message{MessageID: fmt.Sprintf("eo-%06d", i), Payload: payload}
			var done chan client.Confirm
			for {
				// A fresh channel for each attempt: a publish that fails at
				// once still calls its callback (WithCallback), so reusing
				// one channel of one slot would let a later confirm of
				// the retry block the connection's reader for good.
				done = make(chan client.Confirm, 1)
				attempt := done
				_, err := publisher.PublishAsync(ctx, exactlyOnceQueue, message, client.WithCallback(func(c client.Confirm) { attempt <- c }))
				if err == nil {
					break
				}
				time.Sleep(5 * time.Millisecond) // not handed over (reconnecting): nothing was sent
			}
			mu.Lock()
			outcomes = append(outcomes, done)
			mu.Unlock()
		}
	}()
	for trial := range config.disruptions {
		time.Sleep(time.Duration(100+random.IntN(500)) * time.Millisecond)
		target.disrupt(t, trial)
	}
	time.Sleep(200 * time.Millisecond) // publishing on the last life too
	close(stop)
	<-published

	var result exactlyOnceResult
	result.messages = len(outcomes)
	for i, done := range outcomes {
		confirm := <-done
		if confirm.Err == nil {
			result.confirmed++
			if confirm.Duplicate {
				result.duplicates++
			}
			continue
		}
		if !errors.Is(confirm.Err, client.ErrConnectionLost) && !errors.Is(confirm.Err, client.ErrPublishTimeout) &&
			!client.IsRetryable(confirm.Err) {
			t.Fatalf("message %d refused for good: %v", i, confirm.Err)
		}
		// Unknown (or refused for now): the test retries it with the same id.
		result.manualRetries++
		message := client.Message{MessageID: fmt.Sprintf("eo-%06d", i), Payload: payload}
		for attempt := 0; ; attempt++ {
			if _, err := publisher.Publish(ctx, exactlyOnceQueue, message); err == nil {
				break
			} else if attempt == 50 {
				t.Fatalf("message %d: retried 50 times: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	waitDrained(t, ctx, consumer, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == result.messages
	})
	_ = sub.Unsubscribe(ctx)
	mu.Lock()
	defer mu.Unlock()
	for i := range result.messages {
		id := fmt.Sprintf("eo-%06d", i)
		deliveries := seen[id]
		if len(deliveries) == 0 {
			t.Errorf("%s: published (and confirmed) but never delivered", id)
			continue
		}
		first := deliveries[0]
		for _, d := range deliveries[1:] {
			result.redeliveries++
			if d.incarnation != first.incarnation || d.offset != first.offset {
				t.Errorf("%s: stored twice: delivered as (%d, %d) and as (%d, %d)", id, first.incarnation, first.offset,
					d.incarnation, d.offset)
			}
			if !d.redelivered {
				t.Errorf("%s: delivered again without the redelivered flag", id)
			}
		}
		result.deliveries += len(deliveries)
	}
	if len(seen) != result.messages {
		t.Errorf("%d message ids delivered, %d published", len(seen), result.messages)
	}
	t.Logf("%s: %d messages, %d disruptions: %d confirmed by the SDK (%d of them duplicates), %d retried by the test, "+
		"%d deliveries (%d redeliveries, all marked)", target.name, result.messages, config.disruptions, result.confirmed,
		result.duplicates, result.manualRetries, result.deliveries, result.redeliveries)
	return result
}

// waitDrained waits until the queue holds nothing and done says every
// message was seen.
func waitDrained(t *testing.T, ctx context.Context, c *client.Client, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.QueueInfo(ctx, exactlyOnceQueue)
		if err == nil && info.Ready == 0 && info.Leased == 0 && info.Delayed == 0 && done() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the queue did not drain within 60 s")
}

// Process kill: the real server, SIGKILL with publishes in flight,
// restarted on the same data directory and address.
func TestExactlyOnceThroughProcessKills(t *testing.T) {
	seed := testSeed(t)
	spec := newServerSpec(t)
	server, _ := spec.start(t)
	target := exactlyOnceTarget{name: "process kill", mode: wire.ModeDurable, addresses: []string{spec.listen},
		disrupt: func(t *testing.T, trial int) {
			server.kill()
			server, _ = spec.start(t)
		}}
	runExactlyOnce(t, target, exactlyOnceConfig{ratePerSecond: 4000, payloadBytes: 64, seed: seed,
		disruptions: trials(t, "FIBRIL_EXACTLY_ONCE_TRIALS", 3, 20)})
	if err := server.stop(); err != nil {
		t.Errorf("clean stop: %v; log:\n%s", err, server.logTail())
	}
}

// Power loss: an in-process broker on the crash filesystem; the image
// keeps only what a completed sync covered, so publishes in flight may be
// gone (and are retried) or present (and the retry is a duplicate).
func TestExactlyOnceThroughPowerLosses(t *testing.T) {
	seed := testSeed(t)
	random := newRandom(seed ^ 1)
	node := startMemNode(t, vfs.NewMem(), nil, func(config *actors.Config) { config.SyncInterval = 20 * time.Millisecond })
	target := exactlyOnceTarget{name: "power loss", mode: wire.ModeDurable, addresses: []string{"node"}, dial: node.plug.dial,
		disrupt: func(t *testing.T, trial int) {
			node.plug.pull()
			image := node.mem.CrashClone(vfs.CrashOptions{Rand: random})
			node.plug.release()
			old := node.broker
			node.broker = nil
			if err := old.Close(); err != nil {
				t.Errorf("closing the old broker after the power cut: %v", err)
			}
			node.mem, node.fs = image, image
			node.start()
		}}
	runExactlyOnce(t, target, exactlyOnceConfig{ratePerSecond: 4000, payloadBytes: 64, seed: seed,
		disruptions: trials(t, "FIBRIL_EXACTLY_ONCE_TRIALS", 3, 20)})
}

// Failover: the same run on three nodes (an in-process cluster on the
// crash filesystem, cluster_memory_test.go), disrupting the queue's owner
// with a power loss: it keeps only what it had synced, another copy takes
// the queue over (its publishes appended and unconfirmed are answered
// outcome_unknown, or their connection ends, and the SDK retries them
// through the new owner), and the old owner comes back as a replica.
// Deduplication survives a failover because every replica applies the
// owner's publish records through the same queue state (storage/queue's
// dedup table is derived from the log), so the new owner refuses what the
// old one stored.
func TestExactlyOnceAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	seed := testSeed(t)
	random := newRandom(seed ^ 2)
	mc := startMemCluster(t, "exactly once across failover", 3)
	owners := map[string]bool{}
	target := exactlyOnceTarget{name: "owner failover", mode: wire.ModeDurable, addresses: mc.addresses(), dial: mc.dial,
		disrupt: func(t *testing.T, trial int) {
			roles := mc.converge([]string{exactlyOnceQueue})
			owner := mc.member(roles.owners[exactlyOnceQueue])
			began := time.Now()
			mc.powerCycle(owner, vfs.CrashOptions{Rand: random, TearLastWrite: random.IntN(2) == 0},
				time.Duration(200+random.IntN(800))*time.Millisecond)
			// The members agree on the old epoch until a recovery claims
			// a new one (a member back quickly may find its old epoch
			// still recorded, served by nobody): wait for the claim.
			var after agreement
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				after = mc.converge([]string{exactlyOnceQueue})
				if after.epochs[exactlyOnceQueue] > roles.epochs[exactlyOnceQueue] {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("trial %d: %s lost power, and a minute later the queue is still at epoch %d", trial,
						owner.config.ID, after.epochs[exactlyOnceQueue])
				}
			}
			owners[after.owners[exactlyOnceQueue]] = true
			t.Logf("trial %d: power loss of the owner %s (epoch %d); %s owns the queue at epoch %d, %v later", trial,
				owner.config.ID, roles.epochs[exactlyOnceQueue], after.owners[exactlyOnceQueue],
				after.epochs[exactlyOnceQueue], time.Since(began).Round(time.Millisecond))
		}}
	result := runExactlyOnce(t, target, exactlyOnceConfig{ratePerSecond: 2000, payloadBytes: 64, seed: seed,
		disruptions: trials(t, "FIBRIL_EXACTLY_ONCE_FAILOVER_TRIALS", 3, 20)})
	if result.duplicates+result.manualRetries == 0 {
		t.Logf("no publish was caught by a failover: nothing was retried")
	}
}
