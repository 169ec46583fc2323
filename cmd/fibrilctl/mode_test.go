package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestModeCommandAgainstTheBroker(t *testing.T) {
	broker := startBroker(t, t.TempDir(), "127.0.0.1:0")
	if r := ctl(t, broker, "declare", "events", "--buffered"); r.code != exitOK {
		t.Fatalf("declare: %+v", r)
	}
	if r := ctl(t, broker, "mode", "events", "buffered"); r.code != exitOK ||
		r.stdout != "events already runs buffered (revision 0); nothing changed\n" {
		t.Fatalf("mode to the current mode: %+v", r)
	}
	if r := ctl(t, broker, "mode", "events", "durable"); r.code != exitOK ||
		!strings.HasPrefix(r.stdout, "events runs durable from revision 1 on: ") {
		t.Fatalf("mode durable: %+v", r)
	}
	r := ctl(t, broker, "info", "events", "--json")
	var info queueJSON
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != exitOK {
		t.Fatalf("info --json: %+v: %v", r, err)
	}
	if info.Mode != "durable" || info.DesiredMode != "durable" || info.ModeRevision != 1 || info.ModeChange != nil {
		t.Fatalf("info after the change: %+v", info)
	}
	if r := ctl(t, broker, "info", "events"); !strings.Contains(r.stdout, "durable (revision 1)") {
		t.Fatalf("info: %+v", r)
	}
	expectFailure(t, ctl(t, broker, "mode", "events", "fast"), exitUsage, "durable or buffered")
	expectFailure(t, ctl(t, broker, "mode", "nothing", "durable"), exitFailure, "unknown_queue")
	// Declare keeps refusing another mode: only the explicit change moves it.
	expectFailure(t, ctl(t, broker, "declare", "events", "--buffered"), exitFailure, "mode_conflict")
}
