package actors

// A follower link ("queues/<name>/<part>/links/<node>"): the owner's side
// of one follower, for one epoch. It carries out what its replication.Link
// state machine asks: probe the follower when the peer link comes up, push
// what the owner's log has written (read with ScanEncoded, from the tail
// cache or the segment files), at most a window of bytes unacknowledged,
// and report the follower's counted progress to the partition, which
// computes the quorum frontier (partition_quorum.go).
//
// Early replication: a goroutine waits on the log's written-frontier watch
// and wakes the link, so records are pushed as soon as the owner has
// written them, before its own fsync; owner and follower fsyncs overlap.
//
// States: those of replication.Link (unreachable, probing, in sync, catching
// up, latched, stale), plus the lifecycle phases every actor has; Stopping
// ends the watch goroutine and unsubscribes from the peer link.
//
// Takes: peerLinkUp, peerLinkDown, followerProgress, followerRefused (from
// the peer link, routed by partition), linkWoken (its watch goroutine),
// linkRetry (its timer). Sends: peerSubscribe, peerUnsubscribe, peerSend
// (pushes) to the peer link; linkProgress, linkStale to the partition.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/replication"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/wire"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// linkProbeRetry is how long a link waits for an answer to a probe (or
	// after a refusal it waits on) before it probes again.
	linkProbeRetry = 200 * time.Millisecond
	// linkKeepalive is how often an idle, in-sync link pushes a keepalive
	// that moves the follower's committed frontier.
	linkKeepalive = 500 * time.Millisecond
	// linkObserveInterval is how often a counting link looks at its
	// follower's progress (replication.Link.Observe).
	linkObserveInterval = 250 * time.Millisecond
	// linkReportRefresh is how often a link reports at the least, changed
	// or not; linkReportStaleAfter is the age at which the partition takes
	// a report for a link that no longer runs.
	linkReportRefresh    = time.Second
	linkReportStaleAfter = 2 * linkReportRefresh
)

// Messages of a follower link.
type (
	linkWoken struct{}
	linkRetry struct{ generation uint64 }
)

// linkShared is what a partition shares with its follower links: the
// quorum frontier it last computed (written by the partition, read by the
// links for the pushes' committed_next).
type linkShared struct {
	committed atomic.Uint64
	// writtenBoundary says the queue's boundary is written (buffered), for
	// the links' health (replication.Link.Observe).
	writtenBoundary atomic.Bool
}

type followerLink struct {
	entry     *runtime.Entry
	core      *brokerCore
	partition *actor.PID
	shardID   uint64
	node      string
	log       *log.Log
	shared    *linkShared
	link      *replication.Link

	// pushedRecords and pushedBytes count what this link pushed.
	pushedRecords, pushedBytes prometheus.Counter

	stop     chan struct{}
	stopOnce sync.Once
	timer    *time.Timer
	timerGen uint64
	lastPush time.Time
	pushes   uint64
	// refusals counts the follower's refusals; lastRefusal is the newest.
	refusals    uint64
	lastRefusal string
	// reported is the last report sent to the partition (without its
	// time), at reportedAt.
	reported   *linkProgress
	reportedAt time.Time
	// stalled is whether the follower was last logged as stalled
	// (maybeLogStall logs the changes).
	stalled   bool
	queueName string
}

func newFollowerLink(entry *runtime.Entry, core *brokerCore, partition *actor.PID, queueName string, shardID uint64,
	node string, epoch uint64, l *log.Log, shared *linkShared) *followerLink {
	linkMetrics := core.metrics.replication
	limits := replication.DefaultLinkLimits
	limits.RetentionHoldMax = core.config.FollowerRetentionHold
	return &followerLink{entry: entry, core: core, partition: partition, shardID: shardID, node: node, log: l,
		shared: shared, link: replication.NewLink(node, epoch, limits), queueName: queueName,
		pushedRecords: linkMetrics.pushedRecords.WithLabelValues(queueName),
		pushedBytes:   linkMetrics.pushedBytes.WithLabelValues(queueName)}
}

func (f *followerLink) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		f.stop = make(chan struct{})
		f.startWatching(ctx)
		ctx.Send(f.core.peerLinkPID(f.node), peerSubscribe{partition: f.shardID, pid: ctx.Self()})
		f.report(ctx)
	case *actor.Stopping, *actor.Restarting:
		f.stopOnce.Do(func() { close(f.stop) })
		if f.timer != nil {
			f.timer.Stop()
		}
		ctx.Send(f.core.peerLinkPID(f.node), peerUnsubscribe{partition: f.shardID, pid: ctx.Self()})
	case peerLinkUp:
		f.link.LinkUp()
		f.probe(ctx)
		f.report(ctx)
	case peerLinkDown:
		f.link.LinkDown(fmt.Sprintf("peer link down: %v", msg.err))
		f.report(ctx)
	case followerProgress:
		if msg.partition == f.shardID && f.link.OnProgress(msg.epoch, msg.instance, msg.durableNext, msg.writtenNext, f.ownerLog()) {
			f.report(ctx)
		}
		f.maybePush(ctx)
	case followerRefused:
		f.refused(ctx, msg)
	case linkWoken:
		f.maybePush(ctx)
	case linkRetry:
		if msg.generation == f.timerGen {
			f.timer = nil
			f.retry(ctx)
		}
	}
	f.entry.SetSummary(fmt.Sprintf("%s epoch %d: follower written %d durable %d, next %d, %d bytes in flight, %d pushes, %d refused%s%s",
		f.link.State, f.link.Epoch, f.link.Written, f.link.Durable, f.link.Next, f.link.InFlightBytes(), f.pushes,
		f.refusals, reasonSuffix(f.lastRefusal), reasonSuffix(f.link.Reason)))
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

// startWatching wakes the link whenever the owner's written frontier moves.
func (f *followerLink) startWatching(ctx actor.Context) {
	watch := f.log.Watch(log.FrontierWritten)
	self, system, stop := ctx.Self(), ctx.ActorSystem(), f.stop
	routines := &f.core.peerRoutines
	routines.Add(1)
	go func() {
		defer routines.Done()
		defer watch.Close()
		for {
			select {
			case <-watch.C():
				system.Root.Send(self, linkWoken{})
			case <-stop:
				return
			}
		}
	}()
}

// ownerLog is what the link's state machine needs of the owner's log now.
func (f *followerLink) ownerLog() replication.OwnerLog {
	return replication.OwnerLog{FirstOffset: f.log.FirstOffset(), Written: f.log.Frontiers().Written,
		History: historyOf(f.log.EpochHistory())}
}

// report tells the partition how the follower counts now, unless nothing
// it would say changed since the last report less than linkReportRefresh
// ago (the periodic observation calls it four times a second).
func (f *followerLink) report(ctx actor.Context) {
	now := time.Now()
	health := f.link.Observe(f.ownerLog(), now, f.shared.writtenBoundary.Load())
	retention, holds := f.link.RetentionHold(now)
	report := linkProgress{node: f.node, progress: f.link.Progress(), state: health.Text, admits: health.Admits,
		stalled: health.Stalled, lagRecords: health.LagRecords, retention: retention, holdsRetention: holds}
	f.maybeLogStall(health)
	if f.reported != nil && *f.reported == report && now.Sub(f.reportedAt) < linkReportRefresh {
		return
	}
	kept := report
	f.reported, f.reportedAt = &kept, now
	report.at = now
	ctx.Send(f.partition, report)
}

// maybeLogStall logs when the follower becomes stalled and when it moves
// again: both are rare and an operator reading a failover wants them. A
// link that stops counting (probing, a refusal) has not moved again: a
// stall ends only when the follower counts and is not stalled, so a link
// going round between pushing and probing logs its stall once.
func (f *followerLink) maybeLogStall(health replication.LinkHealth) {
	if health.Stalled == f.stalled || (f.stalled && !f.link.Counts()) {
		return
	}
	f.stalled = health.Stalled
	if health.Stalled {
		owner := f.ownerLog()
		f.core.logger.Info("a follower stopped making progress", "queue", f.queueName, "follower", f.node,
			"epoch", f.link.Epoch, "state", health.Text, "in_flight_bytes", f.link.InFlightBytes(), "pushes", f.pushes,
			"refusals", f.refusals, "last_refusal", f.lastRefusal, "owner_first", owner.FirstOffset,
			"owner_written", owner.Written, "owner_history", fmt.Sprint(owner.History))
		return
	}
	f.core.logger.Info("a follower makes progress again", "queue", f.queueName, "follower", f.node,
		"epoch", f.link.Epoch, "state", health.Text)
}

// probe sends a keepalive push at the owner's end: the follower answers
// with progress (it is there) or a refusal saying where it stands.
func (f *followerLink) probe(ctx actor.Context) {
	start, previous := f.link.ProbeAt(f.ownerLog())
	f.send(ctx, &wire.Push{Partition: f.shardID, Epoch: f.link.Epoch, StartOffset: start, PreviousEpoch: previous,
		CommittedNext: f.shared.committed.Load()})
	f.armRetry(ctx, linkProbeRetry)
}

func (f *followerLink) send(ctx actor.Context, push *wire.Push) {
	ctx.Send(f.core.peerLinkPID(f.node), peerSend{frame: push.Encode(nil)})
	f.lastPush = time.Now()
	f.pushes++
}

// maybePush pushes what the window and the owner's log allow.
func (f *followerLink) maybePush(ctx actor.Context) {
	for {
		owner := f.ownerLog()
		from, _, ok := f.link.NextPush(owner)
		if !ok {
			return
		}
		committed := f.shared.committed.Load()
		next, err := f.log.ScanEncoded(from, log.FrontierWritten, f.link.Limits.PushBytes, func(records []byte, first, next uint64) error {
			f.send(ctx, &wire.Push{Partition: f.shardID, Epoch: f.link.Epoch, StartOffset: first,
				PreviousEpoch: owner.PreviousEpoch(first), CommittedNext: committed,
				RecordCount: uint32(next - first), Records: records})
			f.link.Pushed(first, next, len(records))
			f.pushedRecords.Add(float64(next - first))
			f.pushedBytes.Add(float64(len(records)))
			return nil
		})
		switch {
		case errors.Is(err, log.ErrOutOfRange):
			// The owner compacted past the follower's next offset. The link
			// probes again (retry): the follower's refusal leads it to the
			// snapshot, and its acceptance back to pushing. Marked down
			// instead, it waited for a peer link up that never came while
			// the peer link stayed up, and the copy never counted again.
			f.link.LinkUp()
			f.link.Reason = fmt.Sprintf("the follower needs offset %d, below this log's first %d", from, owner.FirstOffset)
			f.report(ctx)
			f.armRetry(ctx, linkProbeRetry)
			return
		case err != nil:
			f.core.logger.Warn("reading records to push failed", "follower", f.node, "from", from, "err", err)
			f.armRetry(ctx, linkProbeRetry)
			return
		case next == from:
			return
		}
	}
}

func (f *followerLink) refused(ctx actor.Context, msg followerRefused) {
	refusal := msg.refusal
	f.refusals++
	f.lastRefusal = fmt.Sprintf("last refusal %d: %s (staged %d durable %d history %v)", refusal.Reason, refusal.Message,
		refusal.StagedNext, refusal.DurableNext, refusal.History)
	history := make([]replication.HistoryEntry, len(refusal.History))
	for i, entry := range refusal.History {
		history[i] = replication.HistoryEntry{Epoch: entry.Epoch, FirstOffset: entry.FirstOffset}
	}
	action := f.link.OnRefused(replication.Refusal{Epoch: refusal.Epoch, Instance: refusal.Instance,
		Reason: replication.RefusalReason(refusal.Reason), StagedNext: refusal.StagedNext, DurableNext: refusal.DurableNext,
		History: history, Message: refusal.Message}, f.ownerLog())
	f.report(ctx)
	switch action {
	case replication.LinkStepDown:
		ctx.Send(f.partition, linkStale{node: f.node, epoch: refusal.Epoch})
	case replication.LinkPush:
		f.pushFrom(ctx)
	case replication.LinkProbeAtEnd:
		f.probe(ctx)
	case replication.LinkWait:
		f.armRetry(ctx, linkProbeRetry)
	}
}

// pushFrom pushes from the agreed point: records, or, when there are none
// yet past it, a keepalive there (which also makes the follower cut a
// divergent suffix).
func (f *followerLink) pushFrom(ctx actor.Context) {
	owner := f.ownerLog()
	if f.link.Next >= owner.Written {
		f.send(ctx, &wire.Push{Partition: f.shardID, Epoch: f.link.Epoch, StartOffset: f.link.Next,
			PreviousEpoch: owner.PreviousEpoch(f.link.Next), CommittedNext: f.shared.committed.Load()})
		return
	}
	f.maybePush(ctx)
}

// retry re-probes a link that waits, sends an idle in-sync follower a
// keepalive, and observes the follower (so a stall shows within a second).
func (f *followerLink) retry(ctx actor.Context) {
	defer f.report(ctx)
	switch f.link.State {
	case replication.LinkProbing, replication.LinkLatched:
		f.link.LinkUp()
		f.probe(ctx)
	case replication.LinkPushing, replication.LinkCatchingUp:
		now := time.Now()
		if health := f.link.Observe(f.ownerLog(), now, f.shared.writtenBoundary.Load()); f.link.ShouldReprobe(health, now) {
			f.core.logger.Warn("a follower link made no progress; probing the follower again", "follower", f.node,
				"stalled", health.StalledFor, "behind_records", health.LagRecords, "in_flight_bytes", f.link.InFlightBytes())
			f.link.LinkUp()
			f.probe(ctx)
			return
		}
		// Only an idle link with nothing unacknowledged: a keepalive past
		// what the follower holds would read as "you are behind".
		if time.Since(f.lastPush) >= linkKeepalive && f.link.InFlightBytes() == 0 && f.link.State == replication.LinkPushing {
			owner := f.ownerLog()
			f.send(ctx, &wire.Push{Partition: f.shardID, Epoch: f.link.Epoch, StartOffset: f.link.Next,
				PreviousEpoch: owner.PreviousEpoch(f.link.Next), CommittedNext: f.shared.committed.Load()})
		}
		f.maybePush(ctx)
		f.armRetry(ctx, linkObserveInterval)
	case replication.LinkUnreachable:
		f.armRetry(ctx, linkProbeRetry)
	}
}

func (f *followerLink) armRetry(ctx actor.Context, after time.Duration) {
	if f.timer != nil {
		return
	}
	f.timerGen++
	generation, self, system := f.timerGen, ctx.Self(), ctx.ActorSystem()
	f.timer = time.AfterFunc(after, func() { system.Root.Send(self, linkRetry{generation: generation}) })
}
