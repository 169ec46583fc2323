package wire

// Queue names (docs/protocol.md 4.9). A queue name is 1 to
// MaxQueueNameBytes bytes of ASCII letters, digits, '.', '_' and '-', and
// does not start with '.'. The rule is a protocol rule, and it is strict
// because a node stores each queue in a directory of that name: a name
// that passes can never be "", "." or "..", never hold a path separator or
// a NUL, and never name a hidden file. Every layer that takes a name from
// outside checks it with ValidateQueueName: the session for each request,
// the cluster catalog for each declaration it applies (a command can be
// proposed through Raft without passing any session), and JoinQueuePath
// again at every join of a name into a data directory, so a name that
// slipped past one layer still cannot leave the directory.

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// MaxQueueNameBytes is the longest queue name, in bytes.
const MaxQueueNameBytes = 200

// maxPathElementBytes is the longest file name a path element may be
// (NAME_MAX on Linux and most file systems).
const maxPathElementBytes = 255

// ErrInvalidQueueName is wrapped by every error of ValidateQueueName;
// one of the ErrQueueName... errors below says which part of the rule
// the name breaks.
var ErrInvalidQueueName = errors.New("wire: invalid queue name")

// The parts of the rule, each wrapping ErrInvalidQueueName.
var (
	ErrQueueNameEmpty      = fmt.Errorf("%w: the name is empty", ErrInvalidQueueName)
	ErrQueueNameTooLong    = fmt.Errorf("%w: the name is longer than %d bytes", ErrInvalidQueueName, MaxQueueNameBytes)
	ErrQueueNameLeadingDot = fmt.Errorf("%w: the name starts with '.'", ErrInvalidQueueName)
	ErrQueueNameByte       = fmt.Errorf("%w: the name holds a byte other than letters, digits, '.', '_' and '-'", ErrInvalidQueueName)
)

// ErrUnsafePathElement is returned by SafePathElement and JoinQueuePath
// for an element that could leave the directory it is joined to.
var ErrUnsafePathElement = errors.New("wire: unsafe path element")

// QueueNameError is the error of ValidateQueueName. It unwraps to one of
// the ErrQueueName... errors, and through it to ErrInvalidQueueName.
type QueueNameError struct {
	Name   string // the name, cut to 64 bytes
	Offset int    // for ErrQueueNameByte, the offset of the first bad byte
	Byte   byte   // for ErrQueueNameByte, that byte
	Reason error  // ErrQueueNameEmpty, ErrQueueNameTooLong, ErrQueueNameLeadingDot or ErrQueueNameByte
	Bytes  int    // the name's length in bytes
}

func (e *QueueNameError) Error() string {
	switch e.Reason {
	case ErrQueueNameEmpty:
		return "invalid queue name: the name is empty"
	case ErrQueueNameTooLong:
		return fmt.Sprintf("invalid queue name %q: %d bytes, the limit is %d", e.Name, e.Bytes, MaxQueueNameBytes)
	case ErrQueueNameLeadingDot:
		return fmt.Sprintf("invalid queue name %q: it starts with '.'", e.Name)
	}
	return fmt.Sprintf("invalid queue name %q: byte %#02x at offset %d; a name holds only letters, digits, '.', '_' and '-'",
		e.Name, e.Byte, e.Offset)
}

func (e *QueueNameError) Unwrap() error { return e.Reason }

// ValidateQueueName checks name against the queue-name rule. It returns
// nil or a *QueueNameError; it does not allocate for a valid name.
func ValidateQueueName(name string) error {
	switch {
	case name == "":
		return &QueueNameError{Reason: ErrQueueNameEmpty}
	case len(name) > MaxQueueNameBytes:
		return &QueueNameError{Name: clipName(name), Bytes: len(name), Reason: ErrQueueNameTooLong}
	case name[0] == '.':
		return &QueueNameError{Name: clipName(name), Bytes: len(name), Reason: ErrQueueNameLeadingDot}
	}
	for offset := 0; offset < len(name); offset++ {
		if !IsQueueNameByte(name[offset]) {
			return &QueueNameError{Name: clipName(name), Bytes: len(name), Offset: offset, Byte: name[offset],
				Reason: ErrQueueNameByte}
		}
	}
	return nil
}

// IsQueueNameByte reports whether c may appear in a queue name: an ASCII
// letter, a digit, '.', '_' or '-'.
func IsQueueNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// SafePathElement checks that element is one file name that stays inside
// the directory it is joined to: not empty, not "." or "..", no '/', '\\'
// or NUL, at most 255 bytes. It allows a leading '.' (the node's own
// files, such as deleted-queue tombstones, use one); queue names are
// stricter and are checked with ValidateQueueName, as JoinQueuePath does.
func SafePathElement(element string) error {
	switch {
	case element == "":
		return fmt.Errorf("%w: empty", ErrUnsafePathElement)
	case element == "." || element == "..":
		return fmt.Errorf("%w: %q", ErrUnsafePathElement, element)
	case len(element) > maxPathElementBytes:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrUnsafePathElement, len(element), maxPathElementBytes)
	}
	if index := strings.IndexAny(element, "/\\\x00"); index >= 0 {
		return fmt.Errorf("%w: %q has byte %#02x at offset %d", ErrUnsafePathElement, clipName(element), element[index], index)
	}
	return nil
}

// JoinQueuePath joins a queue name, and then further elements, under
// root: JoinQueuePath(dataDir+"/queues", "orders", "0") is
// dataDir/queues/orders/0. The name must pass ValidateQueueName and each
// further element SafePathElement; the joined path is checked once more
// to lie strictly inside root. Every place that turns a queue name into a
// path calls this, never path.Join or filepath.Join directly, so that a
// name from a client, a catalog entry or a file on disk cannot leave the
// data directory, whichever check it slipped past before.
//
// Paths use '/' (as the node's file system interface does); root must not
// be empty.
func JoinQueuePath(root, name string, more ...string) (string, error) {
	if root == "" {
		return "", fmt.Errorf("%w: empty root", ErrUnsafePathElement)
	}
	if err := ValidateQueueName(name); err != nil {
		return "", err
	}
	if err := SafePathElement(name); err != nil {
		return "", err // cannot happen for a valid name; checked again on purpose
	}
	for _, element := range more {
		if err := SafePathElement(element); err != nil {
			return "", err
		}
	}
	cleanRoot := path.Clean(root)
	joined := path.Join(append([]string{cleanRoot, name}, more...)...)
	if !strictlyInside(cleanRoot, joined) {
		return "", fmt.Errorf("%w: %q joined under %q gives %q", ErrUnsafePathElement, clipName(name), root, joined)
	}
	return joined, nil
}

// strictlyInside reports whether the clean path joined names something
// below the clean directory root (not root itself).
func strictlyInside(root, joined string) bool {
	switch root {
	case ".":
		return joined != "." && joined != ".." && !strings.HasPrefix(joined, "../") && !path.IsAbs(joined)
	case "/":
		return joined != "/" && path.IsAbs(joined)
	}
	return strings.HasPrefix(joined, root+"/") && len(joined) > len(root)+1
}

// clipName shortens a name for an error message.
func clipName(name string) string {
	if len(name) > 64 {
		return name[:64] + "..."
	}
	return name
}
