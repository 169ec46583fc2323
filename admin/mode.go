package admin

// POST /api/queues/{name}/mode: change an existing queue's mode
// (docs/durability.md, "Changing the mode of an existing queue"). The
// mode comes as ?mode=durable|buffered or a JSON body {"mode": "...",
// "wait_ms": N}; wait_ms (default 10000, at most 300000) bounds how long
// the endpoint waits for the switch.
//
//	200  applied (the switch happened) or unchanged (the queue already ran the mode); the body says which
//	202  recorded, not applied yet: the body's message says what it waits for; ask again to wait more
//	400  no mode, or not durable or buffered
//	404  no such queue
//	409  a change to the other mode is pending
//	421  in a cluster, this node does not serve the queue: ask its owner
//	503  the queue does not serve (fenced, opening, shutting down)
//	501  the node cannot change modes (it is not a QueueModeChanger)
//
// It is a write: with Options.Token set, it needs the token.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/valyala/fasthttp"
)

// QueueModeChanger is an optional capability of a Node: POST
// /api/queues/{name}/mode is served only when the node has it.
type QueueModeChanger interface {
	// ChangeQueueMode switches the queue to mode ("durable" or
	// "buffered") and waits up to wait for the switch. Errors wrap
	// ErrNoSuchQueue, ErrModeChangePending, ErrNotServedHere or
	// ErrInvalidSetting where they apply.
	ChangeQueueMode(name, mode string, wait time.Duration) (ModeChangeView, error)
}

// Errors a QueueModeChanger wraps.
var (
	ErrModeChangePending = errors.New("admin: a mode change is pending")
	ErrNotServedHere     = errors.New("admin: this node does not serve the queue")
)

// ModeChangeView is the body of a mode change's answer.
type ModeChangeView struct {
	Queue    string `json:"queue"`
	Outcome  string `json:"outcome"`  // "applied", "unchanged" or "pending"
	Mode     string `json:"mode"`     // the mode asked for
	Applied  string `json:"applied"`  // the mode in force when answering
	Revision uint64 `json:"revision"` // the revision that sets mode
	Message  string `json:"message,omitempty"`
}

const (
	defaultModeWait = 10 * time.Second
	maxModeWait     = 5 * time.Minute
)

func (s *Server) handleQueueMode(ctx *fasthttp.RequestCtx, name string) {
	changer, ok := s.node.(QueueModeChanger)
	if !ok {
		writeError(ctx, fasthttp.StatusNotImplemented, "this node cannot change a queue's mode")
		return
	}
	var body struct {
		Mode   string `json:"mode"`
		WaitMs *int64 `json:"wait_ms"`
	}
	if raw := ctx.PostBody(); len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, "body: want {\"mode\": \"durable\"|\"buffered\", \"wait_ms\": N}: %v", err)
			return
		}
	}
	if mode := string(ctx.QueryArgs().Peek("mode")); mode != "" {
		body.Mode = mode
	}
	if text := string(ctx.QueryArgs().Peek("wait_ms")); text != "" {
		parsed, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, "wait_ms %q: want a whole number of milliseconds", clip(text))
			return
		}
		body.WaitMs = &parsed
	}
	if body.Mode != "durable" && body.Mode != "buffered" {
		writeError(ctx, fasthttp.StatusBadRequest, "mode %q: want durable or buffered", clip(body.Mode))
		return
	}
	wait := defaultModeWait
	if body.WaitMs != nil {
		if *body.WaitMs < 0 || time.Duration(*body.WaitMs)*time.Millisecond > maxModeWait {
			writeError(ctx, fasthttp.StatusBadRequest, "wait_ms %d: want 0 to %d", *body.WaitMs, maxModeWait.Milliseconds())
			return
		}
		wait = time.Duration(*body.WaitMs) * time.Millisecond
	}
	view, err := changer.ChangeQueueMode(name, body.Mode, wait)
	switch {
	case errors.Is(err, ErrNoSuchQueue):
		writeError(ctx, fasthttp.StatusNotFound, "no queue named %q", clip(name))
	case errors.Is(err, ErrModeChangePending):
		writeError(ctx, fasthttp.StatusConflict, "%v", err)
	case errors.Is(err, ErrNotServedHere):
		writeError(ctx, fasthttp.StatusMisdirectedRequest, "%v", err)
	case errors.Is(err, ErrInvalidSetting):
		writeError(ctx, fasthttp.StatusBadRequest, "%v", err)
	case err != nil:
		writeError(ctx, fasthttp.StatusServiceUnavailable, "mode change of queue %q: %v", clip(name), err)
	default:
		if view.Outcome != "unchanged" {
			s.logger.Info("admin: queue mode change", "queue", name, "mode", body.Mode, "outcome", view.Outcome,
				"revision", view.Revision, "remote", ctx.RemoteAddr().String())
		}
		status := fasthttp.StatusOK
		if view.Outcome == "pending" {
			status = fasthttp.StatusAccepted
		}
		writeJSON(ctx, status, view)
	}
}

// ChangeQueueMode implements QueueModeChanger.
func (n *BrokerNode) ChangeQueueMode(name, mode string, wait time.Duration) (ModeChangeView, error) {
	target := queue.Durable
	switch mode {
	case "durable":
	case "buffered":
		target = queue.Buffered
	default:
		return ModeChangeView{}, fmt.Errorf("%w: mode %q", ErrInvalidSetting, mode)
	}
	change, err := n.broker.ChangeMode(name, target, wait)
	switch {
	case errors.Is(err, actors.ErrUnknownQueue):
		return ModeChangeView{}, fmt.Errorf("%w: %w", ErrNoSuchQueue, err)
	case errors.Is(err, actors.ErrModeChangePending):
		return ModeChangeView{}, fmt.Errorf("%w: %w", ErrModeChangePending, err)
	case errors.Is(err, actors.ErrNotOwner):
		return ModeChangeView{}, fmt.Errorf("%w: %w", ErrNotServedHere, err)
	case err != nil:
		return ModeChangeView{}, err
	}
	return ModeChangeView{Queue: name, Outcome: change.Outcome.String(), Mode: change.Mode.String(),
		Applied: change.Applied.String(), Revision: change.Revision, Message: change.Message}, nil
}
