package actors

// Unclean stops with deliveries outstanding, now that a publish and the
// lease that delivers it share one append (and, on a durable queue, one
// fsync), and acks complete at the written boundary: a process kill keeps
// what was written (the page cache survives), a power loss only what was
// synced. Either way nothing confirmed is lost, and every message that was
// delivered and not settled for good comes back marked redelivered with
// its attempt counted (docs/durability.md, "What an ack on a durable queue
// survives").

import (
	"fmt"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

func TestUncleanStopReturnsEveryUnsettledMessageMarked(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode wire.Mode
		// kill keeps every write (the page cache survives a process kill);
		// otherwise a power loss keeps only synced bytes.
		kill bool
	}{
		{"kill, durable", wire.ModeDurable, true},
		{"kill, buffered", wire.ModeBuffered, true},
		{"power loss, durable", wire.ModeDurable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			config := testConfig(t, "/data")
			config.FS = mem
			config.SyncInterval = 0 // nothing syncs the acks but what the test does
			first := startBrokerOn(t, config)
			c := connect(t, first)
			boundary := wire.BoundaryDurable
			if tc.mode == wire.ModeBuffered {
				boundary = wire.BoundaryWritten
			}
			c.mustDeclare("work", tc.mode, wire.QueueOptions{})
			const prefetch = 8
			sub := c.subscribe("work", prefetch)
			var confirmed []string
			for i := range prefetch {
				payload := fmt.Sprintf("m%d", i)
				c.mustConfirm("work", boundary, payload) // each leased to the consumer in its own append
				confirmed = append(confirmed, payload)
			}
			delivered := map[string]wire.Delivery{}
			for len(delivered) < prefetch {
				for _, d := range c.nextDeliver(sub) {
					if d.Redelivered || d.Attempt != 1 {
						t.Fatalf("first delivery %s marked: %+v", d.Payload, d)
					}
					delivered[string(d.Payload)] = d
				}
			}
			// Ack three, each its own record, and wait until they are
			// written: in the page cache, not covered by any sync.
			written := c.info("work").WrittenNext
			acked := map[string]bool{}
			for _, payload := range confirmed[:3] {
				c.ack(sub, delivered[payload].DeliveryTag)
				acked[payload] = true
			}
			waitFor(t, "the acks to be written", func() bool { return c.info("work").WrittenNext == written+3 })
			if info := c.info("work"); tc.mode == wire.ModeDurable && info.DurableNext > written {
				t.Fatalf("the acks were synced (durable %d, written %d): the test proves nothing", info.DurableNext, written)
			}

			clone := mem.CrashClone(vfs.CrashOptions{KeepUnsynced: tc.kill})
			config.FS = clone
			// The drain's acks on a durable queue apply once a sync covers
			// them: background sync back on.
			config.SyncInterval = DefaultSyncInterval
			second := startBrokerOn(t, config)
			c2 := connect(t, second)
			again := drain(t, c2, "work")
			for _, payload := range confirmed {
				d, back := again[payload]
				switch {
				case acked[payload] && tc.kill:
					if back {
						t.Fatalf("%s was acked and written before the kill, and came back: %+v", payload, d)
					}
				case !back:
					t.Fatalf("confirmed %s lost (acked: %v)", payload, acked[payload])
				case !d.Redelivered || d.Attempt != 2:
					t.Fatalf("%s was delivered before the stop and came back as %+v", payload, d)
				}
			}
			if len(again) > len(confirmed) {
				t.Fatalf("%d messages after the stop, %d were confirmed", len(again), len(confirmed))
			}
		})
	}
}
