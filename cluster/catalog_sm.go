package cluster

// catalogMachine is the Raft state machine of the catalog shard: a thin
// IStateMachine shell around CatalogState.Apply. Entries and snapshots are
// msgpack. dragonboat calls Update, RecoverFromSnapshot and Close under its
// write lock and Lookup and SaveSnapshot under its read lock, so the state
// needs no lock of its own; Lookup answers deep copies so callers never see
// later updates.
//
// Update never returns an error for a bad command: that would stop the
// node. A command that cannot be decoded is a broken invariant (every
// proposer is this package) and panics.

import (
	"fmt"
	"io"
	"sync/atomic"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/vmihailenco/msgpack/v5"
)

// catalogQuery asks Lookup for the whole state (Name empty) or one queue.
type catalogQuery struct {
	Name string
}

type catalogMachine struct {
	state *CatalogState
	// changed is called after every update or recovery that may have changed
	// the state. It must not block (it kicks the node's reconcile loop).
	changed func()
	// beforeUpdate, when it holds a function, runs it with the command's
	// name before each command applies (a test seam,
	// Node.SetBeforeCatalogUpdate).
	beforeUpdate *atomic.Pointer[func(command string)]
}

// withBeforeUpdate makes create's machines call the function hook holds,
// if any, before each update.
func withBeforeUpdate(create sm.CreateStateMachineFunc, hook *atomic.Pointer[func(command string)]) sm.CreateStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IStateMachine {
		machine := create(shardID, replicaID).(*catalogMachine)
		machine.beforeUpdate = hook
		return machine
	}
}

// catalogRevisionQuery asks Lookup for the state's revision only.
type catalogRevisionQuery struct{}

func newCatalogMachine(changed func()) sm.CreateStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IStateMachine {
		return &catalogMachine{state: newCatalogState(), changed: changed}
	}
}

func (m *catalogMachine) Update(entry sm.Entry) (sm.Result, error) {
	var command catalogCommand
	if err := msgpack.Unmarshal(entry.Cmd, &command); err != nil {
		panic(fmt.Sprintf("cluster: catalog entry %d does not decode: %v", entry.Index, err))
	}
	if m.beforeUpdate != nil {
		if hook := m.beforeUpdate.Load(); hook != nil && *hook != nil {
			(*hook)(command.Kind.String())
		}
	}
	before := m.state.Revision
	result := m.state.Apply(command)
	data, err := msgpack.Marshal(&result)
	if err != nil {
		panic(fmt.Sprintf("cluster: catalog result does not encode: %v", err))
	}
	if m.state.Revision != before && m.changed != nil {
		m.changed()
	}
	return sm.Result{Value: uint64(result.Code), Data: data}, nil
}

func (m *catalogMachine) Lookup(query any) (any, error) {
	if _, revisionOnly := query.(catalogRevisionQuery); revisionOnly {
		return m.state.Revision, nil
	}
	request, ok := query.(catalogQuery)
	if !ok {
		return nil, fmt.Errorf("cluster: catalog lookup of %T", query)
	}
	if request.Name == "" {
		return m.state.clone(), nil
	}
	queue, found := m.state.Queues[request.Name]
	if !found {
		return (*QueueInfo)(nil), nil
	}
	return queue.clone(), nil
}

func (m *catalogMachine) SaveSnapshot(writer io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	return msgpack.NewEncoder(writer).Encode(m.state)
}

func (m *catalogMachine) RecoverFromSnapshot(reader io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	state := newCatalogState()
	if err := msgpack.NewDecoder(reader).Decode(state); err != nil {
		return fmt.Errorf("cluster: catalog snapshot: %w", err)
	}
	if state.Queues == nil {
		state.Queues = map[string]*QueueInfo{}
	}
	m.state = state
	if m.changed != nil {
		m.changed()
	}
	return nil
}

func (m *catalogMachine) Close() error { return nil }
