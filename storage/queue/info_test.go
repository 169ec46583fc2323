package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// The queue hands its owner the log, and Info reports the log's own sync
// interval, so a change made through the log shows at once.
func TestLogAccessorAndSyncIntervalInInfo(t *testing.T) {
	m := openMemQueue(t, vfs.NewMem(), "/q", Options{Mode: Buffered})
	l := m.q.Log()
	if l == nil {
		t.Fatal("a queue over the real log returns no log")
	}
	if info := m.q.Info(); info.SyncInterval != 0 || info.Latched || info.LastError != nil {
		t.Fatalf("fresh queue info %+v", info)
	}
	l.SetSyncInterval(5 * time.Millisecond)
	if info := m.q.Info(); info.SyncInterval != 5*time.Millisecond {
		t.Fatalf("sync interval after the log's change: %v", info.SyncInterval)
	}

	fake := newFixture(t, Options{Mode: Buffered})
	if fake.q.Log() != nil {
		t.Fatal("a queue over another log implementation returned a *log.Log")
	}
}

// A sync that fails with no append in flight (a background or explicit
// sync) latches the log; Info reports the latch and the error and fences
// the queue, so the next operation is refused without reaching the log.
func TestInfoReportsALatchedLogAndFences(t *testing.T) {
	mem := vfs.NewMem()
	m := openMemQueue(t, mem, "/q", Options{Mode: Buffered})
	m.publish(Message{ID: "a", Payload: []byte("a")})
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Sticky: true})
	if err := m.q.Log().Sync(context.Background()); err == nil {
		t.Fatal("a sync on a failing disk succeeded")
	}
	info := m.q.Info()
	if !info.Latched || info.LastError == nil {
		t.Fatalf("info after a failed sync: latched %v, last error %v", info.Latched, info.LastError)
	}
	if !errors.Is(info.Fenced, ErrFenced) {
		t.Fatalf("info does not report the queue fenced: %v", info.Fenced)
	}
	if _, err := m.q.Publish([]Message{{ID: "b", Payload: []byte("b")}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("publish on a latched log: %v", err)
	}
}
