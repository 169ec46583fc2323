package queue

import "math/bits"

// queueBits holds which offsets are queued (ready or delayed) and which of
// those are blocked (delayed and not yet due, or claimed by an operation in
// flight), as two bitmaps over the same offset range. Selection wants the
// lowest queued-and-not-blocked offsets; overflow and TTL want the lowest
// queued ones. Two summaries, one bit per 64-offset word, let both searches
// skip 4096 offsets per summary word.
//
// Invariant: blocked ⊆ queued; base is a multiple of 4096;
// summary bit i is set iff words[i] != 0 (per bitmap kind).
type queueBits struct {
	base          uint64
	queued        []uint64
	blocked       []uint64
	queuedSummary []uint64 // bit per word: queued[i] != 0
	selectSummary []uint64 // bit per word: queued[i] &^ blocked[i] != 0
	queuedCount   int
}

const offsetsPerSummaryWord = 64 * 64

func trailingZeros(x uint64) int { return bits.TrailingZeros64(x) }

func (b *queueBits) index(offset uint64) (int, uint64) {
	if offset < b.base {
		panic("queue: offset below the bitmap base")
	}
	rel := offset - b.base
	return int(rel / 64), uint64(1) << (rel % 64)
}

// grow makes room for offset, extending the range at either end.
func (b *queueBits) grow(offset uint64) {
	aligned := offset - offset%offsetsPerSummaryWord
	if len(b.queued) == 0 {
		b.base = aligned
	}
	if offset < b.base {
		b.prepend((b.base - aligned) / offsetsPerSummaryWord)
	}
	word, _ := b.index(offset)
	for word >= len(b.queued) {
		b.queued = append(b.queued, 0)
		b.blocked = append(b.blocked, 0)
		if (len(b.queued)-1)%64 == 0 {
			b.queuedSummary = append(b.queuedSummary, 0)
			b.selectSummary = append(b.selectSummary, 0)
		}
	}
}

// prepend adds summaryWords empty summary words (and their words) in front.
func (b *queueBits) prepend(summaryWords uint64) {
	words := int(summaryWords) * 64
	b.queued = append(make([]uint64, words, words+len(b.queued)), b.queued...)
	b.blocked = append(make([]uint64, words, words+len(b.blocked)), b.blocked...)
	b.queuedSummary = append(make([]uint64, summaryWords), b.queuedSummary...)
	b.selectSummary = append(make([]uint64, summaryWords), b.selectSummary...)
	b.base -= summaryWords * offsetsPerSummaryWord
}

func (b *queueBits) refresh(word int) {
	bit := uint64(1) << (word % 64)
	setBit(&b.queuedSummary[word/64], bit, b.queued[word] != 0)
	setBit(&b.selectSummary[word/64], bit, b.queued[word]&^b.blocked[word] != 0)
}

func setBit(word *uint64, bit uint64, on bool) {
	if on {
		*word |= bit
	} else {
		*word &^= bit
	}
}

// add marks offset queued, blocked or not.
func (b *queueBits) add(offset uint64, blocked bool) {
	b.grow(offset)
	word, bit := b.index(offset)
	if b.queued[word]&bit == 0 {
		b.queuedCount++
	}
	b.queued[word] |= bit
	setBit(&b.blocked[word], bit, blocked)
	b.refresh(word)
}

// remove clears offset from both bitmaps.
func (b *queueBits) remove(offset uint64) {
	if offset < b.base || offset-b.base >= uint64(len(b.queued))*64 {
		return
	}
	word, bit := b.index(offset)
	if b.queued[word]&bit != 0 {
		b.queuedCount--
	}
	b.queued[word] &^= bit
	b.blocked[word] &^= bit
	b.refresh(word)
}

// setBlocked blocks or unblocks a queued offset.
func (b *queueBits) setBlocked(offset uint64, blocked bool) {
	word, bit := b.index(offset)
	if b.queued[word]&bit == 0 {
		panic("queue: blocking an offset that is not queued")
	}
	setBit(&b.blocked[word], bit, blocked)
	b.refresh(word)
}

// isQueued reports whether offset is queued.
func (b *queueBits) isQueued(offset uint64) bool {
	if offset < b.base || offset-b.base >= uint64(len(b.queued))*64 {
		return false
	}
	word, bit := b.index(offset)
	return b.queued[word]&bit != 0
}

// isBlocked reports whether offset is blocked.
func (b *queueBits) isBlocked(offset uint64) bool {
	if !b.isQueued(offset) {
		return false
	}
	word, bit := b.index(offset)
	return b.blocked[word]&bit != 0
}

// nextQueued returns the lowest queued offset at or above from.
func (b *queueBits) nextQueued(from uint64) (uint64, bool) {
	return b.next(from, b.queuedSummary, false)
}

// nextSelectable returns the lowest queued, unblocked offset at or above from.
func (b *queueBits) nextSelectable(from uint64) (uint64, bool) {
	return b.next(from, b.selectSummary, true)
}

func (b *queueBits) wordBits(word int, selectable bool) uint64 {
	if selectable {
		return b.queued[word] &^ b.blocked[word]
	}
	return b.queued[word]
}

func (b *queueBits) next(from uint64, summary []uint64, selectable bool) (uint64, bool) {
	if from < b.base {
		from = b.base
	}
	rel := from - b.base
	word := int(rel / 64)
	if word >= len(b.queued) {
		return 0, false
	}
	if bits := b.wordBits(word, selectable) >> (rel % 64); bits != 0 {
		return from + uint64(trailingZeros(bits)), true
	}
	word++
	for word < len(b.queued) {
		s := summary[word/64] >> (word % 64)
		if s == 0 {
			word = (word/64 + 1) * 64
			continue
		}
		word += trailingZeros(s)
		bits := b.wordBits(word, selectable)
		return b.base + uint64(word)*64 + uint64(trailingZeros(bits)), true
	}
	return 0, false
}

// trimBelow releases storage for offsets below floor, which must hold no
// queued offset. It works in whole summary words and copies only when at
// least half of the storage is freed, so the cost is amortized.
func (b *queueBits) trimBelow(floor uint64) {
	if floor <= b.base {
		return
	}
	if b.queuedCount == 0 {
		// Every word is zero: keep the storage (unless it is large) and let
		// the next add choose a new base.
		if cap(b.queued) > 1<<16 {
			*b = queueBits{}
			return
		}
		b.queued, b.blocked = b.queued[:0], b.blocked[:0]
		b.queuedSummary, b.selectSummary = b.queuedSummary[:0], b.selectSummary[:0]
		return
	}
	summaryWords := int((floor - b.base) / offsetsPerSummaryWord)
	if summaryWords == 0 || summaryWords*64*2 < len(b.queued) {
		return
	}
	words := summaryWords * 64
	if words >= len(b.queued) {
		panic("queue: trimming the bitmap past a queued offset")
	}
	b.queued = append([]uint64(nil), b.queued[words:]...)
	b.blocked = append([]uint64(nil), b.blocked[words:]...)
	b.queuedSummary = append([]uint64(nil), b.queuedSummary[summaryWords:]...)
	b.selectSummary = append([]uint64(nil), b.selectSummary[summaryWords:]...)
	b.base += uint64(words) * 64
}
