package bench

// The ledger accounts for every message of one run. One goroutine owns it
// (the run's collector); it is plain state driven by sent, confirmed and
// delivered events, and tests drive it directly.
//
// Sequence numbers are 0-based and dense: message seq is the seq-th publish
// of the run. Every per-message table is allocated once for the run's
// publish limit, so a run's memory is bounded by that limit.
//
// Counting rules:
//   - A message is measured when its intended time is at or after the end
//     of the warm-up; only measured messages contribute latency samples and
//     rates. Loss and duplicates count every message, warm-up included.
//   - Confirm latency = confirm time - intended time. A failed confirm
//     counts as failed and has no latency.
//   - Delivery latency = delivery time - intended time carried in the
//     payload, for the first delivery of a seq only. Later deliveries of the
//     same seq count as duplicated, and as unflagged when the broker did not
//     mark them redelivered.
//   - Lost = confirmed but never delivered by the end of the drain.
//   - A delivery whose payload is not a message of this run (bad header,
//     another run's tag, a seq never sent) counts as unexpected.
//
// Invariants: confirmed + failed <= sent; deliveredConfirmed <= confirmed;
// delivered <= sent.

import (
	"time"
)

// Counts are the message counts of one run.
type Counts struct {
	// Published counts every publish handed to the driver, warm-up
	// included (and a final one whose Publish call failed and ended the
	// run); Measured those intended at or after the end of the warm-up.
	Published uint64 `json:"published"`
	Measured  uint64 `json:"measured"`
	// Confirmed and PublishFailed count confirms with and without an
	// error; Unconfirmed is what had neither when the run ended.
	Confirmed     uint64 `json:"confirmed"`
	PublishFailed uint64 `json:"publish_failed"`
	Unconfirmed   uint64 `json:"unconfirmed"`
	// Delivered counts distinct messages delivered at least once.
	Delivered uint64 `json:"delivered"`
	// Lost counts confirmed messages never delivered.
	Lost uint64 `json:"lost"`
	// Duplicated counts deliveries after the first of the same message;
	// DuplicatedUnflagged those of them not marked redelivered.
	Duplicated          uint64 `json:"duplicated"`
	DuplicatedUnflagged uint64 `json:"duplicated_unflagged"`
	// Redelivered counts every delivery marked redelivered.
	Redelivered uint64 `json:"redelivered"`
	// Unexpected counts deliveries that are not messages of this run.
	Unexpected uint64 `json:"unexpected"`
	// BoundaryMismatch counts confirms that named a weaker boundary than
	// the queue's mode promises (written for a durable queue), or one the
	// benchmark does not know.
	BoundaryMismatch uint64 `json:"boundary_mismatch"`
	// AboveBoundary counts confirms that named a stronger boundary than
	// the mode needs: a buffered queue's message that the node had already
	// synced when it confirmed it, which the confirm reports as durable.
	AboveBoundary uint64 `json:"above_boundary"`
	// ConfirmAnomalies counts confirms for a seq never sent or already
	// confirmed: a driver defect.
	ConfirmAnomalies uint64 `json:"confirm_anomalies"`
}

// bitset is a fixed-size set of sequence numbers.
type bitset []uint64

func newBitset(size uint64) bitset   { return make(bitset, (size+63)/64) }
func (b bitset) has(seq uint64) bool { return b[seq/64]&(1<<(seq%64)) != 0 }
func (b bitset) add(seq uint64)      { b[seq/64] |= 1 << (seq % 64) }

// rateWindow counts measured events and remembers the last one.
type rateWindow struct {
	count uint64
	last  time.Duration
}

func (w *rateWindow) observe(at time.Duration) {
	w.count++
	w.last = max(w.last, at)
}

// perSecond returns the events per second over the measured window: from
// the end of the warm-up to the end of the run, or to the last event when
// that came later. A steady stream of R per second yields R; a stream
// whose events trail past the end because they were late yields less.
func (w rateWindow) perSecond(measureFrom, runEnd time.Duration) float64 {
	span := max(runEnd, w.last) - measureFrom
	if w.count == 0 || span <= 0 {
		return 0
	}
	return float64(w.count) / span.Seconds()
}

// ledger is the state of one run; see the file comment.
type ledger struct {
	runTag           uint32
	measureFrom      time.Duration // the end of the warm-up
	runEnd           time.Duration // when publishing was planned to end
	expectedBoundary Boundary

	intendedNanos []int64 // by seq, appended on send
	confirmed     bitset
	failed        bitset
	delivered     bitset

	confirmLatency  *Recorder
	deliveryLatency *Recorder
	sendLag         *Recorder

	counts             Counts
	deliveredConfirmed uint64
	confirmRate        rateWindow
	deliveryRate       rateWindow
}

// newLedger sizes every table for limit publishes and each recorder for
// sampleCapacity samples.
func newLedger(runTag uint32, measureFrom, runEnd time.Duration, expected Boundary, limit uint64, sampleCapacity int) *ledger {
	return &ledger{
		runTag:           runTag,
		measureFrom:      measureFrom,
		runEnd:           runEnd,
		expectedBoundary: expected,
		intendedNanos:    make([]int64, 0, limit),
		confirmed:        newBitset(limit),
		failed:           newBitset(limit),
		delivered:        newBitset(limit),
		confirmLatency:   NewRecorder(sampleCapacity),
		deliveryLatency:  NewRecorder(sampleCapacity),
		sendLag:          NewRecorder(sampleCapacity),
	}
}

func (l *ledger) sent() uint64 { return uint64(len(l.intendedNanos)) }

func (l *ledger) measured(intended time.Duration) bool { return intended >= l.measureFrom }

// onSent records publish seq; seqs arrive dense and in order.
func (l *ledger) onSent(seq uint64, intended, sentAt time.Duration, paced bool) {
	if seq != l.sent() || len(l.intendedNanos) == cap(l.intendedNanos) {
		panic("bench: publishes must be recorded in order and within the run's limit")
	}
	l.intendedNanos = append(l.intendedNanos, int64(intended))
	l.counts.Published++
	if !l.measured(intended) {
		return
	}
	l.counts.Measured++
	if paced {
		l.sendLag.Record(sentAt - intended)
	}
}

// onConfirm records the confirm of seq that arrived at at.
func (l *ledger) onConfirm(seq uint64, at time.Duration, boundary Boundary, err error) {
	if seq >= l.sent() || l.confirmed.has(seq) || l.failed.has(seq) {
		l.counts.ConfirmAnomalies++
		return
	}
	if err != nil {
		l.failed.add(seq)
		l.counts.PublishFailed++
		return
	}
	l.confirmed.add(seq)
	l.counts.Confirmed++
	if l.delivered.has(seq) {
		l.deliveredConfirmed++
	}
	switch strength, expected := boundaryStrength(boundary), boundaryStrength(l.expectedBoundary); {
	case strength == 0 || strength < expected:
		l.counts.BoundaryMismatch++
	case strength > expected:
		l.counts.AboveBoundary++
	}
	intended := time.Duration(l.intendedNanos[seq])
	if l.measured(intended) {
		l.confirmLatency.Record(at - intended)
		l.confirmRate.observe(at)
	}
}

// boundaryStrength orders the boundaries: written 1, durable 2, and 0 for
// a boundary the benchmark does not know.
func boundaryStrength(b Boundary) int {
	switch b {
	case BoundaryWritten:
		return 1
	case BoundaryDurable:
		return 2
	}
	return 0
}

// onDeliver records a delivery that arrived at at. header is nil when the
// payload did not decode.
func (l *ledger) onDeliver(header *PayloadHeader, at time.Duration, redelivered bool) {
	if redelivered {
		l.counts.Redelivered++
	}
	if header == nil || header.RunTag != l.runTag || header.Seq >= l.sent() {
		l.counts.Unexpected++
		return
	}
	seq := header.Seq
	if l.delivered.has(seq) {
		l.counts.Duplicated++
		if !redelivered {
			l.counts.DuplicatedUnflagged++
		}
		return
	}
	l.delivered.add(seq)
	l.counts.Delivered++
	if l.confirmed.has(seq) {
		l.deliveredConfirmed++
	}
	if l.measured(header.Intended) {
		l.deliveryLatency.Record(at - header.Intended)
		l.deliveryRate.observe(at)
	}
}

// endPublishing records when publishing stopped. A run cut short by the
// message limit ends its measured window there, so its rates count the
// time it actually published.
func (l *ledger) endPublishing(at time.Duration, limitReached bool) {
	if limitReached {
		l.runEnd = min(l.runEnd, at)
	}
}

// settled reports whether every message sent so far has its confirm (or
// failure) and every confirmed message has been delivered.
func (l *ledger) settled() bool {
	return l.counts.Confirmed+l.counts.PublishFailed == l.sent() &&
		l.deliveredConfirmed == l.counts.Confirmed
}

// tally is what a run's ledger reports at its end.
type tally struct {
	counts              Counts
	confirm             Summary
	delivery            Summary
	sendLag             Summary
	confirmPerSecond    float64
	deliveriesPerSecond float64
}

// close computes the final counts and summaries. The ledger must not be
// used afterwards: the recorders have been sorted.
func (l *ledger) close() tally {
	counts := l.counts
	counts.Unconfirmed = l.sent() - counts.Confirmed - counts.PublishFailed
	counts.Lost = counts.Confirmed - l.deliveredConfirmed
	return tally{
		counts:              counts,
		confirm:             l.confirmLatency.Summary(),
		delivery:            l.deliveryLatency.Summary(),
		sendLag:             l.sendLag.Summary(),
		confirmPerSecond:    l.confirmRate.perSecond(l.measureFrom, l.runEnd),
		deliveriesPerSecond: l.deliveryRate.perSecond(l.measureFrom, l.runEnd),
	}
}
