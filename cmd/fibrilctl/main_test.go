package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/client/clienttest"
	"github.com/fibrilmq/fibril/wire"
)

func startServer(t *testing.T) *clienttest.Server {
	t.Helper()
	server, err := clienttest.NewServer(clienttest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Close)
	return server
}

type result struct {
	code           int
	stdout, stderr string
}

// fibrilctl runs one command line in process against the server.
func fibrilctl(t *testing.T, server *clienttest.Server, args ...string) result {
	t.Helper()
	if server != nil {
		args = append(args, "--server", server.Addr())
	}
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// expectFailure checks the exit code and that stderr is exactly one line.
func expectFailure(t *testing.T, r result, code int, contains string) {
	t.Helper()
	if r.code != code || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, contains) {
		t.Fatalf("got exit %d, stderr %q; want exit %d and one line containing %q", r.code, r.stderr, code, contains)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	server := startServer(t)
	expectFailure(t, fibrilctl(t, nil, "frobnicate"), exitUsage, "unknown command")
	expectFailure(t, fibrilctl(t, server, "declare"), exitUsage, "wants NAME")
	expectFailure(t, fibrilctl(t, server, "declare", "a", "b"), exitUsage, "wants NAME")
	expectFailure(t, fibrilctl(t, server, "declare", "a", "--bogus"), exitUsage, "bogus")
	expectFailure(t, fibrilctl(t, server, "declare", "a", "--max-deliveries", "-1"), exitUsage, "max-deliveries")
	expectFailure(t, fibrilctl(t, server, "consume", "a", "--ack", "--nack"), exitUsage, "exclude")
	expectFailure(t, fibrilctl(t, server, "queues", "extra"), exitUsage, "no arguments")
	if r := fibrilctl(t, nil); r.code != exitUsage || !strings.Contains(r.stderr, "usage") {
		t.Fatalf("no command: %+v", r)
	}
	if r := fibrilctl(t, nil, "help"); r.code != exitOK || !strings.Contains(r.stdout, "publish") {
		t.Fatalf("help: %+v", r)
	}
	if r := fibrilctl(t, nil, "publish", "-h"); r.code != exitOK || !strings.Contains(r.stdout, "-rate") {
		t.Fatalf("publish -h: %+v", r)
	}
	if server.Stats().Connections != 0 {
		t.Fatal("a command with a wrong command line connected to the node")
	}
}

func TestUnreachableServerFailsWithOneLine(t *testing.T) {
	server := startServer(t)
	address := server.Addr()
	server.Close()
	r := fibrilctl(t, nil, "queues", "--server", address)
	expectFailure(t, r, exitFailure, address)
}

func TestDeclarePrintsModeAndWarnings(t *testing.T) {
	server := startServer(t)
	r := fibrilctl(t, server, "declare", "orders", "--max-deliveries", "5", "--dead-letter", "dead", "--ttl", "1m", "--lease", "30s")
	if r.code != exitOK || r.stdout != "orders mode=durable created=true\n" {
		t.Fatalf("declare: %+v", r)
	}
	state, _ := server.Queue("orders")
	want := wire.QueueOptions{MaxDeliveries: 5, DeadLetterQueue: "dead", MessageTTLMs: 60000, LeaseTimeoutMs: 30000}
	if state.Mode != wire.ModeDurable || state.Options != want {
		t.Fatalf("the node got %+v; want %+v", state, want)
	}
	r = fibrilctl(t, server, "declare", "--buffered", "clicks")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "clicks mode=buffered created=true\nwarning: ") {
		t.Fatalf("declare --buffered: %+v", r)
	}
	expectFailure(t, fibrilctl(t, server, "declare", "clicks"), exitFailure, "mode_conflict")
}

func TestPublishConfirmsEveryMessageWithItsNumber(t *testing.T) {
	server := startServer(t)
	fibrilctl(t, server, "declare", "q")
	r := fibrilctl(t, server, "publish", "q", "--count", "300", "--size", "32")
	if r.code != exitOK || r.stdout != "confirmed 300\n" || r.stderr != "" {
		t.Fatalf("publish: %+v", r)
	}
	state, _ := server.Queue("q")
	if state.Ready != 300 {
		t.Fatalf("the queue holds %d, want 300", state.Ready)
	}
	for i, payload := range state.Payloads {
		prefix := fmt.Sprintf("seq=%d ", i+1)
		if len(payload) != 32 || !strings.HasPrefix(string(payload), prefix) || strings.Trim(string(payload[len(prefix):]), ".") != "" {
			t.Fatalf("body %d is %q; want %q padded with dots to 32 bytes", i+1, payload, prefix)
		}
	}
	r = fibrilctl(t, server, "publish", "q", "--count", "5", "--rate", "1000", "--body", "hello")
	if r.code != exitOK || r.stdout != "confirmed 5\n" {
		t.Fatalf("publish --body --rate: %+v", r)
	}
	expectFailure(t, fibrilctl(t, server, "publish", "missing"), exitFailure, "unknown_queue")
}

// A connection lost in the middle of a run: publish reconnects and goes
// on, counts the messages in flight at the loss as unknown outcomes
// (never sending them again itself), and says so.
func TestPublishKeepsGoingThroughAReconnectAndReportsUnknownOutcomes(t *testing.T) {
	server := startServer(t)
	fibrilctl(t, server, "declare", "q")
	var stored atomic.Int64
	var dropped atomic.Bool
	server.SetHook(func(conn *clienttest.Conn, frame wire.Frame) clienttest.Action {
		if publish, ok := frame.(*wire.Publish); ok && !dropped.Load() {
			if stored.Add(int64(len(publish.Messages))) >= 100 {
				dropped.Store(true)
				return clienttest.Drop // stored nothing of this frame, answered nothing
			}
		}
		return clienttest.Handle
	})
	const count = 5000
	r := fibrilctl(t, server, "publish", "q", "--count", fmt.Sprint(count))
	stats := server.Stats()
	var confirmed, total, unknown int
	if _, err := fmt.Sscanf(r.stdout, "confirmed %d of %d\nunknown %d:", &confirmed, &total, &unknown); err != nil {
		t.Fatalf("stdout %q: %v", r.stdout, err)
	}
	if !dropped.Load() || stats.Hellos < 2 || total != count || unknown == 0 || confirmed+unknown != count ||
		stats.Published != confirmed {
		t.Fatalf("stdout %q, stats %+v: want a reconnect, every message accounted for once", r.stdout, stats)
	}
	expectFailure(t, r, exitFailure, "unknown outcome")
}

func TestConsumePrintsDeliveriesAndChecksNumbers(t *testing.T) {
	server := startServer(t)
	fibrilctl(t, server, "declare", "q")
	fibrilctl(t, server, "publish", "q", "--count", "20")
	r := fibrilctl(t, server, "consume", "q", "--count", "3")
	lines := strings.Split(r.stdout, "\n")
	for i := range 3 {
		prefix := fmt.Sprintf("attempt=1 id=q-%d published=", i+1)
		suffix := fmt.Sprintf(" headers=seq=%d seq=%d", i+1, i+1)
		if !strings.HasPrefix(lines[i], prefix) || !strings.HasSuffix(lines[i], suffix) {
			t.Fatalf("consume line %d: %q, want %q...%q", i, lines[i], prefix, suffix)
		}
	}
	if r.code != exitOK || len(lines) != 5 || lines[3] != "received 3" {
		t.Fatalf("consume: %+v", r)
	}
	r = fibrilctl(t, server, "consume", "q", "--count", "17", "--quiet", "--check")
	// Numbers 1 to 3 were acked by the first run, so they are missing here.
	if r.code != exitFailure || !strings.HasPrefix(r.stdout, "received 17\ncheck: distinct=17 duplicates=0 missing=3 highest=20") {
		t.Fatalf("consume --check: %+v", r)
	}
	awaitQueue(t, server, "q", func(s clienttest.QueueState) bool {
		return s.Ready == 0 && s.Leased == 0 && s.Subscriptions == 0
	})

	fibrilctl(t, server, "publish", "q", "--count", "2")
	r = fibrilctl(t, server, "consume", "q", "--count", "4", "--nack", "--prefetch", "1")
	if r.code != exitOK || !strings.Contains(r.stdout, "attempt=2 redelivered id=q-") {
		t.Fatalf("consume --nack: %+v; want redeliveries with attempt 2", r)
	}
	r = fibrilctl(t, server, "consume", "q", "--count", "2", "--no-ack", "--check")
	if r.code != exitOK || !strings.Contains(r.stdout, "check: distinct=2 duplicates=0 missing=0 highest=2") {
		t.Fatalf("consume --no-ack --check: %+v", r)
	}
	awaitQueue(t, server, "q", func(s clienttest.QueueState) bool { return s.Ready == 2 && s.Leased == 0 })
}

func TestConsumeTimesOutWithWhatArrived(t *testing.T) {
	server := startServer(t)
	fibrilctl(t, server, "declare", "q")
	fibrilctl(t, server, "publish", "q", "--count", "2", "--body", "x\ny")
	r := fibrilctl(t, server, "consume", "q", "--count", "5", "--timeout", "50ms")
	if !strings.HasSuffix(r.stdout, "received 2 of 5\n") || !strings.Contains(r.stdout, `headers=seq=1 "x\ny"`) {
		t.Fatalf("stdout %q", r.stdout)
	}
	expectFailure(t, r, exitFailure, "timed out")
	fibrilctl(t, server, "publish", "q", "--count", "2")
	r = fibrilctl(t, server, "consume", "q", "--timeout", "50ms", "--quiet")
	if r.code != exitOK || r.stdout != "received 2\n" {
		t.Fatalf("consume without --count until the timeout: %+v", r)
	}
	expectFailure(t, fibrilctl(t, server, "consume", "missing", "--timeout", "1s"), exitFailure, "unknown_queue")
}

func TestInfoQueuesDeletePurge(t *testing.T) {
	server := startServer(t)
	fibrilctl(t, server, "declare", "b-queue", "--buffered", "--max-deliveries", "3")
	fibrilctl(t, server, "declare", "a-queue")
	fibrilctl(t, server, "publish", "a-queue", "--count", "4")

	r := fibrilctl(t, server, "info", "a-queue")
	if r.code != exitOK || !strings.Contains(r.stdout, "mode:") || !strings.Contains(r.stdout, "ready:") ||
		!strings.Contains(r.stdout, "durable boundary") {
		t.Fatalf("info: %+v", r)
	}
	r = fibrilctl(t, server, "info", "b-queue", "--json")
	var info queueJSON
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != exitOK {
		t.Fatalf("info --json: %+v: %v", r, err)
	}
	if info.Name != "b-queue" || info.Mode != "buffered" || info.Options.MaxDeliveries != 3 {
		t.Fatalf("info --json decoded to %+v", info)
	}
	r = fibrilctl(t, server, "queues")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != exitOK || len(lines) != 3 || !strings.HasPrefix(lines[1], "a-queue ") || !strings.HasPrefix(lines[2], "b-queue ") {
		t.Fatalf("queues: %+v", r)
	}
	r = fibrilctl(t, server, "queues", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[0]["ready"] != 4.0 {
		t.Fatalf("queues --json: %+v: %v", r, err)
	}
	if r := fibrilctl(t, server, "purge", "a-queue"); r.code != exitOK || r.stdout != "purged a-queue: 4 messages removed\n" {
		t.Fatalf("purge: %+v", r)
	}
	if r := fibrilctl(t, server, "delete", "a-queue"); r.code != exitOK || r.stdout != "deleted a-queue: 0 messages removed\n" {
		t.Fatalf("delete: %+v", r)
	}
	expectFailure(t, fibrilctl(t, server, "info", "a-queue"), exitFailure, "unknown_queue")
}

func TestBodyNumbersRoundTrip(t *testing.T) {
	for _, size := range []int{0, 3, 6, 7, 100} {
		body := numberedBody(42, size)
		if size > 6 && len(body) != size {
			t.Fatalf("size %d: body %q", size, body)
		}
		seq, ok := sequenceOf(&client.Delivery{Payload: body})
		if !ok || seq != 42 {
			t.Fatalf("size %d: body %q read back as %d %v", size, body, seq, ok)
		}
	}
	if _, ok := sequenceOf(&client.Delivery{Payload: []byte("hello")}); ok {
		t.Fatal("a body without a number read as numbered")
	}
	seq, ok := sequenceOf(&client.Delivery{Payload: []byte("text"), Headers: client.Headers{{Key: "seq", Value: []byte("9")}}})
	if !ok || seq != 9 {
		t.Fatalf("header number read as %d %v", seq, ok)
	}
}

func awaitQueue(t *testing.T, server *clienttest.Server, name string, cond func(clienttest.QueueState) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := server.Await(ctx, func(clienttest.Stats) bool {
		state, _ := server.Queue(name)
		return cond(state)
	})
	if err != nil {
		state, _ := server.Queue(name)
		t.Fatalf("queue %s never reached the state; last %+v: %v", name, state, err)
	}
}
