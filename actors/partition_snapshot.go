package actors

// Snapshot catch-up (docs/protocol.md 8.4): a replica whose next record
// lies below its source's first retained offset (a fetched page says
// first_offset > from_offset: the source compacted what this copy lacks,
// as after its queue disk came back empty) cannot catch up by fetching.
// It asks the source for its newest published snapshot (FQH1) and the
// source answers with the snapshot file, its log's first offset and its
// epoch history (FQI1), or an error frame.
//
// The follower, in order:
//
//  1. verifies the snapshot (checkSnapshot: checksum, format and counts
//     through queue.DecodeSnapshot, and that it covers more than the
//     source's first offset and holds no live message below it); a
//     snapshot that fails changes nothing and is asked for again after
//     snapshotRetryDelay;
//  2. marks its copy incomplete (fence.go) and restarts its log empty at
//     the source's first offset with the source's epoch history below it
//     (queue.Rebase, durable), holding its applies at that offset
//     (SetApplyLimit): the records it fetches next are applied only once
//     the snapshot gives the state they follow;
//  3. fetches from the source's first offset as usual (fetchState.next);
//  4. once its log holds the snapshot's checkpoint marker durably, installs
//     it (queue.InstallSnapshot: verified again against the log, stored as
//     this copy's own and fsynced before it is used), lifts the apply hold
//     and applies what follows below the committed frontier its owner
//     reports (maybeCapReplicaApplies, partition_replica.go).
//
// A copy whose queue opens awaiting a snapshot (it restarted between 2 and
// 4: its log starts past offset 0 without one) holds its applies where its
// replay left them and asks its fetch source, or the owner that pushes to
// it, for the snapshot again; one that fits its log is installed without
// another rebase. The copy stays incomplete until maybeBecomeComplete finds
// it caught up past a committed frontier its owner reported after the
// rebase.
//
// Takes: snapshotRequest (an FQH1 from an inbound peer link: the source
// side), the peerAnswer and peerRequestFailed of the snapshot request in
// flight (peerAnswered and peerFailed route them here, and every other to
// the fetch), snapshotRetry (its timers: a retry, or a request's answer
// timeout). Sends: peerRequest with an FQH1 to
// the source's peer link; FQI1 or FER1 on the asker's link; the page
// requests of the fetch it resumes (partition_replica.go).
//
// Invariants: nothing on the copy changes before the snapshot verified; a
// rebase happens only with no append in flight and no page asked for or
// being appended, and only toward the node the catch-up fetches from; no
// record past the rebase base is applied before the snapshot is installed.

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

const (
	// snapshotRetryDelay is the pause before a refused or failed snapshot
	// is asked for again: a snapshot is large, and a source without one
	// needs a checkpoint first.
	snapshotRetryDelay = 500 * time.Millisecond
	// snapshotAnswerTimeout is how long a snapshot request waits for its
	// answer before it is given up and asked again (an answer the source
	// could not queue on a full link is never sent).
	snapshotAnswerTimeout = 30 * time.Second
)

// Messages of the snapshot catch-up.
type (
	// snapshotRequest is an FQH1 an inbound peer link hands to the
	// partition it names.
	snapshotRequest struct {
		from    string
		request wire.SnapshotRequest
		reply   peerReply
	}
	// snapshotRetry asks for the snapshot again after a failure, or, with
	// the id of a request, gives that request up when it is still
	// unanswered.
	snapshotRetry struct{ requestID uint64 }
)

// snapshotCatchUp is a replica's side of a snapshot catch-up, for one
// opened queue (a reopen starts it over).
type snapshotCatchUp struct {
	queue *queue.Queue
	// awaiting says the queue's log starts past offset 0 without a
	// snapshot: its applies are held until one is installed.
	awaiting bool
	// requestID is the FQH1 in flight (0: none), asked of source naming
	// epoch.
	requestID uint64
	source    string
	epoch     uint64
	retry     bool // a retry timer is armed
	// pending is a verified snapshot waiting for the log to hold, durably,
	// every record below covers (its checkpoint marker is the last).
	pending []byte
	covers  uint64
	// diverged says a snapshot that fit the log did not install (its
	// marker is not in this log): the next one rebases the log.
	diverged bool
}

// snapshotState returns the catch-up of the open queue, starting it over
// for a queue opened since; a queue that opened awaiting a snapshot has its
// applies held where its replay left them.
func (p *partition) snapshotState() *snapshotCatchUp {
	s := &p.repl.snapshot
	if s.queue == p.q {
		return s
	}
	*s = snapshotCatchUp{queue: p.q}
	if p.q != nil && p.q.IsReplica() {
		if info := p.q.Info(); info.AwaitingSnapshot {
			s.awaiting = true
			p.q.SetApplyLimit(info.Applied)
		}
	}
	return s
}

// serveSnapshot answers FQH1 with this copy's newest published snapshot.
func (p *partition) serveSnapshot(msg snapshotRequest) {
	request := msg.request
	refuse := func(code wire.Code, message string) {
		_ = msg.reply.sendFrame(&wire.ErrorFrame{RequestID: request.RequestID, Code: code, Message: message})
	}
	switch {
	case p.q == nil:
		refuse(wire.CodeUnavailable, "this copy is not open")
		return
	case p.state == partitionFenced:
		refuse(wire.CodeFenced, fmt.Sprintf("this copy is fenced: %v", p.fenceErr))
		return
	case request.Epoch < p.repl.fence:
		refuse(wire.CodeFenced, fmt.Sprintf("this copy is sealed at epoch %d, newer than the request's %d",
			p.repl.fence, request.Epoch))
		return
	}
	covers, data, ok, err := p.q.LatestSnapshot()
	switch {
	case err != nil:
		refuse(wire.CodeStorageFailure, fmt.Sprintf("reading the newest snapshot: %v", err))
		return
	case !ok:
		refuse(wire.CodeUnavailable, "this copy has published no snapshot yet")
		return
	}
	l := p.q.Log()
	frame := &wire.Snapshot{RequestID: request.RequestID, Partition: p.home.replication.shardID,
		FirstOffset: l.FirstOffset(), History: wireHistoryOf(l.EpochHistory()), Snapshot: data}
	encoded := frame.Encode(nil)
	if body := len(encoded) - wire.HeaderBytes; body > peerMaxBodyBytes {
		refuse(wire.CodeResourceLimit, fmt.Sprintf("the snapshot's frame would be %d bytes, over the peer limit of %d",
			body, peerMaxBodyBytes))
		return
	}
	p.core.logger.Info("serving the queue's snapshot to a replica below the retained records", "queue", p.home.name,
		"to", msg.from, "covers", covers, "first_offset", frame.FirstOffset, "bytes", len(data))
	if transport, ok := msg.reply.(*peerTransport); ok {
		if err := transport.send(encoded); err != nil {
			refuse(wire.CodeUnavailable, fmt.Sprintf("the snapshot could not be queued on the link: %v", err))
		}
		return
	}
	_ = msg.reply.sendFrame(frame)
}

// snapshotNeeded runs when a fetched page says the source no longer holds
// the fetch's next record: a catch-up asks for the source's snapshot (the
// fetch waits, no page in flight); a recovery's transfer cannot use one.
func (p *partition) snapshotNeeded(ctx actor.Context, page *wire.Page) {
	r, fetch := p.repl, p.repl.fetch
	if fetch.recovery {
		p.core.logger.Error("the replica is behind its source's retained records and cannot install a recovery's history by fetching",
			"queue", p.home.name, "source", fetch.source, "needs", page.FromOffset, "source_first", page.FirstOffset)
		r.fetch = nil
		return
	}
	p.core.logger.Info("the replica is behind its source's retained records; it asks for the source's snapshot",
		"queue", p.home.name, "source", fetch.source, "needs", page.FromOffset, "source_first", page.FirstOffset)
	p.askSnapshot(ctx, fetch.source, fetch.epoch)
}

// askSnapshot sends FQH1 to source, unless one is in flight to it already
// (one to another node is given up: its answer is ignored).
func (p *partition) askSnapshot(ctx actor.Context, source string, epoch uint64) {
	s := p.snapshotState()
	if s.requestID != 0 && s.source == source {
		return
	}
	id := p.core.newID()
	s.requestID, s.source, s.epoch = id, source, epoch
	frame := (&wire.SnapshotRequest{RequestID: id, Partition: p.home.replication.shardID, Epoch: epoch}).Encode(nil)
	ctx.Send(p.core.peerLinkPID(source), peerRequest{requestID: id, frame: frame, replyTo: ctx.Self()})
	self, system := ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(snapshotAnswerTimeout, func() { system.Root.Send(self, snapshotRetry{requestID: id}) })
}

// peerAnswered routes an answer: the snapshot request's here, any other
// to the fetch.
func (p *partition) peerAnswered(ctx actor.Context, msg peerAnswer) {
	if p.repl != nil && p.repl.snapshot.requestID != 0 && msg.requestID == p.repl.snapshot.requestID {
		p.snapshotAnswered(ctx, msg)
		return
	}
	p.fetchAnswered(ctx, msg)
}

// peerFailed routes a failed request like peerAnswered.
func (p *partition) peerFailed(ctx actor.Context, msg peerRequestFailed) {
	if p.repl != nil && p.repl.snapshot.requestID != 0 && msg.requestID == p.repl.snapshot.requestID {
		p.repl.snapshot.requestID = 0
		p.core.logger.Info("a snapshot request failed; the replica asks again", "queue", p.home.name,
			"source", msg.node, "err", msg.err)
		p.retrySnapshotLater(ctx)
		return
	}
	p.fetchFailed(ctx, msg)
}

func (p *partition) snapshotAnswered(ctx actor.Context, msg peerAnswer) {
	s := p.snapshotState()
	s.requestID = 0
	switch frame := msg.frame.(type) {
	case *wire.Snapshot:
		p.snapshotArrived(ctx, msg.node, frame)
	case *wire.ErrorFrame:
		p.core.logger.Info("the source refused the snapshot; the replica asks again", "queue", p.home.name,
			"source", msg.node, "code", frame.Code.String(), "message", frame.Message)
		p.retrySnapshotLater(ctx)
	default:
		p.core.logger.Warn("a snapshot request was answered with another frame", "queue", p.home.name,
			"source", msg.node, "frame", fmt.Sprintf("%T", msg.frame))
		p.retrySnapshotLater(ctx)
	}
}

// checkSnapshot verifies a snapshot answer for the partition shardID of a
// queue declared with options before anything is changed for it: the
// snapshot decodes (checksum, format, counts), covers more than the
// source's first retained offset (its checkpoint marker is a record the
// source holds), and no message live in it lies below that offset (the
// records a live message's settles need are there to fetch). It returns
// the offset the snapshot covers and its lowest live message (covers
// when none is live).
func checkSnapshot(frame *wire.Snapshot, shardID uint64, options queue.Options) (covers, firstLive uint64, err error) {
	if frame.Partition != shardID {
		return 0, 0, fmt.Errorf("the snapshot is of partition %d, not %d", frame.Partition, shardID)
	}
	state, err := queue.DecodeSnapshot(frame.Snapshot, options)
	if err != nil {
		return 0, 0, fmt.Errorf("the snapshot does not decode: %w", err)
	}
	covers, firstLive = state.Next(), state.FirstLive()
	if covers <= frame.FirstOffset {
		return 0, 0, fmt.Errorf("the snapshot covers the records below %d, none of those from the source's first offset %d",
			covers, frame.FirstOffset)
	}
	if firstLive < frame.FirstOffset {
		return 0, 0, fmt.Errorf("message %d, live in the snapshot, lies below the source's first offset %d",
			firstLive, frame.FirstOffset)
	}
	return covers, firstLive, nil
}

// snapshotArrived takes a verified snapshot: one that fits a log awaiting
// it waits for its marker there; otherwise the log is rebased at the
// source's first offset, unless it reaches the source's records again.
func (p *partition) snapshotArrived(ctx actor.Context, from string, frame *wire.Snapshot) {
	r, s := p.repl, p.snapshotState()
	if r.role != roleReplica || p.q == nil || !p.q.IsReplica() {
		return
	}
	covers, firstLive, err := checkSnapshot(frame, p.home.replication.shardID, p.home.options)
	if err != nil {
		p.core.metrics.replication.snapshotsRefused.WithLabelValues(p.home.name).Inc()
		p.core.logger.Warn("a snapshot from the source is refused; nothing changed, the replica asks again",
			"queue", p.home.name, "source", from, "err", err)
		p.retrySnapshotLater(ctx)
		return
	}
	l := p.q.Log()
	end, _ := p.replicaLogView()
	// A snapshot fits a log that awaits one when the log can hold its
	// marker and the records of every message live in it, and can still
	// fetch them: a source that compacted past this log's end since the
	// last rebase no longer holds the records up to the marker, and the
	// log, left waiting for them, never installed (it is rebased again).
	first := l.FirstOffset()
	fits := s.awaiting && !s.diverged && covers-1 >= first && firstLive >= first && frame.FirstOffset <= end
	switch {
	case fits:
		s.pending, s.covers = frame.Snapshot, covers
		if p.maybeInstallSnapshot(ctx) {
			p.advance(ctx)
		}
		return
	case !s.awaiting && frame.FirstOffset <= end:
		p.core.logger.Info("the source holds this log's next record again; the replica fetches it", "queue", p.home.name,
			"source", from, "end", end, "source_first", frame.FirstOffset)
		if r.fetch != nil {
			p.maybeFetch(ctx)
		}
		return
	}
	p.rebaseForSnapshot(ctx, from, frame, covers)
}

// rebaseForSnapshot restarts the log at the snapshot source's first offset
// and resumes (or starts) the catch-up fetch from there.
func (p *partition) rebaseForSnapshot(ctx actor.Context, from string, frame *wire.Snapshot, covers uint64) {
	r, s, fetch := p.repl, p.snapshotState(), p.repl.fetch
	if (fetch == nil && from != r.ownerNode) || (fetch != nil && (fetch.recovery || fetch.source != from)) {
		// The node no longer is the one this copy follows (a new owner
		// pushes): its history is not the one to restart the log on.
		p.core.logger.Info("a snapshot from a node this copy no longer follows is dropped", "queue", p.home.name,
			"source", from, "owner", r.ownerNode)
		return
	}
	if r.appendsInFlight > 0 || (fetch != nil && (fetch.appending || fetch.requestID != 0)) {
		p.core.logger.Info("the replica waits for its appends and fetch before it rebases for a snapshot",
			"queue", p.home.name, "source", from)
		p.retrySnapshotLater(ctx)
		return
	}
	if !r.incomplete {
		// Its records are about to go: until it caught up again it must
		// not count as a copy that holds what it acknowledged.
		if err := p.writeReplicaFence(r.fence, true); err != nil {
			p.core.logger.Warn("could not mark the copy incomplete before its rebase", "queue", p.home.name, "err", err)
			p.retrySnapshotLater(ctx)
			return
		}
		r.incomplete = true
	}
	r.completeKnown = false // complete again past a frontier its owner reports from now on
	base := frame.FirstOffset
	var history []log.EpochStart
	for _, entry := range frame.History {
		if entry.FirstOffset < base {
			history = append(history, log.EpochStart{Epoch: entry.Epoch, FirstOffset: entry.FirstOffset})
		}
	}
	if err := p.q.Rebase(base, history); err != nil {
		p.core.logger.Warn("the replica could not restart its log for a snapshot", "queue", p.home.name,
			"base", base, "err", err)
		if !p.maybeFence(ctx, err) {
			p.retrySnapshotLater(ctx)
		}
		return
	}
	p.q.SetApplyLimit(base)
	s.awaiting, s.pending, s.covers, s.diverged = true, frame.Snapshot, covers, false
	r.fetchDiverged = false
	p.core.logger.Info("the replica restarted its log at its source's first offset; it installs the snapshot once it holds its marker",
		"queue", p.home.name, "source", from, "base", base, "covers", covers)
	if fetch != nil {
		fetch.next = base
		p.maybeFetch(ctx)
		return
	}
	p.startFetch(ctx, &fetchState{source: from, epoch: s.epoch, next: base})
}

// snapshotBeforeAdvance runs before every Advance of a replica: it holds
// the applies of a queue that awaits a snapshot, installs a pending one
// whose marker the log now holds durably, or asks for one it lacks.
func (p *partition) snapshotBeforeAdvance(ctx actor.Context) {
	if p.q == nil || !p.q.IsReplica() {
		return
	}
	s := p.snapshotState()
	if !s.awaiting || p.repl.role != roleReplica {
		return
	}
	if s.pending != nil {
		p.maybeInstallSnapshot(ctx)
		return
	}
	p.askAwaitedSnapshot(ctx)
}

// askAwaitedSnapshot asks a queue's awaited snapshot of the node the
// catch-up fetches from, or else of the owner that pushes to this copy.
func (p *partition) askAwaitedSnapshot(ctx actor.Context) {
	r, s := p.repl, p.snapshotState()
	if s.requestID != 0 || s.retry {
		return
	}
	switch {
	case r.fetch != nil && !r.fetch.recovery:
		p.askSnapshot(ctx, r.fetch.source, r.fetch.epoch)
	case r.ownerNode != "":
		p.askSnapshot(ctx, r.ownerNode, r.ownerEpoch)
	}
}

// maybeInstallSnapshot installs the pending snapshot once the log holds
// every record below what it covers durably, and lifts the apply hold. It
// reports whether it installed; a snapshot the queue refuses is dropped
// and asked for again.
func (p *partition) maybeInstallSnapshot(ctx actor.Context) bool {
	s := p.snapshotState()
	if s.pending == nil || p.q.Log().Frontiers().Durable < s.covers {
		return false
	}
	data := s.pending
	s.pending = nil
	if err := p.q.InstallSnapshot(data); err != nil {
		p.core.metrics.replication.snapshotsRefused.WithLabelValues(p.home.name).Inc()
		p.core.logger.Warn("the snapshot does not install; the replica asks again", "queue", p.home.name,
			"covers", s.covers, "err", err)
		s.diverged = s.diverged || errors.Is(err, queue.ErrSnapshotStale)
		if !p.maybeFence(ctx, err) {
			p.retrySnapshotLater(ctx)
		}
		return false
	}
	s.awaiting = false
	p.maybeCapReplicaApplies() // the hold ends: a replica applies below the committed frontier
	p.core.metrics.replication.snapshotsInstalled.WithLabelValues(p.home.name).Inc()
	p.core.logger.Info("the replica installed its source's snapshot", "queue", p.home.name, "covers", s.covers,
		"source", s.source)
	return true
}

func (p *partition) retrySnapshotLater(ctx actor.Context) {
	s := p.snapshotState()
	if s.retry {
		return
	}
	s.retry = true
	self, system := ctx.Self(), ctx.ActorSystem()
	time.AfterFunc(snapshotRetryDelay, func() { system.Root.Send(self, snapshotRetry{}) })
}

// snapshotRetried gives up a request still unanswered after
// snapshotAnswerTimeout, or asks again: for the snapshot a queue awaits, or
// through the catch-up's next page, which says whether one is still needed.
func (p *partition) snapshotRetried(ctx actor.Context, msg snapshotRetry) {
	s := p.snapshotState()
	if msg.requestID != 0 {
		if s.requestID == msg.requestID {
			s.requestID = 0
			p.core.logger.Info("a snapshot request went unanswered; the replica asks again", "queue", p.home.name,
				"source", s.source)
			p.retrySnapshotLater(ctx)
		}
		return
	}
	s.retry = false
	if p.q == nil || p.repl.role != roleReplica {
		return
	}
	if s.awaiting {
		if s.pending == nil {
			p.askAwaitedSnapshot(ctx)
		}
		return
	}
	if fetch := p.repl.fetch; fetch != nil && !fetch.recovery && fetch.requestID == 0 && !fetch.appending {
		p.maybeFetch(ctx)
	}
}
