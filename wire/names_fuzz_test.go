package wire

import (
	"errors"
	"path"
	"regexp"
	"strings"
	"testing"
)

// queueNameOracle is the rule of docs/protocol.md 4.9 written a second
// way, to check ValidateQueueName against.
var queueNameOracle = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$`)

var unsafeNameSeeds = []string{"", ".", "..", ".x", "a/b", "a\x00b", strings.Repeat("q", 300),
	"../etc", "a/../..", "orders", "orders.eu", "x:y", "\\", "\xff", strings.Repeat("q", 200)}

// FuzzQueueName checks ValidateQueueName against the oracle, and that
// whatever it accepts joins under a root as exactly one element below it.
func FuzzQueueName(f *testing.F) {
	for _, seed := range unsafeNameSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateQueueName(name)
		if (err == nil) != queueNameOracle.MatchString(name) {
			t.Fatalf("ValidateQueueName(%q) = %v, the rule says valid=%v", name, err, queueNameOracle.MatchString(name))
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidQueueName) || strings.ContainsRune(err.Error(), 0) {
				t.Fatalf("error %q for %q", err, name)
			}
			return
		}
		if err := SafePathElement(name); err != nil {
			t.Fatalf("a valid name %q is not a safe path element: %v", name, err)
		}
		joined, err := JoinQueuePath("/data/queues", name, "0")
		if err != nil || joined != "/data/queues/"+name+"/0" || path.Clean(joined) != joined {
			t.Fatalf("JoinQueuePath(%q) = %q, %v", name, joined, err)
		}
	})
}

// FuzzJoinQueuePath checks that no name and element get a path outside
// the root, whatever they hold.
func FuzzJoinQueuePath(f *testing.F) {
	for _, seed := range unsafeNameSeeds {
		f.Add(seed, "0")
		f.Add("orders", seed)
	}
	f.Fuzz(func(t *testing.T, name, element string) {
		for _, root := range []string{"/data/queues", "data", ".", "/"} {
			joined, err := JoinQueuePath(root, name, element)
			if err != nil {
				if joined != "" {
					t.Fatalf("an error with a path %q", joined)
				}
				continue
			}
			if !queueNameOracle.MatchString(name) {
				t.Fatalf("joined the invalid name %q", name)
			}
			want := path.Join(root, name, element)
			if joined != want || path.Dir(path.Dir(joined)) != path.Clean(root) || path.Base(path.Dir(joined)) != name {
				t.Fatalf("JoinQueuePath(%q, %q, %q) = %q; not one name and one element below the root", root, name, element, joined)
			}
		}
	})
}
