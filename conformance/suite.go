package conformance

// Loading the suite and running a case against a node. docs/conformance.md
// is the reference for the file format; this is the Go runner of it.
//
// Each connection of a case has one reader goroutine that decodes every
// frame the node sends and hands it to the case on a channel; the case
// keeps what it has not matched yet:
//
//	pending     frames other than deliver, confirm and negative-confirm, in arrival order
//	outcomes    every published sequence number's confirm or refusal
//	deliveries  per subscription, deliveries not consumed by a step yet
//
// so steps may wait for answers in any order, as a client must.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// File is one testdata/conformance/*.json file.
type File struct {
	Path        string
	Description string `json:"description"`
	Cases       []Case `json:"cases"`
}

// Case is one scenario.
type Case struct {
	Name    string           `json:"name"`
	Rule    string           `json:"rule"`    // the docs/protocol.md section it checks
	Node    string           `json:"node"`    // node profile: "default" (empty), "auth" or "small"
	Pending string           `json:"pending"` // when set, the case is skipped with this reason
	Steps   []map[string]any `json:"steps"`
}

// Target says where the node profiles listen.
type Target struct {
	Addresses map[string]string // profile -> host:port; a missing profile skips its cases
	Token     string            // the auth profile's token, substituted for ${token}
	Timeout   time.Duration     // how long one step waits; 0 means 10 s
	// Restart stops a profile's node cleanly and starts it again on the
	// same data and address (restart_node); nil skips the cases that need it.
	Restart func(profile string) error
}

// Load reads every *.json file of dir, in name order.
func Load(dir string) ([]File, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var files []File
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		decoder := json.NewDecoder(bytes.NewReader(data))
		decoder.UseNumber()
		decoder.DisallowUnknownFields()
		file := File{Path: path}
		if err := decoder.Decode(&file); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		files = append(files, file)
	}
	return files, nil
}

// SkipReason says why a case does not run against target, or "".
func (c *Case) SkipReason(target Target) string {
	if c.Pending != "" {
		return "pending: " + c.Pending
	}
	if _, ok := target.Addresses[c.profile()]; !ok {
		return fmt.Sprintf("no node of profile %q given", c.profile())
	}
	if target.Restart == nil && c.restarts() {
		return "it restarts the node, and this target cannot"
	}
	return ""
}

// restarts reports whether a step restarts the node.
func (c *Case) restarts() bool {
	for _, step := range c.Steps {
		if _, ok := step["restart_node"]; ok {
			return true
		}
	}
	return false
}

func (c *Case) profile() string {
	if c.Node == "" {
		return "default"
	}
	return c.Node
}

// Run runs the case; runID makes its queue names unique (${run}).
func (c *Case) Run(target Target, runID string) error {
	timeout := target.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	r := &caseRun{address: target.Addresses[c.profile()], timeout: timeout, conns: map[string]*connection{},
		restart:       func() error { return target.Restart(c.profile()) },
		substitutions: map[string]string{"${run}": runID, "${token}": target.Token},
		match:         &matcher{vars: map[string]any{}}}
	defer r.closeAll()
	for i, step := range c.Steps {
		if err := r.step(step); err != nil {
			return fmt.Errorf("step %d %s: %w", i+1, stepName(step), err)
		}
	}
	return nil
}

func stepName(step map[string]any) string {
	for key := range step {
		if key != "conn" && key != "within_ms" {
			return key
		}
	}
	return "?"
}

type caseRun struct {
	address       string
	restart       func() error // restarts the case's node
	timeout       time.Duration
	conns         map[string]*connection
	substitutions map[string]string
	match         *matcher
}

func (r *caseRun) closeAll() {
	for _, c := range r.conns {
		c.conn.Close()
	}
}

// resolve replaces ${run}, ${token} and "$name" in a step's values.
func (r *caseRun) resolve(value any) any {
	switch v := value.(type) {
	case string:
		if strings.HasPrefix(v, "$") && !strings.HasPrefix(v, "${") {
			if captured, ok := r.match.vars[v[1:]]; ok {
				return captured
			}
		}
		for from, to := range r.substitutions {
			v = strings.ReplaceAll(v, from, to)
		}
		return v
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = r.resolve(v[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[k] = r.resolve(item)
		}
		return out
	}
	return value
}

// resolvePattern substitutes ${...} in a matcher but leaves "$name" to the
// matcher, which also sees captures made earlier in the same match.
func (r *caseRun) resolvePattern(value any) any {
	switch v := value.(type) {
	case string:
		for from, to := range r.substitutions {
			v = strings.ReplaceAll(v, from, to)
		}
		return v
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = r.resolvePattern(v[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[k] = r.resolvePattern(item)
		}
		return out
	}
	return value
}

func (r *caseRun) connection(step map[string]any) (*connection, error) {
	name, _ := step["conn"].(string)
	if name == "" {
		name = "a"
	}
	if c, ok := r.conns[name]; ok {
		return c, nil
	}
	conn, err := net.DialTimeout("tcp", r.address, r.timeout)
	if err != nil {
		return nil, err
	}
	c := newConnection(conn)
	r.conns[name] = c
	return c, nil
}

func (r *caseRun) step(raw map[string]any) error {
	if _, ok := raw["restart_node"]; ok {
		// Connections stay open: each sees the node's goodbye and close.
		return r.restart()
	}
	c, err := r.connection(raw)
	if err != nil {
		return err
	}
	for key, arg := range raw {
		switch key {
		case "conn", "within_ms":
			continue
		case "hello":
			return r.hello(c, r.resolve(arg))
		case "send":
			return r.send(c, r.resolve(arg))
		case "send_raw":
			object, _ := r.resolve(arg).(map[string]any)
			data, err := buildRaw(object)
			if err != nil {
				return err
			}
			_, err = c.conn.Write(data)
			return err
		case "expect":
			_, err := r.expect(c, r.resolvePattern(arg))
			return err
		case "expect_none":
			return r.expectNone(c, r.resolvePattern(arg), withinOf(raw))
		case "expect_close":
			return r.expectClose(c, r.resolvePattern(arg))
		case "publish_many":
			return r.publishMany(c, r.resolve(arg))
		case "expect_confirms":
			return r.expectOutcomes(c, r.resolve(arg), true)
		case "expect_rejects":
			return r.expectOutcomes(c, r.resolve(arg), false)
		case "expect_deliveries":
			return r.expectDeliveries(c, arg)
		case "expect_no_delivery":
			object, _ := r.resolve(arg).(map[string]any)
			return r.expectNoDelivery(c, object, withinOf(raw))
		case "await_info":
			return r.awaitInfo(c, arg)
		case "sleep_ms":
			n, err := asUint(arg, 32)
			if err != nil {
				return err
			}
			time.Sleep(time.Duration(n) * time.Millisecond)
			return nil
		case "close":
			return c.conn.Close()
		default:
			return fmt.Errorf("unknown step %q", key)
		}
	}
	return fmt.Errorf("empty step")
}

func withinOf(step map[string]any) time.Duration {
	n, err := asUint(step["within_ms"], 32)
	if err != nil || n == 0 {
		n = 300
	}
	return time.Duration(n) * time.Millisecond
}

// hello sends FHL1 (defaults merged with the step's fields) and expects
// FHO1.
func (r *caseRun) hello(c *connection, arg any) error {
	object := map[string]any{"tag": "FHL1", "versions": []any{json.Number("1")}, "client_name": "conformance"}
	if overrides, ok := arg.(map[string]any); ok {
		for k, v := range overrides {
			object[k] = v
		}
	}
	if err := r.send(c, object); err != nil {
		return err
	}
	_, err := r.expect(c, map[string]any{"tag": "FHO1", "version": json.Number("1")})
	return err
}

func (r *caseRun) send(c *connection, arg any) error {
	object, ok := arg.(map[string]any)
	if !ok {
		return fmt.Errorf("send takes a frame object")
	}
	tag, _ := object["tag"].(string)
	if _, has := object["request_id"]; !has && requestTags[tag] {
		c.nextRequestID++
		object["request_id"] = c.nextRequestID
		r.match.vars["rid"] = c.nextRequestID
	}
	frame, err := buildFrame(object)
	if err != nil {
		return err
	}
	switch publish := frame.(type) {
	case *wire.Publish:
		for _, m := range publish.Messages {
			c.published[m.Seq] = true
		}
	case *wire.PublishIdempotent:
		for _, m := range publish.Messages {
			c.published[m.Seq] = true
		}
	}
	out, err := wire.Append(nil, frame, ^uint32(0))
	if err != nil {
		return err
	}
	_, err = c.conn.Write(out)
	return err
}

// expect waits for a pending frame that matches and consumes it.
func (r *caseRun) expect(c *connection, pattern any) (map[string]any, error) {
	deadline := time.Now().Add(r.timeout)
	for {
		var reasons []string
		for i, frame := range c.pending {
			if err := r.match.match(pattern, frame); err == nil {
				c.pending = append(c.pending[:i], c.pending[i+1:]...)
				return frame, nil
			} else {
				reasons = append(reasons, err.Error())
			}
		}
		if err := c.wait(deadline); err != nil {
			return nil, fmt.Errorf("no frame matched %s (%v); frames not matched: %s", compact(pattern), err,
				strings.Join(reasons, "; "))
		}
	}
}

func (r *caseRun) expectNone(c *connection, pattern any, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		for _, frame := range c.pending {
			saved := copyVars(r.match.vars)
			if r.match.match(pattern, frame) == nil {
				r.match.vars = saved
				return fmt.Errorf("a frame matched %s, which must not come: %s", compact(pattern), compact(frame))
			}
		}
		if err := c.wait(deadline); err != nil {
			return nil // the window passed (or the connection closed) without one
		}
	}
}

// expectClose waits until the node closes the connection; an "error"
// pattern must match an FER1 received before the close.
func (r *caseRun) expectClose(c *connection, arg any) error {
	deadline := time.Now().Add(r.timeout)
	for !c.closed {
		if err := c.wait(deadline); err != nil && !c.closed {
			return fmt.Errorf("the node did not close the connection: %v", err)
		}
	}
	object, _ := arg.(map[string]any)
	if pattern, ok := object["error"]; ok {
		errorPattern := map[string]any{"tag": "FER1"}
		if fields, ok := pattern.(map[string]any); ok {
			for k, v := range fields {
				errorPattern[k] = v
			}
		}
		if _, err := r.expect(c, errorPattern); err != nil {
			return fmt.Errorf("closed without the expected error: %w", err)
		}
	}
	return nil
}

// expectOutcomes waits until every listed sequence number is answered and
// checks each answer: {"seqs": [...], "boundary": n} for confirms, {"seqs":
// [...], "code": n, "message": m} for refusals.
func (r *caseRun) expectOutcomes(c *connection, arg any, confirmed bool) error {
	object, _ := arg.(map[string]any)
	f := &fields{object: object}
	seqs := f.uints("seqs")
	if bounds := f.uints("seq_range"); len(bounds) == 3 && bounds[2] > 0 {
		for seq := bounds[0]; seq <= bounds[1]; seq += bounds[2] {
			seqs = append(seqs, seq)
		}
	}
	if f.err != nil {
		return f.err
	}
	deadline := time.Now().Add(r.timeout)
	for _, seq := range seqs {
		for {
			if _, ok := c.outcomes[seq]; ok {
				break
			}
			if err := c.wait(deadline); err != nil {
				return fmt.Errorf("sequence number %d unanswered: %v", seq, err)
			}
		}
		outcome := c.outcomes[seq]
		if outcome.confirmed != confirmed {
			return fmt.Errorf("sequence number %d: %s", seq, outcome)
		}
		var pattern map[string]any
		if confirmed {
			pattern = map[string]any{"boundary": object["boundary"], "duplicate": object["duplicate"]}
		} else {
			pattern = map[string]any{"code": object["code"]}
			if m, ok := object["message"]; ok {
				pattern["message"] = m
			}
		}
		for key, want := range pattern {
			if want == nil {
				delete(pattern, key)
			}
		}
		if err := r.match.match(pattern, outcome.value()); err != nil {
			return fmt.Errorf("sequence number %d: %w", seq, err)
		}
	}
	return nil
}

// publishMany writes frames publish frames of per_frame messages each in
// one write, sequence numbers from first_seq stepping by step (default 1).
func (r *caseRun) publishMany(c *connection, arg any) error {
	object, _ := arg.(map[string]any)
	f := &fields{object: object}
	frames, perFrame, seq, step := f.uint("frames", 32), f.uint("per_frame", 32), f.uint("first_seq", 64), f.uint("step", 64)
	payload, queue := f.bytes("payload"), []byte(f.str("queue"))
	if f.err != nil {
		return f.err
	}
	if step == 0 {
		step = 1
	}
	var out []byte
	for range frames {
		publish := &wire.Publish{Queue: queue}
		for range perFrame {
			publish.Messages = append(publish.Messages, wire.PublishMessage{Seq: seq, Payload: payload})
			c.published[seq] = true
			seq += step
		}
		out = publish.Encode(out)
	}
	_, err := c.conn.Write(out)
	return err
}

// expectDeliveries consumes count deliveries of a subscription, in order,
// matching each against the next pattern (or the one "each" pattern).
func (r *caseRun) expectDeliveries(c *connection, raw any) error {
	object, _ := raw.(map[string]any)
	subscription, err := asUint(r.resolve(object["subscription"]), 64)
	if err != nil {
		return fmt.Errorf("subscription: %w", err)
	}
	patterns, _ := object["match"].([]any)
	count := len(patterns)
	if n, ok := object["count"]; ok {
		parsed, err := asUint(n, 32)
		if err != nil {
			return err
		}
		count = int(parsed)
	}
	deadline := time.Now().Add(r.timeout)
	for i := range count {
		for len(c.deliveries[subscription]) == 0 {
			if err := c.wait(deadline); err != nil {
				return fmt.Errorf("delivery %d of %d on subscription %d did not come: %v", i+1, count, subscription, err)
			}
		}
		delivery := c.deliveries[subscription][0]
		c.deliveries[subscription] = c.deliveries[subscription][1:]
		var pattern any = object["each"]
		if i < len(patterns) {
			pattern = patterns[i]
		}
		if pattern == nil {
			continue
		}
		if err := r.match.match(r.resolvePattern(pattern), delivery); err != nil {
			return fmt.Errorf("delivery %d: %w", i+1, err)
		}
	}
	return nil
}

func (r *caseRun) expectNoDelivery(c *connection, object map[string]any, within time.Duration) error {
	subscription, err := asUint(object["subscription"], 64)
	if err != nil {
		return fmt.Errorf("subscription: %w", err)
	}
	deadline := time.Now().Add(within)
	for {
		if queued := c.deliveries[subscription]; len(queued) > 0 {
			return fmt.Errorf("subscription %d got a delivery, which must not come: %s", subscription, compact(queued[0]))
		}
		if err := c.wait(deadline); err != nil {
			return nil
		}
	}
}

// awaitInfo sends get-queue-info until the info matches (at most the
// step timeout, every 50 ms).
func (r *caseRun) awaitInfo(c *connection, raw any) error {
	object, _ := raw.(map[string]any)
	queue, _ := r.resolve(object["queue"]).(string)
	pattern := r.resolvePattern(object["match"])
	deadline := time.Now().Add(r.timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := r.send(c, map[string]any{"tag": "FIQ1", "queue": queue}); err != nil {
			return err
		}
		reply, err := r.expect(c, map[string]any{"tag": "FIR1", "request_id": "$rid"})
		if err != nil {
			return err
		}
		if last = r.match.match(pattern, reply["info"]); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("queue info never matched: %v", last)
}

func compact(value any) string {
	data, err := json.Marshal(value)
	if err != nil {
		return fmt.Sprint(value)
	}
	if len(data) > 300 {
		return string(data[:300]) + "..."
	}
	return string(data)
}
