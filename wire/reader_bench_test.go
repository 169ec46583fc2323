package wire

import (
	"bytes"
	"testing"
)

// BenchmarkReaderLargeFrame reads one large publish frame per iteration
// through a Reader from an in-memory stream handing out 64 KiB per read,
// as a socket would. It measures what growing the buffer with the bytes
// that arrive costs against sizing it from the header.
func BenchmarkReaderLargeFrame(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"256KiB", 256 << 10}, {"4MiB", 4 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			frame := (&Publish{Queue: []byte("q"), Messages: []PublishMessage{{Seq: 1, Payload: make([]byte, size.bytes)}}}).Encode(nil)
			source := &chunkedSource{chunkBytes: 64 << 10}
			reader := NewReader(source, 0)
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				source.data.Reset()
				source.data.Write(frame)
				if _, body, err := reader.Next(); err != nil || len(body) != len(frame)-HeaderBytes {
					b.Fatalf("Next: %d bytes, %v", len(body), err)
				}
			}
		})
	}
}

// chunkedSource hands out at most chunkBytes per Read.
type chunkedSource struct {
	data       bytes.Buffer
	chunkBytes int
}

func (c *chunkedSource) Read(p []byte) (int, error) {
	return c.data.Read(p[:min(len(p), c.chunkBytes)])
}
