package acceptance

// An in-process broker on a fault-injecting in-memory filesystem, behind a
// plug: every client connection goes through the plug's dialer, so the
// harness can cut all of them at once. A power loss is, in order: pull the
// plug (from then on no client sees anything new, and the broker does not
// notice), read each queue's
// frontiers from the broker, take the crash image of the filesystem
// (vfs.Mem.CrashClone), close the old broker (it writes only to the old
// filesystem), start a new broker on the image, and restore the plug to
// its address. Everything a client saw was therefore sent before the
// image was taken, and the image holds no trace of the cut.

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// plug hands out client connections and can cut them all at once, the
// way a power loss cuts them: the clients stop seeing anything (their
// reads and writes fail from then on), but the broker's side of each
// socket stays open until release, so the broker does not learn of the cut
// (it would release held deliveries, which a machine that lost power
// cannot do).
type plug struct {
	mu      sync.Mutex
	address string
	pulled  bool
	conns   []*plugConn
}

var errPlugPulled = errors.New("acceptance: the plug is pulled")

func (p *plug) dial(ctx context.Context, _ string) (net.Conn, error) {
	p.mu.Lock()
	address, pulled := p.address, p.pulled
	p.mu.Unlock()
	if pulled {
		return nil, errPlugPulled
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pulled || p.address != address {
		_ = conn.Close()
		return nil, errPlugPulled
	}
	wrapped := &plugConn{Conn: conn}
	p.conns = append(p.conns, wrapped)
	return wrapped, nil
}

// pull cuts every client off and refuses new connections.
func (p *plug) pull() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pulled = true
	for _, conn := range p.conns {
		conn.cut()
	}
}

// release closes the broker side of every cut connection.
func (p *plug) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range p.conns {
		_ = conn.Conn.Close()
	}
	p.conns = nil
}

// restore lets clients connect to address.
func (p *plug) restore(address string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pulled, p.address = false, address
}

// plugConn is a client connection the plug can cut without closing.
type plugConn struct {
	net.Conn
	mu     sync.Mutex
	isCut  bool
	closed bool
}

func (c *plugConn) cut() {
	c.mu.Lock()
	c.isCut = true
	c.mu.Unlock()
	past := time.Unix(1, 0)
	_ = c.Conn.SetReadDeadline(past) // wake a blocked reader
	_ = c.Conn.SetWriteDeadline(past)
}

func (c *plugConn) wasCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isCut
}

// Read passes data through until the cut; data that arrives with or after
// the cut is dropped.
func (c *plugConn) Read(b []byte) (int, error) {
	if c.wasCut() {
		return 0, errPlugPulled
	}
	n, err := c.Conn.Read(b)
	if c.wasCut() {
		return 0, errPlugPulled
	}
	return n, err
}

func (c *plugConn) Write(b []byte) (int, error) {
	if c.wasCut() {
		return 0, errPlugPulled
	}
	return c.Conn.Write(b)
}

// Close closes the socket unless the plug cut it (then release does).
func (c *plugConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCut || c.closed {
		return nil
	}
	c.closed = true
	return c.Conn.Close()
}

// memNode is the broker under test and its filesystem.
type memNode struct {
	t         *testing.T
	fs        vfs.FS // what the broker writes through (mem, or a wrapper of it)
	mem       *vfs.Mem
	configure func(*actors.Config)
	broker    *actors.Broker
	plug      *plug
}

const memDataDir = "/data"

// startMemNode starts a broker on mem, writing through fs (mem itself when
// nil; tests that watch the broker's file operations wrap mem). Brokers
// started after a power loss write to the image directly.
func startMemNode(t *testing.T, mem *vfs.Mem, fs vfs.FS, configure func(*actors.Config)) *memNode {
	t.Helper()
	if fs == nil {
		fs = mem
	}
	n := &memNode{t: t, mem: mem, fs: fs, configure: configure, plug: &plug{}}
	n.start()
	t.Cleanup(func() {
		if n.broker != nil {
			if err := n.broker.Close(); err != nil {
				t.Errorf("close broker: %v", err)
			}
		}
	})
	return n
}

func (n *memNode) start() {
	n.t.Helper()
	config := actors.DefaultConfig()
	config.DataDir, config.ListenAddr, config.HTTPAddr = memDataDir, "127.0.0.1:0", ""
	config.FS = n.fs
	if n.configure != nil {
		n.configure(&config)
	}
	broker, err := actors.Start(config)
	if err != nil {
		n.t.Fatalf("start broker: %v", err)
	}
	n.broker = broker
	n.plug.restore(broker.Addr().String())
}

// loadConfig returns a workload config whose clients go through the plug.
func (n *memNode) loadConfig(config loadConfig) loadConfig {
	config.addresses = []string{"node"}
	config.dial = n.plug.dial
	return config
}

// sampleAll records each queue's frontiers read directly from the broker.
func (n *memNode) sampleAll(h *History, queues []string) {
	for _, name := range queues {
		sent := h.Now()
		if info, ok := n.broker.QueueInfo(name); ok {
			h.Sampled(name, sent, info.WrittenNext, info.DurableNext)
		}
	}
}

// powerLoss cuts the power as the file comment says and returns how long
// the new broker took to recover and serve (closing the old one, which a
// real power loss does not need, is not counted). afterImage, when set,
// runs right after the image is taken. The life ends in l's history once
// every publish outcome of it is recorded.
func (n *memNode) powerLoss(l *load, queues []string, options vfs.CrashOptions, afterImage func(*vfs.Mem)) time.Duration {
	n.t.Helper()
	h := l.h
	n.plug.pull()
	n.sampleAll(h, queues)
	image := n.mem.CrashClone(options)
	if afterImage != nil {
		afterImage(image)
	}
	l.awaitOutcomes()
	h.LifeEnded(EndPowerLoss, time.Time{})
	n.plug.release()
	old := n.broker
	n.broker = nil
	if err := old.Close(); err != nil {
		n.t.Errorf("closing the old broker after the power cut: %v", err)
	}
	n.mem, n.fs = image, image
	h.LifeStarted()
	began := time.Now()
	n.start()
	return time.Since(began)
}
