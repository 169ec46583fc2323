package bench

import (
	"errors"
	"testing"
	"time"
)

func TestBuiltinCases(t *testing.T) {
	want := map[string]Shape{
		CaseSteady100:  {Kind: KindFixedRate, RatePerSecond: 100, Window: PacedWindow},
		CaseSteady10k:  {Kind: KindFixedRate, RatePerSecond: 10_000, Window: PacedWindow},
		CaseBurst200:   {Kind: KindBurst, BurstSize: 200, BurstInterval: 100 * time.Millisecond, Window: PacedWindow},
		CaseSaturation: {Kind: KindSaturation, Window: 256},
	}
	cases := BuiltinCases()
	if len(cases) != len(want) {
		t.Fatalf("%d built-in cases, want %d", len(cases), len(want))
	}
	for _, c := range cases {
		got, err := CaseByName(c.Name)
		if err != nil || got.Shape.Kind != want[c.Name].Kind || got.Shape.RatePerSecond != want[c.Name].RatePerSecond ||
			got.Shape.BurstSize != want[c.Name].BurstSize || got.Shape.BurstInterval != want[c.Name].BurstInterval ||
			got.Shape.Window != want[c.Name].Window {
			t.Errorf("case %s: %+v, %v", c.Name, got, err)
		}
		if err := c.Shape.Validate(); err != nil {
			t.Errorf("case %s does not validate: %v", c.Name, err)
		}
	}
	if _, err := CaseByName("steady-1m"); !errors.Is(err, ErrUnknownCase) {
		t.Errorf("unknown case error %v", err)
	}
}

func TestFixedRateOffsetsAndCount(t *testing.T) {
	shape := Shape{Kind: KindFixedRate, RatePerSecond: 10_000, Window: 1}
	source := shape.Source(time.Second)
	for _, tc := range []struct {
		index  uint64
		offset time.Duration
		ok     bool
	}{{0, 0, true}, {1, 100 * time.Microsecond, true}, {9_999, 999_900 * time.Microsecond, true}, {10_000, time.Second, false}} {
		planned, ok := source.Next(tc.index)
		if planned.Offset != tc.offset || ok != tc.ok || !planned.Paced {
			t.Errorf("publish %d: %+v %v, want offset %v ok %v", tc.index, planned, ok, tc.offset, tc.ok)
		}
	}
	if n, paced := shape.ExpectedPublishes(time.Second); n != 10_000 || !paced {
		t.Errorf("expected %d publishes in 1 s", n)
	}
	// 3 per second for 1 s: offsets 0, 333.33 ms, 666.66 ms.
	if n, _ := (Shape{Kind: KindFixedRate, RatePerSecond: 3}).ExpectedPublishes(time.Second); n != 3 {
		t.Errorf("3/s for 1 s plans %d, want 3", n)
	}
	// 3 per second for 1 s + 1 ns: offset 1 s is inside.
	if n, _ := (Shape{Kind: KindFixedRate, RatePerSecond: 3}).ExpectedPublishes(time.Second + 1); n != 4 {
		t.Errorf("3/s for 1 s + 1 ns plans %d, want 4", n)
	}
}

func TestBurstOffsetsAndCount(t *testing.T) {
	c, _ := CaseByName(CaseBurst200)
	source := c.Shape.Source(250 * time.Millisecond)
	for _, tc := range []struct {
		index  uint64
		offset time.Duration
		ok     bool
	}{{0, 0, true}, {199, 0, true}, {200, 100 * time.Millisecond, true}, {599, 200 * time.Millisecond, true}, {600, 300 * time.Millisecond, false}} {
		planned, ok := source.Next(tc.index)
		if planned.Offset != tc.offset || ok != tc.ok {
			t.Errorf("publish %d: %+v %v, want %v %v", tc.index, planned, ok, tc.offset, tc.ok)
		}
	}
	if n, _ := c.Shape.ExpectedPublishes(250 * time.Millisecond); n != 600 {
		t.Errorf("burst-200 over 250 ms plans %d, want 600", n)
	}
}

func TestShapeValidate(t *testing.T) {
	for _, shape := range []Shape{
		{Kind: KindFixedRate, Window: 1},
		{Kind: KindBurst, BurstSize: 1, Window: 1},
		{Kind: KindSaturation},
		{Kind: "random", Window: 1},
		{Kind: KindReplay, Window: 1, ReplaySpeed: 1},
		{Kind: KindReplay, Window: 1, ReplaySpeed: 0, Replay: []Planned{{}}},
		{Kind: KindReplay, Window: 1, ReplaySpeed: 1, Replay: []Planned{{Offset: 2}, {Offset: 1}}},
	} {
		if err := shape.Validate(); !errors.Is(err, ErrInvalidShape) {
			t.Errorf("shape %+v: %v, want ErrInvalidShape", shape, err)
		}
	}
}

func TestParseModes(t *testing.T) {
	for flag, want := range map[string][]Mode{
		"durable": {ModeDurable}, "buffered": {ModeBuffered}, "both": {ModeDurable, ModeBuffered},
	} {
		got, err := ParseModes(flag)
		if err != nil || len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Errorf("ParseModes(%q) = %v, %v", flag, got, err)
		}
	}
	if _, err := ParseModes("fast"); !errors.Is(err, ErrUnknownMode) {
		t.Errorf("ParseModes(fast) error %v", err)
	}
	if ModeDurable.Boundary() != BoundaryDurable || ModeBuffered.Boundary() != BoundaryWritten {
		t.Error("mode boundaries")
	}
}

func TestPayloadHeaderRoundTrip(t *testing.T) {
	payload := make([]byte, 1024)
	header := PayloadHeader{RunTag: 7, Seq: 1<<40 + 3, Intended: 12*time.Second + 345}
	EncodePayloadHeader(payload, header)
	got, err := DecodePayloadHeader(payload)
	if err != nil || got != header {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, header)
	}
	if string(payload[:4]) != "BNP1" {
		t.Errorf("magic %q", payload[:4])
	}
	if _, err := DecodePayloadHeader(payload[:PayloadHeaderBytes-1]); !errors.Is(err, ErrMalformedPayload) {
		t.Errorf("short payload: %v", err)
	}
	payload[0] = 'X'
	if _, err := DecodePayloadHeader(payload); !errors.Is(err, ErrMalformedPayload) {
		t.Errorf("bad magic: %v", err)
	}
}
