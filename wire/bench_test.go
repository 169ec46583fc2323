package wire

// Benchmarks of the hot frames with 1 KiB payloads, reusing buffers and
// frame values as a connection loop does. Run:
//
//	go test ./wire -run '^$' -bench . -benchmem
//
// docs/protocol.md (appendix B) records measured figures.

import (
	"testing"
)

func benchmarkFrame(b *testing.B, frame Frame, into Frame) {
	buf := frame.Encode(nil)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			buf = frame.Encode(buf[:0])
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			if err := into.Decode(buf[HeaderBytes:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode+decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			buf = frame.Encode(buf[:0])
			if err := into.Decode(buf[HeaderBytes:]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPublish1KiB: one message of 1 KiB with an 8-byte id and one
// header, per frame.
func BenchmarkPublish1KiB(b *testing.B) { benchmarkFrame(b, benchPublish(1), new(Publish)) }

// BenchmarkDeliver1KiB: one delivery of 1 KiB with an 8-byte id and one
// header, per frame.
func BenchmarkDeliver1KiB(b *testing.B) { benchmarkFrame(b, benchDeliver(1), new(Deliver)) }

// BenchmarkPublishBatch64x1KiB: 64 messages per frame; ns/msg is per
// message.
func BenchmarkPublishBatch64x1KiB(b *testing.B) {
	frame, into := benchPublish(64), new(Publish)
	buf := frame.Encode(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = frame.Encode(buf[:0])
		if err := into.Decode(buf[HeaderBytes:]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/msg")
}

// BenchmarkConfirm: a confirm of two ranges.
func BenchmarkConfirm(b *testing.B) {
	benchmarkFrame(b, &Confirm{Ranges: []ConfirmRange{{1, 64, BoundaryDurable}, {66, 70, BoundaryWritten}}}, new(Confirm))
}

// BenchmarkStreamPublishDeliver1KiB: a publish and a deliver written by a
// Writer, flushed, read by a Reader and decoded, over an in-memory pipe.
func BenchmarkStreamPublishDeliver1KiB(b *testing.B) {
	pipe := &loopback{}
	writer, reader := NewWriter(pipe, 0), NewReader(pipe, 0)
	publish, deliver := benchPublish(1), benchDeliver(1)
	var publishInto Publish
	var deliverInto Deliver
	b.ReportAllocs()
	for b.Loop() {
		if writer.WriteFrame(publish) != nil || writer.WriteFrame(deliver) != nil || writer.Flush() != nil {
			b.Fatal("write failed")
		}
		for _, into := range []Frame{&publishInto, &deliverInto} {
			_, body, err := reader.Next()
			if err != nil {
				b.Fatal(err)
			}
			if err := into.Decode(body); err != nil {
				b.Fatal(err)
			}
		}
	}
}
