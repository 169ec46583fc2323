package actors

// Inbound frames become these messages on the reader goroutine, so the
// session actor receives typed requests and never parses bytes. A frame the
// stream cannot survive (unknown tag, malformed or truncated body, a frame
// only the node sends) ends the reader with connectionEnded; a declare whose
// options are invalid is a request error and keeps the connection.
//
// A publish frame's body is copied once into memory the message owns (the
// reader's buffer is reused for the next frame); every payload, message id
// and header of the batch aliases that one copy, so a batch of n messages
// costs one body-sized allocation, not n.

import (
	"errors"
	"fmt"
	"time"

	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/wire"
)

// errProtocolViolation marks a well-formed frame that is not allowed from a
// client (a frame only nodes send, or only servers send).
var errProtocolViolation = errors.New("actors: protocol violation")

// inHello is a hello, with what the reader's authentication made of its
// token (connection.go): the identity, or why it is refused.
type inHello struct {
	frame    *wire.Hello
	identity access.Identity
	authErr  error
}
type inDeclare struct {
	frame      *wire.Declare
	optionsErr error // the options map was invalid; RequestID and Queue are set
}
type inPublish struct {
	queue    string
	seqs     []uint64
	messages []queue.Message
	bytes    int           // payload bytes, for metrics
	credit   publishCredit // what the reader took for it; returned once answered
	// idempotent: the frame was FPB2 (producer id and numbers); its
	// answer is FCF2, which marks duplicates.
	idempotent bool
}

// publishCredit is the publish credit a frame holds: its messages and the
// bytes of its body (one allocation every message of the batch aliases,
// so it is freed only when the last of them is answered).
type publishCredit struct{ messages, bytes int64 }
type inSubscribe struct{ frame *wire.Subscribe }
type inUnsubscribe struct{ frame *wire.Unsubscribe }
type inSettle struct {
	kind           settleKind
	subscriptionID uint64
	tags           []uint64
	requeue        bool          // nack only
	delay          time.Duration // nack only; negative: the queue's default
	requestID      uint64        // ack-sync (FAK2) only: answer FOK1 once applied
}
type inQueueInfo struct{ frame *wire.GetQueueInfo }
type inListQueues struct{ frame *wire.ListQueues }
type inDeleteQueue struct{ frame *wire.DeleteQueue }
type inPurgeQueue struct{ frame *wire.PurgeQueue }
type inPing struct{ frame *wire.Ping }
type inResume struct{ frame *wire.ResumePublishing }
type inPong struct{ frame *wire.Pong }
type inPeerError struct{ frame *wire.ErrorFrame }

// connectionEnded says the reader stopped: the client closed the stream
// (err is io.EOF), the socket failed, or a frame broke the stream.
type connectionEnded struct {
	err error
	tag wire.Tag // the frame's tag when a frame broke the stream
}

// settleKind names the four ways a consumer settles a delivery.
type settleKind uint8

const (
	settleAck settleKind = iota + 1
	settleNack
	settleRelease
	settleDiscard
)

func (k settleKind) String() string {
	switch k {
	case settleAck:
		return "ack"
	case settleNack:
		return "nack"
	case settleRelease:
		return "release"
	case settleDiscard:
		return "discard"
	}
	return fmt.Sprintf("settle(%d)", uint8(k))
}

// inboundDecoder belongs to one reader goroutine.
type inboundDecoder struct {
	publish    wire.Publish           // reused: its message slice grows once
	idempotent wire.PublishIdempotent // the same, for FPB2
	// lastSeq is the highest publish sequence number of the session so
	// far. A frame whose first number is not above it is a protocol
	// violation (docs/protocol.md 4.3); numbers within a frame that do
	// not increase are a malformed frame, which wire's decoder refuses.
	lastSeq uint64
}

// errSequenceNotAbove is the protocol violation of a publish whose first
// sequence number is not above every earlier one of the session.
var errSequenceNotAbove = fmt.Errorf("%w: publish sequence number not above every earlier one", errProtocolViolation)

func newInboundDecoder() *inboundDecoder { return &inboundDecoder{} }

// decode turns one frame into a session message. credit is what the
// message takes from the session's credit: a publish its messages and
// body bytes, a request with an id one request (the reader waits for
// that much credit).
func (d *inboundDecoder) decode(tag wire.Tag, body []byte) (message any, credit readCredit, err error) {
	switch tag {
	case wire.TagPublish, wire.TagPublishIdempotent:
		return d.decodePublish(tag, body)
	case wire.TagAck, wire.TagNack, wire.TagRelease, wire.TagDiscard, wire.TagAckSync:
		message, err = decodeSettle(tag, body)
		if settle, ok := message.(inSettle); ok && settle.requestID != 0 {
			credit.requests = 1 // ack-sync: answered once applied
		}
		return message, credit, err
	case wire.TagDeclare:
		frame := new(wire.Declare)
		if err := frame.Decode(body); err != nil {
			if errors.Is(err, wire.ErrInvalidOptions) {
				return inDeclare{frame: frame, optionsErr: err}, readCredit{requests: 1}, nil
			}
			return nil, credit, err
		}
		return inDeclare{frame: frame}, readCredit{requests: 1}, nil
	}
	message, err = decodeControl(tag, body)
	if err == nil && clientRequestID(message) != 0 {
		credit.requests = 1
	}
	return message, credit, err
}

// decodePublish decodes FPB1 and FPB2 (whose messages also carry the
// producer id and each its producer number) into one batch.
func (d *inboundDecoder) decodePublish(tag wire.Tag, body []byte) (any, readCredit, error) {
	owned := make([]byte, len(body))
	copy(owned, body)
	var queueName, producerID []byte
	var messages []wire.PublishMessage
	if tag == wire.TagPublishIdempotent {
		if err := d.idempotent.Decode(owned); err != nil {
			return nil, readCredit{}, err
		}
		queueName, producerID, messages = d.idempotent.Queue, d.idempotent.ProducerID, d.idempotent.Messages
	} else {
		if err := d.publish.Decode(owned); err != nil {
			return nil, readCredit{}, err
		}
		queueName, messages = d.publish.Queue, d.publish.Messages
	}
	if first := messages[0].Seq; first <= d.lastSeq {
		return nil, readCredit{}, &sequenceError{first: first, highest: d.lastSeq}
	}
	d.lastSeq = messages[len(messages)-1].Seq
	batch := inPublish{
		queue:      string(queueName),
		seqs:       make([]uint64, len(messages)),
		messages:   make([]queue.Message, len(messages)),
		idempotent: tag == wire.TagPublishIdempotent,
	}
	producer := string(producerID) // one string for the batch
	for i := range messages {
		m := &messages[i]
		batch.seqs[i] = m.Seq
		batch.messages[i] = queue.Message{ID: string(m.MessageID), Payload: m.Payload}
		if m.ProducerSeq != 0 {
			batch.messages[i].ProducerID, batch.messages[i].ProducerSeq = producer, m.ProducerSeq
		}
		if len(m.Headers) > 0 {
			headers := make([]queue.Header, len(m.Headers))
			for j, header := range m.Headers {
				headers[j] = queue.Header{Key: string(header.Key), Value: string(header.Value)}
			}
			batch.messages[i].Headers = headers
		}
		batch.bytes += len(m.Payload)
	}
	// Drop the decoded frame's references into owned so the reused frame
	// does not keep the batch alive.
	for i := range messages {
		messages[i] = wire.PublishMessage{Headers: messages[i].Headers[:0]}
	}
	d.publish.Queue, d.idempotent.Queue, d.idempotent.ProducerID = nil, nil, nil
	batch.credit = publishCredit{messages: int64(len(batch.messages)), bytes: int64(len(owned))}
	return batch, readCredit{publishes: batch.credit.messages, publishBytes: batch.credit.bytes}, nil
}

func decodeSettle(tag wire.Tag, body []byte) (any, error) {
	switch tag {
	case wire.TagAckSync:
		return decodeAckSync(body)
	case wire.TagNack:
		frame := new(wire.Nack)
		if err := frame.Decode(body); err != nil {
			return nil, err
		}
		delay := time.Duration(frame.DelayMs) * time.Millisecond
		if frame.DelayMs == 0 {
			delay = -1 // the queue's redelivery delay
		}
		return inSettle{kind: settleNack, subscriptionID: frame.SubscriptionID, tags: frame.DeliveryTags,
			requeue: frame.Requeue, delay: delay}, nil
	}
	var settle wire.Settle
	var kind settleKind
	switch tag {
	case wire.TagAck:
		frame := new(wire.Ack)
		err := frame.Decode(body)
		settle, kind = frame.Settle, settleAck
		if err != nil {
			return nil, err
		}
	case wire.TagRelease:
		frame := new(wire.Release)
		err := frame.Decode(body)
		settle, kind = frame.Settle, settleRelease
		if err != nil {
			return nil, err
		}
	default:
		frame := new(wire.Discard)
		err := frame.Decode(body)
		settle, kind = frame.Settle, settleDiscard
		if err != nil {
			return nil, err
		}
	}
	return inSettle{kind: kind, subscriptionID: settle.SubscriptionID, tags: settle.DeliveryTags}, nil
}

// decodeControl decodes the request frames that are not on the hot path.
func decodeControl(tag wire.Tag, body []byte) (any, error) {
	if !tag.Known() {
		return nil, &wire.FrameError{Tag: tag, Err: wire.ErrUnknownFrame}
	}
	frame := wire.NewFrame(tag)
	var message any
	switch f := frame.(type) {
	case *wire.Hello:
		message = inHello{frame: f}
	case *wire.Subscribe:
		message = inSubscribe{frame: f}
	case *wire.Unsubscribe:
		message = inUnsubscribe{frame: f}
	case *wire.GetQueueInfo:
		message = inQueueInfo{frame: f}
	case *wire.ListQueues:
		message = inListQueues{frame: f}
	case *wire.DeleteQueue:
		message = inDeleteQueue{frame: f}
	case *wire.PurgeQueue:
		message = inPurgeQueue{frame: f}
	case *wire.ChangeMode:
		message = inChangeMode{frame: f}
	case *wire.Ping:
		message = inPing{frame: f}
	case *wire.ResumePublishing:
		message = inResume{frame: f}
	case *wire.Pong:
		message = inPong{frame: f}
	case *wire.ErrorFrame:
		message = inPeerError{frame: f}
	default:
		return nil, fmt.Errorf("%w: a client may not send %s (%s)", errProtocolViolation, tag, tag.Name())
	}
	if err := frame.Decode(body); err != nil {
		return nil, err
	}
	return message, nil
}

// sequenceError is errSequenceNotAbove with the numbers; its text is what
// the error frame says.
type sequenceError struct{ first, highest uint64 }

func (e *sequenceError) Error() string {
	return fmt.Sprintf("publish sequence number %d is not above %d, the highest this session published before "+
		"(sequence numbers must increase across the whole session)", e.first, e.highest)
}

func (e *sequenceError) Unwrap() error { return errSequenceNotAbove }
