// Package access is who may connect to a node and what each user may do:
// users with tokens hashed at rest, loaded from a users file, each with
// permissions per queue-name pattern. docs/security.md describes the model
// and the file for operators; this comment is for the code that calls it.
//
// # Use
//
// At start, and on SIGHUP:
//
//	store, err := access.LoadStore(path, access.Options{})  // refuses a group- or world-writable file
//	for _, warning := range store.Users().Warnings() { log(warning) }
//	...
//	if _, err := store.Reload(); err != nil { log(err) } // the old users stay in force
//
// In the session, on hello (off the actor's goroutine: a cache miss costs
// an argon2id derivation), with the hello deadline as the context:
//
//	identity, err := store.AuthenticateCredential(ctx, hello.AuthToken) // "<user>:<token>"
//	// err: ErrUnauthorized -> FER1 unauthorized (104), close
//
// On every request, after the queue name has passed wire.ValidateQueueName:
//
//	err := store.Check(identity, access.Publish, queue)
//	// nil: go on
//	// ErrForbidden (a *DeniedError): FER1 forbidden (214), or FNC1 forbidden for a publish; connection stays
//	// ErrRevoked: FER1 unauthorized (104), close (the user was removed or given a new token)
//
// Requests map to operations so:
//
//	declare (FDC1)                 Declare on the queue; with dead_letter_queue X, Publish on X too
//	publish (FPB1)                 Publish
//	subscribe (FSB1)               Consume (settles and unsubscribe belong to the subscription)
//	delete-queue, purge-queue      Admin
//	get-queue-info (FIQ1)          Visible: any permission on the queue
//	list-queues (FLQ1)             the reply lists only the queues Visible to the user
//	node settings (HTTP, catalog)  Admin with queue "" (granted only by the pattern "*")
//	ping                           nothing
//
// # Identities of nodes
//
// Users are people and services that connect to the client listener.
// Nodes do not authenticate as users: a peer link (replication, Raft)
// authenticates the node at the other end, by mutual TLS with the
// cluster's CA (package tlsconfig) and the cluster's own peer handshake,
// and a user can never open one.
//
// # Tokens
//
// A credential is "<user>:<token>" in hello's auth_token. Tokens are
// machine credentials, 16 to 1024 bytes; GenerateToken makes a 256-bit
// one and HashToken its argon2id hash for the users file (what `fibril
// hash-token` prints). Tokens are never stored, logged or compared in
// plain text: Authenticate derives the key from the token presented and
// compares it with the stored key in constant time, and does the same
// work for an unknown user as for a wrong token (store.go).
package access
