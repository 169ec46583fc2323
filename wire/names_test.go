package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateQueueNameAcceptsTheAlphabet(t *testing.T) {
	for _, name := range []string{
		"q", "Q", "0", "orders", "orders.eu-1_x", "a.", "a..b", "_x", "-x",
		strings.Repeat("z", MaxQueueNameBytes),
	} {
		if err := ValidateQueueName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	valid := "orders.eu-1_x"
	if allocs := testing.AllocsPerRun(100, func() { _ = ValidateQueueName(valid) }); allocs != 0 {
		t.Fatalf("a valid name allocates %.0f times", allocs)
	}
}

func TestValidateQueueNameRefusesEachPartOfTheRule(t *testing.T) {
	cases := []struct {
		name string
		want error
	}{
		{"", ErrQueueNameEmpty},
		{".", ErrQueueNameLeadingDot},
		{"..", ErrQueueNameLeadingDot},
		{".x", ErrQueueNameLeadingDot},
		{".deleted-orders-1", ErrQueueNameLeadingDot},
		{"a/b", ErrQueueNameByte},
		{"/etc", ErrQueueNameByte},
		{"a\\b", ErrQueueNameByte},
		{"a\x00b", ErrQueueNameByte},
		{"\x00", ErrQueueNameByte},
		{"a b", ErrQueueNameByte},
		{"a:b", ErrQueueNameByte},
		{"caf\u00e9", ErrQueueNameByte},
		{strings.Repeat("q", MaxQueueNameBytes+1), ErrQueueNameTooLong},
		{strings.Repeat("q", 300), ErrQueueNameTooLong},
	}
	for _, tc := range cases {
		err := ValidateQueueName(tc.name)
		if !errors.Is(err, tc.want) || !errors.Is(err, ErrInvalidQueueName) {
			t.Errorf("%q: %v, want %v", tc.name, err, tc.want)
			continue
		}
		var nameErr *QueueNameError
		if !errors.As(err, &nameErr) || len(nameErr.Name) > 64+3 {
			t.Errorf("%q: %#v", tc.name, err)
		}
		if strings.ContainsRune(err.Error(), 0) {
			t.Errorf("%q: the message carries a raw NUL: %q", tc.name, err.Error())
		}
	}
	var nameErr *QueueNameError
	if err := ValidateQueueName("ab/c"); !errors.As(err, &nameErr) || nameErr.Offset != 2 || nameErr.Byte != '/' {
		t.Fatalf("offset and byte: %#v", err)
	}
	if got := ValidateQueueName("a\x00").Error(); !strings.Contains(got, `"a\x00"`) || !strings.Contains(got, "0x00") {
		t.Fatalf("message %q", got)
	}
}

func TestSafePathElement(t *testing.T) {
	for _, element := range []string{"0", "orders", ".deleted-orders-7", "a.b", strings.Repeat("x", 255)} {
		if err := SafePathElement(element); err != nil {
			t.Errorf("%q: %v", element, err)
		}
	}
	for _, element := range []string{"", ".", "..", "a/b", "/", "a\\b", "a\x00", strings.Repeat("x", 256)} {
		if err := SafePathElement(element); !errors.Is(err, ErrUnsafePathElement) {
			t.Errorf("%q: %v", element, err)
		}
	}
}

func TestJoinQueuePath(t *testing.T) {
	cases := []struct {
		root, name string
		more       []string
		want       string
	}{
		{"/data/queues", "orders", []string{"0"}, "/data/queues/orders/0"},
		{"/data/queues/", "orders", nil, "/data/queues/orders"},
		{"data/queues", "a..b", nil, "data/queues/a..b"},
		{".", "orders", nil, "orders"},
		{"/", "orders", []string{"0", "log"}, "/orders/0/log"},
	}
	for _, tc := range cases {
		got, err := JoinQueuePath(tc.root, tc.name, tc.more...)
		if err != nil || got != tc.want {
			t.Errorf("JoinQueuePath(%q, %q, %q) = %q, %v; want %q", tc.root, tc.name, tc.more, got, err, tc.want)
		}
	}
	for _, name := range []string{"..", ".", ".x", "a/b", "a/../../b", "a\x00b", "", strings.Repeat("q", 300)} {
		if got, err := JoinQueuePath("/data/queues", name); !errors.Is(err, ErrInvalidQueueName) || got != "" {
			t.Errorf("name %q: %q, %v", name, got, err)
		}
	}
	for _, element := range []string{"..", ".", "", "a/b", "x\x00"} {
		if got, err := JoinQueuePath("/data/queues", "orders", element); !errors.Is(err, ErrUnsafePathElement) || got != "" {
			t.Errorf("element %q: %q, %v", element, got, err)
		}
	}
	if _, err := JoinQueuePath("", "orders"); !errors.Is(err, ErrUnsafePathElement) {
		t.Errorf("empty root: %v", err)
	}
}
