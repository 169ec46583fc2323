package actors

// The replica side of a cluster partition (partition_cluster.go): what it
// does with the pushes, page requests and seals that peer links hand it
// (peer_inbound.go), and the fetch it runs when it lacks records.
//
// A push is decided by replication.DecidePush over the replica's log and
// fence: appended (after the fence is raised to a newer epoch, durably),
// appended after cutting a divergent suffix, refused (older epoch,
// disagreeing record), or answered "behind", which starts a fetch from the
// pushing owner. A replica appends at the queue's boundary (AfterFlush for
// a buffered queue, AfterFsync for a durable one) and reports, on the link
// the owner pushes on, FQP2 while written is ahead of durable and FQP1
// otherwise, after every append and whenever its durable frontier moves
// (a background sync).
//
// A fetch asks its source for pages (at most fetchPageRecords records and
// fetchPageBytes bytes each), one at a time, on this node's outbound link
// to the source, and appends each page AfterFsync before asking for the
// next; it ends when a page says the replica has caught up (or reached the
// end a recovery asked for). A page that says the source no longer holds
// the next record starts a catch-up from the source's snapshot
// (partition_snapshot.go). While a catch-up fetch runs, pushes are
// answered "behind" with the replica's end, so the owner resumes pushing
// once it is close.
//
// A seal raises the fence to the seal's epoch (durably), syncs everything
// written (log.Seal, on a goroutine) and answers (FQT2) with the durable
// end, the epoch history and whether this copy is incomplete (fence.go:
// it opened empty and has not caught up since, so its seal does not
// count). A replica that is latched or not open answers an error (it does
// not count as sealed).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

const (
	// fetchPageRecords and fetchPageBytes bound one page.
	fetchPageRecords = 4096
	fetchPageBytes   = 16 << 20
	// fetchRetryDelay is the pause before a failed fetch is asked again.
	fetchRetryDelay = 50 * time.Millisecond
	// sealTimeout bounds a seal's sync.
	sealTimeout = 30 * time.Second
)

// Messages of the replica side.
type (
	// replicaAppended is sent by an append's completion callback.
	replicaAppended struct {
		q      *queue.Queue // the queue appended to (a reopen replaces it)
		result log.Result
		epoch  uint64
		reply  peerReply
		fetch  bool // a fetched page, not a push
	}
	// sealFinished is sent by the goroutine that ran a seal's sync.
	sealFinished struct {
		request sealRequest
		state   log.SealState
		err     error
	}
	// fetchRetry asks the fetch again after a failure.
	fetchRetry struct{}
)

// fetchState is the fetch a replica runs.
type fetchState struct {
	source    string
	epoch     uint64 // the epoch the fetch names (the source refuses an older one)
	next      uint64 // the next offset wanted
	until     uint64 // stop once next reaches it (0: until caught up)
	recovery  bool   // installing a recovery's chosen history (not a catch-up)
	requestID uint64 // the request in flight, 0 when none
	appending bool   // a page is being appended
	retry     bool   // a retry timer is armed
}

// historyOf converts a log's epoch history.
func historyOf(epochs []log.EpochStart) []replication.HistoryEntry {
	out := make([]replication.HistoryEntry, len(epochs))
	for i, entry := range epochs {
		out[i] = replication.HistoryEntry{Epoch: entry.Epoch, FirstOffset: entry.FirstOffset}
	}
	return out
}

func wireHistoryOf(epochs []log.EpochStart) []wire.EpochStart {
	out := make([]wire.EpochStart, len(epochs))
	for i, entry := range epochs {
		out[i] = wire.EpochStart{Epoch: entry.Epoch, FirstOffset: entry.FirstOffset}
	}
	return out
}

// replicaLogView is the replica's log as its appends will leave it: its
// end and epoch history, counting the batches handed to the log that it
// has not staged yet (the log stages them on its own goroutine, so its
// frontiers lag the partition's appends).
func (p *partition) replicaLogView() (end uint64, history []replication.HistoryEntry) {
	r := p.repl
	if r.appendsInFlight == 0 {
		l := p.q.Log()
		return l.Frontiers().Staged, historyOf(l.EpochHistory())
	}
	return r.pendingEnd, r.pendingHistory
}

// notePendingAppend records a batch the log took: count records of
// encoded bytes records from first.
func (p *partition) notePendingAppend(first uint64, records []byte, count int) {
	r := p.repl
	_, history := p.replicaLogView()
	if r.appendsInFlight == 0 {
		history = slices.Clone(history) // from the log: the pending view owns its copy
	}
	for _, start := range log.EncodedEpochStarts(records, first) {
		if len(history) == 0 || history[len(history)-1].Epoch != start.Epoch {
			history = append(history, replication.HistoryEntry{Epoch: start.Epoch, FirstOffset: start.FirstOffset})
		}
	}
	r.appendsInFlight++
	r.pendingEnd, r.pendingHistory = first+uint64(count), history
}

// appendLevel is the level a replica appends pushed records at.
func (p *partition) appendLevel() log.Durability {
	if p.admittedMode() == queue.Buffered { // the newest revision's mode (partition_mode.go)
		return log.AfterFlush
	}
	return log.AfterFsync
}

// refusePush answers a push the replica does not append.
func (p *partition) refusePush(msg replicaPush, reason wire.RefusalReason, message string) {
	fence := uint64(0)
	if p.repl != nil { // nil while the copy never opened (fenced at open)
		fence = p.repl.fence
	}
	refusal := &wire.PushRefused{Partition: msg.push.Partition, Epoch: fence,
		Instance: p.home.replication.instance, Reason: reason, Message: message}
	if p.q != nil && p.repl != nil {
		// The end and history the decision saw: with the appends handed to
		// the log and not staged yet. The log's own staged frontier lags
		// them, and an owner that resumed from it pushed again from where
		// this log already was, got refused again, and went round (every
		// push of its window refused, the follower's counted position
		// dragged back each time) while this copy was in fact keeping up.
		end, history := p.replicaLogView()
		refusal.StagedNext, refusal.DurableNext = end, p.q.Log().Frontiers().Durable
		refusal.History = make([]wire.EpochStart, len(history))
		for i, entry := range history {
			refusal.History[i] = wire.EpochStart{Epoch: entry.Epoch, FirstOffset: entry.FirstOffset}
		}
	}
	_ = msg.reply.sendFrame(refusal)
}

func (p *partition) replicaPush(ctx actor.Context, msg replicaPush) {
	push, r := &msg.push, p.repl
	switch {
	case p.state == partitionFenced:
		p.refusePush(msg, wire.RefusedLatched, fmt.Sprintf("the replica's log is fenced: %v", p.fenceErr))
		return
	case p.q == nil:
		p.refusePush(msg, wire.RefusedUnknown, "the replica is not open yet")
		return
	case r.role != roleReplica:
		if push.Epoch > r.epoch {
			p.stepDown(ctx, fmt.Sprintf("%s pushes epoch %d, newer than this node's %d", msg.from, push.Epoch, r.epoch))
		}
		p.refusePush(msg, wire.RefusedEpoch, fmt.Sprintf("this node is the %s of epoch %d", r.role, r.epoch))
		return
	}
	l := p.q.Log()
	end, history := p.replicaLogView()
	if r.fetch != nil && !r.fetch.recovery && !r.fetch.appending && push.Epoch >= r.fence &&
		(msg.from != r.fetch.source || push.Epoch > r.fetch.epoch) {
		// The catch-up fetches from a node that no longer owns the partition
		// (it died or was fenced: its fetch may never be answered). The
		// pushing owner's history is the one to follow: start over from it.
		p.core.logger.Info("replica drops a catch-up from a former owner", "queue", p.home.name,
			"source", r.fetch.source, "fetch_epoch", r.fetch.epoch, "owner", msg.from, "epoch", push.Epoch)
		r.fetch = nil
	}
	catchingUp := r.fetch != nil && !r.fetch.recovery
	follower := replication.FollowerLog{FirstOffset: l.FirstOffset(), End: end, History: history, Fence: r.fence,
		CatchingUp: catchingUp, PageInFlight: catchingUp && (r.fetch.appending || r.fetch.requestID != 0),
		Incomplete: r.incomplete, Diverged: r.fetchDiverged}
	activeFrom, active := p.epochActive(push.Epoch)
	follower.EpochActive = active
	header := replication.PushHeader{Epoch: push.Epoch, StartOffset: push.StartOffset, PreviousEpoch: push.PreviousEpoch}
	action := replication.DecidePush(follower, header)
	switch action {
	case replication.PushRefuseEpoch:
		p.refusePush(msg, wire.RefusedEpoch, fmt.Sprintf("sealed at epoch %d", r.fence))
		return
	case replication.PushRefuseOffset:
		p.refusePush(msg, wire.RefusedOffset, fmt.Sprintf(
			"the push starts at %d after epoch %d; this log holds [%d, %d), its record before the push has epoch %d, its last epoch %d",
			push.StartOffset, push.PreviousEpoch, l.FirstOffset(), end, replication.EpochAt(history, push.StartOffset-1),
			replication.EpochAt(history, end-1)))
		return
	case replication.PushWaitForActivation:
		p.refusePush(msg, wire.RefusedUnknown, fmt.Sprintf(
			"waiting to see epoch %d activated in the coordination shard before cutting or, as an incomplete copy, appending",
			push.Epoch))
		return
	}
	if !p.raiseFence(ctx, push.Epoch) {
		p.refusePush(msg, wire.RefusedLatched, "the replica could not record its fence")
		return
	}
	r.ownerReply, r.ownerNode, r.ownerEpoch, r.ownerHeardAt = msg.reply, msg.from, push.Epoch, time.Now()
	if active {
		// What makes an incomplete copy complete: the committed frontier
		// the active epoch's owner reports, and at least that epoch's start.
		r.completeAt, r.completeKnown = max(push.CommittedNext, activeFrom), true
	}
	if catchingUp && action != replication.PushBehind {
		// A push at this log's end with no page in flight, or a cut the
		// owner asks for: the catch-up is over, the push path takes over.
		p.core.logger.Info("replica ends its catch-up; it takes pushes again", "queue", p.home.name, "at", end,
			"action", action.String())
		r.fetch = nil
	}
	switch action {
	case replication.PushBehind:
		message := fmt.Sprintf("this log ends at %d", end)
		if catchingUp {
			message = fmt.Sprintf("catching up: fetching from %d", r.fetch.next)
		}
		p.refusePush(msg, wire.RefusedBehind, message)
		if !catchingUp {
			p.startFetch(ctx, &fetchState{source: msg.from, epoch: push.Epoch, next: end})
		}
		return
	case replication.PushCutThenAppend:
		if r.appendsInFlight > 0 {
			// Cut only a log whose appends are all staged: refuse for now,
			// the owner probes again.
			p.refusePush(msg, wire.RefusedUnknown, "appends in flight; the divergent suffix is cut once they finish")
			return
		}
		if err := p.q.TruncateAfter(push.StartOffset); err != nil {
			p.refusePush(msg, wire.RefusedLatched, fmt.Sprintf("cutting the divergent suffix failed: %v", err))
			p.maybeFence(ctx, err)
			return
		}
	case replication.PushAppend:
		// The record before the push agrees with the owner's: by log
		// matching so does everything below it.
		r.fetchDiverged = false
	}
	if action == replication.PushCutThenAppend {
		r.fetchDiverged = false
	}
	// This log agrees with the owner's below the push's start (log
	// matching), and holds the push's records next: what the owner calls
	// committed is, in this log, committed too.
	committedMoved := push.CommittedNext > r.ownerCommitted
	r.ownerCommitted = max(r.ownerCommitted, push.CommittedNext)
	if push.RecordCount == 0 {
		p.reportProgress(true)
		if committedMoved {
			p.advance(ctx) // a keepalive moved the committed frontier: apply up to it
		}
		return
	}
	p.appendReplicated(ctx, push.StartOffset, push.Records, int(push.RecordCount), p.appendLevel(), push.Epoch,
		msg.reply, false)
}

// appendReplicated appends count encoded records through the queue.
func (p *partition) appendReplicated(ctx actor.Context, first uint64, records []byte, count int, level log.Durability,
	epoch uint64, reply peerReply, fetched bool) {
	self, system, q := ctx.Self(), ctx.ActorSystem(), p.q
	err := q.AppendReplicated(first, records, level, func(result log.Result) {
		system.Root.Send(self, replicaAppended{q: q, result: result, epoch: epoch, reply: reply, fetch: fetched})
	})
	if err == nil {
		p.notePendingAppend(first, records, count)
	}
	if err != nil {
		if reply != nil {
			_ = reply.sendFrame(&wire.PushRefused{Partition: p.home.replication.shardID, Epoch: p.repl.fence,
				Instance: p.home.replication.instance, Reason: refusalOf(err), Message: err.Error()})
		}
		p.maybeFence(ctx, err)
		if fetched && p.repl.fetch != nil {
			p.repl.fetch.appending = false
			p.retryFetchLater(ctx)
		}
	}
}

// refusalOf maps an append error to the reason a push is refused with.
func refusalOf(err error) wire.RefusalReason {
	switch {
	case errors.Is(err, log.ErrOffsetMismatch):
		return wire.RefusedOffset
	case errors.Is(err, log.ErrEpochRegression):
		return wire.RefusedEpoch
	case errors.Is(err, log.ErrCorrupt), errors.Is(err, log.ErrTooLarge):
		return wire.RefusedCorrupt
	}
	return wire.RefusedLatched
}

func (p *partition) replicaAppended(ctx actor.Context, msg replicaAppended) {
	if msg.q != p.q {
		return // an append of the queue before a reopen
	}
	p.repl.appendsInFlight--
	if waiting := p.repl.sealsWaiting; p.repl.appendsInFlight == 0 && len(waiting) > 0 {
		p.repl.sealsWaiting = nil
		defer func() {
			for _, seal := range waiting {
				p.seal(ctx, seal)
			}
		}()
	}
	if msg.fetch {
		p.fetchAppended(ctx, msg)
		return
	}
	if msg.result.Err != nil {
		if msg.reply != nil {
			_ = msg.reply.sendFrame(&wire.PushRefused{Partition: p.home.replication.shardID, Epoch: p.repl.fence,
				Instance: p.home.replication.instance, Reason: refusalOf(msg.result.Err), Message: msg.result.Err.Error()})
		}
		return
	}
	p.reportProgress(false)
}

// reportProgress sends the owner this replica's positions when they moved
// (or always, when forced: the answer to a probe).
func (p *partition) reportProgress(forced bool) {
	r := p.repl
	if r == nil || r.role != roleReplica || r.ownerReply == nil || p.q == nil {
		return
	}
	p.maybeBecomeComplete()
	f := p.q.Log().Frontiers()
	if !forced && r.reported == [2]uint64{f.Durable, f.Written} {
		return
	}
	r.reported = [2]uint64{f.Durable, f.Written}
	home := p.home.replication
	var frame wire.Frame = &wire.Progress{Partition: home.shardID, Epoch: r.ownerEpoch, Instance: home.instance,
		DurableNext: f.Durable}
	if f.Written > f.Durable {
		frame = &wire.ProgressWritten{Partition: home.shardID, Epoch: r.ownerEpoch, Instance: home.instance,
			DurableNext: f.Durable, WrittenNext: f.Written}
	}
	if err := r.ownerReply.sendFrame(frame); err != nil {
		r.ownerReply = nil // the link closed; the owner probes again on its next link
	}
}

// raiseFence records epoch as the fence when it is newer; false when the
// fence could not be written (the replica then refuses the push).
func (p *partition) raiseFence(ctx actor.Context, epoch uint64) bool {
	r := p.repl
	if epoch <= r.fence {
		return true
	}
	if err := p.writeReplicaFence(epoch, r.incomplete); err != nil {
		p.core.logger.Error("could not record the replica's fence", "queue", p.home.name, "epoch", epoch, "err", err)
		return false
	}
	r.fence = epoch
	return true
}

// epochActive reports whether this node's view of the coordination shard
// shows epoch as the current epoch, activated, and from which offset its
// records start.
func (p *partition) epochActive(epoch uint64) (firstOffset uint64, active bool) {
	home := p.home.replication
	view, ok := home.node.Partition(home.shardID)
	if !ok || view.State.Phase != cluster.PhaseActive || view.State.Epoch != epoch || len(view.State.History) == 0 {
		return 0, false
	}
	return view.State.History[len(view.State.History)-1].FirstOffset, true
}

// writeReplicaFence records the fence with this copy's completeness.
func (p *partition) writeReplicaFence(epoch uint64, incomplete bool) error {
	return writeFence(p.core.config.FS, p.home.dir,
		fenceRecord{shardID: p.home.replication.shardID, epoch: epoch, incomplete: incomplete})
}

// maybeBecomeComplete clears the incomplete mark once this copy's durable
// end reached the committed frontier the active epoch's owner reported
// (and that epoch's first offset): it then holds every record a confirm
// can have stood on, and its seal counts again.
func (p *partition) maybeBecomeComplete() {
	r := p.repl
	if r == nil || !r.incomplete || !r.completeKnown || p.q == nil {
		return
	}
	if p.q.Log().Frontiers().Durable < r.completeAt {
		return
	}
	if err := p.writeReplicaFence(r.fence, false); err != nil {
		p.core.logger.Warn("could not record that the copy caught up", "queue", p.home.name, "err", err)
		return
	}
	r.incomplete = false
	p.core.logger.Info("the copy caught up past the committed frontier; its seal counts again", "queue", p.home.name,
		"at", r.completeAt)
}

// becomeComplete marks a copy that holds a recovery's chosen history (or
// serves the first epoch of a partition) as complete.
func (p *partition) becomeComplete() {
	r := p.repl
	if !r.incomplete {
		return
	}
	if err := p.writeReplicaFence(r.fence, false); err != nil {
		p.core.logger.Warn("could not record that the copy is complete", "queue", p.home.name, "err", err)
		return
	}
	r.incomplete = false
}

// seal answers FQS1: fence, sync, report.
func (p *partition) seal(ctx actor.Context, msg sealRequest) {
	r := p.repl
	refuse := func(code wire.Code, message string) {
		_ = msg.reply.sendFrame(&wire.ErrorFrame{RequestID: msg.seal.RequestID, Code: code, Message: message})
	}
	switch {
	case p.state == partitionFenced:
		refuse(wire.CodeFenced, fmt.Sprintf("the replica's log is fenced: %v", p.fenceErr))
		return
	case p.q == nil:
		refuse(wire.CodeUnavailable, "the replica is not open yet")
		return
	case msg.seal.Epoch < r.fence:
		refuse(wire.CodeFenced, fmt.Sprintf("sealed at epoch %d already, newer than %d", r.fence, msg.seal.Epoch))
		return
	}
	if (r.role == roleOwner || r.role == roleRecovering) && msg.seal.Epoch > r.epoch {
		p.stepDown(ctx, fmt.Sprintf("%s seals epoch %d", msg.seal.Owner, msg.seal.Epoch))
		if p.state == partitionOpening {
			p.hold(ctx, msg) // sealed once the queue reopened as a replica
			return
		}
	}
	if !p.raiseFence(ctx, msg.seal.Epoch) {
		refuse(wire.CodeStorageFailure, "the replica could not record its fence")
		return
	}
	if r.appendsInFlight > 0 {
		// Batches handed to the log before the fence rose may still be
		// staged: seal once they are, so the report covers them.
		r.sealsWaiting = append(r.sealsWaiting, msg)
		return
	}
	l := p.handle // the log actor owns the appender: the seal goes through it
	self, system := ctx.Self(), ctx.ActorSystem()
	p.core.storageClosers.Add(1)
	go func() {
		defer p.core.storageClosers.Done()
		sealCtx, cancel := context.WithTimeout(context.Background(), sealTimeout)
		defer cancel()
		state, err := l.Seal(sealCtx)
		system.Root.Send(self, sealFinished{request: msg, state: state, err: err})
	}()
}

func (p *partition) sealFinished(ctx actor.Context, msg sealFinished) {
	seal := msg.request.seal
	if msg.err != nil {
		_ = msg.request.reply.sendFrame(&wire.ErrorFrame{RequestID: seal.RequestID, Code: wire.CodeFenced,
			Message: fmt.Sprintf("the seal's sync failed: %v", msg.err)})
		p.maybeFence(ctx, msg.err)
		return
	}
	first := msg.state.End
	if p.q != nil {
		first = min(p.q.Log().FirstOffset(), msg.state.End)
	}
	_ = msg.request.reply.sendFrame(&wire.SealedVote{Sealed: wire.Sealed{RequestID: seal.RequestID,
		Partition: seal.Partition, Epoch: p.repl.fence, Instance: p.home.replication.instance,
		DurableNext: msg.state.End, FirstOffset: first, History: wireHistoryOf(msg.state.Epochs)},
		Incomplete: p.repl.incomplete})
}

// servePage answers FQF1 from this copy's log, on a goroutine.
func (p *partition) servePage(ctx actor.Context, msg pageRequest) {
	fetch := msg.fetch
	refuse := func(code wire.Code, message string) {
		_ = msg.reply.sendFrame(&wire.ErrorFrame{RequestID: fetch.RequestID, Code: code, Message: message})
	}
	switch {
	case p.q == nil:
		refuse(wire.CodeUnavailable, "this copy is not open")
		return
	case fetch.Epoch < p.repl.fence:
		refuse(wire.CodeFenced, fmt.Sprintf("this copy is sealed at epoch %d, newer than the fetch's %d", p.repl.fence, fetch.Epoch))
		return
	}
	l, shardID := p.q.Log(), p.home.replication.shardID
	p.core.storageClosers.Add(1)
	go func() {
		defer p.core.storageClosers.Done()
		_ = msg.reply.sendFrame(readPage(l, shardID, fetch))
	}()
}

// readPage reads one page of records from l, with the epoch of the
// record before them (FQG2), so the asker can check that its log agrees.
func readPage(l *log.Log, shardID uint64, fetch wire.Fetch) wire.Frame {
	maxRecords := int(min(fetch.MaxRecords, fetchPageRecords))
	maxBytes := int(min(fetch.MaxBytes, fetchPageBytes))
	after := &wire.PageAfter{Page: wire.Page{RequestID: fetch.RequestID, Partition: shardID,
		FromOffset: fetch.FromOffset, FirstOffset: l.FirstOffset(), EndOffset: l.Frontiers().Written}}
	page := &after.Page
	if fetch.FromOffset > page.FirstOffset {
		after.PreviousEpoch = replication.EpochAt(historyOf(l.EpochHistory()), fetch.FromOffset-1)
	}
	if fetch.FromOffset < page.FirstOffset || fetch.FromOffset >= page.EndOffset {
		return after
	}
	var records []byte
	count := 0
	stop := errors.New("page full")
	_, err := l.ScanEncoded(fetch.FromOffset, log.FrontierWritten, maxBytes, func(span []byte, first, next uint64) error {
		room := maxRecords - count
		if room <= 0 {
			return stop
		}
		taken := span
		if int(next-first) > room {
			taken = log.EncodedPrefix(span, room)
			next = first + uint64(room)
		}
		records = append(records, taken...)
		count += int(next - first)
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		return &wire.ErrorFrame{RequestID: fetch.RequestID, Code: wire.CodeStorageFailure,
			Message: fmt.Sprintf("reading records from %d: %v", fetch.FromOffset, err)}
	}
	page.RecordCount, page.Records = uint32(count), records
	return after
}

// startFetch begins fetching (unless a fetch already runs).
func (p *partition) startFetch(ctx actor.Context, fetch *fetchState) {
	r := p.repl
	if r.fetch != nil && (r.fetch.recovery || !fetch.recovery) {
		return
	}
	r.fetch = fetch
	p.core.logger.Info("replica fetches records", "queue", p.home.name, "source", fetch.source, "from", fetch.next,
		"until", fetch.until, "recovery", fetch.recovery)
	p.maybeFetch(ctx)
}

// maybeFetch asks for the next page when none is in flight.
func (p *partition) maybeFetch(ctx actor.Context) {
	r := p.repl
	fetch := r.fetch
	if fetch == nil {
		return
	}
	fetch.retry = false
	if fetch.requestID != 0 || fetch.appending || p.q == nil {
		return
	}
	fetch.requestID = p.core.newID()
	frame := (&wire.Fetch{RequestID: fetch.requestID, Partition: p.home.replication.shardID, Epoch: fetch.epoch,
		FromOffset: fetch.next, MaxRecords: fetchPageRecords, MaxBytes: fetchPageBytes}).Encode(nil)
	ctx.Send(p.core.peerLinkPID(fetch.source), peerRequest{requestID: fetch.requestID, frame: frame, replyTo: ctx.Self()})
}

func (p *partition) fetchFailed(ctx actor.Context, msg peerRequestFailed) {
	fetch := p.repl.fetch
	if fetch == nil || msg.requestID != fetch.requestID {
		return // the answer to a fetch this partition gave up
	}
	fetch.requestID = 0
	p.retryFetchLater(ctx)
}

func (p *partition) retryFetchLater(ctx actor.Context) {
	fetch := p.repl.fetch
	if fetch == nil || fetch.retry {
		return
	}
	fetch.retry = true
	self, system := ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(fetchRetryDelay, func() { system.Root.Send(self, fetchRetry{}) })
}

func (p *partition) fetchAnswered(ctx actor.Context, msg peerAnswer) {
	fetch := p.repl.fetch
	if fetch == nil || msg.requestID != fetch.requestID {
		return // the answer to a fetch this partition gave up
	}
	fetch.requestID = 0
	if fetch.source == p.repl.ownerNode {
		p.repl.ownerHeardAt = time.Now() // a catching-up replica hears its owner through pages
	}
	switch frame := msg.frame.(type) {
	case *wire.PageAfter:
		if !p.pageAgrees(ctx, frame) {
			return
		}
		p.pageArrived(ctx, &frame.Page)
	case *wire.Page:
		p.pageArrived(ctx, frame) // a node of an earlier version: no previous epoch to check
	case *wire.ErrorFrame:
		p.core.logger.Info("a fetch was refused", "queue", p.home.name, "source", fetch.source,
			"code", frame.Code.String(), "message", frame.Message)
		p.retryFetchLater(ctx)
	}
}

// pageAgrees checks a page against this log (replication.PageAgrees). A
// page that disagrees ends the fetch: a catch-up leaves the owner to find
// the divergence from this copy's refusal (fetchDiverged), a recovery's
// transfer fails (the chosen history should extend what this node kept).
func (p *partition) pageAgrees(ctx actor.Context, page *wire.PageAfter) bool {
	r, fetch := p.repl, p.repl.fetch
	if page.RecordCount == 0 && page.EndOffset <= page.FromOffset {
		return true // caught up, or the source lacks what is asked: nothing to append
	}
	if !fetch.recovery && page.RecordCount == 0 && page.FirstOffset > page.FromOffset {
		// The source compacted what this copy lacks: the page holds no
		// record to append, and no epoch of the record before it (the
		// source keeps none below its first offset) to check. The copy
		// catches up from the source's snapshot (pageArrived), which
		// replaces its log. Checked as a divergence it stopped the fetch,
		// and the owner, which cannot push below its first offset, never
		// caught it up: a follower down past the retention hold stayed
		// behind for good.
		return true
	}
	end, history := p.replicaLogView()
	follower := replication.FollowerLog{FirstOffset: p.q.Log().FirstOffset(), End: end, History: history}
	if replication.PageAgrees(follower, page.FromOffset, page.PreviousEpoch) {
		return true
	}
	p.core.logger.Warn("a fetched page does not agree with this log below its end; the fetch stops",
		"queue", p.home.name, "source", fetch.source, "from", page.FromOffset, "source_previous_epoch", page.PreviousEpoch,
		"own_previous_epoch", replication.EpochAt(history, max(page.FromOffset, 1)-1), "end", end)
	r.fetch = nil
	if fetch.recovery {
		p.recoveryFailed(ctx, recoveryFailed{reason: fmt.Sprintf(
			"the chosen history from %s does not agree with this copy at %d", fetch.source, page.FromOffset)})
		return false
	}
	r.fetchDiverged = true
	return false
}

func (p *partition) pageArrived(ctx actor.Context, page *wire.Page) {
	r, fetch := p.repl, p.repl.fetch
	switch {
	case page.RecordCount > 0:
		records := page.Records
		if fetch.until != 0 && page.FromOffset+uint64(page.RecordCount) > fetch.until {
			records = log.EncodedPrefix(records, int(fetch.until-page.FromOffset)) // past the chosen history
		}
		fetch.appending = true
		count := int(page.RecordCount)
		if fetch.until != 0 {
			count = int(min(uint64(count), fetch.until-page.FromOffset))
		}
		p.appendReplicated(ctx, page.FromOffset, records, count, log.AfterFsync, fetch.epoch, r.ownerReply, true)
	case page.FirstOffset > page.FromOffset:
		p.snapshotNeeded(ctx, page) // partition_snapshot.go
	default:
		p.fetchDone(ctx, page.EndOffset)
	}
}

func (p *partition) fetchAppended(ctx actor.Context, msg replicaAppended) {
	r, fetch := p.repl, p.repl.fetch
	if fetch == nil {
		return
	}
	fetch.appending = false
	if msg.result.Err != nil {
		p.core.logger.Warn("appending a fetched page failed", "queue", p.home.name, "err", msg.result.Err)
		p.maybeFence(ctx, msg.result.Err)
		fetch.next, _ = p.replicaLogView()
		p.retryFetchLater(ctx)
		return
	}
	p.core.metrics.replication.fetchedRecords.WithLabelValues(p.home.name).Add(float64(msg.result.Next - fetch.next))
	fetch.next = msg.result.Next
	p.reportProgress(false)
	if fetch.until != 0 && fetch.next >= fetch.until {
		p.fetchDone(ctx, fetch.next)
		return
	}
	_ = r
	p.maybeFetch(ctx)
}

// fetchDone ends a fetch: a catch-up replica is pushed to again; a
// recovery goes on installing.
func (p *partition) fetchDone(ctx actor.Context, end uint64) {
	r := p.repl
	fetch := r.fetch
	r.fetch = nil
	p.core.logger.Info("replica fetched what it lacked", "queue", p.home.name, "source", fetch.source, "end", end)
	p.reportProgress(true)
	if fetch.recovery {
		p.installFetched(ctx)
	}
}

// maybeCapReplicaApplies holds a replica's applies below the committed
// frontier its owner reported (a copy awaiting a snapshot keeps the hold
// of partition_snapshot.go instead). What lies above may still be cut by a
// recovery that chooses another history: a replica that applied it, and
// then captured a checkpoint at a marker there and compacted its log
// against that checkpoint, could no longer rebuild its state once the cut
// removed the marker. Committed records are never cut, so everything a
// replica applies stands. A promotion applies the rest (queue.Promote).
func (p *partition) maybeCapReplicaApplies() {
	if p.q == nil || !p.q.IsReplica() || p.snapshotState().awaiting {
		return
	}
	p.q.SetApplyLimit(p.repl.ownerCommitted)
}
