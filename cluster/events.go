package cluster

// eventListener receives dragonboat's Raft and system events. dragonboat
// calls it on its own goroutines and it must not block, so it only kicks
// the reconcile loop and records transport liveness.
//
// Liveness is the transport's view from this node: a peer is "connected"
// after a Raft message stream to it was established and "unreachable"
// after one failed. A follower streams only to the catalog leader, so its
// view of the other followers stays "unknown" until it needs to reach them;
// the leader's view covers every node. The peer table is written by
// dragonboat's event goroutine and read by Status, so it has its own lock.

import (
	"maps"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4/raftio"
)

// Liveness values reported by Status.
const (
	LivenessSelf        = "self"
	LivenessConnected   = "connected"
	LivenessUnreachable = "unreachable"
	LivenessUnknown     = "unknown"
)

type peerLiveness struct {
	State string
	Since time.Time
	// Failures counts the Raft message streams to the peer that failed
	// (a dial, or a write on a stream), since this node started.
	Failures uint64
}

type eventListener struct {
	kick          func()
	leaderChanged func(shardID uint64)
	now           func() time.Time

	mu    sync.Mutex
	peers map[string]peerLiveness // by raft address; guarded by mu
}

var (
	_ raftio.IRaftEventListener   = (*eventListener)(nil)
	_ raftio.ISystemEventListener = (*eventListener)(nil)
)

func newEventListener(kick func(), leaderChanged func(uint64), now func() time.Time) *eventListener {
	return &eventListener{kick: kick, leaderChanged: leaderChanged, now: now, peers: map[string]peerLiveness{}}
}

func (l *eventListener) LeaderUpdated(info raftio.LeaderInfo) {
	l.leaderChanged(info.ShardID)
	l.kick()
}

func (l *eventListener) setPeer(address, state string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	peer := l.peers[address]
	if state == LivenessUnreachable {
		peer.Failures++
	}
	if peer.State != state {
		peer.State, peer.Since = state, l.now()
	}
	l.peers[address] = peer
}

func (l *eventListener) snapshot() map[string]peerLiveness {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.peers)
}

func (l *eventListener) ConnectionEstablished(info raftio.ConnectionInfo) {
	if !info.SnapshotConnection {
		l.setPeer(info.Address, LivenessConnected)
	}
}

func (l *eventListener) ConnectionFailed(info raftio.ConnectionInfo) {
	if !info.SnapshotConnection {
		l.setPeer(info.Address, LivenessUnreachable)
	}
}

func (l *eventListener) NodeHostShuttingDown()                     {}
func (l *eventListener) NodeUnloaded(raftio.NodeInfo)              {}
func (l *eventListener) NodeDeleted(raftio.NodeInfo)               {}
func (l *eventListener) NodeReady(raftio.NodeInfo)                 { l.kick() }
func (l *eventListener) MembershipChanged(raftio.NodeInfo)         {}
func (l *eventListener) SendSnapshotStarted(raftio.SnapshotInfo)   {}
func (l *eventListener) SendSnapshotCompleted(raftio.SnapshotInfo) {}
func (l *eventListener) SendSnapshotAborted(raftio.SnapshotInfo)   {}
func (l *eventListener) SnapshotReceived(raftio.SnapshotInfo)      {}
func (l *eventListener) SnapshotRecovered(raftio.SnapshotInfo)     {}
func (l *eventListener) SnapshotCreated(raftio.SnapshotInfo)       {}
func (l *eventListener) SnapshotCompacted(raftio.SnapshotInfo)     {}
func (l *eventListener) LogCompacted(raftio.EntryInfo)             {}
func (l *eventListener) LogDBCompacted(raftio.EntryInfo)           {}

// Watch tells the broker that the catalog or a partition owner changed. C
// has room for one signal and a signal is dropped when one is already
// pending, so the node never blocks on a slow watcher; on each signal the
// watcher reads the current state (LocalCatalog, Owner). C is closed when
// the watch or the node is closed.
type Watch struct {
	C       <-chan struct{}
	signals chan struct{}
	node    *Node
}

// Close stops the watch and closes C.
func (w *Watch) Close() {
	w.node.watchMu.Lock()
	defer w.node.watchMu.Unlock()
	if _, found := w.node.watchers[w]; found {
		delete(w.node.watchers, w)
		close(w.signals)
	}
}

// Watch subscribes to catalog and owner changes. The first signal is
// already pending, so a new watcher reads the state once at the start.
func (n *Node) Watch() *Watch {
	signals := make(chan struct{}, 1)
	signals <- struct{}{}
	watch := &Watch{C: signals, signals: signals, node: n}
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	if n.watchers == nil {
		close(signals)
		return watch
	}
	n.watchers[watch] = struct{}{}
	return watch
}

func (n *Node) notifyWatchers() {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	for watch := range n.watchers {
		select {
		case watch.signals <- struct{}{}:
		default: // a signal is already pending; the watcher will read the latest state
		}
	}
}

func (n *Node) closeWatchers() {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	for watch := range n.watchers {
		close(watch.signals)
	}
	n.watchers = nil
}
