package actors

// Decision D4: every declare is answered FDK2 naming the queue's effective
// mode and policy, whether or not it named a mode. These tests go through
// the Go SDK against real brokers, one case per combination of deployment
// kind (single node, cluster), mode given or not, and KeepMode on a new and
// on an existing queue, and compare each answer with the queue's info. The
// cluster test also lists the queues through every node.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
)

type declareReplyCase struct {
	name        string
	queue       string
	config      client.QueueConfig
	wantCreated bool
	wantMode    client.Mode
	wantPolicy  string
}

// checkDeclareReplies runs the cases in order on c and checks each answer
// against what the node then reports in queue info. checkCreated is off in
// a cluster: a catalog proposal that timed out after it applied is retried
// by the cluster node and then reports created=false (a known limit of the
// catalog's retries, not of the reply).
func checkDeclareReplies(t *testing.T, c *client.Client, checkCreated bool, cases []declareReplyCase) {
	t.Helper()
	for _, tc := range cases {
		ctx := testContext(t) // one bound per request: a loaded machine makes each catalog round trip slow
		result, err := c.Declare(ctx, tc.queue, tc.config)
		if err != nil {
			t.Fatalf("%s: declare: %v", tc.name, err)
		}
		created := result.Created == tc.wantCreated || !checkCreated
		if !created || result.Mode != tc.wantMode || result.Policy != tc.wantPolicy {
			t.Fatalf("%s: declare answered %+v; want created=%t mode=%s policy=%q", tc.name, result,
				tc.wantCreated, tc.wantMode, tc.wantPolicy)
		}
		if result.Mode == client.ModeBuffered && len(result.Warnings) == 0 {
			t.Fatalf("%s: a buffered queue's declare carries no warning: %+v", tc.name, result)
		}
		info, err := infoOnceOwned(testContext(t), c, tc.queue)
		if err != nil {
			t.Fatalf("%s: info: %v", tc.name, err)
		}
		if info.Mode != result.Mode || info.Policy != result.Policy {
			t.Fatalf("%s: declare said mode=%s policy=%q, info says mode=%s policy=%q", tc.name,
				result.Mode, result.Policy, info.Mode, info.Policy)
		}
	}
}

// infoOnceOwned reads a queue's info, retrying while the node answers
// retryably: in a cluster a queue just declared has no owner until its
// election ends, and the node says unavailable after 5 s without one (a
// loaded machine can take longer than that to elect).
func infoOnceOwned(ctx context.Context, c *client.Client, queue string) (client.QueueInfo, error) {
	for {
		info, err := c.QueueInfo(ctx, queue)
		if err == nil || !client.IsRetryable(err) || ctx.Err() != nil {
			return info, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDeclareRepliesNameTheEffectiveModeOnASingleNode(t *testing.T) {
	b := startBroker(t, nil)
	sdk, err := client.Dial(testContext(t), client.Options{Addresses: []string{b.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sdk.Close() })
	keep := client.QueueConfig{KeepMode: true}
	checkDeclareReplies(t, sdk, true, []declareReplyCase{
		{"durable named", "named-durable", client.QueueConfig{Mode: client.ModeDurable}, true, client.ModeDurable, ""},
		{"buffered named", "named-buffered", client.QueueConfig{Mode: client.ModeBuffered}, true, client.ModeBuffered, ""},
		{"zero config (durable sent)", "zero", client.QueueConfig{}, true, client.ModeDurable, ""},
		{"KeepMode, new queue", "kept", keep, true, client.ModeDurable, ""},
		{"KeepMode, existing durable", "kept", keep, false, client.ModeDurable, ""},
		{"KeepMode, existing buffered", "named-buffered", keep, false, client.ModeBuffered, ""},
		{"buffered re-declared with its mode", "named-buffered", client.QueueConfig{Mode: client.ModeBuffered},
			false, client.ModeBuffered, ""},
	})
}

func TestDeclareRepliesNameTheEffectiveModeAndPolicyInACluster(t *testing.T) {
	c := startBrokerCluster(t, 3)
	keep := client.QueueConfig{KeepMode: true}
	for _, through := range c.order {
		t.Run("through "+through, func(t *testing.T) {
			sdk := c.dialSDK(through)
			prefix := through + "-"
			checkDeclareReplies(t, sdk, false, []declareReplyCase{
				{"durable named", prefix + "durable", client.QueueConfig{Mode: client.ModeDurable},
					true, client.ModeDurable, "majority_durable"},
				{"buffered named", prefix + "buffered", client.QueueConfig{Mode: client.ModeBuffered},
					true, client.ModeBuffered, "replica_buffered:2"},
				{"zero config (durable sent)", prefix + "zero", client.QueueConfig{},
					true, client.ModeDurable, "majority_durable"},
				// A mode-less declare in a cluster without a default policy
				// makes a buffered queue; the answer says so.
				{"KeepMode, new queue", prefix + "kept", keep, true, client.ModeBuffered, "replica_buffered:2"},
				{"KeepMode, existing buffered", prefix + "kept", keep, false, client.ModeBuffered, "replica_buffered:2"},
				{"KeepMode, existing durable", prefix + "durable", keep, false, client.ModeDurable, "majority_durable"},
				{"policy named", prefix + "policy", client.QueueConfig{KeepMode: true, Policy: "replica_durable:2"},
					true, client.ModeDurable, "replica_durable:2"},
			})
		})
	}
	if t.Failed() {
		return // a case failed: the catalog lacks the queues of the cases after it
	}
	// list-queues on any node names every queue of the catalog, each with
	// its owner; counts come from the owner (info is redirected there). A
	// node learns a new owner from its replica of the coordination shard,
	// which may trail the claim for a moment: the list is asked again
	// until it names them all.
	for _, through := range c.order {
		sdk := c.dialSDK(through)
		var shortfall, logged string
		waitUntil(t, "list through "+through+" names every queue with its owner, policy and replicas", func() bool {
			listed, err := sdk.ListQueues(testContext(t), "")
			switch {
			case err != nil:
				shortfall = err.Error()
			case len(listed) != 3*5:
				shortfall = fmt.Sprintf("%d queues, want all 15 of the catalog", len(listed))
			default:
				shortfall = ""
				for _, info := range listed {
					if info.Owner == "" || info.Policy == "" || len(info.Replicas) != 3 {
						shortfall = fmt.Sprintf("%+v lacks its owner, policy or replicas", info)
					}
				}
			}
			if shortfall != "" && shortfall != logged {
				t.Logf("list through %s: %s", through, shortfall)
				logged = shortfall
			}
			if shortfall != "" {
				time.Sleep(50 * time.Millisecond)
			}
			return shortfall == ""
		})
	}
}
