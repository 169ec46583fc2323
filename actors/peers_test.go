package actors

import (
	"strings"
	"testing"
)

// Every node of a cluster dials every other node: each outbound peer link
// comes up, and each node accepts a link from each other node.
func TestClusterPeerLinksComeUp(t *testing.T) {
	cluster := startBrokerCluster(t, 3)
	for _, id := range cluster.order {
		broker := cluster.members[id].broker
		waitUntil(t, id+"'s peer links up", func() bool {
			up, inbound := 0, 0
			for _, info := range broker.Registry().Snapshot() {
				switch {
				case info.Kind == "peer-link" && strings.HasPrefix(info.Summary, "up "):
					up++
				case info.Kind == "peer-inbound":
					inbound++
				}
			}
			return up == 2 && inbound == 2
		})
	}
}
