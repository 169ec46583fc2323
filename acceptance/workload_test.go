package acceptance

// Workloads: one publisher and one consumer per queue, each on its own
// SDK client, recording into a History what they saw and nothing more, and
// a sampler recording queue frontiers from queue info. They keep running
// across broker restarts (the SDK reconnects and subscribes again); the
// harness marks lives in the History.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

// loadConfig shapes a workload.
type loadConfig struct {
	queues       map[string]wire.Mode
	payloadBytes int
	ratePerQueue float64 // publishes per second per queue; 0: as fast as the window allows
	window       int     // publishes in flight per client
	prefetch     uint32
	sampleEvery  time.Duration // 0: no sampler
	// The consumer holds deliveries unacked for pauseFor after every
	// pauseEvery of acking at once (0: never), while publishing lasts, so
	// that backlogs and held deliveries meet the failures.
	pauseEvery, pauseFor time.Duration
	// dial opens a byte stream to the broker (nil: TCP to addresses).
	dial      func(ctx context.Context, address string) (net.Conn, error)
	addresses []string
}

// load is a running workload.
type load struct {
	t      *testing.T
	h      *History
	config loadConfig

	publisher, consumer, sampler *client.Client
	clientErrors                 *errorLog
	disconnects                  *atomic.Int64 // connections that ended or failed to open
	confirmed                    atomic.Int64  // confirms received, every queue
	inFlight                     atomic.Int64  // publish futures whose outcome is not yet recorded

	ctx              context.Context
	cancel           context.CancelFunc
	stopPublishing   chan struct{}
	publishers       sync.WaitGroup
	background       sync.WaitGroup
	stopPublishingMu sync.Once
}

// errorLog keeps node errors the SDK reported outside any request.
type errorLog struct {
	mu     sync.Mutex
	errors []string
}

func (e *errorLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errors = append(e.errors, err.Error())
}

func (e *errorLog) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.errors...)
}

func (config loadConfig) clientOptions(name string, errs *errorLog, disconnects *atomic.Int64) client.Options {
	return client.Options{
		Addresses:           config.addresses,
		ClientName:          name,
		MaxPendingPublishes: config.window,
		WaitForReconnect:    true,
		Backoff:             client.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		DialTimeout:         2 * time.Second,
		Dialer:              config.dial,
		OnError:             errs.add,
		OnDisconnect:        func(string, error) { disconnects.Add(1) },
	}
}

func dialClient(t *testing.T, options client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, options)
	if err != nil {
		t.Fatalf("dial %v: %v", options.Addresses, err)
	}
	return c
}

// declareQueues declares every queue of the config with its mode.
func declareQueues(t *testing.T, c *client.Client, queues map[string]wire.Mode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, mode := range queues {
		if _, err := c.Declare(ctx, name, client.QueueConfig{Mode: mode}); err != nil {
			t.Fatalf("declare %s: %v", name, err)
		}
	}
}

// startLoad dials the three clients, declares the queues and starts the
// publishers, consumers and sampler.
func startLoad(t *testing.T, h *History, config loadConfig) *load {
	t.Helper()
	if config.window == 0 {
		config.window = 256
	}
	if config.prefetch == 0 {
		config.prefetch = 64
	}
	l := &load{t: t, h: h, config: config, clientErrors: &errorLog{}, disconnects: &atomic.Int64{},
		stopPublishing: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.publisher = dialClient(t, config.clientOptions("acceptance-publisher", l.clientErrors, l.disconnects))
	l.consumer = dialClient(t, config.clientOptions("acceptance-consumer", l.clientErrors, l.disconnects))
	l.sampler = dialClient(t, config.clientOptions("acceptance-sampler", l.clientErrors, l.disconnects))
	t.Cleanup(l.close)
	declareQueues(t, l.publisher, config.queues)
	for name := range config.queues {
		l.publishers.Add(1)
		go l.publish(name)
		l.background.Add(1)
		go l.consume(name)
	}
	if config.sampleEvery > 0 {
		l.background.Add(1)
		go l.sample()
	}
	return l
}

func payloadFor(id string, size int) []byte {
	payload := make([]byte, max(size, len(id)))
	copy(payload, id)
	for i := len(id); i < len(payload); i++ {
		payload[i] = byte('a' + i%26)
	}
	return payload
}

type inFlight struct {
	id     string
	future *client.PublishFuture
}

// publish sends numbered messages to one queue until stopPublishing, then
// waits for every outcome.
func (l *load) publish(queue string) {
	defer l.publishers.Done()
	pending := make(chan inFlight, l.config.window+1)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for p := range pending {
			<-p.future.Done()
			confirm, err := p.future.Wait(context.Background())
			recordOutcome(l.h, p.id, confirm, err)
			l.inFlight.Add(-1)
			if err == nil {
				l.confirmed.Add(1)
			}
		}
	}()
	defer func() { close(pending); <-collected }()
	started := time.Now()
	payload := payloadFor(queue, l.config.payloadBytes) // shared: never modified
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
		id := fmt.Sprintf("%s-%07d", queue, n)
		l.h.Sending(queue, id)
		ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
		future, err := l.publisher.PublishAsync(ctx, queue, client.Message{
			MessageID: id, Payload: payload})
		cancel()
		if err != nil {
			l.h.Unknown(id, "publish not handed over: "+err.Error())
			if !l.sleepUntil(time.Now().Add(5 * time.Millisecond)) {
				return
			}
			continue
		}
		l.inFlight.Add(1)
		pending <- inFlight{id: id, future: future}
	}
}

// sleepUntil waits for t; false when publishing stopped first.
func (l *load) sleepUntil(t time.Time) bool {
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

// recordOutcome records a publish outcome as the SDK documents it: an
// error matching ErrConnectionLost leaves the outcome unknown (even when
// the node said why it closed the connection); any other *ServerError
// means the node did not store the message; anything else is unknown.
func recordOutcome(h *History, id string, confirm client.Confirm, err error) {
	var serverError *client.ServerError
	switch {
	case err == nil:
		h.Confirmed(id, confirm.Boundary)
	case errors.Is(err, client.ErrConnectionLost), client.CodeOf(err) == wire.CodeOutcomeUnknown:
		// outcome_unknown: appended on an owner that lost the queue
		// before confirming it; the new owner may or may not have it.
		h.Unknown(id, err.Error())
	case errors.As(err, &serverError):
		h.Refused(id, err.Error())
	default:
		h.Unknown(id, err.Error())
	}
}

// consume takes and acks every delivery of one queue until the load
// closes, subscribing again when the subscription ends.
func (l *load) consume(queue string) {
	defer l.background.Done()
	for l.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
		sub, err := l.consumer.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: l.config.prefetch})
		cancel()
		if err != nil {
			l.pause(20 * time.Millisecond)
			continue
		}
		l.takeDeliveries(queue, sub)
	}
}

// takeDeliveries records and acks deliveries. With pauses configured it
// alternates: pauseEvery acking each delivery at once, then pauseFor
// holding every delivery it takes (up to the prefetch) unacked, acking
// them together when the pause ends, so failures meet held deliveries.
func (l *load) takeDeliveries(queue string, sub *client.Subscription) {
	deliveries := sub.Deliveries()
	holding := false
	phaseEnds := time.Now().Add(l.config.pauseEvery)
	phase := time.NewTimer(time.Hour)
	defer phase.Stop()
	if l.config.pauseEvery > 0 {
		phase.Reset(l.config.pauseEvery)
	}
	type taken struct {
		delivery *client.Delivery
		at       time.Time // when it was recorded
	}
	var held []taken
	ack := func(d taken) {
		if d.delivery.Ack() == nil {
			l.h.Acked(queue, d.delivery.MessageID, d.at)
		}
	}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			at := l.h.Delivered(Delivery{Queue: queue, ID: d.MessageID, Incarnation: d.Incarnation, Offset: d.Offset,
				Attempt: d.Attempt, Redelivered: d.Redelivered, Stale: d.Stale()})
			if holding && time.Now().Before(phaseEnds) && !l.publishingStopped() {
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
				for _, d := range held {
					ack(d)
				}
				held = held[:0]
			}
			phaseEnds = time.Now().Add(length)
			phase.Reset(length)
		case <-l.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = sub.Unsubscribe(ctx)
			cancel()
			return
		}
	}
}

func (l *load) pause(d time.Duration) {
	select {
	case <-time.After(d):
	case <-l.ctx.Done():
	}
}

// sample records every queue's frontiers every sampleEvery.
func (l *load) sample() {
	defer l.background.Done()
	for l.ctx.Err() == nil {
		for name := range l.config.queues {
			sent := l.h.Now()
			ctx, cancel := context.WithTimeout(l.ctx, time.Second)
			info, err := l.sampler.QueueInfo(ctx, name)
			cancel()
			if err == nil {
				l.h.Sampled(name, sent, info.WrittenNext, info.DurableNext)
			}
		}
		l.pause(l.config.sampleEvery)
	}
}

func (l *load) publishingStopped() bool {
	select {
	case <-l.stopPublishing:
		return true
	default:
		return false
	}
}

// awaitOutcomes waits until every publish handed to the SDK has its
// outcome recorded. After a broker's death it bounds the events of that
// life: the SDK fails what was pending on the dead connection at once, and
// new publishes wait for a connection before they become futures.
func (l *load) awaitOutcomes() {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for l.inFlight.Load() > 0 {
		if time.Now().After(deadline) {
			l.t.Fatalf("%d publishes still without an outcome 20 s after the broker went away", l.inFlight.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// finishPublishing stops the publishers and waits for every outcome.
func (l *load) finishPublishing() {
	l.stopPublishingMu.Do(func() { close(l.stopPublishing) })
	l.publishers.Wait()
}

// drain waits until every queue holds nothing ready, leased or delayed
// three reads in a row, with the consumers still acking.
func (l *load) drain(timeout time.Duration) {
	l.t.Helper()
	l.finishPublishing()
	deadline := time.Now().Add(timeout)
	quiet := 0
	var last []string
	for quiet < 3 {
		if time.Now().After(deadline) {
			l.t.Fatalf("queues did not drain within %v: %v", timeout, last)
		}
		last = last[:0]
		for name := range l.config.queues {
			ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
			info, err := l.sampler.QueueInfo(ctx, name)
			cancel()
			switch {
			case err != nil:
				last = append(last, fmt.Sprintf("%s: %v", name, err))
			case info.Ready+info.Leased+info.Delayed > 0:
				last = append(last, fmt.Sprintf("%s: ready %d leased %d delayed %d", name, info.Ready, info.Leased, info.Delayed))
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
func (l *load) close() {
	l.stopPublishingMu.Do(func() { close(l.stopPublishing) })
	l.cancel()
	l.publishers.Wait()
	l.background.Wait()
	for _, c := range []*client.Client{l.publisher, l.consumer, l.sampler} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// checkLoad checks the history and fails the test on any loss or broken
// rule; it returns the results for the summary.
func checkLoad(t *testing.T, h *History, queues map[string]wire.Mode) []QueueResult {
	t.Helper()
	results := Check(h.Record(), queues)
	for _, result := range results {
		t.Logf("%s", result)
		if err := result.Err(); err != nil {
			t.Error(err)
		}
		if result.Confirmed == 0 {
			t.Errorf("queue %s: nothing was confirmed, so nothing was tested", result.Queue)
		}
	}
	return results
}

// refusals returns the reasons of every refused publish to a queue.
func refusals(record Record, queue string) []string {
	var out []string
	for _, p := range record.Publishes {
		if p.Queue == queue && p.Outcome == OutcomeRefused {
			out = append(out, p.Reason)
		}
	}
	return out
}

// unexpectedClientErrors returns SDK-reported node errors, without the
// ones a restart causes by design.
func (l *load) unexpectedClientErrors(allowed ...string) []string {
	var out []string
	for _, e := range l.clientErrors.list() {
		expected := false
		for _, a := range allowed {
			expected = expected || strings.Contains(e, a)
		}
		if !expected {
			out = append(out, e)
		}
	}
	return out
}
