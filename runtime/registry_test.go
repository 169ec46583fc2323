package runtime

import (
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

func TestRegistryShowsTreeAndForgetsStoppedActors(t *testing.T) {
	tree := startTestTree(t, DiscardLogger(), restartPolicy(3, actor.StopDirective, make(chan string, 8)),
		probeChild{name: "sessions"}, probeChild{name: "queues/orders/0"}, probeChild{name: "queues/orders/1"})
	// Children handle Started on their own goroutines; wait for all four.
	tree.expectEvents(t, "started node", "started node/sessions",
		"started node/queues/orders/0", "started node/queues/orders/1")
	want := []string{"node", "node/queues/orders/0", "node/queues/orders/1", "node/sessions"}
	paths := func() string {
		var got []string
		for _, info := range tree.registry.Snapshot() {
			got = append(got, info.Path)
		}
		return strings.Join(got, ",")
	}
	if got := paths(); got != strings.Join(want, ",") {
		t.Fatalf("snapshot paths %s, want %s", got, strings.Join(want, ","))
	}

	roots := tree.registry.Tree()
	if len(roots) != 1 || roots[0].Name != "node" || roots[0].Actor == nil || roots[0].Actor.Kind != "node" {
		t.Fatalf("tree roots %+v", roots)
	}
	node := roots[0]
	if len(node.Children) != 2 || node.Children[0].Name != "queues" || node.Children[1].Name != "sessions" {
		t.Fatalf("node children %+v", node.Children)
	}
	queues := node.Children[0]
	if queues.Actor != nil {
		t.Fatal("grouping segment 'queues' reported as an actor")
	}
	orders := queues.Children[0]
	if orders.Path != "node/queues/orders" || len(orders.Children) != 2 || orders.Children[1].Actor.Path != "node/queues/orders/1" {
		t.Fatalf("orders subtree %+v", orders)
	}

	pid := actor.NewPID(tree.system.Address(), "node/queues/orders/1")
	if err := tree.system.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := paths(); got != "node,node/queues/orders/0,node/sessions" {
		t.Fatalf("after stop: %s", got)
	}
	if err := tree.system.Root.StopFuture(tree.root).Wait(); err != nil {
		t.Fatalf("stop node: %v", err)
	}
	if got := paths(); got != "" {
		t.Fatalf("after stopping the root: %q", got)
	}
}

func TestBuildTreeGroupsMissingSegments(t *testing.T) {
	roots := BuildTree([]ActorInfo{{Path: "a/b/c", Kind: "leaf"}, {Path: "a/b/d"}, {Path: "z"}})
	if len(roots) != 2 || roots[0].Name != "a" || roots[0].Actor != nil || roots[1].Actor == nil {
		t.Fatalf("roots %+v", roots)
	}
	b := roots[0].Children[0]
	if b.Path != "a/b" || len(b.Children) != 2 || b.Children[0].Actor.Kind != "leaf" {
		t.Fatalf("a/b %+v", b)
	}
}
