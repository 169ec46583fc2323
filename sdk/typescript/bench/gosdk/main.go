// Command gosdk measures the Go SDK the way sdk/typescript/bench/bench.ts
// measures the TypeScript SDK, so the two figures stand side by side on one
// node (docs/performance.md, "SDKs"):
//
//	throughput  confirms per second of pipelined 1 KiB publishes to a fresh
//	            buffered queue: PublishAsync as fast as the client's window
//	            (MaxPendingPublishes, default 4096) allows, timed from the first
//	            publish to the last confirm, after a warm-up
//	latency     publish-to-delivery of 1 KiB messages at --rate per second to
//	            a fresh buffered queue, one consumer on its own connection
//	            (prefetch 1000, acking each), publish i intended at t0 + i/rate;
//	            latency = receive time - intended time, from raw samples; the
//	            first second is warm-up
//
//	go run ./sdk/typescript/bench/gosdk --addr 127.0.0.1:7420
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/fibrilmq/fibril/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7420", "the node's client address")
	messages := flag.Int("messages", 100000, "publishes timed in the throughput run")
	warmup := flag.Int("warmup", 10000, "publishes confirmed before the throughput clock starts")
	rate := flag.Int("rate", 1000, "publishes per second in the latency run")
	seconds := flag.Int("seconds", 10, "measured seconds of the latency run, after one second of warm-up")
	runs := flag.Int("runs", 3, "runs of each")
	flag.Parse()
	ctx := context.Background()
	tag := fmt.Sprintf("gobench-%d-%d", os.Getpid(), time.Now().UnixNano())
	for run := 1; run <= *runs; run++ {
		perSecond, boundaries := throughput(ctx, *addr, fmt.Sprintf("%s-throughput-%d", tag, run), *warmup, *messages)
		fmt.Printf("throughput run %d: %.0f confirms/s (%d x 1 KiB, buffered, boundaries %v)\n", run, perSecond, *messages, boundaries)
	}
	for run := 1; run <= *runs; run++ {
		l := latency(ctx, *addr, fmt.Sprintf("%s-latency-%d", tag, run), *rate, *seconds)
		fmt.Printf("latency run %d at %d/s: publish-to-delivery p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms (%d samples; sender lag p99 %.3f ms)\n",
			run, *rate, l.p50, l.p99, l.p999, l.max, l.samples, l.lagP99)
	}
}

func dial(ctx context.Context, addr, name string) *client.Client {
	c, err := client.Dial(ctx, client.Options{Addresses: []string{addr}, ClientName: name})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func throughput(ctx context.Context, addr, queue string, warmup, messages int) (float64, map[string]int) {
	c := dial(ctx, addr, "go-bench")
	defer c.Close()
	if _, err := c.Declare(ctx, queue, client.QueueConfig{Mode: client.ModeBuffered}); err != nil {
		log.Fatal(err)
	}
	payload := make([]byte, 1024)
	boundaries := map[string]int{}
	publishAll := func(n int) {
		futures := make([]*client.PublishFuture, 0, n)
		for range n {
			future, err := c.PublishAsync(ctx, queue, client.Message{Payload: payload})
			if err != nil {
				log.Fatal(err)
			}
			futures = append(futures, future)
		}
		for _, future := range futures {
			confirm, err := future.Wait(ctx)
			if err != nil {
				log.Fatal(err)
			}
			boundaries[confirm.Boundary.String()]++
		}
	}
	publishAll(warmup)
	clear(boundaries)
	start := time.Now()
	publishAll(messages)
	elapsed := time.Since(start)
	if _, err := c.DeleteQueue(ctx, queue); err != nil {
		log.Fatal(err)
	}
	return float64(messages) / elapsed.Seconds(), boundaries
}

type latencyResult struct {
	samples                     int
	p50, p99, p999, max, lagP99 float64
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func latency(ctx context.Context, addr, queue string, rate, seconds int) latencyResult {
	producer := dial(ctx, addr, "go-bench-producer")
	defer producer.Close()
	consumer := dial(ctx, addr, "go-bench-consumer")
	defer consumer.Close()
	if _, err := producer.Declare(ctx, queue, client.QueueConfig{Mode: client.ModeBuffered}); err != nil {
		log.Fatal(err)
	}
	total := rate * (seconds + 1)
	origin := time.Now()
	sub, err := consumer.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: 1000})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan []float64)
	go func() {
		var latencies []float64
		for received := 0; received < total; received++ {
			select {
			case d := <-sub.Deliveries():
				now := time.Since(origin)
				index := binary.BigEndian.Uint32(d.Payload)
				intended := time.Duration(binary.BigEndian.Uint64(d.Payload[4:]))
				if int(index) >= rate && !d.Redelivered {
					latencies = append(latencies, float64(now-intended)/1e6)
				}
				_ = d.Ack()
			case <-time.After(10 * time.Second):
				done <- latencies
				return
			}
		}
		done <- latencies
	}()
	t0 := time.Since(origin) + 50*time.Millisecond
	var lags []float64
	futures := make([]*client.PublishFuture, 0, total)
	for i := range total {
		intended := t0 + time.Duration(i)*time.Second/time.Duration(rate)
		if wait := intended - time.Since(origin); wait > 0 {
			time.Sleep(wait)
		}
		payload := make([]byte, 1024)
		binary.BigEndian.PutUint32(payload, uint32(i))
		binary.BigEndian.PutUint64(payload[4:], uint64(intended))
		if i >= rate {
			lags = append(lags, float64(time.Since(origin)-intended)/1e6)
		}
		future, err := producer.PublishAsync(ctx, queue, client.Message{Payload: payload})
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, future)
	}
	for _, future := range futures {
		if _, err := future.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
	latencies := <-done
	slices.Sort(latencies)
	slices.Sort(lags)
	if _, err := producer.DeleteQueue(ctx, queue); err != nil {
		log.Fatal(err)
	}
	result := latencyResult{samples: len(latencies), p50: percentile(latencies, 50), p99: percentile(latencies, 99),
		p999: percentile(latencies, 99.9), lagP99: percentile(lags, 99)}
	if len(latencies) > 0 {
		result.max = latencies[len(latencies)-1]
	}
	return result
}
