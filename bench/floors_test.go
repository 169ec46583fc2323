package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// A small measurement of each floor: the counts, the cleanup and the table.
// Set FIBRIL_FLOORS=1 to measure the default counts and print the table
// (FIBRIL_FLOORS_DIR picks the directory, by default the system temp dir):
//
//	FIBRIL_FLOORS=1 go test ./bench -run Floors -v
func TestFloors(t *testing.T) {
	opts := FloorOptions{Dir: t.TempDir(), MessageBytes: 1024, RoundTrips: 200, Writes: 200, SyncedWrites: 20,
		IdleRoundTrips: 5, IdleGap: time.Millisecond}
	if os.Getenv("FIBRIL_FLOORS") == "1" {
		opts = DefaultFloorOptions()
		opts.Dir = os.Getenv("FIBRIL_FLOORS_DIR")
	}
	floors, err := MeasureFloors(context.Background(), opts)
	if err != nil {
		t.Fatalf("floors: %v", err)
	}
	for name, tc := range map[string]struct {
		summary Summary
		count   int
	}{
		"round trip": {floors.LoopbackRoundTrip, opts.RoundTrips},
		"idle":       {floors.IdleRoundTrip, opts.IdleRoundTrips},
		"write":      {floors.Write, opts.Writes},
		"write+sync": {floors.WriteSync, opts.SyncedWrites},
	} {
		if tc.summary.Count != tc.count || tc.summary.Min <= 0 || tc.summary.Max < tc.summary.At(P999) {
			t.Errorf("%s: %+v, want %d positive samples", name, tc.summary, tc.count)
		}
	}
	if floors.PathFloor(ModeDurable) != floors.LoopbackRoundTrip.At(P50)+floors.WriteSync.At(P50) ||
		floors.PathFloor(ModeBuffered) != floors.LoopbackRoundTrip.At(P50)+floors.Write.At(P50) {
		t.Error("path floors are not round trip + storage floor")
	}
	if opts.Dir != "" {
		entries, err := os.ReadDir(opts.Dir)
		if err != nil || (os.Getenv("FIBRIL_FLOORS") != "1" && len(entries) != 0) {
			t.Errorf("floor files left in %s: %v %v", opts.Dir, entries, err)
		}
	}
	var b strings.Builder
	floors.writeMarkdown(&b)
	if !strings.Contains(b.String(), "| write(2) + fdatasync, appending | ") ||
		!strings.Contains(b.String(), fmt.Sprintf("| loopback TCP round trip, %v apart | %d |", opts.IdleGap, opts.IdleRoundTrips)) {
		t.Errorf("floor table:\n%s", b.String())
	}
	t.Logf("floors:\n%s", b.String())
}

func TestFloorsInvalid(t *testing.T) {
	if _, err := MeasureFloors(context.Background(), FloorOptions{MessageBytes: 1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("zero counts: %v", err)
	}
	noGap := FloorOptions{MessageBytes: 1, RoundTrips: 1, Writes: 1, SyncedWrites: 1, IdleRoundTrips: 1}
	if _, err := MeasureFloors(context.Background(), noGap); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("idle round trips without a gap: %v", err)
	}
	if _, err := MeasureWrites(context.Background(), "/nonexistent/dir", 10, 1, false); err == nil {
		t.Error("write floor in a missing directory did not fail")
	}
}
