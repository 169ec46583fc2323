package queue

// What a durable message costs the log: appends by level (counted in the
// queue's log seam) and fdatasyncs (counted in the filesystem), over the
// real log. The test asserts the counts the design fixes (one append that
// waits for fsync per pipelined message; acks that wait only for write);
// the benchmark reports the figures on the real filesystem.
//
//	go test -run '^$' -bench DurableHotPath -benchtime 2000x ./storage/queue/

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// countingFS counts fdatasyncs of segment files and directory syncs.
type countingFS struct {
	vfs.FS
	segmentSyncs atomic.Int64 // *.log
	otherSyncs   atomic.Int64 // index and small files
	dirSyncs     atomic.Int64
}

func (c *countingFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, fs: c}, nil
}

func (c *countingFS) Create(name string) (vfs.File, error) { return c.wrap(c.FS.Create(name)) }
func (c *countingFS) OpenReadWrite(name string) (vfs.File, error) {
	return c.wrap(c.FS.OpenReadWrite(name))
}
func (c *countingFS) Open(name string) (vfs.File, error) { return c.wrap(c.FS.Open(name)) }
func (c *countingFS) SyncDir(dir string) error {
	c.dirSyncs.Add(1)
	return c.FS.SyncDir(dir)
}

func (c *countingFS) syncs() int64 { return c.segmentSyncs.Load() + c.otherSyncs.Load() }

type countingFile struct {
	vfs.File
	fs *countingFS
}

func (f countingFile) Sync() error {
	if strings.HasSuffix(f.Name(), ".log") {
		f.fs.segmentSyncs.Add(1)
	} else {
		f.fs.otherSyncs.Add(1)
	}
	return f.File.Sync()
}

// countingLog counts the appends the queue makes, by level.
type countingLog struct {
	partitionLog
	mu      sync.Mutex
	byLevel map[log.Durability]int
}

func (c *countingLog) note(level log.Durability) {
	c.mu.Lock()
	c.byLevel[level]++
	c.mu.Unlock()
}

func (c *countingLog) Append(ctx context.Context, entries []log.Entry, level log.Durability) (log.Result, error) {
	c.note(level)
	return c.partitionLog.Append(ctx, entries, level)
}

func (c *countingLog) AppendAsync(entries []log.Entry, level log.Durability, done func(log.Result)) error {
	c.note(level)
	return c.partitionLog.AppendAsync(entries, level, done)
}

func (c *countingLog) count(level log.Durability) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byLevel[level]
}

// hotPath is a durable queue over the real log with counting seams.
type hotPath struct {
	tb     testing.TB
	fs     *countingFS
	log    *countingLog
	q      *Queue
	notify chan struct{}
}

func openHotPath(tb testing.TB, fs vfs.FS, dir string) *hotPath {
	tb.Helper()
	h := &hotPath{tb: tb, fs: &countingFS{FS: fs}, notify: make(chan struct{}, 1)}
	opts := Options{Mode: Durable}.WithDefaults()
	if err := prepareDirectory(h.fs, dir, opts); err != nil {
		tb.Fatal(err)
	}
	l, err := log.Open(path.Join(dir, logDirName), log.Options{FS: h.fs, ExternalTicks: true, Logger: quietLogger, ValidType: validRecordType})
	if err != nil {
		tb.Fatal(err)
	}
	h.log = &countingLog{partitionLog: l, byLevel: map[log.Durability]int{}}
	if h.q, err = openWithLog(dir, opts, h.fs, h.log, nil, quietLogger, defaultMaxInflight, startMode{role: roleOwner}); err != nil {
		tb.Fatal(err)
	}
	h.q.SetNotify(func() {
		select {
		case h.notify <- struct{}{}:
		default:
		}
	})
	return h
}

// advanceUntil advances until done says the progress so far is enough.
func (h *hotPath) advanceUntil(done func(p *Progress) bool) (Progress, int) {
	h.tb.Helper()
	var all Progress
	advances := 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p, err := h.q.Advance()
		if err != nil {
			h.tb.Fatal(err)
		}
		if !p.Empty() {
			advances++
		}
		all.Confirmed = append(all.Confirmed, p.Confirmed...)
		all.Deliveries = append(all.Deliveries, p.Deliveries...)
		if done(&all) {
			return all, advances
		}
		select {
		case <-h.notify:
		case <-time.After(time.Millisecond):
		}
	}
	h.tb.Fatal("advance: nothing applied in 10 s")
	return all, advances
}

// pipelinedMessage publishes one message with an offer for holder 1,
// waits for its confirm and delivery and acks it. It returns the times
// from the publish to the confirm and to the delivery, and whether both
// came in the same Advance.
func (h *hotPath) pipelinedMessage(payload []byte) (confirm, deliver time.Duration, together bool) {
	start := time.Now()
	if _, _, err := h.q.PublishLeasing([]Message{{Payload: payload}}, []Offer{{Holder: 1, Max: 1}}); err != nil {
		h.tb.Fatal(err)
	}
	var confirmed, delivered time.Duration
	var confirmedAt, deliveredAt int
	calls := 0
	all, _ := h.advanceUntil(func(p *Progress) bool {
		calls++
		now := time.Since(start)
		if len(p.Confirmed) > 0 && confirmedAt == 0 {
			confirmed, confirmedAt = now, calls
		}
		if len(p.Deliveries) > 0 && deliveredAt == 0 {
			delivered, deliveredAt = now, calls
		}
		return len(p.Confirmed) > 0 && len(p.Deliveries) > 0
	})
	if _, err := h.q.Ack(1, offsetsOf(all.Deliveries)); err != nil {
		h.tb.Fatal(err)
	}
	return confirmed, delivered, confirmedAt == deliveredAt
}

// TestDurableMessageCostsOneSync: a pipelined durable message (publish with
// credit, then its ack) makes one append that waits for fsync, its ack one
// that waits only for write, and the log one fdatasync per message; the
// confirm and the delivery come from the same Advance. A backlog drained
// by a consumer makes one fsync append per lease batch. Without pipelining
// (lease after the confirm) a message costs two fsync appends.
func TestDurableMessageCostsOneSync(t *testing.T) {
	const messages = 200
	h := openHotPath(t, vfs.NewMem(), "/q")
	syncsBefore, fsyncAppendsBefore := h.fs.syncs(), h.log.count(log.AfterFsync)
	segmentBefore, dirBefore := h.fs.segmentSyncs.Load(), h.fs.dirSyncs.Load()
	for i := range messages {
		if _, _, together := h.pipelinedMessage([]byte("payload")); !together {
			t.Fatalf("message %d: confirm and delivery released by different advances", i)
		}
	}
	fsyncAppends := h.log.count(log.AfterFsync) - fsyncAppendsBefore
	syncs, segmentSyncs := h.fs.syncs()-syncsBefore, h.fs.segmentSyncs.Load()-segmentBefore
	if fsyncAppends != messages || h.log.count(log.AfterFlush) != messages {
		t.Fatalf("%d messages made %d fsync appends and %d write appends, want %d each",
			messages, fsyncAppends, h.log.count(log.AfterFlush), messages)
	}
	// One fdatasync of the segment per message (the sync that carries a
	// publish also carries the ack written before it), plus the index
	// file's syncs when the log persisted index entries since the last one.
	if segmentSyncs != messages || syncs > messages+messages/20 {
		t.Fatalf("%d messages made %d syncs (%d of segment files)", messages, syncs, segmentSyncs)
	}
	t.Logf("pipelined: %d messages, %d fsync appends, %d fdatasyncs (%d of the segment), %d directory syncs",
		messages, fsyncAppends, syncs, segmentSyncs, h.fs.dirSyncs.Load()-dirBefore)

	// The last ack is written, not durable: applied once a sync covers it.
	if info := h.q.Info(); info.Counts.Acked != messages-1 || info.Counts.Leased != 1 {
		t.Fatalf("before the covering sync: %+v", info.Counts)
	}
	if err := h.q.log.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.advanceUntil(func(*Progress) bool { return h.q.Info().Counts.Acked == messages })

	// Not pipelined: lease after the confirm.
	before := h.log.count(log.AfterFsync)
	for range 20 {
		if _, err := h.q.Publish([]Message{{Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		h.advanceUntil(func(p *Progress) bool { return len(p.Confirmed) > 0 })
		if _, _, err := h.q.Lease(1, 1); err != nil {
			t.Fatal(err)
		}
		p, _ := h.advanceUntil(func(p *Progress) bool { return len(p.Deliveries) > 0 })
		if _, err := h.q.Ack(1, offsetsOf(p.Deliveries)); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.log.count(log.AfterFsync) - before; got != 40 {
		t.Fatalf("20 unpipelined messages made %d fsync appends, want 40", got)
	}

	// A backlog drained in lease batches of 100.
	batch := make([]Message, 1000)
	for i := range batch {
		batch[i] = Message{Payload: []byte("backlog")}
	}
	if _, err := h.q.Publish(batch); err != nil {
		t.Fatal(err)
	}
	h.advanceUntil(func(p *Progress) bool { return len(p.Confirmed) > 0 })
	before = h.log.count(log.AfterFsync)
	for drained := 0; drained < len(batch); {
		if _, _, err := h.q.Lease(100, 2); err != nil {
			t.Fatal(err)
		}
		p, _ := h.advanceUntil(func(p *Progress) bool { return len(p.Deliveries) > 0 })
		if _, err := h.q.Ack(2, offsetsOf(p.Deliveries)); err != nil {
			t.Fatal(err)
		}
		drained += len(p.Deliveries)
	}
	if got := h.log.count(log.AfterFsync) - before; got != 10 {
		t.Fatalf("a backlog of 1000 drained 100 at a time made %d fsync appends, want 10", got)
	}
	if err := h.q.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDurableHotPath runs b.N pipelined durable messages one after
// the other (publish with credit, confirm and delivery, ack) on the real
// filesystem under FIBRIL_BENCH_DIR (default the system temp dir) and
// reports fdatasyncs, fsync appends and write appends per message and the
// p50 of publish-to-confirm and publish-to-delivery.
func BenchmarkDurableHotPath(b *testing.B) {
	dir, err := os.MkdirTemp(os.Getenv("FIBRIL_BENCH_DIR"), "queue-hotpath-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	h := openHotPath(b, vfs.OS, dir+"/q")
	payload := make([]byte, 1024)
	syncsBefore, fsyncBefore, flushBefore := h.fs.syncs(), h.log.count(log.AfterFsync), h.log.count(log.AfterFlush)
	confirms, deliveries := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		confirm, deliver, _ := h.pipelinedMessage(payload)
		confirms, deliveries = append(confirms, confirm), append(deliveries, deliver)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(h.fs.syncs()-syncsBefore)/n, "fdatasyncs/msg")
	b.ReportMetric(float64(h.log.count(log.AfterFsync)-fsyncBefore)/n, "fsync-appends/msg")
	b.ReportMetric(float64(h.log.count(log.AfterFlush)-flushBefore)/n, "write-appends/msg")
	b.ReportMetric(float64(median(confirms).Microseconds()), "confirm-p50-µs")
	b.ReportMetric(float64(median(deliveries).Microseconds()), "deliver-p50-µs")
	_ = h.q.Close()
}

func median(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

// TestUncleanStopWithDeliveriesOutstanding: ten pipelined durable messages
// are delivered; five are acked (written, no sync requested). After a kill
// the acks survive (the page cache does) and the other five come back;
// after a power loss before any sync covers the acks all ten come back.
// Either way every message that comes back is marked redelivered with its
// attempt counted, and every confirmed message is there.
func TestUncleanStopWithDeliveriesOutstanding(t *testing.T) {
	for _, powerLoss := range []bool{false, true} {
		name := map[bool]string{false: "kill", true: "power loss"}[powerLoss]
		t.Run(name, func(t *testing.T) {
			m := openMemQueue(t, vfs.NewMem(), "/q", Options{Mode: Durable})
			var confirmed, delivered int
			for i := range 10 {
				ticket, claims, err := m.q.PublishLeasing([]Message{{ID: fmt.Sprint(i), Payload: []byte("p")}}, []Offer{{Holder: 1, Max: 1}})
				if err != nil || len(claims) != 1 {
					t.Fatalf("publish %d: %v %v", i, claims, err)
				}
				p := m.await(claims[0].Ticket)
				confirmed += len(p.Confirmed)
				delivered += len(p.Deliveries)
				if len(p.Confirmed) != 1 || p.Confirmed[0].Ticket != ticket || p.Confirmed[0].Boundary != BoundaryDurable {
					t.Fatalf("message %d: %+v", i, p)
				}
			}
			if confirmed != 10 || delivered != 10 {
				t.Fatalf("%d confirmed, %d delivered", confirmed, delivered)
			}
			if ticket, err := m.q.Ack(1, []uint64{0, 2, 4, 6, 8}); err != nil || ticket == 0 {
				t.Fatal(err)
			}
			m.flushWritten()
			if f := m.q.log.Frontiers(); f.Durable == f.Written {
				t.Fatalf("the acks were synced: %+v", f)
			}
			m.reopen(m.crash(powerLoss))
			wantBack := 5
			if powerLoss {
				wantBack = 10
			}
			if r := m.q.Recovery(); r.ExpiredLeases != wantBack {
				t.Fatalf("recovery %+v, want %d leases expired", r, wantBack)
			}
			back := m.lease(2, 20).Deliveries
			if len(back) != wantBack {
				t.Fatalf("%d came back, want %d", len(back), wantBack)
			}
			for _, d := range back {
				if !d.Redelivered || d.Attempt != 2 {
					t.Fatalf("%s came back redelivered %v attempt %d", d.MessageID, d.Redelivered, d.Attempt)
				}
			}
			if c := m.q.Info().Counts; c.Published != 10 || c.Acked+uint64(wantBack) != 10 {
				t.Fatalf("counts after the %s: %+v", name, c)
			}
		})
	}
}
