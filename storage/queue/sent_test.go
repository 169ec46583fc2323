package queue

// Sent marks (record.go, machine.go): a replicated owner of a queue with
// max deliveries marks the deliveries it hands out, and a promotion counts
// an attempt only for the leases a mark names once marks are in force; a
// log without marks counts every lease, as before; a single-node queue,
// and a queue without max deliveries, writes no mark.

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
)

// sentPair is a replicated owner and its replica over the fake log; ship
// copies the owner's written records, makes both copies durable and lets
// the owner apply up to limit (the quorum frontier it has heard of).
type sentPair struct {
	t       *testing.T
	opts    Options
	nowMs   int64
	owner   *fakeEnv
	replica *fakeEnv
	q       *Queue // the owner
	r       *Queue // the replica
}

func newSentPair(t *testing.T, opts Options, singleNodeOwner bool) *sentPair {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	p := &sentPair{t: t, opts: opts.WithDefaults(), nowMs: 1_700_000_000_000, owner: newFakeEnv(rng), replica: newFakeEnv(rng)}
	start := startMode{role: roleOwner, epoch: 1, replicated: true}
	if singleNodeOwner {
		start = startMode{role: roleOwner} // an owner whose log holds no marks
	}
	p.q = p.open(p.owner, start)
	p.r = p.open(p.replica, startMode{role: roleReplica})
	return p
}

func (p *sentPair) clock() time.Time { return time.UnixMilli(p.nowMs) }

func (p *sentPair) open(env *fakeEnv, start startMode) *Queue {
	p.t.Helper()
	if err := prepareDirectory(env.fs, testDir, p.opts); err != nil {
		p.t.Fatal(err)
	}
	q, err := openWithLog(testDir, p.opts, env.fs, env.log, p.clock, quietLogger, defaultMaxInflight, start)
	if err != nil {
		p.t.Fatal(err)
	}
	return q
}

// ship replicates everything the owner wrote and lets the owner apply
// below limit (noLimit: everything); it returns the owner's progress.
func (p *sentPair) ship(limit uint64) Progress {
	p.t.Helper()
	p.owner.log.flush()
	p.owner.log.sync()
	from, to := p.replica.log.end(), p.owner.log.Frontiers().Written
	if from < to {
		if err := p.r.AppendReplicated(from, encodeForTest(p.owner.log.recordsBetween(from, to)), log.AfterFsync, nil); err != nil {
			p.t.Fatal(err)
		}
	}
	p.replica.log.flush()
	p.replica.log.sync()
	if _, err := p.r.Advance(); err != nil {
		p.t.Fatal(err)
	}
	p.q.SetApplyLimit(limit)
	progress, err := p.q.Advance()
	if err != nil {
		p.t.Fatal(err)
	}
	return progress
}

// promote crashes the owner and makes the replica the owner under epoch,
// alone (its apply limit lifted), and applies what the promotion appended.
func (p *sentPair) promote(epoch uint64) Promotion {
	p.t.Helper()
	_ = p.q.Close()
	promotion, err := p.r.Promote(epoch)
	if err != nil {
		p.t.Fatal(err)
	}
	p.owner, p.replica = p.replica, p.owner
	p.q = p.r
	p.replica.log = p.replica.log.reopen(promotion.LogEnd, nil) // the old owner's copy, cut to the new owner's log
	p.r = p.open(p.replica, startMode{role: roleReplica})
	p.ship(noLimit)
	return promotion
}

func (p *sentPair) publish(ids ...string) {
	p.t.Helper()
	batch := make([]Message, len(ids))
	for i, id := range ids {
		batch[i] = Message{ID: id, Payload: []byte(id)}
	}
	if _, err := p.q.Publish(batch); err != nil {
		p.t.Fatal(err)
	}
	if progress := p.ship(noLimit); len(progress.Confirmed) != 1 {
		p.t.Fatalf("publish of %v: confirms %+v", ids, progress.Confirmed)
	}
}

// leaseAppended appends a lease of up to max messages for holder.
func (p *sentPair) leaseAppended(holder uint64, max int) {
	p.t.Helper()
	if ticket, _, err := p.q.Lease(max, holder); err != nil || ticket == 0 {
		p.t.Fatalf("lease: ticket %d, %v", ticket, err)
	}
}

// deliveriesByID leases everything for holder on the owner and returns the
// deliveries by message id.
func (p *sentPair) deliveriesByID(holder uint64) map[string]Delivery {
	p.t.Helper()
	p.leaseAppended(holder, 100)
	out := map[string]Delivery{}
	for _, d := range p.ship(noLimit).Deliveries {
		out[d.MessageID] = d
	}
	return out
}

// A failover with leases the dead owner never delivered: one message was
// delivered and marked sent, three were leased and their lease record
// reached the replica, but the owner never applied it (its quorum frontier
// had not passed it). After the promotion the three come back with no
// attempt counted, flagged redelivered; the delivered one keeps its
// attempt. With max deliveries 1 the three are delivered, not dropped, and
// the delivered one is dead-lettered.
func TestPromotionCountsOnlyLeasesMarkedSent(t *testing.T) {
	for _, maxDeliveries := range []uint32{1, 2} {
		p := newSentPair(t, Options{Mode: Durable, MaxDeliveries: maxDeliveries}, false)
		p.publish("a", "b", "c", "d")
		p.leaseAppended(1, 1)
		delivered := p.ship(noLimit).Deliveries
		if len(delivered) != 1 || delivered[0].MessageID != "a" {
			t.Fatalf("first delivery %+v", delivered)
		}
		before := p.q.machine.nextOffset
		if err := p.q.Sent(offsetsOf(delivered)); err != nil {
			t.Fatal(err)
		}
		if p.q.machine.nextOffset != before+1 {
			t.Fatalf("a sent mark appended %d records, want 1", p.q.machine.nextOffset-before)
		}
		p.ship(noLimit)
		held := p.q.log.Frontiers().Written
		p.leaseAppended(1, 3)
		if progress := p.ship(held); len(progress.Deliveries) != 0 {
			t.Fatalf("the owner delivered %+v past its quorum frontier", progress.Deliveries)
		}

		promotion := p.promote(2)
		if promotion.VoidedLeases != 4 || promotion.UnsentLeases != 3 {
			t.Fatalf("max deliveries %d: promotion %+v, want 4 voided and 3 unsent", maxDeliveries, promotion)
		}
		again := p.deliveriesByID(7)
		for _, id := range []string{"b", "c", "d"} {
			if d, ok := again[id]; !ok || d.Attempt != 1 || !d.Redelivered {
				t.Fatalf("max deliveries %d: a lease never delivered came back as %+v (found %v)", maxDeliveries, d, ok)
			}
		}
		d, ok := again["a"]
		switch {
		case maxDeliveries == 1 && (ok || p.q.Info().Counts.DeadLettered != 1):
			t.Fatalf("the delivered message at max deliveries 1: delivered again %v, %+v", ok, p.q.Info().Counts)
		case maxDeliveries == 2 && (!ok || d.Attempt != 2 || !d.Redelivered):
			t.Fatalf("the delivered message came back as %+v (found %v), want attempt 2, redelivered", d, ok)
		}
	}
}

// A log an owner without marks wrote (an older version's, or a single-node
// queue's) counts every lease at its first promotion, as before; the new
// owner puts marks in force with its first lease, so the next promotion
// counts only the leases it marked.
func TestPromotionOfALogWithoutMarksCountsEveryLease(t *testing.T) {
	p := newSentPair(t, Options{Mode: Durable, MaxDeliveries: 5}, true)
	p.publish("a", "b", "c")
	p.leaseAppended(1, 2)
	delivered := p.ship(noLimit).Deliveries
	before := p.q.machine.nextOffset
	if err := p.q.Sent(offsetsOf(delivered)); err != nil || p.q.machine.nextOffset != before {
		t.Fatalf("a single-node owner's Sent: %v, %d records appended", err, p.q.machine.nextOffset-before)
	}
	held := p.q.log.Frontiers().Written
	p.leaseAppended(1, 1) // never applied on the owner
	p.ship(held)
	if p.r.machine.state.marking {
		t.Fatal("marks in force in a log that holds none")
	}

	promotion := p.promote(2)
	if promotion.VoidedLeases != 3 || promotion.UnsentLeases != 0 {
		t.Fatalf("promotion of a log without marks %+v", promotion)
	}
	for id, d := range p.deliveriesByID(3) {
		if d.Attempt != 2 || !d.Redelivered {
			t.Fatalf("%s came back as %+v after the first promotion, want attempt 2", id, d)
		}
	}
	if !p.q.machine.state.marking || !p.r.machine.state.marking {
		t.Fatal("the new owner's first lease did not put marks in force on both copies")
	}
	// Held by holder 3 and never marked: the next promotion counts none.
	promotion = p.promote(3)
	if promotion.VoidedLeases != 3 || promotion.UnsentLeases != 3 {
		t.Fatalf("second promotion %+v, want 3 voided, 3 unsent", promotion)
	}
	for id, d := range p.deliveriesByID(4) {
		if d.Attempt != 2 || !d.Redelivered {
			t.Fatalf("%s came back as %+v after the second promotion, want attempt 2 still", id, d)
		}
	}
}

// A replicated owner that restarts on its own log (OpenOwner) follows the
// same rule as a promotion: the lease it marked counts, the other does not.
func TestReplicatedOwnerRestartReleasesUnsentLeases(t *testing.T) {
	p := newSentPair(t, Options{Mode: Durable, MaxDeliveries: 5}, false)
	p.publish("a", "b")
	p.leaseAppended(1, 1)
	if err := p.q.Sent(offsetsOf(p.ship(noLimit).Deliveries)); err != nil {
		t.Fatal(err)
	}
	p.ship(noLimit)
	held := p.q.log.Frontiers().Written
	p.leaseAppended(1, 1) // never applied on the owner
	p.ship(held)
	_ = p.q.Close()
	p.owner.log = p.owner.log.processCrash(nil)
	q := p.open(p.owner, startMode{role: roleOwner, epoch: 2, replicated: true})
	if r := q.Recovery(); r.ExpiredLeases != 1 || r.ReleasedLeases != 1 {
		t.Fatalf("replicated owner restart: %+v, want 1 expired and 1 released", r)
	}
	_ = q.Close()
}

// Without max deliveries an attempt decides nothing: the owner writes no
// mark, and a promotion counts every lease, as before marks existed.
func TestNoMarksWithoutAnAttemptBudget(t *testing.T) {
	p := newSentPair(t, Options{Mode: Durable}, false)
	p.publish("a", "b")
	p.leaseAppended(1, 1)
	delivered := p.ship(noLimit).Deliveries
	before := p.q.machine.nextOffset
	if err := p.q.Sent(offsetsOf(delivered)); err != nil || p.q.machine.nextOffset != before {
		t.Fatalf("Sent without max deliveries: %v, %d records appended", err, p.q.machine.nextOffset-before)
	}
	held := p.q.log.Frontiers().Written
	p.leaseAppended(1, 1)
	p.ship(held)
	if promotion := p.promote(2); promotion.VoidedLeases != 2 || promotion.UnsentLeases != 0 || p.q.machine.state.marking {
		t.Fatalf("promotion without max deliveries %+v, marks in force %v", promotion, p.q.machine.state.marking)
	}
}

// A sent mark waits for room when the in-flight bound is reached, and the
// next Advance appends it.
func TestSentMarkWaitsForRoom(t *testing.T) {
	p := newSentPair(t, Options{Mode: Durable, MaxDeliveries: 5}, false)
	p.publish("a", "b", "c")
	p.leaseAppended(1, 3)
	delivered := p.ship(noLimit).Deliveries
	p.q.machine.maxInflight = 1
	if _, err := p.q.Ack(1, offsetsOf(delivered[:1])); err != nil {
		t.Fatal(err)
	}
	before := p.q.machine.nextOffset
	if err := p.q.Sent(offsetsOf(delivered)); err != nil || p.q.machine.nextOffset != before {
		t.Fatalf("Sent with no room: %v, %d records appended", err, p.q.machine.nextOffset-before)
	}
	p.ship(noLimit) // applies the ack, then appends the mark
	if p.q.machine.nextOffset != before+1 {
		t.Fatalf("the waiting mark: %d records appended, want 1", p.q.machine.nextOffset-before)
	}
	p.ship(noLimit)
	for _, d := range delivered {
		m := p.r.machine.state.find(d.Offset)
		if sent := m != nil && m.sent; sent != (d.Offset != delivered[0].Offset) {
			t.Fatalf("offset %d marked %v on the replica (the first was acked before its mark)", d.Offset, sent)
		}
	}
}

// A snapshot keeps marks in force and the marks of leases (version 5), and
// refuses a sent flag where it cannot be.
func TestSnapshotKeepsMarks(t *testing.T) {
	opts := Options{Mode: Durable}.WithDefaults()
	s := NewState(opts, 0)
	s.Apply(0, &Record{Kind: KindSent}, nil)
	for offset := uint64(1); offset <= 3; offset++ {
		s.Apply(offset, &Record{Kind: KindPublish, PayloadBytes: 1}, nil)
	}
	s.Apply(4, &Record{Kind: KindLease, Holder: 1, DeadlineMs: 10, Offsets: []uint64{1, 2}}, nil)
	s.Apply(5, &Record{Kind: KindSent, Offsets: []uint64{1, 3}}, nil)
	if m1, m2, m3 := s.find(1), s.find(2), s.find(3); !m1.sent || m2.sent || m3.sent {
		t.Fatalf("sent after the mark: %v %v %v, want only the leased message it names", m1.sent, m2.sent, m3.sent)
	}
	data := s.EncodeSnapshot()
	if data[4] != snapshotVersionMarks || snapshotNext(data) != 6 {
		t.Fatalf("snapshot version %d, next %d", data[4], snapshotNext(data))
	}
	decoded, err := DecodeSnapshot(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	if string(decoded.EncodeSnapshot()) != string(data) || !decoded.marking || !decoded.find(1).sent {
		t.Fatal("the snapshot does not round-trip the marks")
	}
	s.Apply(6, &Record{Kind: KindRelease, Offsets: []uint64{1}}, nil)
	if s.find(1).sent {
		t.Fatal("a released message is still marked sent")
	}

	plain := NewState(opts, 0)
	plain.Apply(0, &Record{Kind: KindPublish, PayloadBytes: 1}, nil)
	plain.Apply(1, &Record{Kind: KindLease, Holder: 1, DeadlineMs: 10, Offsets: []uint64{0}}, nil)
	if data := plain.EncodeSnapshot(); data[4] != snapshotVersion {
		t.Fatalf("a state without marks wrote snapshot version %d", data[4])
	}
	plain.find(0).sent = true // a flag only version 5 may carry
	if _, err := DecodeSnapshot(plain.EncodeSnapshot(), opts); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("a sent flag in a version 1 snapshot: %v", err)
	}
	decoded.find(3).sent = true // not leased
	if _, err := DecodeSnapshot(decoded.EncodeSnapshot(), opts); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("a sent flag on a ready message: %v", err)
	}
}
