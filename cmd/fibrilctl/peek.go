package main

// peek shows up to --count messages from the head of a queue without
// consuming them. The protocol has no read-only browse, so peek does what
// RabbitMQ's "get messages, requeue" does: it subscribes, takes what the
// node delivers, and unsubscribes without settling, which releases every
// message (the attempt not counted). Two things follow, and peek says
// both: the messages come back marked redelivered on their next delivery,
// and messages other consumers hold are not seen. A release is a record
// the queue appends, so the messages count as ready again once it reaches
// the queue's boundary, which can be just after peek exits: a peek or an
// info right after it may not see them ready yet.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fibrilmq/fibril/client"
)

func init() {
	register(command{"peek", "NAME [--count N] [--wait D] [--json]",
		"show messages at the head of a queue and leave them there (released, so marked redelivered next time)", runPeek})
}

func runPeek(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "peek", &shared)
	count := flags.Uint("count", 10, "most messages to show (at most 65535)")
	wait := flags.Duration("wait", 2*time.Second, "longest wait for the node to deliver them")
	asJSON := flags.Bool("json", false, "print each message as a JSON object on its own line")
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	if *count == 0 || *count > 65535 {
		return usagef("--count is between 1 and 65535")
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
	want := min(uint64(*count), info.Ready)
	if want == 0 {
		if !*asJSON {
			fmt.Fprintf(stdout, "%s has no ready messages (%d leased by consumers)\n", values[0], info.Leased)
		}
		return nil
	}
	sub, err := c.Subscribe(ctx, values[0], client.SubscribeOptions{Prefetch: uint32(want)})
	if err != nil {
		return err
	}
	seen := collect(ctx, sub, want, *wait)
	if err := sub.Unsubscribe(ctx); err != nil { // releases them all, unsettled
		return err
	}
	for _, d := range seen {
		if *asJSON {
			if err := json.NewEncoder(stdout).Encode(deliveryToJSON(d)); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(stdout, describeDelivery(d))
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "peeked %d of %d ready; released again (their next delivery is marked redelivered, the attempt not counted)\n",
			len(seen), info.Ready)
	}
	return nil
}

// collect receives up to want deliveries, for at most wait.
func collect(ctx context.Context, sub *client.Subscription, want uint64, wait time.Duration) []*client.Delivery {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var seen []*client.Delivery
	for uint64(len(seen)) < want {
		select {
		case d, open := <-sub.Deliveries():
			if !open {
				return seen
			}
			seen = append(seen, d)
		case <-timer.C:
			return seen
		case <-ctx.Done():
			return seen
		}
	}
	return seen
}
