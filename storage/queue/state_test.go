package queue

import (
	"errors"
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

func TestChooseEpoch(t *testing.T) {
	damaged := errors.New("damaged")
	cases := []struct {
		name              string
		requested, stored uint64
		exists            bool
		readErr           error
		newest            uint64
		want              uint64
		warn              bool
		wantErr           error
	}{
		{name: "fresh single node", want: 1},
		{name: "records of older versions carry epoch 0", newest: 0, want: 1},
		{name: "single node reopen", stored: 7, exists: true, newest: 7, want: 8},
		{name: "opens that appended nothing still count", stored: 9, exists: true, newest: 7, want: 10},
		{name: "records of a newer owner in the log", stored: 3, exists: true, newest: 12, want: 13},
		{name: "file missing under epochs", newest: 5, want: 5 + epochGap, warn: true},
		{name: "file unreadable", exists: true, readErr: damaged, newest: 5, want: 5 + epochGap, warn: true},
		{name: "cluster epoch", requested: 20, stored: 19, exists: true, newest: 18, want: 20},
		{name: "cluster epoch not above stored", requested: 19, stored: 19, exists: true, newest: 18, wantErr: ErrEpochStale},
		{name: "cluster epoch not above the log", requested: 18, stored: 10, exists: true, newest: 18, wantErr: ErrEpochStale},
		{name: "cluster epoch over an unreadable file", requested: 30, exists: true, readErr: damaged, wantErr: damaged},
	}
	for _, c := range cases {
		got, warn, err := chooseEpoch(c.requested, c.stored, c.exists, c.readErr, c.newest)
		switch {
		case c.wantErr != nil && !errors.Is(err, c.wantErr):
			t.Errorf("%s: error %v, want %v", c.name, err, c.wantErr)
		case c.wantErr == nil && (err != nil || got != c.want || (warn != nil) != c.warn):
			t.Errorf("%s: epoch %d warn %v err %v, want %d warn %v", c.name, got, warn, err, c.want, c.warn)
		}
	}
	for _, epoch := range []uint64{0, 1, 1 << 40} {
		if got, err := decodeEpoch(encodeEpoch(epoch)); err != nil || got != epoch {
			t.Fatalf("epoch file round trip %d: %d %v", epoch, got, err)
		}
	}
	data := encodeEpoch(42)
	for i := range data {
		damagedFile := append([]byte(nil), data...)
		damagedFile[i] ^= 1
		if _, err := decodeEpoch(damagedFile); !errors.Is(err, ErrFileCorrupt) {
			t.Fatalf("epoch file with byte %d flipped: %v", i, err)
		}
	}
}
