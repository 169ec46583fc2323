package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

func TestBackoffDelayDoublesWithinJitterAndCaps(t *testing.T) {
	initial, max := 10*time.Millisecond, 100*time.Millisecond
	for failures, ceiling := range []time.Duration{10, 20, 40, 80, 100, 100, 100} {
		ceiling *= time.Millisecond
		low := backoffDelay(failures, initial, max, func() float64 { return 0 })
		high := backoffDelay(failures, initial, max, func() float64 { return 0.999999 })
		if low != ceiling/2 || high < ceiling*99/100 || high > ceiling {
			t.Fatalf("after %d failures: delays [%s, %s], want [%s, %s]", failures, low, high, ceiling/2, ceiling)
		}
	}
	if d := backoffDelay(1000, initial, max, func() float64 { return 0.5 }); d != 75*time.Millisecond {
		t.Fatalf("many failures: %s, want the cap's midpoint 75ms", d)
	}
}

func TestPendingTableTakesRangesAndFailsEverythingOnce(t *testing.T) {
	table := newPendingTable()
	futures := make(map[uint64]*PublishFuture)
	for _, seq := range []uint64{2, 3, 5, 9, 1 << 40} {
		futures[seq] = &PublishFuture{seq: seq}
		if err := table.addPublish(seq, futures[seq]); err != nil {
			t.Fatal(err)
		}
	}
	taken := table.takePublishRange(3, 9, nil)
	seqs := []uint64{}
	for _, future := range taken {
		seqs = append(seqs, future.seq)
	}
	slices.Sort(seqs)
	if !slices.Equal(seqs, []uint64{3, 5, 9}) {
		t.Fatalf("range [3, 9] took %v", seqs)
	}
	// A range far larger than the table walks the table, not the range.
	if taken := table.takePublishRange(1, 1<<63, nil); len(taken) != 2 {
		t.Fatalf("huge range took %d, want the remaining 2", len(taken))
	}
	if err := table.addRequest(1, &pendingRequest{done: make(chan reply, 1)}); err != nil {
		t.Fatal(err)
	}
	table.addPublish(7, &PublishFuture{seq: 7})
	requests, publishes := table.failAll(ErrConnectionLost)
	if len(requests) != 1 || len(publishes) != 1 {
		t.Fatalf("failAll returned %d requests, %d publishes; want 1 and 1", len(requests), len(publishes))
	}
	if err := table.addRequest(2, &pendingRequest{}); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("add after failAll: %v", err)
	}
	if requests, publishes := table.failAll(ErrClosed); requests != nil || publishes != nil {
		t.Fatal("a second failAll returned entries")
	}
}

func TestWindowServesWaitersInOrderAndWakesThemOnClose(t *testing.T) {
	w := newWindow(1)
	ctx := context.Background()
	if err := w.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.acquire(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire on a full window with a canceled context: %v", err)
	}
	granted := make(chan error, 1)
	go func() { granted <- w.acquire(ctx) }()
	for {
		w.mu.Lock()
		waiting := len(w.waiters)
		w.mu.Unlock()
		if waiting == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.release()
	if err := <-granted; err != nil {
		t.Fatalf("the waiter got %v, want the released place", err)
	}
	idle := make(chan error, 1)
	go func() { idle <- w.awaitIdle(ctx) }()
	w.release()
	if err := <-idle; err != nil || w.held != 0 {
		t.Fatalf("awaitIdle: %v, held %d", err, w.held)
	}
	w.close()
	if err := w.acquire(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
}

func TestSettlesGatheredBeforeTheWriterRunsShareOneFramePerKind(t *testing.T) {
	var out bytes.Buffer
	c := &conn{done: make(chan struct{}), settleKick: make(chan struct{}, 1), pending: newPendingTable(),
		writing: writerState{writer: wire.NewWriter(&out, 0)}}
	b := &binding{conn: c, id: 7, prefetch: 10}
	b.live.Store(6)
	deliveries := make([]*Delivery, 6)
	for i := range deliveries {
		deliveries[i] = &Delivery{binding: b, tag: uint64(i + 1)}
	}
	for i, settle := range []func(*Delivery) error{
		(*Delivery).Ack, (*Delivery).Ack,
		func(d *Delivery) error { return d.Nack(true, 0) }, func(d *Delivery) error { return d.Nack(true, 0) },
		func(d *Delivery) error { return d.Nack(false, 5*time.Millisecond) }, (*Delivery).Release,
	} {
		if err := settle(deliveries[i]); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.settleKick) != 1 || b.live.Load() != 0 {
		t.Fatalf("kick %d, unsettled %d: want one kick and nothing unsettled", len(c.settleKick), b.live.Load())
	}
	c.writeDirtySettles()
	c.writing.writer.Flush()
	reader := wire.NewReader(&out, 0)
	var got []string
	for {
		tag, body, err := reader.Next()
		if err != nil {
			break
		}
		frame, err := wire.DecodeFrame(tag, body)
		if err != nil {
			t.Fatal(err)
		}
		switch f := frame.(type) {
		case *wire.Ack:
			got = append(got, "ack", tagsOf(f.DeliveryTags))
		case *wire.Release:
			got = append(got, "release", tagsOf(f.DeliveryTags))
		case *wire.Nack:
			got = append(got, "nack", tagsOf(f.DeliveryTags))
			if f.Requeue == (f.DelayMs == 5) {
				t.Fatalf("nack %+v mixes the requeue and delay of two groups", f)
			}
		}
	}
	want := []string{"ack", "1,2", "release", "6", "nack", "3,4", "nack", "5"}
	if !slices.Equal(got, want) {
		t.Fatalf("frames %v, want %v", got, want)
	}
}

func tagsOf(tags []uint64) string {
	var out []byte
	for i, tag := range tags {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, byte('0'+tag))
	}
	return string(out)
}

// Every refusal the protocol calls retryable is retryable to the SDK,
// overloaded (a queue whose log has too many publishes waiting) included,
// and the request errors that are not stay so.
func TestRetryableCodes(t *testing.T) {
	for code, want := range map[wire.Code]bool{
		wire.CodeOverloaded: true, wire.CodeUnavailable: true, wire.CodeLimitReached: true,
		wire.CodeFenced: true, wire.CodeStorageFailure: true, wire.CodeNotOwner: true,
		wire.CodeUnknownQueue: false, wire.CodeInvalidRequest: false, wire.Code(299): false,
	} {
		err := fmt.Errorf("publish: %w", &ServerError{Code: code, Message: "refused"})
		if got := IsRetryable(err); got != want {
			t.Errorf("IsRetryable(%s) = %v, want %v", code, got, want)
		}
		if CodeOf(err) != code {
			t.Errorf("CodeOf(%s) = %s", code, CodeOf(err))
		}
	}
}
