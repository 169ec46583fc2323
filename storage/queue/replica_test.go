package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"testing"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// encodedLog gives *log.Log the replica's seam until the log appends
// encoded records itself: it decodes the tests' encoding and appends the
// entries with their epochs, checking the offsets the log assigns. next is
// the end of what it appended (the log publishes its staged frontier only
// with each write, so it cannot be read back at once).
type encodedLog struct {
	*log.Log
	mu   sync.Mutex
	next uint64
}

func newEncodedLog(l *log.Log) *encodedLog { return &encodedLog{Log: l, next: l.Frontiers().Staged} }

func (l *encodedLog) expectedEnd() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

func (l *encodedLog) AppendEncodedAsync(encoded []byte, first uint64, level log.Durability, done func(log.Result)) error {
	records, err := decodeForTest(encoded)
	if err != nil {
		return err
	}
	lastEpoch := uint64(0)
	if history := l.EpochHistory(); len(history) > 0 {
		lastEpoch = history[len(history)-1].Epoch
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := checkEncoded(first, l.next, lastEpoch, records); err != nil {
		return err
	}
	entries := make([]log.Entry, len(records))
	for i, r := range records {
		entries[i] = log.Entry{Epoch: r.Epoch, Type: r.Type, Body: r.Body}
	}
	err = l.AppendAsync(entries, level, func(result log.Result) {
		if result.Err == nil && result.First != first {
			result.Err = fmt.Errorf("assigned %d, encoded at %d", result.First, first)
		}
		done(result)
	})
	if err == nil {
		l.next += uint64(len(records))
	}
	return err
}

// Rebase is the log's own (the storage/log work's); this adapter of the
// log without it refuses.
func (*encodedLog) Rebase(uint64, []log.EpochStart) error {
	return errors.New("the log in this build cannot rebase")
}

func (l *encodedLog) TruncateAfter(offset uint64) error {
	err := l.Log.TruncateAfter(offset)
	l.mu.Lock()
	l.next = l.Frontiers().Staged
	l.mu.Unlock()
	return err
}

// realCopy is one copy of a queue over the real log on a vfs.Mem.
type realCopy struct {
	t      *testing.T
	fs     *vfs.Mem
	mq     *memQueue // the owner's helpers; its q is the copy's queue
	notify chan struct{}
}

func (c *realCopy) logOptions() log.Options {
	return log.Options{FS: c.fs, SegmentBytes: 4096, ExternalTicks: true, Logger: quietLogger, ValidType: validRecordType}
}

func (c *realCopy) openLog() *log.Log {
	c.t.Helper()
	if err := prepareDirectory(c.fs, "/q", Options{Mode: Durable}); err != nil {
		c.t.Fatal(err)
	}
	l, err := log.Open(path.Join("/q", logDirName), c.logOptions())
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

func (c *realCopy) openReplica() *Queue {
	c.t.Helper()
	q, err := openWithLog("/q", Options{Mode: Durable}.WithDefaults(), c.fs, newEncodedLog(c.openLog()), nil, quietLogger,
		defaultMaxInflight, startMode{role: roleReplica})
	if err != nil {
		c.t.Fatal(err)
	}
	q.SetNotify(func() {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	})
	return q
}

// shipAll sends every written record of from's log that to lacks, and
// waits until to's copy is durable.
func shipAll(t *testing.T, from *Queue, to *Queue) {
	t.Helper()
	source := from.Log()
	start, end := to.log.Frontiers().Staged, source.Frontiers().Written
	var records []log.Record
	for next := start; next < end; {
		n, err := source.ScanWritten(next, 1<<20, func(r log.Record) error {
			if r.Offset < end {
				r.Body = slices.Clone(r.Body)
				records = append(records, r)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		next = n
	}
	if len(records) > 0 {
		if err := to.AppendReplicated(start, encodeForTest(records[:end-start]), log.AfterFsync, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := to.log.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func sameState(t *testing.T, what string, a, b *Queue, nowMs int64) {
	t.Helper()
	sa, sb := a.machine.state, b.machine.state
	sa.promoteDue(nowMs)
	sb.promoteDue(nowMs)
	if sa.Next() != sb.Next() || string(sa.EncodeSnapshot()) != string(sb.EncodeSnapshot()) {
		t.Fatalf("%s: states differ: next %d vs %d, counts %+v vs %+v", what, sa.Next(), sb.Next(), sa.Counts(), sb.Counts())
	}
}

// TestReplicaOverRealLog: a replica on the real log follows a durable
// owner, survives a power loss of its own, and is promoted: the leases the
// old owner's holders held come back redelivered with their attempt
// counted, under the same identity, and the new owner's appends carry the
// new epoch.
func TestReplicaOverRealLog(t *testing.T) {
	owner := openMemQueue(t, vfs.NewMem(), "/q", Options{Mode: Durable})
	follower := &realCopy{t: t, fs: vfs.NewMem(), notify: make(chan struct{}, 1)}
	replica := follower.openReplica()

	for i := range 6 {
		owner.publish(Message{ID: fmt.Sprintf("m%d", i), Payload: []byte(fmt.Sprintf("payload %d", i))})
	}
	first := owner.lease(1, 4).Deliveries
	owner.must(owner.q.Ack(1, offsetsOf(first[:2]))) // applied once a sync covers it
	shipAll(t, owner.q, replica)
	if _, err := replica.Advance(); err != nil {
		t.Fatal(err)
	}
	sameState(t, "after shipping", owner.q, replica, owner.nowMs)

	// The replica loses power; its durable copy is intact.
	_ = replica.Close()
	follower.fs = follower.fs.CrashClone(vfs.CrashOptions{})
	replica = follower.openReplica()
	if r := replica.Recovery(); r.ExpiredLeases != 0 || r.LogEnd != owner.q.log.Frontiers().Durable {
		t.Fatalf("replica recovery %+v", r)
	}
	sameState(t, "after the replica's power loss", owner.q, replica, owner.nowMs)
	if _, err := replica.Publish([]Message{{Payload: []byte("x")}}); !errors.Is(err, ErrReplica) {
		t.Fatalf("publish on a replica: %v", err)
	}

	// The owner goes; the replica takes over under epoch 7.
	oldEpoch := owner.q.Epoch()
	_ = owner.q.Close()
	if _, err := replica.Promote(oldEpoch); !errors.Is(err, ErrEpochStale) {
		t.Fatalf("promotion under the old owner's epoch: %v", err)
	}
	promotion, err := replica.Promote(oldEpoch + 5)
	if err != nil {
		t.Fatal(err)
	}
	if promotion.VoidedLeases != 2 || promotion.LogEnd != replica.machine.state.Next() {
		t.Fatalf("promotion %+v", promotion)
	}
	m := &memQueue{t: t, fs: follower.fs, dir: "/q", opts: Options{Mode: Durable}, q: replica, notify: follower.notify, nowMs: owner.nowMs}
	if p := m.await(0); len(p.Deliveries) != 0 {
		t.Fatalf("released before the apply limit: %+v", p)
	}
	replica.SetApplyLimit(noLimit) // alone now: the quorum is the new owner itself
	m.await(promotion.Ticket)
	again := m.lease(3, 10).Deliveries
	if len(again) != 4 {
		t.Fatalf("after the takeover %d deliveries, want 4", len(again))
	}
	byID := map[string]Delivery{}
	for _, d := range first {
		byID[d.MessageID] = d
	}
	for _, d := range again {
		before, leased := byID[d.MessageID]
		switch {
		case leased && (!d.Redelivered || d.Attempt != 2):
			t.Fatalf("voided lease of %s came back redelivered %v attempt %d", d.MessageID, d.Redelivered, d.Attempt)
		case leased && (d.Incarnation != before.Incarnation || d.Offset != before.Offset):
			t.Fatalf("identity of %s changed across the takeover: (%d,%d) then (%d,%d)",
				d.MessageID, before.Incarnation, before.Offset, d.Incarnation, d.Offset)
		case d.Incarnation != oldEpoch:
			t.Fatalf("%s has epoch %d, published under %d", d.MessageID, d.Incarnation, oldEpoch)
		}
	}
	m.publish(Message{ID: "new", Payload: []byte("after the takeover")})
	if d := m.lease(3, 1).Deliveries; len(d) != 1 || d[0].Incarnation != oldEpoch+5 {
		t.Fatalf("a publish of the new owner delivered as %+v", d)
	}
	_ = replica.Close()
}

// TestReplicaTruncateAfterRebuilds: a replica that applied records past
// the point where its log diverges from the new owner's cuts them and
// rebuilds its state, dropping snapshots that covered the cut records.
func TestReplicaTruncateAfterRebuilds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	owner, follower := newFakeEnv(rng), newFakeEnv(rng)
	opts := Options{Mode: Buffered}.WithDefaults()
	f := &fixture{t: t, env: owner, opts: opts, nowMs: 1_700_000_000_000}
	q, err := owner.open(opts, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.q = q
	if err := prepareDirectory(follower.fs, testDir, opts); err != nil {
		t.Fatal(err)
	}
	replica, err := openWithLog(testDir, opts, follower.fs, follower.log, f.clock, quietLogger, defaultMaxInflight, startMode{role: roleReplica})
	if err != nil {
		t.Fatal(err)
	}
	ship := func() {
		from, to := follower.log.end(), owner.log.Frontiers().Written
		if err := replica.AppendReplicated(from, encodeForTest(owner.log.recordsBetween(from, to)), log.AfterFlush, nil); err != nil {
			t.Fatal(err)
		}
		follower.log.flush()
		if p, err := replica.Advance(); err != nil {
			t.Fatal(err)
		} else if p.Checkpoint != nil {
			if err := replica.CheckpointDone(p.Checkpoint, p.Checkpoint.Run(context.Background())); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.publish("a", "b", "c")
	ship()
	cut := replica.machine.state.Next()
	f.lease(1, 2)
	f.must(f.q.Checkpoint())
	f.publish("d")
	ship()
	if names := snapshotFiles(t, follower.fs); len(names) != 1 {
		t.Fatalf("replica snapshots %v", names)
	}
	if c := replica.Info().Counts; c.Leased != 2 || c.Ready != 2 {
		t.Fatalf("replica before the cut %+v", c)
	}
	if err := replica.TruncateAfter(cut); err != nil {
		t.Fatal(err)
	}
	if c := replica.Info().Counts; replica.machine.state.Next() != cut || c.Ready != 3 || c.Leased != 0 || c.Published != 3 {
		t.Fatalf("replica after the cut at %d: next %d, %+v", cut, replica.machine.state.Next(), c)
	}
	if names := snapshotFiles(t, follower.fs); len(names) != 0 {
		t.Fatalf("snapshots past the cut kept: %v", names)
	}
	if err := replica.AppendReplicated(cut+1, encodeForTest(owner.log.recordsBetween(cut+1, cut+2)), log.AfterFlush, nil); err == nil {
		t.Fatal("an append past the replica's end was accepted")
	}
	if err := replica.TruncateAfter(cut); err != nil { // nothing past the cut: no rebuild
		t.Fatal(err)
	}
	_ = replica.Close()
}

// TestReplicaInstallsOwnerSnapshot: a replica that joins with its log
// starting at the owner's first retained offset takes the owner's
// snapshot and then holds the owner's state.
func TestReplicaInstallsOwnerSnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	f := newFixture(t, Options{MaxDeliveries: 3})
	for i := range 40 {
		f.publish(fmt.Sprintf("m%d", i))
	}
	d := f.lease(1, 30)
	f.must(f.q.Ack(1, offsetsOf(d[:25])))
	f.must(f.q.Nack(1, offsetsOf(d[25:27]), 0))
	ticket, err := f.q.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	var task *CheckpointTask
	for task == nil {
		task = f.advance().Checkpoint
	}
	if err := f.q.CheckpointDone(task, task.Run(context.Background())); err != nil {
		t.Fatal(err)
	}
	_ = ticket
	firstOffset, err := f.q.Compact()
	if err != nil || firstOffset == 0 {
		t.Fatalf("compaction to %d: %v", firstOffset, err)
	}
	f.publish("after")

	follower := newFakeEnv(rng)
	opts := f.opts.WithDefaults()
	if err := prepareDirectory(follower.fs, testDir, opts); err != nil {
		t.Fatal(err)
	}
	replica, err := openWithLog(testDir, opts, follower.fs, follower.log, f.clock, quietLogger, defaultMaxInflight, startMode{role: roleReplica})
	if err != nil {
		t.Fatal(err)
	}
	if replica.Info().AwaitingSnapshot {
		t.Fatal("an empty replica at offset 0 awaits a snapshot")
	}
	// The owner's log starts past 0: the replica restarts its log there.
	if err := replica.Rebase(firstOffset, f.env.log.EpochHistory()); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.Promote(99); !errors.Is(err, ErrSnapshotNeeded) || !replica.Info().AwaitingSnapshot {
		t.Fatalf("promotion of a replica without the owner's history: %v", err)
	}
	next, data, ok, err := f.q.LatestSnapshot()
	if err != nil || !ok || next != task.Next {
		t.Fatalf("latest snapshot %d %v %v", next, ok, err)
	}
	if err := replica.InstallSnapshot(data); !errors.Is(err, ErrSnapshotStale) {
		t.Fatalf("install before the marker is in the replica's log: %v", err)
	}
	end := f.env.log.Frontiers().Written
	if err := replica.AppendReplicated(firstOffset, encodeForTest(f.env.log.recordsBetween(firstOffset, end)), log.AfterFsync, nil); err != nil {
		t.Fatal(err)
	}
	follower.log.flush()
	follower.log.sync()
	if err := replica.InstallSnapshot(data); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.Advance(); err != nil {
		t.Fatal(err)
	}
	sameState(t, "after installing the owner's snapshot", f.q, replica, f.nowMs)
	// The installed snapshot is the replica's own recovery authority.
	_ = replica.Close()
	follower.log = follower.log.processCrash(rng)
	replica, err = openWithLog(testDir, opts, follower.fs, follower.log, f.clock, quietLogger, defaultMaxInflight, startMode{role: roleReplica})
	if err != nil {
		t.Fatal(err)
	}
	if r := replica.Recovery(); r.Snapshot != snapshotName(next) || replica.Info().AwaitingSnapshot {
		t.Fatalf("replica reopened from %+v", r)
	}
	sameState(t, "after the replica reopened", f.q, replica, f.nowMs)
	if _, err := replica.Promote(99); err != nil {
		t.Fatalf("promotion after the snapshot: %v", err)
	}
}

// TestApplyLimitHoldsConfirmsAndDeliveries: with a limit below a
// pipelined publish and its lease, neither the confirm nor the delivery is
// released; both come out of the Advance after the limit passes them.
func TestApplyLimitHoldsConfirmsAndDeliveries(t *testing.T) {
	f := newFixture(t, Options{})
	f.publish("before")
	f.q.SetApplyLimit(f.q.machine.state.Next())
	ticket, claims, err := f.q.PublishLeasing([]Message{{Payload: []byte("held")}}, []Offer{{Holder: 1, Max: 2}})
	if err != nil || len(claims) != 1 || claims[0].Count != 2 {
		t.Fatalf("publish with an offer: %v %v", claims, err)
	}
	if p := f.advance(); !p.Empty() || f.q.Ceiling() != f.q.machine.state.Next() {
		t.Fatalf("released past the apply limit: %+v", p)
	}
	f.q.SetApplyLimit(f.q.machine.state.Next() + 1) // the publish, not its lease
	if p := f.advance(); len(p.Confirmed) != 1 || p.Confirmed[0].Ticket != ticket || len(p.Deliveries) != 0 {
		t.Fatalf("limit past the publish only: %+v", p)
	}
	f.q.SetApplyLimit(noLimit)
	if p := f.advance(); len(p.Deliveries) != 2 || p.Deliveries[1].MessageID == "" {
		t.Fatalf("after the limit lifted: %+v", p)
	}
}

// TestOwnerEpochs: a single-node queue takes a new epoch at every open;
// OpenOwner refuses an epoch it has used; a record keeps its epoch (its
// identity) across restarts.
func TestOwnerEpochs(t *testing.T) {
	fs := vfs.NewMem()
	m := openMemQueue(t, fs, "/q", Options{})
	first := m.q.Epoch()
	m.publish(Message{ID: "a", Payload: []byte("a")})
	before := m.lease(1, 1).Deliveries[0]
	m.reopen(m.crash(false))
	if m.q.Epoch() != first+1 {
		t.Fatalf("epoch %d after a reopen, %d before", m.q.Epoch(), first)
	}
	after := m.lease(1, 1).Deliveries[0]
	if after.Incarnation != before.Incarnation || after.Incarnation != first || !after.Redelivered {
		t.Fatalf("identity across a restart: %+v then %+v", before, after)
	}
	_ = m.q.Close()
	logOptions := m.logOptions()
	if _, err := OpenOwner("/q", Options{}, logOptions, nil, first+1); !errors.Is(err, ErrEpochStale) {
		t.Fatalf("owner open under a used epoch: %v", err)
	}
	q, err := OpenOwner("/q", Options{}, logOptions, nil, first+10)
	if err != nil {
		t.Fatal(err)
	}
	if q.Epoch() != first+10 || q.Ceiling() != 0 || q.Recovery().ExpiredLeases != 1 {
		t.Fatalf("replicated owner: epoch %d ceiling %d recovery %+v", q.Epoch(), q.Ceiling(), q.Recovery())
	}
	_ = q.Close()
}
