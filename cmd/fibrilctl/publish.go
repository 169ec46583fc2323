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

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/fibrilmq/fibril/client"
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
	size       int
	ratePerSec float64
	body       string
	bodySet    bool
}

func runPublish(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	var options publishFlags
	flags := newFlags("publish", &shared)
	flags.Uint64Var(&options.count, "count", 1, "messages to publish")
	flags.IntVar(&options.size, "size", 0, "pad generated bodies to this many bytes")
	flags.Float64Var(&options.ratePerSec, "rate", 0, "messages per second; 0 = as fast as confirms allow")
	flags.Func("body", "publish TEXT as every body (the number goes in the seq header)", func(text string) error {
		options.body, options.bodySet = text, true
		return nil
	})
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	if options.size < 0 || options.ratePerSec < 0 {
		return usagef("--size and --rate must not be negative")
	}
	c, err := shared.dial(ctx, client.Options{Confirms: true})
	if err != nil {
		return err
	}
	confirmed, firstError := publishAll(ctx, c, values[0], options)
	if confirmed == options.count {
		fmt.Fprintf(stdout, "confirmed %d\n", confirmed)
		return nil
	}
	fmt.Fprintf(stdout, "confirmed %d of %d\n", confirmed, options.count)
	if firstError == nil {
		firstError = errors.New("not every message was confirmed")
	}
	return firstError
}

// publishAll publishes options.count messages, pipelined, and counts the
// confirms. It stops sending at the first failure (the rest could not be
// confirmed either) and returns the first failure seen. It closes c.
func publishAll(ctx context.Context, c *client.Client, queue string, options publishFlags) (uint64, error) {
	type tally struct {
		confirmed  uint64
		firstError error
	}
	counted := make(chan tally, 1)
	go func() {
		var result tally
		for confirm := range c.Confirms() {
			if confirm.Err == nil {
				result.confirmed++
			} else if result.firstError == nil {
				result.firstError = fmt.Errorf("message %d: %w", confirm.Seq, confirm.Err)
			}
		}
		counted <- result
	}()
	sendError := sendAll(ctx, c, queue, options)
	flushError := c.Flush(ctx)
	c.Close() // after the last outcome is received, the Confirms channel closes
	result := <-counted
	for _, err := range []error{result.firstError, sendError, flushError} {
		if err != nil {
			return result.confirmed, err
		}
	}
	return result.confirmed, nil
}

// sendAll publishes the messages at the requested rate.
func sendAll(ctx context.Context, c *client.Client, queue string, options publishFlags) error {
	start := time.Now()
	for seq := uint64(1); seq <= options.count; seq++ {
		if options.ratePerSec > 0 {
			due := start.Add(time.Duration(float64(seq-1) / options.ratePerSec * float64(time.Second)))
			if err := sleepUntil(ctx, due); err != nil {
				return err
			}
		}
		number := strconv.AppendUint(nil, seq, 10)
		message := client.Message{Headers: client.Headers{{Key: seqHeader, Value: number}}}
		if options.bodySet {
			message.Payload = []byte(options.body)
		} else {
			message.Payload = numberedBody(seq, options.size)
		}
		if _, err := c.PublishAsync(ctx, queue, message); err != nil {
			return fmt.Errorf("message %d: %w", seq, err)
		}
	}
	return nil
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
