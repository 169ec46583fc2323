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
// hello: the same node first, unless the keepalive closed the connection
// (the node went silent: paused, cut off), which sends the first attempt
// to the next address instead of a node that would most likely leave
// hello unanswered until Options.DialTimeout. Options.OnConnectionLost reports a connection that ended,
// Options.OnReconnectFailed each failed attempt to get one back, and
// Options.OnConnect each success; Session().Resumed tells when the node
// restarted since. A publish the Client holds back to keep its queue's
// order (behind a refusal or a redirect) fails the same way once its
// queue's node is down (an attempt to get it back failed), or once the
// connection that fenced its queue ended. Requests made while
// reconnecting fail at once too, unless Options.WaitForReconnect makes
// them wait (bounded by their context).
//
// A node with TLS and users (docs/security.md) takes Options.TLS (the CA
// file that signs its certificate, optionally a client certificate, the
// server name) and the user's credential as the auth token:
//
//	c, err := client.Dial(ctx, client.Options{Addresses: []string{"node1:7420"},
//		AuthToken: []byte("billing:" + token), TLS: &client.TLSOptions{CAFile: "ca.pem"}})
//
// A TLS failure comes back explained (tlsconfig.ErrUntrustedCertificate,
// ErrCertificateName, ErrCertificateRefused, ErrNotTLS; test with
// errors.Is), and a node that refuses a request for want of permission
// answers it with code forbidden (214).
//
// # Declaring
//
// Declare takes a QueueConfig; its zero value declares a durable queue,
// and KeepMode names no mode (an existing queue keeps its own, a new one
// gets the deployment's default: see QueueConfig). The result carries the
// effective mode and policy as the node states them, and its warnings (a
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
// Outcomes reach you on the future, through a per-publish callback
// (WithCallback), or, with Options.Confirms, on the Confirms() channel;
// WithTag attaches a value of yours that every Confirm carries back, so no
// table keyed by publish numbers is needed. A publish that fails with
// ErrConnectionLost or ErrPublishTimeout has an unknown outcome: publish
// it again if you need at-least-once, and deduplicate on the message id
// when consuming.
//
// # Publishing once
//
// To a queue declared with a dedup window (QueueConfig.Dedup or
// DedupWindow), a message is stored once however often it is sent within
// the window, when every copy carries the same key: its MessageID, or,
// with Options.Idempotent, the Client's producer id and the publish's
// number. With Options.RetryUnknownPublishes as well, the SDK sends such a
// publish again by itself after a reconnect instead of failing it with
// ErrConnectionLost (only to queues that deduplicate, within half their
// window); the confirm of a copy the queue had stored says Duplicate.
//
//	c, err := client.Dial(ctx, client.Options{Addresses: addresses, Idempotent: true, RetryUnknownPublishes: true})
//	_, err = c.Declare(ctx, "payments", client.QueueConfig{Dedup: true})
//	confirm, err := c.Publish(ctx, "payments", client.Message{MessageID: "payment-8812", Payload: body})
//
// A publish that still fails with ErrConnectionLost (its window passed,
// or the reconnect took too long) may be published again by you with the
// same MessageID: the queue still stores it once. docs/durability.md,
// "Publishing exactly once", says what this survives and what it does not.
//
// Deadlines: Options.PublishTimeout bounds every publish's wait for its
// confirm, WithPublishTimeout and WithDeadline one publish's, and Publish
// ends at its context's deadline; a publish past its deadline fails with
// ErrPublishTimeout and frees its window place, whatever it was waiting
// for (a reconnect, the node a redirect named, the confirm).
//
// Order: the publishes to one queue that one Client makes one after
// another are stored in that order, also when the queue's owner changes
// under them (see Redirects). Nothing orders publishes of different
// Clients, of different queues, or made concurrently; and a publish that
// fails is outside the promise (a copy you publish again comes after the
// later ones, and so may one RetryUnknownPublishes sends again).
//
// Buffers: the SDK does not copy a message. PublishAsync keeps the
// Payload and header values until the future is done (they are read when
// the frame is encoded, and again if a redirect sends the message to
// another node), so do not modify or reuse them before then. After
// Publish returns they are yours again. A Delivery's Payload and header
// values are the SDK's own copy and stay valid as long as you keep them.
//
// # Consuming
//
// Subscribe returns a Subscription whose Deliveries channel holds at most
// the prefetch the node granted (or calls a handler from one goroutine).
// Settle every Delivery once: Ack, Nack (requeue, delay), Release or
// Discard are sent in the background, gathered per subscription and sent
// as soon as the connection's writer is free, in batches; AckSync waits
// until the node has applied the ack. A Delivery whose connection ended is
// stale: settling it returns ErrStaleDelivery, and the node hands the
// message out again with Redelivered set. A Delivery held past its queue's
// lease timeout has expired: settling it returns ErrLeaseExpired, because
// the node has taken it back and delivers it again. After a reconnect the
// SDK subscribes again on its own, retrying with backoff until the node
// accepts. When the node ends a subscription itself (its queue was
// deleted or fenced, or a message is larger than Options.MaxBodyBytes),
// or refuses a resubscribe for good, the Subscription ends: Done closes
// and Err returns the node's *ServerError.
//
// Shutting down: Subscription.Drain stops handing out deliveries, lets
// handlers finish and settle what they hold, then unsubscribes;
// Client.Drain does that for every subscription, waits for outstanding
// confirms, and closes. Unsubscribe and Close end at once instead, and
// the node releases what is unsettled (a handler still working then finds
// its delivery stale, and the message is delivered again).
//
// # Redirects
//
// In a cluster a request for a queue owned by another node is answered
// with a redirect; the SDK connects to the named node (with its own
// reconnecting supervisor), remembers the route and sends the request
// again there, up to Options.MaxRedirects times. Publishes refused with
// not_owner were not stored, so they are sent again to the owner too,
// ahead of the later publishes to their queue: those wait (holding their
// window places) until the refused ones, and any still unanswered on the
// connection the queue is leaving, have gone out or ended, then follow in
// the order they were made. The redirect's node may be down (it lost
// power, and the node that redirected has not heard so yet). While its
// connection is gone and no attempt to get it back has failed, the
// refused publishes wait for it (without WaitForReconnect they fail at
// once with ErrConnectionLost); a node that is merely slow keeps its
// connection and is waited for. Once an attempt has failed, the SDK drops
// the route to it, avoids the node that redirected there for the queue as
// it avoids one that answers unavailable (below), and sends the refused
// publishes, like a request or a resubscribe, through the next node it
// knows, which serves the queue, redirects to the owner it knows (the new
// one, once it has heard), or refuses. When every node it knows has named
// a node that is down, a request fails with ErrConnectionLost and a
// resubscribe tries again after its backoff, while the refused publishes
// wait for that node's next failed attempt (its reconnect backoff paces
// this) and go round again until they are stored or their deadlines pass
// (without WaitForReconnect they fail with ErrConnectionLost). Such
// detours do not count against MaxRedirects. The later publishes wait
// behind them meanwhile, and every publish's deadline ends its wait.
// The SDK speaks protocol version 2, whose redirects carry the owner's
// epoch: a redirect naming an older epoch than one it already followed
// for the queue (from a node that has not heard of a failover yet) is not
// followed; the request goes to the newer owner it knows instead.
//
// A node that answers a queue's request or publish with unavailable or
// fenced carried nothing out (a refused publish was not stored), and may
// be an owner cut off from its peers: it cannot confirm, and it does not
// redirect because it has not heard that the others elected a new owner.
// So the SDK stops sending that queue's traffic to the node for
// Options.Backoff.Max (5 s by default) and sends it through the next node
// it knows (the configured Addresses, then the nodes redirects named),
// which serves the queue or redirects to its owner; a node that refuses
// too is avoided in turn, and after a full round the first comes back.
// Refused publishes are sent on like those refused with not_owner: ahead
// of their queue's later publishes, which wait behind them, in order, and
// within their deadlines. A publish refused by every node the SDK knows
// (on a single node: the first refusal) fails with the refusal, a
// retryable *ServerError; publish it again after a backoff, and it goes to
// the node chosen next. A request (subscribe, info, purge, declare) is
// sent through the next node the same way, once per node; a subscription
// being subscribed again follows the same rule. The detour lapses with
// the avoidance (the queue's traffic goes back to its route, or home) and
// ends when a redirect for the queue is followed. A redirect may name the
// very node that refused the publishes with unavailable in their round:
// the new owner, which the other nodes already name while it is still
// taking the queue over. The publishes then go back to it after a backoff
// (Options.Backoff, growing with their refusals) rather than at once, and
// these redirects do not count against MaxRedirects (the nodes do not
// disagree: one is not ready yet); the round bounds them as any other.
// shutting_down closes the connection, so it is handled as a lost
// connection is.
//
// # Concurrency
//
// A Client and its Subscriptions are safe for concurrent use. Each
// connection has one reader and one writer goroutine; each node address a
// supervisor; each subscription with a handler one goroutine; the Confirms
// channel one; each queue whose publishes wait behind a redirect one,
// while they wait. No goroutine is started per message. Every operation that
// can wait takes a context.
package client
