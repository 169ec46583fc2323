package cluster

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const exampleConfigPath = "../testdata/cluster/three-nodes.json"

func TestLoadConfigReadsTheExample(t *testing.T) {
	cfg, err := LoadConfig(exampleConfigPath)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if len(cfg.Nodes) != 3 {
		t.Fatalf("nodes = %d, want 3", len(cfg.Nodes))
	}
	node2, err := cfg.Node("node2")
	if err != nil {
		t.Fatalf("Node(node2): %v", err)
	}
	if node2.ClientAddress != "127.0.0.1:7422" || node2.RaftAddress != "127.0.0.1:7442" || node2.DataDir != "./cluster-data/node2" {
		t.Fatalf("node2 = %+v", node2)
	}
	if got := time.Duration(cfg.Cluster.Raft.RTT); got != 10*time.Millisecond {
		t.Fatalf("rtt = %s, want 10ms", got)
	}
	if got := time.Duration(*cfg.Cluster.BackgroundSyncInterval); got != 100*time.Millisecond {
		t.Fatalf("background_sync_interval = %s", got)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"cluster":{"secret":"sixteen-bytes-at-least"},"nodes":[
		{"id":"a","client_address":"127.0.0.1:1","peer_address":"127.0.0.1:2","raft_address":"127.0.0.1:3","http_address":"127.0.0.1:4","data_dir":"a"},
		{"id":"b","client_address":"127.0.0.1:5","peer_address":"127.0.0.1:6","raft_address":"127.0.0.1:7","http_address":"127.0.0.1:8","data_dir":"b"}]}`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	settings := cfg.Cluster
	if settings.DefaultReplicas != 2 {
		t.Errorf("default_replicas = %d, want 2 (capped by the node count)", settings.DefaultReplicas)
	}
	if time.Duration(settings.Raft.RTT) != DefaultRaftRTT || settings.Raft.ElectionRTT != DefaultElectionRTT || settings.Raft.HeartbeatRTT != DefaultHeartbeatRTT ||
		settings.Raft.CoordinationElectionRTT != DefaultCoordinationElectionRTT || settings.Raft.CoordinationHeartbeatRTT != DefaultCoordinationHeartbeatRTT {
		t.Errorf("raft defaults = %+v", settings.Raft)
	}
	if time.Duration(*settings.BackgroundSyncInterval) != DefaultBackgroundSyncInterval {
		t.Errorf("background sync default = %v", *settings.BackgroundSyncInterval)
	}
	if settings.Raft.LogLevel != "error" || settings.DeploymentID != 1 {
		t.Errorf("log level %q, deployment %d", settings.Raft.LogLevel, settings.DeploymentID)
	}
}

func TestBackgroundSyncZeroMeansOff(t *testing.T) {
	cfg := exampleConfig(t)
	off := Duration(0)
	cfg.Cluster.BackgroundSyncInterval = &off
	if err := cfg.Validate(); err != nil {
		t.Fatalf("0s must be accepted (background sync off): %v", err)
	}
	if got := cfg.WithDefaults().Cluster.BackgroundSyncInterval; time.Duration(*got) != 0 {
		t.Fatalf("explicit 0s was replaced by the default: %v", *got)
	}
}

func exampleConfig(t *testing.T) *Config {
	t.Helper()
	cfg, err := LoadConfig(exampleConfigPath)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	return cfg
}

// Every value problem is reported with the JSON path of its field.
func TestConfigValueErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name      string
		mutate    func(*Config)
		wantField string
		wantText  string
	}{
		{"no nodes", func(c *Config) { c.Nodes = nil }, "nodes", "at least one node"},
		{"missing id", func(c *Config) { c.Nodes[1].ID = "" }, "nodes[1].id", "required"},
		{"bad id", func(c *Config) { c.Nodes[1].ID = "node 2" }, "nodes[1].id", "only letters"},
		{"duplicate id", func(c *Config) { c.Nodes[2].ID = "node1" }, "nodes[2].id", "duplicate of nodes[0].id"},
		{"duplicate raft address", func(c *Config) { c.Nodes[2].RaftAddress = c.Nodes[0].RaftAddress }, "nodes[2].raft_address", "duplicate of nodes[0].raft_address"},
		{"address reused across kinds", func(c *Config) { c.Nodes[1].HTTPAddress = c.Nodes[0].ClientAddress }, "nodes[1].http_address", "duplicate of nodes[0].client_address"},
		{"address reused within a node", func(c *Config) { c.Nodes[0].PeerAddress = c.Nodes[0].ClientAddress }, "nodes[0].peer_address", "duplicate of nodes[0].client_address"},
		{"missing client address", func(c *Config) { c.Nodes[0].ClientAddress = "" }, "nodes[0].client_address", "required"},
		{"address without port", func(c *Config) { c.Nodes[0].PeerAddress = "127.0.0.1" }, "nodes[0].peer_address", "not host:port"},
		{"address without host", func(c *Config) { c.Nodes[0].PeerAddress = ":7431" }, "nodes[0].peer_address", "no host"},
		{"port out of range", func(c *Config) { c.Nodes[1].HTTPAddress = "127.0.0.1:70000" }, "nodes[1].http_address", "port must be 1-65535"},
		{"missing data dir", func(c *Config) { c.Nodes[2].DataDir = "" }, "nodes[2].data_dir", "required"},
		{"duplicate data dir", func(c *Config) { c.Nodes[2].DataDir = c.Nodes[1].DataDir }, "nodes[2].data_dir", "duplicate of nodes[1].data_dir"},
		{"too many replicas", func(c *Config) { c.Cluster.DefaultReplicas = 4 }, "cluster.default_replicas", "between 1 and the number of nodes (3)"},
		{"negative replicas", func(c *Config) { c.Cluster.DefaultReplicas = -1 }, "cluster.default_replicas", "got -1"},
		{"unknown policy", func(c *Config) { c.Cluster.DefaultPolicy = "all_durable" }, "cluster.default_policy", "want replica_durable:N"},
		{"policy wider than replicas", func(c *Config) { c.Cluster.DefaultPolicy = "replica_durable:4" }, "cluster.default_policy", "needs 4 copies"},
		{"negative sync interval", func(c *Config) { d := Duration(-time.Second); c.Cluster.BackgroundSyncInterval = &d }, "cluster.background_sync_interval", "between 0s"},
		{"rtt too small", func(c *Config) { c.Cluster.Raft.RTT = Duration(time.Microsecond) }, "cluster.raft.rtt", "between 1ms and 10s"},
		{"rtt fraction of a millisecond", func(c *Config) { c.Cluster.Raft.RTT = Duration(1500 * time.Microsecond) }, "cluster.raft.rtt", "whole number of milliseconds"},
		{"election too short", func(c *Config) { c.Cluster.Raft.ElectionRTT = 5 }, "cluster.raft.election_rtt", "at least 10 x heartbeat_rtt"},
		{"election short for heartbeat", func(c *Config) { c.Cluster.Raft.HeartbeatRTT = 2; c.Cluster.Raft.ElectionRTT = 15 }, "cluster.raft.election_rtt", "at least 10 x heartbeat_rtt (2)"},
		{"bad log level", func(c *Config) { c.Cluster.Raft.LogLevel = "loud" }, "cluster.raft.log_level", "want debug, info, warn or error"},
		{"coordination election short", func(c *Config) {
			c.Cluster.Raft.CoordinationHeartbeatRTT = 3
			c.Cluster.Raft.CoordinationElectionRTT = 20
		},
			"cluster.raft.coordination_election_rtt", "at least 10 x coordination_heartbeat_rtt (3)"},
		{"no secret", func(c *Config) { c.Cluster.Secret = "" }, "cluster.secret", "required"},
		{"short secret", func(c *Config) { c.Cluster.Secret = "short" }, "cluster.secret", "at least 16 bytes"},
		{"two secrets", func(c *Config) { c.Cluster.SecretFile = "/etc/fibril/secret" }, "cluster.secret", "not both"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := exampleConfig(t)
			tc.mutate(cfg)
			err := cfg.Validate()
			assertConfigError(t, err, tc.wantField, tc.wantText)
			// The same problem is reported when the file is loaded.
			path := filepath.Join(t.TempDir(), "cluster.json")
			data, marshalError := json.Marshal(cfg)
			if marshalError != nil {
				t.Fatal(marshalError)
			}
			if writeError := os.WriteFile(path, data, 0o644); writeError != nil {
				t.Fatal(writeError)
			}
			_, err = LoadConfig(path)
			assertConfigError(t, err, tc.wantField, tc.wantText)
		})
	}
}

// Problems the decoder finds are reported with the field too, when the
// decoder knows it.
func TestConfigDecodeErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name      string
		json      string
		wantField string
		wantText  string
	}{
		{"unknown field", `{"cluster":{"replicas":3},"nodes":[]}`, "(document)", `unknown field "replicas"`},
		{"bad duration", `{"cluster":{"raft":{"rtt":"fast"}},"nodes":[]}`, "cluster.raft.rtt", `got string "fast"`},
		{"duration as number", `{"cluster":{"background_sync_interval":50},"nodes":[]}`, "cluster.background_sync_interval", "want a duration string"},
		{"wrong type", `{"cluster":{"default_replicas":"three"},"nodes":[]}`, "cluster.default_replicas", "want int"},
		{"wrong type in a node", `{"nodes":[{"id":7}]}`, "nodes.id", "want string"},
		{"syntax error", `{"nodes":[}`, "(document)", "syntax error"},
		{"trailing data", `{"nodes":[]} {}`, "(document)", "trailing data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.json))
			assertConfigError(t, err, tc.wantField, tc.wantText)
		})
	}
}

func TestConfigReportsEveryProblem(t *testing.T) {
	cfg := exampleConfig(t)
	cfg.Nodes[1].RaftAddress = cfg.Nodes[0].RaftAddress
	cfg.Cluster.Raft.LogLevel = "loud"
	err := cfg.Validate()
	for _, field := range []string{"nodes[1].raft_address", "cluster.raft.log_level"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
}

func TestConfigUnknownNode(t *testing.T) {
	cfg := exampleConfig(t)
	_, err := cfg.Node("node9")
	if !errors.Is(err, ErrUnknownNode) || !strings.Contains(err.Error(), `"node9"`) {
		t.Fatalf("Node(node9) error = %v, want ErrUnknownNode naming node9", err)
	}
	_, err = Start(cfg, "node9", StartOptions{})
	if !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("Start(node9) error = %v, want ErrUnknownNode", err)
	}
}

func TestReplicaIDsAreStableAndDistinct(t *testing.T) {
	cfg := exampleConfig(t)
	seen := map[uint64]string{}
	for _, node := range cfg.Nodes {
		id := node.ReplicaID()
		if id == 0 {
			t.Fatalf("replica id of %s is 0", node.ID)
		}
		if other, dup := seen[id]; dup {
			t.Fatalf("replica id of %s equals %s's", node.ID, other)
		}
		seen[id] = node.ID
		if replicaIDFor(node.ID) != id {
			t.Fatalf("replica id of %s is not stable", node.ID)
		}
	}
}

func assertConfigError(t *testing.T, err error, field, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one naming %s", field)
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v is not ErrInvalidConfig", err)
	}
	var configError *ConfigError
	if !errors.As(err, &configError) {
		t.Fatalf("error %v is not a *ConfigError", err)
	}
	want := field + ": "
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), text) {
		t.Fatalf("error %q; want it to name %q and say %q", err, field, text)
	}
}

// A secret file its group or others may read is a warning naming the
// file and the fix; one only its owner reads is not, and neither is a
// secret given inline.
func TestSecretFileReadableByOthersWarns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster-secret")
	if err := os.WriteFile(path, []byte("a-secret-of-sixteen-bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := Config{Cluster: ClusterSettings{SecretFile: path}}
	if warnings := config.SecretWarnings(); len(warnings) != 0 {
		t.Fatalf("a 0600 secret file: %v", warnings)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		warnings := config.SecretWarnings()
		if len(warnings) != 1 || !strings.Contains(warnings[0], path) || !strings.Contains(warnings[0], "chmod go-r") {
			t.Fatalf("a secret file of mode %04o: %v", mode, warnings)
		}
		if secret, err := config.PeerSecret(); err != nil || string(secret) != "a-secret-of-sixteen-bytes" {
			t.Fatalf("the secret is still read: %q, %v", secret, err)
		}
	}
	inline := Config{Cluster: ClusterSettings{Secret: "a-secret-of-sixteen-bytes"}}
	if warnings := inline.SecretWarnings(); len(warnings) != 0 {
		t.Fatalf("an inline secret: %v", warnings)
	}
}
