package client

import (
	"errors"
	"fmt"

	"github.com/fibrilmq/fibril/wire"
)

// Errors the SDK reports. Test for them with errors.Is; the ones that wrap a
// cause (ErrConnectionLost) keep it reachable with errors.As.
var (
	// ErrConnectionLost: the connection that carried the request ended before
	// the answer came, or there is no connection right now. Every request
	// and publish pending on a connection fails with it the moment the
	// connection is known to be gone. It is retryable: a publish that fails
	// with it has an unknown outcome (it may or may not have been stored),
	// so publish it again if you need at-least-once.
	ErrConnectionLost = errors.New("client: connection lost")
	// ErrClosed: the Client was closed. Not retryable on this Client.
	ErrClosed = errors.New("client: client closed")
	// ErrStaleDelivery: a settle named a delivery whose subscription or
	// connection has ended since it arrived. The node has already handed
	// the message back (it will be delivered again, marked redelivered),
	// so the settle is not sent.
	ErrStaleDelivery = errors.New("client: delivery is stale (its subscription or connection ended)")
	// ErrLeaseExpired: the delivery's lease expired before it was settled:
	// the node no longer holds it for this consumer and delivers the
	// message again (marked redelivered, its attempt counted), so the
	// settle is refused. Raise the queue's lease timeout, or lower the
	// prefetch, if handlers need longer.
	ErrLeaseExpired = errors.New("client: delivery's lease expired; the node delivers the message again")
	// ErrPublishTimeout: a publish's deadline passed before its confirm,
	// wherever the publish was: sent and unanswered, waiting for a
	// connection (a reconnect, or the dial of the node a redirect named),
	// or held behind its queue's earlier publishes after a redirect. Its
	// outcome is unknown (it may or may not have been stored), as after
	// ErrConnectionLost; it is retryable.
	ErrPublishTimeout = errors.New("client: publish deadline passed before its confirm (outcome unknown)")
	// ErrAlreadySettled: the delivery was already acked, nacked, released
	// or discarded.
	ErrAlreadySettled = errors.New("client: delivery already settled")
	// ErrSubscriptionClosed: the subscription has ended (unsubscribed,
	// client closed, or refused by the node on a resubscribe).
	ErrSubscriptionClosed = errors.New("client: subscription closed")
	// ErrTooManyRedirects: a request was redirected more often than
	// Options.MaxRedirects allows, which means the nodes disagree about the
	// queue's owner.
	ErrTooManyRedirects = errors.New("client: too many redirects")
	// ErrMessageTooLarge: the message cannot fit one frame under the node's
	// body limit.
	ErrMessageTooLarge = errors.New("client: message too large")
	// ErrNoAddresses: Dial was given no address.
	ErrNoAddresses = errors.New("client: no server address")
	// ErrInvalidConfig: a QueueConfig or option value cannot be sent (a
	// duration that does not fit the protocol's milliseconds field).
	ErrInvalidConfig = errors.New("client: invalid configuration")
)

// errKeepaliveTimeout is the cause of a connection closed because a ping
// went unanswered for a keepalive interval.
var errKeepaliveTimeout = errors.New("keepalive ping unanswered")

// ServerError is a refusal by the node: an error frame answering a request,
// or a negative confirm of a publish. Act on Code, never on Message.
type ServerError struct {
	Code    wire.Code
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("%s (%d): %s", e.Code, uint16(e.Code), e.Message)
}

// Retryable reports whether the same request may succeed later.
func (e *ServerError) Retryable() bool { return e.Code.Retryable() }

// IsRetryable reports whether err says the same request may succeed if sent
// again: a lost connection, a publish deadline that passed (both leave the
// outcome unknown), or a node refusal whose code is retryable (fenced,
// limit_reached, storage_failure, unavailable, overloaded, shutting_down,
// not_owner). Wait before sending again, longer after each refusal in a
// row (docs/protocol.md, "Flow control and overload"); a publish sent
// again takes a new sequence number, which the SDK assigns.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrPublishTimeout) {
		return true
	}
	var serverError *ServerError
	return errors.As(err, &serverError) && serverError.Retryable()
}

// CodeOf returns the node's error code carried by err, or 0 when err is not
// a node refusal.
func CodeOf(err error) wire.Code {
	var serverError *ServerError
	if errors.As(err, &serverError) {
		return serverError.Code
	}
	return 0
}

// connectionLost wraps a cause so that it matches ErrConnectionLost and
// still shows (and unwraps to) what happened.
func connectionLost(cause error) error {
	if cause == nil || errors.Is(cause, ErrConnectionLost) || errors.Is(cause, ErrClosed) {
		if cause == nil {
			return ErrConnectionLost
		}
		return cause
	}
	return fmt.Errorf("%w: %w", ErrConnectionLost, cause)
}
