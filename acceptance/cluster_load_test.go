package acceptance

// Cluster traffic: two publishers and two competing consumers, each its own
// Go SDK client given every node's address (each with a different home
// node, so every fault of a node breaks some client's home connection),
// following redirects and reconnecting, plus a sampler reading each
// queue's info. Each publisher publishes to every queue, numbered per
// publisher; both consumers subscribe to every queue and compete for its
// messages, alternating between acking at once and holding what they take
// (so faults meet held deliveries). Everything is recorded in a History
// (history.go), named by publisher and consumer.
//
// The sampler records the owner's written frontier and, as the durable
// one, the highest durable frontier any copy reported (the owner's own and
// its replicas'): a record durable on any copy survives a power loss of
// every copy, since recovery takes the longest surviving history. It also
// notes each queue's owner and epoch, so a trial can tell owner changes no
// fault explains.
//
// Before traffic starts every client asks each queue's info once, so its
// route to the owner is known and publishes go straight there.

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

// clusterQueue is one queue of the traffic.
type clusterQueue struct {
	name   string
	mode   wire.Mode
	policy string
}

// The queues of every trial: both modes, at a majority and at every copy.
var clusterQueueSpecs = []clusterQueue{
	{name: "durable-majority", mode: wire.ModeDurable, policy: "majority_durable"},
	{name: "durable-all", mode: wire.ModeDurable, policy: "replica_durable:3"},
	{name: "buffered-majority", mode: wire.ModeBuffered, policy: "replica_buffered:2"},
	{name: "buffered-all", mode: wire.ModeBuffered, policy: "replica_buffered:3"},
}

// everyCopy names the queues of the load whose policy needs all three
// copies for a confirm (W = E).
func (l *clusterLoad) everyCopy() map[string]bool {
	out := map[string]bool{}
	for _, q := range l.config.queues {
		out[q.name] = strings.HasSuffix(q.policy, ":3")
	}
	return out
}

// clusterLoadConfig shapes the traffic.
type clusterLoadConfig struct {
	queues       []clusterQueue // declared already
	payloadBytes int
	ratePerQueue float64 // publishes per second per publisher and queue
	prefetch     uint32
	sampleEvery  time.Duration
	pauseEvery   time.Duration // consumers ack at once for this long...
	pauseFor     time.Duration // ...then hold for this long
	addresses    []string
	dial         func(ctx context.Context, address string) (net.Conn, error)
}

const (
	clusterPublishers = 2
	clusterConsumers  = 2
)

// clusterLoad is running cluster traffic.
type clusterLoad struct {
	t      *testing.T
	h      *History
	config clusterLoadConfig

	publishers, consumers []*client.Client
	sampler               *client.Client
	clientErrors          *errorLog
	disconnects           *atomic.Int64
	inFlight              atomic.Int64
	inFlightByQueue       map[string]*atomic.Int64 // the same, per queue; fixed at start
	confirmed             atomic.Int64

	ownersMu sync.Mutex
	owners   map[string][]ownerSeen // per queue, each change the sampler saw

	ctx              context.Context
	cancel           context.CancelFunc
	stopPublishing   chan struct{}
	stopPublishingMu sync.Once
	publishing       sync.WaitGroup
	background       sync.WaitGroup
	closeOnce        sync.Once
}

// ownerSeen is an owner and epoch the sampler saw first at At.
type ownerSeen struct {
	owner string
	epoch uint64
	at    time.Time
}

func (config clusterLoadConfig) clientOptions(name string, home int, errs *errorLog, disconnects *atomic.Int64) client.Options {
	addresses := make([]string, 0, len(config.addresses))
	for i := range config.addresses {
		addresses = append(addresses, config.addresses[(home+i)%len(config.addresses)])
	}
	return client.Options{
		Addresses:           addresses,
		ClientName:          name,
		MaxPendingPublishes: 256,
		WaitForReconnect:    true,
		Backoff:             client.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		DialTimeout:         2 * time.Second,
		// A paused or cut-off node keeps its sockets open: the keepalive
		// is what finds it.
		KeepaliveInterval: time.Second,
		PublishTimeout:    10 * time.Second,
		Dialer:            config.dial,
		OnError:           errs.add,
		OnDisconnect:      func(string, error) { disconnects.Add(1) },
	}
}

// retrying runs a harness request (a declare, an info) until it succeeds,
// fails for good, or 30 s pass: a connection the keepalive closed on a
// loaded machine is the SDK's to reconnect, not a reason to fail a trial.
// The traffic never retries: its publishes record what happened.
func retrying(request func(ctx context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := request(ctx)
		cancel()
		if err == nil || !client.IsRetryable(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// declareClusterQueues declares each queue through c and returns the mode
// map the checker takes.
func declareClusterQueues(t *testing.T, c *client.Client, queues []clusterQueue) map[string]wire.Mode {
	t.Helper()
	modes := map[string]wire.Mode{}
	for _, q := range queues {
		err := retrying(func(ctx context.Context) error {
			_, err := c.Declare(ctx, q.name, client.QueueConfig{Mode: q.mode, Policy: q.policy})
			return err
		})
		if err != nil {
			t.Fatalf("declare %s (%s): %v", q.name, q.policy, err)
		}
		modes[q.name] = q.mode
	}
	return modes
}

// queueInfo reads a queue's info through c, retrying as retrying says.
func queueInfo(c *client.Client, queue string) (client.QueueInfo, error) {
	var info client.QueueInfo
	err := retrying(func(ctx context.Context) error {
		var err error
		info, err = c.QueueInfo(ctx, queue)
		return err
	})
	return info, err
}

// startClusterLoad dials the clients, learns the routes and starts the
// traffic. Each queue's life starts here.
func startClusterLoad(t *testing.T, h *History, config clusterLoadConfig) *clusterLoad {
	t.Helper()
	if config.prefetch == 0 {
		config.prefetch = 32
	}
	l := &clusterLoad{t: t, h: h, config: config, clientErrors: &errorLog{}, disconnects: &atomic.Int64{},
		stopPublishing: make(chan struct{}), owners: map[string][]ownerSeen{}, inFlightByQueue: map[string]*atomic.Int64{}}
	for _, q := range config.queues {
		l.inFlightByQueue[q.name] = &atomic.Int64{}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	t.Cleanup(l.close)
	for i := range clusterPublishers {
		l.publishers = append(l.publishers, dialClient(t, config.clientOptions(fmt.Sprintf("p%d", i+1), i, l.clientErrors, l.disconnects)))
	}
	for i := range clusterConsumers {
		name := fmt.Sprintf("c%d", i+1)
		options := config.clientOptions(name, i+1, l.clientErrors, l.disconnects)
		options.OnConnectionLost = func(string, error) { h.ConnectionLost(name) }
		l.consumers = append(l.consumers, dialClient(t, options))
	}
	l.sampler = dialClient(t, config.clientOptions("sampler", 2, l.clientErrors, l.disconnects))
	for _, c := range append(append([]*client.Client{l.sampler}, l.publishers...), l.consumers...) {
		for _, q := range config.queues {
			if _, err := queueInfo(c, q.name); err != nil {
				t.Fatalf("info %s before the traffic: %v", q.name, err)
			}
		}
	}
	for _, q := range config.queues {
		h.QueueLifeStarted(q.name)
	}
	for i, c := range l.publishers {
		for _, q := range config.queues {
			l.publishing.Add(1)
			go l.publish(c, fmt.Sprintf("p%d", i+1), q.name)
		}
	}
	for i, c := range l.consumers {
		for _, q := range config.queues {
			l.background.Add(1)
			go l.consume(c, fmt.Sprintf("c%d", i+1), q.name)
		}
	}
	if config.sampleEvery > 0 {
		l.background.Add(1)
		go l.sample()
	}
	return l
}

// publish sends numbered messages until publishing stops, then waits for
// every outcome.
func (l *clusterLoad) publish(c *client.Client, publisher, queue string) {
	defer l.publishing.Done()
	pending := make(chan inFlight, 257)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for p := range pending {
			<-p.future.Done()
			confirm, err := p.future.Wait(context.Background())
			recordOutcome(l.h, p.id, confirm, err)
			l.inFlight.Add(-1)
			l.inFlightByQueue[queue].Add(-1)
			if err == nil {
				l.confirmed.Add(1)
			}
		}
	}()
	defer func() { close(pending); <-collected }()
	payload := payloadFor(queue, l.config.payloadBytes)
	started := time.Now()
	for n := 0; ; n++ {
		if l.config.ratePerQueue > 0 {
			due := started.Add(time.Duration(float64(n) / l.config.ratePerQueue * float64(time.Second)))
			if !l.sleepUntil(due) {
				return
			}
		}
		select {
		case <-l.stopPublishing:
			return
		default:
		}
		id := fmt.Sprintf("%s-%s-%07d", queue, publisher, n)
		l.h.SendingBy(publisher, queue, id)
		// A publish waits here for a connection while none is up; it
		// counts as in flight only once the SDK holds it (awaitOutcomes).
		ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
		future, err := c.PublishAsync(ctx, queue, client.Message{MessageID: id, Payload: payload})
		cancel()
		if err != nil {
			l.h.Unknown(id, "publish not handed over: "+err.Error())
			if !l.sleepUntil(time.Now().Add(5 * time.Millisecond)) {
				return
			}
			continue
		}
		l.inFlight.Add(1)
		l.inFlightByQueue[queue].Add(1)
		pending <- inFlight{id: id, future: future}
	}
}

func (l *clusterLoad) sleepUntil(t time.Time) bool {
	wait := time.Until(t)
	if wait <= 0 {
		return true
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-l.stopPublishing:
		return false
	}
}

func (l *clusterLoad) publishingStopped() bool {
	select {
	case <-l.stopPublishing:
		return true
	default:
		return false
	}
}

// consume takes and acks deliveries of one queue until the load closes,
// subscribing again whenever the subscription ends.
func (l *clusterLoad) consume(c *client.Client, consumer, queue string) {
	defer l.background.Done()
	for l.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
		sub, err := c.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: l.config.prefetch})
		cancel()
		if err != nil {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-l.ctx.Done():
			}
			continue
		}
		l.takeDeliveries(consumer, queue, sub)
	}
}

// takeDeliveries alternates pauseEvery of acking at once with pauseFor of
// holding (acking what it held when the hold ends), while publishing lasts.
func (l *clusterLoad) takeDeliveries(consumer, queue string, sub *client.Subscription) {
	type taken struct {
		delivery *client.Delivery
		at       time.Time
	}
	var held []taken
	ack := func(d taken) {
		if d.delivery.Ack() == nil {
			l.h.AckedBy(consumer, queue, d.delivery.MessageID, d.at)
		}
	}
	holding := false
	phase := time.NewTimer(time.Hour)
	defer phase.Stop()
	if l.config.pauseEvery > 0 {
		phase.Reset(l.config.pauseEvery)
	}
	deliveries := sub.Deliveries()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				for _, h := range held {
					ack(h)
				}
				return
			}
			at := l.h.Delivered(Delivery{Queue: queue, Consumer: consumer, ID: d.MessageID, Incarnation: d.Incarnation,
				Offset: d.Offset, Attempt: d.Attempt, Redelivered: d.Redelivered, Stale: d.Stale()})
			if holding && !l.publishingStopped() {
				held = append(held, taken{d, at})
				continue
			}
			ack(taken{d, at})
		case <-phase.C:
			holding = !holding
			length := l.config.pauseEvery
			if holding {
				length = l.config.pauseFor
			} else {
				for _, h := range held {
					ack(h)
				}
				held = held[:0]
			}
			phase.Reset(length)
		case <-l.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = sub.Unsubscribe(ctx)
			cancel()
			return
		}
	}
}

// sample records every queue's frontiers, owner and epoch.
func (l *clusterLoad) sample() {
	defer l.background.Done()
	for l.ctx.Err() == nil {
		for _, q := range l.config.queues {
			sent := l.h.Now()
			ctx, cancel := context.WithTimeout(l.ctx, time.Second)
			info, err := l.sampler.QueueInfo(ctx, q.name)
			cancel()
			if err != nil {
				continue
			}
			durable := info.DurableNext
			for _, replica := range info.Replicas {
				durable = max(durable, replica.DurableNext)
			}
			l.h.Sampled(q.name, sent, info.WrittenNext, durable)
			l.noteOwner(q.name, info.Owner, info.Epoch)
		}
		select {
		case <-time.After(l.config.sampleEvery):
		case <-l.ctx.Done():
		}
	}
}

func (l *clusterLoad) noteOwner(queue, owner string, epoch uint64) {
	l.ownersMu.Lock()
	defer l.ownersMu.Unlock()
	seen := l.owners[queue]
	if n := len(seen); n > 0 && seen[n-1].owner == owner && seen[n-1].epoch == epoch {
		return
	}
	l.owners[queue] = append(seen, ownerSeen{owner: owner, epoch: epoch, at: time.Now()})
}

// ownerChanges returns, per queue, the owners and epochs the sampler saw
// after the first.
func (l *clusterLoad) ownerChanges() map[string][]ownerSeen {
	l.ownersMu.Lock()
	defer l.ownersMu.Unlock()
	out := map[string][]ownerSeen{}
	for queue, seen := range l.owners {
		if len(seen) > 1 {
			out[queue] = append([]ownerSeen(nil), seen[1:]...)
		}
	}
	return out
}

// settleOutcomes waits up to timeout for the publishes handed over to
// queues to get their outcomes and returns how many are still open.
func (l *clusterLoad) settleOutcomes(timeout time.Duration, queues ...string) int64 {
	deadline := time.Now().Add(timeout)
	for {
		var open int64
		for _, queue := range queues {
			open += l.inFlightByQueue[queue].Load()
		}
		if open == 0 || time.Now().After(deadline) {
			return open
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitOutcomes waits until every publish handed over to queues has its
// outcome (all queues when none are named). A publish to a queue whose
// owner is still up may wait for a copy that is down: name only the
// queues whose serving copy went away.
func (l *clusterLoad) awaitOutcomes(timeout time.Duration, queues ...string) {
	l.t.Helper()
	if len(queues) == 0 {
		queues = l.queueNames()
	}
	deadline := time.Now().Add(timeout)
	for _, queue := range queues {
		for l.inFlightByQueue[queue].Load() > 0 {
			if time.Now().After(deadline) {
				l.t.Fatalf("%d publishes to %s still without an outcome after %v", l.inFlightByQueue[queue].Load(),
					queue, timeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// confirmedSince counts the confirms received so far (for progress checks).
func (l *clusterLoad) confirmedSoFar() int64 { return l.confirmed.Load() }

// stopPublishingAndWait stops publishing and waits until every publish
// handed to the SDK has its outcome (each ends by its publish timeout).
func (l *clusterLoad) stopPublishingAndWait() {
	l.stopPublishingMu.Do(func() { close(l.stopPublishing) })
	l.publishing.Wait()
}

// drain stops publishing and waits until every queue holds nothing ready,
// leased or delayed three reads in a row, with the consumers acking.
func (l *clusterLoad) drain(timeout time.Duration) {
	l.t.Helper()
	l.stopPublishingAndWait()
	deadline := time.Now().Add(timeout)
	quiet := 0
	var last []string
	for quiet < 3 {
		if time.Now().After(deadline) {
			l.t.Fatalf("queues did not drain within %v: %v", timeout, last)
		}
		last = last[:0]
		for _, q := range l.config.queues {
			ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
			info, err := l.sampler.QueueInfo(ctx, q.name)
			cancel()
			switch {
			case err != nil:
				last = append(last, fmt.Sprintf("%s: %v", q.name, err))
			case info.Ready+info.Leased+info.Delayed > 0:
				last = append(last, fmt.Sprintf("%s: ready %d leased %d delayed %d", q.name, info.Ready, info.Leased, info.Delayed))
			}
		}
		if len(last) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// close stops everything and closes the clients; safe to call twice.
func (l *clusterLoad) close() {
	l.closeOnce.Do(func() {
		l.stopPublishingMu.Do(func() { close(l.stopPublishing) })
		l.cancel()
		// The clients close first: a publish the SDK parked to resend to a
		// node that is down waits for that node (its deadline does not end
		// the wait; docs/durability.md, "Found by the cluster suite"), and
		// only Close fails it.
		for _, c := range append(append([]*client.Client{l.sampler}, l.publishers...), l.consumers...) {
			if c != nil {
				_ = c.Close()
			}
		}
		l.publishing.Wait()
		l.background.Wait()
	})
}

// modes returns the checker's mode map of the traffic's queues.
func (l *clusterLoad) modes() map[string]wire.Mode {
	modes := map[string]wire.Mode{}
	for _, q := range l.config.queues {
		modes[q.name] = q.mode
	}
	return modes
}

func (l *clusterLoad) queueNames() []string {
	var names []string
	for _, q := range l.config.queues {
		names = append(names, q.name)
	}
	sort.Strings(names)
	return names
}
