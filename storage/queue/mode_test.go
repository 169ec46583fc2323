package queue

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
)

func TestModeRecordRoundTrip(t *testing.T) {
	for _, rec := range []Record{{Kind: KindMode, Mode: Durable, Revision: 1}, {Kind: KindMode, Mode: Buffered, Revision: 1 << 40}} {
		body := encodeRecord(nil, &rec)
		var got Record
		if err := decodeRecord(uint8(KindMode), body, &got, true); err != nil {
			t.Fatal(err)
		}
		if got.Mode != rec.Mode || got.Revision != rec.Revision {
			t.Fatalf("decoded %+v from %+v", got, rec)
		}
	}
	for _, body := range [][]byte{{}, {1}, {1, 0}, {3, 1}, {0, 1}, {1, 1, 0}} {
		var got Record
		if err := decodeRecord(uint8(KindMode), body, &got, true); !errors.Is(err, ErrRecordCorrupt) {
			t.Fatalf("body %v: err %v, want ErrRecordCorrupt", body, err)
		}
	}
	if !validRecordType(uint8(KindMode)) {
		t.Fatal("the log's type check refuses the mode record")
	}
}

func TestModeSnapshotKeepsTheRevision(t *testing.T) {
	for _, opts := range []Options{{Mode: Buffered}, {Mode: Buffered, DedupWindow: time.Minute}} {
		opts = opts.WithDefaults()
		s := NewState(opts, 0)
		s.Apply(0, &Record{Kind: KindPublish, PayloadBytes: 3}, nil)
		s.Apply(1, &Record{Kind: KindMode, Mode: Durable, Revision: 1}, nil)
		s.Apply(2, &Record{Kind: KindPublish, PayloadBytes: 3}, nil)
		decoded, err := DecodeSnapshot(s.EncodeSnapshot(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if decoded.AppliedMode() != Durable || decoded.ModeRevision() != 1 || decoded.modeOffset != 1 {
			t.Fatalf("snapshot gave mode %v revision %d at %d", decoded.AppliedMode(), decoded.ModeRevision(), decoded.modeOffset)
		}
		plain := NewState(opts, 0)
		plain.Apply(0, &Record{Kind: KindPublish, PayloadBytes: 3}, nil)
		if v := plain.EncodeSnapshot()[4]; v > snapshotVersionDedup {
			t.Fatalf("a queue without revisions wrote snapshot version %d", v)
		}
	}
}

// modeFixture is a fixture whose frontiers the test moves by hand.
func newModeFixture(t *testing.T, mode Mode) *fixture {
	return newFixture(t, Options{Mode: mode})
}

func (f *fixture) step() Progress {
	f.t.Helper()
	progress, err := f.q.Advance()
	if err != nil {
		f.t.Fatal(err)
	}
	return progress
}

func TestModeBufferedToDurableReleasesNothingOnlyWritten(t *testing.T) {
	f := newModeFixture(t, Buffered)
	before, err := f.q.Publish([]Message{{Payload: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	f.env.log.flush()
	if p := f.step(); len(p.Confirmed) != 1 || p.Confirmed[0].Ticket != before || p.Confirmed[0].Boundary != BoundaryWritten {
		t.Fatalf("buffered publish: %+v", p.Confirmed)
	}
	change, err := f.q.ChangeMode(Durable)
	if err != nil || !change.Pending || change.Revision != 1 || change.Offset != 1 {
		t.Fatalf("change: %+v %v", change, err)
	}
	after, err := f.q.Publish([]Message{{Payload: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.q.Lease(10, 7); err != nil {
		t.Fatal(err)
	}
	f.env.log.flush()
	if p := f.step(); !p.Empty() {
		t.Fatalf("released before the revision was durable: %+v", p)
	}
	if m := f.q.Mode(); m.Applied != Buffered || m.Pending != Durable || m.PendingRevision != 1 {
		t.Fatalf("mode while pending: %+v", m)
	}
	f.env.log.syncTo(2) // the revision is durable, the publish after it only written
	p := f.step()
	if len(p.Applied) != 1 || p.Applied[0] != change.Ticket || len(p.Confirmed) != 0 || len(p.Deliveries) != 0 {
		t.Fatalf("at the revision: %+v", p)
	}
	if m := f.q.Mode(); m.Applied != Durable || m.Revision != 1 || m.Pending != 0 {
		t.Fatalf("mode applied: %+v", m)
	}
	f.env.log.sync()
	p = f.step()
	if len(p.Confirmed) != 1 || p.Confirmed[0].Ticket != after || p.Confirmed[0].Boundary != BoundaryDurable {
		t.Fatalf("durable publish: %+v", p.Confirmed)
	}
	if len(p.Deliveries) != 2 {
		t.Fatalf("deliveries %+v", p.Deliveries)
	}
}

func TestModeDurableToBufferedWaitsForTheRevision(t *testing.T) {
	f := newModeFixture(t, Durable)
	change, err := f.q.ChangeMode(Buffered)
	if err != nil {
		t.Fatal(err)
	}
	ticket, err := f.q.Publish([]Message{{Payload: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	f.env.log.flush()
	if p := f.step(); !p.Empty() {
		t.Fatalf("a publish admitted buffered was released before its revision applied: %+v", p)
	}
	f.env.log.syncTo(1)
	p := f.step()
	if len(p.Applied) != 1 || p.Applied[0] != change.Ticket {
		t.Fatalf("revision not applied: %+v", p)
	}
	if len(p.Confirmed) != 1 || p.Confirmed[0].Ticket != ticket || p.Confirmed[0].Boundary != BoundaryWritten {
		t.Fatalf("buffered publish after the revision: %+v", p.Confirmed)
	}
	if level, ok := f.env.log.levelAt(1); !ok || level != log.AfterFlush {
		t.Fatalf("publish after the revision appended at level %v", level)
	}
}

func TestModeChangeRules(t *testing.T) {
	f := newModeFixture(t, Durable)
	if change, err := f.q.ChangeMode(Durable); err != nil || !change.Unchanged || change.Revision != 0 {
		t.Fatalf("no-op change: %+v %v", change, err)
	}
	if _, err := f.q.ChangeMode(Mode(9)); !errors.Is(err, ErrModeUnknown) {
		t.Fatalf("unknown mode: %v", err)
	}
	first, err := f.q.ChangeMode(Buffered)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.q.ChangeMode(Buffered); err != nil || again.Ticket != 0 || again.Revision != first.Revision || !again.Pending {
		t.Fatalf("the same change again: %+v %v", again, err)
	}
	if _, err := f.q.ChangeMode(Durable); !errors.Is(err, ErrModeChangePending) {
		t.Fatalf("a change while one is pending: %v", err)
	}
	f.advance()
	if change, err := f.q.ChangeMode(Buffered); err != nil || !change.Unchanged || change.Revision != 1 {
		t.Fatalf("no-op after the revision: %+v %v", change, err)
	}
	if change, err := f.q.ChangeMode(Durable); err != nil || change.Revision != 2 {
		t.Fatalf("second revision: %+v %v", change, err)
	}
}

// TestModeRandomized drives publishes, leases, acks, mode changes, partial
// writes and syncs, and restarts with power loss, and checks after every
// step (half the rounds under random quorum apply limits, as a replicated
// owner has them): no confirm stands on a boundary weaker than the mode
// its publish was admitted under; a durable confirm is durable; while the applied mode
// is durable nothing released lies above the durable frontier; a restart
// never comes back with a revision older than one applied before it.
func TestModeRandomized(t *testing.T) {
	for round := range 40 {
		seed := rand.Uint64()
		runModeRandomized(t, seed, round)
		if t.Failed() {
			return
		}
	}
}

func runModeRandomized(t *testing.T, seed uint64, round int) {
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d round %d step %d: "+format, append([]any{seed, round, step}, args...)...)
	}
	opts := Options{Mode: []Mode{Durable, Buffered}[rng.IntN(2)]}.WithDefaults()
	env := newFakeEnv(rng)
	nowMs := int64(1_700_000_000_000)
	clock := func() time.Time { return time.UnixMilli(nowMs) }
	q, err := env.open(opts, clock)
	if err != nil {
		t.Fatal(err)
	}
	admitted := map[Ticket]Mode{} // publish ticket -> mode in force when appended
	limited := rng.IntN(2) == 0   // apply limits as a replicated owner's quorum sets them
	var leased []uint64
	appliedRevision := uint64(0)
	for step := range 400 {
		switch r := rng.IntN(100); {
		case r < 30:
			mode := q.Mode().Desired()
			ticket, err := q.Publish([]Message{{Payload: []byte("x")}, {Payload: []byte("y")}})
			if err == nil {
				admitted[ticket] = mode
			}
		case r < 40:
			_, _, _ = q.Lease(1+rng.IntN(4), 1)
		case r < 48 && len(leased) > 0:
			n := 1 + rng.IntN(len(leased))
			if _, err := q.Ack(1, leased[:n]); err == nil {
				leased = leased[n:]
			}
		case r < 58:
			mode := []Mode{Durable, Buffered}[rng.IntN(2)]
			change, err := q.ChangeMode(mode)
			pending := q.Mode().Pending != 0
			if err != nil && !errors.Is(err, ErrModeChangePending) {
				fail(step, "change to %v: %v", mode, err)
			}
			if errors.Is(err, ErrModeChangePending) != (pending && q.Mode().Pending != mode) {
				fail(step, "change to %v gave %v with mode %+v", mode, err, q.Mode())
			}
			if err == nil && change.Unchanged && q.Mode().Applied != mode {
				fail(step, "a change to %v called a no-op while %+v", mode, q.Mode())
			}
		case r < 75:
			env.flush(q)
		case r < 90:
			env.sync(q)
		case r < 94:
			nowMs += 10
		case r < 97:
			q, err = env.restart(q, opts, clock, rng.IntN(2) == 0, rng)
			if err != nil {
				fail(step, "reopen: %v", err)
			}
			if got := q.Mode().Revision; got < appliedRevision {
				fail(step, "reopened at revision %d after revision %d applied", got, appliedRevision)
			}
			admitted, leased = map[Ticket]Mode{}, nil
			continue
		default:
			continue
		}
		if limited && rng.IntN(4) == 0 {
			// A replicated owner's quorum frontiers: they only rise, the
			// durable one below the written one.
			fr := env.log.Frontiers()
			lw, ld := q.ApplyLimits()
			if lw == noLimit {
				lw, ld = 0, 0
			}
			lw = lw + rng.Uint64N(max(fr.Written, lw)-lw+1)
			ld = ld + rng.Uint64N(max(min(fr.Durable, lw), ld)-ld+1)
			q.SetApplyLimits(lw, ld)
		}
		f := env.log.Frontiers()
		if lw, ld := q.ApplyLimits(); lw != noLimit {
			f.Written, f.Durable = min(f.Written, lw), min(f.Durable, ld, lw)
		}
		progress, err := q.Advance()
		if err != nil {
			fail(step, "advance: %v", err)
		}
		mode := q.Mode()
		if mode.Pending != 0 && mode.PendingRevision != mode.Revision+1 {
			fail(step, "pending revision %d over applied %d", mode.PendingRevision, mode.Revision)
		}
		if mode.Revision < appliedRevision {
			fail(step, "applied revision went back from %d to %d", appliedRevision, mode.Revision)
		}
		appliedRevision = mode.Revision
		for _, c := range progress.Confirmed {
			end := c.First + uint64(c.Count)
			if admitted[c.Ticket] == Durable && c.Boundary != BoundaryDurable {
				fail(step, "publish admitted durable confirmed %v", c.Boundary)
			}
			if c.Boundary == BoundaryDurable && end > f.Durable {
				fail(step, "durable confirm of %d..%d above the durable frontier %d", c.First, end, f.Durable)
			}
			if end > f.Written {
				fail(step, "confirm of %d..%d above the written frontier %d", c.First, end, f.Written)
			}
			if mode.Applied == Durable && (c.Boundary != BoundaryDurable || end > f.Durable) {
				fail(step, "under the applied durable mode a confirm of %d..%d stood on %v (durable %d)", c.First, end, c.Boundary, f.Durable)
			}
			delete(admitted, c.Ticket)
		}
		for _, d := range progress.Deliveries {
			if d.Offset >= f.Written || (mode.Applied == Durable && d.Offset >= f.Durable) {
				fail(step, "delivered %d under the applied %v mode with frontiers %+v", d.Offset, mode.Applied, f)
			}
			leased = append(leased, d.Offset)
		}
	}
	_ = q.Close()
}
