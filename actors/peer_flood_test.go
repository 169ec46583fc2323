package actors

// The peer listener under a flood of connections that never finish a
// handshake (docs/security.md, "Bounds of the links between nodes"):
// 1,000 that send nothing and 1,000 that send the first bytes of a TLS
// handshake and stall, all opened at once. A node that restarts meanwhile gets its link up, and the listener holds at most its
// cap of pending handshakes. Before the gate, 16 silent connections held
// every link off for as long as they were refilled.

import (
	"runtime"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/netlimit/netlimittest"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
)

// partialClientHello is the first bytes of a TLS ClientHello.
var partialClientHello = []byte{0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4}

func TestPeerListenerServesARestartedNodeUnderAFlood(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	c := startBrokerCluster(t, 2, withNodeTLS(t, ca))
	for _, id := range c.order {
		broker := c.members[id].broker
		waitUntil(t, id+"'s peer link up", func() bool { up, _ := peerLinksUp(broker); return up == 1 })
	}
	target := c.members["node1"]
	gate := target.broker.core.peerGate
	c.stop("node2")

	runtime.GC()
	before := netlimittest.CurrentUsage()
	sampler := netlimittest.StartSampler(func() int { return gate.Stats().Pending })
	flood := netlimittest.Flood{Address: target.config.PeerAddress, Idle: 1000, Slow: 1000, IdleFrom: "127.0.0.2",
		SlowFrom: "127.0.0.3", SlowBytes: partialClientHello}.Start(t)

	start := time.Now()
	c.restart("node2")
	restarted := time.Since(start)
	node2 := c.members["node2"].broker
	waitUntil(t, "node2's link to node1 up under the flood", func() bool { up, _ := peerLinksUp(node2); return up == 1 })
	linkUp := time.Since(start)
	connections, failed := flood.Connections()
	flood.Stop()
	waitUntil(t, "the handshakes the flood left pending gone", func() bool { return gate.Stats().Pending == 0 })
	runtime.GC()
	after := netlimittest.CurrentUsage()
	peak := sampler.Stop()
	stats := gate.Stats()
	t.Logf("node2's link to node1 came up %v after its restart began (the restart returned after %v) under a flood "+
		"of %d connections (%d dials failed); before %v; peak %v, %d pending; after %v; gate %+v (the process holds "+
		"two nodes and the attackers' sockets)", linkUp.Round(time.Millisecond), restarted.Round(time.Millisecond),
		connections, failed, before, peak, peak.Gauge, after, stats)
	if peak.Gauge > peerLimits.Pending {
		t.Errorf("the peer listener held %d pending handshakes, over its cap of %d", peak.Gauge, peerLimits.Pending)
	}
	if stats.Dropped == 0 {
		t.Errorf("the flood of %d connections dropped none: it was not bounded by the gate", connections)
	}
	waitUntil(t, "node1's own link to node2 up again", func() bool { up, _ := peerLinksUp(target.broker); return up == 1 })
}
