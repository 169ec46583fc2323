package cluster

// A replication policy says how many copies of a queue partition (owner
// included) must be past a record at the queue's boundary before it is
// confirmed and released. Written forms:
//
//	replica_durable:N    N copies have fsynced the record (mode durable)
//	majority_durable     a majority of the replicas have fsynced it
//	replica_buffered:N   N copies have written it to the OS (mode buffered)
//	replica_accepted[:N] deprecated alias of replica_durable[:N]; without N
//	                     it means majority_durable
//
// Invariant: a resolved Policy has 1 <= Copies <= replicas of its queue.

import (
	"fmt"
	"strconv"
	"strings"
)

// Mode is a queue's durability mode, fixed at first declare.
type Mode uint8

const (
	// ModeUnset means "not named": a declare without a mode.
	ModeUnset Mode = iota
	// ModeDurable confirms after the required copies fsynced the record.
	ModeDurable
	// ModeBuffered confirms after the required copies wrote it to the OS.
	ModeBuffered
)

func (m Mode) String() string {
	switch m {
	case ModeUnset:
		return ""
	case ModeDurable:
		return "durable"
	case ModeBuffered:
		return "buffered"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// MarshalText writes the mode's name, so JSON shows "durable"/"buffered".
func (m Mode) MarshalText() ([]byte, error) {
	if m > ModeBuffered {
		return nil, fmt.Errorf("%w: unknown mode %d", ErrInvalidDeclaration, uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads a mode's name.
func (m *Mode) UnmarshalText(text []byte) error {
	parsed, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = parsed
	return nil
}

// ParseMode reads "durable", "buffered" or "" (unset).
func ParseMode(text string) (Mode, error) {
	switch text {
	case "":
		return ModeUnset, nil
	case "durable":
		return ModeDurable, nil
	case "buffered":
		return ModeBuffered, nil
	}
	return ModeUnset, fmt.Errorf("%w: mode %q: want durable or buffered", ErrInvalidDeclaration, text)
}

// PolicyKind names the family of a policy.
type PolicyKind uint8

const (
	// PolicyReplicaDurable is replica_durable:N.
	PolicyReplicaDurable PolicyKind = iota + 1
	// PolicyMajorityDurable is majority_durable.
	PolicyMajorityDurable
	// PolicyReplicaBuffered is replica_buffered:N.
	PolicyReplicaBuffered
)

// Policy is a parsed replication policy. Copies is the write threshold W,
// owner included; it is 0 in a majority policy until resolved against a
// replica count.
type Policy struct {
	Kind   PolicyKind `msgpack:"kind"`
	Copies int        `msgpack:"copies"`
}

// Mode is the durability mode the policy implies.
func (p Policy) Mode() Mode {
	if p.Kind == PolicyReplicaBuffered {
		return ModeBuffered
	}
	return ModeDurable
}

// String is the canonical written form.
func (p Policy) String() string {
	switch p.Kind {
	case PolicyReplicaDurable:
		return "replica_durable:" + strconv.Itoa(p.Copies)
	case PolicyMajorityDurable:
		return "majority_durable"
	case PolicyReplicaBuffered:
		return "replica_buffered:" + strconv.Itoa(p.Copies)
	}
	return fmt.Sprintf("policy(%d)", uint8(p.Kind))
}

// ParsePolicy parses a written policy. Warnings name deprecated forms; the
// caller passes them on to whoever declared the queue.
func ParsePolicy(text string) (Policy, []string, error) {
	name, count, hasCount := strings.Cut(strings.TrimSpace(text), ":")
	copies := 0
	if hasCount {
		parsed, err := strconv.Atoi(count)
		if err != nil || parsed < 1 {
			return Policy{}, nil, fmt.Errorf("%w: %q: copy count must be a positive integer", ErrInvalidPolicy, text)
		}
		copies = parsed
	}
	switch name {
	case "replica_durable", "replica_buffered":
		if !hasCount {
			return Policy{}, nil, fmt.Errorf("%w: %q: want %s:N", ErrInvalidPolicy, text, name)
		}
		kind := PolicyReplicaDurable
		if name == "replica_buffered" {
			kind = PolicyReplicaBuffered
		}
		return Policy{Kind: kind, Copies: copies}, nil, nil
	case "majority_durable":
		if hasCount {
			return Policy{}, nil, fmt.Errorf("%w: %q: majority_durable takes no count", ErrInvalidPolicy, text)
		}
		return Policy{Kind: PolicyMajorityDurable}, nil, nil
	case "replica_accepted":
		policy := Policy{Kind: PolicyMajorityDurable}
		if hasCount {
			policy = Policy{Kind: PolicyReplicaDurable, Copies: copies}
		}
		warning := fmt.Sprintf("policy %q is deprecated; it means %s", text, policy)
		return policy, []string{warning}, nil
	}
	return Policy{}, nil, fmt.Errorf("%w: %q: want replica_durable:N, majority_durable or replica_buffered:N", ErrInvalidPolicy, text)
}

// ResolvePolicy parses a policy and fixes its copy count for a queue with
// that many replicas.
func ResolvePolicy(text string, replicas int) (Policy, []string, error) {
	policy, warnings, err := ParsePolicy(text)
	if err != nil {
		return Policy{}, nil, err
	}
	resolved, err := policy.resolve(replicas)
	return resolved, warnings, err
}

func (p Policy) resolve(replicas int) (Policy, error) {
	if p.Kind == PolicyMajorityDurable {
		p.Copies = majorityOf(replicas)
	}
	if p.Copies < 1 || p.Copies > replicas {
		return Policy{}, fmt.Errorf("%w: %s needs %d copies but the queue has %d replicas", ErrInvalidPolicy, p, p.Copies, replicas)
	}
	return p, nil
}

// defaultPolicyFor is the policy of a queue declared with a mode and no
// policy: a majority of the replicas at the mode's boundary.
func defaultPolicyFor(mode Mode, replicas int) Policy {
	if mode == ModeDurable {
		return Policy{Kind: PolicyMajorityDurable, Copies: majorityOf(replicas)}
	}
	return Policy{Kind: PolicyReplicaBuffered, Copies: majorityOf(replicas)}
}

func majorityOf(replicas int) int {
	return replicas/2 + 1
}
