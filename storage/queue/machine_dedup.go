package queue

// Admission of a publish batch on a queue that deduplicates: which of its
// messages repeat a publish the queue already stored (State's dedup table,
// within the window by the queue's clock) or has appended and not yet
// applied (machine.pendingKeys), or an earlier message of the same batch.
//
// A duplicate is not stored. It is answered with its batch: the batch's
// append (with only its other messages) sits in the machine's FIFO behind
// every append it could repeat, so the batch is confirmed only once the
// originals have applied, and on the boundary that covers them; when their
// append fails, the queue fences and the batch fails with them. A batch
// whose every message is a duplicate makes an append with no records,
// which completes as soon as everything before it has applied.

// dedupPlan is the admission of one batch.
type dedupPlan struct {
	keys        [][]dedupKey // per message; nil when the message has none (or the queue does not deduplicate)
	givenIDs    []bool       // per message: its id is the publisher's (a key)
	duplicate   []bool       // per message; nil when none is a duplicate
	duplicates  []int        // indices of the duplicates, increasing
	dependsNext uint64       // offset after the newest original a duplicate repeats
}

func (p *dedupPlan) isDuplicate(i int) bool { return p.duplicate != nil && p.duplicate[i] }

func (p *dedupPlan) keysOf(i int) []dedupKey {
	if p.keys == nil {
		return nil
	}
	return p.keys[i]
}

// recordDedup is what the publish record of message i carries: its
// producer pair and whether its id is the publisher's, only on a queue
// that deduplicates (other queues write the records they always wrote).
func (p *dedupPlan) recordDedup(i int, msg *Message) publishDedup {
	if p.keys == nil {
		return publishDedup{}
	}
	dedup := publishDedup{idGiven: p.givenIDs[i]}
	if msg.ProducerSeq != 0 {
		dedup.producerID, dedup.producerSeq = []byte(msg.ProducerID), msg.ProducerSeq
	}
	return dedup
}

// planDedup classifies a batch before the queue assigns ids to the
// messages that have none (those are never keys). nowMs is the queue's
// clock, against which stored entries' windows are checked.
func (m *machine) planDedup(batch []Message, nowMs int64) dedupPlan {
	var plan dedupPlan
	table := &m.state.dedup
	if !table.enabled() {
		return plan
	}
	plan.keys = make([][]dedupKey, len(batch))
	plan.givenIDs = make([]bool, len(batch))
	all := make([]dedupKey, 0, 2*len(batch)) // every message's keys, one allocation
	var seen batchKeys
	for i := range batch {
		msg := &batch[i]
		start := len(all)
		if msg.ProducerSeq != 0 {
			all = append(all, producerKey([]byte(msg.ProducerID), msg.ProducerSeq))
		}
		if msg.ID != "" {
			all = append(all, messageIDKey([]byte(msg.ID)))
			plan.givenIDs[i] = true
		}
		keys := all[start:len(all):len(all)]
		if len(keys) == 0 {
			continue
		}
		plan.keys[i] = keys
		if m.repeats(keys, &seen, nowMs, &plan) {
			if plan.duplicate == nil {
				plan.duplicate = make([]bool, len(batch))
			}
			plan.duplicate[i] = true
			plan.duplicates = append(plan.duplicates, i)
			continue
		}
		seen.add(keys)
	}
	return plan
}

// batchKeys are the keys of a batch's messages admitted so far: a slice
// scanned for small batches, a map past batchKeysScanMax.
type batchKeys struct {
	list []dedupKey
	set  map[dedupKey]struct{}
}

const batchKeysScanMax = 32

func (b *batchKeys) add(keys []dedupKey) {
	if b.set == nil && len(b.list)+len(keys) <= batchKeysScanMax {
		b.list = append(b.list, keys...)
		return
	}
	if b.set == nil {
		b.set = make(map[dedupKey]struct{}, 2*batchKeysScanMax)
		for _, key := range b.list {
			b.set[key] = struct{}{}
		}
	}
	for _, key := range keys {
		b.set[key] = struct{}{}
	}
}

func (b *batchKeys) has(key dedupKey) bool {
	if b.set != nil {
		_, ok := b.set[key]
		return ok
	}
	for _, k := range b.list {
		if k == key {
			return true
		}
	}
	return false
}

// repeats reports whether any of keys names a message of this batch, a
// pending publish or a stored one within its window, raising
// plan.dependsNext past the original.
func (m *machine) repeats(keys []dedupKey, seen *batchKeys, nowMs int64, plan *dedupPlan) bool {
	for _, key := range keys {
		if seen.has(key) {
			return true // its original is in this append: the batch's own confirm covers it
		}
		if len(m.pendingKeys) > 0 {
			if offset, ok := m.pendingKeys[key]; ok {
				plan.dependsNext = max(plan.dependsNext, offset+1)
				return true
			}
		}
		if offset, ok := m.state.dedup.lookup(key, nowMs); ok {
			plan.dependsNext = max(plan.dependsNext, offset+1)
			return true
		}
	}
	return false
}
