package admin

// POST /api/queues/{name}/reopen: reopen a fenced or failed queue without
// restarting the node. The node closes the queue and opens it again, which
// runs its log's recovery (a cut back to the last successful sync that a
// storage failure left pending is carried out), and the endpoint answers
// once the queue serves again, with its status.
//
//	200  the queue serves again; the body is its status
//	404  no such queue
//	409  the queue serves (is not fenced or failed): nothing to recover
//	503  the reopen did not bring it back; the error says why
//	501  the node cannot reopen a queue (it is not a QueueReopener)
//
// It is a write: with Options.Token set, it needs the token.

import (
	"errors"
	"fmt"

	"github.com/fibrilmq/fibril/actors"
	"github.com/valyala/fasthttp"
)

// QueueReopener is an optional capability of a Node: POST
// /api/queues/{name}/reopen is served only when the node has it.
type QueueReopener interface {
	// ReopenQueue closes a fenced or failed queue, opens it again and
	// returns once it serves. It returns an error wrapping ErrNoSuchQueue
	// for an unknown queue and one wrapping ErrQueueNotFenced for a queue
	// that serves; any other error means the reopen did not bring it back.
	ReopenQueue(name string) error
}

// ErrQueueNotFenced is wrapped by a QueueReopener's error about a queue
// that serves; the endpoint answers 409.
var ErrQueueNotFenced = errors.New("admin: the queue is not fenced or failed")

func (s *Server) handleQueueReopen(ctx *fasthttp.RequestCtx, name string) {
	reopener, ok := s.node.(QueueReopener)
	if !ok {
		writeError(ctx, fasthttp.StatusNotImplemented, "this node cannot reopen a queue")
		return
	}
	if err := reopener.ReopenQueue(name); err != nil {
		switch {
		case errors.Is(err, ErrNoSuchQueue):
			writeError(ctx, fasthttp.StatusNotFound, "no queue named %q", clip(name))
		case errors.Is(err, ErrQueueNotFenced):
			writeError(ctx, fasthttp.StatusConflict, "%v", err)
		default:
			s.logger.Warn("admin: queue reopen failed", "queue", name, "err", err)
			writeError(ctx, fasthttp.StatusServiceUnavailable, "reopen of queue %q failed: %v", clip(name), err)
		}
		return
	}
	s.logger.Info("admin: queue reopened on request", "queue", name, "remote", ctx.RemoteAddr().String())
	status, ok := s.node.Queue(name)
	if !ok { // deleted right after the reopen
		writeError(ctx, fasthttp.StatusNotFound, "no queue named %q", clip(name))
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, status)
}

// ReopenQueue implements QueueReopener.
func (n *BrokerNode) ReopenQueue(name string) error {
	err := n.broker.ReopenQueue(name)
	switch {
	case errors.Is(err, actors.ErrUnknownQueue):
		return fmt.Errorf("%w: %w", ErrNoSuchQueue, err)
	case errors.Is(err, actors.ErrQueueNotFenced):
		return fmt.Errorf("%w: %w", ErrQueueNotFenced, err)
	}
	return err
}
