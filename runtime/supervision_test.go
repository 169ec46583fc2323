package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// probe is a test actor: it reports lifecycle events, spawns the children it
// is given, and panics with whatever error it is sent.
type probe struct {
	entry    *Entry
	events   chan<- string
	children []probeChild
}

type probeChild struct {
	name   string
	policy *FailurePolicy
}

type spawnProbe struct{ child probeChild }

func (p *probe) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		p.entry.SetSummary("probe up")
		for _, child := range p.children {
			p.spawn(ctx, child)
		}
		p.events <- "started " + ctx.Self().Id
	case *actor.Restarting:
		p.events <- "restarting " + ctx.Self().Id
	case *actor.Stopped:
		p.events <- "stopped " + ctx.Self().Id
	case spawnProbe:
		p.spawn(ctx, msg.child)
	case error:
		panic(msg)
	}
}

func (p *probe) spawn(ctx actor.Context, child probeChild) {
	options := []actor.PropsOption{}
	if child.policy != nil {
		options = append(options, actor.WithSupervisor(child.policy))
	}
	props := testRegistry(ctx).Props("probe", DiscardLogger(), func(entry *Entry) actor.Actor {
		return &probe{entry: entry, events: p.events}
	}, options...)
	if _, err := ctx.SpawnNamed(props, child.name); err != nil {
		panic(err)
	}
}

// registries maps an actor system to its test registry, so probes can spawn
// children into the same registry without a global.
var registries sync.Map

func testRegistry(ctx actor.Context) *Registry {
	registry, _ := registries.Load(ctx.ActorSystem())
	return registry.(*Registry)
}

type testTree struct {
	system   *actor.ActorSystem
	registry *Registry
	events   chan string
	fatals   chan error
	root     *actor.PID
}

// startTestTree spawns a root probe "node" under the fatal guardian with the
// given policy for its children, and the given children.
func startTestTree(t *testing.T, logger *slog.Logger, policy *FailurePolicy, children ...probeChild) *testTree {
	t.Helper()
	tree := &testTree{
		system:   NewActorSystem(logger),
		registry: NewRegistry(nil),
		events:   make(chan string, 64),
		fatals:   make(chan error, 4),
	}
	registries.Store(tree.system, tree.registry)
	t.Cleanup(func() { registries.Delete(tree.system) })
	guardian := &FatalGuardian{Fatal: func(err error) { tree.fatals <- err }}
	props := tree.registry.Props("node", logger, func(entry *Entry) actor.Actor {
		return &probe{entry: entry, events: tree.events, children: children}
	}, actor.WithGuardian(guardian), actor.WithSupervisor(policy))
	root, err := tree.system.Root.SpawnNamed(props, "node")
	if err != nil {
		t.Fatalf("spawn node: %v", err)
	}
	tree.root = root
	return tree
}

func (tree *testTree) expectEvent(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(testWait)
	for {
		select {
		case got := <-tree.events:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("no event %q", want)
		}
	}
}

// expectEvents waits for every one of want, in any order.
func (tree *testTree) expectEvents(t *testing.T, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, event := range want {
		missing[event] = true
	}
	deadline := time.After(testWait)
	for len(missing) > 0 {
		select {
		case got := <-tree.events:
			delete(missing, got)
		case <-deadline:
			t.Fatalf("events never seen: %v", missing)
		}
	}
}

func restartPolicy(maxRestarts int, exhausted actor.Directive, observed chan<- string) *FailurePolicy {
	return &FailurePolicy{
		Level: "test", MaxRestarts: maxRestarts, Window: time.Minute,
		Decide: AlwaysRestart, Exhausted: exhausted, Logger: DiscardLogger(),
		Observe: func(child *actor.PID, err error, directive actor.Directive) {
			observed <- fmt.Sprintf("%s %s %v", child.Id, directive, err)
		},
	}
}

func TestPanicRestartsChildAndCountsIt(t *testing.T) {
	observed := make(chan string, 8)
	tree := startTestTree(t, DiscardLogger(), restartPolicy(3, actor.StopDirective, observed),
		probeChild{name: "worker"})
	tree.expectEvent(t, "started node/worker")

	tree.system.Root.Send(actor.NewPID(tree.system.Address(), "node/worker"), errors.New("boom"))
	tree.expectEvent(t, "restarting node/worker")
	tree.expectEvent(t, "started node/worker")

	if got := <-observed; got != "node/worker RestartDirective boom" {
		t.Fatalf("observed decision %q", got)
	}
	info, ok := tree.registry.Lookup("node/worker")
	if !ok || info.Restarts != 1 || info.Kind != "probe" || info.Summary != "probe up" {
		t.Fatalf("registry after restart: %+v, present %v", info, ok)
	}
	if tree.registry.RestartsTotal() != 1 {
		t.Fatalf("restarts total %d, want 1", tree.registry.RestartsTotal())
	}
}

func TestSpentRestartBudgetStopsChildAndForgetsIt(t *testing.T) {
	observed := make(chan string, 8)
	tree := startTestTree(t, DiscardLogger(), restartPolicy(1, actor.StopDirective, observed),
		probeChild{name: "worker"})
	tree.expectEvent(t, "started node/worker")
	worker := actor.NewPID(tree.system.Address(), "node/worker")

	tree.system.Root.Send(worker, errors.New("first"))
	tree.expectEvent(t, "started node/worker")
	tree.system.Root.Send(worker, errors.New("second"))
	tree.expectEvent(t, "stopped node/worker")

	<-observed
	if got := <-observed; got != "node/worker StopDirective second" {
		t.Fatalf("second decision %q", got)
	}
	if _, ok := tree.registry.Lookup("node/worker"); ok {
		t.Fatal("stopped actor still in the registry")
	}
	if _, ok := tree.registry.Lookup("node"); !ok {
		t.Fatal("node vanished with its child")
	}
}

func TestFatalReasonEscalatesToGuardian(t *testing.T) {
	observed := make(chan string, 8)
	tree := startTestTree(t, DiscardLogger(), restartPolicy(3, actor.StopDirective, observed),
		probeChild{name: "worker"})
	tree.expectEvent(t, "started node/worker")

	reason := fmt.Errorf("data directory lost: %w", ErrFatal)
	tree.system.Root.Send(actor.NewPID(tree.system.Address(), "node/worker"), reason)
	select {
	case err := <-tree.fatals:
		if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "data directory lost") {
			t.Fatalf("fatal error %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("fatal function not called")
	}
	if got := <-observed; got != "node/worker EscalateDirective "+reason.Error() {
		t.Fatalf("decision %q", got)
	}
}

func TestSpentBudgetAtNodeLevelIsFatal(t *testing.T) {
	observed := make(chan string, 8)
	tree := startTestTree(t, DiscardLogger(), restartPolicy(0, actor.EscalateDirective, observed),
		probeChild{name: "queues"})
	tree.expectEvent(t, "started node/queues")

	tree.system.Root.Send(actor.NewPID(tree.system.Address(), "node/queues"), errors.New("keeps failing"))
	select {
	case err := <-tree.fatals:
		if !strings.Contains(err.Error(), "keeps failing") || !strings.Contains(err.Error(), "node") {
			t.Fatalf("fatal error %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("fatal function not called")
	}
}

func TestRootPanicIsFatal(t *testing.T) {
	tree := startTestTree(t, DiscardLogger(), restartPolicy(3, actor.StopDirective, make(chan string, 8)))
	tree.expectEvent(t, "started node")
	tree.system.Root.Send(tree.root, errors.New("root broke"))
	select {
	case err := <-tree.fatals:
		if !strings.Contains(err.Error(), "root broke") {
			t.Fatalf("fatal error %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("fatal function not called")
	}
}

func TestPanicIsLoggedWithStack(t *testing.T) {
	logs := &logBuffer{}
	tree := startTestTree(t, slog.New(slog.NewTextHandler(logs, nil)), restartPolicy(3, actor.StopDirective, make(chan string, 8)))
	tree.expectEvent(t, "started node")
	tree.system.Root.Send(tree.root, errors.New("logged"))
	<-tree.fatals
	out := logs.String()
	for _, want := range []string{"actor panicked", "reason=logged", "goroutine", "supervision_test.go"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "[ACTOR] Recovering") {
		t.Fatalf("library INFO line not quieted:\n%s", out)
	}
}
