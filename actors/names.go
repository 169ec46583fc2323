package actors

// Queue naming rule: wire.ValidateQueueName (docs/protocol.md 4.9) is the
// one rule, shared with the cluster catalog. A queue name becomes a
// directory name under the data directory and a path segment of its
// partition actors; joins of a name into a path go through
// wire.JoinQueuePath.

import "github.com/fibrilmq/fibril/wire"

// ErrInvalidName is returned for a queue name that breaks the naming rule.
var ErrInvalidName = wire.ErrInvalidQueueName

// ValidateQueueName checks name against the naming rule.
func ValidateQueueName(name string) error { return wire.ValidateQueueName(name) }

// maxQueueNameBytes bounds a queue name.
const maxQueueNameBytes = wire.MaxQueueNameBytes

// clipName shortens a name for an error message.
func clipName(name string) string {
	if len(name) > 64 {
		return name[:64] + "..."
	}
	return name
}
