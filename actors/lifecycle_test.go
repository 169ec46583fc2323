package actors

// The lifecycle rules (doc.go, "Lifecycle") and the three reproductions
// that broke them: a stop with messages queued, a delete under traffic
// followed by a re-declare, and a panic in the queues manager.

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// logBuffer collects a broker's log lines for a test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lines returns the lines that contain every one of words.
func (l *logBuffer) lines(words ...string) []string {
	var found []string
	for _, line := range strings.Split(l.String(), "\n") {
		matches := line != ""
		for _, word := range words {
			matches = matches && strings.Contains(line, word)
		}
		if matches {
			found = append(found, line)
		}
	}
	return found
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startLoggedBroker starts a broker whose log lines the test can read.
func startLoggedBroker(t *testing.T, mutate func(*Config)) (*Broker, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	b := startBroker(t, func(config *Config) {
		config.Logger = logs.logger()
		if mutate != nil {
			mutate(config)
		}
	})
	return b, logs
}

// Reproduction 1: the node stops while partitions have appends, confirms
// and deliveries queued. Every partition stops without a panic or a
// restart, Close returns nil, and nothing confirmed is lost.
func TestStopWithMessagesQueued(t *testing.T) {
	dir := t.TempDir()
	logs := &logBuffer{}
	config := testConfig(t, dir)
	config.Logger = logs.logger()
	b, err := Start(config)
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, b)
	const queues = 8
	for i := range queues {
		mode := wire.ModeDurable
		if i%2 == 1 {
			mode = wire.ModeBuffered
		}
		c.mustDeclare(fmt.Sprintf("q%d", i), mode, wire.QueueOptions{})
	}
	confirmed := map[string]int{}
	for i := range queues {
		name := fmt.Sprintf("q%d", i)
		boundary := wire.BoundaryDurable
		if i%2 == 1 {
			boundary = wire.BoundaryWritten
		}
		c.mustConfirm(name, boundary, "kept-1", "kept-2")
		confirmed[name] = 2
		c.subscribe(name, 4)
	}
	// In flight at Close: publishes not awaited on every queue.
	for round := range 20 {
		for i := range queues {
			c.publish(fmt.Sprintf("q%d", i), fmt.Sprintf("flying-%d", round))
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close with messages queued: %v", err)
	}
	if panics := logs.lines("panicked"); len(panics) > 0 {
		t.Fatalf("an actor panicked during the stop:\n%s", strings.Join(panics, "\n"))
	}
	if restarts := b.Registry().RestartsTotal(); restarts != 0 {
		t.Fatalf("%d actors restarted during the stop", restarts)
	}
	again := startBrokerOn(t, testConfig(t, dir))
	reader := connect(t, again)
	for name, count := range confirmed {
		got := drain(t, reader, name)
		for k := range count {
			if _, ok := got[fmt.Sprintf("kept-%d", k+1)]; !ok {
				t.Fatalf("%s lost confirmed kept-%d across a clean stop", name, k+1)
			}
		}
	}
}

// Reproduction 2: a queue deleted while a client publishes to it stays
// deleted, its files are gone, a re-declare makes a fresh queue, and the
// other queue and the sessions are unaffected.
func TestDeleteUnderTrafficThenRedeclare(t *testing.T) {
	b, logs := startLoggedBroker(t, nil)
	admin, publisher := connect(t, b), connect(t, b)
	admin.mustDeclare("victim", wire.ModeDurable, wire.QueueOptions{})
	admin.mustDeclare("bystander", wire.ModeDurable, wire.QueueOptions{})
	publisher.mustConfirm("victim", wire.BoundaryDurable, "before")
	const rounds = 10
	for round := range rounds {
		// Publishes stream in while the delete runs.
		var seqs []uint64
		for i := range 50 {
			seqs = append(seqs, publisher.publish("victim", fmt.Sprintf("r%d-%d", round, i))...)
		}
		id := admin.id()
		admin.send(&wire.DeleteQueue{RequestID: id, Queue: "victim"})
		for i := range 50 {
			seqs = append(seqs, publisher.publish("victim", fmt.Sprintf("r%d-late-%d", round, i))...)
		}
		if ok, isOK := admin.reply(id).(*wire.OK); !isOK {
			t.Fatalf("round %d: delete answered %+v", round, ok)
		}
		for seq, out := range publisher.awaitOutcomes(seqs) {
			if !out.confirmed && out.code != wire.CodeUnknownQueue {
				t.Fatalf("round %d: seq %d refused with %+v, want confirmed or unknown_queue", round, seq, out)
			}
		}
		if _, err := os.Stat(mustPartitionDir(t, b.Config().DataDir, "victim")); err == nil {
			t.Fatalf("round %d: the deleted queue's files are still there", round)
		}
		if _, ok := b.Registry().Lookup("node/queues/victim/0"); ok {
			t.Fatalf("round %d: the deleted queue's partition is still running", round)
		}
		reply := admin.mustDeclare("victim", wire.ModeDurable, wire.QueueOptions{}).(*wire.DeclareOKMode)
		if !reply.Created {
			t.Fatalf("round %d: re-declare did not create a fresh queue: %+v", round, reply)
		}
		if info := admin.info("victim"); info.Ready != 0 || info.WrittenNext != 0 {
			t.Fatalf("round %d: the fresh queue holds old messages: %+v", round, info)
		}
		publisher.mustConfirm("bystander", wire.BoundaryDurable, fmt.Sprintf("bystander-%d", round))
	}
	if info := admin.info("bystander"); info.Ready != rounds {
		t.Fatalf("bystander lost messages: %+v", info)
	}
	if b.FatalError() != nil || len(logs.lines("panicked")) > 0 {
		t.Fatalf("fatal %v; panics:\n%s", b.FatalError(), strings.Join(logs.lines("panicked"), "\n"))
	}
}

// Reproduction 3: a panic in the queues manager restarts it; it recovers
// every queue from disk and the node keeps serving, twice in a row.
func TestPanicInManagerRecoversEveryQueue(t *testing.T) {
	b, _ := startLoggedBroker(t, nil)
	c := connect(t, b)
	c.mustDeclare("orders", wire.ModeDurable, wire.QueueOptions{})
	c.mustDeclare("clicks", wire.ModeBuffered, wire.QueueOptions{})
	for round := range nodeRestartsMax - 1 {
		c.mustConfirm("orders", wire.BoundaryDurable, fmt.Sprintf("order-%d", round))
		c.mustConfirm("clicks", wire.BoundaryWritten, fmt.Sprintf("click-%d", round))
		if err := b.InjectPanic("node/queues", "test"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the manager to restart", func() bool {
			info, ok := b.Registry().Lookup("node/queues")
			return ok && info.Restarts == uint64(round+1)
		})
		waitFor(t, "both queues to serve again", func() bool {
			for _, name := range []string{"orders", "clicks"} {
				info, ok := b.QueueInfo(name)
				if !ok || info.Fenced {
					return false
				}
			}
			return true
		})
	}
	select {
	case <-b.Fatal():
		t.Fatalf("the node stopped: %v", b.FatalError())
	default:
	}
	c.mustConfirm("orders", wire.BoundaryDurable, "after")
	c.mustDeclare("fresh", wire.ModeDurable, wire.QueueOptions{})
	orders := drain(t, c, "orders")
	for round := range nodeRestartsMax - 1 {
		if _, ok := orders[fmt.Sprintf("order-%d", round)]; !ok {
			t.Fatalf("confirmed order-%d lost across the manager's restarts (have %v)", round, keys(orders))
		}
	}
}

// A clean shutdown with sessions, subscriptions and traffic logs no ERROR
// line.
func TestCleanShutdownLogsNoError(t *testing.T) {
	logs := &logBuffer{}
	config := testConfig(t, t.TempDir())
	config.Logger = logs.logger()
	b, err := Start(config)
	if err != nil {
		t.Fatal(err)
	}
	c, other := connect(t, b), connect(t, b)
	for i := range 5 {
		name := fmt.Sprintf("q%d", i)
		c.mustDeclare(name, wire.ModeDurable, wire.QueueOptions{DeadLetterQueue: "dead", MaxDeliveries: 2})
		c.mustConfirm(name, wire.BoundaryDurable, "a", "b")
		other.subscribe(name, 1)
	}
	for i := range 5 {
		c.publish(fmt.Sprintf("q%d", i), "in-flight")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if errs := logs.lines("level=ERROR"); len(errs) > 0 {
		t.Fatalf("a clean shutdown logged errors:\n%s", strings.Join(errs, "\n"))
	}
	if len(logs.lines("node stopped")) != 1 {
		t.Fatalf("no stop line:\n%s", logs)
	}
}

// A declare that arrives while its name is being deleted waits for the
// delete and then declares a fresh queue, instead of being refused.
func TestDeclareDuringDeleteMakesAFreshQueue(t *testing.T) {
	b := startBroker(t, nil)
	deleter, declarer := connect(t, b), connect(t, b)
	for round := range 5 {
		deleter.mustDeclare("reused", wire.ModeDurable, wire.QueueOptions{})
		deleter.mustConfirm("reused", wire.BoundaryDurable, fmt.Sprintf("old-%d", round))
		deleteID, declareID := deleter.id(), declarer.id()
		deleter.send(&wire.DeleteQueue{RequestID: deleteID, Queue: "reused"})
		declarer.send(&wire.Declare{RequestID: declareID, Queue: "reused", Mode: wire.ModeDurable})
		if ok, isOK := deleter.reply(deleteID).(*wire.OK); !isOK {
			t.Fatalf("round %d: delete: %+v", round, ok)
		}
		switch reply := declarer.reply(declareID).(type) {
		case *wire.DeclareOKMode:
			// Before the delete (then the delete removed it) or after it
			// (then it is fresh): either way the old message is gone.
		default:
			t.Fatalf("round %d: declare during the delete: %+v", round, reply)
		}
		deleter.mustDeclare("reused", wire.ModeDurable, wire.QueueOptions{})
		if info := deleter.info("reused"); info.Ready != 0 {
			t.Fatalf("round %d: the old message survived the delete: %+v", round, info)
		}
		id := deleter.id()
		deleter.send(&wire.DeleteQueue{RequestID: id, Queue: "reused"})
		deleter.reply(id)
	}
}
