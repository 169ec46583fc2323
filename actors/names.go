package actors

// Queue naming rule. A queue name becomes a directory name under the data
// directory and a path segment of its partition actors, so the rule is
// strict: 1 to 200 bytes of ASCII letters, digits, '.', '_' and '-', not
// starting with '.' (no hidden directories, no "." or ".."). Names are
// case-sensitive.

import (
	"errors"
	"fmt"
)

// ErrInvalidName is returned for a queue name that breaks the naming rule.
var ErrInvalidName = errors.New("actors: invalid queue name")

// maxQueueNameBytes bounds a queue name.
const maxQueueNameBytes = 200

// ValidateQueueName checks name against the naming rule.
func ValidateQueueName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: the name is empty", ErrInvalidName)
	}
	if len(name) > maxQueueNameBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidName, len(name), maxQueueNameBytes)
	}
	if name[0] == '.' {
		return fmt.Errorf("%w: %q starts with '.'", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q has byte %#02x at %d; allowed are letters, digits, '.', '_' and '-'",
				ErrInvalidName, clipName(name), c, i)
		}
	}
	return nil
}

// clipName shortens a name for an error message.
func clipName(name string) string {
	if len(name) > 64 {
		return name[:64] + "..."
	}
	return name
}
