package cluster

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"math/rand/v2"
)

func TestPlacementSpreadsOwners(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	load := newPlacementLoad()
	var owners []string
	for range 6 {
		sets := place(nodes, load, 3, 1)
		owners = append(owners, sets[0][0])
		assertReplicaSet(t, nodes, sets[0], 3)
	}
	want := []string{"node1", "node2", "node3", "node1", "node2", "node3"}
	if !slices.Equal(owners, want) {
		t.Fatalf("owners = %v, want %v", owners, want)
	}
}

func TestPlacementPartitionsOfOneQueueSpread(t *testing.T) {
	nodes := []string{"a", "b", "c", "d"}
	sets := place(nodes, newPlacementLoad(), 2, 4)
	owners := map[string]int{}
	replicas := map[string]int{}
	for _, set := range sets {
		assertReplicaSet(t, nodes, set, 2)
		owners[set[0]]++
		for _, node := range set {
			replicas[node]++
		}
	}
	for _, node := range nodes {
		if owners[node] != 1 || replicas[node] != 2 {
			t.Fatalf("node %s owns %d and replicates %d of %v", node, owners[node], replicas[node], sets)
		}
	}
}

func TestPlacementFollowersGoToTheLeastLoaded(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	load := newPlacementLoad()
	load.add([]string{"a", "b"}) // a owns one; a and b replicate one each
	sets := place(nodes, load, 2, 1)
	// c owns nothing, so it owns the new partition. a and b tie on replicas;
	// a comes first after c on the ring, so a follows.
	if !slices.Equal(sets[0], []string{"c", "a"}) {
		t.Fatalf("set = %v, want [c a]", sets[0])
	}
	sets = place(nodes, load, 2, 1)
	// place counted [c a]: owned a 1, c 1, b 0, so b owns; replicas a 2,
	// c 1, so c follows.
	if !slices.Equal(sets[0], []string{"b", "c"}) {
		t.Fatalf("set = %v, want [b c]", sets[0])
	}
}

// Randomized: any sequence of placements keeps replica sets valid and
// owners balanced within one partition of each other.
func TestPlacementRandomizedBalance(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if text := os.Getenv("FIBRIL_SEED"); text != "" {
		parsed, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			t.Fatalf("FIBRIL_SEED: %v", err)
		}
		seed = parsed
	}
	random := rand.New(rand.NewPCG(seed, seed))
	defer func() {
		if t.Failed() {
			t.Logf("SEED=%d (rerun with FIBRIL_SEED=%d)", seed, seed)
		}
	}()
	for round := range 50 {
		nodeCount := 1 + random.IntN(7)
		nodes := make([]string, nodeCount)
		for index := range nodes {
			nodes[index] = fmt.Sprintf("n%d", index)
		}
		load := newPlacementLoad()
		total := 0
		for range 1 + random.IntN(30) {
			replicas := 1 + random.IntN(nodeCount)
			partitions := 1 + random.IntN(4)
			for _, set := range place(nodes, load, replicas, partitions) {
				assertReplicaSet(t, nodes, set, replicas)
			}
			total += partitions
		}
		least, most := total, 0
		for _, node := range nodes {
			least, most = min(least, load.owned[node]), max(most, load.owned[node])
		}
		if most-least > 1 {
			t.Fatalf("round %d: owners unbalanced: %v", round, load.owned)
		}
	}
}

func assertReplicaSet(t *testing.T, nodes, set []string, replicas int) {
	t.Helper()
	if len(set) != min(replicas, len(nodes)) {
		t.Fatalf("set %v has %d nodes, want %d", set, len(set), min(replicas, len(nodes)))
	}
	seen := map[string]bool{}
	for _, node := range set {
		if seen[node] || !slices.Contains(nodes, node) {
			t.Fatalf("set %v repeats or invents a node", set)
		}
		seen[node] = true
	}
}
