package queue

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// memQueue is a Queue over the real log on a vfs.Mem, with helpers that
// wait for appends to apply.
type memQueue struct {
	t      *testing.T
	fs     *vfs.Mem
	dir    string
	opts   Options
	q      *Queue
	notify chan struct{}
	nowMs  int64
}

func openMemQueue(t *testing.T, fs *vfs.Mem, dir string, opts Options) *memQueue {
	t.Helper()
	m := &memQueue{t: t, fs: fs, dir: dir, opts: opts, notify: make(chan struct{}, 1), nowMs: 1_700_000_000_000}
	m.reopen(fs)
	return m
}

func (m *memQueue) clock() time.Time { return time.UnixMilli(m.nowMs) }

func (m *memQueue) logOptions() log.Options {
	return log.Options{FS: m.fs, SegmentBytes: 4096, ExternalTicks: true, Logger: quietLogger}
}

// reopen opens the queue on fs (the same one after a process crash, a
// crash clone after a power loss).
func (m *memQueue) reopen(fs *vfs.Mem) {
	m.t.Helper()
	m.fs = fs
	q, err := Open(m.dir, m.opts, m.logOptions(), m.clock)
	if err != nil {
		m.t.Fatalf("open %s: %v", m.dir, err)
	}
	q.SetNotify(func() {
		select {
		case m.notify <- struct{}{}:
		default:
		}
	})
	m.q = q
}

// crash closes the queue the way a crash leaves it; with powerLoss it
// returns the filesystem a power loss would leave.
func (m *memQueue) crash(powerLoss bool) *vfs.Mem {
	fs := m.fs
	if powerLoss {
		fs = m.fs.CrashClone(vfs.CrashOptions{})
	}
	_ = m.q.Close()
	return fs
}

// await advances until the operation with ticket is applied, returning
// everything applied meanwhile.
func (m *memQueue) await(ticket Ticket) Progress {
	m.t.Helper()
	var all Progress
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p, err := m.q.Advance()
		if err != nil {
			m.t.Fatalf("advance: %v", err)
		}
		all.Confirmed = append(all.Confirmed, p.Confirmed...)
		all.Deliveries = append(all.Deliveries, p.Deliveries...)
		all.DeadLetters = append(all.DeadLetters, p.DeadLetters...)
		all.Applied = append(all.Applied, p.Applied...)
		if p.Checkpoint != nil {
			all.Checkpoint = p.Checkpoint
		}
		if m.applied(&all, ticket) {
			return all
		}
		select {
		case <-m.notify:
		case <-time.After(time.Millisecond):
			m.backgroundSync()
		}
	}
	m.t.Fatalf("ticket %d not applied", ticket)
	return all
}

// flushWritten waits until every append is written (not synced).
func (m *memQueue) flushWritten() {
	for {
		if m.q.log.Frontiers().Written >= m.q.machine.nextOffset {
			return
		}
		select {
		case <-m.notify:
		case <-time.After(time.Millisecond):
		}
	}
}

// backgroundSync stands in for the log's background sync on a durable
// queue: its acks wait only for write and apply once a sync covers them.
// (Buffered queues' tests control their syncs themselves.)
func (m *memQueue) backgroundSync() {
	if f := m.q.log.Frontiers(); m.opts.Mode != Buffered && f.Written > f.Durable {
		_ = m.q.log.Sync(context.Background())
	}
}

func (m *memQueue) applied(p *Progress, ticket Ticket) bool {
	if slices.Contains(p.Applied, ticket) {
		return true
	}
	for _, c := range p.Confirmed {
		if c.Ticket == ticket {
			return true
		}
	}
	return m.q.machine.inflight() == 0 || m.q.machine.pending[m.q.machine.pendHead].ticket > ticket
}

func (m *memQueue) publish(batch ...Message) Confirm {
	m.t.Helper()
	ticket, err := m.q.Publish(batch)
	if err != nil {
		m.t.Fatal(err)
	}
	for _, c := range m.await(ticket).Confirmed {
		if c.Ticket == ticket {
			return c
		}
	}
	m.t.Fatalf("publish %d not confirmed", ticket)
	return Confirm{}
}

func (m *memQueue) lease(holder uint64, max int) Progress {
	m.t.Helper()
	ticket, _, err := m.q.Lease(max, holder)
	if err != nil {
		m.t.Fatal(err)
	}
	if ticket == 0 {
		return m.await(0)
	}
	return m.await(ticket)
}

func (m *memQueue) must(ticket Ticket, err error) Progress {
	m.t.Helper()
	if err != nil {
		m.t.Fatal(err)
	}
	return m.await(ticket)
}
