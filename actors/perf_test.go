package actors

// Performance harness: publish-to-confirm and publish-to-delivery latency
// at fixed rates, and saturation throughput, for both modes, over real TCP
// against an in-process node on the real filesystem. It reports figures;
// it asserts none (latency is not a test verdict on a shared machine).
//
//	FIBRIL_PERF=1 go test -run TestPerformanceFigures -v ./actors
//
// FIBRIL_PERF_SECONDS sets each point's duration (default 3). CPU per
// million messages is the process's user+system time over the run, clients
// included, divided by messages delivered.

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

type perfResult struct {
	messages          int
	seconds           float64
	confirmP50        time.Duration
	confirmP99        time.Duration
	deliverP50        time.Duration
	deliverP99        time.Duration
	cpuSecondsPerMega float64
}

func TestPerformanceFigures(t *testing.T) {
	if os.Getenv("FIBRIL_PERF") == "" {
		t.Skip("set FIBRIL_PERF=1 to measure")
	}
	seconds := 3.0
	if text := os.Getenv("FIBRIL_PERF_SECONDS"); text != "" {
		seconds, _ = strconv.ParseFloat(text, 64)
	}
	duration := time.Duration(seconds * float64(time.Second))
	for _, mode := range []wire.Mode{wire.ModeBuffered, wire.ModeDurable} {
		for _, rate := range []int{100, 10_000, 0} {
			b := startBroker(t, nil)
			result := runPerfPoint(t, b, mode, rate, duration)
			label := fmt.Sprintf("%d msg/s", rate)
			if rate == 0 {
				label = "saturation"
			}
			t.Logf("%-8s %-11s delivered %7d in %.1fs = %8.0f msg/s | confirm p50 %8v p99 %8v | deliver p50 %8v p99 %8v | CPU %.1f s/M",
				mode, label, result.messages, result.seconds, float64(result.messages)/result.seconds,
				result.confirmP50, result.confirmP99, result.deliverP50, result.deliverP99, result.cpuSecondsPerMega)
			if err := b.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	}
}

// runPerfPoint publishes at rate (0: as fast as the window allows) for
// duration with one publisher and one consumer, 100-byte payloads.
func runPerfPoint(t *testing.T, b *Broker, mode wire.Mode, rate int, duration time.Duration) perfResult {
	setup := connect(t, b)
	setup.mustDeclare("perf", mode, wire.QueueOptions{})
	producer, consumer := dialPerf(t, b), dialPerf(t, b)
	subscription := consumer.subscribePerf(t, "perf", 4096)

	var sentAt sync.Map // seq → time.Time
	var confirmLatencies, deliverLatencies []time.Duration
	var inflight atomic.Int64
	const window = 64 * 128
	done := make(chan struct{})
	var delivered atomic.Int64
	var wait sync.WaitGroup
	wait.Add(2)
	go func() { // confirms
		defer wait.Done()
		confirmLatencies = producer.readConfirms(&sentAt, &inflight, done)
	}()
	go func() { // deliveries
		defer wait.Done()
		deliverLatencies = consumer.readDeliveries(&sentAt, subscription, &delivered, done)
	}()
	cpuBefore := processCPU()
	start := time.Now()
	producer.publishFor(t, "perf", rate, duration, &sentAt, &inflight, window)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if inflight.Load() == 0 && delivered.Load() >= int64(producer.seq) {
			break
		}
	}
	elapsed := time.Since(start).Seconds()
	cpu := processCPU() - cpuBefore
	close(done)
	producer.conn.Close()
	consumer.conn.Close()
	wait.Wait()
	result := perfResult{messages: int(delivered.Load()), seconds: elapsed}
	result.confirmP50, result.confirmP99 = percentiles(confirmLatencies)
	result.deliverP50, result.deliverP99 = percentiles(deliverLatencies)
	if result.messages > 0 {
		result.cpuSecondsPerMega = cpu.Seconds() / float64(result.messages) * 1e6
	}
	return result
}

func percentiles(samples []time.Duration) (time.Duration, time.Duration) {
	if len(samples) == 0 {
		return 0, 0
	}
	slices.Sort(samples)
	return samples[len(samples)/2], samples[len(samples)*99/100]
}

func processCPU() time.Duration {
	var usage syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &usage)
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

type perfClient struct {
	conn   net.Conn
	writer *wire.Writer
	reader *wire.Reader
	seq    uint64
}

func dialPerf(t *testing.T, b *Broker) *perfClient {
	c := connect(t, b)
	return &perfClient{conn: c.conn, writer: c.writer, reader: c.reader}
}

func (c *perfClient) subscribePerf(t *testing.T, queueName string, prefetch uint32) uint64 {
	c.writer.WriteFrame(&wire.Subscribe{RequestID: 1, Queue: queueName, Prefetch: prefetch})
	c.writer.Flush()
	tag, body, err := c.reader.Next()
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := wire.DecodeFrame(tag, body)
	ok, isOK := frame.(*wire.SubscribeOK)
	if !isOK {
		t.Fatalf("subscribe: %+v", frame)
	}
	return ok.SubscriptionID
}

// publishFor sends publishes: at a fixed rate in 1 ms ticks, or (rate 0)
// in frames of 128 as fast as the in-flight window allows.
func (c *perfClient) publishFor(t *testing.T, queueName string, rate int, duration time.Duration,
	sentAt *sync.Map, inflight *atomic.Int64, window int64) {
	payload := make([]byte, 100)
	frame := &wire.Publish{Queue: []byte(queueName)}
	send := func(n int) {
		frame.Messages = frame.Messages[:0]
		now := time.Now()
		for range n {
			c.seq++
			message := wire.PublishMessage{Seq: c.seq, Payload: append([]byte(nil), payload...)}
			binary.BigEndian.PutUint64(message.Payload, c.seq)
			frame.Messages = append(frame.Messages, message)
			sentAt.Store(c.seq, now)
		}
		inflight.Add(int64(n))
		if err := c.writer.WriteFrame(frame); err != nil {
			t.Errorf("publish: %v", err)
		}
		if err := c.writer.Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
	}
	start := time.Now()
	if rate == 0 {
		for time.Since(start) < duration {
			if inflight.Load() > window {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			send(128)
		}
		return
	}
	interval := time.Second / time.Duration(rate)
	perTick := 1
	if interval < time.Millisecond {
		interval, perTick = time.Millisecond, rate/1000
	}
	for next := start; time.Since(start) < duration; next = next.Add(interval) {
		time.Sleep(time.Until(next))
		send(perTick)
	}
}

func (c *perfClient) readConfirms(sentAt *sync.Map, inflight *atomic.Int64, done chan struct{}) []time.Duration {
	var latencies []time.Duration
	var frame wire.Confirm
	for {
		tag, body, err := c.reader.Next()
		if err != nil {
			return latencies
		}
		if tag != wire.TagConfirm || frame.Decode(body) != nil {
			continue
		}
		now := time.Now()
		for _, r := range frame.Ranges {
			for seq := r.First; seq <= r.Last; seq++ {
				if sent, ok := sentAt.Load(seq); ok {
					latencies = append(latencies, now.Sub(sent.(time.Time)))
				}
			}
			inflight.Add(-int64(r.Last - r.First + 1))
		}
	}
}

func (c *perfClient) readDeliveries(sentAt *sync.Map, subscription uint64, delivered *atomic.Int64,
	done chan struct{}) []time.Duration {
	var latencies []time.Duration
	var frame wire.Deliver
	ack := &wire.Ack{Settle: wire.Settle{SubscriptionID: subscription}}
	for {
		tag, body, err := c.reader.Next()
		if err != nil {
			return latencies
		}
		if tag != wire.TagDeliver || frame.Decode(body) != nil {
			continue
		}
		now := time.Now()
		ack.DeliveryTags = ack.DeliveryTags[:0]
		for _, d := range frame.Deliveries {
			seq := binary.BigEndian.Uint64(d.Payload)
			if sent, ok := sentAt.LoadAndDelete(seq); ok {
				latencies = append(latencies, now.Sub(sent.(time.Time)))
			}
			ack.DeliveryTags = append(ack.DeliveryTags, d.DeliveryTag)
		}
		delivered.Add(int64(len(frame.Deliveries)))
		_ = c.writer.WriteFrame(ack)
		_ = c.writer.Flush()
	}
}
