package actors

// memoryProbe measures the process's memory around a resource attack:
// RSS (from /proc/self/statm) and the live heap (HeapAlloc right after a
// collection) before, while the attack holds the node (live heap) or at
// any moment (RSS peak, sampled every few milliseconds), and after. The
// test process holds the node and the attacking clients alike, so the
// figures bound the node plus its attackers.

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type memoryProbe struct {
	t                      *testing.T
	rssBefore, rssAfter    uint64
	heapBefore, heapAfter  uint64
	heapDuring             uint64
	goroutinesBefore       int
	mu                     sync.Mutex
	rssPeak, goroutinePeak int64
	stop, done             chan struct{}
}

// startMemoryProbe takes the "before" figures and starts sampling.
func startMemoryProbe(t *testing.T) *memoryProbe {
	p := &memoryProbe{t: t, stop: make(chan struct{}), done: make(chan struct{})}
	p.heapBefore = liveHeap()
	p.rssBefore = processRSS()
	p.goroutinesBefore = runtime.NumGoroutine()
	p.rssPeak, p.goroutinePeak = int64(p.rssBefore), int64(p.goroutinesBefore)
	go func() {
		defer close(p.done)
		ticker := time.NewTicker(5 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-ticker.C:
				p.sample()
			}
		}
	}()
	return p
}

func (p *memoryProbe) sample() {
	rss, goroutines := int64(processRSS()), int64(runtime.NumGoroutine())
	p.mu.Lock()
	p.rssPeak, p.goroutinePeak = max(p.rssPeak, rss), max(p.goroutinePeak, goroutines)
	p.mu.Unlock()
}

// during records the live heap while the attack holds the node.
func (p *memoryProbe) during() { p.heapDuring = max(p.heapDuring, liveHeap()); p.sample() }

// finish takes the "after" figures and logs them all.
func (p *memoryProbe) finish() {
	close(p.stop)
	<-p.done
	p.heapAfter, p.rssAfter = liveHeap(), processRSS()
	p.t.Logf("memory: RSS before %s, peak %s, after %s; live heap before %s, during %s, after %s; goroutines before %d, peak %d",
		mib(p.rssBefore), mib(uint64(p.rssPeak)), mib(p.rssAfter), mib(p.heapBefore), mib(p.heapDuring), mib(p.heapAfter),
		p.goroutinesBefore, p.goroutinePeak)
}

// bound fails the test when the live heap during the attack or after it,
// or the RSS peak (not under the race detector), grew past the stated
// bounds. What stays after an attack is mostly one-time growth of maps
// that never shrink (the actor library's process registry grows its
// buckets for 1,000 sessions once), not a leak: a second attack of the
// same size adds about nothing.
func (p *memoryProbe) bound(heapGrowthMax, heapAfterMax, rssGrowthMax uint64) {
	p.t.Helper()
	if p.heapDuring > p.heapBefore && p.heapDuring-p.heapBefore > heapGrowthMax {
		p.t.Errorf("the live heap grew by %s during the attack, over the bound of %s",
			mib(p.heapDuring-p.heapBefore), mib(heapGrowthMax))
	}
	if p.heapAfter > p.heapBefore && p.heapAfter-p.heapBefore > heapAfterMax {
		p.t.Errorf("the live heap stayed %s above where it started after the attack, over %s",
			mib(p.heapAfter-p.heapBefore), mib(heapAfterMax))
	}
	if !raceEnabled && uint64(p.rssPeak) > p.rssBefore && uint64(p.rssPeak)-p.rssBefore > rssGrowthMax {
		p.t.Errorf("RSS peaked %s above where it started, over the bound of %s",
			mib(uint64(p.rssPeak)-p.rssBefore), mib(rssGrowthMax))
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats.HeapAlloc
}

// processRSS reads the resident set size; 0 where /proc is missing.
func processRSS() uint64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(fields[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

func mib(bytes uint64) string { return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20)) }
