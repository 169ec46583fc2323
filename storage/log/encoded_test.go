package log

// Tests of the primitives replication stands on (encoded.go, seal.go):
// epoch histories with real first offsets, scans of encoded records,
// appends of encoded records and every refusal, rebase and seal.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/fibrilmq/fibril/storage/vfs"
)

// epochEntries returns n entries of epoch, bodies tagged by their offsets
// from first.
func epochEntries(first uint64, n int, epoch uint64) []Entry {
	entries := make([]Entry, n)
	for i := range entries {
		entries[i] = Entry{Epoch: epoch, Type: 3, Body: body(first+uint64(i), "e")}
	}
	return entries
}

func mustAppend(t *testing.T, l *Log, entries []Entry, level Durability) Result {
	t.Helper()
	result, err := l.Append(context.Background(), entries, level)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return result
}

func wantHistory(t *testing.T, what string, l *Log, want string) {
	t.Helper()
	if got := fmt.Sprint(l.EpochHistory()); got != want {
		t.Fatalf("%s: epoch history %s, want %s", what, got, want)
	}
}

// The epoch history holds each epoch's real first offset: epochs rising
// between appends and inside one append, after a suffix cut (inside an
// epoch, and exactly at an epoch's start), after a reopen, after a rebuild
// from the records, and after a latch.
func TestEpochHistoryHoldsRealFirstOffsets(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	l := mustOpen(t, "/e", opts)
	mustAppend(t, l, epochEntries(0, 5, 1), AfterFsync)
	mustAppend(t, l, epochEntries(5, 3, 3), AfterFlush)
	mixed := append(epochEntries(8, 2, 3), epochEntries(10, 4, 7)...)
	mustAppend(t, l, mixed, AfterFsync) // epoch 7 starts inside this append, at 10
	mustAppend(t, l, epochEntries(14, 6, 9), AfterFsync)
	wantHistory(t, "after appends", l, "[{1 0} {3 5} {7 10} {9 14}]")
	if _, err := l.Append(context.Background(), epochEntries(20, 1, 8), AfterFsync); !errors.Is(err, ErrEpochRegression) {
		t.Fatalf("append of an older epoch: %v", err)
	}
	incarnation := l.Incarnation()
	if err := l.TruncateAfter(12); err != nil { // inside epoch 7
		t.Fatal(err)
	}
	wantHistory(t, "after a cut inside epoch 7", l, "[{1 0} {3 5} {7 10}]")
	if l.Incarnation() == incarnation {
		t.Fatal("the suffix cut did not change the incarnation")
	}
	if err := l.TruncateAfter(10); err != nil { // exactly where epoch 7 starts
		t.Fatal(err)
	}
	wantHistory(t, "after a cut at epoch 7's start", l, "[{1 0} {3 5}]")
	mustAppend(t, l, epochEntries(10, 2, 4), AfterFsync) // a divergent suffix replaced
	wantHistory(t, "after appending epoch 4 at the cut", l, "[{1 0} {3 5} {4 10}]")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, "/e", opts)
	wantHistory(t, "after a reopen", l, "[{1 0} {3 5} {4 10}]")
	l.Close()
	mem.Remove(filepath.Join("/e", epochsFileName))
	l = mustOpen(t, "/e", opts)
	wantHistory(t, "rebuilt from the records", l, "[{1 0} {3 5} {4 10}]")
	mustAppend(t, l, epochEntries(12, 1, 4), AfterFsync)
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	if _, err := l.Append(context.Background(), epochEntries(13, 2, 6), AfterFsync); !isLatched(err) {
		t.Fatalf("append on a failing disk: %v", err)
	}
	wantHistory(t, "after the latch cut epoch 6 away", l, "[{1 0} {3 5} {4 10}]")
	l.Close()
}

// encodedRecords scans every record of l from from as encoded bytes.
func encodedRecords(t *testing.T, l *Log, from uint64, bound FrontierKind, maxBytes int) []byte {
	t.Helper()
	var out []byte
	for {
		next, err := l.ScanEncoded(from, bound, maxBytes, func(records []byte, first, next uint64) error {
			if err := checkEncodedSpan(records, first, nil); err != nil {
				return fmt.Errorf("span [%d, %d): %w", first, next, err)
			}
			out = append(out, records...)
			return nil
		})
		if err != nil {
			t.Fatalf("scan encoded from %d: %v", from, err)
		}
		if next == from {
			return out
		}
		from = next
	}
}

// expectedEncoding is what the log must hold for records [from, to) of
// epochEntries-style bodies.
func expectedEncoding(from, to uint64, epochOf func(uint64) uint64) []byte {
	var out []byte
	for offset := from; offset < to; offset++ {
		out = appendRecord(out, offset, epochOf(offset), 3, body(offset, "e"))
	}
	return out
}

// ScanEncoded yields the exact on-disk bytes, from the cache and from the
// files, bounded by the frontier chosen and by the byte budget (at least
// one record per call), and returns the offset after the last record.
func TestScanEncodedYieldsTheRecordsBytes(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	l := mustOpen(t, "/s", opts)
	mustAppend(t, l, epochEntries(0, 30, 2), AfterFsync)
	mustAppend(t, l, epochEntries(30, 10, 2), AfterFlush)
	epochOf := func(uint64) uint64 { return 2 }
	if got := encodedRecords(t, l, 0, FrontierDurable, 1<<20); !bytes.Equal(got, expectedEncoding(0, 30, epochOf)) {
		t.Fatal("encoded records up to durable differ from their encoding")
	}
	if got := encodedRecords(t, l, 5, FrontierWritten, 100); !bytes.Equal(got, expectedEncoding(5, 40, epochOf)) {
		t.Fatal("encoded records up to written, in small budgets, differ")
	}
	size := len(appendRecord(nil, 7, 2, 3, body(7, "e")))
	calls := 0
	next, err := l.ScanEncoded(7, FrontierWritten, 2*size+1, func(records []byte, first, next uint64) error {
		calls++
		if len(records) > 2*size+1 {
			t.Fatalf("span of %d bytes over a budget of %d", len(records), 2*size+1)
		}
		return nil
	})
	if err != nil || next != 9 || calls == 0 {
		t.Fatalf("budgeted scan: next %d, calls %d, err %v; want next 9", next, calls, err)
	}
	if next, err := l.ScanEncoded(7, FrontierWritten, 1, func([]byte, uint64, uint64) error { return nil }); err != nil || next != 8 {
		t.Fatalf("a budget smaller than one record: next %d, err %v; want one record", next, err)
	}
	if next, err := l.ScanEncoded(40, FrontierWritten, 1<<20, func([]byte, uint64, uint64) error { return nil }); err != nil || next != 40 {
		t.Fatalf("a scan from the frontier: next %d, err %v", next, err)
	}
	l.Close()
	l = mustOpen(t, "/s", opts) // every record now comes from the files
	defer l.Close()
	if got := encodedRecords(t, l, 0, FrontierDurable, 333); !bytes.Equal(got, expectedEncoding(0, 40, epochOf)) {
		t.Fatal("encoded records read from the files differ")
	}
	stop := errors.New("stop")
	if next, err := l.ScanEncoded(3, FrontierDurable, 1<<20, func([]byte, uint64, uint64) error { return stop }); err != stop || next != 3 {
		t.Fatalf("a callback error: next %d, err %v", next, err)
	}
	if _, err := l.ScanEncoded(0, FrontierStaged, 1, func([]byte, uint64, uint64) error { return nil }); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("a scan bounded by staged: %v", err)
	}
	path := l.segments[0].logPath
	data, _ := mem.ReadFile(path)
	data[30] ^= 0xff
	mem.WriteFile(path, data)
	if _, err := l.ScanEncoded(0, FrontierDurable, 1<<20, func([]byte, uint64, uint64) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a damaged record read from its file: %v, want ErrCorrupt", err)
	}
}

// A span from the cache is pinned while fn runs: appends that recycle the
// whole cache meanwhile do not change its bytes.
func TestScanEncodedCacheSpanStaysValidWhileFnRuns(t *testing.T) {
	opts := memOptions(vfs.NewMem())
	opts.SegmentBytes = 1 << 30
	opts.TailCacheBytes = -1 // four 64 KiB blocks
	l := mustOpen(t, "/pin", opts)
	defer l.Close()
	mustAppend(t, l, epochEntries(0, 10, 1), AfterFlush)
	payload := bytes.Repeat([]byte("x"), 4000)
	_, err := l.ScanEncoded(0, FrontierWritten, 1<<20, func(records []byte, first, next uint64) error {
		before := append([]byte(nil), records...)
		for i := 0; i < 200; i++ { // 800 KiB: the four blocks turn over many times
			mustAppend(t, l, []Entry{{Epoch: 1, Type: 3, Body: payload}}, AfterFlush)
		}
		if !bytes.Equal(records, before) {
			t.Fatal("the cached span changed while the callback held it")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Records shipped from one log append to another byte for byte, with the
// epoch history following, in both modes; the copy's files hold the same
// bytes.
func TestAppendEncodedCopiesALog(t *testing.T) {
	source := mustOpen(t, "/source", memOptions(vfs.NewMem()))
	defer source.Close()
	mustAppend(t, source, epochEntries(0, 25, 1), AfterFsync)
	mustAppend(t, source, epochEntries(25, 25, 4), AfterFsync)
	shipped := encodedRecords(t, source, 0, FrontierDurable, 1<<20)
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			opts := memOptions(vfs.NewMem())
			var copied *Log
			if direct {
				h := openDirectHarness(t, "/copy", opts)
				for from := uint64(0); from < 50; from += 10 {
					batch := recordsBetween(t, shipped, from, from+10)
					if _, err := h.a.StageEncoded(batch, from, AfterFsync, func(Result) {}); err != nil {
						t.Fatalf("stage encoded at %d: %v", from, err)
					}
					h.a.Flush()
				}
				for h.l.Frontiers().Durable < 50 {
					h.awaitWake()
				}
				if err := h.a.Close(); err != nil {
					t.Fatal(err)
				}
				copied = mustOpen(t, "/copy", opts)
			} else {
				copied = mustOpen(t, "/copy", opts)
				for from := uint64(0); from < 50; from += 10 {
					result, err := copied.AppendEncoded(context.Background(), recordsBetween(t, shipped, from, from+10), from, AfterFsync)
					if err != nil || result != (Result{First: from, Next: from + 10}) {
						t.Fatalf("append encoded at %d: %+v, %v", from, result, err)
					}
				}
			}
			defer copied.Close()
			if got := encodedRecords(t, copied, 0, FrontierDurable, 1<<20); !bytes.Equal(got, shipped) {
				t.Fatal("the copy's records differ from the source's")
			}
			if fmt.Sprint(copied.EpochHistory()) != fmt.Sprint(source.EpochHistory()) {
				t.Fatalf("epoch history %v, source %v", copied.EpochHistory(), source.EpochHistory())
			}
		})
	}
}

// recordsBetween cuts records [from, to) out of encoded bytes starting at 0.
func recordsBetween(t *testing.T, data []byte, from, to uint64) []byte {
	t.Helper()
	start, offset := 0, uint64(0)
	for position := 0; position < len(data); offset++ {
		if offset == from {
			start = position
		}
		size, err := recordLength(data[position:])
		if err != nil {
			t.Fatal(err)
		}
		position += size
		if offset+1 == to {
			return data[start:position]
		}
	}
	t.Fatalf("records [%d, %d) not in the data", from, to)
	return nil
}

// Every refusal of an encoded append names its error and appends nothing
// of the batch: the log's frontiers and epoch history are unchanged, and
// the good batch still appends at the same offset afterwards.
func TestAppendEncodedRefusals(t *testing.T) {
	good := expectedEncoding(10, 13, func(uint64) uint64 { return 5 })
	flip := func(at int) []byte { b := append([]byte(nil), good...); b[at] ^= 0xff; return b }
	second := encodedSize(len(body(10, "e")))
	cases := []struct {
		name    string
		records []byte
		first   uint64
		level   Durability
		want    error
	}{
		{"a body byte changed (CRC)", flip(second + recordHeaderBytes), 10, AfterFsync, ErrCorrupt},
		{"a length out of bounds", flip(second + 3), 10, AfterFsync, ErrCorrupt},
		{"a record cut short", good[:len(good)-4], 10, AfterFsync, ErrCorrupt},
		{"trailing bytes", append(append([]byte(nil), good...), 1, 2, 3), 10, AfterFsync, ErrCorrupt},
		{"a first offset behind the log", expectedEncoding(9, 12, func(uint64) uint64 { return 5 }), 9, AfterFsync, ErrOffsetMismatch},
		{"a first offset ahead of the log", expectedEncoding(11, 14, func(uint64) uint64 { return 5 }), 11, AfterFsync, ErrOffsetMismatch},
		{"first not the batch's first record", good, 11, AfterFsync, ErrOffsetMismatch},
		{"offsets not dense", append(expectedEncoding(10, 11, func(uint64) uint64 { return 5 }), expectedEncoding(12, 13, func(uint64) uint64 { return 5 })...), 10, AfterFsync, ErrOffsetMismatch},
		{"an epoch below the log's last", expectedEncoding(10, 13, func(uint64) uint64 { return 4 }), 10, AfterFsync, ErrEpochRegression},
		{"epochs decreasing in the batch", expectedEncoding(10, 13, func(offset uint64) uint64 { return 16 - offset }), 10, AfterFsync, ErrEpochRegression},
		{"a body over the limit", appendRecord(nil, 10, 5, 3, make([]byte, 5000)), 10, AfterFsync, ErrTooLarge},
		{"a type the log rejects", appendRecord(nil, 10, 5, 99, []byte("x")), 10, AfterFsync, ErrCorrupt},
		{"an invalid level", good, 10, Durability(9), ErrInvalidDurability},
	}
	for _, mode := range []string{"sync", "async", "direct"} {
		t.Run(mode, func(t *testing.T) {
			opts := memOptions(vfs.NewMem())
			opts.MaxRecordBytes = 4096
			opts.ValidType = func(recordType uint8) bool { return recordType != 99 }
			append := func(l *Log, h *directHarness, records []byte, first uint64, level Durability) (Result, error) {
				switch mode {
				case "sync":
					return l.AppendEncoded(context.Background(), records, first, level)
				case "async":
					results := make(chan Result, 1)
					if err := l.AppendEncodedAsync(records, first, level, func(result Result) { results <- result }); err != nil {
						return Result{}, err
					}
					result := <-results
					return result, result.Err
				}
				results := &[]Result{}
				if _, err := h.a.StageEncoded(records, first, level, func(result Result) { *results = append(*results, result) }); err != nil {
					return Result{}, err
				}
				h.a.Flush()
				for len(*results) == 0 {
					h.awaitWake()
				}
				return (*results)[0], (*results)[0].Err
			}
			var l *Log
			var h *directHarness
			if mode == "direct" {
				h = openDirectHarness(t, "/refuse", opts)
				l = h.l
				defer h.a.Close()
			} else {
				l = mustOpen(t, "/refuse", opts)
				defer l.Close()
			}
			if _, err := append(l, h, expectedEncoding(0, 10, func(uint64) uint64 { return 5 }), 0, AfterFsync); err != nil {
				t.Fatalf("the log's first batch: %v", err)
			}
			for _, c := range cases {
				before, history := l.Frontiers(), fmt.Sprint(l.EpochHistory())
				if _, err := append(l, h, c.records, c.first, c.level); !errors.Is(err, c.want) {
					t.Fatalf("%s: %v, want %v", c.name, err, c.want)
				}
				if l.Frontiers() != before || fmt.Sprint(l.EpochHistory()) != history {
					t.Fatalf("%s: the refused batch changed the log: %+v -> %+v", c.name, before, l.Frontiers())
				}
			}
			if result, err := append(l, h, good, 10, AfterFsync); err != nil || result != (Result{First: 10, Next: 13}) {
				t.Fatalf("the good batch after the refusals: %+v, %v", result, err)
			}
			if result, err := append(l, h, nil, 13, AfterFsync); err != nil || result.First != 13 || result.Next != 13 {
				t.Fatalf("an empty batch at the end: %+v, %v", result, err)
			}
			if _, err := append(l, h, nil, 12, AfterFsync); !errors.Is(err, ErrOffsetMismatch) {
				t.Fatalf("an empty batch at the wrong offset: %v", err)
			}
		})
	}
}

// Rebase restarts the log empty at a base with the history given, durably
// and with a new incarnation; a rebase interrupted by a crash is finished
// by the next Open; a history that does not precede the base is refused.
func TestRebaseRestartsTheLogEmptyAtABase(t *testing.T) {
	mem := vfs.NewMem()
	opts := memOptions(mem)
	l := mustOpen(t, "/rb", opts)
	mustAppend(t, l, epochEntries(0, 40, 1), AfterFsync)
	mustAppend(t, l, epochEntries(40, 5, 2), AfterFlush)
	if err := l.Rebase(500, []EpochStart{{Epoch: 1, FirstOffset: 100}, {Epoch: 3, FirstOffset: 500}}); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("rebase with a history entry at the base: %v", err)
	}
	incarnation := l.Incarnation()
	history := []EpochStart{{Epoch: 1, FirstOffset: 100}, {Epoch: 3, FirstOffset: 420}}
	if err := l.Rebase(500, history); err != nil {
		t.Fatal(err)
	}
	if f := l.Frontiers(); f != (Frontiers{Staged: 500, Written: 500, Durable: 500}) || l.FirstOffset() != 500 || l.Incarnation() == incarnation {
		t.Fatalf("after the rebase: %+v, first %d, incarnation %d (was %d)", f, l.FirstOffset(), l.Incarnation(), incarnation)
	}
	wantHistory(t, "after the rebase", l, "[{1 100} {3 420}]")
	if _, err := l.Append(context.Background(), epochEntries(500, 1, 2), AfterFsync); !errors.Is(err, ErrEpochRegression) {
		t.Fatalf("an epoch below the carried history: %v", err)
	}
	if result := mustAppend(t, l, epochEntries(500, 3, 3), AfterFsync); result.First != 500 {
		t.Fatalf("first append after the rebase at %d", result.First)
	}
	l.Close()
	l = mustOpen(t, "/rb", opts)
	wantHistory(t, "reopened", l, "[{1 100} {3 420}]")
	if records := scanAll(t, l, 500, true); len(records) != 3 || l.FirstOffset() != 500 {
		t.Fatalf("reopened: %d records from %d", len(records), l.FirstOffset())
	}
	l.Close()

	// A crash right after rebase.pending was recorded: the old segments are
	// still there, and Open finishes the rebase.
	writeFile(t, mem, filepath.Join("/rb", rebaseFileName), smallFileBytes(encodeRebase(900, []EpochStart{{Epoch: 5, FirstOffset: 800}})))
	l = mustOpen(t, "/rb", opts)
	defer l.Close()
	if f := l.Frontiers(); f.Durable != 900 || l.FirstOffset() != 900 {
		t.Fatalf("after a pending rebase: %+v, first %d", f, l.FirstOffset())
	}
	wantHistory(t, "after a pending rebase", l, "[{5 800}]")
	if names := mem.Names(); len(names) == 0 || fmt.Sprint(names) == "" {
		t.Fatal("no files")
	}
	for _, name := range mem.Names() {
		if base, ok := parseSegmentName(filepath.Base(name), logSuffix); ok && base != 900 {
			t.Fatalf("segment %d survived the rebase", base)
		}
	}
}

// smallFileBytes is a small file's content: payload and its CRC.
func smallFileBytes(payload []byte) []byte {
	return append(append([]byte(nil), payload...), crcBytes(payload)...)
}

func crcBytes(payload []byte) []byte {
	sum := crc32Castagnoli(payload)
	return []byte{byte(sum), byte(sum >> 8), byte(sum >> 16), byte(sum >> 24)}
}

// A seal syncs what is written and reports the durable end with the
// history below it, in both modes; on a latched log it fails.
func TestSealReportsTheDurableEndAndHistory(t *testing.T) {
	mem := vfs.NewMem()
	l := mustOpen(t, "/seal", memOptions(mem))
	mustAppend(t, l, epochEntries(0, 5, 1), AfterFsync)
	mustAppend(t, l, epochEntries(5, 5, 2), AfterFlush)
	mustAppend(t, l, epochEntries(10, 2, 3), AfterWrite)
	state, err := l.Seal(context.Background())
	if err != nil || state.End != 12 || fmt.Sprint(state.Epochs) != "[{1 0} {2 5} {3 10}]" || state.Incarnation != l.Incarnation() {
		t.Fatalf("seal: %+v, %v", state, err)
	}
	if f := l.Frontiers(); f.Durable != 12 {
		t.Fatalf("frontiers after the seal: %+v", f)
	}
	mem.InjectFault(vfs.FaultRule{Op: vfs.FaultSync, Pattern: "*.log", Sticky: true})
	mustAppend(t, l, epochEntries(12, 1, 4), AfterFlush)
	if _, err := l.Seal(context.Background()); !isLatched(err) {
		t.Fatalf("seal on a failing disk: %v", err)
	}
	l.Close()

	h := openDirectHarness(t, "/dseal", memOptions(vfs.NewMem()))
	defer h.a.Close()
	h.stage(epochEntries(0, 3, 6), AfterFlush)
	h.stage(epochEntries(3, 2, 7), AfterWrite)
	var sealed []SealState
	if err := h.a.Seal(func(state SealState, err error) {
		if err != nil {
			t.Fatalf("direct seal: %v", err)
		}
		sealed = append(sealed, state)
	}); err != nil {
		t.Fatal(err)
	}
	for len(sealed) == 0 {
		h.awaitWake()
	}
	if sealed[0].End != 5 || fmt.Sprint(sealed[0].Epochs) != "[{6 0} {7 3}]" {
		t.Fatalf("direct seal: %+v", sealed[0])
	}
}

func TestEncodedPrefixCountsWholeRecords(t *testing.T) {
	var records []byte
	for i := range 5 {
		records = appendRecord(records, uint64(10+i), 1, 1, bytes.Repeat([]byte{byte(i)}, i*3))
	}
	for n := range 7 {
		prefix := EncodedPrefix(records, n)
		want := 0
		for i := range min(n, 5) {
			want += encodedSize(i * 3)
		}
		if len(prefix) != want {
			t.Fatalf("EncodedPrefix(%d) = %d bytes, want %d", n, len(prefix), want)
		}
	}
	if got := EncodedPrefix(records[:len(records)-1], 5); len(got) != len(records)-encodedSize(12) {
		t.Fatalf("a torn last record is kept: %d bytes", len(got))
	}
}

func TestEncodedEpochStartsNamesEveryEpochChange(t *testing.T) {
	var records []byte
	for i, epoch := range []uint64{2, 2, 3, 3, 3, 5} {
		records = appendRecord(records, uint64(40+i), epoch, 1, []byte{byte(i)})
	}
	got := EncodedEpochStarts(records, 40)
	want := []EpochStart{{Epoch: 2, FirstOffset: 40}, {Epoch: 3, FirstOffset: 42}, {Epoch: 5, FirstOffset: 45}}
	if len(got) != len(want) {
		t.Fatalf("starts %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("starts %+v, want %+v", got, want)
		}
	}
	if starts := EncodedEpochStarts(nil, 7); len(starts) != 0 {
		t.Fatalf("no records gave %+v", starts)
	}
}
