package access

// Operations and queue patterns.
//
// A permission grants a set of operations on the queues whose names match
// a pattern. A pattern is written in the queue-name alphabet (letters,
// digits, '.', '_', '-') plus '*', which matches any run of name bytes,
// the empty run and '.' included: "orders.*" matches "orders.eu" and
// "orders.eu.2" (and "orders."), not "orders"; "*" matches every queue.
// There is no other wildcard and no escaping. Grants only add: a user may
// do an operation on a queue when any of its permissions grants it there.

import (
	"fmt"
	"strings"

	"github.com/fibrilmq/fibril/wire"
)

// Operation is one thing a user may be allowed to do.
type Operation uint8

const (
	// Declare: create a queue, or re-declare an existing one.
	Declare Operation = 1 << iota
	// Publish: publish to a queue (and name it as a dead-letter target).
	Publish
	// Consume: subscribe to a queue and settle its deliveries.
	Consume
	// Admin: delete and purge a queue; on the pattern "*", node-wide
	// settings too.
	Admin
)

// Operations lists every operation, in the order of their names in a
// users file.
var Operations = []Operation{Declare, Publish, Consume, Admin}

var operationNames = map[Operation]string{Declare: "declare", Publish: "publish", Consume: "consume", Admin: "admin"}

func (o Operation) String() string {
	if name, ok := operationNames[o]; ok {
		return name
	}
	return fmt.Sprintf("operation_%d", uint8(o))
}

// ParseOperation returns the operation a users file names.
func ParseOperation(name string) (Operation, error) {
	for operation, known := range operationNames {
		if name == known {
			return operation, nil
		}
	}
	return 0, fmt.Errorf("unknown operation %q; want declare, publish, consume or admin", clip(name))
}

// pattern is a compiled queue pattern: the literal pieces between stars.
type pattern struct {
	text string
	// pieces are the literal runs; a star stands between each two. With
	// leadingStar or trailingStar the first or last piece may be
	// preceded or followed by any run.
	pieces       []string
	leadingStar  bool
	trailingStar bool
}

// compilePattern checks and compiles a pattern: 1 to
// wire.MaxQueueNameBytes bytes of the name alphabet and '*', not starting
// with '.' (no queue name does, so such a pattern would match nothing).
func compilePattern(text string) (pattern, error) {
	switch {
	case text == "":
		return pattern{}, fmt.Errorf("the pattern is empty")
	case len(text) > wire.MaxQueueNameBytes:
		return pattern{}, fmt.Errorf("the pattern is %d bytes; the limit is %d", len(text), wire.MaxQueueNameBytes)
	case text[0] == '.':
		return pattern{}, fmt.Errorf("the pattern %q starts with '.', and no queue name does", clip(text))
	}
	for offset := 0; offset < len(text); offset++ {
		if c := text[offset]; c != '*' && !wire.IsQueueNameByte(c) {
			return pattern{}, fmt.Errorf("the pattern %q has byte %#02x at offset %d; want letters, digits, '.', '_', '-' and '*'",
				clip(text), c, offset)
		}
	}
	compiled := pattern{text: text, leadingStar: text[0] == '*', trailingStar: text[len(text)-1] == '*'}
	for _, piece := range strings.Split(text, "*") {
		if piece != "" {
			compiled.pieces = append(compiled.pieces, piece)
		}
	}
	return compiled, nil
}

// match reports whether name matches the pattern. Each piece is found at
// its leftmost place after the previous one, which is enough for a
// pattern whose only wildcard is '*': O(len(name) x len(pattern)) at
// worst, and no allocation.
func (p *pattern) match(name string) bool {
	if len(p.pieces) == 0 {
		return p.leadingStar // "*" (or "**"): any name
	}
	rest := name
	for index, piece := range p.pieces {
		first, last := index == 0, index == len(p.pieces)-1
		switch {
		case first && !p.leadingStar:
			if !strings.HasPrefix(rest, piece) {
				return false
			}
			rest = rest[len(piece):]
		case last && !p.trailingStar:
			// The last piece must end the name; leftmost search would
			// stop too early ("*a" against "aa").
			if !strings.HasSuffix(rest, piece) {
				return false
			}
			rest = ""
		default:
			at := strings.Index(rest, piece)
			if at < 0 {
				return false
			}
			rest = rest[at+len(piece):]
		}
		if first && last && !p.leadingStar && !p.trailingStar {
			return rest == "" // no star at all: the whole name
		}
	}
	return p.trailingStar || rest == ""
}

// matchesEverything reports whether the pattern is "*" (or "**"...).
func (p *pattern) matchesEverything() bool { return len(p.pieces) == 0 }

// grant is one compiled permission.
type grant struct {
	pattern    pattern
	operations Operation // a set of Operation bits
}
