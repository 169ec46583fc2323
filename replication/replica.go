package replication

// The follower's rules for a push (docs/protocol.md 8.3), as one plain
// decision over the follower's log and the push's header, so the replica
// actor only carries the decision out.
//
// A follower keeps a fence: the newest epoch it was sealed at or accepted
// a push of, recorded durably before it acts on a newer one. Given its log
// (first retained offset, end, epoch history) and a push (epoch, start
// offset, epoch of the record before it), it:
//
//   - refuses a push older than its fence (RefuseEpoch): the sender is not
//     the owner any more;
//   - asks to be caught up (Behind) when the push starts past its end: it
//     lacks records and fetches them;
//   - appends (Append) when the push starts at its end and the record
//     before agrees in epoch;
//   - cuts its log after start-1 and then appends (CutThenAppend) when the
//     push starts below its end, the record before agrees, and the push's
//     epoch is newer than the epoch of its last record: the suffix it cuts
//     was written in an older epoch that recovery did not choose, so no
//     confirm stands on it;
//   - refuses everything else (RefuseOffset): the owner resumes from a
//     point both logs hold, found from the refusal's history.
//
// Invariant: Append and CutThenAppend only follow a record whose epoch is
// the push's previous_epoch, so the log-matching property holds: two logs
// with a record of the same epoch at the same offset agree up to it.

// PushAction is what a follower does with a push.
type PushAction uint8

// Push actions.
const (
	PushAppend PushAction = iota + 1
	PushCutThenAppend
	PushBehind
	PushRefuseEpoch
	PushRefuseOffset
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
	}
	return "push-action(?)"
}

// FollowerLog is what a follower's decision needs of its log.
type FollowerLog struct {
	FirstOffset uint64
	End         uint64 // staged_next: the offset its next record gets
	History     []HistoryEntry
	Fence       uint64 // newest epoch sealed at or accepted
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
	case push.StartOffset > follower.End:
		return PushBehind
	case !previousAgrees(follower, push):
		return PushRefuseOffset
	case push.StartOffset == follower.End:
		return PushAppend
	}
	report := SealReport{FirstOffset: follower.FirstOffset, DurableNext: follower.End, History: follower.History}
	if push.Epoch > report.LastEpoch() {
		return PushCutThenAppend
	}
	return PushRefuseOffset
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
