package main

// Consume prints one line per delivery:
//
//	attempt=<n> [redelivered ]id=<message id> published=<time> [headers=k=v,...] <body>
//
// The body is printed as is when it is printable UTF-8 on one line, and
// quoted (Go syntax) otherwise; header values the same way. With --json
// each delivery is one JSON object on its own line instead (deliveryJSON),
// with no summary line, so stdout is a clean JSON stream. The last line is "received N", or
// "received K of N" when --timeout ended the wait first. --quiet prints
// only that last line. --check adds a line
//
//	check: distinct=<d> duplicates=<x> missing=<m> highest=<h> unnumbered=<u>
//
// reading each message's number (see publish.go): missing counts the
// numbers from 1 to the highest seen that never arrived, duplicates the
// deliveries of a number already seen. Missing numbers make the exit code 1.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fibrilmq/fibril/client"
)

type consumeFlags struct {
	count    uint64
	ack      bool
	nack     bool
	noAck    bool
	timeout  time.Duration
	quiet    bool
	check    bool
	prefetch uint
	json     bool
}

func runConsume(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	var options consumeFlags
	flags := newFlags(ctx, "consume", &shared)
	flags.Uint64Var(&options.count, "count", 0, "stop after this many deliveries; 0 = until --timeout or interrupted")
	flags.BoolVar(&options.ack, "ack", false, "ack every delivery (the default)")
	flags.BoolVar(&options.nack, "nack", false, "nack every delivery with requeue (it comes back, its attempt counted)")
	flags.BoolVar(&options.noAck, "no-ack", false, "settle nothing (the node releases them when the connection closes)")
	flags.DurationVar(&options.timeout, "timeout", 0, "give up after this long; 0 = wait forever")
	flags.BoolVar(&options.quiet, "quiet", false, "print only the final count")
	flags.BoolVar(&options.check, "check", false, "report gaps and duplicates in the message numbers")
	flags.UintVar(&options.prefetch, "prefetch", 0, "most unsettled deliveries; 0 = the node's default (with --no-ack: --count)")
	flags.BoolVar(&options.json, "json", false, "print each delivery as a JSON object on its own line")
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	if boolCount(options.ack, options.nack, options.noAck) > 1 {
		return usagef("--ack, --nack and --no-ack exclude each other")
	}
	if options.prefetch > 65535 {
		return usagef("--prefetch is at most 65535")
	}
	prefetch := uint32(options.prefetch)
	if prefetch == 0 && options.noAck {
		prefetch = uint32(min(options.count, 65535))
	}
	c, err := shared.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, values[0], client.SubscribeOptions{Prefetch: prefetch})
	if err != nil {
		return err
	}
	return consume(ctx, sub, options, stdout)
}

func boolCount(values ...bool) int {
	n := 0
	for _, v := range values {
		if v {
			n++
		}
	}
	return n
}

// consume receives until the count, the timeout, an interrupt, or the end
// of the subscription.
func consume(ctx context.Context, sub *client.Subscription, options consumeFlags, stdout io.Writer) error {
	var deadline <-chan time.Time
	if options.timeout > 0 {
		timer := time.NewTimer(options.timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	checker := newSequenceCheck()
	received := uint64(0)
	var stopped error
	for stopped == nil && (options.count == 0 || received < options.count) {
		select {
		case d, open := <-sub.Deliveries():
			if !open {
				stopped = fmt.Errorf("the subscription ended: %w", sub.Err())
				break
			}
			received++
			checker.add(d)
			switch {
			case options.json:
				if err := json.NewEncoder(stdout).Encode(deliveryToJSON(d)); err != nil {
					stopped = err
				}
			case !options.quiet:
				fmt.Fprintln(stdout, describeDelivery(d))
			}
			if err := settle(d, options); err != nil && !errors.Is(err, client.ErrStaleDelivery) {
				stopped = err
			}
		case <-deadline:
			if options.count == 0 {
				return finishConsume(stdout, received, options, checker, nil)
			}
			stopped = fmt.Errorf("timed out after %s with %d of %d deliveries", options.timeout, received, options.count)
		case <-ctx.Done():
			stopped = fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
	return finishConsume(stdout, received, options, checker, stopped)
}

func finishConsume(stdout io.Writer, received uint64, options consumeFlags, checker *sequenceCheck, stopped error) error {
	summary := stdout
	if options.json {
		summary = io.Discard // stdout stays a stream of JSON objects; the exit code tells the rest
	}
	if stopped != nil && options.count > 0 {
		fmt.Fprintf(summary, "received %d of %d\n", received, options.count)
	} else {
		fmt.Fprintf(summary, "received %d\n", received)
	}
	if options.check {
		fmt.Fprintln(stdout, checker.summary())
		if stopped == nil && checker.missing() > 0 {
			stopped = fmt.Errorf("%d message numbers missing", checker.missing())
		}
	}
	return stopped
}

func settle(d *client.Delivery, options consumeFlags) error {
	switch {
	case options.noAck:
		return nil
	case options.nack:
		return d.Nack(true, 0)
	}
	return d.Ack()
}

func describeDelivery(d *client.Delivery) string {
	var line strings.Builder
	line.WriteString("attempt=" + strconv.FormatUint(uint64(d.Attempt), 10) + " ")
	if d.Redelivered {
		line.WriteString("redelivered ")
	}
	line.WriteString("id=" + printableText([]byte(d.MessageID)) + " published=" + d.PublishTime.UTC().Format(time.RFC3339Nano) + " ")
	if len(d.Headers) > 0 {
		pairs := make([]string, len(d.Headers))
		for i, header := range d.Headers {
			pairs[i] = header.Key + "=" + printableText(header.Value)
		}
		line.WriteString("headers=" + strings.Join(pairs, ",") + " ")
	}
	line.WriteString(printableText(d.Payload))
	return line.String()
}

// printableText is text as is when it is printable UTF-8 on one line, and
// quoted otherwise.
func printableText(text []byte) string {
	if printable(text) {
		return string(text)
	}
	return strconv.Quote(string(text))
}

// deliveryJSON is one delivery as consume --json and peek --json print it.
// Body and header values are text when they are valid UTF-8, and base64 in
// body_base64 (and header values prefixed "base64:") otherwise.
type deliveryJSON struct {
	Queue       string            `json:"queue"`
	MessageID   string            `json:"message_id"`
	Incarnation uint64            `json:"incarnation"`
	Offset      uint64            `json:"offset"`
	Attempt     uint32            `json:"attempt"`
	Redelivered bool              `json:"redelivered"`
	PublishTime time.Time         `json:"publish_time"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        *string           `json:"body,omitempty"`
	BodyBase64  []byte            `json:"body_base64,omitempty"`
}

func deliveryToJSON(d *client.Delivery) deliveryJSON {
	out := deliveryJSON{Queue: d.Queue, MessageID: d.MessageID, Incarnation: d.Incarnation, Offset: d.Offset,
		Attempt: d.Attempt, Redelivered: d.Redelivered, PublishTime: d.PublishTime.UTC()}
	if utf8.Valid(d.Payload) {
		body := string(d.Payload)
		out.Body = &body
	} else {
		out.BodyBase64 = d.Payload
	}
	if len(d.Headers) > 0 {
		out.Headers = make(map[string]string, len(d.Headers))
		for _, header := range d.Headers {
			value := string(header.Value)
			if !utf8.Valid(header.Value) {
				value = "base64:" + base64.StdEncoding.EncodeToString(header.Value)
			}
			out.Headers[header.Key] = value
		}
	}
	return out
}

func printable(body []byte) bool {
	if !utf8.Valid(body) {
		return false
	}
	for _, r := range string(body) {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// sequenceCheck tracks which message numbers arrived.
type sequenceCheck struct {
	seen       map[uint64]bool
	highest    uint64
	duplicates uint64
	unnumbered uint64
}

func newSequenceCheck() *sequenceCheck { return &sequenceCheck{seen: make(map[uint64]bool)} }

func (s *sequenceCheck) add(d *client.Delivery) {
	seq, ok := sequenceOf(d)
	switch {
	case !ok || seq == 0: // publish numbers from 1
		s.unnumbered++
	case s.seen[seq]:
		s.duplicates++
	default:
		s.seen[seq] = true
		s.highest = max(s.highest, seq)
	}
}

func (s *sequenceCheck) missing() uint64 { return s.highest - uint64(len(s.seen)) }

func (s *sequenceCheck) summary() string {
	return fmt.Sprintf("check: distinct=%d duplicates=%d missing=%d highest=%d unnumbered=%d",
		len(s.seen), s.duplicates, s.missing(), s.highest, s.unnumbered)
}
