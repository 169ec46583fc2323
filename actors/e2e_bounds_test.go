package actors

// Resource attacks (docs/security.md, "Bounds"). Each attack runs against
// a real node over loopback TCP, is followed by a well-behaved client
// that must still work, and keeps the process's memory within a stated
// bound: the live heap during the attack (and after it), and the RSS peak
// when not under the race detector. The figures are logged (go test -v);
// docs/security.md records them.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/wire"
)

// wellBehaved checks that an ordinary client still works: hello, declare,
// publish confirmed, consume.
func wellBehaved(t *testing.T, b *Broker, queueName string) {
	t.Helper()
	c := connect(t, b)
	c.mustDeclare(queueName, wire.ModeBuffered, wire.QueueOptions{})
	mustStore(c, queueName, "still", "working")
	sub := c.subscribe(queueName, 2)
	if got := c.deliveries(sub, 2); string(got[0].Payload) != "still" {
		t.Fatalf("the well-behaved client got %q", got[0].Payload)
	}
}

// attackWait bounds the waits of these tests: a safety net against a
// hang, never a measurement (under the race detector on a loaded machine
// an attack takes many seconds to play out).
const attackWait = 2 * time.Minute

// waitLong is waitUntil with attackWait.
func waitLong(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(attackWait)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitQuiet waits until the node holds only the remaining well-behaved
// connections (the attackers' sessions finished closing), so "after"
// measures what stays.
func waitQuiet(t *testing.T, b *Broker, remaining int) {
	t.Helper()
	waitLong(t, "every attacking connection is gone", func() bool {
		return b.core.limiter.openConnections() == remaining && b.core.metrics.sessionsOpen.Load() == int64(remaining)
	})
}

// readErrors reads a raw connection until it ends and returns its error
// frames.
func readErrors(conn net.Conn) ([]*wire.ErrorFrame, error) {
	_ = conn.SetReadDeadline(time.Now().Add(attackWait))
	reader := wire.NewReader(conn, 0)
	var errs []*wire.ErrorFrame
	for {
		tag, body, err := reader.Next()
		if err != nil {
			var opErr *net.OpError
			if errors.Is(err, io.EOF) || errors.As(err, &opErr) && !opErr.Timeout() {
				return errs, nil
			}
			return errs, err
		}
		if tag == wire.TagError {
			frame := new(wire.ErrorFrame)
			if err := frame.Decode(body); err != nil {
				return errs, err
			}
			errs = append(errs, frame)
		}
	}
}

// 1,000 connections each send an 8-byte header announcing a 16 MiB body,
// then nothing. Before hello the node reads under the hello limit, so
// each is refused with frame_too_large before any body is read.
func TestAttackThousandHeadersAnnouncing16MiB(t *testing.T) {
	b := startBroker(t, nil)
	probe := startMemoryProbe(t)
	const attackers = 1000
	conns := make([]net.Conn, 0, attackers)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for i := range attackers {
		conn, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, conn)
		tag := wire.TagHello
		if i%2 == 1 {
			tag = wire.TagPublish
		}
		header := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(tag)), 16<<20)
		if _, err := conn.Write(header); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	probe.during()
	for i, conn := range conns {
		errs, err := readErrors(conn)
		if err != nil || len(errs) != 1 || errs[0].Code != wire.CodeFrameTooLarge {
			t.Fatalf("connection %d: %+v, %v; want one frame_too_large", i, errs, err)
		}
	}
	if got := b.Metrics().LimitReached(limitHelloFrame); got != attackers {
		t.Errorf("fibril_limit_reached_total{limit=%q} = %v, want %d", limitHelloFrame, got, attackers)
	}
	for _, conn := range conns {
		conn.Close()
	}
	conns = nil
	waitQuiet(t, b, 0)
	probe.finish()
	probe.bound(32<<20, 16<<20, 128<<20)
	wellBehaved(t, b, "after-headers")
}

// 1,000 connections never send a hello: half send nothing, half the
// first half of a hello of the largest size a hello may have. Each holds
// at most a hello's buffer until the hello deadline closes it.
func TestAttackConnectionsThatNeverSendHello(t *testing.T) {
	const helloTimeout = 5 * time.Second
	b := startBroker(t, func(c *Config) { c.HelloTimeout = helloTimeout })
	probe := startMemoryProbe(t)
	const attackers = 1000
	conns := make([]net.Conn, 0, attackers)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	partial := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(wire.TagHello)), wire.MaxHelloBodyBytes)
	partial = append(partial, make([]byte, wire.MaxHelloBodyBytes/2)...)
	began := time.Now()
	for i := range attackers {
		conn, err := net.Dial("tcp", b.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, conn)
		if i%2 == 1 {
			if _, err := conn.Write(partial); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
	}
	probe.during()
	if held := time.Since(began); held < helloTimeout {
		t.Logf("all %d connections held after %v, before the first deadline", attackers, held.Round(time.Millisecond))
	} else {
		t.Logf("the connections took %v to open: the live heap was measured after the first deadlines", held)
	}
	for i, conn := range conns {
		errs, err := readErrors(conn)
		if err != nil || len(errs) != 1 || errs[0].Code != wire.CodeProtocolViolation ||
			!strings.Contains(errs[0].Message, "no hello within") {
			t.Fatalf("connection %d: %+v, %v; want one protocol_violation for the hello deadline", i, errs, err)
		}
	}
	if got := b.Metrics().LimitReached(limitHelloDeadline); got != attackers {
		t.Errorf("fibril_limit_reached_total{limit=%q} = %v, want %d", limitHelloDeadline, got, attackers)
	}
	for _, conn := range conns {
		conn.Close()
	}
	conns = nil
	waitQuiet(t, b, 0)
	probe.finish()
	probe.bound(64<<20, 16<<20, 192<<20)
	wellBehaved(t, b, "after-silence")
}

// rawSession dials and completes hello, for attackers.
func rawSession(t *testing.T, b *Broker) (net.Conn, *wire.Writer) {
	t.Helper()
	conn, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A small receive buffer, so the kernel does not absorb the answers
	// the attacker does not read (loopback autotunes up to tens of MiB).
	if err := conn.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		t.Fatal(err)
	}
	writer := wire.NewWriter(conn, 0)
	_ = writer.WriteFrame(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "attacker"})
	_ = writer.Flush()
	reader := wire.NewReader(conn, 0)
	_ = conn.SetReadDeadline(time.Now().Add(testWait))
	if tag, _, err := reader.Next(); err != nil || tag != wire.TagHelloOK {
		t.Fatalf("attacker's hello: %v %v", tag, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn, writer
}

// One session floods list and info requests and never reads an answer.
// Its requests in flight are capped (the node stops reading it), list
// answers are gathered a few at a time, and its unread answers are capped
// in bytes: the node closes it. Goroutines stay bounded.
func TestAttackSessionFloodingListAndInfo(t *testing.T) {
	b := startBroker(t, func(c *Config) { c.Limits.MaxOutboxBytes = 2 << 20 })
	setup := connect(t, b)
	for i := range 50 {
		setup.mustDeclare(fmt.Sprintf("flood-%02d", i), wire.ModeBuffered, wire.QueueOptions{})
	}
	probe := startMemoryProbe(t)
	conn, writer := rawSession(t, b)
	written := make(chan error, 1)
	go func() {
		_ = conn.SetWriteDeadline(time.Now().Add(attackWait))
		for id := uint64(1); id <= 200_000; id++ {
			var frame wire.Frame = &wire.ListQueues{RequestID: id, Limit: 1000}
			if id%2 == 0 {
				frame = &wire.GetQueueInfo{RequestID: id, Queue: "flood-07"}
			}
			if err := writer.WriteFrame(frame); err != nil {
				written <- err
				return
			}
		}
		written <- writer.Flush()
	}()
	waitLong(t, "the node closes the flooding session", func() bool {
		return b.Metrics().LimitReached(limitOutboxSession) >= 1
	})
	probe.during()
	if err := <-written; err == nil {
		t.Error("the node read 200,000 requests from a client that read no answer")
	}
	t.Logf("reader waits for request credit: %v; sessions closed for unread answers: %v",
		b.Metrics().LimitReached(limitRequestsInFlight), b.Metrics().LimitReached(limitOutboxSession))
	waitQuiet(t, b, 1)
	probe.finish()
	probe.bound(64<<20, 16<<20, 192<<20)
	if growth := probe.goroutinePeak - int64(probe.goroutinesBefore); growth > 100 {
		t.Errorf("goroutines grew by %d during the flood (list answers must be gathered a few at a time)", growth)
	}
	wellBehaved(t, b, "after-flood")
}

// mustStore publishes to a buffered queue and requires every message
// confirmed, at written or durable: a buffered confirm stands on durable
// when a background sync covered the record before the confirm was sent
// (protocol 4.3), which a loaded machine makes likely.
func mustStore(c *testClient, queueName string, payloads ...string) {
	c.t.Helper()
	seqs := c.publish(queueName, payloads...)
	for seq, out := range c.awaitOutcomes(seqs) {
		if !out.confirmed || (out.boundary != wire.BoundaryWritten && out.boundary != wire.BoundaryDurable) {
			c.t.Fatalf("seq %d: %+v, want confirmed at written or durable", seq, out)
		}
	}
}

// publishBig puts count messages of size bytes in queue.
func publishBig(t *testing.T, c *testClient, queueName string, count, size int) {
	t.Helper()
	payload := strings.Repeat("x", size)
	for sent := 0; sent < count; sent += 10 {
		batch := make([]string, min(10, count-sent))
		for i := range batch {
			batch[i] = payload
		}
		mustStore(c, queueName, batch...)
	}
}

// A subscriber that never reads: the node closes it once the deliveries
// queued behind what it does not read pass the session's bound (or, with
// a lower node-wide bound, that one), or once a batch waits past the
// write timeout; its leases come back and another consumer gets them.
func TestAttackSubscriberThatNeverReads(t *testing.T) {
	for name, c := range map[string]struct {
		limits        Limits
		limit         string
		publishBefore bool // all messages ready before it subscribes: one burst, then nothing
	}{
		"session bound": {limits: Limits{MaxOutboxBytes: 2 << 20}, limit: limitOutboxSession},
		"node bound":    {limits: Limits{MaxOutboxBytesTotal: 3 << 20}, limit: limitOutboxNode},
		"write timeout": {limits: Limits{WriteTimeout: 300 * time.Millisecond}, limit: limitWriteTimeout, publishBefore: true},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			b := startBroker(t, func(config *Config) { config.Limits = c.limits })
			producer := connect(t, b)
			producer.mustDeclare("big", wire.ModeBuffered, wire.QueueOptions{})
			const messages, size = 400, 64 << 10
			if c.publishBefore {
				publishBig(t, producer, "big", messages, size)
			}
			probe := startMemoryProbe(t)
			slow := dialBroker(t, b)
			// A small receive buffer, so the kernel does not absorb what
			// the client does not read (loopback autotunes up to tens of MiB).
			if err := slow.conn.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
				t.Fatal(err)
			}
			slow.hello("", "")
			slow.subscribe("big", messages) // and never reads again
			if !c.publishBefore {
				publishBig(t, producer, "big", messages, size)
			}
			waitLong(t, "the node closes the subscriber that does not read", func() bool {
				return b.Metrics().LimitReached(c.limit) >= 1
			})
			probe.during()
			waitQuiet(t, b, 1)
			probe.finish()
			probe.bound(96<<20, 32<<20, 256<<20)
			consumer := connect(t, b)
			sub := consumer.subscribe("big", 10)
			received := 0
			for received < messages {
				for _, delivery := range consumer.nextDeliver(sub) {
					consumer.ack(sub, delivery.DeliveryTag)
					received++
				}
			}
			waitLong(t, "the node's outboxes are empty again", func() bool { return b.core.outboxBytes.Load() < 1<<20 })
		})
	}
}

// 10,000 declares from one client, pipelined: the node creates queues up
// to its limit and refuses the rest with resource_limit, one by one, the
// connection open; existing queues keep serving.
func TestAttackTenThousandDeclares(t *testing.T) {
	const maxQueues, declares = 100, 10_000
	b := startBroker(t, func(c *Config) { c.Limits.MaxQueues = maxQueues })
	probe := startMemoryProbe(t)
	c := connect(t, b)
	go func() {
		for i := range declares {
			if err := c.writer.WriteFrame(&wire.Declare{RequestID: uint64(i + 1), Queue: fmt.Sprintf("q%05d", i),
				Mode: wire.ModeBuffered}); err != nil {
				return
			}
		}
		_ = c.writer.Flush()
	}()
	created, refused := 0, 0
	for answered := 0; answered < declares; answered++ {
		frame, err := c.read()
		if err != nil {
			t.Fatalf("after %d answers: %v", answered, err)
		}
		switch f := frame.(type) {
		case *wire.DeclareOKMode:
			created++
		case *wire.ErrorFrame:
			if f.Code != wire.CodeResourceLimit || !strings.Contains(f.Message, "limit is 100") {
				t.Fatalf("declare %d refused with %+v", f.RequestID, f)
			}
			refused++
		default:
			t.Fatalf("unexpected %T", frame)
		}
		if answered == declares/2 {
			probe.during()
		}
	}
	probe.finish()
	probe.bound(64<<20, 16<<20, 256<<20)
	if created != maxQueues || refused != declares-maxQueues {
		t.Fatalf("%d created, %d refused; want %d and %d", created, refused, maxQueues, declares-maxQueues)
	}
	if got := b.Metrics().LimitReached(limitQueues); got != declares-maxQueues {
		t.Errorf("fibril_limit_reached_total{limit=%q} = %v", limitQueues, got)
	}
	other := connect(t, b)
	mustStore(other, "q00000", "an existing queue serves")
	id := other.id()
	other.send(&wire.DeleteQueue{RequestID: id, Queue: "q00001"})
	if _, ok := other.reply(id).(*wire.OK); !ok {
		t.Fatal("delete at the limit")
	}
	other.mustDeclare("room-again", wire.ModeBuffered, wire.QueueOptions{})
}

// badQueueNames break the naming rule each a different way.
var badQueueNames = map[string]string{
	"dot-dot":   "..",
	"leading":   ".x",
	"separator": "a/b",
	"nul":       "a\x00b",
	"long":      strings.Repeat("n", 300),
}

// Every request naming a bad queue is refused with invalid_name, the
// connection open, and nothing appears under the data directory.
func TestBadQueueNamesAtTheWire(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	for label, name := range badQueueNames {
		for _, operation := range []string{"declare", "subscribe", "info", "purge", "delete"} {
			if ok, code := tryOperation(c, operation, name); ok || code != wire.CodeInvalidName {
				t.Errorf("%s %s: carried out=%v code=%s, want invalid_name", operation, label, ok, code)
			}
		}
		seqs := c.publish(name, "m")
		if out := c.awaitOutcomes(seqs)[seqs[0]]; out.confirmed || out.code != wire.CodeInvalidName {
			t.Errorf("publish %s: %+v", label, out)
		}
		reply := c.declare("fine", wire.ModeBuffered, wire.QueueOptions{DeadLetterQueue: name, MaxDeliveries: 2})
		if refusal, ok := reply.(*wire.ErrorFrame); !ok || refusal.Code != wire.CodeInvalidOptions {
			t.Errorf("a dead-letter queue named %s: %+v", label, reply)
		}
		if _, err := partitionDir(b.Config().DataDir, name); !errors.Is(err, wire.ErrInvalidQueueName) {
			t.Errorf("the path join of %s: %v", label, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(b.Config().DataDir, queuesDirName))
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		t.Errorf("the data directory holds %q after bad names only", entry.Name())
	}
	if entries, _ := os.ReadDir(filepath.Dir(b.Config().DataDir)); len(entries) != 1 {
		t.Errorf("the data directory's parent changed: %v", entries)
	}
	wellBehaved(t, b, "good-name")
}

// A declaration proposed straight through Raft, with none of the
// session's or the manager's checks, is refused by the catalog for each
// bad name; nothing reaches the data directory and the node serves on.
func TestBadQueueNamesProposedThroughRaft(t *testing.T) {
	c := startBrokerCluster(t, 1)
	member := c.members["node1"]
	ctx := testContext(t)
	for label, name := range badQueueNames {
		_, err := member.node.DeclareQueue(ctx, cluster.QueueDecl{Name: name})
		if !errors.Is(err, cluster.ErrInvalidDeclaration) {
			t.Errorf("%s through Raft: %v", label, err)
		}
	}
	view, err := member.node.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(view.Queues) != 0 {
		t.Fatalf("the catalog holds %+v", view.Queues)
	}
	entries, _ := os.ReadDir(filepath.Join(member.config.DataDir, queuesDirName))
	for _, entry := range entries {
		t.Errorf("the data directory holds %q", entry.Name())
	}
	sdk := c.dialSDK("node1")
	if _, err := sdk.Declare(ctx, "good-name", client.QueueConfig{}); err != nil {
		t.Fatalf("a good declare after the bad proposals: %v", err)
	}
}
