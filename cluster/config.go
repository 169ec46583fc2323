package cluster

// The cluster config file is one JSON document, decoded strictly (an unknown
// field is an error) and shared unchanged by every node; each node starts
// with the file and its own id. The format, every field and its default are
// documented in docs/cluster.md; testdata/cluster/three-nodes.json is the
// reference example. Durations are strings in Go syntax ("50ms", "1s").
//
// Invariant: after Validate succeeds, node ids, every address of every node
// (client, peer, raft, http, across all nodes) and data dirs are pairwise
// distinct, and each node's Raft replica id (derived from its id) is unique.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"reflect"
	"strconv"
	"time"
)

// Defaults applied to fields left out of the config file. The Raft timing
// defaults follow the measurements in docs/cluster.md.
const (
	DefaultDeploymentID           = 1
	DefaultReplicasMax            = 3
	DefaultBackgroundSyncInterval = 100 * time.Millisecond
	DefaultRaftRTT                = 10 * time.Millisecond
	DefaultElectionRTT            = 50
	DefaultHeartbeatRTT           = 5
	// The coordination shards' election decides how fast a dead owner is
	// detected: 20 ticks of 10 ms (docs/cluster.md has the measurements).
	DefaultCoordinationElectionRTT  = 20
	DefaultCoordinationHeartbeatRTT = 2
	DefaultSnapshotEntries          = 1000
	DefaultCompactionOverhead       = 500
	DefaultRaftLogLevel             = "error"
)

// Config is the whole cluster config file.
type Config struct {
	Cluster ClusterSettings `json:"cluster"`
	Nodes   []NodeConfig    `json:"nodes"`
}

// ClusterSettings are the settings shared by every node. Zero values mean
// "use the default".
type ClusterSettings struct {
	// DeploymentID keeps Raft messages of different clusters apart.
	DeploymentID uint64 `json:"deployment_id,omitempty"`
	// DefaultReplicas is the replica count of a queue declared without one.
	// Default: the smaller of 3 and the number of nodes.
	DefaultReplicas int `json:"default_replicas,omitempty"`
	// DefaultPolicy is the policy of a queue declared with neither mode nor
	// policy. Empty means replica_buffered with a majority of the replicas.
	DefaultPolicy string `json:"default_policy,omitempty"`
	// BackgroundSyncInterval is the background fsync target of buffered
	// queue logs. "0s" turns background sync off. Default 100ms.
	BackgroundSyncInterval *Duration `json:"background_sync_interval,omitempty"`
	// Secret authenticates the nodes to each other on peer links (every
	// node's config must hold the same one). SecretFile names a file whose
	// content (trailing newline removed) is the secret instead; exactly one
	// of the two is required.
	Secret     string `json:"secret,omitempty"`
	SecretFile string `json:"secret_file,omitempty"`
	// Raft is the Raft timing and log settings.
	Raft RaftSettings `json:"raft"`
}

// RaftSettings tune dragonboat. RTT is one logical clock tick; election and
// heartbeat timeouts are counted in ticks.
type RaftSettings struct {
	RTT          Duration `json:"rtt,omitempty"`
	ElectionRTT  uint64   `json:"election_rtt,omitempty"`
	HeartbeatRTT uint64   `json:"heartbeat_rtt,omitempty"`
	// CoordinationElectionRTT and CoordinationHeartbeatRTT are the same for
	// the partitions' coordination shards, whose elections detect a dead
	// owner; ElectionRTT and HeartbeatRTT apply to the catalog.
	CoordinationElectionRTT  uint64 `json:"coordination_election_rtt,omitempty"`
	CoordinationHeartbeatRTT uint64 `json:"coordination_heartbeat_rtt,omitempty"`
	Quiesce                  bool   `json:"quiesce,omitempty"`
	SnapshotEntries          uint64 `json:"snapshot_entries,omitempty"`
	CompactionOverhead       uint64 `json:"compaction_overhead,omitempty"`
	// LogLevel is the level at and above which dragonboat's own log lines
	// reach the node's logger: "debug", "info", "warn" or "error".
	LogLevel string `json:"log_level,omitempty"`
}

// NodeConfig is one node of the cluster.
type NodeConfig struct {
	ID            string `json:"id"`
	ClientAddress string `json:"client_address"`
	PeerAddress   string `json:"peer_address"`
	RaftAddress   string `json:"raft_address"`
	HTTPAddress   string `json:"http_address"`
	// DataDir holds the node's queues and, under raft/, its Raft logs. A
	// relative path is relative to the working directory of the process.
	DataDir string `json:"data_dir"`
	// TLS names this node's files for the links between nodes (Raft, and
	// the peer links of replication): mutual TLS under the cluster CA.
	// Every node has it, or none (tls.go).
	TLS *NodeTLSFiles `json:"tls,omitempty"`
	// ClientTLS names the client listener's certificate files; without
	// it the listener speaks plain TCP.
	ClientTLS *ClientTLSFiles `json:"client_tls,omitempty"`
	// UsersFile is the users file of the client listener
	// (docs/security.md); without it clients use the shared token, if any.
	UsersFile string `json:"users_file,omitempty"`
}

// ReplicaID is the node's Raft replica id in every shard it joins. It is
// derived from the node id, so reordering the node list changes nothing.
func (n NodeConfig) ReplicaID() uint64 {
	return replicaIDFor(n.ID)
}

func replicaIDFor(nodeID string) uint64 {
	hash := fnv.New64a()
	hash.Write([]byte(nodeID))
	id := hash.Sum64() &^ (1 << 63) // keep it positive in signed encodings
	if id == 0 {
		id = 1
	}
	return id
}

// ConfigError is one problem in a config, naming the field by its JSON path
// (for example "nodes[2].raft_address").
type ConfigError struct {
	Field   string
	Problem string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("cluster: config: %s: %s", e.Field, e.Problem)
}

// Unwrap makes every ConfigError match ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

// UnmarshalJSON accepts a duration string such as "50ms".
func (d *Duration) UnmarshalJSON(data []byte) error {
	// Errors are *json.UnmarshalTypeError so that the decoder adds the
	// field path to them.
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return &json.UnmarshalTypeError{Value: "non-string " + string(data), Type: durationType}
	}
	parsed, err := time.ParseDuration(text)
	if err != nil {
		return &json.UnmarshalTypeError{Value: fmt.Sprintf("string %q", text), Type: durationType}
	}
	*d = Duration(parsed)
	return nil
}

var durationType = reflect.TypeFor[Duration]()

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// LoadConfig reads, strictly decodes, defaults and validates a config file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return ParseConfig(data)
}

// ParseConfig is LoadConfig on bytes. The returned config has its defaults
// filled in.
func ParseConfig(data []byte) (*Config, error) {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	var cfg Config
	if err := decoder.Decode(&cfg); err != nil {
		return nil, decodeError(err)
	}
	if decoder.More() {
		return nil, &ConfigError{Field: "(document)", Problem: "trailing data after the JSON object"}
	}
	effective := cfg.WithDefaults()
	if err := effective.Validate(); err != nil {
		return nil, err
	}
	return &effective, nil
}

// decodeError turns a JSON decoding error into a ConfigError that names the
// field when the decoder knows it.
func decodeError(err error) error {
	var typeError *json.UnmarshalTypeError
	if errors.As(err, &typeError) && typeError.Field != "" {
		want := typeError.Type.String()
		if typeError.Type == durationType {
			want = "a duration string such as \"50ms\""
		}
		return &ConfigError{Field: typeError.Field, Problem: "want " + want + ", got " + typeError.Value}
	}
	var syntaxError *json.SyntaxError
	if errors.As(err, &syntaxError) {
		return &ConfigError{Field: "(document)", Problem: fmt.Sprintf("syntax error at byte %d: %v", syntaxError.Offset, err)}
	}
	return &ConfigError{Field: "(document)", Problem: err.Error()}
}

// WithDefaults returns a copy with every omitted setting filled in.
func (c *Config) WithDefaults() Config {
	out := *c
	out.Nodes = append([]NodeConfig(nil), c.Nodes...)
	settings := &out.Cluster
	if settings.DeploymentID == 0 {
		settings.DeploymentID = DefaultDeploymentID
	}
	if settings.DefaultReplicas == 0 {
		settings.DefaultReplicas = min(DefaultReplicasMax, max(1, len(out.Nodes)))
	}
	if settings.BackgroundSyncInterval == nil {
		interval := Duration(DefaultBackgroundSyncInterval)
		settings.BackgroundSyncInterval = &interval
	}
	raft := &settings.Raft
	if raft.RTT == 0 {
		raft.RTT = Duration(DefaultRaftRTT)
	}
	if raft.ElectionRTT == 0 {
		raft.ElectionRTT = DefaultElectionRTT
	}
	if raft.HeartbeatRTT == 0 {
		raft.HeartbeatRTT = min(DefaultHeartbeatRTT, max(1, raft.ElectionRTT/10))
	}
	if raft.CoordinationElectionRTT == 0 {
		raft.CoordinationElectionRTT = DefaultCoordinationElectionRTT
	}
	if raft.CoordinationHeartbeatRTT == 0 {
		raft.CoordinationHeartbeatRTT = min(DefaultCoordinationHeartbeatRTT, max(1, raft.CoordinationElectionRTT/10))
	}
	if raft.SnapshotEntries == 0 {
		raft.SnapshotEntries = DefaultSnapshotEntries
	}
	if raft.CompactionOverhead == 0 {
		raft.CompactionOverhead = DefaultCompactionOverhead
	}
	if raft.LogLevel == "" {
		raft.LogLevel = DefaultRaftLogLevel
	}
	return out
}

// Node returns the config of the node with that id.
func (c *Config) Node(id string) (NodeConfig, error) {
	for _, node := range c.Nodes {
		if node.ID == id {
			return node, nil
		}
	}
	known := make([]string, 0, len(c.Nodes))
	for _, node := range c.Nodes {
		known = append(known, node.ID)
	}
	return NodeConfig{}, fmt.Errorf("%w: %q is not in the config (nodes: %v)", ErrUnknownNode, id, known)
}

// Validate checks the config as it would run, that is with defaults filled
// in for omitted fields. It returns every problem found, joined; each is a
// *ConfigError naming its field.
func (c *Config) Validate() error {
	effective := c.WithDefaults()
	var problems []error
	report := func(field, format string, args ...any) {
		problems = append(problems, &ConfigError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	effective.validateNodes(report)
	effective.validateTLS(report)
	effective.validateSettings(report)
	return errors.Join(problems...)
}

type reportFunc func(field, format string, args ...any)

func (c *Config) validateNodes(report reportFunc) {
	if len(c.Nodes) == 0 {
		report("nodes", "at least one node is required")
		return
	}
	firstID := map[string]int{}
	firstReplicaID := map[uint64]int{}
	firstAddress := map[string]string{}
	firstDataDir := map[string]int{}
	for index, node := range c.Nodes {
		prefix := fmt.Sprintf("nodes[%d]", index)
		if err := validateNodeID(node.ID); err != nil {
			report(prefix+".id", "%v", err)
		} else if previous, seen := firstID[node.ID]; seen {
			report(prefix+".id", "duplicate of nodes[%d].id (%q)", previous, node.ID)
		} else if previous, seen := firstReplicaID[node.ReplicaID()]; seen {
			report(prefix+".id", "raft replica id collides with nodes[%d].id; choose another id", previous)
		} else {
			firstID[node.ID] = index
			firstReplicaID[node.ReplicaID()] = index
		}
		addresses := []struct{ name, value string }{
			{"client_address", node.ClientAddress},
			{"peer_address", node.PeerAddress},
			{"raft_address", node.RaftAddress},
			{"http_address", node.HTTPAddress},
		}
		for _, address := range addresses {
			field := prefix + "." + address.name
			if err := validateAddress(address.value); err != nil {
				report(field, "%v", err)
				continue
			}
			if previous, seen := firstAddress[address.value]; seen {
				report(field, "duplicate of %s (%s)", previous, address.value)
				continue
			}
			firstAddress[address.value] = field
		}
		if node.DataDir == "" {
			report(prefix+".data_dir", "required")
		} else if previous, seen := firstDataDir[node.DataDir]; seen {
			report(prefix+".data_dir", "duplicate of nodes[%d].data_dir (%s)", previous, node.DataDir)
		} else {
			firstDataDir[node.DataDir] = index
		}
	}
}

func (c *Config) validateSettings(report reportFunc) {
	settings := c.Cluster
	if settings.DefaultReplicas < 1 || settings.DefaultReplicas > len(c.Nodes) {
		report("cluster.default_replicas", "must be between 1 and the number of nodes (%d), got %d", len(c.Nodes), settings.DefaultReplicas)
	}
	if settings.DefaultPolicy != "" {
		if _, _, err := ResolvePolicy(settings.DefaultPolicy, settings.DefaultReplicas); err != nil {
			report("cluster.default_policy", "%v", err)
		}
	}
	if interval := time.Duration(*settings.BackgroundSyncInterval); interval < 0 || interval > time.Minute {
		report("cluster.background_sync_interval", "must be between 0s (off) and 1m, got %s", interval)
	}
	raft := settings.Raft
	if rtt := time.Duration(raft.RTT); rtt < time.Millisecond || rtt > 10*time.Second {
		report("cluster.raft.rtt", "must be between 1ms and 10s, got %s", rtt)
	} else if rtt%time.Millisecond != 0 {
		report("cluster.raft.rtt", "must be a whole number of milliseconds, got %s", rtt)
	}
	if raft.ElectionRTT < 10*raft.HeartbeatRTT {
		report("cluster.raft.election_rtt", "must be at least 10 x heartbeat_rtt (%d), got %d", raft.HeartbeatRTT, raft.ElectionRTT)
	}
	if raft.ElectionRTT > 1000 {
		report("cluster.raft.election_rtt", "must be at most 1000, got %d", raft.ElectionRTT)
	}
	if raft.CoordinationElectionRTT < 10*raft.CoordinationHeartbeatRTT {
		report("cluster.raft.coordination_election_rtt", "must be at least 10 x coordination_heartbeat_rtt (%d), got %d",
			raft.CoordinationHeartbeatRTT, raft.CoordinationElectionRTT)
	}
	if raft.CoordinationElectionRTT > 1000 {
		report("cluster.raft.coordination_election_rtt", "must be at most 1000, got %d", raft.CoordinationElectionRTT)
	}
	switch {
	case settings.Secret == "" && settings.SecretFile == "":
		report("cluster.secret", "required (or secret_file): nodes authenticate their peer links with it")
	case settings.Secret != "" && settings.SecretFile != "":
		report("cluster.secret", "give secret or secret_file, not both")
	case settings.Secret != "" && len(settings.Secret) < 16:
		report("cluster.secret", "must be at least 16 bytes, got %d", len(settings.Secret))
	}
	if _, err := parseLogLevel(raft.LogLevel); err != nil {
		report("cluster.raft.log_level", "%v", err)
	}
}

func validateNodeID(id string) error {
	if id == "" {
		return errors.New("required")
	}
	if len(id) > 64 {
		return fmt.Errorf("longer than 64 bytes")
	}
	for _, char := range id {
		isLower := char >= 'a' && char <= 'z'
		isUpper := char >= 'A' && char <= 'Z'
		isDigit := char >= '0' && char <= '9'
		if !isLower && !isUpper && !isDigit && char != '-' && char != '_' {
			return fmt.Errorf("%q: only letters, digits, '-' and '_' are allowed", id)
		}
	}
	return nil
}

func validateAddress(address string) error {
	if address == "" {
		return errors.New("required")
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%q is not host:port", address)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", address)
	}
	portNumber, err := strconv.Atoi(port)
	if err != nil || portNumber < 1 || portNumber > 65535 {
		return fmt.Errorf("%q: port must be 1-65535", address)
	}
	return nil
}

// SecretWarnings returns what is allowed but unwise about where the
// cluster secret comes from: a SecretFile that its group or others may
// read (whoever reads it can prove to be a node on the peer links). A
// node logs each at start. A file that cannot be read is PeerSecret's
// error, not a warning.
func (c *Config) SecretWarnings() []string {
	path := c.Cluster.SecretFile
	if path == "" {
		return nil
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm()&0o044 == 0 {
		return nil
	}
	return []string{fmt.Sprintf("cluster.secret_file %s may be read by its group or others (mode %04o): whoever reads it "+
		"can open peer links as a node; chmod go-r %s", path, info.Mode().Perm(), path)}
}

// PeerSecret returns the cluster secret: Secret, or SecretFile's content
// without its trailing newline.
func (c *Config) PeerSecret() ([]byte, error) {
	settings := c.Cluster
	if settings.SecretFile == "" {
		return []byte(settings.Secret), nil
	}
	data, err := os.ReadFile(settings.SecretFile)
	if err != nil {
		return nil, &ConfigError{Field: "cluster.secret_file", Problem: err.Error()}
	}
	secret := bytes.TrimRight(data, "\r\n")
	if len(secret) < 16 {
		return nil, &ConfigError{Field: "cluster.secret_file", Problem: fmt.Sprintf("the secret must be at least 16 bytes, got %d", len(secret))}
	}
	return secret, nil
}
