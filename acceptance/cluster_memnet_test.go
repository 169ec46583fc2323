package acceptance

// The Raft network of an in-process cluster: dragonboat's channel
// transport, with every message to or from a member that lost power
// dropped, on the sending side (the connection refuses it) and on the
// receiving side (the handler never sees it), so nothing a powered-off
// member does after its power loss reaches a peer.
//
// Invariant: while raftNetwork.down[address] is set, no message batch or
// snapshot chunk from or to that Raft address is delivered.

import (
	"context"
	"errors"
	"sync"

	"github.com/lni/dragonboat/v4/config"
	chantransport "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// raftNetwork carries the Raft messages of one in-process cluster and
// drops those of members that are down.
type raftNetwork struct {
	mu   sync.Mutex
	down map[string]bool // by Raft address
}

var errPoweredOff = errors.New("acceptance: the member lost power")

func (n *raftNetwork) blocked(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.down[from] || n.down[to]
}

func (n *raftNetwork) setDown(address string, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[address] = down
}

// networkTransport is the channel transport of one member through the
// network.
type networkTransport struct {
	network *raftNetwork
	self    string
}

func (f *networkTransport) Create(nhConfig config.NodeHostConfig, handler raftio.MessageHandler,
	chunkHandler raftio.ChunkHandler) raftio.ITransport {
	self, network := f.self, f.network
	inner := chantransport.NewChanTransport(nhConfig,
		func(batch pb.MessageBatch) {
			if !network.blocked(batch.SourceAddress, self) {
				handler(batch)
			}
		},
		func(chunk pb.Chunk) bool {
			if network.blocked(self, self) {
				return false
			}
			return chunkHandler(chunk)
		})
	return &blockingTransport{ITransport: inner, network: network, self: self}
}

func (*networkTransport) Validate(string) bool { return true }

type blockingTransport struct {
	raftio.ITransport
	network *raftNetwork
	self    string
}

func (t *blockingTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	if t.network.blocked(t.self, target) {
		return nil, errPoweredOff
	}
	conn, err := t.ITransport.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &blockingConnection{IConnection: conn, transport: t, target: target}, nil
}

func (t *blockingTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	if t.network.blocked(t.self, target) {
		return nil, errPoweredOff
	}
	conn, err := t.ITransport.GetSnapshotConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &blockingSnapshotConnection{ISnapshotConnection: conn, transport: t, target: target}, nil
}

type blockingConnection struct {
	raftio.IConnection
	transport *blockingTransport
	target    string
}

func (c *blockingConnection) SendMessageBatch(batch pb.MessageBatch) error {
	if c.transport.network.blocked(c.transport.self, c.target) {
		return errPoweredOff
	}
	return c.IConnection.SendMessageBatch(batch)
}

type blockingSnapshotConnection struct {
	raftio.ISnapshotConnection
	transport *blockingTransport
	target    string
}

func (c *blockingSnapshotConnection) SendChunk(chunk pb.Chunk) error {
	if c.transport.network.blocked(c.transport.self, c.target) {
		return errPoweredOff
	}
	return c.ISnapshotConnection.SendChunk(chunk)
}
