package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// logRig runs a log actor and its sync scheduler under a stand-in
// partition, over a direct-mode log, as a partition does.
type logRig struct {
	t        *testing.T
	system   *actor.ActorSystem
	registry *runtime.Registry
	core     *brokerCore
	handle   *logHandle
	metrics  *queueMetrics
	parent   *actor.PID
	logPID   *actor.PID
	syncPID  *actor.PID
	latched  chan error
	notified atomic.Int64
	frontier chan logFrontiers
}

func startLogRig(t *testing.T, name string, options log.Options) *logRig {
	t.Helper()
	handle, err := openLogHandle("/"+name+"/log", options)
	if err != nil {
		t.Fatal(err)
	}
	rig := &logRig{t: t, system: runtime.NewActorSystem(runtime.DiscardLogger()), registry: runtime.NewRegistry(nil), handle: handle,
		latched: make(chan error, 1), frontier: make(chan logFrontiers, 64)}
	rig.core = &brokerCore{config: Config{Clock: time.Now}, logger: runtime.DiscardLogger(), registry: rig.registry,
		system: rig.system}
	rig.metrics = newMetrics(rig.registry.RestartsTotal).forQueue(name, "written")
	ready := make(chan struct{})
	props := rig.registry.Props("partition", runtime.DiscardLogger(), func(*runtime.Entry) actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			switch msg := ctx.Message().(type) {
			case *actor.Started:
				rig.logPID, rig.syncPID = spawnLogActors(ctx, rig.core, handle, options.SyncInterval,
					func() { rig.notified.Add(1) }, rig.metrics)
				close(ready)
			case logLatched:
				rig.latched <- msg.err
			case logFrontiers:
				rig.frontier <- msg
			}
		})
	}, actor.WithSupervisor(&runtime.FailurePolicy{Level: "partition", Window: time.Minute, Decide: runtime.AlwaysEscalate,
		Logger: runtime.DiscardLogger()}))
	rig.parent, err = rig.system.Root.SpawnNamed(props, name)
	if err != nil {
		t.Fatal(err)
	}
	<-ready
	t.Cleanup(func() {
		_ = rig.system.Root.StopFuture(rig.parent).Wait()
		select {
		case <-handle.closed:
		case <-time.After(testWait):
			t.Error("the log was not closed after its actor stopped")
		}
	})
	return rig
}

func (r *logRig) summary(path string) string {
	info, ok := r.registry.Lookup(r.parent.Id + "/" + path)
	if !ok {
		return ""
	}
	return info.Summary
}

// appendAll appends bodies through the seam at level and waits for every
// completion.
func (r *logRig) appendAll(level log.Durability, bodies ...string) []log.Result {
	r.t.Helper()
	results := make(chan log.Result, len(bodies))
	for _, body := range bodies {
		entries := []log.Entry{{Type: 1, Body: []byte(body)}}
		if err := r.handle.AppendAsync(entries, level, func(result log.Result) { results <- result }); err != nil {
			r.t.Fatal(err)
		}
	}
	var out []log.Result
	for range bodies {
		select {
		case result := <-results:
			if result.Err != nil && !errors.Is(result.Err, log.ErrLatched) {
				r.t.Fatalf("append: %v", result.Err)
			}
			out = append(out, result)
		case <-time.After(testWait):
			r.t.Fatal("an append never completed")
		}
	}
	return out
}

// Appends made through the seam are staged in the order they were made,
// grouped, written and made durable by the log actor; every done is
// called once; the partition is told when the durable frontier moves.
func TestLogActorWritesAppendsInOrder(t *testing.T) {
	mem := vfs.NewMem()
	options := log.DefaultOptions()
	options.FS = mem
	rig := startLogRig(t, "ordered", options)
	var bodies []string
	for i := range 200 {
		bodies = append(bodies, fmt.Sprintf("m%03d", i))
	}
	results := rig.appendAll(log.AfterFsync, bodies...)
	seen := make(map[uint64]bool)
	for _, result := range results {
		if result.Err != nil || result.Next != result.First+1 || seen[result.First] {
			t.Fatalf("result %+v (seen before: %v)", result, seen[result.First])
		}
		seen[result.First] = true
	}
	if f := rig.handle.Frontiers(); f.Durable != 200 || f.Written != 200 {
		t.Fatalf("frontiers %+v after 200 durable appends", f)
	}
	offset := uint64(0)
	if _, err := rig.handle.ScanDurable(0, 1<<20, func(record log.Record) error {
		if want := fmt.Sprintf("m%03d", record.Offset); string(record.Body) != want || record.Offset != offset {
			return fmt.Errorf("record %d holds %q", record.Offset, record.Body)
		}
		offset++
		return nil
	}); err != nil || offset != 200 {
		t.Fatalf("scan: %v after %d records", err, offset)
	}
	waitFor(t, "the partition to hear of the durable frontier", func() bool { return rig.notified.Load() > 0 })
	waitFor(t, "the summary", func() bool { return strings.Contains(rig.summary("log"), "durable=200 lag=0") })
	// A sync through the seam waits for everything asked before it.
	rig.appendAll(log.AfterFlush, "unsynced")
	if err := rig.handle.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := rig.handle.Frontiers(); f.Durable != 201 {
		t.Fatalf("durable %d after a sync", f.Durable)
	}
}

// A log with nothing written beyond its durable frontier schedules no
// sync work: whatever wakes its actor, the scheduler arms no timer, sends
// no tick and the log makes no fdatasync. Counted, not timed: the pokes
// are the messages that would make it schedule.
func TestIdleLogSchedulesNoSyncWork(t *testing.T) {
	var syncs vfs.SyncCounter
	options := log.DefaultOptions()
	options.FS = vfs.CountSyncs(vfs.NewMem(), &syncs)
	options.SyncInterval = time.Millisecond
	rig := startLogRig(t, "idle", options)
	rig.appendAll(log.AfterFlush, "a", "b") // written, not durable: a background sync is due
	waitFor(t, "the background sync", func() bool { return rig.handle.Frontiers().Durable == 2 })
	waitFor(t, "the scheduler to fall idle", func() bool {
		return !strings.Contains(rig.summary("sync"), "armed")
	})
	synced, ticks, wants := syncs.Total(), rig.ticks(), rig.syncWants()
	for range 100 {
		rig.system.Root.Send(rig.logPID, logKick{})
		rig.system.Root.Send(rig.logPID, logSyncFinished{})
		rig.system.Root.Send(rig.logPID, syncTick{})
	}
	// A sync through the mailbox after the pokes: when it is answered, every
	// poke has been handled.
	if err := rig.handle.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := syncs.Total(); after != synced {
		t.Fatalf("an idle log made %d syncs", after-synced)
	}
	// The 100 syncTicks were answered by the log with no syncWanted: the
	// scheduler armed nothing and sent no tick of its own.
	waitFor(t, "the scheduler's summary", func() bool { return rig.summary("sync") != "" })
	if armed := strings.Contains(rig.summary("sync"), "armed"); armed || rig.ticks() != ticks {
		t.Fatalf("idle scheduler: %s (ticks before %d)", rig.summary("sync"), ticks)
	}
	if after := rig.syncWants(); after != wants {
		t.Fatalf("an idle log asked for %d ticks (%s)", after-wants, rig.summary("log"))
	}
	if wants < 1 || ticks < 1 {
		t.Fatalf("the first background sync was never scheduled: %d asked, %d ticks", wants, ticks)
	}
}

// ticks reads the scheduler's tick count from its summary.
func (r *logRig) ticks() int {
	var interval string
	var ticks int
	_, _ = fmt.Sscanf(r.summary("sync"), "interval %s %d ticks", &interval, &ticks)
	return ticks
}

// syncWants reads how often the log asked for a tick, from its summary.
func (r *logRig) syncWants() int {
	summary := r.summary("log")
	index := strings.Index(summary, "sync_ticks_asked=")
	if index < 0 {
		return -1
	}
	var wants int
	_, _ = fmt.Sscanf(summary[index:], "sync_ticks_asked=%d", &wants)
	return wants
}

// A failed background sync latches the log with no append in flight: the
// log actor tells the partition at once, sets the latched gauge and names
// the error in its summary; the seam refuses appends from then on.
func TestLogActorReportsALatch(t *testing.T) {
	mem := vfs.NewMem()
	options := log.DefaultOptions()
	options.FS = mem
	options.SyncInterval = time.Millisecond
	rig := startLogRig(t, "failing", options)
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	rig.appendAll(log.AfterFlush, "c") // written; the background sync fails
	select {
	case err := <-rig.latched:
		if err == nil || !strings.Contains(err.Error(), "latched") {
			t.Fatalf("latch report %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("the partition was never told of the latch")
	}
	if !rig.metrics.latched.Load() {
		t.Fatal("latched gauge not set")
	}
	waitFor(t, "the summary to name the latch", func() bool { return strings.HasPrefix(rig.summary("log"), "latched") })
	results := rig.appendAll(log.AfterFlush, "d")
	if !errors.Is(results[0].Err, log.ErrLatched) {
		t.Fatalf("append on a latched log: %+v", results[0])
	}
}

// slowSyncFS holds every segment fdatasync until release is closed.
type slowSyncFS struct {
	vfs.FS
	release chan struct{}
}

func (s slowSyncFS) Create(name string) (vfs.File, error) {
	file, err := s.FS.Create(name)
	return s.wrap(name, file, err)
}

func (s slowSyncFS) OpenReadWrite(name string) (vfs.File, error) {
	file, err := s.FS.OpenReadWrite(name)
	return s.wrap(name, file, err)
}

func (s slowSyncFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return file, err
	}
	return slowSyncFile{File: file, release: s.release}, nil
}

type slowSyncFile struct {
	vfs.File
	release chan struct{}
}

func (f slowSyncFile) Sync() error {
	<-f.release
	return f.File.Sync()
}

// A follower learns where the written frontier stands as soon as a group
// is written, before its fsync completes, and again when it is durable:
// what a follower link needs to ship records early.
func TestFollowerLearnsTheWrittenFrontierBeforeTheSync(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	options := log.DefaultOptions()
	options.FS = slowSyncFS{FS: vfs.NewMem(), release: release}
	options.SyncInterval = 0
	rig := startLogRig(t, "followed", options)
	defer once.Do(func() { close(release) })
	rig.system.Root.Send(rig.logPID, logFollow{follower: rig.parent})
	if first := <-rig.frontier; first.frontiers.Written != 0 {
		t.Fatalf("first report %+v", first)
	}
	done := make(chan log.Result, 1)
	if err := rig.handle.AppendAsync([]log.Entry{{Type: 1, Body: []byte("early")}}, log.AfterFsync,
		func(result log.Result) { done <- result }); err != nil {
		t.Fatal(err)
	}
	select {
	case report := <-rig.frontier:
		if report.frontiers.Written != 1 || report.frontiers.Durable != 0 {
			t.Fatalf("report while the sync is held: %+v", report)
		}
	case <-time.After(testWait):
		t.Fatal("the follower was not told of the written frontier")
	}
	select {
	case result := <-done:
		t.Fatalf("the append completed before its sync: %+v", result)
	default:
	}
	once.Do(func() { close(release) })
	if result := <-done; result.Err != nil {
		t.Fatal(result.Err)
	}
	for durable := false; !durable; {
		select {
		case report := <-rig.frontier:
			durable = report.frontiers.Durable == 1
		case <-time.After(testWait):
			t.Fatal("the follower was not told of the durable frontier")
		}
	}
	rig.system.Root.Send(rig.logPID, logUnfollow{follower: rig.parent})
}

// A replica appends encoded records through the same log actor, cuts a
// divergent suffix and rebases, each in order with the appends around it.
func TestLogActorAppendsEncodedRecordsCutsAndRebases(t *testing.T) {
	options := log.DefaultOptions()
	options.FS = vfs.NewMem()
	owner, err := log.Open("/owner", options)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	for i := range 10 {
		if _, err := owner.Append(context.Background(), []log.Entry{{Epoch: 3, Type: 1, Body: []byte(fmt.Sprint(i))}},
			log.AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	var encoded []byte
	if _, err := owner.ScanEncoded(0, log.FrontierWritten, 1<<20, func(records []byte, _, _ uint64) error {
		encoded = append(encoded, records...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rig := startLogRig(t, "replica", options)
	done := make(chan log.Result, 2)
	if err := rig.handle.AppendEncodedAsync(encoded, 0, log.AfterFsync, func(r log.Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if result := <-done; result.Err != nil || result.First != 0 || result.Next != 10 {
		t.Fatalf("encoded append %+v", result)
	}
	// A batch that does not start at the log's end is refused through done.
	if err := rig.handle.AppendEncodedAsync(encoded, 0, log.AfterFsync, func(r log.Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if result := <-done; !errors.Is(result.Err, log.ErrOffsetMismatch) {
		t.Fatalf("misplaced encoded append %+v", result)
	}
	if err := rig.handle.TruncateAfter(6); err != nil {
		t.Fatal(err)
	}
	if f := rig.handle.Frontiers(); f.Written != 6 || f.Durable != 6 {
		t.Fatalf("frontiers after the cut %+v", f)
	}
	if err := rig.handle.Rebase(100, []log.EpochStart{{Epoch: 3, FirstOffset: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := rig.handle.AppendAsync([]log.Entry{{Epoch: 3, Type: 1, Body: []byte("after the rebase")}}, log.AfterFsync,
		func(r log.Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if result := <-done; result.Err != nil || result.First != 100 {
		t.Fatalf("append after the rebase: %+v", result)
	}
	state, err := rig.handle.Seal(context.Background())
	if err != nil || state.End != 101 {
		t.Fatalf("seal %+v, %v", state, err)
	}
}

// A stop never strands an append the queue already made: the log actor
// stages what is listed, then closes the log, which makes it durable; the
// seam refuses what comes after.
func TestLogHandleStagesListedAppendsBeforeClosing(t *testing.T) {
	mem := vfs.NewMem()
	options := log.DefaultOptions()
	options.FS = mem
	options.SyncInterval = 0
	handle, err := openLogHandle("/stranded/log", options)
	if err != nil {
		t.Fatal(err)
	}
	kicks := 0
	handle.attach(func() { kicks++ }, func() {}) // an owner that never runs
	completed := 0
	for i := range 5 {
		if err := handle.AppendAsync([]log.Entry{{Type: 1, Body: []byte(fmt.Sprint(i))}}, log.AfterFlush,
			func(result log.Result) {
				if result.Err == nil {
					completed++
				}
			}); err != nil {
			t.Fatal(err)
		}
	}
	if kicks != 1 {
		t.Fatalf("%d kicks for one group", kicks)
	}
	if !handle.beginShutDown() {
		t.Fatal("the first shutdown was refused")
	}
	handle.shutDown()
	if handle.closeErr != nil || completed != 5 {
		t.Fatalf("close: %v, %d of 5 appends completed", handle.closeErr, completed)
	}
	if err := handle.AppendAsync([]log.Entry{{Type: 1, Body: []byte("late")}}, log.AfterFlush,
		func(log.Result) {}); !errors.Is(err, log.ErrClosed) {
		t.Fatalf("append after the close: %v", err)
	}
	// The queue's Close after the owner closed the log: how the close went,
	// then ErrClosed.
	if err := handle.Close(); err != nil {
		t.Fatalf("close after the owner's: %v", err)
	}
	if err := handle.Close(); !errors.Is(err, log.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	clone := mem.CrashClone(vfs.CrashOptions{})
	options.FS = clone
	reopened, err := log.Open("/stranded/log", options)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	if f := reopened.Frontiers(); f.Durable != 5 {
		t.Fatalf("after a power loss the closed log holds %d records", f.Durable)
	}
}
