package main

// Publish and the numbered body format.
//
// Every message publish sends carries its sequence number, counting from 1
// in each run, so a consumer can find gaps and duplicates:
//
//	generated body:  "seq=<n>" then, when --size is larger, one space and
//	                 '.' bytes up to exactly --size bytes
//	                 (a --size below the prefix's length leaves the prefix alone)
//	with --body:     the body is TEXT exactly, and the number travels in the
//	                 header "seq" as decimal text
//
// Every message also carries the header "seq", so readers need not parse
// bodies. consume --check reads the header and falls back to the body.
//
// Bodies of your own come from --body (every message the same), or
// --body-file FILE (- for stdin): the whole file as one body (--count
// times), or, with --lines, one message per line. --header adds headers,
// --id sets the message id (ID-1, ID-2... for several). The run keeps going
// through reconnects: a message in flight when a connection is lost has an
// unknown outcome, which is counted and reported, never sent again, unless
// --retry: then every message carries the run's producer id and number
// (idempotent publishing), and the SDK sends again, after the reconnect,
// each message whose outcome was lost, when the queue deduplicates
// (declare --dedup) and its window still covers it. The queue stores each
// once; "duplicates" counts those it had stored already.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

// seqHeader names the header that carries a message's sequence number.
const seqHeader = "seq"

// numberedBody builds the generated body of message seq.
func numberedBody(seq uint64, size int) []byte {
	body := strconv.AppendUint([]byte("seq="), seq, 10)
	if len(body) >= size {
		return body
	}
	body = append(body, ' ')
	for len(body) < size {
		body = append(body, '.')
	}
	return body
}

// sequenceOf reads a message's sequence number from its header or its
// body prefix.
func sequenceOf(d *client.Delivery) (uint64, bool) {
	if value, ok := d.Headers.Get(seqHeader); ok {
		seq, err := strconv.ParseUint(string(value), 10, 64)
		return seq, err == nil
	}
	const prefix = "seq="
	if len(d.Payload) <= len(prefix) || string(d.Payload[:len(prefix)]) != prefix {
		return 0, false
	}
	end := len(prefix)
	for end < len(d.Payload) && d.Payload[end] >= '0' && d.Payload[end] <= '9' {
		end++
	}
	seq, err := strconv.ParseUint(string(d.Payload[len(prefix):end]), 10, 64)
	return seq, err == nil
}

type publishFlags struct {
	count      uint64
	countSet   bool
	size       int
	ratePerSec float64
	body       string
	bodySet    bool
	bodyFile   string
	lines      bool
	headers    client.Headers
	messageID  string
	retry      bool
}

// source yields the bodies to publish: numbered, --body, or read from a
// file or stdin, whole or one per line.
type source struct {
	next func() ([]byte, bool, error)
	// known is the number of messages when it is known in advance.
	known uint64
}

func runPublish(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	var options publishFlags
	flags := newFlags(ctx, "publish", &shared)
	flags.Func("count", "messages to publish (default 1; not with --lines)", func(value string) error {
		n, err := parseUint(value, 64)
		options.count, options.countSet = n, true
		return err
	})
	flags.IntVar(&options.size, "size", 0, "pad generated bodies to this many bytes")
	flags.Float64Var(&options.ratePerSec, "rate", 0, "messages per second; 0 = as fast as confirms allow")
	flags.Func("body", "publish TEXT as every body (the number goes in the seq header)", func(text string) error {
		options.body, options.bodySet = text, true
		return nil
	})
	flags.StringVar(&options.bodyFile, "body-file", "", "read the body from FILE (- for stdin): the whole of it, or one per line with --lines")
	flags.BoolVar(&options.lines, "lines", false, "with --body-file: publish each line as one message")
	flags.Func("header", "add a header K=V to every message (repeatable)", func(value string) error {
		key, headerValue, ok := strings.Cut(value, "=")
		if !ok || key == "" {
			return fmt.Errorf("want KEY=VALUE")
		}
		options.headers = append(options.headers, client.Header{Key: key, Value: []byte(headerValue)})
		return nil
	})
	flags.StringVar(&options.messageID, "id", "", "message id (ID-1, ID-2... when several messages are published)")
	flags.BoolVar(&options.retry, "retry", false,
		"publish idempotently and send again, after a reconnect, what the lost connection left unknown (only to a queue declared with --dedup, within its window)")
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	if err := options.check(); err != nil {
		return err
	}
	bodies, closeSource, err := options.source(os.Stdin)
	if err != nil {
		return err
	}
	defer closeSource()
	c, err := shared.dial(ctx, client.Options{Confirms: true, WaitForReconnect: true,
		Idempotent: options.retry, RetryUnknownPublishes: options.retry})
	if err != nil {
		return err
	}
	tally := publishAll(ctx, c, values[0], options, bodies)
	return tally.report(stdout)
}

func (options *publishFlags) check() error {
	switch {
	case options.size < 0 || options.ratePerSec < 0:
		return usagef("--size and --rate must not be negative")
	case options.bodySet && options.bodyFile != "":
		return usagef("--body and --body-file exclude each other")
	case options.lines && options.bodyFile == "":
		return usagef("--lines reads --body-file; name the file (- for stdin)")
	case options.lines && options.countSet:
		return usagef("--lines publishes one message per line; --count does not apply")
	}
	if !options.countSet {
		options.count = 1
	}
	return nil
}

// source opens the bodies' source; the returned function closes it.
func (options *publishFlags) source(stdin io.Reader) (source, func(), error) {
	noop := func() {}
	if options.bodyFile == "" {
		seq := uint64(0)
		return source{known: options.count, next: func() ([]byte, bool, error) {
			if seq >= options.count {
				return nil, false, nil
			}
			seq++
			if options.bodySet {
				return []byte(options.body), true, nil
			}
			return numberedBody(seq, options.size), true, nil
		}}, noop, nil
	}
	reader, closeReader := stdin, noop
	if options.bodyFile != "-" {
		file, err := os.Open(options.bodyFile)
		if err != nil {
			return source{}, noop, fmt.Errorf("--body-file: %w", err)
		}
		reader, closeReader = file, func() { file.Close() }
	}
	if !options.lines {
		whole, err := io.ReadAll(io.LimitReader(reader, wire.DefaultMaxBodyBytes+1))
		if err != nil {
			closeReader()
			return source{}, noop, fmt.Errorf("--body-file: %w", err)
		}
		if len(whole) > wire.DefaultMaxBodyBytes {
			closeReader()
			return source{}, noop, fmt.Errorf("--body-file: the body is over %d bytes", wire.DefaultMaxBodyBytes)
		}
		sent := uint64(0)
		return source{known: options.count, next: func() ([]byte, bool, error) {
			if sent >= options.count {
				return nil, false, nil
			}
			sent++
			return whole, true, nil
		}}, closeReader, nil
	}
	scanner := bufio.NewScanner(reader)
	scanner.Buffer(make([]byte, 64<<10), wire.DefaultMaxBodyBytes)
	return source{next: func() ([]byte, bool, error) {
		if !scanner.Scan() {
			if err := scanner.Err(); err != nil {
				return nil, false, fmt.Errorf("--body-file: %w", err)
			}
			return nil, false, nil
		}
		return append([]byte(nil), scanner.Bytes()...), true, nil
	}}, closeReader, nil
}

// publishTally counts the outcomes of a publish run.
type publishTally struct {
	sent, confirmed, unknown, refused uint64
	duplicates                        uint64 // confirmed as stored before (--retry)
	firstUnknown, firstRefusal        error
	sendError                         error
}

// publishAll publishes every body of bodies, pipelined, through
// reconnects (a publish in flight when a connection is lost has an unknown
// outcome: it is counted, never sent again), and counts the outcomes. It
// stops sending at a refusal that cannot succeed later. It closes c.
func publishAll(ctx context.Context, c *client.Client, queue string, options publishFlags, bodies source) publishTally {
	counted := make(chan publishTally, 1)
	stop := make(chan struct{})
	var stopOnce sync.Once
	go func() {
		var tally publishTally
		for confirm := range c.Confirms() {
			switch {
			case confirm.Err == nil:
				tally.confirmed++
				if confirm.Duplicate {
					tally.duplicates++
				}
			case errors.Is(confirm.Err, client.ErrConnectionLost) || errors.Is(confirm.Err, client.ErrPublishTimeout):
				tally.unknown++
				if tally.firstUnknown == nil {
					tally.firstUnknown = fmt.Errorf("message %d: %w", confirm.Tag, confirm.Err)
				}
			default:
				tally.refused++
				if tally.firstRefusal == nil {
					tally.firstRefusal = fmt.Errorf("message %d: %w", confirm.Tag, confirm.Err)
				}
				if !client.IsRetryable(confirm.Err) {
					stopOnce.Do(func() { close(stop) })
				}
			}
		}
		counted <- tally
	}()
	sent, sendError := sendAll(ctx, c, queue, options, bodies, stop)
	flushError := c.Flush(ctx)
	c.Close() // after the last outcome is received, the Confirms channel closes
	tally := <-counted
	tally.sent = sent
	tally.sendError = errors.Join(sendError, flushError)
	return tally
}

// report prints the counts and returns the run's error, if any.
func (t publishTally) report(stdout io.Writer) error {
	duplicates := ""
	if t.duplicates > 0 {
		duplicates = fmt.Sprintf(" (%d of them duplicates: stored before, not stored again)", t.duplicates)
	}
	if t.confirmed == t.sent && t.sendError == nil {
		fmt.Fprintf(stdout, "confirmed %d%s\n", t.confirmed, duplicates)
		return nil
	}
	fmt.Fprintf(stdout, "confirmed %d of %d%s\n", t.confirmed, t.sent, duplicates)
	if t.unknown > 0 {
		fmt.Fprintf(stdout, "unknown %d: the connection was lost (or the deadline passed) before their confirm, so they "+
			"may or may not be stored; publish them again with the same --id to let consumers deduplicate\n", t.unknown)
	}
	if t.refused > 0 {
		fmt.Fprintf(stdout, "refused %d\n", t.refused)
	}
	switch {
	case t.firstRefusal != nil:
		return t.firstRefusal
	case t.firstUnknown != nil:
		return fmt.Errorf("%d messages have an unknown outcome; the first: %w", t.unknown, t.firstUnknown)
	case t.sendError != nil:
		return t.sendError
	}
	return errors.New("not every message was confirmed")
}

// sendAll publishes the bodies at the requested rate until they run out,
// stop closes, or sending fails; it returns how many it handed to the SDK.
func sendAll(ctx context.Context, c *client.Client, queue string, options publishFlags, bodies source, stop <-chan struct{}) (uint64, error) {
	start := time.Now()
	sent := uint64(0)
	for seq := uint64(1); ; seq++ {
		select {
		case <-stop:
			return sent, nil
		default:
		}
		body, ok, err := bodies.next()
		if err != nil || !ok {
			return sent, err
		}
		if options.ratePerSec > 0 {
			due := start.Add(time.Duration(float64(seq-1) / options.ratePerSec * float64(time.Second)))
			if err := sleepUntil(ctx, due); err != nil {
				return sent, err
			}
		}
		number := strconv.AppendUint(nil, seq, 10)
		message := client.Message{Payload: body, Headers: append(client.Headers{{Key: seqHeader, Value: number}}, options.headers...)}
		switch {
		case options.messageID != "" && bodies.known == 1:
			message.MessageID = options.messageID
		case options.messageID != "":
			message.MessageID = options.messageID + "-" + string(number)
		}
		if err := publishOne(ctx, c, queue, message, seq); err != nil {
			return sent, err
		}
		sent++
	}
}

// publishOne hands one message to the SDK. A refusal to take it because
// the connection was lost at that moment means it was never sent, so it
// is handed over again once the SDK has reconnected; anything else stops
// the run.
func publishOne(ctx context.Context, c *client.Client, queue string, message client.Message, seq uint64) error {
	for {
		_, err := c.PublishAsync(ctx, queue, message, client.WithTag(seq))
		if err == nil {
			return nil
		}
		if !errors.Is(err, client.ErrConnectionLost) {
			return fmt.Errorf("message %d: %w", seq, err)
		}
		if err := sleepUntil(ctx, time.Now().Add(10*time.Millisecond)); err != nil {
			return fmt.Errorf("message %d: %w", seq, err)
		}
	}
}

func sleepUntil(ctx context.Context, due time.Time) error {
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
