package replication

// Recovery decisions of failover, as plain functions over what the sealed
// replicas reported (DESIGN.md, "Failover"; docs/protocol.md 8.5).
//
// Each sealed replica reports its log: first retained offset, durable end
// (after the seal synced everything written, so written records on a live
// replica count) and epoch history, one entry {epoch, first offset} per
// epoch its records carry, in order. Two logs obey log matching: records
// are appended only at the expected offset and only after the record
// before them agrees in epoch (docs/protocol.md 8.3), so two logs that hold
// a record of the same epoch at the same offset hold identical records up
// to and including it.
//
// The rules:
//   - A recovery waits for E-W+1 seals of copies that earned their vote
//     (SealsNeeded). A copy earns it by holding everything it ever
//     acknowledged. A copy that opened empty (a new or wiped directory, a
//     missing one, a damaged copy set aside) is incomplete: it may have
//     acknowledged records it no longer holds, so its seal is taken (it is
//     fenced like any other) but counts for nothing and is never chosen,
//     until it has caught up past a committed frontier its owner reported
//     (docs/cluster.md, "A copy earns its vote").
//   - The chosen history is the longest among the eligible seals, compared
//     by the epoch of its last record, then its end offset. That history
//     holds every confirmed record: each one is on W copies that
//     acknowledged it, the E-W+1 eligible seals intersect those copies in
//     one that still holds it, and the log with the newest last epoch
//     extends what that epoch's owner installed, which held every record
//     confirmed before it.
//   - Every other replica keeps the prefix it shares with the chosen
//     history (Divergence) and cuts the rest: nothing confirmed is in it.
//
// Invariant of a valid report: history epochs strictly increase, first
// offsets never decrease, and FirstOffset <= DurableNext.

import (
	"errors"
	"fmt"
	"slices"
)

// ErrNotEnoughSeals is returned by Plan when fewer replicas sealed than a
// recovery needs.
var ErrNotEnoughSeals = errors.New("cluster: not enough replicas sealed to recover")

// ErrBadSealReport is returned for a report whose history breaks its
// invariant.
var ErrBadSealReport = errors.New("cluster: malformed seal report")

// SealReport is what one sealed replica said about its log.
type SealReport struct {
	Node     string
	Instance uint64
	// Incomplete says the copy may lack records it acknowledged (it opened
	// empty and has not caught up since): its seal does not count.
	Incomplete  bool
	FirstOffset uint64
	DurableNext uint64
	History     []HistoryEntry
}

// check verifies the report's invariant.
func (r SealReport) check() error {
	if r.FirstOffset > r.DurableNext {
		return fmt.Errorf("%w: %s: first offset %d past its end %d", ErrBadSealReport, r.Node, r.FirstOffset, r.DurableNext)
	}
	for i := 1; i < len(r.History); i++ {
		if r.History[i].Epoch <= r.History[i-1].Epoch || r.History[i].FirstOffset < r.History[i-1].FirstOffset {
			return fmt.Errorf("%w: %s: history entry %d (%v) does not follow %v", ErrBadSealReport, r.Node, i, r.History[i], r.History[i-1])
		}
	}
	return nil
}

// EpochAt returns the epoch of the record at offset in a log with this
// history, or 0 when the history starts after it.
func EpochAt(history []HistoryEntry, offset uint64) uint64 {
	epoch := uint64(0)
	for _, entry := range history {
		if entry.FirstOffset > offset {
			break
		}
		epoch = entry.Epoch
	}
	return epoch
}

// LastEpoch returns the epoch of the report's last record, 0 for an empty
// log.
func (r SealReport) LastEpoch() uint64 {
	if r.DurableNext == r.FirstOffset || r.DurableNext == 0 {
		return 0
	}
	return EpochAt(r.History, r.DurableNext-1)
}

// longer reports whether a's history wins over b's: newer last epoch, then
// longer log.
func longer(a, b SealReport) bool {
	if a.LastEpoch() != b.LastEpoch() {
		return a.LastEpoch() > b.LastEpoch()
	}
	return a.DurableNext > b.DurableNext
}

// Divergence returns the end of the prefix two logs share: every record
// below it is identical in both (or held by neither), and they disagree at
// it or one of them ends there.
func Divergence(a, b SealReport) uint64 {
	low := max(a.FirstOffset, b.FirstOffset)
	end := min(a.DurableNext, b.DurableNext)
	if end <= low {
		return end
	}
	// Epochs only change at history entries, so the first disagreement, if
	// any, is at low or at one of the entries' first offsets.
	boundaries := []uint64{low}
	for _, history := range [][]HistoryEntry{a.History, b.History} {
		for _, entry := range history {
			if entry.FirstOffset > low && entry.FirstOffset < end {
				boundaries = append(boundaries, entry.FirstOffset)
			}
		}
	}
	slices.Sort(boundaries)
	for _, offset := range boundaries {
		if EpochAt(a.History, offset) != EpochAt(b.History, offset) {
			return offset
		}
	}
	return end
}

// RecoveryPlan is what a recovery does with the seals it collected.
type RecoveryPlan struct {
	// Source is the index of the chosen report; its history wins.
	Source int
	// End is the chosen history's end: the new epoch's first offset.
	End uint64
	// History is the chosen history.
	History []HistoryEntry
	// Keep is, per report, the end of the prefix it shares with the
	// chosen history; its records from there on are cut.
	Keep []uint64
}

// SealCounts reports whether a sealed copy's seal counts toward the E-W+1
// a recovery waits for: a complete copy's always; an incomplete one's only
// when no copy on its node may have counted toward a confirm
// (mayHaveCounted false: the partition never confirmed a record, or the
// node is not among the voters the coordination shard recorded), when it
// cannot have lost anything a confirm stood on. mayHaveCounted comes from
// the shard's state the recovery's claim returned: a claim moves the epoch,
// after which the shard records no voter of an earlier one, so that state
// names every node that ever counted.
func SealCounts(incomplete, mayHaveCounted bool) bool { return !incomplete || !mayHaveCounted }

// SealsNeededNow is how many eligible seals a recovery holding reports
// needs before it plans: E-W+1 (needed), or one when lastOwner's seal is
// among them, complete, and the queue is durable. lastOwner is the node
// whose instance served the partition's last active epoch: every confirm
// of that epoch stood on its durable log (the owner counts itself at the
// durable boundary, and a crash keeps what was fsynced), and its log
// extends the history its own recovery installed, which held every record
// confirmed before. A restarted owner of a durable queue therefore
// recovers from its own copy while its followers are down. A buffered
// queue's owner counts its written position, which a power loss takes, so
// it gets no such shortcut.
func SealsNeededNow(reports []SealReport, needed int, lastOwner string, durable bool) int {
	if !durable || lastOwner == "" {
		return needed
	}
	for _, report := range reports {
		if report.Node == lastOwner && !report.Incomplete {
			return 1
		}
	}
	return needed
}

// EligibleSeals counts the reports whose seal counts toward a recovery.
func EligibleSeals(reports []SealReport) int {
	eligible := 0
	for _, report := range reports {
		if !report.Incomplete {
			eligible++
		}
	}
	return eligible
}

// Plan chooses the history a recovery installs from at least needed
// eligible reports; incomplete ones are planned for (what they keep) but
// never chosen. prefer names the node that breaks a tie (the recovering
// node, which then transfers nothing).
func Plan(reports []SealReport, needed int, prefer string) (RecoveryPlan, error) {
	if eligible := EligibleSeals(reports); eligible < needed {
		return RecoveryPlan{}, fmt.Errorf("%w: %d of %d (%d sealed, %d of them incomplete)", ErrNotEnoughSeals,
			eligible, needed, len(reports), len(reports)-eligible)
	}
	source := -1
	for i, report := range reports {
		if err := report.check(); err != nil {
			return RecoveryPlan{}, err
		}
		switch {
		case report.Incomplete:
			continue
		case source < 0, longer(report, reports[source]):
			source = i
		case !longer(reports[source], report) && report.Node == prefer:
			source = i // equal histories: prefer the recovering node's copy
		}
	}
	chosen := reports[source]
	plan := RecoveryPlan{Source: source, End: chosen.DurableNext, History: slices.Clone(chosen.History),
		Keep: make([]uint64, len(reports))}
	for i, report := range reports {
		plan.Keep[i] = Divergence(report, chosen)
	}
	return plan, nil
}
