package queue

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQueueBitsAgainstSortedSet drives the bitmaps and a plain map with the
// same random operations and compares every search.
func TestQueueBitsAgainstSortedSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var bits queueBits
	queued := map[uint64]bool{} // value: blocked
	floor := uint64(10_000)
	for step := range 8_000 {
		offset := floor + uint64(rng.IntN(12_000))
		switch rng.IntN(5) {
		case 0, 1:
			blocked := rng.IntN(3) == 0
			bits.add(offset, blocked)
			queued[offset] = blocked
		case 2:
			bits.remove(offset)
			delete(queued, offset)
		case 3:
			if _, ok := queued[offset]; ok {
				blocked := rng.IntN(2) == 0
				bits.setBlocked(offset, blocked)
				queued[offset] = blocked
			}
		case 4:
			if rng.IntN(100) == 0 {
				for o := range queued {
					if o < floor+5000 {
						bits.remove(o)
						delete(queued, o)
					}
				}
				floor += 5000
				bits.trimBelow(floor)
			}
		}
		from := floor + uint64(rng.IntN(13_000)) - 500
		wantQueued, wantSelectable := expectedNext(queued, from)
		gotQueued, okQueued := bits.nextQueued(from)
		gotSelectable, okSelectable := bits.nextSelectable(from)
		if okQueued != (wantQueued != nil) || (okQueued && gotQueued != *wantQueued) {
			t.Fatalf("step %d nextQueued(%d) = %d %v, want %v", step, from, gotQueued, okQueued, wantQueued)
		}
		if okSelectable != (wantSelectable != nil) || (okSelectable && gotSelectable != *wantSelectable) {
			t.Fatalf("step %d nextSelectable(%d) = %d %v, want %v", step, from, gotSelectable, okSelectable, wantSelectable)
		}
		if bits.queuedCount != len(queued) {
			t.Fatalf("step %d count %d, want %d", step, bits.queuedCount, len(queued))
		}
	}
}

func expectedNext(queued map[uint64]bool, from uint64) (*uint64, *uint64) {
	keys := make([]uint64, 0, len(queued))
	for k := range queued {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var q, s *uint64
	for i := range keys {
		k := keys[i]
		if k < from {
			continue
		}
		if q == nil {
			q = &keys[i]
		}
		if !queued[k] {
			s = &keys[i]
			break
		}
	}
	return q, s
}

func TestTimerHeapOrdersAndRebuilds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h timerHeap
	var want []timerEntry
	for i := range 1000 {
		e := timerEntry{timeMs: int64(rng.IntN(100)), offset: uint64(i)}
		h.push(e.timeMs, e.offset)
		want = append(want, e)
	}
	h.rebuild(func(e timerEntry) bool { return e.offset%3 != 0 })
	want = slices.DeleteFunc(want, func(e timerEntry) bool { return e.offset%3 == 0 })
	slices.SortFunc(want, func(a, b timerEntry) int {
		if a.timeMs != b.timeMs {
			return int(a.timeMs - b.timeMs)
		}
		return int(a.offset) - int(b.offset)
	})
	for i, w := range want {
		got, ok := h.top()
		if !ok || got != w {
			t.Fatalf("pop %d = %+v, want %+v", i, got, w)
		}
		h.pop()
	}
	if h.len() != 0 {
		t.Fatalf("heap keeps %d entries", h.len())
	}
}
