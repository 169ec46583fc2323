package queue

import (
	"errors"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// handOff publishes a dead-letter instruction to its target the way the
// broker does, keeping the message id, and returns the target's confirm.
func handOff(t *testing.T, letter DeadLetter, targets map[string]*memQueue, source string) Confirm {
	t.Helper()
	target := targets[letter.Target]
	if target == nil {
		t.Fatalf("no queue %q", letter.Target)
	}
	headers := append(append([]Header(nil), letter.Headers...), Header{Key: "dead-letter-source", Value: source})
	return target.publish(Message{ID: letter.MessageID, Headers: headers, Payload: letter.Payload})
}

// TestDeadLetterChainAcrossModes follows one message from a durable queue
// to a buffered dead-letter queue and on to a durable one, with a crash
// between the target's confirm and the source's marker.
func TestDeadLetterChainAcrossModes(t *testing.T) {
	fs := vfs.NewMem()
	a := openMemQueue(t, fs, "/a", Options{Mode: Durable, MaxDeliveries: 2, DeadLetterQueue: "b"})
	b := openMemQueue(t, fs, "/b", Options{Mode: Buffered, MaxDeliveries: 1, DeadLetterQueue: "c"})
	c := openMemQueue(t, fs, "/c", Options{Mode: Durable})
	queues := map[string]*memQueue{"a": a, "b": b, "c": c}

	a.publish(Message{ID: "order-1", Headers: []Header{{Key: "trace", Value: "t1"}}, Payload: []byte("payload")})
	var letters []DeadLetter
	for attempt := 1; attempt <= 2; attempt++ {
		d := a.lease(1, 1).Deliveries
		if len(d) != 1 || d[0].Attempt != uint32(attempt) {
			t.Fatalf("attempt %d: %+v", attempt, d)
		}
		letters = a.must(a.q.Nack(1, []uint64{d[0].Offset}, 0)).DeadLetters
	}
	if len(letters) != 1 || letters[0].Target != "b" || letters[0].MessageID != "order-1" || letters[0].Attempts != 2 {
		t.Fatalf("dead letter from a: %+v", letters)
	}
	if confirm := handOff(t, letters[0], queues, "a"); confirm.Boundary != BoundaryWritten {
		t.Fatalf("buffered target confirmed at %v", confirm.Boundary)
	}

	// Crash a before it writes the marker: the handoff is issued again.
	a.crash(false)
	a.reopen(fs)
	again := a.await(0).DeadLetters
	if len(again) != 1 || again[0].Offset != letters[0].Offset || again[0].MessageID != "order-1" ||
		again[0].Incarnation != letters[0].Incarnation {
		t.Fatalf("handoff after restart: %+v", again)
	}
	if info := a.q.Info(); info.Counts.DeadLettering != 1 {
		t.Fatalf("a after restart: %+v", info.Counts)
	}
	handOff(t, again[0], queues, "a") // the broker hands it again: b now holds a duplicate
	a.must(a.q.DeadLettered([]uint64{again[0].Offset}))
	if info := a.q.Info(); info.Counts.DeadLettered != 1 || info.Counts.DeadLettering != 0 {
		t.Fatalf("a after the marker: %+v", info.Counts)
	}

	// b: both copies fail once and go on to c.
	d := b.lease(7, 5).Deliveries
	if len(d) != 2 || d[0].MessageID != "order-1" || d[1].MessageID != "order-1" {
		t.Fatalf("b deliveries %+v", d)
	}
	fromB := b.must(b.q.Nack(7, []uint64{d[0].Offset, d[1].Offset}, 0)).DeadLetters
	if len(fromB) != 2 {
		t.Fatalf("dead letters from b: %+v", fromB)
	}
	for _, letter := range fromB {
		if confirm := handOff(t, letter, queues, "b"); confirm.Boundary != BoundaryDurable {
			t.Fatalf("durable target confirmed at %v", confirm.Boundary)
		}
		b.must(b.q.DeadLettered([]uint64{letter.Offset}))
	}
	final := c.lease(9, 5).Deliveries
	if len(final) != 2 || string(final[0].Payload) != "payload" || final[0].MessageID != "order-1" {
		t.Fatalf("c deliveries %+v", final)
	}
	if len(final[0].Headers) != 3 || final[0].Headers[0].Value != "t1" {
		t.Fatalf("headers along the chain: %+v", final[0].Headers)
	}
	for _, q := range queues {
		_ = q.q.Close()
	}
}

// A reject (a consumer's nack without requeue) dead-letters at once with
// the attempt counted, well before MaxDeliveries, and a restart replays it
// the same way; without a dead-letter queue it drops the message.
func TestRejectDeadLettersAtOnce(t *testing.T) {
	fs := vfs.NewMem()
	a := openMemQueue(t, fs, "/a", Options{Mode: Durable, MaxDeliveries: 5, DeadLetterQueue: "a.dead"})
	a.publish(Message{ID: "order-1", Payload: []byte("payload")})
	d := a.lease(1, 1).Deliveries
	if len(d) != 1 {
		t.Fatalf("deliveries %+v", d)
	}
	letters := a.must(a.q.Reject(1, []uint64{d[0].Offset})).DeadLetters
	if len(letters) != 1 || letters[0].Target != "a.dead" || letters[0].MessageID != "order-1" ||
		letters[0].Attempts != 1 || string(letters[0].Payload) != "payload" {
		t.Fatalf("dead letters after a reject: %+v", letters)
	}
	if counts := a.q.Info().Counts; counts.DeadLettering != 1 || counts.Leased != 0 || counts.Ready != 0 {
		t.Fatalf("counts after a reject: %+v", counts)
	}
	if _, err := a.q.Reject(1, []uint64{d[0].Offset}); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("a second reject: %v", err)
	}

	a.crash(false)
	a.reopen(fs)
	again := a.await(0).DeadLetters
	if len(again) != 1 || again[0].Offset != d[0].Offset || again[0].Attempts != 1 {
		t.Fatalf("handoff after restart: %+v", again)
	}
	a.must(a.q.DeadLettered([]uint64{again[0].Offset}))
	if counts := a.q.Info().Counts; counts.DeadLettered != 1 || counts.DeadLettering != 0 {
		t.Fatalf("counts after the marker: %+v", counts)
	}

	b := openMemQueue(t, fs, "/b", Options{Mode: Buffered})
	b.publish(Message{ID: "order-2", Payload: []byte("payload")})
	d = b.lease(1, 1).Deliveries
	if progress := b.must(b.q.Reject(1, offsetsOf(d))); len(progress.DeadLetters) != 0 {
		t.Fatalf("a queue without a dead-letter queue issued %+v", progress.DeadLetters)
	}
	if counts := b.q.Info().Counts; counts.DeadLettered != 1 || counts.Ready != 0 || counts.Leased != 0 ||
		counts.DeadLettering != 0 {
		t.Fatalf("counts after a reject without a dead-letter queue: %+v", counts)
	}
}
