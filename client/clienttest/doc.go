// Package clienttest is an in-process fake Fibril node for testing code
// that uses package client, and the SDK itself. It speaks the wire
// protocol (hello, declare, publish and confirm, subscribe and deliver,
// idempotent publish (FPB2, confirmed with FCF2; the double stores every
// copy: it does not deduplicate), settles, ack-sync, info, list, delete,
// purge, ping, errors and redirects) over
// loopback TCP and keeps queues in memory, with just enough queue
// semantics to be useful: prefetch is honoured, attempts and the
// redelivered flag are kept, nack with requeue makes a message ready
// again (its delay is not simulated), nack without requeue and
// max_deliveries dead-letter.
//
// Tests steer it: SetHook sees every client frame and may ignore it or
// drop the connection; HoldConfirms and ReleaseConfirms reorder confirms;
// ExpireLease takes a lease back as a node does when it times out;
// Config.DefaultMode and Config.LegacyDeclareOK give mode-less declares a
// cluster's default or an older node's FDK1 answer;
// Redirect sends a queue's requests to another address; Refuse answers
// them (and its publishes) with an error code such as unavailable (a
// refused publish fences its queue on the connection until the client's
// FRS1, as a node of protocol version 3 does);
// DropConnections
// and Restart cut every connection abruptly. Await waits for a condition
// on Stats without polling.
//
// It is a test double, not a reference: nothing is persisted, every
// confirm of a durable queue claims the durable boundary without any
// fsync, and the node's own rules (queue names, limits, policies) are not
// checked.
package clienttest
