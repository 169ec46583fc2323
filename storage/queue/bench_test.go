package queue

// Benchmarks. Figures are recorded in docs/queue.md.
//
//	go test -run '^$' -bench 'Apply|Replay' -benchtime 3x ./storage/queue/
//	go test -run '^$' -bench Restart -benchtime 5x -timeout 30m ./storage/queue/
//
// BenchmarkRestart builds a queue with FIBRIL_BENCH_SETTLED settled
// messages (default 1,000,000) and FIBRIL_BENCH_READY ready ones (default
// 10,000) of FIBRIL_BENCH_PAYLOAD bytes (default 1024) on the
// real filesystem under FIBRIL_BENCH_DIR (default the system temp dir),
// and measures Open without and with a checkpoint (plus compaction).

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// publishAckRecords builds n messages' records: a publish, a lease and an
// ack each, leases and acks one offset per record (the worst case).
func publishAckRecords(n int) ([]Record, [][]byte) {
	records := make([]Record, 0, 3*n)
	bodies := make([][]byte, 0, 3*n)
	payload := make([]byte, 1024)
	for i := range n {
		offset := uint64(3 * i)
		records = append(records,
			Record{Kind: KindPublish, PublishMs: 1_700_000_000_000, PayloadBytes: 1024},
			Record{Kind: KindLease, Holder: 1, DeadlineMs: 1_700_000_030_000, Offsets: []uint64{offset}},
			Record{Kind: KindAck, Offsets: []uint64{offset}})
		bodies = append(bodies, appendPublishBody(nil, []byte(strconv.Itoa(i)), 1_700_000_000_000, nil, payload, publishDedup{}))
		bodies = append(bodies, encodeRecord(nil, &records[len(records)-2]), encodeRecord(nil, &records[len(records)-1]))
	}
	return records, bodies
}

const benchMessages = 1_000_000

// BenchmarkApplyPublishAck applies already decoded records to State.
func BenchmarkApplyPublishAck(b *testing.B) {
	records, _ := publishAckRecords(benchMessages)
	b.ResetTimer()
	for b.Loop() {
		s := NewState(Options{}, 0)
		for i := range records {
			s.Apply(uint64(i), &records[i], nil)
		}
	}
	b.ReportMetric(float64(len(records)*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkReplayPublishAck decodes record bodies and applies them, as
// recovery does after the log hands it each record.
func BenchmarkReplayPublishAck(b *testing.B) {
	records, bodies := publishAckRecords(benchMessages)
	b.ResetTimer()
	for b.Loop() {
		s := NewState(Options{}, 0)
		var rec Record
		for i := range bodies {
			if err := decodeRecord(uint8(records[i].Kind), bodies[i], &rec, false); err != nil {
				b.Fatal(err)
			}
			s.Apply(uint64(i), &rec, nil)
		}
	}
	b.ReportMetric(float64(len(records)*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkApplyBacklog publishes every message first, then leases and
// acks them in records of 100 offsets, so lookups run against a large live
// set.
func BenchmarkApplyBacklog(b *testing.B) {
	var records []Record
	for range benchMessages {
		records = append(records, Record{Kind: KindPublish, PublishMs: 1_700_000_000_000, PayloadBytes: 1024})
	}
	for first := uint64(0); first < benchMessages; first += 100 {
		offsets := make([]uint64, 100)
		for i := range offsets {
			offsets[i] = first + uint64(i)
		}
		records = append(records, Record{Kind: KindLease, Holder: 1, DeadlineMs: 1, Offsets: offsets},
			Record{Kind: KindAck, Offsets: offsets})
	}
	messages := 0
	b.ResetTimer()
	for b.Loop() {
		s := NewState(Options{}, 0)
		for i := range records {
			s.Apply(uint64(i), &records[i], nil)
		}
		messages += benchMessages
	}
	b.ReportMetric(float64(len(records)*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(messages)/b.Elapsed().Seconds(), "messages/s")
}

// BenchmarkReadyMemory measures the heap a State needs per ready message.
func BenchmarkReadyMemory(b *testing.B) {
	rec := Record{Kind: KindPublish, PublishMs: 1_700_000_000_000, PayloadBytes: 1024}
	var perMessage float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := NewState(Options{}, 0)
		for i := range uint64(benchMessages) {
			s.Apply(2*i, &rec, nil) // every other offset, as with settles in between
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perMessage = float64(after.HeapAlloc-before.HeapAlloc) / benchMessages
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perMessage, "heap-bytes/ready-msg")
}

func envInt(name string, fallback int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return fallback
}

// benchQueue opens a queue on the real filesystem for benchmarks.
type benchQueue struct {
	b      *testing.B
	dir    string
	q      *Queue
	notify chan struct{}
}

func (bq *benchQueue) open() time.Duration {
	bq.b.Helper()
	start := time.Now()
	q, err := Open(bq.dir, Options{Mode: Buffered}, log.Options{FS: vfs.OS, SyncInterval: log.DefaultSyncInterval, Logger: quietLogger}, nil)
	if err != nil {
		bq.b.Fatal(err)
	}
	elapsed := time.Since(start)
	q.SetNotify(func() {
		select {
		case bq.notify <- struct{}{}:
		default:
		}
	})
	bq.q = q
	return elapsed
}

// await advances until nothing is in flight and returns what applied.
func (bq *benchQueue) await() Progress {
	var all Progress
	for {
		p, err := bq.q.Advance()
		if err != nil {
			bq.b.Fatal(err)
		}
		all.Deliveries = append(all.Deliveries, p.Deliveries...)
		if p.Checkpoint != nil {
			all.Checkpoint = p.Checkpoint
		}
		if bq.q.machine.inflight() == 0 {
			return all
		}
		select {
		case <-bq.notify:
		case <-time.After(time.Millisecond):
		}
	}
}

func (bq *benchQueue) publish(count int, payload []byte) {
	for done := 0; done < count; {
		n := min(1000, count-done)
		batch := make([]Message, n)
		for i := range batch {
			batch[i] = Message{Payload: payload}
		}
		if _, err := bq.q.Publish(batch); err != nil {
			bq.b.Fatal(err)
		}
		bq.await()
		done += n
	}
}

func (bq *benchQueue) consume(count int) {
	for done := 0; done < count; {
		if _, _, err := bq.q.Lease(min(1000, count-done), 1); err != nil {
			bq.b.Fatal(err)
		}
		offsets := offsetsOf(bq.await().Deliveries)
		if _, err := bq.q.Ack(1, offsets); err != nil {
			bq.b.Fatal(err)
		}
		bq.await()
		done += len(offsets)
	}
}

// BenchmarkRestart measures Open of a queue with a long settled history.
func BenchmarkRestart(b *testing.B) {
	settled, ready := envInt("FIBRIL_BENCH_SETTLED", 1_000_000), envInt("FIBRIL_BENCH_READY", 10_000)
	parent, err := os.MkdirTemp(os.Getenv("FIBRIL_BENCH_DIR"), "queue-restart-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(parent)
	bq := &benchQueue{b: b, dir: parent + "/q", notify: make(chan struct{}, 1)}
	bq.open()
	payload := make([]byte, envInt("FIBRIL_BENCH_PAYLOAD", 1024))
	buildStart := time.Now()
	for done := 0; done < settled; done += 10_000 {
		bq.publish(min(10_000, settled-done), payload)
		bq.consume(min(10_000, settled-done))
	}
	bq.publish(ready, payload)
	b.Logf("built %d settled + %d ready in %v; log next %d", settled, ready, time.Since(buildStart), bq.q.Info().Applied)
	if err := bq.q.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("without-checkpoint", func(b *testing.B) { measureOpen(b, bq, ready) })
	bq.open()
	if _, err := bq.q.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	task := bq.await().Checkpoint
	if err := bq.q.CheckpointDone(task, task.Run(context.Background())); err != nil {
		b.Fatal(err)
	}
	first, err := bq.q.Compact()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("checkpoint at %d, %d bytes; log compacted to %d", task.Next, task.Bytes(), first)
	_ = bq.q.Close()
	b.Run("with-checkpoint", func(b *testing.B) { measureOpen(b, bq, ready) })
}

func measureOpen(b *testing.B, bq *benchQueue, ready int) {
	bq.b = b
	var total time.Duration
	var replayed uint64
	var heap uint64
	for range b.N {
		bq.q = nil // let the previous open's state be collected before measuring
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		total += bq.open()
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
		info, recovery := bq.q.Info(), bq.q.Recovery()
		if info.Counts.Ready != uint64(ready) {
			b.Fatalf("reopened with %d ready", info.Counts.Ready)
		}
		replayed = recovery.Replayed
		_ = bq.q.Close()
	}
	perOpen := total / time.Duration(b.N)
	b.ReportMetric(float64(perOpen.Microseconds())/1000, "ms/open")
	b.ReportMetric(float64(replayed), "replayed-records")
	if replayed > 0 {
		b.ReportMetric(float64(replayed)/perOpen.Seconds(), "replay-records/s")
	}
	b.ReportMetric(float64(heap)/float64(ready), "heap-bytes/ready-msg")
	fmt.Fprintf(os.Stderr, "open %v, replayed %d records, heap after open %d bytes\n", perOpen, replayed, heap)
}
