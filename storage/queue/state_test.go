package queue

import (
	"math/rand/v2"
	"testing"
)

// applier feeds records straight into a State, for tests of the core.
type applier struct {
	t     *testing.T
	s     *State
	model *model
	next  uint64
}

func (a *applier) apply(rec Record) {
	a.t.Helper()
	a.s.Apply(a.next, &rec, nil)
	a.model.apply(a.next, &rec, "")
	a.next++
}

// TestStateMemoryFollowsLiveMessages settles a long history around one
// message that stays leased, so tombstones pile up behind it; the state
// must compact them, keep its invariants and agree with the model.
func TestStateMemoryFollowsLiveMessages(t *testing.T) {
	opts := Options{MaxDeliveries: 5}
	a := &applier{t: t, s: NewState(opts, 0), model: newModel(opts)}
	rng := rand.New(rand.NewPCG(5, 6))
	a.apply(Record{Kind: KindPublish, PublishMs: 1, PayloadBytes: 10})
	a.apply(Record{Kind: KindLease, Holder: 1, DeadlineMs: 100, Offsets: []uint64{0}})
	for round := range 200 {
		first := a.next
		for range 100 {
			a.apply(Record{Kind: KindPublish, PublishMs: int64(round), PayloadBytes: uint32(rng.IntN(100))})
		}
		var offsets []uint64
		for o := first; o < a.next; o++ {
			offsets = append(offsets, o)
		}
		a.apply(Record{Kind: KindLease, Holder: 2, DeadlineMs: 100, Offsets: offsets})
		keep := offsets[rng.IntN(len(offsets))]
		var acked []uint64
		for _, o := range offsets {
			if o != keep || round%50 != 0 {
				acked = append(acked, o)
			}
		}
		a.apply(Record{Kind: KindAck, Offsets: acked})
		if round%10 == 0 {
			if err := a.model.compareState(a.s, 0); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	if live := len(a.s.messages) - a.s.head; live > 4*1024 {
		t.Fatalf("state keeps %d message slots for %d live messages", live, a.s.Counts().Leased)
	}
	// Releasing the old lease brings offset 0 back into the queued bitmap,
	// far below the range it covers now.
	a.apply(Record{Kind: KindRelease, Offsets: []uint64{0}})
	if offset, ok := a.s.bits.nextSelectable(0); !ok || offset != 0 {
		t.Fatalf("released offset 0 not selectable: %d %v", offset, ok)
	}
	if err := a.model.compareState(a.s, 0); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotRoundTripAndDamage(t *testing.T) {
	opts := Options{MaxDeliveries: 3, DeadLetterQueue: "dlq"}
	a := &applier{t: t, s: NewState(opts, 0), model: newModel(opts)}
	for range 6 {
		a.apply(Record{Kind: KindPublish, PublishMs: 1000, PayloadBytes: 7})
	}
	a.apply(Record{Kind: KindLease, Holder: 4, DeadlineMs: 2000, Offsets: []uint64{0, 1, 2, 3}})
	a.apply(Record{Kind: KindAck, Offsets: []uint64{0}})
	a.apply(Record{Kind: KindNack, DueMs: 5000, Offsets: []uint64{1}})
	for range 3 {
		a.apply(Record{Kind: KindExpire, Reason: ReasonDeadline, Offsets: []uint64{2}})
		a.apply(Record{Kind: KindLease, Holder: 4, DeadlineMs: 3000, Offsets: []uint64{2}})
	}
	a.apply(Record{Kind: KindCheckpoint, CheckpointID: 99})
	data := a.s.EncodeSnapshot()
	decoded, err := DecodeSnapshot(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.model.compareState(decoded, 0); err != nil {
		t.Fatalf("decoded snapshot: %v", err)
	}
	if decoded.checkpointID != 99 || decoded.Next() != a.next || string(decoded.EncodeSnapshot()) != string(data) {
		t.Fatal("snapshot does not round-trip")
	}
	for i := range data {
		damaged := append([]byte(nil), data...)
		damaged[i] ^= 0x10
		if _, err := DecodeSnapshot(damaged, opts); err == nil {
			t.Fatalf("snapshot with byte %d flipped decoded", i)
		}
	}
	if _, err := DecodeSnapshot(data[:len(data)-1], opts); err == nil {
		t.Fatal("truncated snapshot decoded")
	}
}

func TestIncarnationHistory(t *testing.T) {
	var history []incarnation
	history = beginIncarnation(history, 11, 0, 0)
	history = beginIncarnation(history, 22, 100, 0) // clean reopen at 100
	history = beginIncarnation(history, 33, 150, 0)
	// A power loss cut the log back to 120: 33 appended nothing that
	// survived past 150, and 22's records from 120 on are gone.
	history = beginIncarnation(history, 44, 120, 0)
	cases := []struct {
		offset uint64
		want   uint64
	}{{0, 11}, {99, 11}, {100, 22}, {119, 22}, {120, 44}, {149, 44}, {150, 44}, {10_000, 44}}
	for _, c := range cases {
		if got := incarnationAt(history, c.offset); got != c.want {
			t.Errorf("incarnation at %d = %d, want %d", c.offset, got, c.want)
		}
	}
	decoded, err := decodeIncarnations(encodeIncarnations(history))
	if err != nil || len(decoded) != len(history) {
		t.Fatalf("round trip %v %v", decoded, err)
	}
	pruned := beginIncarnation(history, 55, 130, 125) // log compacted to 125
	if pruned[0].id != 44 || incarnationAt(pruned, 125) != 44 || incarnationAt(pruned, 130) != 55 {
		t.Fatalf("pruned history %+v", pruned)
	}
}
