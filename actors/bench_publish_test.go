package actors

// Benchmarks of the publish hot path over real TCP against an in-process
// node: one connection publishes to a buffered queue with a window of
// messages in flight, and a reader counts the confirms. ns/op is per
// message, publish to confirm, everything included (client encode, socket,
// reader goroutine, session, partition, log write, confirm back);
// cpu-ns/msg is the process's CPU time (client and node) per message.
//
//	go test ./actors -run '^$' -bench Publish -benchtime 200000x -count 5

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

func BenchmarkPublishConfirmOneMessageFrames(b *testing.B) {
	benchmarkPublishConfirm(b, 1)
}

func BenchmarkPublishConfirm64MessageFrames(b *testing.B) {
	benchmarkPublishConfirm(b, 64)
}

func benchmarkPublishConfirm(b *testing.B, perFrame int) {
	config := DefaultConfig()
	config.DataDir = b.TempDir()
	config.ListenAddr = "127.0.0.1:0"
	broker, err := Start(config)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := broker.Close(); err != nil {
			b.Errorf("close: %v", err)
		}
	})
	c := benchClient(b, broker)
	c.writer.WriteFrame(&wire.Declare{RequestID: 1, Queue: "bench", Mode: wire.ModeBuffered})
	c.writer.Flush()
	if _, _, err := c.reader.Next(); err != nil {
		b.Fatal(err)
	}
	const window = 4096
	var confirmed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var frame wire.Confirm
		for {
			tag, body, err := c.reader.Next()
			if err != nil {
				return
			}
			if tag != wire.TagConfirm || frame.Decode(body) != nil {
				continue
			}
			for _, r := range frame.Ranges {
				confirmed.Add(int64(r.Last - r.First + 1))
			}
		}
	}()
	payload := make([]byte, 100)
	frame := &wire.Publish{Queue: []byte("bench")}
	var seq uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpuBefore := processCPU()
	for sent := 0; sent < b.N; {
		for int64(sent)-confirmed.Load() > window {
			time.Sleep(20 * time.Microsecond)
		}
		frame.Messages = frame.Messages[:0]
		for range min(perFrame, b.N-sent) {
			seq++
			frame.Messages = append(frame.Messages, wire.PublishMessage{Seq: seq, Payload: payload})
		}
		sent += len(frame.Messages)
		if err := c.writer.WriteFrame(frame); err != nil {
			b.Fatal(err)
		}
		if err := c.writer.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	for confirmed.Load() < int64(b.N) {
		time.Sleep(20 * time.Microsecond)
	}
	b.StopTimer()
	// CPU time of the whole process (client and node) per message: less
	// sensitive than wall time to other work on a shared machine.
	b.ReportMetric(float64((processCPU()-cpuBefore).Nanoseconds())/float64(b.N), "cpu-ns/msg")
	c.conn.Close()
	<-done
}

// benchClient dials and completes hello without a *testing.T.
func benchClient(b *testing.B, broker *Broker) *perfClient {
	b.Helper()
	conn, err := net.Dial("tcp", broker.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := &perfClient{conn: conn, writer: wire.NewWriter(conn, 0), reader: wire.NewReader(conn, 0)}
	c.writer.WriteFrame(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "bench"})
	c.writer.Flush()
	if _, _, err := c.reader.Next(); err != nil {
		b.Fatal(err)
	}
	return c
}
