// Package client is the Go SDK for Fibril. It speaks the wire protocol
// (package wire, docs/protocol.md) and imports no server package.
//
// # Connecting
//
//	c, err := client.Dial(ctx, client.Options{Addresses: []string{"127.0.0.1:7420"}})
//	defer c.Close()
//
// Dial returns once one address has answered hello. From then on the
// Client keeps a connection up: when it breaks, every request and publish
// pending on it fails at once with an error matching ErrConnectionLost
// (IsRetryable reports true), and a supervisor reconnects with backoff,
// rotating through the addresses and naming the previous session in
// hello. Session().Resumed (and Options.OnConnect) tell when the node
// restarted since. Requests made while reconnecting fail at once too,
// unless Options.WaitForReconnect makes them wait (bounded by their
// context).
//
// # Declaring
//
// Declare takes a QueueConfig; its zero value declares a durable queue.
// The result carries the effective mode and the node's warnings (a
// buffered queue always carries one about power loss).
//
//	result, err := c.Declare(ctx, "clicks", client.QueueConfig{Mode: client.ModeBuffered})
//
// # Publishing
//
// Publish waits for the confirm; PublishAsync returns a *PublishFuture at
// once, so many publishes are in flight together (up to
// Options.MaxPendingPublishes) and those queued together for one queue
// share a frame. Every Confirm says which boundary it stands on:
// BoundaryWritten for buffered queues, BoundaryDurable for durable ones.
// With Options.Confirms, Confirms() also streams every PublishAsync
// outcome. A publish that fails with ErrConnectionLost has an unknown
// outcome: publish it again if you need at-least-once, and deduplicate on
// the message id when consuming.
//
// # Consuming
//
// Subscribe returns a Subscription whose Deliveries channel holds at most
// the prefetch the node granted (or calls a handler from one goroutine).
// Settle every Delivery once: Ack, Nack (requeue, delay), Release or
// Discard. Settles are gathered per subscription and sent as soon as the
// connection's writer is free, in batches. A Delivery whose connection
// ended is stale: settling it returns ErrStaleDelivery, and the node hands
// the message out again with Redelivered set. After a reconnect the SDK
// subscribes again on its own. When the node ends a subscription itself
// (its queue was deleted or fenced, or a message is larger than
// Options.MaxBodyBytes), the Subscription ends: Done closes and Err
// returns the node's *ServerError; it is not subscribed again.
//
// # Redirects
//
// In a cluster a request for a queue owned by another node is answered
// with a redirect; the SDK connects to the named node (with its own
// reconnecting supervisor), remembers the route and sends the request
// again there, up to Options.MaxRedirects times. Publishes refused with
// not_owner were not stored, so they are sent again to the owner too.
//
// # Concurrency
//
// A Client and its Subscriptions are safe for concurrent use. Each
// connection has one reader and one writer goroutine; each node address a
// supervisor; each subscription with a handler one goroutine; the Confirms
// channel one. No goroutine is started per message. Every operation that
// can wait takes a context.
package client
