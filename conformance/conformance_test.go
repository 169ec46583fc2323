package conformance

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// TestConformance runs every case of testdata/conformance against local
// nodes, or against the nodes FIBRIL_CONFORMANCE_ADDR (default profile),
// FIBRIL_CONFORMANCE_AUTH_ADDR with FIBRIL_CONFORMANCE_TOKEN, and
// FIBRIL_CONFORMANCE_SMALL_ADDR and FIBRIL_CONFORMANCE_TIMERS_ADDR name
// (restarting them through FIBRIL_CONFORMANCE_CONTROL when it is set). Pending cases are skipped with
// their reason.
func TestConformance(t *testing.T) {
	files, err := Load("../testdata/conformance")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no conformance files")
	}
	target := targetFromEnv()
	if target == nil {
		local, err := StartLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := local.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		localTarget := local.Target()
		// A safety net, not a measurement: under the race detector, with
		// other packages' tests on the same cores, the 40,000-frame flow
		// case alone can take more than the default 10 s.
		localTarget.Timeout = time.Minute
		target = &localTarget
	}
	runID := fmt.Sprintf("go%d", rand.Uint32())
	for _, file := range files {
		name := strings.TrimSuffix(file.Path[strings.LastIndex(file.Path, "/")+1:], ".json")
		t.Run(name, func(t *testing.T) {
			for i := range file.Cases {
				c := &file.Cases[i]
				t.Run(c.Name, func(t *testing.T) {
					if reason := c.SkipReason(*target); reason != "" {
						t.Skip(reason)
					}
					if err := c.Run(*target, fmt.Sprintf("%s-%s-%d", runID, name, i)); err != nil {
						t.Fatalf("%s (rule %s): %v", c.Name, c.Rule, err)
					}
				})
			}
		})
	}
}

// restartThrough asks the control endpoint of `go run ./conformance/nodes`
// to restart a profile's node.
func restartThrough(control, profile string) error {
	response, err := http.Post(control+"/restart?profile="+url.QueryEscape(profile), "text/plain", nil)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("restart %s: %s: %s", profile, response.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func targetFromEnv() *Target {
	address := os.Getenv("FIBRIL_CONFORMANCE_ADDR")
	if address == "" {
		return nil
	}
	target := &Target{Addresses: map[string]string{"default": address}, Token: os.Getenv("FIBRIL_CONFORMANCE_TOKEN"),
		Timeout: 10 * time.Second}
	if auth := os.Getenv("FIBRIL_CONFORMANCE_AUTH_ADDR"); auth != "" {
		target.Addresses["auth"] = auth
	}
	if small := os.Getenv("FIBRIL_CONFORMANCE_SMALL_ADDR"); small != "" {
		target.Addresses["small"] = small
	}
	if timers := os.Getenv("FIBRIL_CONFORMANCE_TIMERS_ADDR"); timers != "" {
		target.Addresses["timers"] = timers
	}
	if control := os.Getenv("FIBRIL_CONFORMANCE_CONTROL"); control != "" {
		target.Restart = func(profile string) error { return restartThrough(control, profile) }
	}
	return target
}
