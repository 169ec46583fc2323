package runtime

// The actor system is configured here once: its own log output is quieted to
// warnings and errors routed through the broker's logger (the library logs
// every recovered panic at INFO without a stack, which our panic-logging
// middleware replaces with one ERROR line that carries the stack), and every
// actor uses the library's unbounded mailbox (flow control is explicit, by
// credits, never by blocking senders on a full mailbox).
//
// Dispatchers are chosen per actor, where Registry.Props builds every
// actor's Props: each actor runs on its own keep-alive dispatcher
// (dispatcher.go), whose goroutine survives from one wake-up to the next
// so a busy actor does not regrow a fresh goroutine's stack each time;
// sessions instead run on a synchronized dispatcher (node.go), on the
// goroutine of whoever sends to them, which measured no slower and saves
// a hand-off each way.

import (
	"context"
	"io"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
)

// NewActorSystem returns an actor system whose library logging goes to
// logger at warning level and above only.
func NewActorSystem(logger *slog.Logger) *actor.ActorSystem {
	quiet := slog.New(minLevelHandler{min: slog.LevelWarn, next: logger.Handler()}).
		With("component", "actor-system")
	return actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }),
	)
}

// DiscardLogger returns a logger that drops everything; the default when a
// caller gives none.
func DiscardLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

// minLevelHandler drops records below min and passes the rest to next.
type minLevelHandler struct {
	min  slog.Level
	next slog.Handler
}

func (h minLevelHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= h.min && h.next.Enabled(ctx, level)
}

func (h minLevelHandler) Handle(ctx context.Context, record slog.Record) error {
	return h.next.Handle(ctx, record)
}

func (h minLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevelHandler{min: h.min, next: h.next.WithAttrs(attrs)}
}

func (h minLevelHandler) WithGroup(name string) slog.Handler {
	return minLevelHandler{min: h.min, next: h.next.WithGroup(name)}
}
