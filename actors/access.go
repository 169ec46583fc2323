package actors

// Who a session is and what it may do (docs/security.md).
//
// Authentication runs on the connection's reader goroutine, before the
// session sees the hello (connection.go): with Config.Users, the hello's
// auth token is "<user>:<token>" and access.Store verifies it (an argon2id
// derivation on a cache miss, bounded by the hello deadline); with
// Config.AuthToken, the token is compared with it in constant time; with
// neither, every hello passes. The session then refuses a failed hello
// with unauthorized (104) and closes.
//
// Authorization runs in the session, on every request, after the queue
// name passed the naming rule:
//
//	hello (FHL1)                       the credential itself (authentication, above)
//	declare (FDC1)                     Declare; Publish on its dead_letter_queue too
//	publish (FPB1, FPB2)               Publish (a refused frame is negatively confirmed, whole)
//	subscribe (FSB1)                   Consume
//	ack, ack-sync, nack, release,      the subscription's: it must be this session's own,
//	discard, unsubscribe               and it lives only while its user holds Consume
//	(FAK1, FAK2, FNK1, FRL1, FDS1, FUS1)
//	delete-queue (FDQ1), purge (FPG1)  Admin
//	change-mode (FMC1)                 Admin
//	get-queue-info (FIQ1)              any permission on the queue (access.Store.Visible)
//	list-queues (FLQ1)                 nothing; the list holds only the visible queues
//	ping, pong, error (FPI1, FPO1, FER1) nothing
//	resume-publishing (FRS1)           nothing; it lifts only this session's own publish fence,
//	                                   and every publish after it is checked as usual
//
// Every other frame kind is refused from a client on its header
// (inbound.go: node-to-node and server frames), so the table covers
// every request a session takes; TestEveryClientFrameHasAPermissionRule
// fails when a kind the session decodes is missing from it.
//
// A reload re-checks what each live session holds (recheckAccess): a
// revoked identity is closed, and a subscription whose user no longer
// holds Consume on its queue is ended with forbidden. Requests the
// session still holds (behind a declare or a delete, or waiting for a
// queue to open in a cluster) are checked when they go on, so against the
// permissions in force then; a request already handed to its queue
// completes.
//
// A denial is answered forbidden (214), counted in
// fibril_denials_total{operation}, and the connection stays. A revoked
// identity (a reload removed the user or changed its token) is closed
// with unauthorized at its next request, and at once when the reload
// happens (Broker.ReloadUsers sends every session usersReloaded).
// Without Config.Users every request is allowed, and so is every request
// of the node's own sessions (Broker.DialInternal: the HTTP endpoint's
// actions, which the endpoint authorized before, against the same users
// and permissions or its own token: admin/access.go).

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/wire"
)

// errWrongToken is the refusal of a hello whose token is not the node's
// shared token.
var errWrongToken = errors.New("the auth token does not match")

// authenticator checks a hello's auth token.
type authenticator struct {
	token string        // the shared token, or ""
	users *access.Store // or nil
}

// authenticate returns the hello's identity (empty without users), or why
// the hello is refused. It may block (an argon2id derivation, a wait for
// a hash slot) until ctx ends: call it off the actors.
func (a authenticator) authenticate(ctx context.Context, authToken []byte) (access.Identity, error) {
	switch {
	case a.users != nil:
		return a.users.AuthenticateCredential(ctx, authToken)
	case a.token != "" && subtle.ConstantTimeCompare(authToken, []byte(a.token)) != 1:
		return access.Identity{}, errWrongToken
	}
	return access.Identity{}, nil
}

// usersReloaded tells a session that the users file was reloaded: it
// closes itself if its identity was revoked.
type usersReloaded struct{}

// permit reports whether the session's user may do operation on queue
// (an empty queue asks about a node-wide operation). When it may not, it
// answers the request with forbidden, or closes a revoked session, and
// returns false. Publishes use permitPublish instead.
func (s *session) permit(requestID uint64, operation access.Operation, queue string) bool {
	failure, ok := s.checkAccess(operation, queue)
	if !ok && !s.closing {
		s.push(failure.frame(requestID))
	}
	return ok
}

// permitVisible is permit for get-queue-info: any permission will do.
func (s *session) permitVisible(requestID uint64, queue string) bool {
	users := s.core.config.Users
	if users == nil || s.conn.settings.internal {
		return true
	}
	if err := users.Revoked(s.identity); err != nil {
		s.becomeRevoked(err)
		return false
	}
	if users.Visible(s.identity, queue) {
		return true
	}
	s.core.metrics.denied("info")
	s.push(&wire.ErrorFrame{RequestID: requestID, Code: wire.CodeForbidden,
		Message: fmt.Sprintf("access: user %q holds no permission on queue %q", s.identity.User, queue)})
	return false
}

// checkAccess checks one operation; a revoked identity closes the
// session (and the failure is not to be sent).
func (s *session) checkAccess(operation access.Operation, queue string) (requestFailure, bool) {
	users := s.core.config.Users
	if users == nil || s.conn.settings.internal {
		return requestFailure{}, true
	}
	err := users.Check(s.identity, operation, queue)
	switch {
	case err == nil:
		return requestFailure{}, true
	case errors.Is(err, access.ErrRevoked):
		s.becomeRevoked(err)
		return requestFailure{}, false
	}
	s.core.metrics.denied(operation.String())
	return requestFailure{code: wire.CodeForbidden, message: err.Error()}, false
}

// visibleFilter is the list-queues filter of the session's user: nil (no
// filter) without users.
func (s *session) visibleFilter() func(string) bool {
	users, identity := s.core.config.Users, s.identity
	if users == nil || s.conn.settings.internal {
		return nil
	}
	return func(queue string) bool { return users.Visible(identity, queue) }
}

// recheckAccess applies a reload to what the session holds: it closes
// the session when its identity was revoked, and ends every subscription
// whose user no longer holds Consume on its queue.
func (s *session) recheckAccess(ctx actor.Context) {
	users := s.core.config.Users
	if users == nil || s.conn.settings.internal || !s.helloDone || s.closing {
		return
	}
	if err := users.Revoked(s.identity); err != nil {
		s.becomeRevoked(err)
		return
	}
	ended := false
	for _, subscription := range s.subscriptions {
		err := users.Check(s.identity, access.Consume, subscription.queue)
		if err == nil {
			continue
		}
		s.core.metrics.denied(access.Consume.String())
		s.endSubscription(ctx, subscription, requestFailure{code: wire.CodeForbidden,
			message: err.Error() + " (the users file was reloaded)"})
		ended = true
	}
	if ended {
		s.publishSummary()
	}
}

// endSubscription ends a subscription from the session's side: the client
// learns it with subscription-ended (or, before subscribe-ok, its
// subscribe is answered with the failure), and the partition is told to
// drop it, releasing what it held. The partition's answer to that
// unsubscribe carries no request id and is not passed on.
func (s *session) endSubscription(ctx actor.Context, subscription *sessionSubscription, failure requestFailure) {
	delete(s.subscriptions, subscription.id)
	if subscription.ready {
		s.push(&wire.SubscriptionEnded{SubscriptionID: subscription.id, Code: failure.code,
			Message: fmt.Sprintf("subscription %d on queue %q ended: %s", subscription.id, subscription.queue,
				failure.message)})
	} else {
		s.push(failure.frame(subscription.requestID)) // answers the subscribe, and gives its credit back
	}
	ctx.Send(subscription.partition, unsubscribeRequest{replyTo: ctx.Self(), subscriptionID: subscription.id})
}

// becomeRevoked closes a session whose credentials were revoked.
func (s *session) becomeRevoked(err error) {
	s.core.metrics.authFailed("revoked")
	s.refuse(wire.CodeUnauthorized, err.Error()+"; reconnect with valid credentials")
}
