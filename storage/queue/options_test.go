package queue

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		ok   bool
	}{
		{"defaults", Options{}, true},
		{"buffered with everything", Options{Mode: Buffered, MaxDeliveries: 3, DeadLetterQueue: "dlq", MessageTTL: time.Second,
			MaxLength: 10, MaxBytes: 100, Overflow: DropOldest, RedeliveryDelay: time.Second}, true},
		{"unknown mode", Options{Mode: 9}, false},
		{"unknown overflow", Options{Overflow: 9}, false},
		{"lease below a millisecond", Options{LeaseTimeout: time.Microsecond}, false},
		{"negative TTL", Options{MessageTTL: -time.Second}, false},
		{"negative delay", Options{RedeliveryDelay: -time.Second}, false},
		{"dead-letter queue without max deliveries", Options{DeadLetterQueue: "dlq"}, false},
	}
	for _, c := range cases {
		err := c.opts.Validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if d := (Options{}).WithDefaults(); d.Mode != Durable || d.LeaseTimeout != 30*time.Second || d.Overflow != RejectPublish {
		t.Errorf("defaults %+v", d)
	}
}

func TestDeclarationRoundTripAndMismatch(t *testing.T) {
	opts := Options{Mode: Buffered, MaxDeliveries: 2, DeadLetterQueue: "dlq", MessageTTL: 1500 * time.Millisecond, MaxLength: 7}
	got, err := decodeDeclaration(encodeDeclaration(opts))
	if err != nil || !sameDeclaration(got, opts) {
		t.Fatalf("round trip %+v %v", got, err)
	}
	env := newFakeEnv(rand.New(rand.NewPCG(3, 4)))
	if _, err := env.open(opts, nil); err != nil {
		t.Fatal(err)
	}
	stored, ok, err := ReadDeclaration(env.fs, testDir)
	if err != nil || !ok || !sameDeclaration(stored, opts) {
		t.Fatalf("ReadDeclaration %+v %v %v", stored, ok, err)
	}
	other := opts
	other.Mode = Durable
	if err := prepareDirectory(env.fs, testDir, other); !errors.Is(err, ErrDeclarationMismatch) {
		t.Fatalf("mode change on re-declare: %v", err)
	}
}

func TestMessageTTL(t *testing.T) {
	f := newFixture(t, Options{MessageTTL: time.Second})
	f.publish("a", "b")
	f.tick(500 * time.Millisecond)
	f.publish("c")
	if got := payloads(f.lease(1, 1)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first lease %v", got)
	}
	if deadline, ok := f.q.NextDeadline(); !ok || deadline.UnixMilli() != f.nowMs-500+1000 {
		t.Fatalf("next deadline %v %v, want b's TTL", deadline, ok)
	}
	f.tick(600 * time.Millisecond) // b is past its TTL, c is not; a is leased and does not expire
	if got := payloads(f.lease(1, 5)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("lease after b expired %v", got)
	}
	if c := f.q.Info().Counts; c.Expired != 1 || c.Leased != 2 {
		t.Fatalf("counts %+v", c)
	}
	// A leased message past its TTL expires once it is back in the queue.
	f.must(f.q.Release(1, []uint64{0}))
	_, n, err := f.q.ExpireMessages(f.clock())
	f.advance()
	if err != nil || n != 1 || f.q.Info().Counts.Expired != 2 {
		t.Fatalf("expire released message: %d %v %+v", n, err, f.q.Info().Counts)
	}
}

func TestMaxLengthAndBytes(t *testing.T) {
	cases := []struct {
		name      string
		opts      Options
		publish   []string
		wantFull  bool     // the last publish is refused
		wantReady []string // what a lease then finds, oldest first
	}{
		{"length reject", Options{MaxLength: 2}, []string{"a", "b", "c"}, true, []string{"a", "b"}},
		{"length drop oldest", Options{MaxLength: 2, Overflow: DropOldest}, []string{"a", "b", "c"}, false, []string{"b", "c"}},
		{"bytes reject", Options{MaxBytes: 5}, []string{"aa", "bb", "cc"}, true, []string{"aa", "bb"}},
		{"bytes drop oldest", Options{MaxBytes: 5, Overflow: DropOldest}, []string{"aa", "bb", "cc"}, false, []string{"bb", "cc"}},
		{"oversized message dropped itself", Options{MaxBytes: 3, Overflow: DropOldest}, []string{"a", "bbbb"}, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.opts)
			for i, p := range c.publish {
				_, err := f.tryPublish(p)
				last := i == len(c.publish)-1
				if full := errors.Is(err, ErrQueueFull); full != (last && c.wantFull) || (err != nil && !full) {
					t.Fatalf("publish %s: %v", p, err)
				}
			}
			if got := payloads(f.lease(1, 10)); !slices.Equal(got, c.wantReady) {
				t.Fatalf("ready %v, want %v", got, c.wantReady)
			}
		})
	}
}

func TestMaxLengthCountsPublishesInFlightAndFreesOnSettle(t *testing.T) {
	f := newFixture(t, Options{MaxLength: 2})
	if _, err := f.q.Publish([]Message{{Payload: []byte("a")}, {Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Publish([]Message{{Payload: []byte("c")}}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third publish while two are in flight: %v", err)
	}
	f.advance()
	deliveries := f.lease(1, 1) // a leased message no longer counts towards the length
	f.publish("c")
	f.must(f.q.Ack(1, offsetsOf(deliveries)))
	if c := f.q.Info().Counts; c.Ready != 2 || c.Acked != 1 {
		t.Fatalf("counts %+v", c)
	}
}

func TestRedeliveryDelay(t *testing.T) {
	f := newFixture(t, Options{RedeliveryDelay: 100 * time.Millisecond})
	f.publish("a", "b")
	first := f.lease(1, 2)
	f.must(f.q.Nack(1, []uint64{first[0].Offset}, -1)) // the queue's delay
	f.must(f.q.Nack(1, []uint64{first[1].Offset}, 0))  // at once
	if c := f.q.Info().Counts; c.Delayed != 1 || c.Ready != 1 {
		t.Fatalf("counts after nacks %+v", c)
	}
	if got := payloads(f.lease(2, 5)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("lease before the delay %v", got)
	}
	if deadline, ok := f.q.NextDeadline(); !ok || deadline.UnixMilli() != f.nowMs+100 {
		t.Fatalf("next deadline %v, want the due time", deadline)
	}
	f.tick(100 * time.Millisecond)
	again := f.lease(3, 5)
	if len(again) != 1 || string(again[0].Payload) != "a" || again[0].Attempt != 2 || !again[0].Redelivered {
		t.Fatalf("redelivery %+v", again)
	}
	f.must(f.q.Nack(3, offsetsOf(again), 250*time.Millisecond)) // an explicit delay
	f.tick(200 * time.Millisecond)
	if got := f.lease(3, 5); len(got) != 0 {
		t.Fatalf("delivered before an explicit delay: %v", payloads(got))
	}
	f.tick(50 * time.Millisecond)
	if got := f.lease(3, 5); len(got) != 1 || got[0].Attempt != 3 {
		t.Fatalf("after an explicit delay %+v", got)
	}
}

func TestLeaseTimeoutAndRelease(t *testing.T) {
	f := newFixture(t, Options{LeaseTimeout: time.Second})
	f.publish("a")
	d := f.lease(1, 1)[0]
	if d.Attempt != 1 || d.Redelivered || d.Deadline.UnixMilli() != f.nowMs+1000 {
		t.Fatalf("first delivery %+v", d)
	}
	f.must(f.q.Release(1, []uint64{d.Offset}))
	d = f.lease(1, 1)[0]
	if d.Attempt != 1 || !d.Redelivered {
		t.Fatalf("after a release: attempt %d redelivered %v (a release counts no attempt)", d.Attempt, d.Redelivered)
	}
	f.tick(999 * time.Millisecond)
	if _, n, _ := f.q.ExpireLeases(f.clock()); n != 0 {
		t.Fatal("lease expired before its deadline")
	}
	f.tick(time.Millisecond)
	if _, n, _ := f.q.ExpireLeases(f.clock()); n != 1 {
		t.Fatal("lease did not expire at its deadline")
	}
	f.advance()
	if _, err := f.q.Ack(1, []uint64{d.Offset}); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("ack of an expired lease: %v", err)
	}
	if d = f.lease(2, 1)[0]; d.Attempt != 2 || !d.Redelivered {
		t.Fatalf("after expiry %+v", d)
	}
}

func TestSettleErrors(t *testing.T) {
	f := newFixture(t, Options{})
	offsets := f.publish("a", "b")
	d := f.lease(1, 1)[0]
	if _, err := f.q.Ack(2, []uint64{d.Offset}); !errors.Is(err, ErrWrongHolder) {
		t.Fatalf("wrong holder: %v", err)
	}
	if _, err := f.q.Ack(1, []uint64{offsets[1]}); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("ready message: %v", err)
	}
	if _, err := f.q.Ack(1, []uint64{d.Offset, offsets[1]}); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("one bad offset refuses the whole settle: %v", err)
	}
	if _, err := f.q.Ack(1, []uint64{d.Offset}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Nack(1, []uint64{d.Offset}, 0); !errors.Is(err, ErrSettlePending) {
		t.Fatalf("second settle before the first applies: %v", err)
	}
	f.advance()
	if _, err := f.q.Ack(1, []uint64{d.Offset}); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("settled message: %v", err)
	}
	if c := f.q.Info().Counts; c.Acked != 1 || c.Ready != 1 {
		t.Fatalf("counts %+v", c)
	}
}

func TestMaxDeliveriesWithoutDeadLetterQueue(t *testing.T) {
	f := newFixture(t, Options{MaxDeliveries: 2})
	f.publish("a")
	for attempt := uint32(1); attempt <= 2; attempt++ {
		d := f.lease(1, 1)
		if len(d) != 1 || d[0].Attempt != attempt {
			t.Fatalf("attempt %d: %+v", attempt, d)
		}
		f.must(f.q.Nack(1, offsetsOf(d), 0))
	}
	if c := f.q.Info().Counts; c.DeadLettered != 1 || c.Ready != 0 || c.DeadLettering != 0 {
		t.Fatalf("after the last attempt %+v", c)
	}
}

func TestPurge(t *testing.T) {
	f := newFixture(t, Options{})
	f.publish("a", "b", "c")
	leased := f.lease(1, 1)
	f.must(f.q.Purge())
	f.publish("d")
	if c := f.q.Info().Counts; c.Purged != 2 || c.Leased != 1 || c.Ready != 1 {
		t.Fatalf("counts %+v", c)
	}
	if got := payloads(f.lease(2, 5)); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after purge %v", got)
	}
	f.must(f.q.Ack(1, offsetsOf(leased)))
}

func TestRestartReturnsLeasesRedelivered(t *testing.T) {
	for _, mode := range []Mode{Durable, Buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, Options{Mode: mode, MaxDeliveries: 2})
			f.publish("a", "b")
			first := f.lease(1, 1)
			q, err := f.env.restart(f.q, f.opts.WithDefaults(), f.clock, false, f.env.rng)
			if err != nil {
				t.Fatal(err)
			}
			f.q = q
			if r := q.Recovery(); r.ExpiredLeases != 1 {
				t.Fatalf("recovery %+v", r)
			}
			got := f.lease(2, 2)
			if len(got) != 2 || got[0].Offset != first[0].Offset || got[0].Attempt != 2 || !got[0].Redelivered ||
				got[1].Attempt != 1 || got[1].Redelivered {
				t.Fatalf("after restart %+v", got)
			}
			if got[0].MessageID != first[0].MessageID || got[0].Incarnation != first[0].Incarnation {
				t.Fatalf("identity changed across a restart: %+v then %+v", first[0], got[0])
			}
		})
	}
}

func TestBusyAndTooLargeRollBack(t *testing.T) {
	f := newFixture(t, Options{})
	f.q.machine.maxInflight = 2
	for range 2 {
		if _, err := f.q.Publish([]Message{{Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.q.Publish([]Message{{Payload: []byte("x")}}); !errors.Is(err, ErrBusy) {
		t.Fatalf("third append in flight: %v", err)
	}
	f.advance()
	f.env.log.refuse = errTooLargeForTest
	if _, _, err := f.q.Lease(2, 1); err == nil {
		t.Fatal("refused append reported success")
	}
	if err := f.q.machine.state.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := f.lease(1, 5); len(got) != 2 {
		t.Fatalf("claims not released after a refused append: %d delivered", len(got))
	}
	// A refused publish takes its pipelined leases with it.
	f.publish("ready")
	f.env.log.refuse = errTooLargeForTest
	if _, _, err := f.q.PublishLeasing([]Message{{Payload: []byte("y")}}, []Offer{{Holder: 2, Max: 5}}); err == nil {
		t.Fatal("refused publish reported success")
	}
	if len(f.q.machine.pendingLeased) != 0 || f.q.machine.inflight() != 0 || f.q.machine.pendingPublishes != 0 {
		t.Fatalf("a refused publish left claims: %v pending leased, %d in flight", f.q.machine.pendingLeased, f.q.machine.inflight())
	}
	if err := f.q.machine.state.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	_, claims, err := f.q.PublishLeasing([]Message{{Payload: []byte("z")}}, []Offer{{Holder: 2, Max: 5}})
	if err != nil || len(claims) != 1 || claims[0].Count != 2 {
		t.Fatalf("after the refusal: claims %+v %v", claims, err)
	}
	if got := payloads(f.advance().Deliveries); !slices.Equal(got, []string{"ready", "z"}) {
		t.Fatalf("pipelined after a refusal delivered %v", got)
	}
	if f.q.fenced != nil {
		t.Fatalf("a too-large append fenced the queue: %v", f.q.fenced)
	}
}
