package queue

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func dedupOptions(window time.Duration, maxEntries uint32) Options {
	return Options{DedupWindow: window, DedupMaxEntries: maxEntries}
}

// publishOne publishes batch and returns its ticket.
func (f *fixture) publishBatch(batch ...Message) Ticket {
	f.t.Helper()
	ticket, err := f.q.Publish(batch)
	if err != nil {
		f.t.Fatal(err)
	}
	return ticket
}

// confirmOf advances (everything durable) and returns ticket's confirm.
func (f *fixture) confirmOf(ticket Ticket) Confirm {
	f.t.Helper()
	for _, c := range f.advance().Confirmed {
		if c.Ticket == ticket {
			return c
		}
	}
	f.t.Fatalf("ticket %d not confirmed", ticket)
	return Confirm{}
}

func produced(producer string, seq uint64, payload string) Message {
	return Message{ProducerID: producer, ProducerSeq: seq, Payload: []byte(payload)}
}

func TestDedupRefusesAStoredProducerPairAndMessageID(t *testing.T) {
	f := newFixture(t, dedupOptions(time.Minute, 0))
	first := f.confirmOf(f.publishBatch(produced("p1", 1, "a"), Message{ID: "order-7", Payload: []byte("b")}))
	if first.Count != 2 || first.Duplicates != nil {
		t.Fatalf("first publish: %+v", first)
	}
	again := f.confirmOf(f.publishBatch(produced("p1", 1, "a"), produced("p1", 2, "c"),
		Message{ID: "order-7", Payload: []byte("b")}, produced("p2", 1, "d")))
	if again.Count != 2 || !slices.Equal(again.Duplicates, []int{0, 2}) || again.Boundary != BoundaryDurable {
		t.Fatalf("retried publish: %+v, want 2 stored and duplicates [0 2] at durable", again)
	}
	if got := f.q.Info().Counts.Ready; got != 4 {
		t.Fatalf("ready %d, want 4 (the duplicates were not stored)", got)
	}
	info := f.q.Info().Dedup
	if info.Entries != 4 || info.DuplicatesRefused != 2 || info.Window != time.Minute || info.MaxEntries != DefaultDedupMaxEntries {
		t.Fatalf("dedup info %+v", info)
	}
}

func TestDedupWithinOneBatchStoresTheFirstCopy(t *testing.T) {
	f := newFixture(t, dedupOptions(time.Minute, 0))
	c := f.confirmOf(f.publishBatch(produced("p", 1, "a"), produced("p", 1, "a"), Message{ID: "x"}, Message{ID: "x"}))
	if c.Count != 2 || !slices.Equal(c.Duplicates, []int{1, 3}) {
		t.Fatalf("confirm %+v", c)
	}
}

func TestDedupNodeAssignedIDsAreNotKeys(t *testing.T) {
	f := newFixture(t, dedupOptions(time.Minute, 0))
	batch := []Message{{Payload: []byte("a")}, {Payload: []byte("b")}}
	ticket, err := f.q.Publish(batch)
	if err != nil {
		t.Fatal(err)
	}
	f.confirmOf(ticket)
	// The same (assigned) ids sent again are the publisher's now, and new.
	if c := f.confirmOf(f.publishBatch(batch...)); c.Count != 2 || c.Duplicates != nil {
		t.Fatalf("confirm %+v", c)
	}
	if got := f.q.Info().Dedup.Entries; got != 2 {
		t.Fatalf("entries %d, want 2: only the publisher-given ids of the second batch", got)
	}
}

func TestDedupWindowExpiresByTheClockAndByTheLog(t *testing.T) {
	f := newFixture(t, dedupOptions(time.Second, 0))
	f.confirmOf(f.publishBatch(produced("p", 1, "a")))
	f.tick(999 * time.Millisecond)
	if c := f.confirmOf(f.publishBatch(produced("p", 1, "a"))); !slices.Equal(c.Duplicates, []int{0}) {
		t.Fatalf("inside the window: %+v", c)
	}
	f.tick(time.Millisecond)
	// The window passed by the clock: the entry no longer matches, though it
	// is still held (no newer publish pushed it out).
	if got := f.q.Info().Dedup.Entries; got != 1 {
		t.Fatalf("entries %d, want 1", got)
	}
	if c := f.confirmOf(f.publishBatch(produced("p", 1, "a"))); c.Duplicates != nil || c.Count != 1 {
		t.Fatalf("after the window: %+v, want a new message", c)
	}
	// That publish's log time pushed the old entry out; the new one holds.
	if info := f.q.Info().Dedup; info.Entries != 1 || info.EvictedEarly != 0 {
		t.Fatalf("dedup info %+v", info)
	}
}

func TestDedupBoundEvictsTheOldestEarly(t *testing.T) {
	f := newFixture(t, dedupOptions(time.Hour, 3))
	for seq := uint64(1); seq <= 5; seq++ {
		f.confirmOf(f.publishBatch(produced("p", seq, "x")))
	}
	info := f.q.Info().Dedup
	if info.Entries != 3 || info.EvictedEarly != 2 {
		t.Fatalf("dedup info %+v, want 3 held and 2 evicted early", info)
	}
	// Sequence 1 left early: sent again it is a new message (the window is
	// shorter than declared once the bound is reached).
	if c := f.confirmOf(f.publishBatch(produced("p", 1, "x"), produced("p", 5, "x"))); c.Count != 1 ||
		!slices.Equal(c.Duplicates, []int{1}) {
		t.Fatalf("confirm %+v", c)
	}
}

func TestDedupDuplicateOfAPendingPublishWaitsForIt(t *testing.T) {
	f := newFixture(t, Options{Mode: Buffered, DedupWindow: time.Minute})
	original := f.publishBatch(produced("p", 1, "a"))
	duplicate := f.publishBatch(produced("p", 1, "a")) // the retry of an unknown outcome, original in flight
	progress, err := f.q.Advance()
	if err != nil {
		t.Fatal(err)
	}
	if len(progress.Confirmed) != 0 {
		t.Fatalf("confirmed %+v before the original was written", progress.Confirmed)
	}
	f.env.log.flush() // written, not durable
	progress, err = f.q.Advance()
	if err != nil {
		t.Fatal(err)
	}
	if len(progress.Confirmed) != 2 || progress.Confirmed[0].Ticket != original || progress.Confirmed[1].Ticket != duplicate {
		t.Fatalf("confirms %+v, want the original then its duplicate", progress.Confirmed)
	}
	for _, c := range progress.Confirmed {
		if c.Boundary != BoundaryWritten {
			t.Fatalf("confirm %+v, want written like the original", c)
		}
	}
	if d := progress.Confirmed[1]; d.Count != 0 || !slices.Equal(d.Duplicates, []int{0}) {
		t.Fatalf("duplicate's confirm %+v", d)
	}
	// Once the original is durable, a duplicate says so.
	f.env.log.sync()
	if c := f.confirmOf(f.publishBatch(produced("p", 1, "a"))); c.Boundary != BoundaryDurable || c.Count != 0 {
		t.Fatalf("confirm after the sync %+v, want a durable duplicate", c)
	}
	if got := f.q.Info().Counts.Ready; got != 1 {
		t.Fatalf("ready %d, want 1", got)
	}
}

func TestDedupDuplicateFailsWithItsOriginal(t *testing.T) {
	f := newFixture(t, dedupOptions(time.Minute, 0))
	f.publishBatch(produced("p", 1, "a"))
	f.publishBatch(produced("p", 1, "a"))
	f.env.log.failPending(fmt.Errorf("disk on fire"))
	if _, err := f.q.Advance(); err == nil {
		t.Fatal("advance after a failed append returned no error")
	}
	if _, err := f.q.Publish([]Message{produced("p", 1, "a")}); err == nil {
		t.Fatal("a fenced queue took a publish")
	}
}

func TestDedupIsOffByDefaultAndWritesTheOldRecords(t *testing.T) {
	f := newFixture(t, Options{})
	c := f.confirmOf(f.publishBatch(produced("p", 1, "a"), produced("p", 1, "a"), Message{ID: "x"}, Message{ID: "x"}))
	if c.Count != 4 || c.Duplicates != nil {
		t.Fatalf("confirm %+v: a queue without a window stores every copy", c)
	}
	for _, r := range f.env.log.recordsBetween(0, 4) {
		if r.Body[0]&^publishFlagHeaders != 0 {
			t.Fatalf("record %d has flags %#x: a queue that does not deduplicate writes no dedup fields", r.Offset, r.Body[0])
		}
	}
	if f.q.Info().Dedup != (DedupInfo{}) {
		t.Fatalf("dedup info %+v", f.q.Info().Dedup)
	}
	if data := f.q.machine.state.EncodeSnapshot(); data[4] != snapshotVersion {
		t.Fatalf("snapshot version %d, want 1", data[4])
	}
}

func TestDedupRecordRoundTrip(t *testing.T) {
	body := appendPublishBody(nil, []byte("id"), 5, []Header{{"k", "v"}}, []byte("pay"),
		publishDedup{producerID: []byte("prod"), producerSeq: 9, idGiven: true})
	var rec Record
	if err := decodeRecord(uint8(KindPublish), body, &rec, true); err != nil {
		t.Fatal(err)
	}
	if string(rec.ProducerID) != "prod" || rec.ProducerSeq != 9 || !rec.IDGiven || string(rec.MessageID) != "id" ||
		string(rec.Payload) != "pay" || len(rec.Headers) != 1 {
		t.Fatalf("decoded %+v", rec)
	}
	keys := dedupKeysOf(nil, &rec)
	if len(keys) != 2 || keys[0] != producerKey([]byte("prod"), 9) || keys[1] != messageIDKey([]byte("id")) {
		t.Fatalf("keys %x", keys)
	}
	bad := slices.Clone(body)
	bad[0] |= 8
	if decodeRecord(uint8(KindPublish), bad, &rec, false) == nil {
		t.Fatal("unknown publish flag accepted")
	}
	zero := appendPublishBody(nil, nil, 5, nil, nil, publishDedup{})
	zero[0] |= publishFlagProducer
	zero = append(zero[:len(zero):len(zero)], 0, 0) // empty producer id, sequence 0
	if decodeRecord(uint8(KindPublish), zero, &rec, false) == nil {
		t.Fatal("producer sequence 0 accepted")
	}
}

func TestDedupKeysDoNotCollideAcrossKinds(t *testing.T) {
	// A message id that spells a producer key's encoding is another key.
	producer := producerKey([]byte("a"), 1)
	spelled := messageIDKey(append([]byte{1, 'a'}, 0, 0, 0, 0, 0, 0, 0, 1))
	if producer == spelled || producerKey([]byte("a"), 1) != producer || producerKey([]byte("a"), 2) == producer {
		t.Fatal("keys collide or are not deterministic")
	}
}

func TestDedupSnapshotRoundTripAndOptions(t *testing.T) {
	f := newFixture(t, dedupOptions(time.Hour, 4))
	for seq := uint64(1); seq <= 6; seq++ {
		f.confirmOf(f.publishBatch(produced("p", seq, "x"), Message{ID: fmt.Sprint("id", seq%2)}))
	}
	state := f.q.machine.state
	data := state.EncodeSnapshot()
	if data[4] != snapshotVersionDedup {
		t.Fatalf("snapshot version %d", data[4])
	}
	decoded, err := DecodeSnapshot(data, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameDedup(&state.dedup, &decoded.dedup); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSnapshot(data, Options{}); err == nil {
		t.Fatal("a dedup snapshot decoded for a queue without deduplication")
	}
	if _, err := DecodeSnapshot(data, dedupOptions(time.Hour, 2)); err == nil {
		t.Fatal("a snapshot with more entries than the bound decoded")
	}
}

func TestDedupDeclarationRoundTrip(t *testing.T) {
	for _, opts := range []Options{{}, dedupOptions(2*time.Minute, 0), dedupOptions(time.Second, 7)} {
		data := encodeDeclaration(opts)
		got, err := decodeDeclaration(data)
		if err != nil {
			t.Fatal(err)
		}
		if !sameDeclaration(got, opts) {
			t.Fatalf("declaration %+v came back as %+v", opts.WithDefaults(), got)
		}
		if want := byte(declarationVersion); opts.DedupWindow == 0 && data[4] != want {
			t.Fatalf("declaration version %d for a queue without deduplication", data[4])
		}
	}
	for _, bad := range []Options{{DedupMaxEntries: 5}, {DedupWindow: -1}, {DedupWindow: time.Microsecond},
		dedupOptions(time.Second, MaxDedupMaxEntries+1)} {
		if bad.Validate() == nil {
			t.Fatalf("options %+v validated", bad)
		}
	}
}

// sameDedup compares two tables entry by entry.
func sameDedup(a, b *dedupTable) error {
	if a.held() != b.held() || a.evictedEarly != b.evictedEarly || len(a.index) != len(b.index) {
		return fmt.Errorf("tables differ: %d/%d entries, %d/%d evicted early, %d/%d keys",
			a.held(), b.held(), a.evictedEarly, b.evictedEarly, len(a.index), len(b.index))
	}
	for i := range a.held() {
		if *a.at(i) != *b.at(i) {
			return fmt.Errorf("entry %d: %+v vs %+v", i, *a.at(i), *b.at(i))
		}
	}
	for key, offset := range a.index {
		if b.index[key] != offset {
			return fmt.Errorf("index of %x: %d vs %d", key, offset, b.index[key])
		}
	}
	return nil
}

// failPending fails every append waiting for its level with err, as a
// failed write or sync does.
func (f *fakeLog) failPending(err error) {
	f.mu.Lock()
	waiters := f.waiters
	f.waiters = nil
	f.mu.Unlock()
	for _, w := range waiters {
		result := w.result
		result.Err = err
		w.done(result)
	}
}

// BenchmarkDedupPublish measures what deduplication adds to one publish
// on the owner: admission (the keys' hashes and lookups) and the apply
// that enters them, with the table at its bound (every publish evicts the
// oldest entry), against the same publishes on a queue without a window.
//
//	go test -run '^$' -bench DedupPublish -benchtime 1000000x ./storage/queue/
func BenchmarkDedupPublish(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts Options
	}{{"off", Options{}}, {"on", dedupOptions(time.Hour, DefaultDedupMaxEntries)}} {
		b.Run(tc.name, func(b *testing.B) {
			state := NewState(tc.opts, 0)
			m := newMachine(state)
			batch := []Message{{ProducerID: "producer-0123456789abcdef", Payload: make([]byte, 16)}}
			var seq uint64
			for b.Loop() {
				seq++
				batch[0].ProducerSeq = seq
				plan := m.planDedup(batch, 1_700_000_000_000)
				p, _, err := m.publish(batch, plan, 1_700_000_000_000)
				if err != nil {
					b.Fatal(err)
				}
				m.advance(p.next(), p.next(), 0, &Progress{})
			}
		})
	}
}
