package access

import (
	"regexp"
	"strings"
	"testing"
)

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pattern string
		match   []string
		miss    []string
	}{
		{"*", []string{"a", "orders", "orders.eu.2", "x-dlq"}, nil},
		{"orders", []string{"orders"}, []string{"orders.eu", "order", "xorders", "Orders"}},
		{"orders.*", []string{"orders.eu", "orders.eu.2", "orders."}, []string{"orders", "ordersx", "xorders.eu"}},
		{"*.dlq", []string{"orders.dlq", "a.b.dlq", ".dlq"}, []string{"orders.dlq.x", "dlq", "orders-dlq"}},
		{"a*b", []string{"ab", "axb", "abab", "a-b"}, []string{"a", "b", "ba", "abx"}},
		{"*a", []string{"a", "aa", "ba"}, []string{"ab", ""}},
		{"a*a", []string{"aa", "aba", "aaa"}, []string{"a", "ab"}},
		{"*x*y*", []string{"xy", "axbyc", "yxy"}, []string{"yx", "x", "y"}},
		{"a**b", []string{"ab", "a.b"}, []string{"a"}},
	}
	for _, tc := range cases {
		compiled, err := compilePattern(tc.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tc.pattern, err)
		}
		for _, name := range tc.match {
			if !compiled.match(name) {
				t.Errorf("%q does not match %q", tc.pattern, name)
			}
		}
		for _, name := range tc.miss {
			if compiled.match(name) {
				t.Errorf("%q matches %q", tc.pattern, name)
			}
		}
	}
}

func TestCompilePatternRefusesWhatNoNameCouldMatch(t *testing.T) {
	for _, text := range []string{"", ".x", ".*", "a/b", "a b", "orders.?", "a\x00", "a:b", strings.Repeat("q", 201)} {
		if _, err := compilePattern(text); err == nil {
			t.Errorf("%q compiled", text)
		}
	}
}

func TestParseOperation(t *testing.T) {
	for _, operation := range Operations {
		if parsed, err := ParseOperation(operation.String()); err != nil || parsed != operation {
			t.Errorf("%s: %v %v", operation, parsed, err)
		}
	}
	for _, name := range []string{"", "Publish", "read", "all", "*"} {
		if _, err := ParseOperation(name); err == nil {
			t.Errorf("%q parsed", name)
		}
	}
}

// patternOracle turns a pattern into an anchored regular expression: the
// rule written a second way.
func patternOracle(text string) *regexp.Regexp {
	pieces := strings.Split(text, "*")
	for index := range pieces {
		pieces[index] = regexp.QuoteMeta(pieces[index])
	}
	return regexp.MustCompile(`^(?s:` + strings.Join(pieces, ".*") + `)$`)
}

func FuzzPatternMatch(f *testing.F) {
	for _, seed := range [][2]string{{"orders.*", "orders.eu"}, {"*a", "aa"}, {"a*a", "a"}, {"*x*y*", "yxy"}, {"*", ""}, {"a**b", "ab"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, text, name string) {
		compiled, err := compilePattern(text)
		if err != nil {
			return
		}
		if got, want := compiled.match(name), patternOracle(text).MatchString(name); got != want {
			t.Fatalf("pattern %q against %q: match = %v, the rule says %v", text, name, got, want)
		}
	})
}
