package log

// Benchmarks (design: measured, never timed tests). Every latency figure
// is a percentile of raw per-append samples, reported with b.ReportMetric
// beside the machine's floors measured in the same process on the same
// filesystem: a raw write(2) of the same bytes, and a raw write plus
// fdatasync. Run:
//
//	go test -run '^$' -bench . -benchtime 20000x ./storage/log
//
// Files go to os.TempDir when it is on a real disk; when it is tmpfs, to
// .cache/bench at the repository root (gitignored).

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const benchBodyBytes = 1 << 10

// benchDir returns a fresh directory on a real disk.
func benchDir(b *testing.B) string {
	b.Helper()
	var stat unix.Statfs_t
	if err := unix.Statfs(os.TempDir(), &stat); err == nil && stat.Type != unix.TMPFS_MAGIC {
		return b.TempDir()
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".cache", "bench"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "log")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// percentile returns the q-quantile of sorted samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

func reportLatency(b *testing.B, samples []time.Duration, prefix string) time.Duration {
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	p50 := percentile(samples, 0.50)
	b.ReportMetric(float64(p50.Nanoseconds()), prefix+"p50-ns")
	b.ReportMetric(float64(percentile(samples, 0.99).Nanoseconds()), prefix+"p99-ns")
	return p50
}

// floorFile is a raw file beside the log for the floors: a write(2) of one
// record's bytes, and the same write followed by fdatasync.
type floorFile struct {
	b      *testing.B
	file   *os.File
	buffer []byte
}

func newFloorFile(b *testing.B, dir string) *floorFile {
	file, err := os.Create(filepath.Join(dir, "floor"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { file.Close() })
	return &floorFile{b: b, file: file, buffer: make([]byte, encodedSize(benchBodyBytes))}
}

func (f *floorFile) time(sync bool) time.Duration {
	start := time.Now()
	if _, err := f.file.Write(f.buffer); err != nil {
		f.b.Fatal(err)
	}
	if sync {
		if err := unix.Fdatasync(int(f.file.Fd())); err != nil {
			f.b.Fatal(err)
		}
	}
	return time.Since(start)
}

// interleaved takes n samples of the log operation and n of the floor
// operation in alternating blocks, so that load from elsewhere on the
// machine falls on both alike.
func interleaved(n, block int, logOperation, floorOperation func() time.Duration) (logSamples, floorSamples []time.Duration) {
	logSamples = make([]time.Duration, 0, n)
	floorSamples = make([]time.Duration, 0, n)
	for len(logSamples) < n {
		for i := 0; i < block && len(floorSamples) < n; i++ {
			floorSamples = append(floorSamples, floorOperation())
		}
		for i := 0; i < block && len(logSamples) < n; i++ {
			logSamples = append(logSamples, logOperation())
		}
	}
	return logSamples, floorSamples
}

// timedAppend returns a function that appends one 1 KiB record at level
// and returns how long it took.
func timedAppend(b *testing.B, l *Log, level Durability) func() time.Duration {
	entries := []Entry{{Epoch: 1, Type: 1, Body: make([]byte, benchBodyBytes)}}
	ctx := context.Background()
	return func() time.Duration {
		start := time.Now()
		if _, err := l.Append(ctx, entries, level); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
}

func benchOptions(interval time.Duration) Options {
	opts := DefaultOptions()
	opts.SyncInterval = interval
	opts.Logger = discardLogger()
	return opts
}

// appendSamples runs n single-record appends, one in flight, and returns
// each one's latency.
func appendSamples(b *testing.B, l *Log, n int, level Durability) []time.Duration {
	operation := timedAppend(b, l, level)
	samples := make([]time.Duration, n)
	for i := range samples {
		samples[i] = operation()
	}
	return samples
}

// BenchmarkAppendAfterFlush1InFlight: target p50 <= 3x the raw write(2)
// floor (same bytes, same filesystem, interleaved in blocks of 500).
func BenchmarkAppendAfterFlush1InFlight(b *testing.B) {
	dir := benchDir(b)
	l, err := Open(filepath.Join(dir, "log"), benchOptions(0))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	floor := newFloorFile(b, dir)
	b.ReportAllocs()
	b.ResetTimer()
	logSamples, floorSamples := interleaved(b.N, 500, timedAppend(b, l, AfterFlush), func() time.Duration { return floor.time(false) })
	b.StopTimer()
	p50 := reportLatency(b, logSamples, "")
	floorP50 := reportLatency(b, floorSamples, "floor-write-")
	b.ReportMetric(float64(p50)/float64(floorP50), "x-floor")
}

// BenchmarkFloorWriteAcrossGoroutines: the floor of any design where one
// goroutine owns the file. The same raw write(2) as the floor above, but
// handed to a second goroutine over a channel and answered over another,
// interleaved in blocks of 500 with the plain write; reports both p50s and
// their ratio. AfterFlush cannot beat this ratio without giving up the
// single writer.
func BenchmarkFloorWriteAcrossGoroutines(b *testing.B) {
	dir := benchDir(b)
	floor := newFloorFile(b, dir)
	file, err := os.Create(filepath.Join(dir, "owned"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { file.Close() })
	owned := &floorFile{b: b, file: file, buffer: make([]byte, encodedSize(benchBodyBytes))}
	requests, answers := make(chan struct{}), make(chan struct{})
	go func() {
		for range requests {
			owned.time(false)
			answers <- struct{}{}
		}
	}()
	defer close(requests)
	handoff := func() time.Duration {
		start := time.Now()
		requests <- struct{}{}
		<-answers
		return time.Since(start)
	}
	b.ResetTimer()
	handoffSamples, floorSamples := interleaved(b.N, 500, handoff, func() time.Duration { return floor.time(false) })
	b.StopTimer()
	p50 := reportLatency(b, handoffSamples, "handoff-")
	floorP50 := reportLatency(b, floorSamples, "floor-write-")
	b.ReportMetric(float64(p50)/float64(floorP50), "x-floor")
}

// BenchmarkAppendAfterFsync1InFlight: target p50 <= 1.5x the raw write +
// fdatasync floor (interleaved in blocks of 50).
func BenchmarkAppendAfterFsync1InFlight(b *testing.B) {
	benchmarkAfterFsync1InFlight(b, false)
}

// BenchmarkAppendAfterFsync1InFlightPreallocated is the same with segments
// preallocated by fallocate (Options.PreallocateSegments).
func BenchmarkAppendAfterFsync1InFlightPreallocated(b *testing.B) {
	benchmarkAfterFsync1InFlight(b, true)
}

func benchmarkAfterFsync1InFlight(b *testing.B, preallocate bool) {
	dir := benchDir(b)
	opts := benchOptions(0)
	opts.PreallocateSegments = preallocate
	l, err := Open(filepath.Join(dir, "log"), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	floor := newFloorFile(b, dir)
	b.ReportAllocs()
	b.ResetTimer()
	logSamples, floorSamples := interleaved(b.N, 50, timedAppend(b, l, AfterFsync), func() time.Duration { return floor.time(true) })
	b.StopTimer()
	p50 := reportLatency(b, logSamples, "")
	floorP50 := reportLatency(b, floorSamples, "floor-fdatasync-")
	b.ReportMetric(float64(p50)/float64(floorP50), "x-floor")
}

// BenchmarkAppendAfterFsync64Appenders: 64 concurrent appenders, one
// record each in flight; target >= 15x the records/s of one appender,
// which is measured first in the same run (2000 appends).
func BenchmarkAppendAfterFsync64Appenders(b *testing.B) {
	const appenders = 64
	l, err := Open(benchDir(b), benchOptions(0))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	appendSamples(b, l, 2000, AfterFsync)
	oneRate := 2000 / time.Since(start).Seconds()
	b.ResetTimer()
	start = time.Now()
	var wg sync.WaitGroup
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := b.N / appenders
			if a < b.N%appenders {
				n++
			}
			appendSamples(b, l, n, AfterFsync)
		}()
	}
	wg.Wait()
	rate := float64(b.N) / time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(oneRate, "one-appender-records/s")
	b.ReportMetric(rate, "records/s")
	b.ReportMetric(rate/oneRate, "x-one-appender")
}

// BenchmarkBackgroundSyncEffect: AfterFlush, one in flight, with background
// sync off and at 100 ms, in ABBA blocks on fresh logs; target: p50 changes
// by less than 20%.
func BenchmarkBackgroundSyncEffect(b *testing.B) {
	samples := map[time.Duration][]time.Duration{}
	for _, interval := range []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 0} {
		l, err := Open(benchDir(b), benchOptions(interval))
		if err != nil {
			b.Fatal(err)
		}
		samples[interval] = append(samples[interval], appendSamples(b, l, max(b.N/4, 1), AfterFlush)...)
		status := l.Status()
		l.Close()
		if interval > 0 && status.LastSyncTime.IsZero() {
			b.Fatal("background sync never ran")
		}
	}
	off := reportLatency(b, samples[0], "off-")
	on := reportLatency(b, samples[100*time.Millisecond], "100ms-")
	b.ReportMetric(100*(float64(on)-float64(off))/float64(off), "p50-change-%")
}

// BenchmarkScanDurableFromFiles: the replay path. A log of 100,000 records
// of 1 KiB (two segments of 64 MiB) is scanned from its first offset with
// the 64 KiB body budget per call that queue recovery uses; b.N counts
// records. The log is opened afresh (outside the timer) for every pass, so
// every record comes from the segment files (the tail cache starts empty
// and a sealed segment's index is searched in its file). Reports records/s.
func BenchmarkScanDurableFromFiles(b *testing.B) {
	const records = 100_000
	dir := filepath.Join(benchDir(b), "log")
	l, err := Open(dir, benchOptions(0))
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Entry, 100)
	for i := range batch {
		batch[i] = Entry{Epoch: 1, Type: 1, Body: make([]byte, benchBodyBytes)}
	}
	for written := 0; written < records; written += len(batch) {
		if _, err := l.Append(context.Background(), batch, AfterFlush); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	l = nil
	from, scanned := uint64(0), 0
	b.ReportAllocs()
	b.ResetTimer()
	for scanned < b.N {
		if l == nil || from == records {
			b.StopTimer()
			if l != nil {
				l.Close()
			}
			if l, err = Open(dir, benchOptions(0)); err != nil {
				b.Fatal(err)
			}
			from = l.FirstOffset()
			b.StartTimer()
		}
		next, err := l.ScanDurable(from, 64<<10, func(Record) error { scanned++; return nil })
		if err != nil {
			b.Fatal(err)
		}
		from = next
	}
	b.StopTimer()
	l.Close()
	b.ReportMetric(float64(scanned)/b.Elapsed().Seconds(), "records/s")
}

// directBench drives a direct log on the benchmark's goroutine, as a
// log-writer actor drives it: stage, flush, and on each wake-up
// SyncFinished.
type directBench struct {
	b     *testing.B
	l     *Log
	a     *Appender
	wakes chan struct{}
	done  bool
}

func openDirectBench(b *testing.B, dir string, opts Options) *directBench {
	d := &directBench{b: b, wakes: make(chan struct{}, 1)}
	opts.SyncDone = func() {
		select {
		case d.wakes <- struct{}{}:
		default:
		}
	}
	l, a, err := OpenDirect(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	d.l, d.a = l, a
	b.Cleanup(func() { a.Close() })
	return d
}

// timedAppend is timedAppend for the direct mode: one record staged and
// flushed, and for AfterFsync the wake-ups handled until it is durable.
func (d *directBench) timedAppend(level Durability) func() time.Duration {
	entries := []Entry{{Epoch: 1, Type: 1, Body: make([]byte, benchBodyBytes)}}
	onDone := func(result Result) {
		if result.Err != nil {
			d.b.Fatal(result.Err)
		}
		d.done = true
	}
	return func() time.Duration {
		start := time.Now()
		d.done = false
		if _, err := d.a.Stage(entries, level, onDone); err != nil {
			d.b.Fatal(err)
		}
		d.a.Flush()
		for !d.done {
			<-d.wakes
			d.a.SyncFinished()
		}
		return time.Since(start)
	}
}

// BenchmarkDirectAppendAfterFlush1InFlight: BenchmarkAppendAfterFlush1InFlight
// in direct mode, where the caller's goroutine writes: no hand-off to a
// writer goroutine and back.
func BenchmarkDirectAppendAfterFlush1InFlight(b *testing.B) {
	dir := benchDir(b)
	d := openDirectBench(b, filepath.Join(dir, "log"), benchOptions(0))
	floor := newFloorFile(b, dir)
	b.ReportAllocs()
	b.ResetTimer()
	logSamples, floorSamples := interleaved(b.N, 500, d.timedAppend(AfterFlush), func() time.Duration { return floor.time(false) })
	b.StopTimer()
	p50 := reportLatency(b, logSamples, "")
	floorP50 := reportLatency(b, floorSamples, "floor-write-")
	b.ReportMetric(float64(p50)/float64(floorP50), "x-floor")
}

// BenchmarkDirectAppendAfterFsync1InFlight: BenchmarkAppendAfterFsync1InFlight
// in direct mode (the fdatasync runs on the log's sync goroutine).
func BenchmarkDirectAppendAfterFsync1InFlight(b *testing.B) {
	dir := benchDir(b)
	d := openDirectBench(b, filepath.Join(dir, "log"), benchOptions(0))
	floor := newFloorFile(b, dir)
	b.ReportAllocs()
	b.ResetTimer()
	logSamples, floorSamples := interleaved(b.N, 50, d.timedAppend(AfterFsync), func() time.Duration { return floor.time(true) })
	b.StopTimer()
	p50 := reportLatency(b, logSamples, "")
	floorP50 := reportLatency(b, floorSamples, "floor-fdatasync-")
	b.ReportMetric(float64(p50)/float64(floorP50), "x-floor")
}
