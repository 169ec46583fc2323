package conformance

// Matchers (docs/conformance.md, "Matchers"). A matcher is a JSON value
// compared with a value the node sent:
//
//	literal                 equal (numbers by value, strings and bools exactly)
//	"$name"                 equal to the value captured as name
//	[m1, m2, ...]           an array of exactly that length, element by element
//	{"key": m, ...}         a map (or frame) that has every key, each matching; other keys are ignored
//	{"capture": "name"}     anything; remembered as name
//	{"any": true}           anything present
//	{"absent": true}        the key is not there (only inside a map matcher)
//	{"contains": "text"}    a string containing text
//	{"min": n, "max": n}    a number within the bounds (either may be left out)
//	{"length": n}           a string or array of that length (or a matcher on it)
//	{"one_of": [m, ...]}    one of the matchers matches
//	{"not": m}              m does not match
//	{"includes": m}         an array with at least one element that matches m
//
// An object whose keys are all operator names is an operator; several
// operators in one object must all hold.

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
)

var operatorKeys = map[string]bool{"capture": true, "any": true, "absent": true, "contains": true, "min": true,
	"max": true, "length": true, "one_of": true, "not": true, "includes": true}

func isOperator(object map[string]any) bool {
	if len(object) == 0 {
		return false
	}
	for key := range object {
		if !operatorKeys[key] {
			return false
		}
	}
	return true
}

// matcher carries the case's variables: captures write them, "$name"
// reads them.
type matcher struct {
	vars     map[string]any
	captured map[string]any // captures of the match in progress, kept only if it succeeds
}

// match reports whether value matches pattern; on success its captures
// are kept.
func (m *matcher) match(pattern, value any) error {
	m.captured = map[string]any{}
	if err := m.matchValue(pattern, value, ""); err != nil {
		return err
	}
	for name, v := range m.captured {
		m.vars[name] = v
	}
	return nil
}

func (m *matcher) matchValue(pattern, value any, path string) error {
	switch p := pattern.(type) {
	case string:
		if strings.HasPrefix(p, "$") && !strings.HasPrefix(p, "${") {
			want, ok := m.lookup(p[1:])
			if !ok {
				return fmt.Errorf("%s: variable %s was never captured", path, p)
			}
			return m.matchValue(want, value, path)
		}
		if text, ok := value.(string); !ok || text != p {
			return fmt.Errorf("%s: want %q, found %s", path, p, describe(value))
		}
		return nil
	case json.Number, uint64, int64:
		if !sameNumber(p, value) {
			return fmt.Errorf("%s: want %v, found %s", path, p, describe(value))
		}
		return nil
	case bool:
		if b, ok := value.(bool); !ok || b != p {
			return fmt.Errorf("%s: want %v, found %s", path, p, describe(value))
		}
		return nil
	case nil:
		if value != nil {
			return fmt.Errorf("%s: want nil, found %s", path, describe(value))
		}
		return nil
	case []any:
		items, ok := value.([]any)
		if !ok || len(items) != len(p) {
			return fmt.Errorf("%s: want an array of %d, found %s", path, len(p), describe(value))
		}
		for i := range p {
			if err := m.matchValue(p[i], items[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		if isOperator(p) {
			return m.matchOperator(p, value, path)
		}
		object, ok := value.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a map, found %s", path, describe(value))
		}
		for key, sub := range p {
			field, present := object[key]
			if op, isMap := sub.(map[string]any); isMap && isOperator(op) && op["absent"] == true {
				if present {
					return fmt.Errorf("%s.%s: want it absent, found %s", path, key, describe(field))
				}
				continue
			}
			if !present {
				return fmt.Errorf("%s.%s: missing", path, key)
			}
			if err := m.matchValue(sub, field, path+"."+key); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s: cannot match with a pattern of type %T", path, pattern)
}

func (m *matcher) lookup(name string) (any, bool) {
	if v, ok := m.captured[name]; ok {
		return v, true
	}
	v, ok := m.vars[name]
	return v, ok
}

func (m *matcher) matchOperator(p map[string]any, value any, path string) error {
	for key, arg := range p {
		var err error
		switch key {
		case "capture":
			name, _ := arg.(string)
			m.captured[name] = value
		case "any", "absent":
		case "contains":
			text, ok := value.(string)
			if want, _ := arg.(string); !ok || !strings.Contains(text, want) {
				err = fmt.Errorf("%s: want a string containing %q, found %s", path, want, describe(value))
			}
		case "min", "max":
			value, ok := bigOf(value)
			bound, boundOK := bigOf(arg)
			if !ok || !boundOK || (key == "min" && value.Cmp(bound) < 0) || (key == "max" && value.Cmp(bound) > 0) {
				err = fmt.Errorf("%s: want %s %v, found %v", path, key, arg, value)
			}
		case "length":
			var n int
			switch v := value.(type) {
			case string:
				n = len(v)
			case []any:
				n = len(v)
			default:
				return fmt.Errorf("%s: want a string or array, found %s", path, describe(value))
			}
			err = m.matchValue(arg, uint64(n), path+".length")
		case "one_of":
			options, _ := arg.([]any)
			err = fmt.Errorf("%s: %s matches none of %v", path, describe(value), options)
			for _, option := range options {
				saved := copyVars(m.captured)
				if m.matchValue(option, value, path) == nil {
					err = nil
					break
				}
				m.captured = saved
			}
		case "includes":
			items, ok := value.([]any)
			err = fmt.Errorf("%s: %s has no element matching %v", path, describe(value), arg)
			for _, item := range items {
				saved := copyVars(m.captured)
				if ok && m.matchValue(arg, item, path) == nil {
					err = nil
					break
				}
				m.captured = saved
			}
		case "not":
			saved := copyVars(m.captured)
			if m.matchValue(arg, value, path) == nil {
				err = fmt.Errorf("%s: %s matches %v, which it must not", path, describe(value), arg)
			}
			m.captured = saved
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func copyVars(vars map[string]any) map[string]any {
	out := make(map[string]any, len(vars))
	for k, v := range vars {
		out[k] = v
	}
	return out
}

func bigOf(value any) (*big.Int, bool) {
	switch v := value.(type) {
	case json.Number:
		return new(big.Int).SetString(v.String(), 10)
	case uint64:
		return new(big.Int).SetUint64(v), true
	case int64:
		return big.NewInt(v), true
	}
	return nil, false
}

func sameNumber(a, b any) bool {
	x, okX := bigOf(a)
	y, okY := bigOf(b)
	return okX && okY && x.Cmp(y) == 0
}

// describe renders a value for a failure message, shortening long
// strings.
func describe(value any) string {
	text := fmt.Sprintf("%#v", value)
	switch value.(type) {
	case uint64, int64, json.Number:
		text = fmt.Sprintf("%v", value)
	}
	if s, ok := value.(string); ok {
		if len(s) > 120 {
			s = s[:120] + fmt.Sprintf("... (%d bytes)", len(s))
		}
		text = fmt.Sprintf("%q", s)
	}
	if len(text) > 400 {
		text = text[:400] + "..."
	}
	return text
}
