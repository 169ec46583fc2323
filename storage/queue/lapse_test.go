package queue

// Leases that apply too late lapse (machine.go): their deliveries are not
// released, no attempt is counted, and the message is leased again with a
// fresh deadline.

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
)

// newOwnerFixture opens a replicated owner over the fake log: nothing
// applies until SetApplyLimit passes it, as while fewer than W copies
// count.
func newOwnerFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	f := &fixture{t: t, env: newFakeEnv(rand.New(rand.NewPCG(3, 4))), opts: opts, nowMs: 1_700_000_000_000}
	opts = opts.WithDefaults()
	if err := prepareDirectory(f.env.fs, testDir, opts); err != nil {
		t.Fatal(err)
	}
	q, err := openWithLog(testDir, opts, f.env.fs, f.env.log, f.clock, quietLogger, defaultMaxInflight,
		startMode{role: roleOwner, epoch: 1, replicated: true})
	if err != nil {
		t.Fatal(err)
	}
	f.q = q
	return f
}

// quorum lets everything staged apply, as when W copies hold it.
func (f *fixture) quorum() { f.q.SetApplyLimit(f.env.log.Frontiers().Staged) }

// only returns the one message of the queue's state at offset.
func (f *fixture) only(offset uint64) message {
	f.t.Helper()
	m := f.q.machine.state.find(offset)
	if m == nil {
		f.t.Fatalf("offset %d is not live", offset)
	}
	return *m
}

// replay applies the whole fake log to a fresh state, as a replica or a
// restart does, and checks it reaches the owner's applied state.
func (f *fixture) checkReplay() {
	f.t.Helper()
	owner := f.q.machine.state
	replayed := NewState(f.opts, 0)
	var rec Record
	for _, r := range f.env.log.records {
		if r.Offset >= owner.Next() {
			break
		}
		if err := decodeRecord(r.Type, r.Body, &rec, false); err != nil {
			f.t.Fatal(err)
		}
		replayed.Apply(r.Offset, &rec, nil)
	}
	if string(replayed.EncodeSnapshot()) != string(owner.EncodeSnapshot()) {
		f.t.Fatalf("replayed state %+v differs from the owner's %+v", replayed.Counts(), owner.Counts())
	}
}

func TestLeaseThatAppliesAfterItsTimeoutIsNotDelivered(t *testing.T) {
	f := newFixture(t, Options{Mode: Durable})
	offset := f.publish("a")[0]
	ticket, n, err := f.q.Lease(1, 7)
	if err != nil || n != 1 {
		t.Fatalf("lease: %d %v", n, err)
	}
	f.tick(DefaultLeaseTimeout + time.Second) // the lease's sync takes longer than the lease
	staged := f.env.log.Frontiers().Staged
	progress := f.advance()
	if len(progress.Deliveries) != 0 {
		t.Fatalf("a lease applied past its deadline delivered %+v", progress.Deliveries)
	}
	if len(progress.Lapsed) != 1 || progress.Lapsed[0] != (Lapse{Ticket: ticket, Holder: 7, Offset: offset}) {
		t.Fatalf("lapsed %+v", progress.Lapsed)
	}
	if got := f.env.log.Frontiers().Staged; got != staged+1 {
		t.Fatalf("the lapse appended %d records, want 1 (its release)", got-staged)
	}
	if kind := Kind(f.env.log.records[staged].Type); kind != KindRelease {
		t.Fatalf("the lapse appended a %v record", kind)
	}
	if m := f.only(offset); m.status != statusLeased || m.attempts != 0 {
		t.Fatalf("before its release applies the message is %v with %d attempts", m.status, m.attempts)
	}
	// The expired lease is the release's to end, not an expiry's.
	if _, expired, err := f.q.ExpireLeases(f.clock()); err != nil || expired != 0 {
		t.Fatalf("expire leases: %d %v", expired, err)
	}
	if next, ok := f.q.NextDeadline(); ok {
		t.Fatalf("next deadline %v for a lease whose release is in flight", next)
	}
	f.advance()
	if m := f.only(offset); m.status != statusReady || m.attempts != 0 {
		t.Fatalf("after the release the message is %v with %d attempts", m.status, m.attempts)
	}
	deliveries := f.lease(7, 1)
	if len(deliveries) != 1 {
		t.Fatalf("leased again: %+v", deliveries)
	}
	d := deliveries[0]
	want := f.clock().Add(DefaultLeaseTimeout)
	if d.Offset != offset || d.Attempt != 1 || d.Redelivered || !d.Deadline.Equal(want) || string(d.Payload) != "a" {
		t.Fatalf("delivery %+v, want attempt 1, not redelivered, deadline %v", d, want)
	}
	f.checkReplay()
}

// The quorum loss of the cluster: a replicated owner stages a lease while
// fewer than W copies count; the quorum comes back after the lease timeout.
func TestLeaseStagedDuringAQuorumLossIsLeasedAgainWhenItReturns(t *testing.T) {
	f := newOwnerFixture(t, Options{Mode: Durable, LeaseTimeout: 2 * time.Second, MaxDeliveries: 2})
	if _, err := f.q.Publish([]Message{{ID: "a", Payload: []byte("a")}, {ID: "b", Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	f.quorum()
	if p := f.advance(); len(p.Confirmed) != 1 {
		t.Fatalf("publish not confirmed: %+v", p)
	}
	if _, n, err := f.q.Lease(2, 1); err != nil || n != 2 {
		t.Fatalf("lease: %d %v", n, err)
	}
	for range 5 { // the quorum stays lost for 5 s
		f.tick(time.Second)
		if p := f.advance(); !p.Empty() {
			t.Fatalf("applied without a quorum: %+v", p)
		}
	}
	f.quorum()
	progress := f.advance()
	if len(progress.Deliveries) != 0 || len(progress.Lapsed) != 2 {
		t.Fatalf("at the quorum's return: %d deliveries, %d lapsed", len(progress.Deliveries), len(progress.Lapsed))
	}
	// The release is replicated like any record: it waits for the quorum.
	if p := f.advance(); !p.Empty() {
		t.Fatalf("the release applied without a quorum: %+v", p)
	}
	f.quorum()
	f.advance()
	if counts := f.q.machine.state.Counts(); counts.Ready != 2 || counts.Leased != 0 {
		t.Fatalf("after the release: %+v", counts)
	}
	f.quorum()
	if _, _, err := f.q.Lease(2, 1); err != nil {
		t.Fatal(err)
	}
	f.quorum()
	deliveries := f.advance().Deliveries
	if len(deliveries) != 2 {
		t.Fatalf("leased again: %+v", deliveries)
	}
	for _, d := range deliveries {
		if d.Attempt != 1 || d.Redelivered || !d.Deadline.Equal(f.clock().Add(2*time.Second)) {
			t.Fatalf("delivery %+v after the lapse", d)
		}
	}
	f.checkReplay()
}

// A lease applying with a quarter of its timeout or less left lapses; one
// with more is delivered.
func TestLeaseLapsesWithAQuarterOfItsTimeoutLeft(t *testing.T) {
	for _, c := range []struct {
		waitMs int64
		lapses bool
	}{{0, false}, {749, false}, {750, true}, {999, true}, {1000, true}, {5000, true}} {
		f := newFixture(t, Options{Mode: Durable, LeaseTimeout: time.Second})
		f.publish("a")
		if _, _, err := f.q.Lease(1, 1); err != nil {
			t.Fatal(err)
		}
		f.nowMs += c.waitMs
		progress := f.advance()
		if got := len(progress.Lapsed) == 1 && len(progress.Deliveries) == 0; got != c.lapses ||
			len(progress.Lapsed)+len(progress.Deliveries) != 1 {
			t.Fatalf("applied %d ms after it was staged: %d lapsed, %d delivered, want lapsed %v",
				c.waitMs, len(progress.Lapsed), len(progress.Deliveries), c.lapses)
		}
	}
}

// A message delivered before keeps its redelivered mark and its counted
// attempts across a lapse; one never delivered is not marked.
func TestLapseKeepsWhatEarlierDeliveriesCounted(t *testing.T) {
	f := newFixture(t, Options{Mode: Durable, LeaseTimeout: time.Second})
	offsets := f.publish("a", "b")
	first := f.lease(1, 1)
	if len(first) != 1 || first[0].Offset != offsets[0] {
		t.Fatalf("first lease %+v", first)
	}
	f.must(f.q.Nack(1, []uint64{offsets[0]}, 0))
	if _, _, err := f.q.Lease(2, 1); err != nil {
		t.Fatal(err)
	}
	f.tick(2 * time.Second)
	if p := f.advance(); len(p.Lapsed) != 2 || len(p.Deliveries) != 0 {
		t.Fatalf("%d lapsed, %d delivered", len(p.Lapsed), len(p.Deliveries))
	}
	f.advance()
	deliveries := f.lease(1, 2)
	if len(deliveries) != 2 {
		t.Fatalf("leased again: %+v", deliveries)
	}
	for _, d := range deliveries {
		nacked := d.Offset == offsets[0]
		if d.Redelivered != nacked || d.Attempt != 1+b2u32(nacked) {
			t.Fatalf("delivery %+v (nacked before: %v)", d, nacked)
		}
	}
	f.checkReplay()
}

func b2u32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// A release the log refuses up front without fencing is appended again at
// the next Advance; the message stays leased and claimed meanwhile.
func TestLapsedReleaseRefusedIsRetried(t *testing.T) {
	f := newFixture(t, Options{Mode: Buffered, LeaseTimeout: time.Second})
	offset := f.publish("a")[0]
	if _, _, err := f.q.Lease(1, 1); err != nil {
		t.Fatal(err)
	}
	f.tick(time.Second)
	f.env.log.flush()
	f.env.log.mu.Lock()
	f.env.log.refuse = log.ErrTooLarge
	f.env.log.mu.Unlock()
	staged := f.env.log.Frontiers().Staged
	progress, err := f.q.Advance()
	if err != nil || len(progress.Lapsed) != 1 {
		t.Fatalf("advance: %+v %v", progress, err)
	}
	if got := f.env.log.Frontiers().Staged; got != staged {
		t.Fatalf("a refused release staged %d records", got-staged)
	}
	if m := f.only(offset); m.status != statusLeased || m.claim != claimSettle {
		t.Fatalf("after the refusal the message is %v, claim %d", m.status, m.claim)
	}
	if _, err := f.q.Ack(1, []uint64{offset}); !errors.Is(err, ErrSettlePending) {
		t.Fatalf("ack of a lapsed lease: %v", err)
	}
	f.advance() // appends the release again
	f.advance() // applies it
	if m := f.only(offset); m.status != statusReady || m.attempts != 0 {
		t.Fatalf("after the retried release the message is %v with %d attempts", m.status, m.attempts)
	}
	f.checkReplay()
}
