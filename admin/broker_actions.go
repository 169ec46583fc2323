package admin

// The queue actions and connection list of a BrokerNode. The actions go
// through the broker's own client listener with the Go SDK, as any client
// would: the same checks, the same answers, and in a cluster the SDK
// follows the redirect to the queue's owner. Each action dials, does its
// one request and closes; they are rare, so no connection is kept.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"time"
	"unicode/utf8"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// actionTimeout bounds one action, the dial included.
const actionTimeout = 10 * time.Second

// peekWait bounds how long a peek waits for the node's deliveries.
const peekWait = 2 * time.Second

// Connections implements ConnectionLister.
func (n *BrokerNode) Connections() []ConnectionStatus {
	infos := n.broker.Connections()
	out := make([]ConnectionStatus, 0, len(infos))
	for _, info := range infos {
		out = append(out, ConnectionStatus{Session: info.SessionID, ClientName: info.ClientName,
			RemoteAddress: info.RemoteAddress, ConnectedUnixMs: info.ConnectedAt.UnixMilli(), State: info.State,
			Subscriptions: info.Subscriptions, User: info.User, TLS: info.TLS})
	}
	return out
}

// Gatherer implements MetricsGatherer.
func (n *BrokerNode) Gatherer() prometheus.Gatherer { return n.broker.Metrics().Gatherer() }

// internalAddress names the node's own in-process connection.
const internalAddress = "node-internal"

// dialSelf connects the SDK to the broker.
func (n *BrokerNode) dialSelf(ctx context.Context) (*client.Client, error) {
	// The node's own in-process connection: no TLS, no token check, every
	// permission (the HTTP endpoint's access rules authorized the action,
	// against the users file when the node has one: credentials.go).
	// A redirect to another node of a cluster dials it over TCP with the
	// shared token, as a client would.
	options := client.Options{Addresses: []string{internalAddress}, ClientName: "fibril-admin",
		DialTimeout: actionTimeout, KeepaliveInterval: -1,
		Dialer: func(ctx context.Context, address string) (net.Conn, error) {
			if address == internalAddress {
				return n.broker.DialInternal(ctx, address)
			}
			var dialer net.Dialer
			return dialer.DialContext(ctx, "tcp", address)
		}}
	if token := n.broker.Config().AuthToken; token != "" {
		options.AuthToken = []byte(token)
	}
	return client.Dial(ctx, options)
}

// withSelf runs one action on a fresh SDK connection.
func (n *BrokerNode) withSelf(ctx context.Context, action func(*client.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	c, err := n.dialSelf(ctx)
	if err != nil {
		return fmt.Errorf("admin: connecting to the node's own listener: %w", err)
	}
	defer c.Close()
	return actionError(action(c))
}

// actionError maps the node's unknown_queue to ErrNoSuchQueue.
func actionError(err error) error {
	if client.CodeOf(err) == wire.CodeUnknownQueue {
		return fmt.Errorf("%w: %w", ErrNoSuchQueue, err)
	}
	return err
}

// PurgeQueue implements QueueActor.
func (n *BrokerNode) PurgeQueue(ctx context.Context, name string) (removed uint64, err error) {
	err = n.withSelf(ctx, func(c *client.Client) error {
		removed, err = c.PurgeQueue(ctx, name)
		return err
	})
	return removed, err
}

// DeleteQueue implements QueueActor.
func (n *BrokerNode) DeleteQueue(ctx context.Context, name string) (removed uint64, err error) {
	err = n.withSelf(ctx, func(c *client.Client) error {
		removed, err = c.DeleteQueue(ctx, name)
		return err
	})
	return removed, err
}

// PeekQueue implements QueueActor: subscribe, take what the node hands
// out, unsubscribe without settling (which releases everything).
func (n *BrokerNode) PeekQueue(ctx context.Context, name string, count int) (peeked []PeekedMessage, err error) {
	if count < 1 || count > 1000 {
		return nil, errors.New("admin: peek count must be between 1 and 1000")
	}
	err = n.withSelf(ctx, func(c *client.Client) error {
		info, err := c.QueueInfo(ctx, name)
		if err != nil {
			return err
		}
		want := min(uint64(count), info.Ready)
		if want == 0 {
			return nil
		}
		sub, err := c.Subscribe(ctx, name, client.SubscribeOptions{Prefetch: uint32(want)})
		if err != nil {
			return err
		}
		timer := time.NewTimer(peekWait)
		defer timer.Stop()
		for uint64(len(peeked)) < want {
			select {
			case d, open := <-sub.Deliveries():
				if !open {
					return sub.Err()
				}
				peeked = append(peeked, peekedOf(d))
				continue
			case <-timer.C:
			case <-ctx.Done():
			}
			break
		}
		if err := sub.Unsubscribe(ctx); err != nil {
			return err
		}
		return awaitReleased(ctx, c, name, info.Leased)
	})
	return peeked, err
}

// awaitReleased waits (at most peekWait) until the queue's leased count
// is back to what it was before a peek: an unsubscribe's releases apply at
// the queue's boundary a moment after its answer, and a peek leaves the
// messages ready, so the next peek or consume sees them.
func awaitReleased(ctx context.Context, c *client.Client, name string, leasedBefore uint64) error {
	deadline := time.Now().Add(peekWait)
	for {
		info, err := c.QueueInfo(ctx, name)
		if err != nil || info.Leased <= leasedBefore || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func peekedOf(d *client.Delivery) PeekedMessage {
	out := PeekedMessage{MessageID: d.MessageID, Offset: d.Offset, Attempt: d.Attempt, Redelivered: d.Redelivered,
		PublishUnixMs: d.PublishTime.UnixMilli(), BodyBytes: len(d.Payload)}
	body := d.Payload
	if len(body) > PeekBodyBytes {
		body, out.Truncated = body[:PeekBodyBytes], true
	}
	if utf8.Valid(body) {
		out.Body = string(body)
	} else {
		out.BodyBase64 = body
	}
	if len(d.Headers) > 0 {
		out.Headers = map[string]string{}
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
