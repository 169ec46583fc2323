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
// A follower's reports count toward the quorum frontier only in pushing
// and catching-up, only for the owner's epoch and only from the instance
// the link established agreement with: a restarted follower is a new
// instance and starts over at probing. Toward admission (whether the owner
// takes new publishes) the same followers count, except one that has been
// stalled for AdmitStallMax: a copy that cannot make progress cannot hold a
// new record soon. A follower that catches up still admits: it holds new
// records within its catch-up, and refusing publishes each time a follower
// fetches turned admission on and off between one connection's pipelined
// publishes, so a refused publish retried by its client was stored after
// a later one that was admitted (an order violation seen in the power-loss
// class).
//
// What the link says of itself is true (Observe, with the time injected by
// the caller): "in sync" only while the follower holds everything the
// owner wrote; a follower behind is "pushing" or "catching up" with its lag
// in records; one whose position has not risen for StallAfter of counting
// while the owner's log is ahead of it is "stalled", with the reason,
// however often the link went through probing or refusals meanwhile.
//
// Retention: an owner keeps the records a follower still needs
// (RetentionHold): those above a counting follower's durable position, and
// above the last durable position of a follower that stopped counting less
// than RetentionHoldMax ago. A follower gone longer no longer holds the
// owner's disk; when it returns below the owner's first retained offset it
// cannot be caught up from the log alone: its refusals leave the link
// probing while it installs the owner's snapshot and restarts its log at
// the owner's first offset, and its next refusal, from there, starts the
// catch-up as for any follower behind.
//
// Invariant: in pushing and catching-up, the follower's log agrees with
// the owner's below max(Written, Durable), Acked <= Next, and the bytes
// in flight are those of pushes past Acked.

import (
	"fmt"
	"slices"
	"time"
)

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
	// StallAfter: a follower behind the owner whose position has not moved
	// for this long is stalled.
	StallAfter time.Duration
	// AdmitStallMax: a follower stalled for this long no longer counts
	// toward admission.
	AdmitStallMax time.Duration
	// RetentionHoldMax: how long a follower that stopped counting keeps
	// holding the owner's retention at its last durable position.
	RetentionHoldMax time.Duration
	// ReprobeAfter: a follower stalled this long is probed again from
	// scratch (ShouldReprobe).
	ReprobeAfter time.Duration
}

// DefaultLinkLimits are the limits of a follower link.
var DefaultLinkLimits = LinkLimits{WindowBytes: 8 << 20, PushBytes: 1 << 20, CatchUpRecords: 65536,
	StallAfter: 500 * time.Millisecond, AdmitStallMax: 5 * time.Second, RetentionHoldMax: time.Hour,
	ReprobeAfter: 2 * time.Second}

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

	// The stall clock (Observe). best is the highest position at the
	// queue's boundary that follower instance bestInstance reported while
	// it counted; progressAt is when it last rose above best or was level
	// with the owner's log. Neither moves while the follower does not
	// count, and a return to counting at the same position is no
	// progress: a link that goes round probing, pushing and refusals
	// without the follower's log growing stays stalled. countingSince is
	// when the link last began to count.
	best          uint64
	bestInstance  uint64
	progressAt    time.Time
	counting      bool
	countingSince time.Time
	// lastDurable is the follower's durable position as last reported, kept
	// while it does not count (retention); stoppedAt is when it stopped
	// counting (zero while it counts).
	lastDurable uint64
	stoppedAt   time.Time
	// actedOn is the last refusal the link restarted on (OnRefused), nil
	// once it starts over at probing.
	actedOn *Refusal
}

// LinkHealth is what a link says of itself at one moment.
type LinkHealth struct {
	State LinkState
	// LagRecords is how far the follower's position at the observed
	// boundary is behind the owner's written end.
	LagRecords uint64
	// StalledFor is how long a follower behind has not moved (0 when it is
	// level or moving, or does not count).
	StalledFor time.Duration
	Stalled    bool
	// Admits says the follower counts toward admission.
	Admits bool
	// Text is the state for operators: "in sync", "pushing, 40 records
	// behind", "stalled for 2.1s, 900 records behind (reason)", ...
	Text string
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

// Observe says how the follower stands at now against the owner's log, at
// the queue's boundary (written for a buffered queue, durable otherwise),
// and starts the stall clock over when the follower moved or is level. The
// caller observes after every event and at least every StallAfter/2.
func (l *Link) Observe(owner OwnerLog, now time.Time, written bool) LinkHealth {
	position := l.Durable
	if written {
		position = max(l.Written, l.Durable)
	}
	counts := l.Counts()
	switch {
	case !counts:
		if l.stoppedAt.IsZero() {
			l.stoppedAt = now
		}
	default:
		l.stoppedAt = time.Time{}
	}
	lag := uint64(0)
	if owner.Written > position {
		lag = owner.Written - position
	}
	l.observeProgress(position, lag, counts, now)
	health := LinkHealth{State: l.State, LagRecords: lag}
	if counts && lag > 0 {
		health.StalledFor = now.Sub(l.progressAt)
		health.Stalled = health.StalledFor >= l.Limits.StallAfter
	}
	health.Admits = counts && health.StalledFor < l.Limits.AdmitStallMax
	health.Text = l.healthText(health)
	return health
}

// observeProgress runs the stall clock (see best): it starts over when
// the follower's position rises above the best its instance reached, when
// it is level with the owner, and when a new follower instance counts.
func (l *Link) observeProgress(position, lag uint64, counts bool, now time.Time) {
	if counts && !l.counting {
		l.countingSince = now
	}
	l.counting = counts
	switch {
	case !counts:
	case l.progressAt.IsZero() || l.Instance != l.bestInstance:
		l.best, l.bestInstance, l.progressAt = position, l.Instance, now
	case position > l.best:
		l.best, l.progressAt = position, now
	case lag == 0:
		l.progressAt = now
	}
}

func (l *Link) healthText(health LinkHealth) string {
	text := l.State.String()
	doing := "pushing"
	if l.State == LinkCatchingUp {
		doing = "catching up"
	}
	switch {
	case health.Stalled:
		text = fmt.Sprintf("stalled for %.1fs %s, %s behind", health.StalledFor.Seconds(), doing, records(health.LagRecords))
	case l.State == LinkPushing && health.LagRecords > 0:
		text = fmt.Sprintf("pushing, %s behind", records(health.LagRecords))
	case l.State == LinkCatchingUp:
		text = fmt.Sprintf("catching up, %s behind", records(health.LagRecords))
	}
	if l.Reason != "" {
		text += " (" + l.Reason + ")"
	}
	return text
}

// records says "1 record" or "n records".
func records(n uint64) string {
	if n == 1 {
		return "1 record"
	}
	return fmt.Sprintf("%d records", n)
}

// ShouldReprobe says a stalled link starts over at probing: whatever lost
// an acknowledgement (a report the follower could not send, pushes the
// owner thinks are in flight and the follower never saw), a fresh probe
// makes both sides say again where they stand. A follower that is only
// slow answers the probe at once and goes on. A link probes again at most
// once per ReprobeAfter of counting: the stall clock does not start over
// at a reprobe, so without that bound it would probe on every
// observation.
func (l *Link) ShouldReprobe(health LinkHealth, now time.Time) bool {
	return health.Stalled && l.Limits.ReprobeAfter > 0 && health.StalledFor >= l.Limits.ReprobeAfter &&
		l.counting && now.Sub(l.countingSince) >= l.Limits.ReprobeAfter
}

// RetentionHold says whether the follower holds the owner's retention at
// now, and at which durable position: a counting follower at its durable
// position, one that stopped counting at its last one until
// RetentionHoldMax has passed.
func (l *Link) RetentionHold(now time.Time) (position uint64, holds bool) {
	if l.Counts() {
		return l.Durable, true
	}
	if !l.stoppedAt.IsZero() && now.Sub(l.stoppedAt) >= l.Limits.RetentionHoldMax {
		return 0, false
	}
	return l.lastDurable, true
}

// Progress is the follower's progress as the quorum counts it.
func (l *Link) Progress() ReplicaProgress {
	return ReplicaProgress{Counts: l.Counts(), WrittenNext: max(l.Written, l.Durable), DurableNext: l.Durable}
}

// becomeProbing starts over: nothing counts until the follower answers.
func (l *Link) becomeProbing(reason string) {
	l.State, l.Reason, l.actedOn = LinkProbing, reason, nil
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
	l.State, l.Reason, l.actedOn = LinkUnreachable, cause, nil
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
	l.lastDurable = l.Durable
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
//
// A follower refuses every push of a window that no longer fits its log,
// each with the same account of its log. The first of them restarts the
// pushes; a later one that says exactly the same (same instance, reason,
// end, durable position and history) while the link still pushes or
// catches up from that restart is a refusal of a push sent before it, and
// changes nothing: restarting on each of them pushed the whole window
// again per refusal, each drawing as many refusals, and the counted
// position was dragged back each time.
func (l *Link) OnRefused(refusal Refusal, owner OwnerLog) LinkAction {
	switch refusal.Reason {
	case RefusedOffset, RefusedBehind:
		if (l.State == LinkPushing || l.State == LinkCatchingUp) && l.actedOn != nil && sameAccount(*l.actedOn, refusal) {
			return LinkWait
		}
		acted := refusal
		acted.History = slices.Clone(refusal.History)
		l.actedOn = &acted
	}
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
	l.lastDurable = l.Durable
	switch {
	case resume < owner.FirstOffset:
		// The owner no longer holds what the follower needs next: the
		// follower takes the owner's snapshot and restarts its log at the
		// owner's first offset; its refusals from there resume the link.
		l.becomeProbing(fmt.Sprintf("the follower needs offset %d, below the owner's first retained %d: it catches up from a snapshot",
			resume, owner.FirstOffset))
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

// sameAccount reports whether two refusals say the same of the follower's
// log (their messages aside), to tell a repeat (OnRefused).
func sameAccount(a, b Refusal) bool {
	return a.Instance == b.Instance && a.Reason == b.Reason && a.StagedNext == b.StagedNext &&
		a.DurableNext == b.DurableNext && slices.Equal(a.History, b.History)
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
