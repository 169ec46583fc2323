package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
	"github.com/fibrilmq/fibril/wire"
)

func TestDeclareReportsEffectiveModeAndWarnings(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)

	durable := declare(t, c, "orders", client.QueueConfig{MaxDeliveries: 5, LeaseTimeout: 1500})
	if !durable.Created || durable.Mode != client.ModeDurable || len(durable.Warnings) != 0 {
		t.Fatalf("zero config: got %+v, want a created durable queue without warnings", durable)
	}
	state, _ := server.Queue("orders")
	if state.Mode != wire.ModeDurable || state.Options.MaxDeliveries != 5 || state.Options.LeaseTimeoutMs != 1 {
		t.Fatalf("the node got %+v; want durable, max_deliveries 5, a sub-millisecond lease rounded up to 1 ms", state)
	}

	buffered := declare(t, c, "clicks", client.QueueConfig{Mode: client.ModeBuffered})
	if buffered.Mode != client.ModeBuffered || len(buffered.Warnings) == 0 {
		t.Fatalf("buffered: got %+v, want mode buffered with a warning", buffered)
	}

	_, err := c.Declare(guardedContext(t), "clicks", client.QueueConfig{})
	if client.CodeOf(err) != wire.CodeModeConflict || client.IsRetryable(err) {
		t.Fatalf("re-declaring a buffered queue as durable: got %v, want a non-retryable mode_conflict", err)
	}

	kept := declare(t, c, "clicks", client.QueueConfig{KeepMode: true})
	if kept.Created || kept.Mode != client.ModeBuffered {
		t.Fatalf("KeepMode re-declare: got %+v, want the existing buffered mode", kept)
	}
	fresh := declare(t, c, "fresh", client.QueueConfig{KeepMode: true})
	if !fresh.Created || fresh.Mode != client.ModeDurable {
		t.Fatalf("KeepMode on a new queue: got %+v, want a created durable queue", fresh)
	}
}

// A node whose mode-less default is buffered (a cluster) reports it, and
// the SDK passes on what the node said, with FDK2 and, from an older node,
// FDK1 followed by queue info.
func TestKeepModeReportsTheModeTheNodeChose(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%t", legacy), func(t *testing.T) {
			server := startServer(t, clienttest.Config{DefaultMode: wire.ModeBuffered, LegacyDeclareOK: legacy})
			c := dial(t, client.Options{}, server)
			fresh := declare(t, c, "events", client.QueueConfig{KeepMode: true})
			if !fresh.Created || fresh.Mode != client.ModeBuffered {
				t.Fatalf("KeepMode on a new queue where the default is buffered: got %+v", fresh)
			}
			again := declare(t, c, "events", client.QueueConfig{KeepMode: true})
			if again.Created || again.Mode != client.ModeBuffered {
				t.Fatalf("KeepMode re-declare: got %+v", again)
			}
			if state, _ := server.Queue("events"); state.Mode != wire.ModeBuffered {
				t.Fatalf("the node holds %+v", state)
			}
		})
	}
}

func TestInvalidConfigIsRefusedBeforeSending(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	ctx := guardedContext(t)
	if _, err := c.Declare(ctx, "", client.QueueConfig{}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("empty name: got %v, want ErrInvalidConfig", err)
	}
	if _, err := c.Declare(ctx, "q", client.QueueConfig{LeaseTimeout: -1}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("negative lease: got %v, want ErrInvalidConfig", err)
	}
	if _, err := c.Publish(ctx, "bad\xffname", client.Message{}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("invalid UTF-8 queue name: got %v, want ErrInvalidConfig", err)
	}
	if got := server.Stats().Declares + server.Stats().PublishFrames; got != 0 {
		t.Fatalf("the node saw %d frames for refused requests; want none", got)
	}
}

func TestPublishConfirmStandsOnTheQueueBoundary(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "durable", client.QueueConfig{})
	declare(t, c, "buffered", client.QueueConfig{Mode: client.ModeBuffered})
	for queue, want := range map[string]client.Boundary{"durable": client.BoundaryDurable, "buffered": client.BoundaryWritten} {
		confirm, err := c.Publish(guardedContext(t), queue, client.Message{Payload: []byte("x")})
		if err != nil {
			t.Fatalf("publish to %s: %v", queue, err)
		}
		if confirm.Boundary != want || confirm.Queue != queue || confirm.Seq == 0 {
			t.Fatalf("publish to %s: confirm %+v, want boundary %s", queue, confirm, want)
		}
	}
}

func TestPublishToUnknownQueueIsRefusedNotRetryable(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	confirm, err := c.Publish(guardedContext(t), "missing", client.Message{Payload: []byte("x")})
	if client.CodeOf(err) != wire.CodeUnknownQueue || client.IsRetryable(err) || confirm.Err != err {
		t.Fatalf("got confirm %+v, err %v; want unknown_queue, not retryable", confirm, err)
	}
	if _, err := c.QueueInfo(guardedContext(t), "missing"); client.CodeOf(err) != wire.CodeUnknownQueue {
		t.Fatalf("info of a missing queue: got %v, want unknown_queue", err)
	}
}

func TestPipelinedPublishesConfirmInOrderWithBoundaries(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{Confirms: true}, server)
	declare(t, c, "pipe", client.QueueConfig{Mode: client.ModeBuffered})
	server.HoldConfirms(true)
	const count = 200
	ctx := guardedContext(t)
	futures := make([]*client.PublishFuture, count)
	for i := range futures {
		future, err := c.PublishAsync(ctx, "pipe", client.Message{Payload: fmt.Appendf(nil, "m%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = future
	}
	// Every message reaches the node while no confirm has come back: the
	// publishes are pipelined, not sent one per round trip.
	await(t, server, "all messages stored", func(s clienttest.Stats) bool { return s.Published == count })
	for _, future := range futures {
		select {
		case <-future.Done():
			t.Fatalf("publish %d completed before any confirm was sent", future.Seq())
		default:
		}
	}
	if frames := server.Stats().PublishFrames; frames > count {
		t.Fatalf("%d publish frames for %d messages", frames, count)
	}
	server.ReleaseConfirms(false)
	previous := uint64(0)
	for i := range count {
		confirm := waitResult(t, c.Confirms(), "confirm")
		if confirm.Err != nil || confirm.Boundary != client.BoundaryWritten {
			t.Fatalf("confirm %d: %+v, want the written boundary", i, confirm)
		}
		if confirm.Seq <= previous {
			t.Fatalf("confirm %d has seq %d after %d: confirms out of publish order", i, confirm.Seq, previous)
		}
		previous = confirm.Seq
	}
	for i, future := range futures {
		confirm, err := future.Wait(ctx)
		if err != nil || confirm.Seq != future.Seq() || confirm.Boundary != client.BoundaryWritten {
			t.Fatalf("future %d: %+v %v", i, confirm, err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestConfirmsArrivingOutOfOrderCompleteTheRightFutures(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	declare(t, c, "a", client.QueueConfig{})
	declare(t, c, "b", client.QueueConfig{Mode: client.ModeBuffered})
	server.HoldConfirms(true)
	ctx := guardedContext(t)
	var futures []*client.PublishFuture
	for i := range 20 {
		queue := []string{"a", "b"}[i%2]
		future, err := c.PublishAsync(ctx, queue, client.Message{Payload: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, future)
		// Each publish waits to be stored, so every one travels alone and
		// gets its own confirm range.
		await(t, server, "publish stored", func(s clienttest.Stats) bool { return s.Published == i+1 })
	}
	server.ReleaseConfirms(true)
	for _, future := range futures {
		confirm, err := future.Wait(ctx)
		want := map[string]client.Boundary{"a": client.BoundaryDurable, "b": client.BoundaryWritten}[future.Queue()]
		if err != nil || confirm.Boundary != want || confirm.Seq != future.Seq() {
			t.Fatalf("publish %d to %s: %+v %v; want boundary %s", future.Seq(), future.Queue(), confirm, err, want)
		}
	}
}

func TestAdminRequests(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	c := dial(t, client.Options{}, server)
	ctx := guardedContext(t)
	for i := range 250 {
		declare(t, c, fmt.Sprintf("q%03d", i), client.QueueConfig{})
	}
	declare(t, c, "other", client.QueueConfig{})
	queues, err := c.ListQueues(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if len(queues) != 250 || queues[0].Name != "q000" || queues[249].Name != "q249" {
		t.Fatalf("listed %d queues (the node pages by 100); want q000..q249", len(queues))
	}
	for range 3 {
		if _, err := c.Publish(ctx, "q001", client.Message{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.QueueInfo(ctx, "q001")
	if err != nil || info.Ready != 3 || info.Mode != client.ModeDurable {
		t.Fatalf("info: %+v %v; want 3 ready, durable", info, err)
	}
	if purged, err := c.PurgeQueue(ctx, "q001"); err != nil || purged != 3 {
		t.Fatalf("purge: %d %v; want 3", purged, err)
	}
	if deleted, err := c.DeleteQueue(ctx, "q001"); err != nil || deleted != 0 {
		t.Fatalf("delete: %d %v; want 0", deleted, err)
	}
	if _, err := c.DeleteQueue(ctx, "q001"); client.CodeOf(err) != wire.CodeUnknownQueue {
		t.Fatalf("second delete: %v; want unknown_queue", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMessageOverTheNodeLimitIsRefusedLocally(t *testing.T) {
	server := startServer(t, clienttest.Config{MaxBodyBytes: 1024})
	c := dial(t, client.Options{}, server)
	declare(t, c, "small", client.QueueConfig{})
	ctx := guardedContext(t)
	if _, err := c.Publish(ctx, "small", client.Message{Payload: make([]byte, 2000)}); !errors.Is(err, client.ErrMessageTooLarge) {
		t.Fatalf("got %v, want ErrMessageTooLarge", err)
	}
	// Many messages that fit one by one are split across frames under the
	// limit, and the connection stays up.
	var futures []*client.PublishFuture
	for range 10 {
		future, err := c.PublishAsync(ctx, "small", client.Message{Payload: make([]byte, 400)})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, future)
	}
	for _, future := range futures {
		if _, err := future.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if stats := server.Stats(); stats.Connections != 1 || stats.PublishFrames < 5 {
		t.Fatalf("stats %+v: want one connection and 400-byte messages at most two to a 1 KiB frame", stats)
	}
}

func TestAuthTokenRefusalFailsDial(t *testing.T) {
	server := startServer(t, clienttest.Config{AuthToken: []byte("secret")})
	_, err := client.Dial(guardedContext(t), client.Options{Addresses: []string{server.Addr()}, AuthToken: []byte("wrong")})
	if client.CodeOf(err) != wire.CodeUnauthorized {
		t.Fatalf("got %v, want unauthorized", err)
	}
	c := dial(t, client.Options{AuthToken: []byte("secret")}, server)
	if _, err := c.Ping(guardedContext(t)); err != nil {
		t.Fatal(err)
	}
}

func TestDialTriesEveryAddress(t *testing.T) {
	server := startServer(t, clienttest.Config{})
	dead := startServer(t, clienttest.Config{})
	deadAddress := dead.Addr()
	dead.Close()
	c, err := client.Dial(guardedContext(t), client.Options{Addresses: []string{deadAddress, server.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if session, ok := c.Session(); !ok || session.Address != server.Addr() || session.Resumed {
		t.Fatalf("session %+v: want a new session at %s", session, server.Addr())
	}
	if _, err := client.Dial(guardedContext(t), client.Options{Addresses: []string{deadAddress}}); err == nil {
		t.Fatal("dialing only a dead address succeeded")
	}
	if _, err := client.Dial(guardedContext(t), client.Options{}); !errors.Is(err, client.ErrNoAddresses) {
		t.Fatalf("no addresses: got %v", err)
	}
}
