// Package rafttransport carries Raft messages and snapshot chunks between
// nodes over TCP, optionally with mutual TLS. It is the transport module
// the cluster's NodeHost uses (config.TransportFactory), in place of the
// TCP transport that comes with dragonboat, and speaks the same bytes on
// the wire (frame.go), so a node running it and a node running the older
// transport talk to each other.
//
// It exists for one behaviour the built-in transport lacks: a peer that
// restarted is reached at once. The built-in transport keeps a connection
// per stream lane until a write to it fails; a lane that sat idle while
// its peer restarted fails at its first use after that, and one failed
// write opens the transport's circuit breaker for the whole address, so
// every Raft message to a live peer is dropped for 250 ms to 1 s. After
// an owner's kill that is the moment the two survivors run an election,
// and it made the election, and the failover, take one to three seconds.
// Here a message connection watches its socket: when the peer closes its
// end, the next send dials again before writing, and a write that fails on
// a connection that looked healthy is sent once more on a fresh one. An
// error reaches the breaker only when the peer cannot be dialled.
//
// The TLS material comes from a *tlsconfig.Node, so a reload of the
// node's files reaches both the dialing and the accepting side. The
// accepting side also checks which node a connection is (identity.go)
// and bounds what connections that have not finished their handshake
// can hold (bounds.go).
package rafttransport
