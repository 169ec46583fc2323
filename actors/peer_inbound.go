package actors

// An inbound peer link ("peers/in-<n>"): a link another node dialed here.
// Its reader goroutine decodes each request and hands it straight to the
// partition it names (found by coordination shard id in the shard
// directory), with the link as the way to answer; the partition answers
// by encoding its reply onto the link itself (peerReply), so a push and
// its progress cost no hop through this actor.
//
// Two requests are about the cluster rather than a partition: a member
// query (FXQ1) is answered from the local catalog at once, and a
// replace-member request (FXR1) from a node that lost its data runs the
// membership changes on a goroutine and answers when they are done.
//
// States: serving (from Started), ended (the transport stopped; the actor
// stops itself). Takes: peerEnded from the transport. A request for a
// partition this node does not host is answered at once: a push with
// push-refused (reason unknown), a fetch, a snapshot request or a seal
// with an error frame (unknown_queue). A frame that is not a request closes the link with
// protocol_violation.

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/runtime"
	"github.com/fibrilmq/fibril/wire"
)

// peerReply is how a partition answers a request that came over a peer
// link; *peerTransport implements it.
type peerReply interface {
	sendFrame(frame wire.Frame) error
	// alive reports whether the link can still carry frames.
	alive() bool
}

// Requests an inbound link hands to a partition.
type (
	// replicaPush is an FQR1; Records is a copy the partition owns.
	replicaPush struct {
		from  string
		push  wire.Push
		reply peerReply
	}
	// pageRequest is an FQF1.
	pageRequest struct {
		from  string
		fetch wire.Fetch
		reply peerReply
	}
	// sealRequest is an FQS1.
	sealRequest struct {
		from  string
		seal  wire.Seal
		reply peerReply
	}
)

type peerInbound struct {
	entry     *runtime.Entry
	core      *brokerCore
	transport *peerTransport
	requests  uint64
}

func newPeerInbound(entry *runtime.Entry, core *brokerCore, transport *peerTransport) *peerInbound {
	return &peerInbound{entry: entry, core: core, transport: transport}
}

func (p *peerInbound) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		self, system := ctx.Self(), ctx.ActorSystem()
		p.transport.start(p.requestHandler(system), func(err error) {
			system.Root.Send(self, peerEnded{err: err})
		})
	case peerEnded:
		if msg.err != nil {
			p.core.logger.Info("inbound peer link ended", "peer", p.transport.remote.NodeID, "err", msg.err)
		}
		p.core.registry.StopActor(ctx, ctx.Self(), runtime.StopDone)
	case *actor.Stopping:
		p.transport.close(nil)
	}
	p.entry.SetSummary(fmt.Sprintf("from %s (instance %x)", p.transport.remote.NodeID, p.transport.remote.Instance))
}

// requestHandler routes requests on the reader goroutine.
func (p *peerInbound) requestHandler(system *actor.ActorSystem) peerFrameHandler {
	from, transport, shards := p.transport.remote.NodeID, p.transport, p.core.shards
	return func(tag wire.Tag, body []byte) error {
		switch tag {
		case wire.TagPush:
			var push wire.Push
			if err := push.Decode(body); err != nil {
				return err
			}
			pid := shards.lookup(push.Partition)
			if pid == nil {
				return transport.sendFrame(&wire.PushRefused{Partition: push.Partition, Epoch: push.Epoch,
					Instance: p.core.config.Cluster.Instance(), Reason: wire.RefusedUnknown,
					Message: "this node does not host a replica of the partition"})
			}
			push.Records = append([]byte(nil), push.Records...) // the body is reused by the next read
			system.Root.Send(pid, replicaPush{from: from, push: push, reply: transport})
		case wire.TagFetch:
			var fetch wire.Fetch
			if err := fetch.Decode(body); err != nil {
				return err
			}
			if pid := shards.lookup(fetch.Partition); pid != nil {
				system.Root.Send(pid, pageRequest{from: from, fetch: fetch, reply: transport})
				return nil
			}
			return transport.sendFrame(&wire.ErrorFrame{RequestID: fetch.RequestID, Code: wire.CodeUnknownQueue,
				Message: fmt.Sprintf("this node does not host partition %d", fetch.Partition)})
		case wire.TagSnapshotRequest:
			var request wire.SnapshotRequest
			if err := request.Decode(body); err != nil {
				return err
			}
			if pid := shards.lookup(request.Partition); pid != nil {
				system.Root.Send(pid, snapshotRequest{from: from, request: request, reply: transport})
				return nil
			}
			return transport.sendFrame(&wire.ErrorFrame{RequestID: request.RequestID, Code: wire.CodeUnknownQueue,
				Message: fmt.Sprintf("this node does not host partition %d", request.Partition)})
		case wire.TagSeal:
			var seal wire.Seal
			if err := seal.Decode(body); err != nil {
				return err
			}
			if pid := shards.lookup(seal.Partition); pid != nil {
				system.Root.Send(pid, sealRequest{from: from, seal: seal, reply: transport})
				return nil
			}
			return transport.sendFrame(&wire.ErrorFrame{RequestID: seal.RequestID, Code: wire.CodeUnknownQueue,
				Message: fmt.Sprintf("this node does not host partition %d", seal.Partition)})
		case wire.TagMemberQuery:
			var query wire.MemberQuery
			if err := query.Decode(body); err != nil {
				return err
			}
			return transport.sendFrame(p.memberAnswer(query.RequestID, query.NodeID))
		case wire.TagReplaceMember:
			var replace wire.ReplaceMember
			if err := replace.Decode(body); err != nil {
				return err
			}
			if replace.NodeID != from {
				return transport.sendFrame(&wire.ErrorFrame{RequestID: replace.RequestID, Code: wire.CodeUnauthorized,
					Message: "a node may only ask to replace its own replica"})
			}
			p.replaceMember(replace, transport)
		default:
			return fmt.Errorf("%w: %s is not a request", errProtocolViolation, tag)
		}
		return nil
	}
}

// memberAnswer answers FXQ1 from the local catalog replica.
func (p *peerInbound) memberAnswer(requestID uint64, nodeID string) wire.Frame {
	initialized, replicaID, err := p.core.config.Cluster.CatalogMember(nodeID)
	if err != nil {
		return &wire.Member{RequestID: requestID} // not ready: as good as not initialised yet
	}
	return &wire.Member{RequestID: requestID, Initialized: initialized, ReplicaID: replicaID}
}

// replaceMemberTimeout bounds the membership changes of one replacement.
const replaceMemberTimeout = 2 * time.Minute

// replaceMember replaces a node's replica on a goroutine (it blocks on
// Raft) and answers with the catalog's record afterwards.
func (p *peerInbound) replaceMember(replace wire.ReplaceMember, transport *peerTransport) {
	node, logger, routines := p.core.config.Cluster, p.core.logger, &p.core.peerRoutines
	routines.Add(1)
	go func() {
		defer routines.Done()
		ctx, cancel := context.WithTimeout(context.Background(), replaceMemberTimeout)
		defer cancel()
		logger.Warn("replacing the replica of a node that lost its data", "node", replace.NodeID, "replica_id", replace.ReplicaID)
		if err := node.ReplaceReplica(ctx, replace.NodeID, replace.ReplicaID); err != nil {
			_ = transport.sendFrame(&wire.ErrorFrame{RequestID: replace.RequestID, Code: wire.CodeUnavailable, Message: err.Error()})
			return
		}
		_ = transport.sendFrame(&wire.Member{RequestID: replace.RequestID, Initialized: true, ReplicaID: replace.ReplicaID})
	}()
}
