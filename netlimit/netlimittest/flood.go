// Package netlimittest floods a listener the way an attacker who has not
// authenticated would, and samples what the process holds meanwhile, for
// the tests of the listeners between nodes (docs/security.md, "Bounds of
// the links between nodes").
package netlimittest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Flood describes an attack on one listener: Idle connections that send
// nothing and Slow ones that send SlowBytes (the first bytes of a
// handshake) and stall, all opened at once and held until the listener
// closes them or the flood stops. IdleFrom and SlowFrom are the local
// IPs the attackers dial from (loopback aliases such as 127.0.0.2 work on
// Linux without setup), so the listener sees them as two sources apart
// from a node dialling from 127.0.0.1.
//
// The attackers do not connect again once closed: in the test process
// they share the machine's cores with the listener, and an attack that
// outpaces the listener's accepts measures the machine's accept rate (a
// volumetric attack, for the network to stop), not the listener's
// bounds.
type Flood struct {
	Address            string
	Idle, Slow         int
	IdleFrom, SlowFrom string
	SlowBytes          []byte
}

// Running is a flood under way.
type Running struct {
	cancel      context.CancelFunc
	done        sync.WaitGroup
	connections atomic.Int64 // connections made
	failed      atomic.Int64 // dials that failed
	open        atomic.Int64 // attacker connections open now
}

// Start begins the flood; it returns once every attacker has connected
// once (or failed to, within ten seconds). Stop ends it; it also ends when
// the test does.
func (f Flood) Start(t testing.TB) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	running := &Running{cancel: cancel}
	var connectedOnce sync.WaitGroup
	launch := func(count int, from string, payload []byte) {
		local := &net.TCPAddr{IP: net.ParseIP(from)}
		for range count {
			connectedOnce.Add(1)
			running.done.Add(1)
			go running.attack(ctx, f.Address, local, payload, &connectedOnce)
		}
	}
	launch(f.Idle, f.IdleFrom, nil)
	launch(f.Slow, f.SlowFrom, f.SlowBytes)
	waited := make(chan struct{})
	go func() { connectedOnce.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Logf("flood: not every attacker connected within 10 s (%d connections so far)", running.connections.Load())
	}
	t.Cleanup(running.Stop)
	return running
}

// attack is one attacker: connect, send payload, hold the connection
// until the listener closes it or the flood ends.
func (r *Running) attack(ctx context.Context, address string, local *net.TCPAddr, payload []byte, once *sync.WaitGroup) {
	defer r.done.Done()
	dialer := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	conn, err := dialer.DialContext(ctx, "tcp", address)
	once.Done()
	if err != nil {
		r.failed.Add(1)
		return
	}
	r.connections.Add(1)
	r.open.Add(1)
	defer r.open.Add(-1)
	defer conn.Close()
	if len(payload) > 0 {
		_, _ = conn.Write(payload)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var sink [256]byte
	for {
		if _, err := conn.Read(sink[:]); err != nil {
			return // the listener closed it (or the flood ended)
		}
	}
}

// Connections returns how many connections the attackers made, and
// how many dials failed.
func (r *Running) Connections() (made, failed int64) { return r.connections.Load(), r.failed.Load() }

// Open returns how many attacker connections are open now (the process
// holds their descriptors too).
func (r *Running) Open() int64 { return r.open.Load() }

// Stop ends the flood and waits for its goroutines.
func (r *Running) Stop() {
	r.cancel()
	r.done.Wait()
}

// Usage is what the process holds at one moment, and the peak of a
// gauge the test chose (the listener's pending connections, say).
type Usage struct {
	RSSKiB      int64
	Descriptors int
	Gauge       int
}

func (u Usage) String() string {
	return fmt.Sprintf("RSS %.1f MiB, %d descriptors", float64(u.RSSKiB)/1024, u.Descriptors)
}

// CurrentUsage reads the process's RSS and open descriptors from /proc
// (zero where it cannot).
func CurrentUsage() Usage {
	var usage Usage
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range bytes.Split(status, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
				if fields := bytes.Fields(rest); len(fields) > 0 {
					usage.RSSKiB, _ = strconv.ParseInt(string(fields[0]), 10, 64)
				}
			}
		}
	}
	if dir, err := os.Open("/proc/self/fd"); err == nil {
		if names, err := dir.Readdirnames(-1); err == nil {
			usage.Descriptors = len(names) - 1 // less the one reading it
		}
		dir.Close()
	}
	return usage
}

// Sampler records the peak usage of the process, and of a gauge, every
// 10 ms until Stop.
type Sampler struct {
	gauge func() int
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	peak  Usage
}

// StartSampler begins sampling; gauge may be nil.
func StartSampler(gauge func() int) *Sampler {
	if gauge == nil {
		gauge = func() int { return 0 }
	}
	s := &Sampler{gauge: gauge, stop: make(chan struct{}), done: make(chan struct{}), peak: CurrentUsage()}
	go func() {
		defer close(s.done)
		ticker := time.NewTicker(10 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ticker.C:
				now := CurrentUsage()
				gauge := s.gauge()
				s.mu.Lock()
				s.peak.RSSKiB = max(s.peak.RSSKiB, now.RSSKiB)
				s.peak.Descriptors = max(s.peak.Descriptors, now.Descriptors)
				s.peak.Gauge = max(s.peak.Gauge, gauge)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peaks.
func (s *Sampler) Stop() Usage {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}
