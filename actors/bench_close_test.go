package actors

// How long Broker.Close takes with 100 queues and traffic in flight:
// each iteration starts a node on a temporary directory, declares 100
// queues (half durable, half buffered), subscribes a consumer to every
// tenth, and keeps four connections publishing pipelined frames to all of
// them; Close starts while those publishes stream in. Only Close is timed;
// every sample is logged raw.
//
//	go test ./actors -run '^$' -bench CloseWith100Queues -benchtime 5x -v

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

func BenchmarkCloseWith100QueuesAndTraffic(b *testing.B) {
	const queues = 100
	for i := range b.N {
		b.StopTimer()
		config := DefaultConfig()
		config.DataDir = b.TempDir()
		config.ListenAddr = "127.0.0.1:0"
		logs := &logBuffer{}
		config.Logger = logs.logger()
		broker, err := Start(config)
		if err != nil {
			b.Fatal(err)
		}
		setup := benchClient(b, broker)
		names := make([]string, queues)
		for q := range queues {
			names[q] = fmt.Sprintf("q%03d", q)
			mode := wire.ModeDurable
			if q%2 == 1 {
				mode = wire.ModeBuffered
			}
			setup.writer.WriteFrame(&wire.Declare{RequestID: uint64(q + 1), Queue: names[q], Mode: mode})
		}
		setup.writer.Flush()
		for range queues {
			if _, _, err := setup.reader.Next(); err != nil {
				b.Fatal(err)
			}
		}
		for q := 0; q < queues; q += 10 {
			setup.writer.WriteFrame(&wire.Subscribe{RequestID: uint64(1000 + q), Queue: names[q], Prefetch: 64})
		}
		setup.writer.Flush()
		go func() { _, _ = io.Copy(io.Discard, setup.conn) }()
		stop := make(chan struct{})
		var publishers sync.WaitGroup
		for p := range 4 {
			conn := benchClient(b, broker)
			publishers.Add(1)
			go publishUntilClosed(&publishers, conn, names, p, stop)
		}
		time.Sleep(500 * time.Millisecond) // traffic is flowing
		b.StartTimer()
		began := time.Now()
		err = broker.Close()
		elapsed := time.Since(began)
		b.StopTimer()
		close(stop)
		publishers.Wait()
		setup.conn.Close()
		if err != nil {
			b.Fatalf("close: %v", err)
		}
		b.Logf("sample %d: Close took %v; %s", i+1, elapsed, strings.Join(logs.lines("node stopped"), ""))
	}
}

// publishUntilClosed pipelines 16-message frames round the queues until
// the node closes the connection or stop closes.
func publishUntilClosed(done *sync.WaitGroup, c *perfClient, names []string, offset int, stop chan struct{}) {
	defer done.Done()
	defer c.conn.Close()
	go func() { // the confirms are not checked; reading keeps the node's writer moving
		_, _ = io.Copy(io.Discard, c.conn)
		c.conn.Close()
	}()
	payload := make([]byte, 128)
	var seq uint64
	for n := offset; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		frame := &wire.Publish{Queue: []byte(names[n%len(names)])}
		for range 16 {
			seq++
			frame.Messages = append(frame.Messages, wire.PublishMessage{Seq: seq, Payload: payload})
		}
		if err := c.writer.WriteFrame(frame); err != nil {
			return
		}
		if err := c.writer.Flush(); err != nil {
			return
		}
	}
}
