package actors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// The log actor shows durable lag in its summary and reports a latch to its partition
// even when no append is waiting (a failed background sync).
func TestLogWatcherReportsLagAndLatch(t *testing.T) {
	mem := vfs.NewMem()
	options := log.DefaultOptions()
	options.FS = mem
	options.SyncInterval = 0 // only explicit syncs: the test controls the lag
	l, err := log.Open("/q/log", options)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	system := newActorSystem(discardLogger())
	registry := NewRegistry(nil)
	metrics := newMetrics(registry.RestartsTotal).forQueue("q", "written")
	latched := make(chan error, 1)
	partition, _ := system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if msg, ok := ctx.Message().(logLatched); ok {
			latched <- msg.err
		}
	}), "partition")
	props := registry.props("log", discardLogger(), func(entry *Entry) actor.Actor {
		return newLogWatcher(entry, l, partition, metrics)
	})
	watcher, err := system.Root.SpawnNamed(props, "partition-log")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = system.Root.StopFuture(watcher).Wait() }()

	if _, err := l.Append(context.Background(), []log.Entry{{Type: 1, Body: []byte("a")}, {Type: 1, Body: []byte("b")}},
		log.AfterFlush); err != nil {
		t.Fatal(err)
	}
	// The watch wakes on durable progress; a sync makes it move.
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the summary to show the durable frontier", func() bool {
		info, ok := registry.Lookup("partition-log")
		return ok && strings.Contains(info.Summary, "durable=2")
	})
	if info, _ := registry.Lookup("partition-log"); !strings.Contains(info.Summary, "lag=0 records") {
		t.Fatalf("lag after a sync: %s", info.Summary)
	}

	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Sticky: true})
	if _, err := l.Append(context.Background(), []log.Entry{{Type: 1, Body: []byte("c")}}, log.AfterFlush); err != nil {
		t.Fatal(err)
	}
	_ = l.Sync(context.Background()) // fails and latches the log
	select {
	case err := <-latched:
		if err == nil || !strings.Contains(err.Error(), "latched") {
			t.Fatalf("latch report %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("the partition was never told of the latch")
	}
	if !metrics.latched.Load() {
		t.Fatal("latched gauge not set")
	}
	if _, err := l.Append(context.Background(), []log.Entry{{Type: 1, Body: []byte("d")}}, log.AfterFlush); !errors.Is(err, log.ErrLatched) {
		t.Fatalf("append on a latched log: %v", err)
	}
}
