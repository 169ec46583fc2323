package actors

// The shard directory maps a queue partition's coordination shard id to
// the partition actor that holds this node's replica of it, for peer links
// (peer_inbound.go) that route requests by partition. The queues manager
// is its only writer; reader goroutines of peer links read it on every
// request, so a lookup takes a read lock and nothing else.

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

type shardDirectory struct {
	mu     sync.RWMutex
	shards map[uint64]*actor.PID
}

func newShardDirectory() *shardDirectory { return &shardDirectory{shards: map[uint64]*actor.PID{}} }

func (d *shardDirectory) lookup(shardID uint64) *actor.PID {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.shards[shardID]
}

func (d *shardDirectory) set(shardID uint64, pid *actor.PID) {
	d.mu.Lock()
	d.shards[shardID] = pid
	d.mu.Unlock()
}

// remove forgets shardID if it still names pid.
func (d *shardDirectory) remove(shardID uint64, pid *actor.PID) {
	d.mu.Lock()
	if current, ok := d.shards[shardID]; ok && current.Id == pid.Id {
		delete(d.shards, shardID)
	}
	d.mu.Unlock()
}
