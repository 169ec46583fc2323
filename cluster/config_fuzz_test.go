package cluster

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseConfig feeds arbitrary bytes to the config parser. It must
// never panic, must refuse with an ErrInvalidConfig, and what it accepts
// must keep the file's invariants (distinct ids, addresses, data dirs and
// replica ids), be its own defaults, and come back unchanged through JSON.
func FuzzParseConfig(f *testing.F) {
	example, err := os.ReadFile("../testdata/cluster/three-nodes.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(`{"nodes": [{"id": "a", "client_address": "127.0.0.1:1", "peer_address": "127.0.0.1:2", "raft_address": "127.0.0.1:3", "http_address": "127.0.0.1:4", "data_dir": "d"}]}`))
	f.Add([]byte(strings.Replace(string(example), `"rtt": "50ms"`, `"rtt": "-1h"`, 1)))
	f.Add([]byte(strings.Replace(string(example), `"node2"`, `"node1"`, 1)))
	f.Add([]byte(`{"cluster": {"background_sync_interval": "0s", "raft": {"election_rtt": 1000}}, "nodes": []}`))
	f.Add([]byte(`{"cluster": {}, "nodes": null}`))
	f.Add([]byte(`{"nodes": [{"id": "a", "client_address": "127.0.0.1:1", "peer_address": "127.0.0.1:2", "raft_address": "127.0.0.1:3", "http_address": "127.0.0.1:4", "data_dir": "d", "tls": {"ca_file": "ca.pem", "cert_file": "a.pem", "key_file": "a-key.pem"}, "client_tls": {"cert_file": "c.pem", "key_file": "c-key.pem", "client_ca_file": "clients.pem", "require_client_cert": true}, "users_file": "users.json"}]}`))
	f.Add([]byte(`{"nodes": [{"id": "a", "client_address": "127.0.0.1:1", "peer_address": "127.0.0.1:2", "raft_address": "127.0.0.1:3", "http_address": "127.0.0.1:4", "data_dir": "d", "tls": {}}]}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		config, err := ParseConfig(data)
		if err != nil {
			if config != nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("refusal %v with config %v", err, config)
			}
			return
		}
		checkConfigInvariants(t, config)
		if again := config.WithDefaults(); !reflect.DeepEqual(&again, config) {
			t.Fatalf("defaults are not idempotent:\n%+v\n%+v", again, *config)
		}
		encoded, err := json.Marshal(config)
		if err != nil {
			t.Fatalf("an accepted config does not encode: %v", err)
		}
		back, err := ParseConfig(encoded)
		if err != nil || !reflect.DeepEqual(back, config) {
			t.Fatalf("an accepted config does not come back through JSON: %v\n%s", err, encoded)
		}
	})
}

// checkConfigInvariants restates the invariant of config.go.
func checkConfigInvariants(t *testing.T, config *Config) {
	t.Helper()
	if config.Validate() != nil || len(config.Nodes) == 0 {
		t.Fatalf("accepted config does not validate: %v", config.Validate())
	}
	seen := map[string]string{}
	replicaIDs := map[uint64]string{}
	for _, node := range config.Nodes {
		for kind, value := range map[string]string{"id": node.ID, "data_dir": "dir:" + node.DataDir,
			"client": "addr:" + node.ClientAddress, "peer": "addr:" + node.PeerAddress,
			"raft": "addr:" + node.RaftAddress, "http": "addr:" + node.HTTPAddress} {
			if other, taken := seen[value]; taken && value != "addr:" {
				t.Fatalf("node %s %s %q is also %s", node.ID, kind, value, other)
			}
			seen[value] = node.ID + " " + kind
		}
		if other, taken := replicaIDs[node.ReplicaID()]; taken {
			t.Fatalf("nodes %s and %s share replica id %d", node.ID, other, node.ReplicaID())
		}
		replicaIDs[node.ReplicaID()] = node.ID
	}
}
