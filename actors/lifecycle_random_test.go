package actors

// A seeded randomized test of the actor lifecycle. It interleaves
// declares, publishes, consumes (settling what it gets), deletes,
// re-declares, purges, node restarts, and injected panics in partitions,
// the queues manager and sessions, then stops the node. After every step
// it checks the invariants:
//
//   - the node is alive (no fatal failure);
//   - the registry matches the declared queues: one partition (with its log
//     and sync actors) per declared queue, serving, and none for a queue
//     that is not declared; a deleted queue's files are gone;
//   - no actor runs outside the registry (every live PID of the actor
//     system is a registered actor, the library's own processes aside);
//   - nothing confirmed is lost: every queue holds at least the messages
//     confirmed to it and not yet acked or purged, and what it delivers was
//     published to that incarnation of the queue;
//   - a publish to a declared, settled queue is confirmed.
//
// At the end Close returns nil and no goroutine or file descriptor of the
// broker remains.
//
// Steps: lifecycleSteps by default, ten times more with FIBRIL_SOAK=1,
// FIBRIL_LIFECYCLE_STEPS to choose. The seed is printed on failure;
// FIBRIL_SEED replays it.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

const lifecycleSteps = 400

func lifecycleStepCount(t *testing.T) int {
	if text := os.Getenv("FIBRIL_LIFECYCLE_STEPS"); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil {
			t.Fatalf("FIBRIL_LIFECYCLE_STEPS: %v", err)
		}
		return n
	}
	if os.Getenv("FIBRIL_SOAK") == "1" {
		return 10 * lifecycleSteps
	}
	return lifecycleSteps
}

// lifecycleQueue is the model of one declared queue.
type lifecycleQueue struct {
	mode       wire.Mode
	generation int             // bumped by every declare after a delete
	confirmed  map[string]bool // confirmed, not acked, not purged: must be there
	panics     int             // partition panics since this broker started
}

type lifecycleRun struct {
	t             *testing.T
	random        *rand.Rand
	dir           string
	broker        *Broker
	client        *testClient
	queues        map[string]*lifecycleQueue
	names         []string
	generations   map[string]int // the generation of each deleted queue
	managerPanics int
	published     map[string]bool // every payload ever published
	nextPayload   int
	log           []string       // the steps so far, printed on failure
	counts        map[string]int // steps run, by kind
	address       atomic.Value   // the running broker's client address, for the noise
	sessionPath   string         // the registry path of the client's session
}

// startNoise publishes to the run's queue names from a second connection,
// without pause, so that every delete, restart, panic and shutdown of the
// run meets appends in flight. Its messages say "noise" and are checked
// only for coming from it; its connection is re-made whenever it ends.
func (r *lifecycleRun) startNoise() (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	names := append([]string(nil), r.names...)
	go func() {
		defer close(finished)
		var seq uint64
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			default:
			}
			conn, err := net.Dial("tcp", r.address.Load().(string))
			if err != nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			go func() { // confirms and errors are not checked; the end is
				_, _ = io.Copy(io.Discard, conn)
				conn.Close()
			}()
			writer := wire.NewWriter(conn, 0)
			_ = writer.WriteFrame(&wire.Hello{Versions: []uint16{wire.ProtocolVersion}, ClientName: "noise"})
			for err == nil {
				select {
				case <-done:
					conn.Close()
					return
				default:
				}
				seq++
				name := names[(int(seq)+n)%len(names)]
				err = writer.WriteFrame(&wire.Publish{Queue: []byte(name),
					Messages: []wire.PublishMessage{{Seq: seq, Payload: []byte("noise")}}})
				if err == nil {
					err = writer.Flush()
				}
				time.Sleep(2 * time.Millisecond)
			}
			conn.Close()
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func TestRandomizedLifecycle(t *testing.T) {
	seed := testSeed(t)
	steps := lifecycleStepCount(t)
	goroutinesBefore := brokerGoroutines()
	fdsBefore := openFDs(t)
	run := &lifecycleRun{
		t: t, random: rand.New(rand.NewPCG(seed, seed^0x5deece66d)), dir: t.TempDir(),
		queues: map[string]*lifecycleQueue{}, names: []string{"alpha", "beta", "gamma", "delta"},
		published: map[string]bool{}, generations: map[string]int{}, counts: map[string]int{},
	}
	t.Cleanup(func() {
		if t.Failed() {
			tail := run.log[max(len(run.log)-30, 0):]
			t.Logf("last steps:\n%s", strings.Join(tail, "\n"))
		}
	})
	run.start()
	stopNoise := run.startNoise()
	spent := map[string]time.Duration{}
	for step := range steps {
		began, before := time.Now(), len(run.log)
		run.step(step)
		kind := "none"
		if len(run.log) > before {
			kind = strings.Fields(run.log[before])[0]
		}
		spent[kind] += time.Since(began)
		began = time.Now()
		run.check(step)
		spent["check"] += time.Since(began)
	}
	t.Logf("time by step kind: %v", spent)
	stopNoise()
	run.client.conn.Close()
	if err := run.broker.Close(); err != nil {
		t.Fatalf("final close: %v", err)
	}
	t.Logf("%d steps: %v", steps, run.counts)
	waitFor(t, "every broker goroutine to end", func() bool { return len(brokerGoroutines()) <= len(goroutinesBefore) })
	waitFor(t, "every file descriptor to close", func() bool { return openFDs(t) <= fdsBefore })
	if left := brokerGoroutines(); len(left) > len(goroutinesBefore) {
		t.Fatalf("broker goroutines left:\n%s", strings.Join(left, "\n\n"))
	}
}

func (r *lifecycleRun) start() {
	r.t.Helper()
	config := testConfig(r.t, r.dir)
	b, err := Start(config)
	if err != nil {
		r.t.Fatalf("start: %v", err)
	}
	r.broker = b
	r.address.Store(b.Addr().String())
	r.connect()
	for _, q := range r.queues {
		q.panics = 0
	}
	r.managerPanics = 0
}

func (r *lifecycleRun) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
	r.counts[strings.Fields(format)[0]]++
}

func (r *lifecycleRun) pick() string { return r.names[r.random.IntN(len(r.names))] }

// step runs one random operation. Operations on a queue pick a declared
// one; with none declared, the step declares one.
func (r *lifecycleRun) step(int) {
	roll := r.random.IntN(100)
	if roll < 10 || len(r.queues) == 0 {
		r.declare(r.pick())
		return
	}
	name := r.pickDeclared()
	q := r.queues[name]
	switch {
	case roll < 40:
		r.publish(name, q, 1+r.random.IntN(8))
	case roll < 58:
		r.consume(name, q)
	case roll < 64:
		r.delete(name)
	case roll < 68:
		r.purge(name, q)
	case roll < 72:
		r.restartNode()
	case roll < 81 && q.panics < partitionRestartsMax-1:
		r.panicPartition(name, q)
	case roll < 84 && r.managerPanics < nodeRestartsMax-1:
		r.panicManager()
	case roll < 90:
		r.panicSession()
	default:
		r.note("info %s", name)
		r.client.settledInfo(name)
	}
}

// pickDeclared picks one of the declared queues.
func (r *lifecycleRun) pickDeclared() string {
	var declared []string
	for _, name := range r.names {
		if r.queues[name] != nil {
			declared = append(declared, name)
		}
	}
	return declared[r.random.IntN(len(declared))]
}

func (r *lifecycleRun) declare(name string) {
	q := r.queues[name]
	if q == nil {
		mode := wire.ModeDurable
		if r.random.IntN(2) == 0 {
			mode = wire.ModeBuffered
		}
		q = &lifecycleQueue{mode: mode, confirmed: map[string]bool{}}
		if previous, ok := r.generations[name]; ok {
			q.generation = previous + 1
		}
		r.queues[name] = q
	}
	r.note("declare %s (%s, generation %d)", name, q.mode, q.generation)
	r.client.mustDeclare(name, q.mode, wire.QueueOptions{})
}

func (r *lifecycleRun) boundary(q *lifecycleQueue) wire.Boundary {
	if q.mode == wire.ModeBuffered {
		return wire.BoundaryWritten
	}
	return wire.BoundaryDurable
}

func (r *lifecycleRun) publish(name string, q *lifecycleQueue, count int) {
	var payloads []string
	for range count {
		r.nextPayload++
		payload := fmt.Sprintf("%s#%d/%d", name, q.generation, r.nextPayload)
		payloads = append(payloads, payload)
		r.published[payload] = true
	}
	r.note("publish %s %d", name, count)
	seqs := r.client.publish(name, payloads...)
	outcomes := r.client.awaitOutcomes(seqs)
	for i, seq := range seqs {
		if out := outcomes[seq]; !out.confirmed || out.boundary != r.boundary(q) {
			r.t.Fatalf("publish %s to a settled queue: %+v", payloads[i], out)
		}
		q.confirmed[payloads[i]] = true
	}
}

// consume subscribes, takes what the queue has ready (up to a prefetch),
// acks some and releases the rest, then unsubscribes.
func (r *lifecycleRun) consume(name string, q *lifecycleQueue) {
	info := r.client.settledInfo(name)
	prefetch := 1 + r.random.IntN(6)
	want := min(int(info.Ready), prefetch)
	r.note("consume %s: %d of %d ready, prefetch %d", name, want, info.Ready, prefetch)
	sub := r.client.subscribe(name, uint32(prefetch))
	var got []wire.Delivery
	for len(got) < want {
		got = append(got, r.client.nextDeliver(sub)...)
	}
	stale := false
	if len(got) > 0 && q.panics < partitionRestartsMax-1 && r.random.IntN(5) == 0 {
		// A panic while deliveries are held: their tags go stale and the
		// messages come back; the settles below are refused (or land on
		// the new instance's leases, which is as good).
		r.panicPartition(name, q)
		stale = true
	}
	for _, d := range got {
		payload := string(d.Payload)
		if payload == "noise" {
			r.client.ack(sub, d.DeliveryTag)
			continue
		}
		if !r.published[payload] || !strings.HasPrefix(payload, fmt.Sprintf("%s#%d/", name, q.generation)) {
			r.t.Fatalf("%s delivered %q, never published to this incarnation (generation %d)", name, payload, q.generation)
		}
		if stale {
			r.client.ack(sub, d.DeliveryTag)
			continue
		}
		if r.random.IntN(3) > 0 {
			r.client.ack(sub, d.DeliveryTag)
			delete(q.confirmed, payload)
		} else {
			r.client.send(&wire.Release{Settle: wire.Settle{SubscriptionID: sub, DeliveryTags: []uint64{d.DeliveryTag}}})
		}
	}
	id := r.client.id()
	r.client.send(&wire.Unsubscribe{RequestID: id, SubscriptionID: sub})
	if reply, ok := r.client.reply(id).(*wire.OK); !ok {
		r.t.Fatalf("unsubscribe: %+v", reply)
	}
}

// outcomesUntilClosed reads until the node closes the connection and
// returns the publish outcomes seen on the way (backlog included).
func (c *testClient) outcomesUntilClosed() map[uint64]outcome {
	c.t.Helper()
	got := map[uint64]outcome{}
	record := func(frame wire.Frame) {
		switch f := frame.(type) {
		case *wire.Confirm:
			for _, r := range f.Ranges {
				for seq := r.First; seq <= r.Last; seq++ {
					got[seq] = outcome{confirmed: true, boundary: r.Boundary}
				}
			}
		case *wire.NegativeConfirm:
			for _, r := range f.Ranges {
				for seq := r.First; seq <= r.Last; seq++ {
					got[seq] = outcome{code: r.Code, message: r.Message}
				}
			}
		}
	}
	for _, frame := range c.backlog {
		record(frame)
	}
	c.backlog = nil
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(testWait))
		tag, body, err := c.reader.Next()
		if err != nil {
			return got
		}
		if frame, err := wire.DecodeFrame(tag, body); err == nil {
			record(frame)
		}
	}
}

func (r *lifecycleRun) delete(name string) {
	r.note("delete %s", name)
	id := r.client.id()
	r.client.send(&wire.DeleteQueue{RequestID: id, Queue: name})
	if reply, ok := r.client.reply(id).(*wire.OK); !ok {
		r.t.Fatalf("delete %s: %+v", name, reply)
	}
	if _, err := os.Stat(mustPartitionDir(r.t, r.dir, name)); err == nil {
		r.t.Fatalf("delete %s answered with its files still there", name)
	}
	r.generations[name] = r.queues[name].generation
	delete(r.queues, name)
}

func (r *lifecycleRun) purge(name string, q *lifecycleQueue) {
	r.note("purge %s", name)
	id := r.client.id()
	r.client.send(&wire.PurgeQueue{RequestID: id, Queue: name})
	if reply, ok := r.client.reply(id).(*wire.OK); !ok {
		r.t.Fatalf("purge %s: %+v", name, reply)
	}
	clear(q.confirmed)
}

// restartNode closes the node with publishes in flight and starts it
// again. The drain answers every one of them before the connection
// closes: a confirm (then the message must survive) or a refusal.
func (r *lifecycleRun) restartNode() {
	var inflight []uint64
	payloads := map[uint64]string{}
	queues := map[uint64]*lifecycleQueue{}
	for name, q := range r.queues {
		r.nextPayload++
		payload := fmt.Sprintf("%s#%d/%d", name, q.generation, r.nextPayload)
		r.published[payload] = true
		seq := r.client.publish(name, payload)[0]
		inflight = append(inflight, seq)
		payloads[seq], queues[seq] = payload, q
	}
	// A ping answered means the session took every publish before it (one
	// order per connection): they are in flight inside the node.
	ping := r.client.id()
	r.client.send(&wire.Ping{RequestID: ping})
	r.client.reply(ping)
	r.note("restart the node with %d publishes in flight", len(inflight))
	read := make(chan map[uint64]outcome)
	go func() { // a client reads until the end and closes, as one should
		outcomes := r.client.outcomesUntilClosed()
		r.client.conn.Close()
		read <- outcomes
	}()
	if err := r.broker.Close(); err != nil {
		r.t.Fatalf("close for a restart: %v", err)
	}
	outcomes := <-read
	for _, seq := range inflight {
		out, answered := outcomes[seq]
		if !answered {
			r.t.Fatalf("publish %s in flight at the shutdown was never answered", payloads[seq])
		}
		if out.confirmed {
			queues[seq].confirmed[payloads[seq]] = true
		}
	}
	r.client.conn.Close()
	r.start()
}

func (r *lifecycleRun) panicPartition(name string, q *lifecycleQueue) {
	path := "node/queues/" + name + "/0"
	before, ok := r.broker.Registry().Lookup(path)
	if !ok {
		r.t.Fatalf("no partition at %s", path)
	}
	r.note("panic %s", path)
	q.panics++
	if err := r.broker.InjectPanic(path, "randomized lifecycle"); err != nil {
		r.t.Fatal(err)
	}
	waitForActor(r.t, r.broker, path, func(info runtime.ActorInfo) bool { return info.Restarts > before.Restarts })
	// Held deliveries are gone with the old instance: a notice frame may
	// arrive on the client; it is kept in the backlog and ignored.
}

func (r *lifecycleRun) panicManager() {
	before, _ := r.broker.Registry().Lookup("node/queues")
	r.note("panic the queues manager")
	r.managerPanics++
	if err := r.broker.InjectPanic("node/queues", "randomized lifecycle"); err != nil {
		r.t.Fatal(err)
	}
	waitForActor(r.t, r.broker, "node/queues", func(info runtime.ActorInfo) bool { return info.Restarts > before.Restarts })
}

func (r *lifecycleRun) panicSession() {
	path := r.sessionPath
	r.note("panic %s", path)
	if err := r.broker.InjectPanic(path, "randomized lifecycle"); err != nil {
		r.t.Fatal(err)
	}
	r.client.expectClosed()
	r.client.conn.Close()
	r.connect()
}

// connect makes the run's client connection and notes its session's path.
func (r *lifecycleRun) connect() {
	r.client = dialBroker(r.t, r.broker)
	id := r.client.hello("", "").SessionID
	r.sessionPath = "node/sessions/" + id[strings.LastIndex(id, "-")+1:]
}

// check waits for the tree to settle, then checks the invariants.
func (r *lifecycleRun) check(step int) {
	r.t.Helper()
	select {
	case <-r.broker.Fatal():
		r.t.Fatalf("step %d: the node stopped: %v", step, r.broker.FatalError())
	default:
	}
	var mismatch string
	settled := func() bool {
		mismatch = r.treeMismatch()
		return mismatch == ""
	}
	deadline := time.Now().Add(testWait)
	for !settled() {
		if time.Now().After(deadline) {
			r.t.Fatalf("step %d: the tree does not match the declared queues: %s", step, mismatch)
		}
		time.Sleep(2 * time.Millisecond)
	}
	// The library lists an actor from its spawn until after Stopped, the
	// registry from Started to Stopped: an actor spawned or stopped this
	// instant is outside for a moment. One that stays outside is a leak.
	outside := r.actorsOutsideRegistry()
	for len(outside) > 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		outside = r.actorsOutsideRegistry()
	}
	if len(outside) > 0 {
		r.t.Fatalf("step %d: actors outside the registry: %v", step, outside)
	}
	for name, q := range r.queues {
		info := r.client.settledInfo(name)
		if held := info.Ready + info.Leased + info.Delayed; held < uint64(len(q.confirmed)) {
			r.t.Fatalf("step %d: %s holds %d messages, %d confirmed ones must be there (%+v)",
				step, name, held, len(q.confirmed), info)
		}
	}
}

// treeMismatch describes how the registry differs from the model; empty
// when it matches and every partition serves.
func (r *lifecycleRun) treeMismatch() string {
	partitions := map[string]runtime.ActorInfo{}
	children := map[string]int{}
	for _, info := range r.broker.Registry().Snapshot() {
		switch info.Kind {
		case "partition":
			name := strings.TrimSuffix(strings.TrimPrefix(info.Path, "node/queues/"), "/0")
			partitions[name] = info
		case "log", "sync":
			children[strings.TrimSuffix(strings.TrimSuffix(info.Path, "/log"), "/sync")]++
		}
	}
	for name := range r.queues {
		info, ok := partitions[name]
		switch {
		case !ok:
			return fmt.Sprintf("declared queue %s has no partition", name)
		case !strings.HasPrefix(info.Summary, "open"):
			return fmt.Sprintf("partition of %s is %q", name, info.Summary)
		case children[info.Path] != 2:
			return fmt.Sprintf("partition of %s has %d storage actors", name, children[info.Path])
		}
		if route, ok := r.broker.core.directory.lookup(name); !ok || route.failure.failed() {
			return fmt.Sprintf("directory route of %s: %+v (listed %v)", name, route, ok)
		}
	}
	for name := range partitions {
		if _, declared := r.queues[name]; !declared {
			return fmt.Sprintf("partition of undeclared queue %s is running", name)
		}
	}
	if manager, ok := r.broker.Registry().Lookup("node/queues"); !ok || !strings.Contains(manager.Summary, "recovered=true") {
		return fmt.Sprintf("queues manager: %+v", manager)
	}
	return ""
}

// actorsOutsideRegistry lists live PIDs of the actor system that the
// registry does not know (the library's own processes aside).
func (r *lifecycleRun) actorsOutsideRegistry() []string {
	var outside []string
	registry := r.broker.Registry()
	for _, bucket := range r.broker.core.system.ProcessRegistry.LocalPIDs.LocalPIDs {
		bucket.IterCb(func(id string, _ any) {
			if id == "deadletter" || id == "eventstream" || strings.HasPrefix(id, "future$") || strings.HasPrefix(id, "guardian$") {
				return
			}
			if _, ok := registry.Lookup(id); !ok {
				outside = append(outside, id)
			}
		})
	}
	return outside
}

// brokerGoroutines lists the goroutines running broker code (actors,
// storage, the actor library), test goroutines aside.
func brokerGoroutines() []string {
	buffer := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buffer, true)
		if n < len(buffer) {
			buffer = buffer[:n]
			break
		}
		buffer = make([]byte, 2*len(buffer))
	}
	var found []string
	for _, stack := range strings.Split(string(buffer), "\n\n") {
		if strings.Contains(stack, "_test.go") || strings.Contains(stack, "testing.tRunner") {
			continue
		}
		if strings.Contains(stack, "fibril/actors.") || strings.Contains(stack, "fibril/storage/") ||
			strings.Contains(stack, "protoactor-go") {
			found = append(found, stack)
		}
	}
	return found
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(entries)
}
