package main

// requeue moves dead letters back into the queue they came from. Each
// dead-lettered copy carries its source queue in the header
// fibril-dead-letter-source; requeue publishes the message there again
// (same message id and headers, the dead-letter headers dropped), waits
// for the confirm, and only then acks the dead letter with ack-sync, so a
// message is never lost between the two queues. A crash between the
// confirm and the ack leaves it in both (at-least-once; consumers
// deduplicate on the message id). --to sends everything to one queue
// instead; a message without a source and no --to is left in place.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fibrilmq/fibril/client"
)

// Headers the node puts on a dead-lettered copy.
const (
	headerDeadLetterSource   = "fibril-dead-letter-source"
	headerDeadLetterAttempts = "fibril-dead-letter-attempts"
)

func init() {
	register(command{"requeue", "DEAD_LETTER_QUEUE [--to QUEUE] [--count N] [--wait D]",
		"move dead letters back into their source queue (publish, confirm, then ack)", runRequeue})
}

func runRequeue(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "requeue", &shared)
	to := flags.String("to", "", "publish every message to this queue instead of its source")
	count := flags.Uint64("count", 0, "most messages to move; 0 = every ready one")
	wait := flags.Duration("wait", 2*time.Second, "longest wait for the next dead letter before stopping")
	values, err := parseArgs(flags, args, stdout, "DEAD_LETTER_QUEUE")
	if err != nil {
		return err
	}
	c, err := shared.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.QueueInfo(ctx, values[0])
	if err != nil {
		return err
	}
	limit := info.Ready
	if *count > 0 {
		limit = min(limit, *count)
	}
	if limit == 0 {
		fmt.Fprintf(stdout, "requeued 0: %s has no ready messages\n", values[0])
		return nil
	}
	sub, err := c.Subscribe(ctx, values[0], client.SubscribeOptions{Prefetch: uint32(min(limit, 256))})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe(context.Background())
	moved, skipped := map[string]uint64{}, uint64(0)
	for total := uint64(0); total < limit; {
		d, ok := next(ctx, sub, *wait)
		if !ok {
			break
		}
		target := *to
		if target == "" {
			source, _ := d.Headers.Get(headerDeadLetterSource)
			target = string(source)
		}
		if target == "" {
			skipped++
			_ = d.Release()
			continue
		}
		if err := requeueOne(ctx, c, d, target); err != nil {
			_ = d.Release()
			return fmt.Errorf("after requeueing %d: message %q: %w", sum(moved), d.MessageID, err)
		}
		moved[target]++
		total++
	}
	var parts []string
	for target, n := range moved {
		parts = append(parts, fmt.Sprintf("%d to %s", n, target))
	}
	fmt.Fprintf(stdout, "requeued %d from %s (%s)\n", sum(moved), values[0], strings.Join(parts, ", "))
	if skipped > 0 {
		fmt.Fprintf(stdout, "left %d without a %s header in place; name a queue with --to\n", skipped, headerDeadLetterSource)
	}
	return nil
}

// requeueOne publishes d to target and, once confirmed, acks it.
func requeueOne(ctx context.Context, c *client.Client, d *client.Delivery, target string) error {
	var headers client.Headers
	for _, header := range d.Headers {
		if header.Key != headerDeadLetterSource && header.Key != headerDeadLetterAttempts {
			headers = append(headers, header)
		}
	}
	if _, err := c.Publish(ctx, target, client.Message{Payload: d.Payload, Headers: headers, MessageID: d.MessageID}); err != nil {
		return fmt.Errorf("publish to %s: %w", target, err)
	}
	if err := d.AckSync(ctx); err != nil {
		return fmt.Errorf("published to %s, but the dead letter's ack failed (it stays, so the message is in both): %w", target, err)
	}
	return nil
}

func next(ctx context.Context, sub *client.Subscription, wait time.Duration) (*client.Delivery, bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case d, open := <-sub.Deliveries():
		return d, open
	case <-timer.C:
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
}

func sum(counts map[string]uint64) uint64 {
	total := uint64(0)
	for _, n := range counts {
		total += n
	}
	return total
}
