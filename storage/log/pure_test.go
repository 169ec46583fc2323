package log

// Tests of the pure pieces: record codec, index checks, epoch history,
// background sync decision, tail cache.

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, payload := range [][]byte{nil, {}, []byte("x"), bytes.Repeat([]byte("ab"), 5000)} {
		encoded := appendRecord([]byte("prefix"), 42, 7, 3, payload)[len("prefix"):]
		if len(encoded) != encodedSize(len(payload)) {
			t.Fatalf("encoded %d bytes, want %d", len(encoded), encodedSize(len(payload)))
		}
		record, size, err := decodeRecord(append(encoded, "trailing"...))
		if err != nil || size != len(encoded) || record.Offset != 42 || record.Epoch != 7 || record.Type != 3 || !bytes.Equal(record.Body, payload) {
			t.Fatalf("decode: %+v size %d err %v", record, size, err)
		}
	}
}

func TestRecordDecodeRejects(t *testing.T) {
	good := appendRecord(nil, 1, 2, 3, []byte("body"))
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 1
		return b
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, errShortRecord},
		{"prefix only", good[:6], errShortRecord},
		{"truncated body", good[:len(good)-1], errShortRecord},
		{"length below minimum", append([]byte{16, 0, 0, 0}, good[4:]...), errBadLength},
		{"length above maximum", append([]byte{0xff, 0xff, 0xff, 0xff}, good[4:]...), errBadLength},
		{"checksum byte", flip(4), errBadChecksum},
		{"offset byte", flip(8), errBadChecksum},
		{"epoch byte", flip(16), errBadChecksum},
		{"type byte", flip(24), errBadChecksum},
		{"body byte", flip(25), errBadChecksum},
		{"zeros", make([]byte, 64), errBadLength},
	}
	for _, c := range cases {
		if _, _, err := decodeRecord(c.data); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestCheckIndex(t *testing.T) {
	cases := []struct {
		name    string
		entries []indexEntry
		logSize int64
		ok      bool
	}{
		{"empty", nil, 100, true},
		{"good", []indexEntry{{0, 0}, {3, 120}, {9, 400}}, 500, true},
		{"wrong first entry", []indexEntry{{1, 0}, {3, 120}}, 500, false},
		{"first entry not at byte 0", []indexEntry{{0, 8}}, 500, false},
		{"past the log end", []indexEntry{{0, 0}, {3, 500}}, 500, false},
		{"offsets out of order", []indexEntry{{0, 0}, {5, 100}, {4, 200}}, 500, false},
		{"positions out of order", []indexEntry{{0, 0}, {5, 200}, {6, 100}}, 500, false},
		{"duplicate", []indexEntry{{0, 0}, {5, 200}, {5, 200}}, 500, false},
	}
	for _, c := range cases {
		if err := checkIndex(c.entries, c.logSize); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
	encoded := appendIndexEntries(nil, []indexEntry{{0, 0}, {7, 99}})
	if decoded := decodeIndex(append(encoded, 1, 2)); len(decoded) != 2 || decoded[1] != (indexEntry{7, 99}) {
		t.Fatalf("decodeIndex %v", decoded)
	}
	if entry := searchIndex([]indexEntry{{0, 0}, {5, 50}, {9, 90}}, 7); entry != (indexEntry{5, 50}) {
		t.Fatalf("searchIndex %v", entry)
	}
}

// epochsOf builds an epochAt function over a slice of epochs by offset.
func epochsOf(first uint64, epochs []uint64, reads *int) epochAtFunc {
	return func(offset uint64) (uint64, error) {
		*reads++
		if offset < first || offset >= first+uint64(len(epochs)) {
			return 0, ErrOutOfRange
		}
		return epochs[offset-first], nil
	}
}

func TestEpochHistoryRebuildAndVerify(t *testing.T) {
	epochs := []uint64{1, 1, 1, 2, 2, 5, 5, 5, 5, 9}
	reads := 0
	history, err := rebuildEpochHistory(10, 20, epochsOf(10, epochs, &reads))
	want := []EpochStart{{1, 10}, {2, 13}, {5, 15}, {9, 19}}
	if err != nil || len(history) != len(want) {
		t.Fatalf("rebuild %v %v", history, err)
	}
	for i := range want {
		if history[i] != want[i] {
			t.Fatalf("rebuild %v, want %v", history, want)
		}
	}
	if err := verifyEpochHistory(history, 10, 20, epochsOf(10, epochs, &reads)); err != nil {
		t.Fatalf("verify of a rebuilt history: %v", err)
	}
	wrong := [][]EpochStart{
		{{1, 10}, {2, 14}, {5, 15}, {9, 19}},           // late start
		{{1, 10}, {5, 15}, {9, 19}},                    // missing epoch
		{{1, 10}, {2, 13}, {5, 15}},                    // missing last epoch
		{{1, 10}, {2, 13}, {5, 15}, {9, 19}, {10, 25}}, // past the end
		{{2, 13}, {5, 15}, {9, 19}},                    // nothing covers the first offset
		{{1, 10}, {5, 15}, {2, 13}, {9, 19}},           // out of order
	}
	for i, history := range wrong {
		if err := verifyEpochHistory(history, 10, 20, epochsOf(10, epochs, &reads)); err == nil {
			t.Errorf("wrong history %d verified: %v", i, history)
		}
	}
	// Entries below the retained range are history: accepted unchecked.
	if err := verifyEpochHistory(append([]EpochStart{{0, 2}}, want...), 10, 20, epochsOf(10, epochs, &reads)); err != nil {
		t.Fatalf("history with an entry below the first offset: %v", err)
	}
	if history, err := rebuildEpochHistory(5, 5, nil); err != nil || history != nil {
		t.Fatalf("empty log rebuild %v %v", history, err)
	}
}

func TestEpochHistoryRebuildFallsBackOnManyEpochs(t *testing.T) {
	epochs := make([]uint64, 1000)
	for i := range epochs {
		epochs[i] = uint64(i)
	}
	reads := 0
	if _, err := rebuildEpochHistory(0, 1000, epochsOf(0, epochs, &reads)); !errors.Is(err, errTooManyEpochs) {
		t.Fatalf("rebuild over 1000 epochs: %v, want errTooManyEpochs", err)
	}
	if reads > 20*rebuildSearchEpochsMax {
		t.Fatalf("rebuild did %d reads before giving up", reads)
	}
}

func TestShouldStartBackgroundSync(t *testing.T) {
	start := time.Unix(100, 0)
	cases := []struct {
		name             string
		elapsed          time.Duration
		interval         time.Duration
		written, durable uint64
		inFlight         bool
		want             bool
	}{
		{"due", 100 * time.Millisecond, 100 * time.Millisecond, 10, 5, false, true},
		{"long overdue", time.Hour, 100 * time.Millisecond, 10, 5, false, true},
		{"not yet", 99 * time.Millisecond, 100 * time.Millisecond, 10, 5, false, false},
		{"idle", time.Hour, 100 * time.Millisecond, 10, 10, false, false},
		{"one outstanding", time.Hour, 100 * time.Millisecond, 10, 5, true, false},
		{"off", time.Hour, 0, 10, 5, false, false},
	}
	for _, c := range cases {
		if got := shouldStartBackgroundSync(start.Add(c.elapsed), start, c.interval, c.written, c.durable, c.inFlight); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTailCacheStageCopyTruncate(t *testing.T) {
	cache := newTailCache(0, 100, nil) // minimum: 4 blocks of 64 KiB
	payload := bytes.Repeat([]byte("z"), 1000)
	for offset := uint64(100); offset < 600; offset++ {
		cache.stage(offset, 1, 2, payload)
		cache.markWritten(offset + 1)
	}
	if cache.first <= 100 || cache.next != 600 || len(cache.blocks) > cache.maxBlocks {
		t.Fatalf("cache range [%d, %d) with %d blocks", cache.first, cache.next, len(cache.blocks))
	}
	if _, _, hit := cache.copyOut(100, 600, 1<<20, nil); hit {
		t.Fatal("evicted offset reported as cached")
	}
	out, next, hit := cache.copyOut(590, 600, 2500, nil)
	if !hit || next != 593 || len(out) != 3*encodedSize(1000) {
		t.Fatalf("copyOut: hit %v next %d bytes %d", hit, next, len(out))
	}
	if _, next, _ := cache.copyOut(590, 600, 0, nil); next != 591 {
		t.Fatalf("zero budget copied up to %d, want one record", next)
	}
	cache.truncateFrom(595)
	if _, next, _ := cache.copyOut(590, 700, 1<<20, nil); next != 595 {
		t.Fatalf("after truncate copied up to %d, want 595", next)
	}
	cache.stage(595, 1, 2, []byte("after"))
	out, _, _ = cache.copyOut(595, 596, 1<<20, nil)
	if record, _, err := decodeRecord(out); err != nil || string(record.Body) != "after" {
		t.Fatalf("record staged after truncate: %+v %v", record, err)
	}
	cache.restartAt(1000)
	if _, _, hit := cache.copyOut(595, 596, 1, nil); hit || cache.first != 1000 || cache.next != 1000 {
		t.Fatal("restart kept records")
	}
}
