package replication

// The follower's rules for a push (docs/protocol.md 8.3), as one plain
// decision over the follower's log and the push's header, so the replica
// actor only carries the decision out.
//
// A follower keeps a fence: the newest epoch it was sealed at or accepted
// a push of, recorded durably before it acts on a newer one. Given its log
// (first retained offset, end, epoch history), whether a catch-up fetch
// runs, and a push (epoch, start offset, epoch of the record before it),
// it:
//
//   - refuses a push older than its fence (RefuseEpoch): the sender is not
//     the owner any more; an incomplete copy (it opened empty, and its
//     fence may have gone with its data) waits (WaitForActivation) for any
//     push whose epoch its view of the coordination shard does not show
//     as the current, activated one;
//   - asks to be caught up (Behind) when the push starts past its end: it
//     lacks records and fetches them;
//   - appends (Append) when the push starts at its end and the record
//     before agrees in epoch; a catch-up fetch with a page in flight keeps
//     answering Behind instead, and one with nothing in flight ends (the
//     push path takes over);
//   - cuts its log after start-1 and then appends (CutThenAppend) when the
//     push starts below its end, the record before agrees, and the push's
//     epoch is newer than the epoch of its last record: the suffix it cuts
//     was written in an older epoch that recovery did not choose, so no
//     confirm stands on it. The cut waits (WaitForActivation) until the
//     follower's view of the coordination shard shows the push's epoch
//     activated: nothing is destroyed on the strength of a recovery that
//     has not been recorded. A cut ends a catch-up fetch: the fetch read
//     from a log the owner has just shown to disagree with this one;
//   - refuses everything else (RefuseOffset): the owner resumes from a
//     point both logs hold, found from the refusal's history. While a
//     catch-up fetch runs such a push is answered Behind.
//
// Invariant: Append and CutThenAppend only follow a record whose epoch is
// the push's previous_epoch, so the log-matching property holds: two logs
// with a record of the same epoch at the same offset agree up to it. A
// fetched page obeys the same rule (PageAgrees): its records are appended
// only after a record whose epoch is the page's previous epoch.

// PushAction is what a follower does with a push.
type PushAction uint8

// Push actions.
const (
	PushAppend PushAction = iota + 1
	PushCutThenAppend
	PushBehind
	PushRefuseEpoch
	PushRefuseOffset
	PushWaitForActivation
)

func (a PushAction) String() string {
	switch a {
	case PushAppend:
		return "append"
	case PushCutThenAppend:
		return "cut-then-append"
	case PushBehind:
		return "behind"
	case PushRefuseEpoch:
		return "refuse-epoch"
	case PushRefuseOffset:
		return "refuse-offset"
	case PushWaitForActivation:
		return "wait-for-activation"
	}
	return "push-action(?)"
}

// FollowerLog is what a follower's decision needs of its log.
type FollowerLog struct {
	FirstOffset uint64
	End         uint64 // staged_next: the offset its next record gets
	History     []HistoryEntry
	Fence       uint64 // newest epoch sealed at or accepted
	// CatchingUp says a catch-up fetch runs; PageInFlight that one of its
	// pages is asked for or being appended.
	CatchingUp   bool
	PageInFlight bool
	// EpochActive says the follower's view of the coordination shard shows
	// the push's epoch as its current epoch, activated (a cut waits for
	// it, and so does an incomplete copy's every append).
	EpochActive bool
	// Incomplete says the copy opened empty and has not caught up since:
	// it may have lost its fence with its data, so it takes pushes only
	// from the epoch its view shows active, never from a deposed owner.
	Incomplete bool
	// Diverged says a fetched page did not agree with this log below its
	// end (PageAgrees): a push past the end is refused with the history
	// (RefuseOffset) instead of starting another fetch, so the owner
	// finds the point both logs hold and cuts back to it.
	Diverged bool
}

// PushHeader is a push's header (wire.Push without its records).
type PushHeader struct {
	Epoch         uint64
	StartOffset   uint64
	PreviousEpoch uint64
}

// DecidePush applies the rules above.
func DecidePush(follower FollowerLog, push PushHeader) PushAction {
	switch {
	case push.Epoch < follower.Fence:
		return PushRefuseEpoch
	case follower.Incomplete && !follower.EpochActive:
		return PushWaitForActivation
	case push.StartOffset > follower.End && follower.Diverged && !follower.CatchingUp:
		return PushRefuseOffset
	case push.StartOffset > follower.End:
		return PushBehind
	case !previousAgrees(follower, push):
		if follower.CatchingUp {
			return PushBehind
		}
		return PushRefuseOffset
	case push.StartOffset == follower.End:
		if follower.CatchingUp && follower.PageInFlight {
			return PushBehind
		}
		return PushAppend
	}
	report := SealReport{FirstOffset: follower.FirstOffset, DurableNext: follower.End, History: follower.History}
	switch {
	case push.Epoch <= report.LastEpoch() && follower.CatchingUp:
		return PushBehind
	case push.Epoch <= report.LastEpoch():
		return PushRefuseOffset
	case !follower.EpochActive:
		return PushWaitForActivation
	}
	return PushCutThenAppend
}

// PageAgrees reports whether a fetched page may be appended at the
// follower's end: the page starts there, and the source's record before
// it (previousEpoch, 0 when there is none) has the epoch of the
// follower's last record. A page that fails it came from a log that
// disagrees with this one below its end; the follower stops fetching and
// lets the owner find the divergence (RefuseOffset with its history).
func PageAgrees(follower FollowerLog, fromOffset, previousEpoch uint64) bool {
	if fromOffset != follower.End {
		return false
	}
	return previousAgrees(follower, PushHeader{StartOffset: fromOffset, PreviousEpoch: previousEpoch})
}

// previousAgrees reports whether the follower's record before the push's
// start has the push's previous epoch (a push at the follower's first
// offset, or into an empty log, has no record before it to check).
func previousAgrees(follower FollowerLog, push PushHeader) bool {
	if push.StartOffset <= follower.FirstOffset {
		return push.StartOffset == follower.FirstOffset
	}
	return EpochAt(follower.History, push.StartOffset-1) == push.PreviousEpoch
}

// ResumePoint is where an owner resumes pushing to a follower that
// refused: the end of the prefix both logs hold. cut says the follower
// holds records past it that it must cut (the owner's next push starts
// there and carries a newer epoch).
func ResumePoint(owner, follower SealReport) (resume uint64, cut bool) {
	resume = Divergence(owner, follower)
	return resume, resume < follower.DurableNext
}
