package cluster

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	cases := []struct {
		text        string
		replicas    int
		want        string
		wantCopies  int
		wantMode    Mode
		wantWarning bool
		wantError   bool
	}{
		{text: "replica_durable:2", replicas: 3, want: "replica_durable:2", wantCopies: 2, wantMode: ModeDurable},
		{text: "majority_durable", replicas: 3, want: "majority_durable", wantCopies: 2, wantMode: ModeDurable},
		{text: "majority_durable", replicas: 5, want: "majority_durable", wantCopies: 3, wantMode: ModeDurable},
		{text: "majority_durable", replicas: 1, want: "majority_durable", wantCopies: 1, wantMode: ModeDurable},
		{text: "replica_buffered:1", replicas: 3, want: "replica_buffered:1", wantCopies: 1, wantMode: ModeBuffered},
		{text: "replica_accepted:3", replicas: 3, want: "replica_durable:3", wantCopies: 3, wantMode: ModeDurable, wantWarning: true},
		{text: "replica_accepted", replicas: 3, want: "majority_durable", wantCopies: 2, wantMode: ModeDurable, wantWarning: true},
		{text: "replica_durable", replicas: 3, wantError: true},
		{text: "replica_durable:0", replicas: 3, wantError: true},
		{text: "replica_durable:x", replicas: 3, wantError: true},
		{text: "replica_durable:4", replicas: 3, wantError: true},
		{text: "majority_durable:2", replicas: 3, wantError: true},
		{text: "", replicas: 3, wantError: true},
		{text: "durable", replicas: 3, wantError: true},
	}
	for _, tc := range cases {
		policy, warnings, err := ResolvePolicy(tc.text, tc.replicas)
		if tc.wantError {
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("ResolvePolicy(%q, %d) error = %v, want ErrInvalidPolicy", tc.text, tc.replicas, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ResolvePolicy(%q, %d): %v", tc.text, tc.replicas, err)
			continue
		}
		if policy.String() != tc.want || policy.Copies != tc.wantCopies || policy.Mode() != tc.wantMode {
			t.Errorf("ResolvePolicy(%q, %d) = %s copies %d mode %s", tc.text, tc.replicas, policy, policy.Copies, policy.Mode())
		}
		if tc.wantWarning != (len(warnings) == 1 && strings.Contains(warnings[0], "deprecated")) {
			t.Errorf("ResolvePolicy(%q) warnings = %v", tc.text, warnings)
		}
	}
}

func TestModeText(t *testing.T) {
	for _, mode := range []Mode{ModeUnset, ModeDurable, ModeBuffered} {
		text, err := mode.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Mode
		if err := back.UnmarshalText(text); err != nil || back != mode {
			t.Fatalf("mode %d round trip gave %d, %v", mode, back, err)
		}
	}
	if _, err := ParseMode("fast"); !errors.Is(err, ErrInvalidDeclaration) {
		t.Fatalf("ParseMode(fast) = %v", err)
	}
}
