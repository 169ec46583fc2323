package actors

// The catalog follows a queue's applied mode (issue: the revision lives in
// the catalog as well as in every replica's log). Once the owner's queue
// applied a mode revision, the owner records it in the catalog
// (cluster.Node.RecordAppliedMode), so declares are checked against the
// mode in force and listings name it. The log stays the authority: a new
// owner that applied a revision the catalog lacks records it too, and a
// catalog revision never goes back.
//
// Messages: modeRecorded (the proposal's outcome, sent by the goroutine
// that made it) and modeRecordRetry (a timer after a failure).

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/queue"
)

// modeRecordRetryDelay is the pause before a failed record is tried again.
const modeRecordRetryDelay = time.Second

type (
	modeRecorded struct {
		revision uint64
		err      error
	}
	modeRecordRetry struct{}
)

// maybeRecordMode proposes the applied revision (info, the queue's mode
// as modeAdvanced read it) to the catalog when this partition owns the
// queue, applied a revision newer than the one recorded, and no proposal
// runs. It runs on every apply: everything before the proposal is a few
// comparisons.
func (p *partition) maybeRecordMode(ctx actor.Context, info queue.ModeInfo) {
	r := p.repl
	if r == nil || r.role != roleOwner || p.modes.recordingRevision != 0 ||
		info.Revision == 0 || info.Revision <= p.modes.recordedRevision {
		return
	}
	node, name, revision := p.home.replication.node, p.home.name, info.Revision
	mode := cluster.ModeDurable
	if info.Applied == queue.Buffered {
		mode = cluster.ModeBuffered
	}
	p.modes.recordingRevision = revision
	self, system := ctx.Self(), ctx.ActorSystem()
	go func() {
		recordCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := node.RecordAppliedMode(recordCtx, name, mode, revision)
		system.Root.Send(self, modeRecorded{revision: revision, err: err})
	}()
}

func (p *partition) modeRecorded(ctx actor.Context, msg modeRecorded) {
	p.modes.recordingRevision = 0
	if msg.err != nil {
		p.core.logger.Warn("could not record the applied mode in the catalog; retrying", "queue", p.home.name,
			"revision", msg.revision, "err", msg.err)
		self, system := ctx.Self(), ctx.ActorSystem()
		time.AfterFunc(modeRecordRetryDelay, func() { system.Root.Send(self, modeRecordRetry{}) })
		return
	}
	p.modes.recordedRevision = max(p.modes.recordedRevision, msg.revision)
	p.maybeRecordModeNow(ctx)
}

// maybeRecordModeNow is maybeRecordMode with the queue's mode read here
// (after a proposal's answer or its retry timer).
func (p *partition) maybeRecordModeNow(ctx actor.Context) {
	if p.q != nil {
		p.maybeRecordMode(ctx, p.q.Mode())
	}
}
