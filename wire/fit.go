// Fitting frames to a receiver's body limit (docs/protocol.md, "Message
// size"). A sender MUST keep every body within the receiver's
// max_body_bytes. FitFrame turns one frame that would break that rule into
// frames that keep it, without changing what they say:
//
//	confirm, confirm-idempotent, negative-confirm
//	                           ranges split over several frames (a client
//	                           already takes ranges in any order and any grouping)
//	deliver                    deliveries split over several frames
//	error, subscription-ended  message shortened (a message is for people)
//	declare-ok-mode            warnings shortened, then dropped
//	queue-list                 trailing entries left out, more = true, so the
//	                           client asks again from the last name it got
//	queue-info, queue-list     with no entry that fits: an error frame with
//	                           the request's id and code invalid_request
//
// Invariant: every frame FitFrame returns has a body of at most the limit,
// provided the limit is at least MinMaxBodyBytes, except a deliver holding
// one delivery larger than the limit (a node never builds one: it ends the
// subscription instead).
package wire

import (
	"fmt"
	"unicode/utf8"
)

// FitFrame returns nil when f's body fits maxBodyBytes (0 means
// DefaultMaxBodyBytes), and otherwise the frames to send instead of f, in
// order. It allocates only when f does not fit.
func FitFrame(f Frame, maxBodyBytes uint32) []Frame {
	if maxBodyBytes == 0 {
		maxBodyBytes = DefaultMaxBodyBytes
	}
	limit := int(maxBodyBytes)
	switch frame := f.(type) {
	case *Confirm:
		if 4+confirmRangeBytes*len(frame.Ranges) <= limit {
			return nil
		}
		return splitConfirm(frame, limit)
	case *ConfirmIdempotent:
		if 4+idempotentRangeBytes*len(frame.Ranges) <= limit {
			return nil
		}
		return splitConfirmIdempotent(frame, limit)
	case *Deliver:
		if deliverBodyBytes(frame.Deliveries) <= limit {
			return nil
		}
		return splitDeliver(frame, limit)
	}
	if bodyBytes(f) <= limit {
		return nil
	}
	switch frame := f.(type) {
	case *NegativeConfirm:
		return splitNegativeConfirm(frame, limit)
	case *ErrorFrame:
		clipped := *frame
		clipped.Message = clipTo(frame.Message, limit-(8+2+2))
		return []Frame{&clipped}
	case *SubscriptionEnded:
		clipped := *frame
		clipped.Message = clipTo(frame.Message, limit-(8+2+2))
		return []Frame{&clipped}
	case *DeclareOKMode:
		return []Frame{fitDeclareOKMode(frame, limit)}
	case *QueueList:
		return []Frame{fitQueueList(frame, limit)}
	case *QueueInfoReply:
		return []Frame{replyTooLarge(frame.RequestID, f, bodyBytes(f), limit)}
	}
	return []Frame{f}
}

// bodyBytes encodes f to learn its body size (slow frames only).
func bodyBytes(f Frame) int {
	out, err := Append(nil, f, ^uint32(0))
	if err != nil {
		return int(^uint32(0)>>1) + 1 // cannot be encoded at all: never fits
	}
	return len(out) - HeaderBytes
}

func deliverBodyBytes(deliveries []Delivery) int {
	n := DeliverHeadBytes
	for i := range deliveries {
		n += deliveries[i].EncodedBytes()
	}
	return n
}

func splitConfirm(f *Confirm, limit int) []Frame {
	perFrame := max((limit-4)/confirmRangeBytes, 1)
	var out []Frame
	for ranges := f.Ranges; len(ranges) > 0; {
		n := min(perFrame, len(ranges))
		out = append(out, &Confirm{Ranges: ranges[:n:n]})
		ranges = ranges[n:]
	}
	return out
}

func splitConfirmIdempotent(f *ConfirmIdempotent, limit int) []Frame {
	perFrame := max((limit-4)/idempotentRangeBytes, 1)
	var out []Frame
	for ranges := f.Ranges; len(ranges) > 0; {
		n := min(perFrame, len(ranges))
		out = append(out, &ConfirmIdempotent{Ranges: ranges[:n:n]})
		ranges = ranges[n:]
	}
	return out
}

func splitDeliver(f *Deliver, limit int) []Frame {
	var out []Frame
	start, size := 0, DeliverHeadBytes
	for i := range f.Deliveries {
		next := f.Deliveries[i].EncodedBytes()
		if i > start && size+next > limit {
			out = append(out, &Deliver{SubscriptionID: f.SubscriptionID, Deliveries: f.Deliveries[start:i:i]})
			start, size = i, DeliverHeadBytes
		}
		size += next
	}
	end := len(f.Deliveries)
	return append(out, &Deliver{SubscriptionID: f.SubscriptionID, Deliveries: f.Deliveries[start:end:end]})
}

func splitNegativeConfirm(f *NegativeConfirm, limit int) []Frame {
	const headBytes = 4
	// A range with its message must fit a frame alone.
	maxMessageBytes := limit - headBytes - minRejectRangeBytes
	var out []Frame
	var current []RejectRange
	size := headBytes
	for _, r := range f.Ranges {
		r.Message = clipTo(r.Message, maxMessageBytes)
		next := minRejectRangeBytes + len(r.Message)
		if len(current) > 0 && size+next > limit {
			out = append(out, &NegativeConfirm{Ranges: current})
			current, size = nil, headBytes
		}
		current = append(current, r)
		size += next
	}
	return append(out, &NegativeConfirm{Ranges: current})
}

func fitDeclareOKMode(f *DeclareOKMode, limit int) Frame {
	fitted := *f
	fitted.Warnings = append([]string(nil), f.Warnings...)
	for len(fitted.Warnings) > 0 && bodyBytes(&fitted) > limit {
		last := len(fitted.Warnings) - 1
		over := bodyBytes(&fitted) - limit
		if keep := len(fitted.Warnings[last]) - over; keep > 0 {
			fitted.Warnings[last] = clipTo(fitted.Warnings[last], keep)
			continue
		}
		fitted.Warnings = fitted.Warnings[:last]
	}
	return &fitted
}

func fitQueueList(f *QueueList, limit int) Frame {
	// Binary search for the most leading entries that fit.
	low, high := 0, len(f.Queues) // low entries are known to fit (0 is not checked yet)
	for low < high {
		middle := (low + high + 1) / 2
		if bodyBytes(&QueueList{RequestID: f.RequestID, More: true, Queues: f.Queues[:middle]}) <= limit {
			low = middle
		} else {
			high = middle - 1
		}
	}
	if low == 0 && len(f.Queues) > 0 {
		first := &QueueList{RequestID: f.RequestID, More: true, Queues: f.Queues[:1]}
		return replyTooLarge(f.RequestID, first, bodyBytes(first), limit)
	}
	return &QueueList{RequestID: f.RequestID, More: true, Queues: f.Queues[:low:low]}
}

// replyTooLarge answers a request whose reply cannot fit the client's
// limit.
func replyTooLarge(requestID uint64, reply Frame, size, limit int) Frame {
	return &ErrorFrame{RequestID: requestID, Code: CodeInvalidRequest, Message: clipTo(fmt.Sprintf(
		"the %s reply needs a body of %d bytes, over the max_body_bytes of %d this client accepts "+
			"(advertise a larger limit in hello)", reply.Tag().Name(), size, limit), limit-(8+2+2))}
}

// clipTo shortens s to at most n bytes (and MaxStringBytes), cutting at a
// character boundary.
func clipTo(s string, n int) string {
	n = min(max(n, 0), MaxStringBytes)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
