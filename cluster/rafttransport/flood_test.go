package rafttransport

// The Raft listener under a flood of connections that never finish a
// handshake: 1,000 that send nothing and 1,000 that send the first bytes
// of one and stall, all opened at once. A node's connection made
// meanwhile comes up, the listener holds at most
// its cap of pending connections, and a header that announces a huge
// payload costs what arrived, not what it announced.

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/netlimit"
	"github.com/fibrilmq/fibril/netlimit/netlimittest"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/tlsconfig/tlstest"
)

// floodWait bounds the wait for the node's connection under the flood:
// generous, it only guards against a hang (the time is logged).
const floodWait = 60 * time.Second

// The first bytes of a TLS ClientHello, and of a plain frame: a
// handshake begun and never finished.
var (
	partialClientHello = []byte{0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4}
	partialFrame       = []byte{magic[0], magic[1], 0x00, 0x64, 0x00}
)

func TestRaftListenerServesANodeUnderAFlood(t *testing.T) {
	ca := tlstest.NewCA(t, t.TempDir(), "cluster")
	for _, encrypted := range []bool{true, false} {
		name := map[bool]string{true: "tls", false: "plain"}[encrypted]
		t.Run(name, func(t *testing.T) {
			var receiverTLS, senderTLS *tlsconfig.Node
			slow := partialFrame
			if encrypted {
				receiverTLS, senderTLS, slow = tlsNode(t, ca, "peer"), tlsNode(t, ca, "sender"), partialClientHello
			}
			address := freeAddress(t)
			peer := startReceiver(t, address, receiverTLS)
			sender := startReceiver(t, freeAddress(t), senderTLS)
			runtime.GC()
			before := netlimittest.CurrentUsage()
			sampler := netlimittest.StartSampler(func() int { return peer.transport.Stats().Pending })
			flood := netlimittest.Flood{Address: address, Idle: 1000, Slow: 1000, IdleFrom: "127.0.0.2",
				SlowFrom: "127.0.0.3", SlowBytes: slow}.Start(t)

			start := time.Now()
			attempts := sendUntilDelivered(t, sender, peer, address)
			linkUp := time.Since(start)
			connections, failed := flood.Connections()
			flood.Stop()
			runtime.GC()
			after := netlimittest.CurrentUsage()
			peak := sampler.Stop()
			stats := peer.transport.Stats()
			t.Logf("%s: the node's connection delivered after %v (%d attempts) under a flood of %d connections (%d dials "+
				"failed); before %v; peak %v, %d pending; after %v; gate %+v (the process holds the attackers' sockets too)",
				name, linkUp.Round(time.Millisecond), attempts, connections, failed, before, peak, peak.Gauge, after, stats)
			if peak.Gauge > DefaultLimits.Pending {
				t.Errorf("the listener held %d pending connections, over its cap of %d", peak.Gauge, DefaultLimits.Pending)
			}
			if stats.Dropped == 0 {
				t.Errorf("the flood of %d connections dropped none: it was not bounded by the gate", connections)
			}
		})
	}
}

// waitPendingDrained waits until the connections the flood left pending
// are gone (each within its deadlines; the bound only guards against a
// hang) and returns the gate's counts then.
func waitPendingDrained(t *testing.T, stats func() netlimit.Stats) netlimit.Stats {
	t.Helper()
	deadline := time.Now().Add(floodWait)
	for {
		now := stats()
		if now.Pending == 0 {
			return now
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still pending %v after the flood ended", now.Pending, floodWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sendUntilDelivered sends batches on fresh connections until one
// arrives, as dragonboat does after a failed send, and returns how many
// attempts it took.
func sendUntilDelivered(t *testing.T, sender, peer *receiver, address string) int {
	t.Helper()
	deadline := time.Now().Add(floodWait)
	for attempt := 1; ; attempt++ {
		if time.Now().After(deadline) {
			t.Fatalf("no batch reached the listener within %v under the flood (%d attempts)", floodWait, attempt-1)
		}
		conn, err := sender.transport.GetConnection(t.Context(), address)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		err = conn.SendMessageBatch(batch(uint64(attempt)))
		select {
		case got := <-peer.batches:
			conn.Close()
			if len(got.Requests) != 1 {
				t.Fatalf("received %+v", got)
			}
			return attempt
		case <-time.After(10 * time.Second):
			t.Logf("attempt %d: no batch within 10 s (send: %v)", attempt, err)
		}
		conn.Close()
	}
}

// A header that announces the largest payload the format allows, followed
// by a few bytes and then the end, costs a chunk of memory, not the
// announced gigabyte.
func TestAFrameIsAllocatedAsItsBytesArrive(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		var head [headerBytes]byte
		header{method: methodMessages, size: maxPayloadBytes}.encode(&head)
		_, _ = client.Write(head[:])
		_, _ = client.Write(make([]byte, 1000))
		client.Close()
	}()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := readFrame(server, nil, true)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		t.Fatalf("a cut payload: %v, want the end of the stream", err)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 2*readChunkBytes {
		t.Fatalf("reading 1,000 bytes of a payload announced as %d allocated %d bytes", maxPayloadBytes, grown)
	}
}

// A payload read across many chunks arrives whole.
func TestALargePayloadGrowsToItsSize(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	payload := make([]byte, 5*readChunkBytes+17)
	for i := range payload {
		payload[i] = byte(i % 251)
	}
	go func() {
		_ = writeFrame(client, methodChunk, payload, false)
		client.Close()
	}()
	if err := readMagic(server, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, got, err := readFrame(server, nil, false)
	if err != nil || len(got) != len(payload) || got[len(got)-1] != payload[len(payload)-1] || got[readChunkBytes] != payload[readChunkBytes] {
		t.Fatalf("read %d bytes, %v; want the %d written", len(got), err, len(payload))
	}
}
