package actors

// Request routing of a session in cluster mode (see cluster.go). Before a
// request about a queue (publish, subscribe, info, purge, delete) takes the
// single-node path, maybeClusterRoute decides whether this node serves it:
//
//	the queue is open here (the directory lists it)  single-node path (a copy failed with
//	                                                 not_owner counts as not open)
//	the catalog gives it to another node             redirect: FRD1 with the request id;
//	                                                 a publish gets not_owner plus FRD1 with id 0
//	the catalog gives it to this node, not open yet, held in the session's stash until
//	or gives it to no node yet (owner being elected) the manager answers (awaitQueue): the
//	                                                 queue is ready here, or its owner is
//	                                                 elected elsewhere (route again), or no
//	                                                 owner came in time (unavailable)
//	the local catalog does not list it               held while the manager asks the catalog
//	                                                 through Raft (this node's replica may lag);
//	                                                 then served, redirected, or unknown_queue
//	the catalog cannot be read                       unavailable (retryable)
//
// Held requests keep their order: while a queue has a stash, every later
// request about it joins the stash, and the stash is replayed in order, in
// one Receive, when the manager answers.
//
// Invariant: a queue name has a stash entry exactly while one awaitQueue
// for it is unanswered.

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/wire"
)

// clusterSession is a session's cluster-mode state.
type clusterSession struct {
	stash map[string][]any // requests held per queue, in arrival order
	// replaying is set while a stash is replayed after the manager said
	// the queue is not this node's to open (or not in the catalog at all):
	// a second await would loop.
	replaying bool
}

// maybeClusterRoute routes a request in cluster mode; true when it took
// the message (redirected, held or refused it).
func (s *session) maybeClusterRoute(ctx actor.Context, name string, message any) bool {
	node := s.core.config.Cluster
	if node == nil || ValidateQueueName(name) != nil {
		return false // the single-node path refuses a bad name
	}
	if held, ok := s.cluster.stash[name]; ok {
		if len(held) >= maxStashedPerQueue {
			s.failMessage(message, requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
				"queue %q is still opening on this node and too many requests wait for it; retry", name)})
			return true
		}
		s.cluster.stash[name] = append(held, message)
		return true
	}
	route, open := s.core.directory.lookup(name)
	if open && route.failure.code != wire.CodeNotOwner {
		return false // served here, or refused with the reason it failed here
	}
	owner, err := node.Owner(name, 0)
	switch {
	case err == nil && open && route.failure.cutOff && servedByThisProcessOnce(node, owner):
		// This node's view still names this very process the serving
		// owner, yet its copy stepped down cut off from its peers: it has
		// not heard of the next epoch, and nothing here will serve the
		// queue before the cut heals. So the client is told at once
		// (unavailable: not stored) and goes through another node, which
		// knows the new owner; held here, its publishes waited for the
		// queue to open for most of the cut. (An owner that stepped down
		// for another reason, a fenced copy handing over, still holds
		// requests: its peers name the new owner within moments.)
		s.failMessage(message, requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q: this node stopped serving it and has not heard which node serves it now "+
				"(it may be cut off from the other nodes); retry through another node", name)})
	case errors.Is(err, cluster.ErrQueueNotFound) && s.cluster.replaying:
		return false // the manager confirmed it through Raft: unknown_queue
	case err != nil && !errors.Is(err, cluster.ErrOwnerUnknown) && !errors.Is(err, cluster.ErrQueueNotFound):
		s.failMessage(message, failureOfClusterError(err))
	case err == nil && !owner.IsSelf && !s.core.peerUnreachable(owner.NodeID):
		s.redirect(message, name, owner)
	case err == nil && !owner.IsSelf && s.cluster.replaying:
		s.failMessage(message, requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q: its owner %s is unreachable and no other node has taken it over yet; retry", name, owner.NodeID)})
	case s.cluster.replaying:
		s.failMessage(message, requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q is not open on this node yet; retry", name)})
	default:
		if s.cluster.stash == nil {
			s.cluster.stash = make(map[string][]any)
		}
		s.cluster.stash[name] = []any{message}
		ctx.Send(s.core.queuesManager, awaitQueue{replyTo: ctx.Self(), name: name})
	}
	return true
}

// redirect answers a request about a queue owned by another node.
func (s *session) redirect(message any, name string, owner cluster.OwnerInfo) {
	redirect := wire.Redirect{Queue: name, NodeID: owner.NodeID, Address: owner.ClientAddress}
	if publish, ok := message.(inPublish); ok {
		s.rejectPublish(publish, requestFailure{code: wire.CodeNotOwner, message: fmt.Sprintf(
			"queue %q is owned by node %s at %s", name, owner.NodeID, owner.ClientAddress)})
	} else {
		redirect.RequestID = routedRequestID(message)
	}
	if s.version >= 2 {
		s.push(&wire.RedirectEpoch{Redirect: redirect, Epoch: owner.Epoch})
		return
	}
	s.push(&redirect)
}

// notOwnerRedirect completes a partition's not_owner refusal of a publish
// (a copy that stopped owning the queue while the publish waited for it)
// as docs/protocol.md 4.6 promises: not_owner with a redirect (id 0)
// naming the owner, whose epoch this node knows. When it knows no owner it
// can reach, the refusal becomes unavailable (211, not stored, retry): a
// not_owner without a redirect would leave a client waiting for one.
func (s *session) notOwnerRedirect(name string, failure requestFailure) (requestFailure, wire.Frame) {
	node := s.core.config.Cluster
	if node == nil {
		return failure, nil
	}
	owner, err := node.Owner(name, 0)
	if err != nil || owner.IsSelf || owner.NodeID == "" || s.core.peerUnreachable(owner.NodeID) {
		return requestFailure{code: wire.CodeUnavailable, message: fmt.Sprintf(
			"queue %q changed owner and no new owner is reachable from this node yet; retry (%s)", name, failure.message)}, nil
	}
	redirect := wire.Redirect{Queue: name, NodeID: owner.NodeID, Address: owner.ClientAddress}
	if s.version >= 2 {
		return failure, &wire.RedirectEpoch{Redirect: redirect, Epoch: owner.Epoch}
	}
	return failure, &redirect
}

// failMessage answers a request with a failure.
func (s *session) failMessage(message any, failure requestFailure) {
	if publish, ok := message.(inPublish); ok {
		s.rejectPublish(publish, failure)
		return
	}
	if resume, ok := message.(inResume); ok {
		s.fences.resume(resume.frame.Queue) // it has no answer to refuse it with
		return
	}
	s.push(failure.frame(routedRequestID(message)))
}

// routedRequestID is the request id of a routed request (0 for a publish).
func routedRequestID(message any) uint64 {
	switch msg := message.(type) {
	case inSubscribe:
		return msg.frame.RequestID
	case inQueueInfo:
		return msg.frame.RequestID
	case inPurgeQueue:
		return msg.frame.RequestID
	case inChangeMode:
		return msg.frame.RequestID
	case inDeleteQueue:
		return msg.frame.RequestID
	}
	return 0
}

// receiveCluster handles the cluster-mode answers; false for others.
func (s *session) receiveCluster(ctx actor.Context, message any) bool {
	switch msg := message.(type) {
	case queueAwaited:
		s.queueAwaited(ctx, msg)
	case clusterDeclareAnswer:
		s.clusterDeclareAnswered(msg)
	default:
		return false
	}
	return true
}

// queueAwaited replays, in order, the requests held for a queue.
func (s *session) queueAwaited(ctx actor.Context, msg queueAwaited) {
	held := s.cluster.stash[msg.name]
	delete(s.cluster.stash, msg.name)
	s.cluster.replaying = msg.reroute
	defer func() { s.cluster.replaying = false }()
	for _, message := range held {
		if msg.failure.failed() {
			s.failMessage(message, msg.failure)
			continue
		}
		s.receiveOpen(ctx, message)
	}
}

// clusterDeclareAnswered replies to a declare answered by the catalog:
// always FDK2, with the effective mode and policy, whether or not the
// declare named a mode (a mode-less declare in a cluster makes a buffered
// queue unless the cluster's default policy says otherwise).
func (s *session) clusterDeclareAnswered(msg clusterDeclareAnswer) {
	result := msg.result
	if result.failure.failed() {
		s.push(result.failure.frame(result.requestID))
		return
	}
	s.push(&wire.DeclareOKMode{RequestID: result.requestID, Created: result.created, Mode: result.mode,
		Policy: msg.policy, Warnings: result.warnings})
}

// clusterDelete sends a delete through the catalog in cluster mode; false
// when the broker runs alone. A queue owned elsewhere is redirected.
func (s *session) clusterDelete(ctx actor.Context, msg inDeleteQueue) bool {
	node := s.core.config.Cluster
	if node == nil {
		return false
	}
	name := msg.frame.Queue
	if route, open := s.core.directory.lookup(name); !open || route.failure.code == wire.CodeNotOwner {
		if owner, err := node.Owner(name, 0); err == nil && !owner.IsSelf {
			s.redirect(msg, name, owner)
			return true
		}
	}
	s.beginBarrier("delete")
	ctx.Send(s.core.queuesManager, clusterDeleteRequest{request: deleteRequest{
		replyTo: ctx.Self(), requestID: msg.frame.RequestID, name: name}})
	return true
}

// returnStashedCredit returns the publish credit of held publishes when
// the session drops them while closing.
func (s *session) returnStashedCredit(message any) {
	awaited, ok := message.(queueAwaited)
	if !ok {
		return
	}
	for _, held := range s.cluster.stash[awaited.name] {
		s.returnCreditOf(held)
	}
	delete(s.cluster.stash, awaited.name)
}

// servedByThisProcessOnce reports whether this node's coordination view
// names this process (its instance, not only its node) as the active
// owner of owner's partition. A restarted process is another instance:
// its view names the old one, and it recovers the partition itself soon.
func servedByThisProcessOnce(node *cluster.Node, owner cluster.OwnerInfo) bool {
	if !owner.IsSelf {
		return false
	}
	view, ok := node.Partition(owner.ShardID)
	return ok && view.State.Serving(owner.NodeID, node.Instance())
}
