package runtime

import (
	"testing"
	"time"
)

// testWait bounds every wait of these tests; it is a bound, not a
// measurement.
const testWait = 30 * time.Second

// waitFor polls done until it holds, failing the test after testWait.
func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
