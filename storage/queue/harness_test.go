package queue

// The randomized model-based harness. It drives a Queue through random
// publishes, leases, settles, lease expiries (fake clock), TTL discards,
// dead-letter confirmations, checkpoints, compactions, purges, restarts and
// power losses, and after every step compares the queue with the reference
// model in model_test.go and checks the invariants:
//   - no confirmed message of a durable queue is ever lost (nor a buffered
//     one, short of a power loss taking records past the durable frontier);
//   - every message is ready, delayed, leased, dead-lettering or settled,
//     never two at once (checkInvariants plus the model comparison);
//   - attempts never go down (across power losses only for durable queues);
//   - dead-lettering happens exactly when attempts reach MaxDeliveries or
//     a consumer rejects a message;
//   - a message delivered before comes back marked redelivered;
//   - (epoch, offset) never names two different messages;
//   - a delivery is never released before its message's confirm, and
//     nothing applies above the apply frontier (boundary and apply limit);
//   - after any restart, power loss or storage failure, every message whose
//     delivery was released comes back marked redelivered with that
//     delivery's attempt counted, unless a settle of it survived: its lease
//     record is always in the surviving log (a buffered queue's power loss
//     excepted, as documented). On a replicated queue the harness marks
//     most deliveries as sent, as the owner does when it hands them out,
//     and leaves a few unmarked (a holder that is gone); with
//     MaxDeliveries, a failover counts the attempt exactly when the
//     delivery's mark is in the new owner's log, and never otherwise;
//   - each append asks the log for the level its kind needs: a durable
//     queue's publishes and leases wait for fsync, its acks only for write.
// Publishes sometimes carry offers, so leases pipeline with them in one
// append, and leases claim pending publishes too. The same harness runs
// over the fake log (every step deterministic) and over the real log on
// vfs.Mem.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
)

// environment runs a Queue over a log and filesystem and simulates crashes.
type environment interface {
	open(opts Options, clock Clock) (*Queue, error)
	flush(q *Queue)
	sync(q *Queue)
	// restart closes q as a crash would leave it and reopens; powerLoss
	// also drops what no completed sync covered.
	restart(q *Queue, opts Options, clock Clock, powerLoss bool, rng *rand.Rand) (*Queue, error)
}

type modelOp struct {
	rec    Record
	id     string
	ticket Ticket
}

type confirmation struct {
	offset   uint64
	boundary Boundary
}

// releasedAt is a delivery the queue released: the attempt it carried,
// the offset of its lease record and, when marked, of its sent mark.
type releasedAt struct {
	id      string
	attempt uint32
	lease   uint64
	marked  bool
	mark    uint64
}

type harness struct {
	t       testing.TB
	rng     *rand.Rand
	opts    Options
	env     environment
	q       *Queue
	nowMs   int64
	model   *model
	ops     map[uint64]*modelOp
	applied uint64
	claimed map[uint64]bool

	pendingPublishes      uint64
	pendingPublishBytes   uint64
	confirmed             map[string]confirmation
	issued                map[uint64]bool
	delivered             map[string]bool
	identity              map[[2]uint64]string
	attempts              map[string]uint32
	grants                map[Ticket][]modelGrant
	leaseAt               map[Ticket]uint64     // lease ticket → its record's offset
	released              map[uint64]releasedAt // message offset → its last released delivery
	unsent                map[uint64]bool       // lapsed, never delivered: the next delivery is not marked
	recovered             map[string]bool       // publishes found in the log at a reopen, never confirmed
	limit                 uint64                // the apply limit set on the queue
	tasks                 []*CheckpointTask
	nextID                int
	trace                 []string
	stepCount             int
	restarts, powerLosses int
	lapses                int // leases that lapsed at their apply
}

func newHarness(t testing.TB, rng *rand.Rand, opts Options, env environment) *harness {
	h := &harness{
		t: t, rng: rng, opts: opts.WithDefaults(), env: env, nowMs: 1_700_000_000_000,
		model: newModel(opts), ops: map[uint64]*modelOp{}, claimed: map[uint64]bool{},
		confirmed: map[string]confirmation{}, issued: map[uint64]bool{}, delivered: map[string]bool{},
		identity: map[[2]uint64]string{}, attempts: map[string]uint32{}, grants: map[Ticket][]modelGrant{},
		leaseAt: map[Ticket]uint64{}, released: map[uint64]releasedAt{}, recovered: map[string]bool{},
		unsent: map[uint64]bool{},
		limit:  noLimit,
	}
	q, err := env.open(h.opts, h.clock)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	h.q = q
	return h
}

func (h *harness) clock() time.Time { return time.UnixMilli(h.nowMs) }

func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	tail := h.trace
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	h.t.Fatalf("step %d: %s\nlast steps:\n  %s", h.stepCount, fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func (h *harness) note(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf("%d: ", h.stepCount)+fmt.Sprintf(format, args...))
}

// randomOptions picks a queue declaration for a run.
func randomOptions(rng *rand.Rand) Options {
	o := Options{Mode: Durable, LeaseTimeout: time.Duration(100+rng.IntN(900)) * time.Millisecond}
	if rng.IntN(2) == 0 {
		o.Mode = Buffered
	}
	if rng.IntN(2) == 0 {
		o.MaxDeliveries = uint32(1 + rng.IntN(4))
		if rng.IntN(2) == 0 {
			o.DeadLetterQueue = "dead"
		}
	}
	if rng.IntN(3) == 0 {
		o.MessageTTL = time.Duration(200+rng.IntN(2000)) * time.Millisecond
	}
	if rng.IntN(3) == 0 {
		o.MaxLength = uint64(3 + rng.IntN(20))
	}
	if rng.IntN(4) == 0 {
		o.MaxBytes = uint64(50 + rng.IntN(400))
	}
	if rng.IntN(2) == 0 {
		o.Overflow = DropOldest
	}
	if rng.IntN(2) == 0 {
		o.RedeliveryDelay = time.Duration(1+rng.IntN(300)) * time.Millisecond
	}
	if rng.IntN(3) == 0 {
		// The harness's ids never repeat, so nothing is refused, but every
		// publish enters the table: copies, restarts and failovers must
		// rebuild the same one (the replica checks compare snapshots).
		o.DedupWindow = time.Duration(100+rng.IntN(2000)) * time.Millisecond
		o.DedupMaxEntries = uint32(1 + rng.IntN(64))
	}
	return o
}

// seedFromEnv returns the seed from the named variable, or a fresh one.
func seedFromEnv(t testing.TB, name string) uint64 {
	if s := os.Getenv(name); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return seed
	}
	return rand.Uint64()
}

func payloadFor(id string, size int) []byte {
	out := make([]byte, size)
	for i := range out {
		out[i] = id[i%len(id)]
	}
	return out
}

// step runs one random operation and checks the queue against the model.
func (h *harness) step() {
	h.stepCount++
	pair, _ := h.env.(*pairEnv)
	if pair != nil {
		pair.beforeStep(h)
	}
	switch roll := h.rng.IntN(100); {
	case roll < 18:
		h.publish()
	case roll < 30:
		h.lease()
	case roll < 46:
		h.settle()
	case roll < 49:
		h.nowMs += int64(h.rng.IntN(int(durationMs(h.opts.LeaseTimeout)) * 3 / 2))
		h.note("clock +, now %d", h.nowMs)
	case roll < 51:
		h.tickToDeadline()
	case roll < 54:
		h.expireLeases()
	case roll < 56:
		h.expireMessages()
	case roll < 59:
		h.deadLettered()
	case roll < 62:
		h.checkpoint()
	case roll < 65:
		h.runTask()
	case roll < 69:
		h.compact()
	case roll < 70:
		if h.rng.IntN(2) == 0 {
			h.purge()
		} else {
			h.setApplyLimit()
		}
	case roll < 79:
		h.note("flush")
		h.env.flush(h.q)
	case roll < 82:
		h.note("sync")
		h.env.sync(h.q)
	case roll < 96:
		h.advance()
	case roll < 98:
		h.restart(false)
	case roll < 99 || h.rng.IntN(2) == 0:
		h.restart(true)
	default:
		h.storageFault()
	}
	h.check()
	if pair != nil {
		pair.afterStep(h)
	}
}

// newAppends returns the pending appends made since before.
func (h *harness) newAppends(before Ticket) []*pendingAppend {
	var out []*pendingAppend
	m := h.q.machine
	for _, p := range m.pending[m.pendHead:] {
		if p.ticket >= before {
			out = append(out, p)
		}
	}
	return out
}

// record stores the model op for a single-record append and checks that
// the queue built what the model expected.
func (h *harness) record(p *pendingAppend, want Record) {
	if len(p.records) != 1 {
		h.fail("append %d has %d records, want 1", p.ticket, len(p.records))
	}
	got := p.records[0]
	got.Target, want.Target = nil, nil
	if !slices.Equal(got.Offsets, want.Offsets) || got.Kind != want.Kind || got.Holder != want.Holder ||
		got.DeadlineMs != want.DeadlineMs || got.DueMs != want.DueMs || got.Reason != want.Reason || got.UpTo != want.UpTo {
		h.fail("%v record\n got %+v\nwant %+v", want.Kind, got, want)
	}
	if want.Kind == KindCheckpoint {
		want.CheckpointID = got.CheckpointID
	}
	h.ops[p.first] = &modelOp{rec: want, ticket: p.ticket}
	for _, o := range want.Offsets {
		if want.Kind != KindSent { // a mark claims nothing
			h.claimed[o] = true
		}
	}
	if want.Kind == KindLease {
		h.leaseAt[p.ticket] = p.first
	}
	h.checkLevel(p.first, want)
}

// checkLevel checks the level of the log append that starts at first (the
// fake log records it): a buffered queue waits for write; a durable one for
// fsync unless the record only ends messages (ack, discard, reject without a
// dead-letter queue).
func (h *harness) checkLevel(first uint64, rec Record) {
	fe, ok := h.env.(*fakeEnv)
	if !ok {
		return
	}
	got, ok := fe.log.levelAt(first)
	if !ok {
		return // part of a group that starts earlier
	}
	want := log.AfterFsync
	switch {
	case h.opts.Mode == Buffered:
		want = log.AfterFlush
	case rec.Kind == KindSent && len(rec.Offsets) == 0:
		return // it rides in the append of the lease that follows it
	case rec.Kind == KindAck || rec.Kind == KindDiscard || (rec.Kind == KindReject && h.opts.DeadLetterQueue == "") ||
		rec.Kind == KindSent:
		want = log.AfterFlush
	}
	if got != want {
		h.fail("%v append at %d asked for %v, want %v", rec.Kind, first, got, want)
	}
}

func (h *harness) expectError(what string, got, want error) {
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		h.fail("%s: error %v, want %v", what, got, want)
	}
}

func (h *harness) publish() {
	n := 1 + h.rng.IntN(4)
	batch := make([]Message, n)
	var bytes uint64
	for i := range batch {
		h.nextID++
		id := fmt.Sprintf("m%d", h.nextID)
		batch[i] = Message{ID: id, Payload: payloadFor(id, h.rng.IntN(48))}
		if h.rng.IntN(4) == 0 {
			batch[i].Headers = []Header{{Key: "k", Value: id}}
		}
		bytes += uint64(len(batch[i].Payload))
	}
	var offers []Offer
	for range h.rng.IntN(3) {
		offers = append(offers, Offer{Holder: uint64(1 + h.rng.IntN(3)), Max: h.rng.IntN(4)})
	}
	var want error
	if h.opts.Overflow == RejectPublish {
		count, queuedBytes := h.model.queuedTotals()
		if h.opts.MaxLength > 0 && count+h.pendingPublishes+uint64(n) > h.opts.MaxLength ||
			h.opts.MaxBytes > 0 && queuedBytes+h.pendingPublishBytes+bytes > h.opts.MaxBytes {
			want = ErrQueueFull
		}
	}
	before := h.q.machine.nextTicket
	ticket, claims, err := h.q.PublishLeasing(batch, offers)
	h.note("publish %d offers %v -> ticket %d claims %v %v", n, offers, ticket, claims, err)
	h.expectError("publish", err, want)
	if err != nil {
		if len(h.newAppends(before)) != 0 {
			h.fail("a refused publish appended")
		}
		return
	}
	appends := h.newAppends(before)
	p := appends[0]
	for i, msg := range batch {
		rec := Record{Kind: KindPublish, PublishMs: h.nowMs, PayloadBytes: uint32(len(msg.Payload))}
		h.ops[p.first+uint64(i)] = &modelOp{rec: rec, id: msg.ID, ticket: ticket}
	}
	h.checkLevel(p.first, Record{Kind: KindPublish})
	h.pendingPublishes += uint64(n)
	h.pendingPublishBytes += bytes
	appends = appends[1:]
	for _, offer := range offers {
		offsets := h.expectLease(offer.Max)
		if len(offsets) == 0 {
			continue
		}
		appends = h.expectDeclaration(appends)
		if len(appends) == 0 || len(claims) == 0 || claims[0].Holder != offer.Holder || claims[0].Count != len(offsets) ||
			claims[0].Ticket != appends[0].ticket {
			h.fail("offer %+v: claims %v, %d appends left, model leases %v", offer, claims, len(appends), offsets)
		}
		deadline := h.nowMs + durationMs(h.opts.LeaseTimeout)
		h.record(appends[0], Record{Kind: KindLease, Holder: offer.Holder, DeadlineMs: deadline, Offsets: offsets})
		appends, claims = appends[1:], claims[1:]
	}
	if len(appends) != 0 || len(claims) != 0 {
		h.fail("publish made %d leases the model did not expect (claims %v)", len(appends), claims)
	}
}

// expectLease returns the offsets a lease of max must claim: ready applied
// messages (the model's), then pending publishes in offset order, skipping
// claimed ones and those past their TTL.
func (h *harness) expectLease(max int) []uint64 {
	out := h.model.expectLease(max, h.nowMs, h.claimed)
	ttl := durationMs(h.opts.MessageTTL)
	for o := h.applied; len(out) < max; o++ {
		op := h.ops[o]
		if op == nil {
			break
		}
		if op.rec.Kind != KindPublish || h.claimed[o] || (ttl > 0 && op.rec.PublishMs+ttl <= h.nowMs) {
			continue
		}
		out = append(out, o)
	}
	return out
}

func (h *harness) lease() {
	holder := uint64(1 + h.rng.IntN(3))
	max := 1 + h.rng.IntN(4)
	expiredTTL := h.model.expectExpiredMessages(h.nowMs, h.claimed)
	before := h.q.machine.nextTicket
	ticket, n, err := h.q.Lease(max, holder)
	h.note("lease holder %d max %d -> ticket %d, %d, %v", holder, max, ticket, n, err)
	h.expectError("lease", err, nil)
	appends := h.newAppends(before)
	if len(expiredTTL) > 0 {
		h.record(appends[0], Record{Kind: KindDiscard, Reason: ReasonTTL, Offsets: expiredTTL})
		appends = appends[1:]
	}
	want := h.expectLease(max)
	if len(want) == 0 {
		if len(appends) != 0 || ticket != 0 {
			h.fail("lease appended %d, nothing was claimable", len(appends))
		}
		return
	}
	appends = h.expectDeclaration(appends)
	if len(appends) != 1 || appends[0].ticket != ticket || n != len(want) {
		h.fail("lease made %d appends, count %d, want %v", len(appends), n, want)
	}
	deadline := h.nowMs + durationMs(h.opts.LeaseTimeout)
	h.record(appends[0], Record{Kind: KindLease, Holder: holder, DeadlineMs: deadline, Offsets: want})
}

// expectDeclaration: on a queue that writes marks, a lease while marks are
// not in force and no mark that puts them in force is pending comes after
// one; it records that mark and returns the appends after it.
func (h *harness) expectDeclaration(appends []*pendingAppend) []*pendingAppend {
	if !h.marks() || h.model.marking {
		return appends
	}
	for o := h.applied; o < h.q.machine.nextOffset; o++ {
		if op := h.ops[o]; op != nil && op.rec.Kind == KindSent && len(op.rec.Offsets) == 0 {
			return appends // one is pending
		}
	}
	if len(appends) == 0 || appends[0].op != opSent || len(appends[0].records[0].Offsets) != 0 {
		h.fail("a lease in a log without marks does not follow the mark that puts them in force")
	}
	h.record(appends[0], Record{Kind: KindSent})
	return appends[1:]
}

// setApplyLimit caps the apply frontier as a replicated owner's caller
// does, or lifts the cap.
func (h *harness) setApplyLimit() {
	if _, ok := h.env.(*pairEnv); ok {
		return // the quorum frontier is the limit
	}
	h.limit = noLimit
	if h.rng.IntN(3) != 0 {
		staged := h.q.log.Frontiers().Staged
		h.limit = h.applied + h.rng.Uint64N(staged-h.applied+2)
	}
	h.q.SetApplyLimit(h.limit)
	h.note("apply limit %d", h.limit)
}

// settleError is the error the model expects for a settle of offsets.
func (h *harness) settleError(holder uint64, offsets []uint64) error {
	if len(offsets) == 0 {
		return ErrNotLeased
	}
	for _, o := range offsets {
		msg := h.model.messages[o]
		switch {
		case msg == nil || msg.status != mLeased:
			return ErrNotLeased
		case msg.holder != holder:
			return ErrWrongHolder
		case h.claimed[o]:
			return ErrSettlePending
		}
	}
	return nil
}

func (h *harness) pickOffsets(candidates []uint64) []uint64 {
	var out []uint64
	for _, o := range candidates {
		if h.rng.IntN(2) == 0 {
			out = append(out, o)
		}
	}
	if h.rng.IntN(8) == 0 && len(h.model.offsets) > 0 {
		out = append(out, h.model.offsets[h.rng.IntN(len(h.model.offsets))])
	}
	return sortedUnique(out)
}

func (h *harness) settle() {
	holder := uint64(1 + h.rng.IntN(3))
	offsets := h.pickOffsets(h.model.leasedBy(holder))
	if h.rng.IntN(10) == 0 {
		holder = uint64(1 + h.rng.IntN(3))
	}
	want := h.settleError(holder, offsets)
	before := h.q.machine.nextTicket
	var rec Record
	var err error
	switch h.rng.IntN(5) {
	case 0:
		rec = Record{Kind: KindAck}
		_, err = h.q.Ack(holder, offsets)
	case 1:
		delay := []time.Duration{-1, 0, time.Duration(1+h.rng.IntN(200)) * time.Millisecond}[h.rng.IntN(3)]
		rec = Record{Kind: KindNack}
		if delayMs := durationMs(delay); delay < 0 && h.opts.RedeliveryDelay > 0 {
			rec.DueMs = h.nowMs + durationMs(h.opts.RedeliveryDelay)
		} else if delayMs > 0 {
			rec.DueMs = h.nowMs + delayMs
		}
		_, err = h.q.Nack(holder, offsets, delay)
	case 2:
		rec = Record{Kind: KindRelease}
		_, err = h.q.Release(holder, offsets)
	case 3:
		rec = Record{Kind: KindReject}
		_, err = h.q.Reject(holder, offsets)
	default:
		rec = Record{Kind: KindDiscard, Reason: ReasonConsumer}
		_, err = h.q.Discard(holder, offsets)
	}
	h.note("%v holder %d %v -> %v", rec.Kind, holder, offsets, err)
	h.expectError(rec.Kind.String(), err, want)
	if err == nil {
		rec.Offsets = offsets
		h.record(h.newAppends(before)[0], rec)
	}
}

func (h *harness) expireLeases() {
	want := h.model.expectExpiredLeases(h.nowMs, h.claimed)
	before := h.q.machine.nextTicket
	_, n, err := h.q.ExpireLeases(h.clock())
	h.note("expire leases -> %d %v", n, err)
	h.expectError("expire leases", err, nil)
	if len(want) == 0 {
		if n != 0 {
			h.fail("expired %d leases, model none", n)
		}
		return
	}
	h.record(h.newAppends(before)[0], Record{Kind: KindExpire, Reason: ReasonDeadline, Offsets: want})
}

func (h *harness) expireMessages() {
	want := h.model.expectExpiredMessages(h.nowMs, h.claimed)
	before := h.q.machine.nextTicket
	_, n, err := h.q.ExpireMessages(h.clock())
	h.note("expire messages -> %d %v", n, err)
	h.expectError("expire messages", err, nil)
	if len(want) == 0 {
		if n != 0 {
			h.fail("expired %d messages, model none", n)
		}
		return
	}
	h.record(h.newAppends(before)[0], Record{Kind: KindDiscard, Reason: ReasonTTL, Offsets: want})
}

func (h *harness) deadLettered() {
	offsets := h.pickOffsets(sortedKeys(h.issued))
	var want error
	for _, o := range offsets {
		msg := h.model.messages[o]
		if msg == nil || msg.status != mDeadLettering {
			want = ErrNotDeadLettering
			break
		}
		if h.claimed[o] {
			want = ErrSettlePending
			break
		}
	}
	if len(offsets) == 0 {
		want = ErrNotDeadLettering
	}
	before := h.q.machine.nextTicket
	_, err := h.q.DeadLettered(offsets)
	h.note("dead-lettered %v -> %v", offsets, err)
	h.expectError("dead-lettered", err, want)
	if err == nil {
		h.record(h.newAppends(before)[0], Record{Kind: KindDeadLetter, Offsets: offsets})
	}
}

func (h *harness) checkpoint() {
	var want error
	if h.q.machine.checkpointID != 0 {
		want = ErrCheckpointInProgress
	}
	before := h.q.machine.nextTicket
	_, err := h.q.Checkpoint()
	h.note("checkpoint -> %v", err)
	h.expectError("checkpoint", err, want)
	if err == nil {
		h.record(h.newAppends(before)[0], Record{Kind: KindCheckpoint})
	}
}

func (h *harness) runTask() {
	if len(h.tasks) == 0 {
		return
	}
	task := h.tasks[0]
	h.tasks = h.tasks[1:]
	err := task.Run(context.Background())
	h.note("run checkpoint task next %d -> %v", task.Next, err)
	if err != nil {
		h.fail("checkpoint task: %v", err)
	}
	if err := h.q.CheckpointDone(task, nil); err != nil {
		h.fail("checkpoint done: %v", err)
	}
}

func (h *harness) compact() {
	first, err := h.q.Compact()
	h.note("compact -> first %d %v", first, err)
	if err != nil {
		h.fail("compact: %v", err)
	}
	if first > h.q.machine.state.FirstLive() {
		h.fail("compacted to %d above the first live message %d", first, h.q.machine.state.FirstLive())
	}
	if pair, ok := h.env.(*pairEnv); ok && first > pair.follower.frontiers().Durable {
		h.fail("compacted to %d above the replica's durable progress %d", first, pair.follower.frontiers().Durable)
	}
}

// tickToDeadline moves the clock to NextDeadline after checking it against
// the model: the earliest unclaimed lease deadline, due time of a delayed
// message, or TTL of the oldest unclaimed queued message.
func (h *harness) tickToDeadline() {
	got, ok := h.q.NextDeadline()
	want, wantOK := h.model.nextDeadline(h.nowMs, h.claimed)
	h.note("next deadline %v %v, model %d %v", got.UnixMilli(), ok, want, wantOK)
	if ok != wantOK || (ok && got.UnixMilli() != want) {
		h.fail("next deadline %d %v, model %d %v", got.UnixMilli(), ok, want, wantOK)
	}
	if ok && want > h.nowMs {
		h.nowMs = want
	}
}

func (h *harness) purge() {
	before := h.q.machine.nextTicket
	_, err := h.q.Purge()
	h.note("purge -> %v", err)
	h.expectError("purge", err, nil)
	p := h.newAppends(before)[0]
	h.record(p, Record{Kind: KindPurge, UpTo: p.first})
}
