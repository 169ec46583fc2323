package cluster

// Measurements recorded in docs/cluster.md. They start three NodeHosts on
// loopback TCP with Raft logs on disk, several runs per Raft RTT, and print
// raw samples and a summary. They are not part of the normal test run:
//
//	FIBRIL_CLUSTER_MEASURE=1 go test -count=1 -run TestMeasureCluster -v -timeout 20m ./cluster/
//
// FIBRIL_CLUSTER_MEASURE_RUNS (default 5) sets the runs per RTT and
// FIBRIL_CLUSTER_MEASURE_DECLARES (default 100) the declares per run.
// Nothing here asserts a time: these are figures, not targets.

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

type samples []time.Duration

func (s samples) percentile(p float64) time.Duration {
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(rank, 0)]
}

func (s samples) summary() string {
	if len(s) == 0 {
		return "no samples"
	}
	return fmt.Sprintf("n=%d min=%s p50=%s p99=%s max=%s", len(s),
		s.percentile(0).Round(time.Microsecond), s.percentile(0.50).Round(time.Microsecond),
		s.percentile(0.99).Round(time.Microsecond), s.percentile(1).Round(time.Microsecond))
}

func (s samples) raw() string {
	parts := make([]string, len(s))
	for index, sample := range s {
		parts[index] = sample.Round(time.Millisecond).String()
	}
	return strings.Join(parts, " ")
}

func envInt(t *testing.T, name string, fallback int) int {
	text := os.Getenv(name)
	if text == "" {
		return fallback
	}
	value, err := strconv.Atoi(text)
	if err != nil || value < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, text)
	}
	return value
}

func TestMeasureCluster(t *testing.T) {
	if os.Getenv("FIBRIL_CLUSTER_MEASURE") == "" {
		t.Skip("set FIBRIL_CLUSTER_MEASURE=1 to measure (see docs/cluster.md)")
	}
	runs := envInt(t, "FIBRIL_CLUSTER_MEASURE_RUNS", 5)
	declares := envInt(t, "FIBRIL_CLUSTER_MEASURE_DECLARES", 100)
	for _, rtt := range []time.Duration{50 * time.Millisecond, 10 * time.Millisecond} {
		t.Run("rtt="+rtt.String(), func(t *testing.T) {
			var election, failover, closing, fromLeader, fromFollower samples
			for run := range runs {
				result := measureRun(t, rtt, declares)
				t.Logf("run %d: election %s, close %s, failover %s", run, result.election, result.close, result.failover)
				election = append(election, result.election)
				failover = append(failover, result.failover)
				closing = append(closing, result.close)
				fromLeader = append(fromLeader, result.fromLeader...)
				fromFollower = append(fromFollower, result.fromFollower...)
			}
			t.Logf("RTT %s, ElectionRTT %d, HeartbeatRTT %d", rtt, DefaultElectionRTT, DefaultHeartbeatRTT)
			t.Logf("catalog leader at start-up: %s | raw: %s", election.summary(), election.raw())
			t.Logf("declare via leader:         %s", fromLeader.summary())
			t.Logf("declare via follower:       %s", fromFollower.summary())
			t.Logf("leader Close() duration:    %s | raw: %s", closing.summary(), closing.raw())
			t.Logf("leader Close() to declare:  %s | raw: %s", failover.summary(), failover.raw())
		})
	}
}

type runResult struct {
	election, close, failover time.Duration
	fromLeader, fromFollower  samples
}

func measureRun(t *testing.T, rtt time.Duration, declares int) runResult {
	cluster := newTCPCluster(t, 3, withRaft(rtt, DefaultElectionRTT))
	defer cluster.closeAll()
	var result runResult

	started := time.Now()
	cluster.startAll()
	result.election = waitAnyCatalogLeader(t, cluster, started)
	cluster.waitReady(testTimeout)

	leaderID := cluster.catalogLeader(testTimeout)
	var followerID string
	for _, node := range cluster.running() {
		if node.ID() != leaderID {
			followerID = node.ID()
			break
		}
	}
	result.fromLeader = timeDeclares(t, cluster.node(leaderID), "leader", declares)
	result.fromFollower = timeDeclares(t, cluster.node(followerID), "follower", declares)

	// Failover: close the leader's NodeHost, then declare on a survivor
	// (Declare retries until a new leader commits it).
	closeStarted := time.Now()
	cluster.stop(leaderID)
	result.close = time.Since(closeStarted)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := cluster.node(followerID).Declare(ctx, QueueDecl{Name: "after-failover"}); err != nil {
		t.Fatalf("declare after failover: %v", err)
	}
	result.failover = time.Since(closeStarted)
	return result
}

// waitAnyCatalogLeader polls until some node knows a catalog leader.
func waitAnyCatalogLeader(t *testing.T, cluster *testCluster, started time.Time) time.Duration {
	deadline := started.Add(testTimeout)
	for time.Now().Before(deadline) {
		for _, node := range cluster.running() {
			if _, _, valid, err := node.nodeHost.GetLeaderID(CatalogShardID); err == nil && valid {
				return time.Since(started)
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no catalog leader")
	return 0
}

func timeDeclares(t *testing.T, node *Node, label string, count int) samples {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := make(samples, 0, count)
	for index := range count {
		name := fmt.Sprintf("%s-%d", label, index)
		began := time.Now()
		if _, _, err := node.Declare(ctx, QueueDecl{Name: name, Replicas: 1}); err != nil {
			t.Fatalf("declare %s: %v", name, err)
		}
		out = append(out, time.Since(began))
	}
	return out
}
