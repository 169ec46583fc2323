package actors

// Pure tests of the cluster-mode conversions: options through the catalog,
// the field-by-field re-declare rule against the catalog's declaration,
// catalog errors as wire codes, and the declare warnings.

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

func TestCatalogOptionsRoundTrip(t *testing.T) {
	cases := []wire.QueueOptions{
		{},
		{LeaseTimeoutMs: 1500},
		{LeaseTimeoutMs: 1, MaxDeliveries: 5, DeadLetterQueue: "dead", MessageTTLMs: 1 << 40, MaxLength: 10,
			MaxBytes: 1 << 33, Overflow: wire.OverflowDropOldest, RedeliveryDelayMs: 250},
	}
	for _, options := range cases {
		stored := catalogOptions(options)
		if options.IsZero() != (stored == nil) {
			t.Fatalf("%+v stored as %v: no option must store nil, any option a map", options, stored)
		}
		back, err := wireOptionsOfCatalog(stored)
		if err != nil || !reflect.DeepEqual(back, options) {
			t.Fatalf("%+v -> %v -> %+v, %v", options, stored, back, err)
		}
	}
	// Policy and replica count are catalog fields of their own, never options.
	if stored := catalogOptions(wire.QueueOptions{Policy: "majority_durable", Replicas: 3}); stored != nil {
		t.Fatalf("replication fields leaked into the options map: %v", stored)
	}
	for _, bad := range []map[string]string{
		{"colour": "blue"},
		{optionMaxDeliveries: "many"},
		{optionLeaseTimeoutMs: "4294967296"}, // over 32 bits
		{optionMaxLength: "-1"},
	} {
		if _, err := wireOptionsOfCatalog(bad); err == nil {
			t.Fatalf("%v was accepted", bad)
		}
	}
}

func TestStorageOptionsOfCatalog(t *testing.T) {
	info := cluster.QueueInfo{Name: "orders", Mode: cluster.ModeBuffered,
		Options: map[string]string{optionLeaseTimeoutMs: "2000", optionOverflow: "drop_oldest"}}
	options, err := storageOptionsOfCatalog(info)
	if err != nil {
		t.Fatal(err)
	}
	if options.Mode != queue.Buffered || options.LeaseTimeout != 2*time.Second || options.Overflow != queue.DropOldest {
		t.Fatalf("storage options %+v", options)
	}
	info.Options[optionOverflow] = "spill"
	if _, err := storageOptionsOfCatalog(info); err == nil {
		t.Fatal("an unknown overflow from the catalog was accepted")
	}
}

// A re-declare through the catalog follows the single-node rule: a field
// left out keeps its value, the same value is fine, another value or mode
// is refused with the single-node code.
func TestCheckRedeclareAgainstTheCatalog(t *testing.T) {
	existing := cluster.QueueInfo{Name: "orders", Mode: cluster.ModeDurable,
		Options: catalogOptions(wire.QueueOptions{LeaseTimeoutMs: 2000, MaxDeliveries: 3})}
	cases := []struct {
		named wire.QueueOptions
		mode  wire.Mode
		code  wire.Code // 0: accepted
	}{
		{wire.QueueOptions{}, wire.ModeUnset, 0},
		{wire.QueueOptions{LeaseTimeoutMs: 2000}, wire.ModeDurable, 0},
		{wire.QueueOptions{LeaseTimeoutMs: 2000, MaxDeliveries: 3}, wire.ModeUnset, 0},
		{wire.QueueOptions{MaxDeliveries: 4}, wire.ModeUnset, wire.CodeInvalidOptions},
		{wire.QueueOptions{MaxLength: 10}, wire.ModeUnset, wire.CodeInvalidOptions},
		{wire.QueueOptions{}, wire.ModeBuffered, wire.CodeModeConflict},
	}
	for _, tc := range cases {
		err := checkRedeclare(existing, tc.named, tc.mode)
		var refused *redeclareError
		switch {
		case tc.code == 0 && err != nil:
			t.Fatalf("%+v mode %s refused: %v", tc.named, tc.mode, err)
		case tc.code != 0 && (!errors.As(err, &refused) || refused.failure.code != tc.code):
			t.Fatalf("%+v mode %s: %v, want code %s", tc.named, tc.mode, err, tc.code)
		}
	}
}

func TestCatalogErrorsBecomeWireCodes(t *testing.T) {
	cases := map[error]wire.Code{
		cluster.ErrModeConflict:        wire.CodeModeConflict,
		cluster.ErrDeclarationConflict: wire.CodeInvalidOptions,
		cluster.ErrInvalidPolicy:       wire.CodeInvalidOptions,
		cluster.ErrInvalidDeclaration:  wire.CodeInvalidOptions,
		cluster.ErrQueueNotFound:       wire.CodeUnknownQueue,
		cluster.ErrNotReady:            wire.CodeUnavailable,
		cluster.ErrOwnerUnknown:        wire.CodeUnavailable,
		cluster.ErrClosed:              wire.CodeUnavailable,
		errors.New("surprise"):         wire.CodeInternal,
	}
	for err, code := range cases {
		wrapped := fmt.Errorf("%w: detail", err)
		if failure := failureOfClusterError(wrapped); failure.code != code || !strings.Contains(failure.message, "detail") {
			t.Fatalf("%v became %+v, want %s", err, failure, code)
		}
	}
}

func TestClusterDeclareWarnings(t *testing.T) {
	outcome := cluster.DeclareOutcome{
		Queue: cluster.QueueInfo{Name: "events", Mode: cluster.ModeBuffered, Policy: "replica_buffered:2", Replicas: 3,
			Partitions: []cluster.PartitionInfo{{Replicas: []string{"node2", "node3", "node1"}}}},
		Warnings: []string{`policy "replica_accepted" is deprecated`},
	}
	warnings := clusterWarnings(outcome)
	if len(warnings) != 2 || !strings.Contains(warnings[0], "deprecated") || warnings[1] != clusterBufferedWarning {
		t.Fatalf("warnings %q", warnings)
	}
	outcome.Queue.Mode, outcome.Warnings = cluster.ModeDurable, nil
	if warnings = clusterWarnings(outcome); len(warnings) != 0 {
		t.Fatalf("a durable queue is declared with warnings %q", warnings)
	}
}
