package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A delete whose first proposal applied but whose answer was lost (the
// proposing node applied it after the attempt timed out, so the retry
// found the queue gone) is a delete that took effect, not unknown_queue.
// Seen under load: a delete right after a confirmed declare was answered
// unknown_queue (docs/durability.md, "Found by the cluster suite").
func TestDeleteWhoseFirstAttemptAppliedLateSucceeds(t *testing.T) {
	cluster := newMemoryCluster(t, 3)
	cluster.startAll()
	cluster.waitReady(testTimeout)
	// node3 applies the first delete long after the proposal attempt's
	// timeout (2 election timeouts, 200 ms here).
	var slowOnce sync.Once
	cluster.node("node3").SetBeforeCatalogUpdate(func(command string) {
		if command == "delete" {
			slowOnce.Do(func() { time.Sleep(time.Second) })
		}
	})
	ctx := testContext(t)
	if _, _, err := cluster.node("node1").Declare(ctx, QueueDecl{Name: "brief", Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	deleteCtx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	if err := cluster.node("node3").DeleteQueue(deleteCtx, "brief"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := cluster.node("node1").Lookup(ctx, "brief"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("lookup after the delete: %v, want ErrQueueNotFound", err)
	}
	// A queue that was never there is still unknown.
	if err := cluster.node("node3").DeleteQueue(deleteCtx, "never"); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("delete of a queue never declared: %v, want ErrQueueNotFound", err)
	}
}
