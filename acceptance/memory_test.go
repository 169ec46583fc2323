package acceptance

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

const (
	backlogQueue        = "backlog"
	backlogPayloadBytes = 1024
	// rssCeilingBytes is the resident set the full backlog run must stay
	// under.
	rssCeilingBytes = 256 << 20
	// stallPrefetch is the stalled consumer's prefetch.
	stallPrefetch = 1000
)

// Memory and backlog, against the real server's resident set size:
//
//  1. a backlog of ready 1 KiB messages in a durable queue must not hold
//     its payloads in memory: RSS growth over the backlog stays under a
//     quarter of the payload bytes (and, for the full million, RSS stays
//     under 256 MiB);
//  2. a consumer that subscribes and then stops reading must not make the
//     broker buffer what is published after it: RSS growth while as many
//     messages again are published stays under the same bound, and under
//     what the doubled backlog's per-message state explains (1.5 times the
//     first growth, plus the prefetch's payloads twice, plus 32 MiB).
//
// The backlog is 100,000 messages, or 1,000,000 with FIBRIL_SOAK=1;
// FIBRIL_BACKLOG_MESSAGES overrides it.
func TestBacklogDoesNotHoldPayloadsInMemory(t *testing.T) {
	messages := trials(t, "FIBRIL_BACKLOG_MESSAGES", 100_000, 1_000_000)
	spec := newServerSpec(t)
	server, _ := spec.start(t)
	c := dialClient(t, client.Options{Addresses: []string{spec.listen}, MaxPendingPublishes: 4096})
	defer c.Close()
	declareQueues(t, c, map[string]wire.Mode{backlogQueue: wire.ModeDurable})

	publishBacklog(t, c, "warmup", 10_000)
	base := settledRSS(t, server)
	began := time.Now()
	publishBacklog(t, c, "backlog", messages)
	elapsed := time.Since(began)
	afterBacklog := settledRSS(t, server)
	payloadBytes := uint64(messages) * backlogPayloadBytes
	growth := int64(afterBacklog) - int64(base)
	t.Logf("backlog of %d ready %d-byte messages (%d MiB of payload, published in %v): RSS %d MiB -> %d MiB, "+
		"growth %d MiB, %.0f bytes per message", messages, backlogPayloadBytes, payloadBytes>>20,
		elapsed.Round(time.Millisecond), base>>20, afterBacklog>>20, growth>>20, float64(growth)/float64(messages))
	if growth > int64(payloadBytes/4) {
		t.Errorf("RSS grew %d MiB over a backlog of %d MiB of payload: payloads are held in memory",
			growth>>20, payloadBytes>>20)
	}
	if soak() && afterBacklog > rssCeilingBytes {
		t.Errorf("RSS %d MiB with the backlog, over the %d MiB ceiling", afterBacklog>>20, rssCeilingBytes>>20)
	}
	assertQueueCounts(t, c, uint64(10_000+messages))

	stalled := stallConsumer(t, spec.listen, stallPrefetch)
	defer stalled.Close()
	publishBacklog(t, c, "after-stall", messages)
	afterStall := settledRSS(t, server)
	stallGrowth := int64(afterStall) - int64(afterBacklog)
	t.Logf("a consumer stalled with prefetch %d while %d more messages were published: RSS %d MiB -> %d MiB "+
		"(growth %d MiB)", stallPrefetch, messages, afterBacklog>>20, afterStall>>20, stallGrowth>>20)
	// The queue now holds twice the backlog, so its per-message state
	// grows again; what must not grow is anything proportional to the
	// payloads published past the stalled consumer.
	metadataBound := max(growth, 0)*3/2 + int64(stallPrefetch)*2*backlogPayloadBytes + 32<<20
	if stallGrowth > int64(payloadBytes/4) || stallGrowth > metadataBound {
		t.Errorf("RSS grew %d MiB while %d MiB were published past a stalled consumer (bounds: %d MiB, %d MiB)",
			stallGrowth>>20, payloadBytes>>20, payloadBytes>>22, metadataBound>>20)
	}
	if err := server.stop(); err != nil {
		t.Errorf("clean stop: %v", err)
	}
}

// publishBacklog publishes n messages and waits for every confirm.
func publishBacklog(t *testing.T, c *client.Client, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	payload := payloadFor("", backlogPayloadBytes)
	futures := make(chan *client.PublishFuture, 8192)
	failed := make(chan error, 1)
	go func() {
		defer close(failed)
		for future := range futures {
			if _, err := future.Wait(ctx); err != nil {
				failed <- err
				for range futures {
				}
				return
			}
		}
	}()
	for i := range n {
		future, err := c.PublishAsync(ctx, backlogQueue, client.Message{
			MessageID: fmt.Sprintf("%s-%d", prefix, i), Payload: payload})
		if err != nil {
			close(futures)
			t.Fatalf("publish: %v", err)
		}
		futures <- future
	}
	close(futures)
	if err := <-failed; err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}
}

// settledRSS reads the server's RSS once it has been idle a moment.
func settledRSS(t *testing.T, server *serverProcess) uint64 {
	t.Helper()
	time.Sleep(500 * time.Millisecond)
	rss, err := server.rssBytes()
	if err != nil {
		t.Fatal(err)
	}
	return rss
}

func assertQueueCounts(t *testing.T, c *client.Client, ready uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.QueueInfo(ctx, backlogQueue)
	if err != nil {
		t.Fatal(err)
	}
	if info.Ready != ready {
		t.Errorf("queue holds %d ready messages, want %d", info.Ready, ready)
	}
}

// stallConsumer subscribes on a raw connection with a small receive buffer
// and never reads again.
func stallConsumer(t *testing.T, address string, prefetch uint32) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	writer := wire.NewWriter(conn, 0)
	reader := wire.NewReader(conn, 0)
	if err := writer.WriteFrame(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "stalled"}); err != nil {
		t.Fatal(err)
	}
	if err := writer.WriteFrame(&wire.Subscribe{RequestID: 1, Queue: backlogQueue, Prefetch: prefetch}); err != nil {
		t.Fatal(err)
	}
	if err := writer.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // hello-ok, subscribe-ok
		tag, body, err := reader.Next()
		if err != nil {
			t.Fatalf("stalled consumer setup: %v", err)
		}
		if tag == wire.TagError {
			t.Fatalf("stalled consumer setup refused: %q", body)
		}
	}
	return conn
}
