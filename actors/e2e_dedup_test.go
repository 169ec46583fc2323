package actors

// Idempotent publishing end to end, at the frame level: FPB2 duplicates
// are confirmed with FCF2 marked duplicate and stored once; FPB1 repeats of
// a message id are stored once and confirmed with FCF1 as before; the
// declare options, the re-declare rule, queue info and /metrics.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// publishIdempotent sends one FPB2 frame of (producer seq, message id)
// messages and returns their wire sequence numbers.
func (c *testClient) publishIdempotent(queueName, producer string, producerSeqs []uint64, ids []string) []uint64 {
	c.t.Helper()
	frame := &wire.PublishIdempotent{Queue: []byte(queueName), ProducerID: []byte(producer)}
	var seqs []uint64
	for i, producerSeq := range producerSeqs {
		c.nextSeq++
		seqs = append(seqs, c.nextSeq)
		frame.Messages = append(frame.Messages, wire.PublishMessage{Seq: c.nextSeq, ProducerSeq: producerSeq,
			MessageID: []byte(ids[i]), Payload: []byte("x")})
	}
	c.send(frame)
	return seqs
}

// awaitIdempotentConfirms waits for FCF2 ranges covering seqs and returns
// each number's duplicate flag.
func (c *testClient) awaitIdempotentConfirms(seqs []uint64) map[uint64]bool {
	c.t.Helper()
	got := map[uint64]bool{}
	for len(got) < len(seqs) {
		frame := c.waitFor("idempotent confirms", func(frame wire.Frame) bool {
			switch frame.(type) {
			case *wire.ConfirmIdempotent, *wire.Confirm, *wire.NegativeConfirm:
				return true
			}
			return false
		})
		confirm, ok := frame.(*wire.ConfirmIdempotent)
		if !ok {
			c.t.Fatalf("an FPB2 publish was answered with %s (%+v), want FCF2", frame.Tag(), frame)
		}
		for _, r := range confirm.Ranges {
			if r.Boundary != wire.BoundaryDurable {
				c.t.Fatalf("range %+v of a durable queue", r)
			}
			for seq := r.First; seq <= r.Last; seq++ {
				got[seq] = r.Duplicate
			}
		}
	}
	return got
}

func TestIdempotentPublishIsStoredOnceAndMarked(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("orders", wire.ModeDurable, wire.QueueOptions{Dedup: true})

	first := c.publishIdempotent("orders", "producer-1", []uint64{1, 2}, []string{"", "order-9"})
	for seq, duplicate := range c.awaitIdempotentConfirms(first) {
		if duplicate {
			t.Fatalf("seq %d of the first publish confirmed as a duplicate", seq)
		}
	}
	// The retry after a lost confirm: same producer pairs, new wire numbers;
	// message 3 is new, message 4 repeats order-9 under another number.
	again := c.publishIdempotent("orders", "producer-1", []uint64{1, 2, 3, 4}, []string{"", "", "", "order-9"})
	got := c.awaitIdempotentConfirms(again)
	want := []bool{true, true, false, true}
	for i, seq := range again {
		if got[seq] != want[i] {
			t.Fatalf("seq %d (producer seq %d): duplicate %v, want %v", seq, i+1, got[seq], want[i])
		}
	}
	// An FPB1 publisher that repeats a message id is confirmed as before,
	// and the queue still stores the message once.
	plain := &wire.Publish{Queue: []byte("orders")}
	for range 2 {
		c.nextSeq++
		plain.Messages = append(plain.Messages, wire.PublishMessage{Seq: c.nextSeq, MessageID: []byte("plain-1"), Payload: []byte("y")})
	}
	c.send(plain)
	for seq, out := range c.awaitOutcomes([]uint64{plain.Messages[0].Seq, plain.Messages[1].Seq}) {
		if !out.confirmed {
			t.Fatalf("FPB1 seq %d: %+v", seq, out)
		}
	}
	info := waitForInfo(t, c, "orders", func(info wire.QueueInfo) bool { return info.Ready == 4 })
	if info.Options.DedupWindowMs != 120_000 || info.Options.DedupMaxEntries != 100_000 {
		t.Fatalf("options %+v: dedup: true takes the 2 min default window and the default bound", info.Options)
	}
	if info.Dedup == nil || info.Dedup.Entries != 5 || info.Dedup.Refused != 4 || info.Dedup.OldestUnixMs == 0 {
		t.Fatalf("dedup stats %+v, want 5 entries (3 producer pairs, 2 ids) and 4 refused", info.Dedup)
	}
	var metrics bytes.Buffer
	b.Metrics().WritePrometheus(&metrics)
	for _, line := range []string{`fibril_publish_duplicates_total{queue="orders"} 4`, `fibril_queue_dedup_entries{queue="orders"} 5`,
		`fibril_queue_dedup_evicted_early_total{queue="orders"} 0`} {
		if !strings.Contains(metrics.String(), line) {
			t.Fatalf("metrics lack %q", line)
		}
	}
}

func TestDedupOptionsAreFixedAtFirstDeclare(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("plain", wire.ModeDurable, wire.QueueOptions{})
	c.mustDeclare("windowed", wire.ModeDurable, wire.QueueOptions{DedupWindowMs: 5000, DedupMaxEntries: 10})
	for _, retry := range []struct {
		queue   string
		options wire.QueueOptions
		ok      bool
	}{
		{"plain", wire.QueueOptions{Dedup: true}, false},
		{"plain", wire.QueueOptions{DedupWindowMs: 1000}, false},
		{"windowed", wire.QueueOptions{Dedup: true}, true}, // it deduplicates: "dedup" names no window
		{"windowed", wire.QueueOptions{DedupWindowMs: 5000, DedupMaxEntries: 10}, true},
		{"windowed", wire.QueueOptions{DedupWindowMs: 6000}, false},
		{"windowed", wire.QueueOptions{DedupMaxEntries: 11}, false},
	} {
		reply := c.declare(retry.queue, wire.ModeUnset, retry.options)
		refused, isError := reply.(*wire.ErrorFrame)
		switch {
		case retry.ok && isError:
			t.Fatalf("re-declare of %s with %+v refused: %s", retry.queue, retry.options, refused.Message)
		case !retry.ok && (!isError || refused.Code != wire.CodeInvalidOptions):
			t.Fatalf("re-declare of %s with %+v answered %+v, want invalid_options", retry.queue, retry.options, reply)
		}
	}
	if reply, ok := c.declare("huge", wire.ModeDurable, wire.QueueOptions{DedupWindowMs: 1000, DedupMaxEntries: 20_000_000}).(*wire.ErrorFrame); !ok ||
		reply.Code != wire.CodeInvalidOptions {
		t.Fatalf("a bound over the maximum was not refused: %+v", reply)
	}
	if info := c.info("plain"); info.Dedup != nil || info.Options.DedupWindowMs != 0 {
		t.Fatalf("a queue without a window reports %+v, %+v", info.Dedup, info.Options)
	}
}
