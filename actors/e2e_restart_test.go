package actors

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// drain consumes everything a queue delivers until it reports nothing
// ready or leased, acking as it goes, and returns the payloads seen.
func drain(t *testing.T, c *testClient, queueName string) map[string]wire.Delivery {
	t.Helper()
	sub := c.subscribe(queueName, 64)
	seen := map[string]wire.Delivery{}
	for {
		info := c.info(queueName)
		if info.Ready == 0 && info.Leased == 0 && info.Delayed == 0 {
			break
		}
		if c.quietFor(50_000_000, isDeliverFor(sub)) { // 50 ms: let info catch up
			continue
		}
		for _, d := range c.nextDeliver(sub) {
			if _, dup := seen[string(d.Payload)]; dup {
				t.Fatalf("%s delivered twice after settling", d.Payload)
			}
			seen[string(d.Payload)] = d
			c.ack(sub, d.DeliveryTag)
		}
	}
	return seen
}

func TestRestartRecoversQueuesAndResumesSessions(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(testConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	c2 := dialBroker(t, first)
	session := c2.hello("", "").SessionID
	c2.mustDeclare("durable-q", wire.ModeDurable, wire.QueueOptions{})
	c2.mustDeclare("buffered-q", wire.ModeBuffered, wire.QueueOptions{})
	c2.mustConfirm("durable-q", wire.BoundaryDurable, "d1", "d2", "d3", "d4")
	c2.mustConfirm("buffered-q", wire.BoundaryWritten, "b1", "b2", "b3")
	sub := c2.subscribe("durable-q", 2)
	held := c2.nextDeliver(sub)
	if len(held) == 0 {
		t.Fatal("no delivery before the restart")
	}
	// Traffic in flight: publishes whose confirms are not awaited.
	c2.publish("durable-q", "u1", "u2")
	c2.publish("buffered-q", "u3")
	if err := first.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	second := startBrokerOn(t, testConfig(t, dir))
	resumed := dialBroker(t, second)
	if state := resumed.hello("", session).Session; state != wire.SessionResumedAfterRestart {
		t.Fatalf("session state after restart %s", state)
	}
	// A settle of a tag from before the restart names a subscription this
	// session never had.
	resumed.ack(sub, held[0].DeliveryTag)
	resumed.waitFor("unknown subscription", isErrorCode(wire.CodeUnknownSubscription))

	durable := drain(t, resumed, "durable-q")
	for _, payload := range []string{"d1", "d2", "d3", "d4"} {
		if _, ok := durable[payload]; !ok {
			t.Fatalf("confirmed %s lost across a clean restart; got %v", payload, keys(durable))
		}
	}
	// A clean shutdown keeps the leases of held deliveries (docs/protocol.md
	// 4.8): they come back marked as possible duplicates, the lease counted
	// as an attempt.
	for _, d := range held {
		if again := durable[string(d.Payload)]; !again.Redelivered || again.Attempt != d.Attempt+1 {
			t.Fatalf("held delivery %s came back as %+v", d.Payload, again)
		}
	}
	buffered := drain(t, resumed, "buffered-q")
	for _, payload := range []string{"b1", "b2", "b3"} {
		if _, ok := buffered[payload]; !ok {
			t.Fatalf("confirmed %s lost across a clean restart", payload)
		}
	}
}

func startBrokerOn(t *testing.T, config Config) *Broker {
	t.Helper()
	b, err := Start(config)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	closeOnCleanup(t, b)
	return b
}

func keys(m map[string]wire.Delivery) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testSeed returns the seed of a randomized test: FIBRIL_SEED when set,
// else a fresh one; it is printed when the test fails.
func testSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if text := os.Getenv("FIBRIL_SEED"); text != "" {
		parsed, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			t.Fatalf("FIBRIL_SEED: %v", err)
		}
		seed = parsed
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("SEED=%d (rerun with FIBRIL_SEED=%d)", seed, seed)
		}
	})
	return seed
}

// A power loss while publishes are unconfirmed and deliveries unacked
// loses no confirmed message of a durable queue; held deliveries come back
// marked redelivered; buffered queues recover and serve.
func TestPowerLossKeepsEveryDurableConfirm(t *testing.T) {
	seed := testSeed(t)
	random := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	mem := vfs.NewMem()
	config := testConfig(t, "/data")
	config.FS = mem
	first := startBrokerOn(t, config)
	c := connect(t, first)
	c.mustDeclare("ledger", wire.ModeDurable, wire.QueueOptions{})
	c.mustDeclare("clicks", wire.ModeBuffered, wire.QueueOptions{})
	var confirmed []string
	for batch := range 5 {
		var payloads []string
		for i := range 1 + random.IntN(20) {
			payloads = append(payloads, fmt.Sprintf("p%d-%d", batch, i))
		}
		c.mustConfirm("ledger", wire.BoundaryDurable, payloads...)
		c.mustConfirm("clicks", wire.BoundaryWritten, payloads...)
		confirmed = append(confirmed, payloads...)
	}
	sub := c.subscribe("ledger", uint32(1+random.IntN(8)))
	held := c.nextDeliver(sub)
	c.publish("ledger", "in-flight-1", "in-flight-2")
	c.publish("clicks", "in-flight-3")

	clone := mem.CrashClone(vfs.CrashOptions{TearLastWrite: true, Rand: random})
	config.FS = clone
	second := startBrokerOn(t, config)
	c2 := connect(t, second)
	ledger := drain(t, c2, "ledger")
	for _, payload := range confirmed {
		if _, ok := ledger[payload]; !ok {
			t.Fatalf("durable confirm %s lost in a power loss (have %d messages)", payload, len(ledger))
		}
	}
	for _, d := range held {
		if again := ledger[string(d.Payload)]; !again.Redelivered || again.Attempt < 2 {
			t.Fatalf("held delivery %s came back as %+v", d.Payload, again)
		}
	}
	c2.mustConfirm("clicks", wire.BoundaryWritten, "after-power-loss")
	drain(t, c2, "clicks")
}
