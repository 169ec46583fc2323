// Package conformance runs the protocol conformance suite: the cases of
// testdata/conformance/*.json, each a list of frames to send and of
// frames, outcomes and closes to expect, against a live node.
// docs/conformance.md describes the file format and how to run the suite
// from any SDK; this package is the Go runner.
//
//	files, err := conformance.Load("testdata/conformance")
//	target := conformance.Target{Addresses: map[string]string{"default": "127.0.0.1:7420"}}
//	for _, file := range files {
//		for _, c := range file.Cases {
//			if reason := c.SkipReason(target); reason != "" { ... }
//			err := c.Run(target, "run1")
//		}
//	}
//
// The package's test starts in-process nodes for the four profiles the
// suite uses (default, auth, small, timers), and restarts them for the
// restart_node step; setting FIBRIL_CONFORMANCE_ADDR runs
// it against a node already running instead. The command in ./nodes
// starts the same four nodes for another SDK's test runner.
package conformance
