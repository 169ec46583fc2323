package queue

import (
	"math/rand/v2"
	"testing"
	"time"
)

// fixture drives one queue over the fake log, moving every frontier after
// each operation, for readable example-style tests.
type fixture struct {
	t     *testing.T
	env   *fakeEnv
	opts  Options
	q     *Queue
	nowMs int64
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	f := &fixture{t: t, env: newFakeEnv(rand.New(rand.NewPCG(1, 2))), opts: opts, nowMs: 1_700_000_000_000}
	q, err := f.env.open(opts.WithDefaults(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.q = q
	return f
}

func (f *fixture) clock() time.Time { return time.UnixMilli(f.nowMs) }

func (f *fixture) tick(d time.Duration) { f.nowMs += durationMs(d) }

// advance makes everything durable and applies it.
func (f *fixture) advance() Progress {
	f.t.Helper()
	f.env.log.flush()
	f.env.log.sync()
	progress, err := f.q.Advance()
	if err != nil {
		f.t.Fatal(err)
	}
	return progress
}

// publish publishes payloads (ids p<payload>) and returns their offsets.
func (f *fixture) publish(payloads ...string) []uint64 {
	f.t.Helper()
	offsets, err := f.tryPublish(payloads...)
	if err != nil {
		f.t.Fatal(err)
	}
	return offsets
}

func (f *fixture) tryPublish(payloads ...string) ([]uint64, error) {
	batch := make([]Message, len(payloads))
	for i, p := range payloads {
		batch[i] = Message{ID: "id-" + p, Payload: []byte(p)}
	}
	ticket, err := f.q.Publish(batch)
	if err != nil {
		return nil, err
	}
	for _, c := range f.advance().Confirmed {
		if c.Ticket == ticket {
			var offsets []uint64
			for i := range c.Count {
				offsets = append(offsets, c.First+uint64(i))
			}
			return offsets, nil
		}
	}
	f.t.Fatalf("publish %d not confirmed", ticket)
	return nil, nil
}

// lease leases up to max messages for holder and returns the deliveries.
func (f *fixture) lease(holder uint64, max int) []Delivery {
	f.t.Helper()
	if _, _, err := f.q.Lease(max, holder); err != nil {
		f.t.Fatal(err)
	}
	return f.advance().Deliveries
}

func (f *fixture) must(_ Ticket, err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
	f.advance()
}

func payloads(deliveries []Delivery) []string {
	out := make([]string, len(deliveries))
	for i, d := range deliveries {
		out[i] = string(d.Payload)
	}
	return out
}

func offsetsOf(deliveries []Delivery) []uint64 {
	out := make([]uint64, len(deliveries))
	for i, d := range deliveries {
		out[i] = d.Offset
	}
	return out
}
