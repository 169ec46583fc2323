package cluster

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/vmihailenco/msgpack/v5"
)

func initializedCatalog(t *testing.T, nodeCount int, settings Settings) *CatalogState {
	t.Helper()
	state := newCatalogState()
	init := &initCommand{Settings: settings}
	for index := range nodeCount {
		id := "node" + string(rune('1'+index))
		init.Nodes = append(init.Nodes, NodeInfo{ID: id, ReplicaID: replicaIDFor(id)})
	}
	if result := state.Apply(catalogCommand{Kind: commandInit, Init: init}); result.err() != nil {
		t.Fatalf("init: %v", result.err())
	}
	return state
}

func declare(state *CatalogState, decl QueueDecl) catalogResult {
	return state.Apply(catalogCommand{Kind: commandDeclare, Declare: &decl})
}

func TestDeclareBeforeInitIsNotReady(t *testing.T) {
	state := newCatalogState()
	result := declare(state, QueueDecl{Name: "q"})
	if !errors.Is(result.err(), ErrNotReady) {
		t.Fatalf("declare before init: %v", result.err())
	}
}

func TestInitAppliesOnce(t *testing.T) {
	state := initializedCatalog(t, 3, Settings{DefaultReplicas: 3})
	revision := state.Revision
	second := &initCommand{Nodes: []NodeInfo{{ID: "other"}}, Settings: Settings{DefaultReplicas: 1}}
	state.Apply(catalogCommand{Kind: commandInit, Init: second})
	if state.Revision != revision || len(state.Nodes) != 3 || state.Settings.DefaultReplicas != 3 {
		t.Fatalf("a second init changed the catalog: %+v", state)
	}
}

func TestDeclareDefaults(t *testing.T) {
	cases := []struct {
		name       string
		settings   Settings
		decl       QueueDecl
		wantMode   Mode
		wantPolicy string
		wantCopies int
	}{
		{"no mode is buffered majority", Settings{DefaultReplicas: 3}, QueueDecl{Name: "q"}, ModeBuffered, "replica_buffered:2", 2},
		{"durable mode is majority durable", Settings{DefaultReplicas: 3}, QueueDecl{Name: "q", Mode: ModeDurable}, ModeDurable, "majority_durable", 2},
		{"buffered mode", Settings{DefaultReplicas: 3}, QueueDecl{Name: "q", Mode: ModeBuffered, Replicas: 1}, ModeBuffered, "replica_buffered:1", 1},
		{"named policy sets mode", Settings{DefaultReplicas: 3}, QueueDecl{Name: "q", Policy: "replica_durable:3"}, ModeDurable, "replica_durable:3", 3},
		{"cluster default policy", Settings{DefaultReplicas: 3, DefaultPolicy: "replica_durable:1"}, QueueDecl{Name: "q"}, ModeDurable, "replica_durable:1", 1},
		{"deprecated alias", Settings{DefaultReplicas: 3}, QueueDecl{Name: "q", Policy: "replica_accepted:2"}, ModeDurable, "replica_durable:2", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state := initializedCatalog(t, 3, tc.settings)
			result := declare(state, tc.decl)
			if result.err() != nil {
				t.Fatalf("declare: %v", result.err())
			}
			queue := result.Queue
			if !result.Created || queue.Mode != tc.wantMode || queue.Policy != tc.wantPolicy || queue.WriteCopies != tc.wantCopies {
				t.Fatalf("queue = %+v created %v", queue, result.Created)
			}
			if queue.Serving != ServingReplicated || len(queue.Partitions) != 1 || queue.Partitions[0].ShardID != FirstCoordinationShardID {
				t.Fatalf("queue = %+v", queue)
			}
		})
	}
}

func TestDeprecatedAliasWarns(t *testing.T) {
	state := initializedCatalog(t, 3, Settings{DefaultReplicas: 3})
	result := declare(state, QueueDecl{Name: "q", Policy: "replica_accepted:2"})
	if len(result.Warnings) != 1 {
		t.Fatalf("warnings = %v", result.Warnings)
	}
	again := declare(state, QueueDecl{Name: "q", Policy: "replica_accepted:2"})
	if again.err() != nil || len(again.Warnings) != 1 || again.Created {
		t.Fatalf("re-declare with the alias: %v %v", again.err(), again.Warnings)
	}
}

// The declaration is fixed at first declare: naming another mode, policy,
// replica count, partition count or options is refused; leaving a field
// out keeps it; repeating it is accepted.
func TestRedeclareRules(t *testing.T) {
	first := QueueDecl{Name: "q", Mode: ModeDurable, Replicas: 3, Partitions: 2, Options: map[string]string{"ttl": "1m"}}
	cases := []struct {
		name string
		decl QueueDecl
		want error
	}{
		{"same", first, nil},
		{"mode omitted", QueueDecl{Name: "q"}, nil},
		{"same policy written differently", QueueDecl{Name: "q", Policy: "replica_accepted"}, nil},
		{"other mode", QueueDecl{Name: "q", Mode: ModeBuffered}, ErrModeConflict},
		{"other policy", QueueDecl{Name: "q", Policy: "replica_durable:3"}, ErrDeclarationConflict},
		{"buffered policy", QueueDecl{Name: "q", Policy: "replica_buffered:2"}, ErrDeclarationConflict},
		{"other replicas", QueueDecl{Name: "q", Replicas: 2}, ErrDeclarationConflict},
		{"other partitions", QueueDecl{Name: "q", Partitions: 1}, ErrDeclarationConflict},
		{"other options", QueueDecl{Name: "q", Options: map[string]string{"ttl": "2m"}}, ErrDeclarationConflict},
		{"bad policy", QueueDecl{Name: "q", Policy: "fast"}, ErrInvalidPolicy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state := initializedCatalog(t, 3, Settings{DefaultReplicas: 3})
			if result := declare(state, first); result.err() != nil {
				t.Fatal(result.err())
			}
			before := state.clone()
			result := declare(state, tc.decl)
			if !errors.Is(result.err(), tc.want) || (tc.want == nil && result.err() != nil) {
				t.Fatalf("re-declare error = %v, want %v", result.err(), tc.want)
			}
			if !reflect.DeepEqual(before, state) {
				t.Fatalf("a re-declare changed the catalog")
			}
			if tc.want == nil && (result.Queue == nil || result.Queue.Mode != ModeDurable || result.Created) {
				t.Fatalf("re-declare answered %+v", result.Queue)
			}
		})
	}
}

func TestDeclareRejectsBadDeclarations(t *testing.T) {
	cases := []struct {
		name string
		decl QueueDecl
		want error
	}{
		{"empty name", QueueDecl{}, ErrInvalidDeclaration},
		{"bad name", QueueDecl{Name: "a/b"}, ErrInvalidDeclaration},
		{"name ..", QueueDecl{Name: ".."}, ErrInvalidDeclaration},
		{"name .x", QueueDecl{Name: ".x"}, ErrInvalidDeclaration},
		{"name with NUL", QueueDecl{Name: "a\x00b"}, ErrInvalidDeclaration},
		{"name with ':'", QueueDecl{Name: "a:b"}, ErrInvalidDeclaration},
		{"name of 300 bytes", QueueDecl{Name: strings.Repeat("q", 300)}, ErrInvalidDeclaration},
		{"too many replicas", QueueDecl{Name: "q", Replicas: 4}, ErrInvalidDeclaration},
		{"too many partitions", QueueDecl{Name: "q", Partitions: MaxPartitions + 1}, ErrInvalidDeclaration},
		{"mode contradicts policy", QueueDecl{Name: "q", Mode: ModeBuffered, Policy: "majority_durable"}, ErrInvalidDeclaration},
		{"policy wider than replicas", QueueDecl{Name: "q", Replicas: 1, Policy: "replica_durable:2"}, ErrInvalidPolicy},
		{"unknown mode", QueueDecl{Name: "q", Mode: Mode(9)}, ErrInvalidDeclaration},
	}
	for _, tc := range cases {
		state := initializedCatalog(t, 3, Settings{DefaultReplicas: 3})
		before := state.Revision
		if result := declare(state, tc.decl); !errors.Is(result.err(), tc.want) {
			t.Errorf("%s: error = %v, want %v", tc.name, result.err(), tc.want)
		}
		if state.Revision != before {
			t.Errorf("%s: a refused declare moved the revision", tc.name)
		}
	}
}

func TestShardIDsAreNeverReused(t *testing.T) {
	state := initializedCatalog(t, 3, Settings{DefaultReplicas: 3})
	first := declare(state, QueueDecl{Name: "q", Partitions: 2}).Queue
	if result := state.Apply(catalogCommand{Kind: commandDelete, Name: "q"}); result.err() != nil {
		t.Fatal(result.err())
	}
	second := declare(state, QueueDecl{Name: "q"}).Queue
	if second.Partitions[0].ShardID <= first.Partitions[1].ShardID {
		t.Fatalf("shard %d reused after %v", second.Partitions[0].ShardID, first.Partitions)
	}
	if result := state.Apply(catalogCommand{Kind: commandDelete, Name: "nope"}); !errors.Is(result.err(), ErrQueueNotFound) {
		t.Fatalf("delete of a missing queue: %v", result.err())
	}
}

func TestOwnerHints(t *testing.T) {
	state := initializedCatalog(t, 3, Settings{DefaultReplicas: 3})
	queue := declare(state, QueueDecl{Name: "q"}).Queue
	shardID := queue.Partitions[0].ShardID
	hint := func(owner string, epoch uint64, shard uint64) {
		state.Apply(catalogCommand{Kind: commandOwnerHint, Hint: &ownerHint{Queue: "q", ShardID: shard, Owner: owner, Epoch: epoch}})
	}
	hint("node2", 1, shardID)
	hint("node3", 1, shardID)      // same epoch: stale
	hint("node3", 5, shardID+1000) // another shard: stale
	partition := state.Queues["q"].Partitions[0]
	if partition.Owner != "node2" || partition.Epoch != 1 {
		t.Fatalf("partition = %+v", partition)
	}
	hint("node3", 2, shardID)
	if partition := state.Queues["q"].Partitions[0]; partition.Owner != "node3" || partition.Epoch != 2 {
		t.Fatalf("partition = %+v", partition)
	}
}

func TestSetSetting(t *testing.T) {
	state := initializedCatalog(t, 3, Settings{DefaultReplicas: 3})
	set := func(key, value string) error {
		return state.Apply(catalogCommand{Kind: commandSetSetting, Key: key, Value: value}).err()
	}
	for _, bad := range [][2]string{{"default_replicas", "4"}, {"default_replicas", "x"}, {"default_policy", "fast"}, {"background_sync_interval", "-1s"}, {"colour", "blue"}} {
		if err := set(bad[0], bad[1]); !errors.Is(err, ErrInvalidSetting) {
			t.Errorf("SetSetting(%s=%s) = %v", bad[0], bad[1], err)
		}
	}
	if err := set("background_sync_interval", "250ms"); err != nil || state.Settings.BackgroundSyncIntervalMs != 250 {
		t.Fatalf("interval: %v %+v", err, state.Settings)
	}
	if err := set("default_replicas", "1"); err != nil {
		t.Fatal(err)
	}
	if queue := declare(state, QueueDecl{Name: "one"}).Queue; queue.Replicas != 1 || len(queue.Partitions[0].Replicas) != 1 {
		t.Fatalf("default replicas not applied: %+v", queue)
	}
}

// The state machine shell: entries and snapshots round-trip through
// msgpack, and a recovered machine answers like the original.
func TestCatalogMachineSnapshotRoundTrip(t *testing.T) {
	changes := 0
	machine := newCatalogMachine(func() { changes++ })(CatalogShardID, 1).(*catalogMachine)
	commands := []catalogCommand{
		{Kind: commandInit, Init: &initCommand{Nodes: []NodeInfo{{ID: "node1"}, {ID: "node2"}}, Settings: Settings{DefaultReplicas: 2}}},
		{Kind: commandDeclare, Declare: &QueueDecl{Name: "a", Mode: ModeDurable, Options: map[string]string{"k": "v"}}},
		{Kind: commandDeclare, Declare: &QueueDecl{Name: "b", Partitions: 3}},
		{Kind: commandDeclare, Declare: &QueueDecl{Name: "a", Mode: ModeBuffered}},
	}
	var last sm.Result
	for index, command := range commands {
		data, err := msgpack.Marshal(&command)
		if err != nil {
			t.Fatal(err)
		}
		if last, err = machine.Update(sm.Entry{Index: uint64(index + 1), Cmd: data}); err != nil {
			t.Fatal(err)
		}
	}
	if resultCode(last.Value) != resultModeConflict || changes != 3 {
		t.Fatalf("last result %d, changes %d", last.Value, changes)
	}
	var snapshot bytes.Buffer
	if err := machine.SaveSnapshot(&snapshot, nil, nil); err != nil {
		t.Fatal(err)
	}
	recovered := newCatalogMachine(nil)(CatalogShardID, 2).(*catalogMachine)
	if err := recovered.RecoverFromSnapshot(&snapshot, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(machine.state, recovered.state) {
		t.Fatalf("recovered state differs:\n%+v\n%+v", machine.state, recovered.state)
	}
	value, err := recovered.Lookup(catalogQuery{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	queue := value.(*QueueInfo)
	if len(queue.Partitions) != 3 || !slices.Equal(queue.Partitions[2].Replicas, []string{"node2", "node1"}) {
		t.Fatalf("queue b = %+v", queue)
	}
	// Lookup answers copies: changing one leaves the machine alone.
	queue.Partitions[0].Replicas[0] = "changed"
	again, _ := recovered.Lookup(catalogQuery{Name: "b"})
	if again.(*QueueInfo).Partitions[0].Replicas[0] == "changed" {
		t.Fatal("Lookup shares memory with the state machine")
	}
}
