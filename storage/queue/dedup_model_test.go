package queue

// A seeded model test of deduplication over the fake log: random batches
// (producer pairs and message ids from small spaces, so repeats are
// common), clock steps, partial writes and syncs, checkpoints, process
// crashes and power losses. After every step it checks that
//   - the live table equals the table a replay of the applied log prefix
//     builds, and the table its own snapshot decodes to (rebuild == live);
//   - the live table equals a naive model computed from the same records
//     with slices and linear scans;
// and when a batch is confirmed, that its duplicates are exactly the ones
// the model predicted when it was published.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

type dedupModelEntry struct {
	key       string // "p/<producer>/<seq>" or "m/<id>"
	offset    uint64
	publishMs int64
}

// dedupModel is the table recomputed from publish records, naively.
type dedupModel struct {
	windowMs     int64
	maxEntries   int
	held         []dedupModelEntry
	evictedEarly uint64
}

func (m *dedupModel) enter(keys []string, offset uint64, publishMs int64) {
	if len(keys) == 0 {
		return
	}
	kept := m.held[:0]
	for _, e := range m.held {
		if e.publishMs+m.windowMs > publishMs {
			kept = append(kept, e)
		}
	}
	m.held = kept
	for _, key := range keys {
		if len(m.held) == m.maxEntries {
			m.held = m.held[1:]
			m.evictedEarly++
		}
		m.held = append(m.held, dedupModelEntry{key, offset, publishMs})
	}
}

// matches reports whether key names a held entry whose window has not
// passed at nowMs (the newest entry for the key counts).
func (m *dedupModel) matches(key string, nowMs int64) bool {
	for i := len(m.held) - 1; i >= 0; i-- {
		if m.held[i].key == key {
			return m.held[i].publishMs+m.windowMs > nowMs
		}
	}
	return false
}

func modelKeys(producer string, seq uint64, id string, idGiven bool) []string {
	var keys []string
	if seq != 0 {
		keys = append(keys, fmt.Sprintf("p/%s/%d", producer, seq))
	}
	if idGiven {
		keys = append(keys, "m/"+id)
	}
	return keys
}

func hashedModelKey(key string) dedupKey {
	var producer string
	var seq uint64
	if n, _ := fmt.Sscanf(key, "p/%1s/%d", &producer, &seq); n == 2 {
		return producerKey([]byte(producer), seq)
	}
	return messageIDKey([]byte(key[2:]))
}

type dedupRun struct {
	t       *testing.T
	rng     *rand.Rand
	opts    Options
	env     *fakeEnv
	q       *Queue
	nowMs   int64
	pending map[Ticket][]int // predicted duplicate indices of unconfirmed batches
	// stored are the keys of predicted-stored messages not yet applied, by
	// predicted offset.
	stored     map[uint64][]string
	confirmed  int
	duplicates int
}

func (r *dedupRun) clock() time.Time { return time.UnixMilli(r.nowMs) }

func TestDedupModel(t *testing.T) {
	// Fixed seeds, plus a fresh one each run (printed when it fails);
	// FIBRIL_DEDUP_SEED replays one.
	seeds := []uint64{1, 2, 3, 4, 5, 6, seedFromEnv(t, "FIBRIL_DEDUP_SEED")}
	if os.Getenv("FIBRIL_DEDUP_SEED") != "" {
		seeds = seeds[len(seeds)-1:]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runDedupModel(t, seed, 600) })
	}
}

func runDedupModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x51ed))
	opts := Options{Mode: []Mode{Durable, Buffered}[rng.IntN(2)],
		DedupWindow: time.Duration(100*(5+rng.IntN(20))) * time.Millisecond, DedupMaxEntries: uint32(3 + rng.IntN(20))}
	r := &dedupRun{t: t, rng: rng, opts: opts.WithDefaults(), env: newFakeEnv(rng), nowMs: 1_700_000_000_000,
		pending: map[Ticket][]int{}, stored: map[uint64][]string{}}
	defer func() {
		if t.Failed() {
			t.Logf("SEED=%d (FIBRIL_DEDUP_SEED), options %+v", seed, r.opts)
		}
	}()
	q, err := r.env.open(r.opts, r.clock)
	if err != nil {
		t.Fatal(err)
	}
	r.q = q
	for step := 0; step < steps && !t.Failed(); step++ {
		r.step()
		r.check(step)
	}
	if r.duplicates == 0 || r.confirmed == 0 {
		t.Errorf("seed %d: %d confirmed batches, %d duplicates: the run exercised nothing", seed, r.confirmed, r.duplicates)
	}
	_ = r.q.Close()
}

func (r *dedupRun) step() {
	switch n := r.rng.IntN(100); {
	case n < 45:
		r.publish()
	case n < 60:
		r.env.flush(r.q)
	case n < 70:
		r.env.sync(r.q)
	case n < 85:
		r.nowMs += 100 * int64(r.rng.IntN(4)) // whole steps, so windows end exactly on them
	case n < 90:
		r.checkpoint()
	case n < 95:
		r.restart(r.rng.IntN(2) == 0)
	}
	r.advance()
}

// publish sends a batch of 1-4 messages drawn from small key spaces and
// records which the model expects to be duplicates.
func (r *dedupRun) publish() {
	model := r.modelOfLog()
	batch := make([]Message, 1+r.rng.IntN(4))
	seen := map[string]bool{}
	var predicted []int
	base := r.q.machine.nextOffset
	stored := 0
	storedKeys := map[uint64][]string{}
	for i := range batch {
		m := Message{Payload: []byte{byte(i)}}
		if r.rng.IntN(3) > 0 {
			m.ProducerID, m.ProducerSeq = []string{"a", "b"}[r.rng.IntN(2)], 1+r.rng.Uint64N(12)
		}
		if r.rng.IntN(3) == 0 {
			m.ID = fmt.Sprint("id", r.rng.IntN(10))
		}
		batch[i] = m
		keys := modelKeys(m.ProducerID, m.ProducerSeq, m.ID, m.ID != "")
		if r.isDuplicate(keys, seen, model) {
			predicted = append(predicted, i)
			continue
		}
		for _, key := range keys {
			seen[key] = true
		}
		storedKeys[base+uint64(stored)] = keys
		stored++
	}
	ticket, err := r.q.Publish(batch)
	if err != nil {
		r.t.Fatalf("publish: %v", err)
	}
	r.pending[ticket] = predicted
	for offset, keys := range storedKeys {
		r.stored[offset] = keys
	}
}

func (r *dedupRun) isDuplicate(keys []string, seen map[string]bool, model *dedupModel) bool {
	for _, key := range keys {
		if seen[key] || model.matches(key, r.nowMs) {
			return true
		}
		for offset, pendingKeys := range r.stored {
			if offset >= r.q.machine.state.Next() && slices.Contains(pendingKeys, key) {
				return true
			}
		}
	}
	return false
}

func (r *dedupRun) advance() {
	progress, err := r.q.Advance()
	if err != nil {
		r.t.Fatalf("advance: %v", err)
	}
	for _, c := range progress.Confirmed {
		predicted, ok := r.pending[c.Ticket]
		if !ok {
			r.t.Fatalf("confirm of unknown ticket %d", c.Ticket)
		}
		delete(r.pending, c.Ticket)
		if !slices.Equal(c.Duplicates, predicted) && !(len(c.Duplicates) == 0 && len(predicted) == 0) {
			r.t.Fatalf("ticket %d: duplicates %v, the model predicted %v", c.Ticket, c.Duplicates, predicted)
		}
		r.confirmed++
		r.duplicates += len(c.Duplicates)
	}
	if progress.Checkpoint != nil {
		err := progress.Checkpoint.Run(context.Background())
		if err := r.q.CheckpointDone(progress.Checkpoint, err); err != nil {
			r.t.Fatalf("checkpoint: %v", err)
		}
	}
}

func (r *dedupRun) checkpoint() {
	if _, err := r.q.Checkpoint(); err != nil && err != ErrCheckpointInProgress {
		r.t.Fatalf("checkpoint: %v", err)
	}
}

// restart crashes the process (or loses power) and opens the queue again:
// what was pending has an unknown outcome.
func (r *dedupRun) restart(powerLoss bool) {
	q, err := r.env.restart(r.q, r.opts, r.clock, powerLoss, r.rng)
	if err != nil {
		r.t.Fatalf("restart (power loss %v): %v", powerLoss, err)
	}
	r.q = q
	clear(r.pending)
	clear(r.stored)
}

// modelOfLog recomputes the table naively from the applied log prefix.
func (r *dedupRun) modelOfLog() *dedupModel {
	model := &dedupModel{windowMs: durationMs(r.opts.DedupWindow), maxEntries: int(r.opts.DedupMaxEntries)}
	var rec Record
	for _, record := range r.env.log.recordsBetween(r.env.log.FirstOffset(), r.q.machine.state.Next()) {
		if err := decodeRecord(record.Type, record.Body, &rec, false); err != nil {
			r.t.Fatalf("record %d: %v", record.Offset, err)
		}
		if rec.Kind == KindPublish {
			model.enter(modelKeys(string(rec.ProducerID), rec.ProducerSeq, string(rec.MessageID), rec.IDGiven),
				record.Offset, rec.PublishMs)
		}
	}
	return model
}

// replayOfLog rebuilds the state from the applied log prefix.
func (r *dedupRun) replayOfLog() *State {
	state := NewState(r.opts, r.env.log.FirstOffset())
	var rec Record
	for _, record := range r.env.log.recordsBetween(r.env.log.FirstOffset(), r.q.machine.state.Next()) {
		if err := decodeRecord(record.Type, record.Body, &rec, false); err != nil {
			r.t.Fatalf("record %d: %v", record.Offset, err)
		}
		state.Apply(record.Offset, &rec, nil)
	}
	return state
}

func (r *dedupRun) check(step int) {
	live := &r.q.machine.state.dedup
	if err := live.checkDedup(); err != nil {
		r.t.Fatalf("step %d: %v", step, err)
	}
	if err := sameDedup(live, &r.replayOfLog().dedup); err != nil {
		r.t.Fatalf("step %d: live table and replay of the log differ: %v", step, err)
	}
	decoded, err := DecodeSnapshot(r.q.machine.state.EncodeSnapshot(), r.opts)
	if err != nil {
		r.t.Fatalf("step %d: snapshot: %v", step, err)
	}
	if err := sameDedup(live, &decoded.dedup); err != nil {
		r.t.Fatalf("step %d: live table and its snapshot differ: %v", step, err)
	}
	model := r.modelOfLog()
	if len(model.held) != live.held() || model.evictedEarly != live.evictedEarly {
		r.t.Fatalf("step %d: model holds %d (%d evicted early), table %d (%d)", step,
			len(model.held), model.evictedEarly, live.held(), live.evictedEarly)
	}
	for i, e := range model.held {
		got := *live.at(i)
		if got.key != hashedModelKey(e.key) || got.offset != e.offset || got.publishMs != e.publishMs {
			r.t.Fatalf("step %d: entry %d is %+v, the model says %+v", step, i, got, e)
		}
	}
}
