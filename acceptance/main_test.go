package acceptance

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// summary collects one row per case; TestMain prints it when any case
// added a row and FIBRIL_SOAK or -v asks for it. clusterSummary does the
// same for the cluster fault classes.
var (
	summary        Summary
	clusterSummary ClusterSummary
)

// soak reports whether the long versions run (FIBRIL_SOAK=1).
func soak() bool { return os.Getenv("FIBRIL_SOAK") == "1" }

// trials returns the short count, the soak count with FIBRIL_SOAK=1, or
// the value of the named variable when it is set.
func trials(t *testing.T, variable string, short, long int) int {
	if text := os.Getenv(variable); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", variable, text)
		}
		return n
	}
	if soak() {
		return long
	}
	return short
}

// testSeed returns FIBRIL_SEED or a fresh seed, and prints it when the
// test fails.
func testSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if text := os.Getenv("FIBRIL_SEED"); text != "" {
		parsed, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			t.Fatalf("FIBRIL_SEED: %v", err)
		}
		seed = parsed
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("SEED=%d (rerun with FIBRIL_SEED=%d)", seed, seed)
		}
	})
	return seed
}

func newRandom(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Binaries: built once per test binary run, on first use, into a
// temporary directory TestMain removes.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// fibrilBinary returns the path of a freshly built `fibril`.
func fibrilBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "fibril-acceptance-bin-")
		if buildErr != nil {
			return
		}
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		for _, pkg := range []string{"fibril", "fibrilctl"} {
			cmd := exec.Command(goTool, "build", "-o", filepath.Join(buildDir, pkg), "github.com/fibrilmq/fibril/cmd/"+pkg)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "fibril")
}

func TestMain(m *testing.M) {
	code := m.Run()
	// Nothing the tests started may outlive them: node processes and
	// test hosts are removed here if a test left any, and that fails the
	// run.
	if left := leftoverProcesses(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "acceptance: node processes outlived their test (killed now): %v\n", left)
		code = max(code, 1)
	}
	if hostsHeld.Load() {
		fmt.Fprintf(os.Stderr, "acceptance: test hosts outlived their test (removed now): %v\n", leftoverHosts())
		if err := netnsDown(); err != nil {
			fmt.Fprintf(os.Stderr, "acceptance: removing them: %v\n", err)
		}
		code = max(code, 1)
	}
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	if !summary.Empty() {
		fmt.Println()
		fmt.Println("acceptance summary (docs/durability.md explains each column):")
		summary.Write(os.Stdout)
	}
	if !clusterSummary.Empty() {
		fmt.Println()
		fmt.Println("cluster fault classes (docs/durability.md explains each column):")
		clusterSummary.Write(os.Stdout)
		if err := maybeWriteDurabilityTable(&clusterSummary); err != nil {
			fmt.Fprintf(os.Stderr, "acceptance: %v\n", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}
