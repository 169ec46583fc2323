package replication

// Link is the owner's view of one follower of a partition: where the
// follower's log stands, what to push it next, and whether its reports
// count toward the quorum (quorum.go). It is a plain state machine: the
// follower-link actor feeds it the peer link's ups and downs, the
// follower's answers and the owner's written frontier, and carries out
// the pushes it asks for.
//
// States:
//
//	unreachable  no peer link to the follower's node
//	probing      the link is up; a keepalive at the owner's end asks the
//	             follower where it stands (its answer, progress or a refusal
//	             with its history, says)
//	pushing      both logs agree below Next; the owner pushes what it wrote
//	             from Next, at most WindowBytes unacknowledged
//	catching-up  the follower is far behind; it fetches pages from the owner
//	             (the pull path) and reports progress; once it is within
//	             CatchUpRecords of the owner's end, pushing resumes from
//	             where it got to
//	latched      the follower's log latched after a storage failure; it is
//	             probed again after RetryDelay
//	stale        the follower is sealed at a newer epoch: this owner has been
//	             replaced (the partition steps down)
//
// A follower's reports count only in pushing and catching-up, only for the
// owner's epoch and only from the instance the link established agreement
// with: a restarted follower is a new instance and starts over at probing.
//
// Invariant: in pushing and catching-up, the follower's log agrees with
// the owner's below max(Written, Durable), Acked <= Next, and the bytes
// in flight are those of pushes past Acked.

import "fmt"

// LinkState is one of a Link's states.
type LinkState uint8

// Link states.
const (
	LinkUnreachable LinkState = iota + 1
	LinkProbing
	LinkPushing
	LinkCatchingUp
	LinkLatched
	LinkStale
)

func (s LinkState) String() string {
	switch s {
	case LinkUnreachable:
		return "unreachable"
	case LinkProbing:
		return "probing"
	case LinkPushing:
		return "in sync"
	case LinkCatchingUp:
		return "catching up"
	case LinkLatched:
		return "latched"
	case LinkStale:
		return "stale"
	}
	return "link(?)"
}

// MarshalText names states in JSON.
func (s LinkState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// LinkLimits bound what one link does.
type LinkLimits struct {
	// WindowBytes bounds the pushed record bytes the follower has not
	// acknowledged as written.
	WindowBytes int
	// PushBytes bounds one push frame's records.
	PushBytes int
	// CatchUpRecords: a follower further behind than this fetches instead
	// of being pushed to.
	CatchUpRecords uint64
}

// DefaultLinkLimits are the limits of a follower link.
var DefaultLinkLimits = LinkLimits{WindowBytes: 8 << 20, PushBytes: 1 << 20, CatchUpRecords: 65536}

// OwnerLog is what a link needs of the owner's log.
type OwnerLog struct {
	FirstOffset uint64
	Written     uint64 // written_next: pushes go up to here
	History     []HistoryEntry
}

// report turns the owner's log into the shape Divergence compares.
func (o OwnerLog) report() SealReport {
	return SealReport{FirstOffset: o.FirstOffset, DurableNext: o.Written, History: o.History}
}

// PreviousEpoch is the epoch of the owner's record before offset (0 when
// offset is its first).
func (o OwnerLog) PreviousEpoch(offset uint64) uint64 {
	if offset <= o.FirstOffset {
		return 0
	}
	return EpochAt(o.History, offset-1)
}

// Link is one follower as its owner sees it.
type Link struct {
	Node   string
	Epoch  uint64 // the owner's epoch
	Limits LinkLimits

	State    LinkState
	Instance uint64 // the follower instance agreement was reached with (0: none)
	Next     uint64 // the next offset to push
	Written  uint64 // the follower's written_next, as last reported
	Durable  uint64 // the follower's durable_next, as last reported
	// Reason says why the link is not pushing, for operators.
	Reason string

	inFlight []inFlightPush
	// inFlightBytes is the sum of the record bytes of inFlight.
	inFlightBytes int
}

type inFlightPush struct {
	next  uint64
	bytes int
}

// NewLink returns a link to node for the owner's epoch; it starts
// unreachable until the peer link is up.
func NewLink(node string, epoch uint64, limits LinkLimits) *Link {
	return &Link{Node: node, Epoch: epoch, Limits: limits, State: LinkUnreachable, Reason: "no peer link yet"}
}

// Counts reports whether the follower's positions count toward the quorum.
func (l *Link) Counts() bool { return l.State == LinkPushing || l.State == LinkCatchingUp }

// Progress is the follower's progress as the quorum counts it.
func (l *Link) Progress() ReplicaProgress {
	return ReplicaProgress{Counts: l.Counts(), WrittenNext: max(l.Written, l.Durable), DurableNext: l.Durable}
}

// becomeProbing starts over: nothing counts until the follower answers.
func (l *Link) becomeProbing(reason string) {
	l.State, l.Reason = LinkProbing, reason
	l.Instance, l.Written, l.Durable = 0, 0, 0
	l.clearInFlight()
}

func (l *Link) clearInFlight() {
	l.inFlight, l.inFlightBytes = l.inFlight[:0], 0
}

// LinkUp: the peer link to the follower's node is up. The caller sends a
// probe (ProbeAt) next.
func (l *Link) LinkUp() { l.becomeProbing("probing") }

// LinkDown: the peer link went down; nothing counts until it is up again.
func (l *Link) LinkDown(cause string) {
	l.State, l.Reason = LinkUnreachable, cause
	l.Instance, l.Written, l.Durable = 0, 0, 0
	l.clearInFlight()
}

// ProbeAt is the keepalive push that asks the follower where it stands:
// start at the owner's written end, with the epoch of the record before.
func (l *Link) ProbeAt(owner OwnerLog) (start, previousEpoch uint64) {
	return owner.Written, owner.PreviousEpoch(owner.Written)
}

// OnProgress takes a progress report. It reports whether the follower's
// counted position or its state moved (the caller reports it and
// recomputes the quorum).
func (l *Link) OnProgress(epoch, instance, durable, written uint64, owner OwnerLog) bool {
	if epoch != l.Epoch {
		return false // an answer to another epoch's pushes
	}
	before := l.State
	switch l.State {
	case LinkProbing:
		// The probe was accepted: the follower's log ends where the owner's
		// does and agrees with it there.
		l.State, l.Reason, l.Instance = LinkPushing, "", instance
		l.Next = max(written, durable)
	case LinkPushing, LinkCatchingUp:
		if instance != l.Instance {
			l.becomeProbing(fmt.Sprintf("the follower restarted (instance %x)", instance))
			return true
		}
	default:
		return false
	}
	moved := durable > l.Durable || written > l.Written
	l.Durable, l.Written = max(l.Durable, durable), max(l.Written, written)
	l.ackInFlight(max(l.Written, l.Durable))
	if l.State == LinkCatchingUp {
		if end := max(l.Written, l.Durable); end+l.Limits.CatchUpRecords >= owner.Written {
			l.State, l.Reason, l.Next = LinkPushing, "", end
		}
	}
	return moved || l.State != before
}

func (l *Link) ackInFlight(acked uint64) {
	drop := 0
	for drop < len(l.inFlight) && l.inFlight[drop].next <= acked {
		l.inFlightBytes -= l.inFlight[drop].bytes
		drop++
	}
	l.inFlight = append(l.inFlight[:0], l.inFlight[drop:]...)
}

// Refusal is a follower's FQN1, as the link needs it.
type Refusal struct {
	Epoch       uint64
	Instance    uint64
	Reason      RefusalReason
	StagedNext  uint64
	DurableNext uint64
	History     []HistoryEntry
	Message     string
}

// RefusalReason mirrors wire.RefusalReason (cluster does not import the
// codecs' enums into its logic; the actor converts).
type RefusalReason uint8

// Refusal reasons, as in wire.
const (
	RefusedOffset RefusalReason = iota + 1
	RefusedEpoch
	RefusedLatched
	RefusedCorrupt
	RefusedUnknown
	RefusedBehind
)

// LinkAction is what the caller does after a refusal.
type LinkAction uint8

// Actions after a refusal.
const (
	// LinkWait: nothing now; probe again after the retry delay.
	LinkWait LinkAction = iota + 1
	// LinkPush: push from Next (records, or a keepalive that makes the
	// follower cut its divergent suffix first).
	LinkPush
	// LinkProbeAtEnd: send a keepalive at the owner's end (the follower
	// then fetches what it lacks).
	LinkProbeAtEnd
	// LinkStepDown: the follower is sealed at a newer epoch; the owner was
	// replaced.
	LinkStepDown
)

// OnRefused takes a refusal and says what to do next.
func (l *Link) OnRefused(refusal Refusal, owner OwnerLog) LinkAction {
	l.clearInFlight()
	switch refusal.Reason {
	case RefusedEpoch:
		if refusal.Epoch > l.Epoch {
			l.State, l.Reason = LinkStale, fmt.Sprintf("the follower is sealed at epoch %d", refusal.Epoch)
			return LinkStepDown
		}
		l.becomeProbing("refused an epoch it should accept: " + refusal.Message)
		return LinkWait
	case RefusedLatched:
		l.State, l.Reason = LinkLatched, "the follower's log latched: "+refusal.Message
		l.Instance, l.Written, l.Durable = 0, 0, 0
		return LinkWait
	case RefusedUnknown, RefusedCorrupt:
		l.becomeProbing(refusal.Reason.String() + ": " + refusal.Message)
		return LinkWait
	}
	follower := SealReport{FirstOffset: 0, DurableNext: refusal.StagedNext, History: refusal.History}
	resume, cut := ResumePoint(owner.report(), follower)
	// What the follower holds below resume agrees with the owner's log;
	// count only what it made durable there until it reports again.
	l.Instance = refusal.Instance
	l.Durable = min(refusal.DurableNext, resume)
	l.Written = l.Durable
	switch {
	case resume < owner.FirstOffset:
		// The owner no longer holds what the follower needs next.
		l.becomeProbing(fmt.Sprintf("the follower needs offset %d, below the owner's first retained %d", resume, owner.FirstOffset))
		return LinkWait
	case refusal.Reason == RefusedBehind && !cut:
		// The follower fetches what it lacks; its progress reports bring
		// the link back to pushing once it is close (OnProgress). Pushing
		// now would only be refused again.
		l.State, l.Reason = LinkCatchingUp, fmt.Sprintf("the follower fetches from %d", resume)
		return LinkWait
	case cut || owner.Written-resume <= l.Limits.CatchUpRecords:
		// Close enough to push (reading the owner's files if needed), or
		// its divergent suffix must go first: push from the agreement.
		l.State, l.Reason, l.Next = LinkPushing, "", resume
		return LinkPush
	}
	l.State, l.Reason = LinkCatchingUp, fmt.Sprintf("%d records behind; fetching", owner.Written-resume)
	return LinkProbeAtEnd
}

func (r RefusalReason) String() string {
	switch r {
	case RefusedOffset:
		return "offset"
	case RefusedEpoch:
		return "epoch"
	case RefusedLatched:
		return "latched"
	case RefusedCorrupt:
		return "corrupt"
	case RefusedUnknown:
		return "unknown"
	case RefusedBehind:
		return "behind"
	}
	return "refusal(?)"
}

// NextPush says which records to push now, [from, upTo), given the owner's
// written end; ok is false when there is nothing to push or the window is
// full. The caller reads the records (at most PushBytes of them, always at
// least one), sends them, and reports what it sent with Pushed.
func (l *Link) NextPush(owner OwnerLog) (from, upTo uint64, ok bool) {
	if l.State != LinkPushing || l.Next >= owner.Written || l.inFlightBytes >= l.Limits.WindowBytes {
		return 0, 0, false
	}
	return l.Next, owner.Written, true
}

// Pushed records a push of records [from, next) of the given bytes.
func (l *Link) Pushed(from, next uint64, bytes int) {
	if from != l.Next || next <= from {
		panic(fmt.Sprintf("cluster: link to %s pushed [%d, %d) with next %d", l.Node, from, next, l.Next))
	}
	l.Next = next
	l.inFlight = append(l.inFlight, inFlightPush{next: next, bytes: bytes})
	l.inFlightBytes += bytes
}

// InFlightBytes is the record bytes pushed and not yet acknowledged.
func (l *Link) InFlightBytes() int { return l.inFlightBytes }
