package client

// The pending table of one connection: every request waiting for its
// reply and every publish waiting for its confirm. (A publish refused with
// not_owner leaves it for its queue's lane, lane.go.)
//
// It is the one piece of connection state that several goroutines touch:
// callers register requests, the writer registers publishes as it encodes
// them, the reader takes entries as answers arrive, and whoever sees the
// connection end first fails everything at once. Its mutex guards only the
// maps and is never held while blocking or while completing an entry.
//
// Invariant: an entry is taken out exactly once, by an answer or by
// failAll; after failAll every add is refused with the failure, so nothing
// registered on a dead connection can wait forever.

import (
	"sync"

	"github.com/fibrilmq/fibril/wire"
)

// reply is what a waiting request receives.
type reply struct {
	frame    wire.Frame          // the success reply (decoded, owns its memory)
	binding  *binding            // subscribe-ok: the subscription's binding on this connection
	redirect *wire.RedirectEpoch // the queue is owned by another node (an FRD1 has epoch 0)
	err      error               // *ServerError, or the connection's failure
}

// pendingRequest is a request waiting for its reply.
type pendingRequest struct {
	done         chan reply    // capacity 1, so the reader never blocks on it
	subscription *Subscription // subscribe: bound by the reader on subscribe-ok
	unsubscribe  *binding      // unsubscribe: unbound by the reader before it answers
}

type pendingTable struct {
	mu        sync.Mutex
	failure   error
	requests  map[uint64]*pendingRequest
	publishes map[uint64]*PublishFuture // by wire sequence number
}

func newPendingTable() *pendingTable {
	return &pendingTable{
		requests:  make(map[uint64]*pendingRequest),
		publishes: make(map[uint64]*PublishFuture),
	}
}

// addRequest registers a request; it fails with the connection's failure
// once the connection has ended.
func (t *pendingTable) addRequest(id uint64, request *pendingRequest) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failure != nil {
		return t.failure
	}
	if _, taken := t.requests[id]; taken {
		panic("client: request id registered twice")
	}
	t.requests[id] = request
	return nil
}

// takeRequest removes and returns the request with the id, or nil.
func (t *pendingTable) takeRequest(id uint64) *pendingRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	request := t.requests[id]
	delete(t.requests, id)
	return request
}

// addPublish registers a publish under its wire sequence number.
func (t *pendingTable) addPublish(seq uint64, future *PublishFuture) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failure != nil {
		return t.failure
	}
	if _, taken := t.publishes[seq]; taken {
		panic("client: publish sequence number registered twice")
	}
	t.publishes[seq] = future
	return nil
}

// takePublishRange removes the publishes whose sequence numbers lie in
// [first, last] and appends them to dst. It walks whichever is smaller, the
// range or the table, so a huge range from a confused peer costs no more
// than the table.
func (t *pendingTable) takePublishRange(first, last uint64, dst []*PublishFuture) []*PublishFuture {
	t.mu.Lock()
	defer t.mu.Unlock()
	if last-first < uint64(len(t.publishes)) {
		for seq := first; ; seq++ {
			if future, ok := t.publishes[seq]; ok {
				delete(t.publishes, seq)
				dst = append(dst, future)
			}
			if seq == last {
				break
			}
		}
		return dst
	}
	for seq, future := range t.publishes {
		if seq >= first && seq <= last {
			delete(t.publishes, seq)
			dst = append(dst, future)
		}
	}
	return dst
}

// removePublish takes out the publish registered under seq when it is
// future (a deadline passed); false when it is not there (taken by a
// confirm, a refusal or failAll).
func (t *pendingTable) removePublish(seq uint64, future *PublishFuture) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.publishes[seq] != future {
		return false
	}
	delete(t.publishes, seq)
	return true
}

// failAll refuses every later add with failure and returns everything that
// was pending, for the caller to complete outside the lock. Only the first
// call has an effect.
func (t *pendingTable) failAll(failure error) ([]*pendingRequest, []*PublishFuture) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failure != nil {
		return nil, nil
	}
	t.failure = failure
	requests := make([]*pendingRequest, 0, len(t.requests))
	for _, request := range t.requests {
		requests = append(requests, request)
	}
	publishes := make([]*PublishFuture, 0, len(t.publishes))
	for _, future := range t.publishes {
		publishes = append(publishes, future)
	}
	clear(t.requests)
	clear(t.publishes)
	return requests, publishes
}

// sizes reports how many requests and publishes are pending, for tests.
func (t *pendingTable) sizes() (requests, publishes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.requests), len(t.publishes)
}
