// Error codes. A code is a u16 carried by error frames (FER1) and negative
// confirms (FNC1). Codes are stable: a code's number and name never change
// meaning, new codes are only added. The hundreds digit classifies:
//
//	100-199  connection errors: the sender closes the connection after the frame
//	200-299  request errors: the request failed, the connection stays open
//
// A receiver that meets a code it does not know classifies it by that range
// and treats it as not retryable.
package wire

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Code is a stable numeric error code.
type Code uint16

// Connection errors (100-199): the sender closes the connection after the
// error frame.
const (
	CodeMalformedFrame     Code = 100 // a body broke its layout, or the stream ended inside a frame
	CodeFrameTooLarge      Code = 101 // a declared body length was over the receiver's limit
	CodeUnknownFrame       Code = 102 // the receiver has no layout for the tag
	CodeUnsupportedVersion Code = 103 // hello offered no protocol version the node speaks
	CodeUnauthorized       Code = 104 // hello's auth token was refused
	CodeProtocolViolation  Code = 105 // breaks the session rules: frame before hello-ok, second hello, other side's frame, sequence not increasing, body limit below MinMaxBodyBytes
	CodeShuttingDown       Code = 106 // the node is stopping; reconnect, possibly elsewhere
	CodeConnectionLimit    Code = 107 // the node, or the client's address, has as many connections as the node allows
)

// Request errors (200-299): the request failed; the connection stays open.
const (
	CodeInternal            Code = 200 // a bug or unexpected state in the node
	CodeUnknownQueue        Code = 201 // the queue is not declared
	CodeInvalidName         Code = 202 // the queue name breaks the naming rules
	CodeInvalidOptions      Code = 203 // declare options: unknown key, wrong type or value
	CodeModeConflict        Code = 204 // re-declare named a mode other than the queue's
	CodeNotOwner            Code = 205 // another node owns the queue (a redirect frame names it)
	CodeFenced              Code = 206 // the queue is fenced after a storage fault
	CodeLimitReached        Code = 207 // max_length / max_bytes reached with overflow reject_new
	CodeUnknownSubscription Code = 208 // no such subscription on this session
	CodeUnknownDeliveryTag  Code = 209 // a settle named a tag this subscription does not hold
	CodeStorageFailure      Code = 210 // the append failed; the message was not stored
	CodeUnavailable         Code = 211 // the queue cannot serve right now: replicas, owner election, opening, deleting
	CodeInvalidRequest      Code = 212 // a well-formed request with a value the node refuses
	CodeOverloaded          Code = 213 // the queue has too many publishes waiting for its log; back off
	CodeForbidden           Code = 214 // the session's user lacks the permission for this operation on this queue
	CodeOutcomeUnknown      Code = 215 // the publish may or may not have been stored (its queue changed owner or restarted)
	CodeResourceLimit       Code = 216 // a cap of the session or the node (subscriptions, queues) is reached
	CodeModeChangePending   Code = 217 // a change-mode toward the other mode while a change is still pending
)

// codeInfo is one row of the code table.
type codeInfo struct {
	name      string
	retryable bool
	meaning   string
}

var codeTable = map[Code]codeInfo{
	CodeMalformedFrame:      {"malformed_frame", false, "a body broke its layout, or the stream ended inside a frame"},
	CodeFrameTooLarge:       {"frame_too_large", false, "a declared body length was over the receiver's limit"},
	CodeUnknownFrame:        {"unknown_frame", false, "the receiver has no layout for the tag named in the message"},
	CodeUnsupportedVersion:  {"unsupported_version", false, "hello offered no protocol version the node speaks"},
	CodeUnauthorized:        {"unauthorized", false, "hello's auth token was refused"},
	CodeProtocolViolation:   {"protocol_violation", false, "a frame that breaks the session rules: anything before hello-ok, a second hello, a hello whose max_body_bytes is below 4,096, a frame only the other side sends, a publish sequence number not above every earlier one"},
	CodeShuttingDown:        {"shutting_down", true, "the node is stopping; reconnect, possibly to another node"},
	CodeConnectionLimit:     {"connection_limit", true, "the node, or the client's source address, has as many connections as the node allows; reconnect later, or to another node"},
	CodeInternal:            {"internal", false, "a bug or unexpected state in the node"},
	CodeUnknownQueue:        {"unknown_queue", false, "the queue is not declared"},
	CodeInvalidName:         {"invalid_name", false, "the queue name breaks the naming rules"},
	CodeInvalidOptions:      {"invalid_options", false, "declare options have an unknown key, a wrong type or a value out of range"},
	CodeModeConflict:        {"mode_conflict", false, "a re-declare named a durability mode other than the queue's"},
	CodeNotOwner:            {"not_owner", true, "another node owns the queue; retry there (a redirect frame names it)"},
	CodeFenced:              {"fenced", true, "the queue is fenced after a storage fault; retry after recovery or failover"},
	CodeLimitReached:        {"limit_reached", true, "max_length or max_bytes is reached and overflow is reject_new; retry after consumers catch up"},
	CodeUnknownSubscription: {"unknown_subscription", false, "no such subscription on this session"},
	CodeUnknownDeliveryTag:  {"unknown_delivery_tag", false, "a settle named a delivery tag the subscription does not hold (stale after a restart, or already settled)"},
	CodeStorageFailure:      {"storage_failure", true, "the append failed and the message was not stored"},
	CodeUnavailable:         {"unavailable", true, "the queue cannot serve right now: too few replicas are reachable, its owner is being elected, or it is still opening or being deleted"},
	CodeInvalidRequest:      {"invalid_request", false, "a well-formed request carries a value the node refuses, or its reply cannot fit the client's max_body_bytes"},
	CodeOverloaded:          {"overloaded", true, "the queue has too many publishes waiting for its log; retry once earlier publishes are answered"},
	CodeForbidden:           {"forbidden", false, "the session's user has no permission for this operation on this queue (declare, publish, consume or admin)"},
	CodeOutcomeUnknown:      {"outcome_unknown", true, "the publish may or may not have been stored: its queue changed owner or restarted before confirming it; publish again for at-least-once (a copy may then be delivered twice)"},
	CodeResourceLimit:       {"resource_limit", false, "a cap of the session or the node is reached (subscriptions per session, queues per node); the request was not carried out, and succeeds only once the client or an operator frees room"},
	CodeModeChangePending:   {"mode_change_pending", true, "a change-mode named the mode the queue runs while a change to the other one is still pending; retry once the pending change applied (queue info shows it)"},
}

// Codes returns every defined code in ascending order.
func Codes() []Code {
	var codes []Code
	for code := Code(0); code < 300; code++ {
		if _, ok := codeTable[code]; ok {
			codes = append(codes, code)
		}
	}
	return codes
}

// String returns the code's name ("unknown_queue"), or "code_<n>" for a
// code this package does not know.
func (c Code) String() string {
	if info, ok := codeTable[c]; ok {
		return info.name
	}
	return "code_" + strconv.Itoa(int(c))
}

// Meaning returns a one-line description of the code.
func (c Code) Meaning() string {
	if info, ok := codeTable[c]; ok {
		return info.meaning
	}
	return "unknown code"
}

// ClosesConnection reports whether the sender closes the connection after
// an error with this code (codes 100-199).
func (c Code) ClosesConnection() bool { return c >= 100 && c < 200 }

// Retryable reports whether sending the same request again, unchanged,
// later or to the node a redirect named, may succeed. Unknown codes are
// not retryable.
func (c Code) Retryable() bool { return codeTable[c].retryable }

// CodeFor maps an error from this package (decode, Reader, encode) to the
// code the peer should be told: frame_too_large, unknown_frame,
// invalid_options, malformed_frame for truncated or malformed bodies, and
// internal for anything else.
func CodeFor(err error) Code {
	switch {
	case errors.Is(err, ErrFrameTooLarge):
		return CodeFrameTooLarge
	case errors.Is(err, ErrUnknownFrame):
		return CodeUnknownFrame
	case errors.Is(err, ErrInvalidOptions):
		return CodeInvalidOptions
	case errors.Is(err, ErrTruncated), errors.Is(err, ErrMalformed):
		return CodeMalformedFrame
	}
	return CodeInternal
}

// ErrorFrameFor builds the error frame that answers err: the code from
// CodeFor and err's text as the message. requestID is the request the
// error answers, 0 when none.
func ErrorFrameFor(requestID uint64, err error) *ErrorFrame {
	return &ErrorFrame{RequestID: requestID, Code: CodeFor(err), Message: clipMessage(err.Error())}
}

// UnknownFrameError builds the error frame that answers a frame whose tag
// the receiver does not know: request id 0, code unknown_frame, and a
// message naming the tag. The receiver sends it and closes the connection.
func UnknownFrameError(tag Tag) *ErrorFrame {
	return &ErrorFrame{
		Code:    CodeUnknownFrame,
		Message: fmt.Sprintf("unknown frame tag %q", tag.String()),
	}
}

// clipMessage shortens an error message to fit a string field, cutting at
// a character boundary.
func clipMessage(message string) string {
	if len(message) <= MaxStringBytes {
		return message
	}
	cut := MaxStringBytes
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut]
}
