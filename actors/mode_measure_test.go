package actors

// The measurement of docs/performance.md "Mode changes": a three-node
// cluster under paced publish load (FIBRIL_MODE_RATE messages a second,
// default 10,000), switched buffered → durable and back
// FIBRIL_MODE_SWITCHES times (default 20 each way). It reports, from raw
// samples, how long each switch to durable took to apply (publishes
// admitted after its revision wait that long at most), the longest gap
// between two confirms around each switch, and the confirm latency of
// each mode in steady state before and after. It asserts only what every
// run must hold (every confirm after a switch to durable stands on the
// durable boundary); the figures are printed. Run it with
//
//	FIBRIL_MEASURE_MODES=1 go test ./actors -run TestMeasureModeSwitches -v -timeout 20m

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

func envInt(name string, fallback int) int {
	if value, err := strconv.Atoi(os.Getenv(name)); err == nil && value > 0 {
		return value
	}
	return fallback
}

// pacedLoad publishes at a fixed rate and keeps every confirm's send and
// arrival times and boundary.
type pacedLoad struct {
	mu       sync.Mutex
	samples  []confirmSample
	failures int
	stop     chan struct{}
	done     sync.WaitGroup
}

type confirmSample struct {
	sent, confirmed time.Time
	boundary        wire.Boundary
}

func startPacedLoad(ctx context.Context, sdk *client.Client, name string, rate int) *pacedLoad {
	l := &pacedLoad{stop: make(chan struct{})}
	futures := make(chan struct {
		at     time.Time
		future *client.PublishFuture
	}, 1<<16)
	l.done.Add(2)
	go func() {
		defer l.done.Done()
		defer close(futures)
		const tick = time.Millisecond
		perTick := max(rate/1000, 1)
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		payload := make([]byte, 128)
		for {
			select {
			case <-l.stop:
				return
			case <-ticker.C:
			}
			for range perTick {
				at := time.Now()
				future, err := sdk.PublishAsync(ctx, name, client.Message{Payload: payload})
				if err != nil {
					l.mu.Lock()
					l.failures++
					l.mu.Unlock()
					continue
				}
				futures <- struct {
					at     time.Time
					future *client.PublishFuture
				}{at, future}
			}
		}
	}()
	go func() {
		defer l.done.Done()
		for f := range futures {
			confirm, err := f.future.Wait(ctx)
			now := time.Now()
			l.mu.Lock()
			if err != nil {
				l.failures++
			} else {
				l.samples = append(l.samples, confirmSample{sent: f.at, confirmed: now, boundary: confirm.Boundary})
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *pacedLoad) finish() {
	close(l.stop)
	l.done.Wait()
}

// between returns the samples sent in [from, to).
func (l *pacedLoad) between(from, to time.Time) []confirmSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []confirmSample
	for _, s := range l.samples {
		if !s.sent.Before(from) && s.sent.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// longestGap is the longest time between two consecutive confirm
// arrivals within [from, to].
func (l *pacedLoad) longestGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	var arrivals []time.Time
	for _, s := range l.samples {
		if !s.confirmed.Before(from) && !s.confirmed.After(to) {
			arrivals = append(arrivals, s.confirmed)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	gap := time.Duration(0)
	for i := 1; i < len(arrivals); i++ {
		gap = max(gap, arrivals[i].Sub(arrivals[i-1]))
	}
	return gap
}

func latencyQuantiles(samples []confirmSample) (p50, p99 time.Duration, n int) {
	latencies := make([]time.Duration, 0, len(samples))
	for _, s := range samples {
		latencies = append(latencies, s.confirmed.Sub(s.sent))
	}
	p50, p99 = percentiles(latencies)
	return p50, p99, len(latencies)
}

func durationQuantiles(samples []time.Duration) (p50, maximum time.Duration) {
	if len(samples) == 0 {
		return 0, 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return sorted[len(sorted)/2], sorted[len(sorted)-1]
}

func TestMeasureModeSwitches(t *testing.T) {
	if os.Getenv("FIBRIL_MEASURE_MODES") != "1" {
		t.Skip("a measurement: FIBRIL_MEASURE_MODES=1")
	}
	rate, switches := envInt("FIBRIL_MODE_RATE", 10_000), envInt("FIBRIL_MODE_SWITCHES", 20)
	c := startBrokerCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const name = "measured"
	owner, _ := c.declareServed(name, client.QueueConfig{Mode: client.ModeBuffered, Policy: "replica_buffered:2"})
	sdk := c.dialSDK(owner)
	consumer := c.dialSDK(owner)
	subscription, err := consumer.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for delivery := range subscription.Deliveries() {
			_ = delivery.Ack()
		}
	}()
	load := startPacedLoad(ctx, sdk, name, rate)
	const steady = 2 * time.Second
	start := time.Now()
	time.Sleep(steady)
	bufferedBefore := [2]time.Time{start.Add(steady / 2), time.Now()}
	var toDurable, toBuffered, gaps []time.Duration
	var durableWindows, bufferedWindows [][2]time.Time
	for i := range switches {
		requested := time.Now()
		change, err := sdk.ChangeMode(ctx, name, client.ModeDurable)
		applied := time.Now()
		if err != nil || change.Outcome != wire.ModeApplied {
			t.Fatalf("switch %d to durable: %+v, %v", i, change, err)
		}
		toDurable = append(toDurable, applied.Sub(requested))
		time.Sleep(300 * time.Millisecond)
		gaps = append(gaps, load.longestGap(requested, applied.Add(100*time.Millisecond)))
		durableWindows = append(durableWindows, [2]time.Time{applied, time.Now()})
		for _, s := range load.between(applied, time.Now()) {
			if s.boundary != wire.BoundaryDurable {
				t.Fatalf("switch %d: a publish sent after the switch to durable applied was confirmed %v", i, s.boundary)
			}
		}
		requested = time.Now()
		change, err = sdk.ChangeMode(ctx, name, client.ModeBuffered)
		applied = time.Now()
		if err != nil || change.Outcome != wire.ModeApplied {
			t.Fatalf("switch %d to buffered: %+v, %v", i, change, err)
		}
		toBuffered = append(toBuffered, applied.Sub(requested))
		time.Sleep(300 * time.Millisecond)
		bufferedWindows = append(bufferedWindows, [2]time.Time{applied, time.Now()})
	}
	final := time.Now()
	time.Sleep(steady)
	bufferedAfter := [2]time.Time{final.Add(steady / 2), time.Now()}
	load.finish()

	collect := func(windows [][2]time.Time) []confirmSample {
		var out []confirmSample
		for _, w := range windows {
			out = append(out, load.between(w[0].Add(100*time.Millisecond), w[1])...)
		}
		return out
	}
	elapsed := time.Since(start)
	load.mu.Lock()
	total, failures := len(load.samples), load.failures
	load.mu.Unlock()
	report := func(format string, args ...any) { t.Logf(format, args...); fmt.Printf(format+"\n", args...) }
	report("rate asked %d msg/s, confirmed %.0f msg/s over %.1f s (%d confirms, %d failures), %d switches each way",
		rate, float64(total)/elapsed.Seconds(), elapsed.Seconds(), total, failures, switches)
	p50, maximum := durationQuantiles(toDurable)
	report("buffered→durable applied after: p50 %v, max %v", p50, maximum)
	p50, maximum = durationQuantiles(gaps)
	report("longest gap between confirms around a switch to durable: p50 %v, max %v", p50, maximum)
	p50, maximum = durationQuantiles(toBuffered)
	report("durable→buffered applied after: p50 %v, max %v", p50, maximum)
	for _, w := range []struct {
		what    string
		samples []confirmSample
	}{
		{"buffered, before any switch", load.between(bufferedBefore[0], bufferedBefore[1])},
		{"durable, between switches", collect(durableWindows)},
		{"buffered, between switches", collect(bufferedWindows)},
		{"buffered, after the last switch", load.between(bufferedAfter[0], bufferedAfter[1])},
	} {
		p50, p99, n := latencyQuantiles(w.samples)
		report("confirm latency %s: p50 %v, p99 %v (%d samples)", w.what, p50, p99, n)
	}
}
