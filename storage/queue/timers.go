package queue

// timerHeap is a min-heap of (timeMs, offset) pairs: lease deadlines, or
// the due times of delayed messages. Entries are not removed when a message
// changes state; the owner checks an entry against the message when it
// reaches the top and drops it when stale (lazy deletion). The heap is
// rebuilt whenever it holds more than twice as many entries as live ones.
type timerHeap struct {
	entries []timerEntry
}

type timerEntry struct {
	timeMs int64
	offset uint64
}

func (h *timerHeap) len() int { return len(h.entries) }

func (h *timerHeap) push(timeMs int64, offset uint64) {
	h.entries = append(h.entries, timerEntry{timeMs, offset})
	h.up(len(h.entries) - 1)
}

func (h *timerHeap) top() (timerEntry, bool) {
	if len(h.entries) == 0 {
		return timerEntry{}, false
	}
	return h.entries[0], true
}

func (h *timerHeap) pop() {
	last := len(h.entries) - 1
	h.entries[0] = h.entries[last]
	h.entries = h.entries[:last]
	if last > 0 {
		h.down(0)
	}
}

func (h *timerHeap) less(i, j int) bool {
	a, b := h.entries[i], h.entries[j]
	return a.timeMs < b.timeMs || (a.timeMs == b.timeMs && a.offset < b.offset)
}

func (h *timerHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.entries[i], h.entries[parent] = h.entries[parent], h.entries[i]
		i = parent
	}
}

func (h *timerHeap) down(i int) {
	n := len(h.entries)
	for {
		smallest, left, right := i, 2*i+1, 2*i+2
		if left < n && h.less(left, smallest) {
			smallest = left
		}
		if right < n && h.less(right, smallest) {
			smallest = right
		}
		if smallest == i {
			return
		}
		h.entries[i], h.entries[smallest] = h.entries[smallest], h.entries[i]
		i = smallest
	}
}

// rebuild keeps only entries for which live returns true.
func (h *timerHeap) rebuild(live func(timerEntry) bool) {
	kept := h.entries[:0]
	for _, e := range h.entries {
		if live(e) {
			kept = append(kept, e)
		}
	}
	clear(h.entries[len(kept):])
	h.entries = kept
	for i := len(h.entries)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}
