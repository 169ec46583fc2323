package vfs

import (
	"path"
	"strings"
	"syscall"
)

// FaultOp selects which operations a FaultRule counts. Values may be or'ed.
type FaultOp uint8

// Operations a fault can hit.
const (
	// FaultWrite counts File.Write and File.WriteAt.
	FaultWrite FaultOp = 1 << iota
	// FaultSync counts File.Sync and FS.SyncDir (matched on the directory).
	FaultSync
	// FaultRead counts File.ReadAt.
	FaultRead
	// FaultTruncate counts File.Truncate.
	FaultTruncate
)

// FaultRule fails the Nth matching operation on a Mem.
type FaultRule struct {
	// Op is the set of operations counted.
	Op FaultOp
	// Pattern is a path.Match pattern. Without a slash it is matched
	// against the base name ("*.log"); with one, against the cleaned full
	// path. Empty matches every file.
	Pattern string
	// Nth is which matching operation fails, counted from the moment the
	// rule is injected: 1 (or 0) is the next one.
	Nth int
	// Err is the error returned; nil means syscall.EIO. Use syscall.ENOSPC
	// for a full disk.
	Err error
	// Sticky makes every matching operation after the Nth fail too.
	Sticky bool
	// PartialWrite makes a failing write store the first half of its bytes
	// before returning the error, as a short write would.
	PartialWrite bool
}

func (rule *FaultRule) err() error {
	if rule.Err == nil {
		return syscall.EIO
	}
	return rule.Err
}

func (rule *FaultRule) matches(op FaultOp, name string) bool {
	if rule.Op&op == 0 {
		return false
	}
	if rule.Pattern == "" {
		return true
	}
	subject := path.Base(name)
	if strings.Contains(rule.Pattern, "/") {
		subject = name
	}
	matched, err := path.Match(rule.Pattern, subject)
	return err == nil && matched
}

// faultState counts one rule's matches.
type faultState struct {
	rule  FaultRule
	count int
}

// InjectFault adds a rule. Rules are independent; each counts its own
// matches.
func (m *Mem) InjectFault(rule FaultRule) {
	if rule.Nth <= 0 {
		rule.Nth = 1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = append(m.faults, &faultState{rule: rule})
}

// ClearFaults removes every rule.
func (m *Mem) ClearFaults() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults = nil
}

// FaultsFired reports how many operations injected rules have failed.
func (m *Mem) FaultsFired() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.faultsFired
}

// matchFaultLocked counts op against every rule and returns the rule that
// fails it, if any.
func (m *Mem) matchFaultLocked(op FaultOp, name string) *FaultRule {
	var failing *FaultRule
	for _, state := range m.faults {
		if !state.rule.matches(op, name) {
			continue
		}
		state.count++
		fires := state.count == state.rule.Nth || (state.rule.Sticky && state.count > state.rule.Nth)
		if fires && failing == nil {
			failing = &state.rule
		}
	}
	if failing != nil {
		m.faultsFired++
	}
	return failing
}

func (m *Mem) maybeFailLocked(op FaultOp, name string) error {
	if rule := m.matchFaultLocked(op, name); rule != nil {
		return rule.err()
	}
	return nil
}
