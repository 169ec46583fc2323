package wire

// Allocation guarantees: hot frames encode and decode without allocating
// once buffers and frame values are reused, also through Writer and
// Reader; and no decoder allocates more than a small multiple of the body
// it is given, whatever lengths and counts the body claims.

import (
	"runtime"
	"testing"
)

// loopback is an in-memory byte pipe that reuses its storage.
type loopback struct {
	buf  []byte
	read int
}

func (l *loopback) Write(p []byte) (int, error) {
	if l.read == len(l.buf) {
		l.buf, l.read = l.buf[:0], 0
	}
	l.buf = append(l.buf, p...)
	return len(p), nil
}

func (l *loopback) Read(p []byte) (int, error) {
	n := copy(p, l.buf[l.read:])
	l.read += n
	return n, nil
}

func payload1KiB() []byte {
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(i)
	}
	return payload
}

func benchPublish(messages int) *Publish {
	publish := &Publish{Queue: []byte("orders"), Messages: make([]PublishMessage, messages)}
	for i := range publish.Messages {
		publish.Messages[i] = PublishMessage{Seq: uint64(i + 1), MessageID: []byte("m-000001"),
			Headers: jsonHeader, Payload: payload1KiB()}
	}
	return publish
}

func benchDeliver(messages int) *Deliver {
	deliver := &Deliver{SubscriptionID: 1, Deliveries: make([]Delivery, messages)}
	for i := range deliver.Deliveries {
		deliver.Deliveries[i] = Delivery{DeliveryTag: uint64(i + 1), Incarnation: 7, Offset: uint64(1000 + i),
			Attempt: 1, PublishUnixNanos: 1700000000123456789, MessageID: []byte("m-000001"),
			Headers: jsonHeader, Payload: payload1KiB()}
	}
	return deliver
}

// hotFrames are the frames of the hot path, each with a reusable value to
// decode into.
func hotFrames() map[string][2]Frame {
	return map[string][2]Frame{
		"publish": {benchPublish(4), new(Publish)},
		"deliver": {benchDeliver(4), new(Deliver)},
		"publish-idempotent": {&PublishIdempotent{Queue: []byte("orders"), ProducerID: []byte("p-1"),
			Messages: benchPublish(4).Messages}, new(PublishIdempotent)},
		"confirm-idempotent": {&ConfirmIdempotent{Ranges: []IdempotentRange{{1, 9, BoundaryDurable, false},
			{11, 11, BoundaryWritten, true}}}, new(ConfirmIdempotent)},
		"confirm": {&Confirm{Ranges: []ConfirmRange{{1, 9, BoundaryDurable}, {11, 11, BoundaryWritten}}}, new(Confirm)},
		"ack":     {&Ack{Settle{SubscriptionID: 1, DeliveryTags: []uint64{1, 2, 3}}}, new(Ack)},
		"nack":    {&Nack{SubscriptionID: 1, Requeue: true, DeliveryTags: []uint64{4}}, new(Nack)},
		"release": {&Release{Settle{SubscriptionID: 1, DeliveryTags: []uint64{5, 6}}}, new(Release)},
		"discard": {&Discard{Settle{SubscriptionID: 1, DeliveryTags: []uint64{7}}}, new(Discard)},
		"push": {&Push{Partition: 1000, Epoch: 3, StartOffset: 9, PreviousEpoch: 3, CommittedNext: 8, RecordCount: 1,
			Records: payload1KiB()}, new(Push)},
		"progress":         {&Progress{Partition: 1000, Epoch: 3, Instance: 7, DurableNext: 10}, new(Progress)},
		"progress-written": {&ProgressWritten{Partition: 1000, Epoch: 3, Instance: 7, DurableNext: 10, WrittenNext: 12}, new(ProgressWritten)},
		"page": {&Page{RequestID: 1, Partition: 1000, FromOffset: 9, FirstOffset: 0, EndOffset: 10, RecordCount: 1,
			Records: payload1KiB()}, new(Page)},
	}
}

func TestHotFramesDoNotAllocate(t *testing.T) {
	for name, pair := range hotFrames() {
		frame, into := pair[0], pair[1]
		buf := frame.Encode(nil)
		if err := into.Decode(buf[HeaderBytes:]); err != nil { // grow the value's slices once
			t.Fatal(err)
		}
		allocations := testing.AllocsPerRun(200, func() {
			buf = frame.Encode(buf[:0])
			if err := into.Decode(buf[HeaderBytes:]); err != nil {
				t.Fatal(err)
			}
		})
		if allocations != 0 {
			t.Errorf("%s: %.1f allocations per encode+decode, want 0", name, allocations)
		}
	}
	progress := make([]byte, 0, 64)
	allocations := testing.AllocsPerRun(200, func() {
		progress = EncodeProgress(progress[:0], 1000, 3, 7, 10, 12)
	})
	if allocations != 0 {
		t.Errorf("EncodeProgress: %.1f allocations, want 0", allocations)
	}
}

func TestStreamOfHotFramesDoesNotAllocate(t *testing.T) {
	pipe := &loopback{}
	writer, reader := NewWriter(pipe, 0), NewReader(pipe, 0)
	publish, deliver := benchPublish(1), benchDeliver(1)
	var publishInto Publish
	var deliverInto Deliver
	roundTrip := func() {
		if writer.WriteFrame(publish) != nil || writer.WriteFrame(deliver) != nil || writer.Flush() != nil {
			t.Fatal("write failed")
		}
		for _, into := range []Frame{&publishInto, &deliverInto} {
			_, body, err := reader.Next()
			if err != nil {
				t.Fatal(err)
			}
			if err := into.Decode(body); err != nil {
				t.Fatal(err)
			}
		}
	}
	roundTrip()
	if allocations := testing.AllocsPerRun(200, roundTrip); allocations != 0 {
		t.Errorf("%.1f allocations per publish+deliver through Writer and Reader, want 0", allocations)
	}
}

// bytesAllocated reports the heap bytes fn allocated.
// bytesAllocated reports what fn allocates. The counter is process-wide,
// so other goroutines (the runtime, parallel tests) can only add to it;
// fn is deterministic, so the smallest of a few measurements is its own.
func bytesAllocated(fn func()) uint64 {
	smallest := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		smallest = min(smallest, after.TotalAlloc-before.TotalAlloc)
	}
	return smallest
}

// TestDecodeAllocationIsBounded overwrites every 4-byte window of every
// golden body with 0xff (huge counts and lengths) and checks that no
// decode allocates more than 64 bytes per body byte plus a constant for
// the error value.
func TestDecodeAllocationIsBounded(t *testing.T) {
	const perBodyByte, constant = 64, 4096
	for _, c := range goldenCases() {
		tag := c.frame.Tag()
		body := c.frame.Encode(nil)[HeaderBytes:]
		for at := 0; at+4 <= len(body); at++ {
			damaged := append([]byte(nil), body...)
			copy(damaged[at:], []byte{0xff, 0xff, 0xff, 0xff})
			for _, input := range [][]byte{damaged, damaged[:at+4]} {
				frame := NewFrame(tag)
				allocated := bytesAllocated(func() { _ = frame.Decode(input) })
				if limit := uint64(perBodyByte*len(input) + constant); allocated > limit {
					t.Errorf("%s: body of %d bytes (0xff at %d) allocated %d bytes, limit %d",
						c.file, len(input), at, allocated, limit)
				}
			}
		}
	}
}
