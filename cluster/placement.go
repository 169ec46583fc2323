package cluster

// Placement chooses the replica set of each new queue partition. It is a
// pure function of the catalog (node order and current load) so that every
// replica of the catalog, applying the same declare, chooses the same set.
//
// The first node of a replica set is the preferred owner. Owners spread
// first: the preferred owner is the node that prefers the fewest partitions,
// then holds the fewest replicas, then comes first in the node list. The
// other replicas go to the nodes holding the fewest replicas, then first
// when walking the node list as a ring from the owner.
//
// Invariant: a replica set has distinct nodes, all from the node list, and
// its size is min(replicas, len(nodes)).

import "slices"

// placementLoad counts, per node id, the partitions it prefers to own and
// the partitions it replicates (owned ones included).
type placementLoad struct {
	owned    map[string]int
	replicas map[string]int
}

func newPlacementLoad() placementLoad {
	return placementLoad{owned: map[string]int{}, replicas: map[string]int{}}
}

// add counts one more partition placed on replicaSet.
func (l placementLoad) add(replicaSet []string) {
	if len(replicaSet) == 0 {
		return
	}
	l.owned[replicaSet[0]]++
	for _, node := range replicaSet {
		l.replicas[node]++
	}
}

// loadOf counts the placement of every partition already in the catalog.
func loadOf(queues map[string]*QueueInfo) placementLoad {
	load := newPlacementLoad()
	for _, queue := range queues {
		for _, partition := range queue.Partitions {
			load.add(partition.Replicas)
		}
	}
	return load
}

// place returns replica sets for `partitions` new partitions of `replicas`
// copies each over nodes (in catalog order), updating load as it goes so
// the partitions of one queue spread too.
func place(nodes []string, load placementLoad, replicas, partitions int) [][]string {
	size := min(replicas, len(nodes))
	sets := make([][]string, 0, partitions)
	for range partitions {
		set := make([]string, 0, size)
		ownerIndex := pickNode(nodes, 0, set, func(node string) [2]int {
			return [2]int{load.owned[node], load.replicas[node]}
		})
		set = append(set, nodes[ownerIndex])
		for len(set) < size {
			followerIndex := pickNode(nodes, ownerIndex+1, set, func(node string) [2]int {
				return [2]int{load.replicas[node], 0}
			})
			set = append(set, nodes[followerIndex])
		}
		load.add(set)
		sets = append(sets, set)
	}
	return sets
}

// pickNode returns the index of the node not in taken with the smallest
// key. Ties go to the first node met walking the list as a ring from start,
// so followers of different owners land on different nodes.
func pickNode(nodes []string, start int, taken []string, key func(string) [2]int) int {
	best := -1
	var bestKey [2]int
	for step := range nodes {
		index := (start + step) % len(nodes)
		node := nodes[index]
		if slices.Contains(taken, node) {
			continue
		}
		nodeKey := key(node)
		if best < 0 || nodeKey[0] < bestKey[0] || (nodeKey[0] == bestKey[0] && nodeKey[1] < bestKey[1]) {
			best, bestKey = index, nodeKey
		}
	}
	if best < 0 {
		panic("cluster: placement ran out of nodes")
	}
	return best
}
