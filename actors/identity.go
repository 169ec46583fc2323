package actors

// The Raft identity a cluster node starts with (docs/protocol.md 8.6).
//
// A node keeps its Raft replica id in <data_dir>/identity, a small JSON
// file written (atomically, then synced) the first time it starts. Start
// reads it; without one:
//
//   - a data directory that already holds Raft state (a node from before
//     identity files) keeps the replica id derived from its node id;
//   - an empty data directory asks its peers what their catalog records
//     about it (FXQ1), answering their own questions meanwhile with
//     "not initialised" (a new cluster's nodes start one after another).
//     If a peer has an initialised catalog, the cluster knows this node
//     and its data is not where the config says: the volume that holds
//     it is not mounted, the config names the wrong path, or the data is
//     lost. The node refuses to start (ErrEmptyDataDir) unless it was
//     told that its data is lost (IdentityOptions.RejoinEmpty, `fibril
//     serve --rejoin-empty`): a new replica that silently took the place
//     of a copy whose disk is merely missing would throw that copy away.
//     Told so, it picks a new replica id, writes it to the identity file
//     marked pending, asks that peer to replace its old one (FXR1),
//     rewrites the file without the mark once the peer answers, and
//     starts joining. A start that finds the mark asks again under the
//     same id without being told again (the peer may have gone on after
//     this node gave up; cluster/replace.go makes a rerun finish the job),
//     so one lost data directory never leaves two new ids in the shards.
//     If every peer says the catalog is not initialised, the cluster is
//     new and it starts as an initial member under the id derived from
//     its node id. A node that reaches no peer within the deadline does
//     not start (unless it is the only node).
//
// One initialised catalog is no sign of lost data: that of a cluster
// formed while this node was starting. Its peers could decide the cluster
// was new only once this node had answered them "not initialised", so
// when every peer has answered and each one that answers "initialised"
// asked this node during this start, the node held nothing the cluster
// knows of, and it joins as a new replica without being told. A peer
// whose initialised answer comes without its question refuses the start
// at once.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/wire"
)

// identityFileName is the identity file in a node's data directory.
const identityFileName = "identity"

// identityProbeInterval is how often an empty node asks its peers again.
const identityProbeInterval = 300 * time.Millisecond

// ErrIdentityUndecided is returned when an empty node reached no peer.
var ErrIdentityUndecided = errors.New("actors: cannot tell a new cluster from one this node lost its data in")

// ErrEmptyDataDir is returned when a node starts on an empty data
// directory that the cluster's catalog knows, without being told that its
// data is lost (IdentityOptions.RejoinEmpty).
var ErrEmptyDataDir = errors.New("actors: the data directory is empty but the cluster knows this node")

// IdentityOptions are how PrepareClusterIdentity may decide.
type IdentityOptions struct {
	// Logger receives the decision's warnings; nil: slog.Default().
	Logger *slog.Logger
	// RejoinEmpty says the node's data is lost for good: on an empty data
	// directory that the cluster knows it rejoins as a new replica, which
	// copies every partition it replicates from the other nodes. Without
	// it such a start is refused (ErrEmptyDataDir). It has no effect on a
	// data directory that holds an identity or Raft state.
	RejoinEmpty bool
}

// nodeIdentity is the identity file's content.
type nodeIdentity struct {
	NodeID    string `json:"node_id"`
	ReplicaID uint64 `json:"replica_id"`
	// Joined says the node rejoined under this id after losing its data.
	Joined bool `json:"joined,omitempty"`
	// Pending says the node asked a peer to replace its replica by
	// ReplicaID and never heard it done: it asks again under the same id
	// before it starts. Files written before it existed load as false.
	Pending bool `json:"pending,omitempty"`
}

// ClusterIdentity is how a node starts its cluster node: StartOptions'
// ReplicaID and Join.
type ClusterIdentity struct {
	ReplicaID uint64
	Join      bool
	// Decided says how: "identity file", "existing raft state", "new
	// cluster", "rejoined after losing its data (replaced by <node>)" or
	// "joined the cluster its peers formed while it started (replaced by
	// <node>)".
	Decided string
}

// PrepareClusterIdentity decides the Raft identity node nodeID of config
// starts with; see the file comment. It blocks until decided or ctx ends.
func PrepareClusterIdentity(ctx context.Context, config *cluster.Config, nodeID string, options IdentityOptions) (ClusterIdentity, error) {
	self, err := config.Node(nodeID)
	if err != nil {
		return ClusterIdentity{}, err
	}
	path := filepath.Join(self.DataDir, identityFileName)
	stored, found, err := readIdentity(path)
	if err == nil && found && stored.NodeID != nodeID {
		err = fmt.Errorf("%w: %s belongs to node %q, not %q", ErrInvalidConfig, path, stored.NodeID, nodeID)
	}
	if err != nil || (found && !stored.Pending) {
		// A node that rejoined under a new id restarts as a joined
		// replica: dragonboat refuses to restart one given the initial
		// members ("restarting previously joined node").
		return ClusterIdentity{ReplicaID: stored.ReplicaID, Join: stored.Joined, Decided: "identity file"}, err
	}
	derived := self.ReplicaID()
	if !found && (hasRaftState(filepath.Join(self.DataDir, "raft")) || len(config.Nodes) == 1) {
		decided := "existing raft state"
		if len(config.Nodes) == 1 {
			decided = "new cluster of one node"
		}
		return ClusterIdentity{ReplicaID: derived, Decided: decided}, writeIdentity(path, nodeIdentity{NodeID: nodeID, ReplicaID: derived})
	}
	secret, err := config.PeerSecret()
	if err != nil {
		return ClusterIdentity{}, err
	}
	peerTLS, err := self.PeerTLS()
	if err != nil {
		return ClusterIdentity{}, err
	}
	logger := options.Logger
	if logger == nil {
		logger = slog.Default()
	}
	prober := &identityProber{config: config, self: self, logger: logger, peerTLS: peerTLS, path: path,
		rejoinEmpty: options.RejoinEmpty, askedBy: map[string]bool{}, identity: peerIdentity{
			clusterID: config.Cluster.DeploymentID, nodeID: nodeID, instance: cluster.NewReplicaID(), secret: secret}}
	if found { // pending: a replacement was asked for and never answered
		prober.pendingReplicaID = stored.ReplicaID
	}
	identity, err := prober.run(ctx)
	if err != nil {
		return ClusterIdentity{}, err
	}
	return identity, writeIdentity(path, nodeIdentity{NodeID: nodeID, ReplicaID: identity.ReplicaID, Joined: identity.Join})
}

func readIdentity(path string) (nodeIdentity, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nodeIdentity{}, false, nil
	}
	if err != nil {
		return nodeIdentity{}, false, err
	}
	var identity nodeIdentity
	if err := json.Unmarshal(data, &identity); err != nil || identity.ReplicaID == 0 {
		return nodeIdentity{}, false, fmt.Errorf("%w: %s is damaged (%v); restore it or remove the whole data directory", ErrInvalidConfig, path, err)
	}
	return identity, true, nil
}

// writeIdentity writes the file atomically and syncs it and its directory.
func writeIdentity(path string, identity nodeIdentity) error {
	data, err := json.Marshal(identity)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	temporary := path + ".tmp"
	file, err := os.OpenFile(temporary, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := file.Write(append(data, '\n')); err != nil {
		file.Close()
		return err
	}
	if err := file.Sync(); err != nil {
		file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return err
	}
	if err := os.Rename(temporary, path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// hasRaftState reports whether a Raft directory holds anything.
func hasRaftState(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// identityProber asks an empty node's peers about it.
type identityProber struct {
	config   *cluster.Config
	self     cluster.NodeConfig
	identity peerIdentity
	logger   *slog.Logger
	peerTLS  *tlsconfig.Node // the links' mutual TLS; nil: plain (peer_tls.go)
	path     string          // the identity file
	// pendingReplicaID is the id of a replacement asked for at an earlier
	// start and never answered (0: none): this start asks again under it,
	// and never decides the cluster is new.
	pendingReplicaID uint64
	// rejoinEmpty is IdentityOptions.RejoinEmpty.
	rejoinEmpty bool

	mu sync.Mutex
	// askedBy names the peers that asked this node about itself during
	// this start (answerAsUndecided), each answered "not initialised".
	askedBy map[string]bool
}

type memberAnswer struct {
	peer   string
	answer wire.Member
	err    error
}

func (p *identityProber) run(ctx context.Context) (ClusterIdentity, error) {
	listener, err := net.Listen("tcp", p.self.PeerAddress)
	if err != nil {
		return ClusterIdentity{}, fmt.Errorf("actors: listen for peers on %s: %w", p.self.PeerAddress, err)
	}
	answering := p.answerAsUndecided(listener)
	defer func() {
		_ = listener.Close()
		answering.Wait()
	}()
	answered := map[string]bool{}
	initialized := map[string]wire.Member{} // the peers that answered "initialised", with their answer
	for {
		for _, result := range p.askAll(ctx) {
			if result.err != nil {
				continue
			}
			answered[result.peer] = true
			if result.answer.Initialized {
				initialized[result.peer] = result.answer
			}
		}
		if len(initialized) > 0 {
			decided, identity, err := p.decideKnown(ctx, initialized, len(answered) == len(p.config.Nodes)-1)
			if decided {
				return identity, err
			}
		} else if len(answered) == len(p.config.Nodes)-1 && p.pendingReplicaID == 0 {
			return ClusterIdentity{ReplicaID: p.self.ReplicaID(), Decided: "new cluster"}, nil
		}
		select {
		case <-ctx.Done():
			if p.pendingReplicaID != 0 {
				return ClusterIdentity{}, fmt.Errorf("%w: this node asked to be replaced under replica id %d at an earlier start, and none of the %d peers that answered before %v has an initialised catalog; start the other nodes",
					ErrIdentityUndecided, p.pendingReplicaID, len(answered), ctx.Err())
			}
			return ClusterIdentity{}, fmt.Errorf("%w: %d of %d peers answered before %v; start the other nodes (a node that lost its data needs one of them up)",
				ErrIdentityUndecided, len(answered), len(p.config.Nodes)-1, ctx.Err())
		case <-time.After(identityProbeInterval):
		}
	}
}

// decideKnown decides what a node does once peers answered that their
// catalog is initialised (see the file comment): rejoin when told to or
// when a replacement is pending, join when the cluster was formed while
// this node started (allAnswered: every peer has answered during this
// start), refuse when a peer knew the cluster without having asked this
// node. decided is false while it cannot tell yet.
func (p *identityProber) decideKnown(ctx context.Context, initialized map[string]wire.Member, allAnswered bool) (
	decided bool, identity ClusterIdentity, err error) {
	peers := make([]string, 0, len(initialized))
	for peer := range initialized {
		peers = append(peers, peer)
	}
	slices.Sort(peers)
	if p.rejoinEmpty || p.pendingReplicaID != 0 {
		identity, err = p.rejoin(ctx, peers[0], "rejoined after losing its data")
		return true, identity, err
	}
	p.mu.Lock()
	unasked := slices.DeleteFunc(slices.Clone(peers), func(peer string) bool { return p.askedBy[peer] })
	p.mu.Unlock()
	switch {
	case len(unasked) > 0:
		answer := initialized[unasked[0]]
		return true, ClusterIdentity{}, fmt.Errorf("%w: node %s's data directory %s is empty, yet node %s's catalog "+
			"knows it (as replica %d): its data is not where the config says. Likely causes: the volume that holds "+
			"it is not mounted, or data_dir names the wrong path; fix that and start the node again. Only if its data "+
			"is lost for good, let it rejoin as a new replica that copies its queues from the other nodes",
			ErrEmptyDataDir, p.self.ID, p.self.DataDir, unasked[0], answer.ReplicaID)
	case !allAnswered:
		return false, ClusterIdentity{}, nil // a peer that has not answered may know the cluster from before
	}
	identity, err = p.rejoin(ctx, peers[0], "joined the cluster its peers formed while it started")
	return true, identity, err
}

// askAll asks every peer at once and collects the answers.
func (p *identityProber) askAll(ctx context.Context) []memberAnswer {
	var results []memberAnswer
	var mu sync.Mutex
	var asked sync.WaitGroup
	for _, peer := range p.config.Nodes {
		if peer.ID == p.self.ID {
			continue
		}
		asked.Add(1)
		go func() {
			defer asked.Done()
			answer, err := p.ask(ctx, peer, &wire.MemberQuery{RequestID: 1, NodeID: p.self.ID})
			mu.Lock()
			results = append(results, memberAnswer{peer: peer.ID, answer: answer, err: err})
			mu.Unlock()
		}()
	}
	asked.Wait()
	return results
}

// ask sends one request on a fresh link and reads its FXM1 answer.
func (p *identityProber) ask(ctx context.Context, peer cluster.NodeConfig, request wire.Frame) (wire.Member, error) {
	conn, err := dialPeer(ctx, p.peerTLS, peer.PeerAddress)
	if err != nil {
		return wire.Member{}, err
	}
	defer conn.Close()
	// Giving up (ctx ends) ends the wait for the answer at once.
	stopClosing := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stopClosing()
	_, reader, err := dialHandshake(conn, p.identity, peer.ID)
	if err != nil {
		return wire.Member{}, err
	}
	deadline := time.Now().Add(peerHandshakeTimeout)
	if request.Tag() == wire.TagReplaceMember {
		deadline = time.Now().Add(2 * time.Minute) // membership changes in every shard of the node
	}
	if limit, ok := ctx.Deadline(); ok && limit.Before(deadline) {
		deadline = limit
	}
	_ = conn.SetDeadline(deadline)
	writer := wire.NewWriter(conn, peerMaxBodyBytes)
	if err := writeAndFlush(writer, request); err != nil {
		return wire.Member{}, err
	}
	// The peer closes a link silent for peerIdleTimeout, and a replacement
	// blocks on Raft for longer: keep the link alive until the answer.
	// From here on only this goroutine writes.
	stopPings := make(chan struct{})
	defer close(stopPings)
	go func() {
		ticker := time.NewTicker(peerKeepaliveInterval)
		defer ticker.Stop()
		for pings := uint64(1); ; pings++ {
			select {
			case <-stopPings:
				return
			case <-ticker.C:
				if writeAndFlush(writer, &wire.Ping{RequestID: pings}) != nil {
					return
				}
			}
		}
	}()
	for {
		tag, body, err := reader.Next()
		if err != nil {
			return wire.Member{}, err
		}
		switch tag {
		case wire.TagPing, wire.TagPong:
			continue
		case wire.TagError:
			var refusal wire.ErrorFrame
			_ = refusal.Decode(body)
			return wire.Member{}, fmt.Errorf("%s answered %s: %s", peer.ID, refusal.Code, refusal.Message)
		case wire.TagMember:
			var answer wire.Member
			return answer, answer.Decode(body)
		default:
			return wire.Member{}, fmt.Errorf("%w: %s answered with %s", errProtocolViolation, peer.ID, tag)
		}
	}
}

// rejoin asks peer to replace this node's replica with a new id, or with
// the pending one, recorded in the identity file before it asks; how says
// why, for the decision's record.
func (p *identityProber) rejoin(ctx context.Context, peer, how string) (ClusterIdentity, error) {
	peerConfig, err := p.config.Node(peer)
	if err != nil {
		return ClusterIdentity{}, err
	}
	replicaID := p.pendingReplicaID
	if replicaID == 0 {
		replicaID = cluster.NewReplicaID()
		pending := nodeIdentity{NodeID: p.self.ID, ReplicaID: replicaID, Joined: true, Pending: true}
		if err := writeIdentity(p.path, pending); err != nil {
			return ClusterIdentity{}, fmt.Errorf("actors: record the new replica id before asking for it: %w", err)
		}
		p.logger.Warn("this node's data directory is empty but the cluster exists: rejoining as a new replica",
			"replaced_by", peer, "replica_id", replicaID, "data_dir", p.self.DataDir, "reason", how)
	} else {
		p.logger.Warn("asking again for the replacement an earlier start asked for and never heard done",
			"replaced_by", peer, "replica_id", replicaID)
	}
	answer, err := p.ask(ctx, peerConfig, &wire.ReplaceMember{RequestID: 2, NodeID: p.self.ID, ReplicaID: replicaID})
	if err != nil {
		return ClusterIdentity{}, fmt.Errorf("actors: %s could not replace this node's replica: %w", peer, err)
	}
	if answer.ReplicaID != replicaID {
		return ClusterIdentity{}, fmt.Errorf("actors: %s recorded replica id %d, not %d", peer, answer.ReplicaID, replicaID)
	}
	return ClusterIdentity{ReplicaID: replicaID, Join: true, Decided: how + " (replaced by " + peer + ")"}, nil
}

// answerAsUndecided answers other empty nodes' questions while this one
// decides: not initialised.
func (p *identityProber) answerAsUndecided(listener net.Listener) *sync.WaitGroup {
	var routines sync.WaitGroup
	routines.Add(1)
	go func() {
		defer routines.Done()
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			routines.Add(1)
			go func() {
				defer routines.Done()
				defer conn.Close()
				conn, err := acceptPeerTLS(conn, p.peerTLS)
				if err != nil {
					return
				}
				defer conn.Close()
				var certificateRefusal error
				known := peerKnownAndCertified(conn, *p.config, p.self.ID, &certificateRefusal)
				remote, reader, err := acceptHandshake(conn, p.identity, known)
				if err != nil {
					return
				}
				_ = conn.SetDeadline(time.Now().Add(peerHandshakeTimeout))
				writer := wire.NewWriter(conn, peerMaxBodyBytes)
				for {
					tag, body, err := reader.Next()
					if err != nil {
						return
					}
					if tag != wire.TagMemberQuery {
						_ = writeAndFlush(writer, &wire.ErrorFrame{Code: wire.CodeUnavailable,
							Message: "this node is starting and serves no partition yet"})
						return
					}
					var query wire.MemberQuery
					if query.Decode(body) != nil {
						return
					}
					// Recorded before the answer leaves: a peer that decides
					// the cluster is new on it has asked by then.
					p.mu.Lock()
					p.askedBy[remote.NodeID] = true
					p.mu.Unlock()
					_ = writeAndFlush(writer, &wire.Member{RequestID: query.RequestID})
				}
			}()
		}
	}()
	return &routines
}
