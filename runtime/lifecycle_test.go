package runtime

// The lifecycle rules (lifecycle.go): no restart of a stopping child, a
// signal fires once, a stopping actor answers only through
// ReceiveStopping.

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// logBuffer collects a broker's log lines for a test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lines returns the lines that contain every one of words.
func (l *logBuffer) lines(words ...string) []string {
	var found []string
	for _, line := range strings.Split(l.String(), "\n") {
		matches := line != ""
		for _, word := range words {
			matches = matches && strings.Contains(line, word)
		}
		if matches {
			found = append(found, line)
		}
	}
	return found
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeSupervisor records what a policy asked of it.
type fakeSupervisor struct{ restarted, stopped, escalated int }

func (f *fakeSupervisor) Children() []*actor.PID             { return nil }
func (f *fakeSupervisor) EscalateFailure(any, any)           { f.escalated++ }
func (f *fakeSupervisor) RestartChildren(pids ...*actor.PID) { f.restarted += len(pids) }
func (f *fakeSupervisor) StopChildren(pids ...*actor.PID)    { f.stopped += len(pids) }
func (f *fakeSupervisor) ResumeChildren(...*actor.PID)       {}

// A supervisor never restarts a child that was asked to stop, is
// stopping, or whose parent is stopping or restarting; it restarts a
// running child of a running parent; a fatal reason escalates in every
// case.
func TestPolicyNeverRestartsAStoppingChild(t *testing.T) {
	system := NewActorSystem(DiscardLogger())
	registry := NewRegistry(nil)
	parent := &Entry{kind: "parent", stopped: make(chan struct{})}
	registry.add(parent, "parent", nil)
	cases := []struct {
		name        string
		setup       func(child *Entry)
		wantRestart bool
	}{
		{"running child of a running parent", func(*Entry) { parent.BecomePhase(PhaseRunning) }, true},
		{"child asked to stop", func(child *Entry) {
			parent.BecomePhase(PhaseRunning)
			child.stopAsked.Store(uint32(StopDelete))
		}, false},
		{"stopping child", func(child *Entry) {
			parent.BecomePhase(PhaseRunning)
			child.BecomePhase(PhaseStopping)
		}, false},
		{"stopping parent", func(*Entry) { parent.BecomePhase(PhaseStopping) }, false},
		{"restarting parent", func(*Entry) { parent.BecomePhase(PhaseRestarting) }, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := fmt.Sprintf("parent/child%d", i)
			child := &Entry{kind: "child", stopped: make(chan struct{})}
			registry.add(child, path, actor.NewPID(system.Address(), "parent"))
			child.BecomePhase(PhaseRunning)
			c.setup(child)
			observed := 0
			policy := &FailurePolicy{Level: "test", MaxRestarts: 10, Window: time.Minute, Decide: AlwaysRestart,
				Exhausted: actor.StopDirective, Logger: DiscardLogger(), Registry: registry,
				Observe: func(*actor.PID, error, actor.Directive) { observed++ }}
			supervisor := &fakeSupervisor{}
			pid := actor.NewPID(system.Address(), path)
			policy.HandleFailure(system, supervisor, pid, actor.NewRestartStatistics(), errors.New("boom"), nil)
			if c.wantRestart != (supervisor.restarted == 1) || c.wantRestart == (supervisor.stopped == 1) {
				t.Fatalf("restarted %d stopped %d, want restart %v", supervisor.restarted, supervisor.stopped, c.wantRestart)
			}
			if !c.wantRestart && (observed != 0 || StopReason(child.stopAsked.Load()) == StopNotAsked) {
				t.Fatalf("a forced stop was reported as a decision (%d) or left no reason (%v)", observed,
					StopReason(child.stopAsked.Load()))
			}
			fatal := fmt.Errorf("disk gone: %w", ErrFatal)
			policy.HandleFailure(system, supervisor, pid, actor.NewRestartStatistics(), fatal, nil)
			if supervisor.escalated != 1 {
				t.Fatalf("a fatal reason did not escalate (%d)", supervisor.escalated)
			}
		})
	}
}

func TestSignalFiresOnce(t *testing.T) {
	s := NewSignal()
	if !s.Fire(nil) || s.Fire(errors.New("again")) || s.Err() != nil {
		t.Fatalf("second fire took effect: %v", s.Err())
	}
	select {
	case <-s.C():
	default:
		t.Fatal("fired signal not closed")
	}
}

// gatedActor records what its Receive and its ReceiveStopping see, and
// has one child whose Stopping takes a while, so the gated actor stays in
// its stopping phase long enough to be sent messages.
type gatedActor struct {
	entry    *Entry
	seen     chan<- string
	registry *Registry
}

type slowStopper struct{}

func (slowStopper) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Stopping); ok {
		time.Sleep(200 * time.Millisecond)
	}
}

func (g *gatedActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		props := g.registry.Props("slow", DiscardLogger(), func(*Entry) actor.Actor { return slowStopper{} })
		if _, err := ctx.SpawnNamed(props, "slow"); err != nil {
			panic(err)
		}
	case *actor.Stopping:
		g.seen <- "stopping"
		panic("a panic in Stopping must not abandon the stop")
	case string:
		g.seen <- "receive " + msg
	}
}

func (g *gatedActor) ReceiveStopping(ctx actor.Context) {
	if msg, ok := ctx.Message().(string); ok {
		g.seen <- "stopping-receive " + msg
		panic("a panic while stopping is logged, not supervised")
	}
}

// Once an actor is stopping, its Receive sees no user message (they go
// to ReceiveStopping), a panic in Stopping or ReceiveStopping does not
// abandon the stop, and the stop completes.
func TestStoppingActorOnlyAnswersThroughReceiveStopping(t *testing.T) {
	logs := &logBuffer{}
	system := NewActorSystem(logs.logger())
	registry := NewRegistry(nil)
	seen := make(chan string, 16)
	props := registry.Props("gated", logs.logger(), func(entry *Entry) actor.Actor {
		return &gatedActor{entry: entry, seen: seen, registry: registry}
	})
	pid, err := system.Root.SpawnNamed(props, "gated")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child to start", func() bool { return registry.EntryAt("gated/slow") != nil })
	entry := registry.EntryAt("gated")
	system.Root.Send(pid, "before")
	if got := <-seen; got != "receive before" {
		t.Fatalf("saw %q before the stop", got)
	}
	registry.StopActor(system.Root, pid, StopShutdown)
	system.Root.Send(pid, "after")
	want := []string{"stopping", "stopping-receive after"}
	for _, w := range want {
		select {
		case got := <-seen:
			if got != w {
				t.Fatalf("saw %q, want %q", got, w)
			}
		case <-time.After(testWait):
			t.Fatalf("never saw %q", w)
		}
	}
	if !WaitBefore(entry.Stopped(), time.Now().Add(testWait)) {
		t.Fatal("the stop did not complete")
	}
	if entry.StopCause() != StopShutdown || entry.Phase() != PhaseStopped {
		t.Fatalf("cause %v phase %v", entry.StopCause(), entry.Phase())
	}
	if len(logs.lines("panicked while stopping")) != 2 {
		t.Fatalf("the two panics were not each logged once:\n%s", logs)
	}
}
