package conformance

// Frames as the suite's data writes them: a JSON object with "tag" and the
// layout's field names of docs/protocol.md section 5. Client frames are
// built from such objects (buildFrame); every frame a node sends is turned
// into one (frameValue), with u64 and u32 fields as uint64, i64 as int64,
// byte fields as strings, headers as [[key, value], ...] and msgpack bodies
// as plain values (see msgpack.go).

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fibrilmq/fibril/wire"
)

// requestTags are the client frames that carry a request id; a send that
// leaves it out gets the connection's next one.
var requestTags = map[string]bool{"FAK2": true, "FDC1": true, "FSB1": true, "FUS1": true, "FIQ1": true, "FLQ1": true,
	"FDQ1": true, "FPG1": true, "FPI1": true}

// fields wraps a frame object with typed getters that record the first
// error.
type fields struct {
	object map[string]any
	err    error
}

func (f *fields) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf(format, args...)
	}
}

func (f *fields) uint(name string, bits int) uint64 {
	value, ok := f.object[name]
	if !ok {
		return 0
	}
	n, err := asUint(value, bits)
	if err != nil {
		f.fail("field %s: %v", name, err)
	}
	return n
}

func (f *fields) str(name string) string {
	value, ok := f.object[name]
	if !ok {
		return ""
	}
	text, isText := value.(string)
	if !isText {
		f.fail("field %s: want a string, found %T", name, value)
	}
	return text
}

func (f *fields) bytes(name string) []byte {
	value, ok := f.object[name]
	if !ok {
		return nil
	}
	b, err := asBytes(value)
	if err != nil {
		f.fail("field %s: %v", name, err)
	}
	return b
}

func (f *fields) boolean(name string) bool {
	value, ok := f.object[name]
	if !ok {
		return false
	}
	b, isBool := value.(bool)
	if !isBool {
		f.fail("field %s: want a bool, found %T", name, value)
	}
	return b
}

func (f *fields) list(name string) []any {
	value, ok := f.object[name]
	if !ok {
		return nil
	}
	items, isList := value.([]any)
	if !isList {
		f.fail("field %s: want a list, found %T", name, value)
	}
	return items
}

func (f *fields) uints(name string) []uint64 {
	var out []uint64
	for _, item := range f.list(name) {
		n, err := asUint(item, 64)
		if err != nil {
			f.fail("field %s: %v", name, err)
		}
		out = append(out, n)
	}
	return out
}

func (f *fields) headers(name string) []wire.Header {
	var out []wire.Header
	for _, item := range f.list(name) {
		pair, ok := item.([]any)
		if !ok || len(pair) != 2 {
			f.fail("field %s: a header is a [key, value] pair", name)
			continue
		}
		key, err := asBytes(pair[0])
		if err != nil {
			f.fail("field %s: %v", name, err)
		}
		value, err := asBytes(pair[1])
		if err != nil {
			f.fail("field %s: %v", name, err)
		}
		out = append(out, wire.Header{Key: key, Value: value})
	}
	return out
}

// asUint reads a JSON number, a decimal string or a captured integer.
func asUint(value any, bits int) (uint64, error) {
	var text string
	switch v := value.(type) {
	case json.Number:
		text = v.String()
	case string:
		text = v
	case uint64:
		text = strconv.FormatUint(v, 10)
	case int64:
		text = strconv.FormatInt(v, 10)
	default:
		return 0, fmt.Errorf("want an integer, found %T", value)
	}
	return strconv.ParseUint(text, 10, bits)
}

// asBytes reads a byte field: a string (its UTF-8 bytes), {"hex": "..."}
// or {"repeat": "x", "count": n}.
func asBytes(value any) ([]byte, error) {
	switch v := value.(type) {
	case string:
		return []byte(v), nil
	case map[string]any:
		if text, ok := v["hex"].(string); ok {
			return hex.DecodeString(strings.Join(strings.Fields(text), ""))
		}
		if unit, ok := v["repeat"].(string); ok {
			count, err := asUint(v["count"], 32)
			if err != nil {
				return nil, fmt.Errorf("repeat count: %w", err)
			}
			return []byte(strings.Repeat(unit, int(count))), nil
		}
	}
	return nil, fmt.Errorf("want a string, {\"hex\"} or {\"repeat\", \"count\"}, found %v", value)
}

// buildFrame makes a client frame from its object.
func buildFrame(object map[string]any) (wire.Frame, error) {
	f := &fields{object: object}
	tag, _ := object["tag"].(string)
	var frame wire.Frame
	switch tag {
	case "FHL1":
		versions := f.uints("versions")
		hello := &wire.Hello{ClientName: f.str("client_name"), AuthToken: f.bytes("auth_token"),
			PreviousSession: f.str("previous_session"), MaxBodyBytes: uint32(f.uint("max_body_bytes", 32))}
		for _, v := range versions {
			hello.Versions = append(hello.Versions, uint16(v))
		}
		frame = hello
	case "FDC1":
		return buildDeclare(f)
	case "FPB1":
		publish := &wire.Publish{Queue: []byte(f.str("queue"))}
		for _, item := range f.list("messages") {
			message, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("FPB1: a message is an object")
			}
			m := &fields{object: message}
			publish.Messages = append(publish.Messages, wire.PublishMessage{Seq: m.uint("seq", 64),
				MessageID: m.bytes("message_id"), Headers: m.headers("headers"), Payload: m.bytes("payload")})
			if m.err != nil {
				return nil, m.err
			}
		}
		frame = publish
	case "FPB2":
		publish := &wire.PublishIdempotent{Queue: []byte(f.str("queue")), ProducerID: []byte(f.str("producer_id"))}
		for _, item := range f.list("messages") {
			message, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("FPB2: a message is an object")
			}
			m := &fields{object: message}
			publish.Messages = append(publish.Messages, wire.PublishMessage{Seq: m.uint("seq", 64),
				ProducerSeq: m.uint("producer_seq", 64), MessageID: m.bytes("message_id"), Headers: m.headers("headers"),
				Payload: m.bytes("payload")})
			if m.err != nil {
				return nil, m.err
			}
		}
		frame = publish
	case "FSB1":
		frame = &wire.Subscribe{RequestID: f.uint("request_id", 64), Queue: f.str("queue"),
			Prefetch: uint32(f.uint("prefetch", 32))}
	case "FAK1":
		frame = &wire.Ack{Settle: wire.Settle{SubscriptionID: f.uint("subscription_id", 64), DeliveryTags: f.uints("delivery_tags")}}
	case "FAK2":
		frame = &wire.AckSync{RequestID: f.uint("request_id", 64),
			Settle: wire.Settle{SubscriptionID: f.uint("subscription_id", 64), DeliveryTags: f.uints("delivery_tags")}}
	case "FRL1":
		frame = &wire.Release{Settle: wire.Settle{SubscriptionID: f.uint("subscription_id", 64), DeliveryTags: f.uints("delivery_tags")}}
	case "FDS1":
		frame = &wire.Discard{Settle: wire.Settle{SubscriptionID: f.uint("subscription_id", 64), DeliveryTags: f.uints("delivery_tags")}}
	case "FNK1":
		frame = &wire.Nack{SubscriptionID: f.uint("subscription_id", 64), Requeue: f.boolean("requeue"),
			DelayMs: uint32(f.uint("delay_ms", 32)), DeliveryTags: f.uints("delivery_tags")}
	case "FUS1":
		frame = &wire.Unsubscribe{RequestID: f.uint("request_id", 64), SubscriptionID: f.uint("subscription_id", 64)}
	case "FIQ1":
		frame = &wire.GetQueueInfo{RequestID: f.uint("request_id", 64), Queue: f.str("queue")}
	case "FLQ1":
		frame = &wire.ListQueues{RequestID: f.uint("request_id", 64), Prefix: f.str("prefix"), After: f.str("after"),
			Limit: uint32(f.uint("limit", 32))}
	case "FDQ1":
		frame = &wire.DeleteQueue{RequestID: f.uint("request_id", 64), Queue: f.str("queue")}
	case "FPG1":
		frame = &wire.PurgeQueue{RequestID: f.uint("request_id", 64), Queue: f.str("queue")}
	case "FPI1":
		frame = &wire.Ping{RequestID: f.uint("request_id", 64)}
	case "FPO1":
		frame = &wire.Pong{RequestID: f.uint("request_id", 64)}
	case "FER1":
		frame = &wire.ErrorFrame{RequestID: f.uint("request_id", 64), Code: wire.Code(f.uint("code", 16)), Message: f.str("message")}
	default:
		return nil, fmt.Errorf("the suite cannot build a %q frame (use send_raw)", tag)
	}
	return frame, f.err
}

// buildDeclare encodes FDC1 by hand, so options may be raw bytes
// (options_hex) that package wire would refuse to write.
func buildDeclare(f *fields) (wire.Frame, error) {
	var options []byte
	if raw, ok := f.object["options_hex"]; ok {
		var err error
		if options, err = asBytes(map[string]any{"hex": raw}); err != nil {
			return nil, err
		}
	} else if value, ok := f.object["options"]; ok {
		var err error
		if options, err = encodeMsgpack(nil, value); err != nil {
			return nil, err
		}
	}
	body := binary.BigEndian.AppendUint64(nil, f.uint("request_id", 64))
	queue := f.str("queue")
	body = binary.BigEndian.AppendUint16(body, uint16(len(queue)))
	body = append(body, queue...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(options)))
	body = append(body, options...)
	if _, ok := f.object["mode"]; ok {
		body = append(body, byte(f.uint("mode", 8)))
	}
	return rawFrame{tag: wire.TagDeclare, body: body}, f.err
}

// rawFrame is a frame given as tag and body bytes.
type rawFrame struct {
	tag    wire.Tag
	length *uint32 // a declared body length other than len(body)
	body   []byte
}

func (r rawFrame) Tag() wire.Tag { return r.tag }
func (r rawFrame) Encode(dst []byte) []byte {
	length := uint32(len(r.body))
	if r.length != nil {
		length = *r.length
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.tag))
	dst = binary.BigEndian.AppendUint32(dst, length)
	return append(dst, r.body...)
}
func (r rawFrame) Decode([]byte) error { return fmt.Errorf("raw frames are only sent") }

// parseTag reads four tag characters.
func parseTag(text string) (wire.Tag, error) {
	if len(text) != 4 {
		return 0, fmt.Errorf("a tag has four characters, %q has %d", text, len(text))
	}
	return wire.Tag(binary.BigEndian.Uint32([]byte(text))), nil
}

// buildRaw makes the bytes of a send_raw step: {"hex"}, {"text"}, or
// {"tag", "body_hex", "length"}.
func buildRaw(object map[string]any) ([]byte, error) {
	if text, ok := object["text"].(string); ok {
		return []byte(text), nil
	}
	if _, ok := object["hex"]; ok {
		return asBytes(map[string]any{"hex": object["hex"]})
	}
	tagText, _ := object["tag"].(string)
	tag, err := parseTag(tagText)
	if err != nil {
		return nil, err
	}
	frame := rawFrame{tag: tag}
	if body, ok := object["body_hex"]; ok {
		if frame.body, err = asBytes(map[string]any{"hex": body}); err != nil {
			return nil, err
		}
	}
	if length, ok := object["length"]; ok {
		n, err := asUint(length, 32)
		if err != nil {
			return nil, err
		}
		length32 := uint32(n)
		frame.length = &length32
	}
	return frame.Encode(nil), nil
}

// frameValue decodes a frame a node sent into its object.
func frameValue(tag wire.Tag, body []byte) (map[string]any, error) {
	frame, err := wire.DecodeFrame(tag, body)
	if err != nil {
		return nil, err
	}
	object := map[string]any{"tag": tag.String()}
	switch f := frame.(type) {
	case *wire.HelloOK:
		object["version"], object["node_id"], object["session_id"] = uint64(f.Version), f.NodeID, f.SessionID
		object["session"], object["max_body_bytes"], object["server_version"] = uint64(f.Session), uint64(f.MaxBodyBytes), f.ServerVersion
	case *wire.DeclareOK:
		object["request_id"], object["created"] = f.RequestID, f.Created
	case *wire.DeclareOKMode:
		warnings := make([]any, len(f.Warnings))
		for i, w := range f.Warnings {
			warnings[i] = w
		}
		object["request_id"], object["created"], object["mode"] = f.RequestID, f.Created, uint64(f.Mode)
		object["policy"], object["warnings"] = f.Policy, warnings
	case *wire.Confirm:
		ranges := make([]any, len(f.Ranges))
		for i, r := range f.Ranges {
			ranges[i] = map[string]any{"first_seq": r.First, "last_seq": r.Last, "boundary": uint64(r.Boundary)}
		}
		object["ranges"] = ranges
	case *wire.ConfirmIdempotent:
		ranges := make([]any, len(f.Ranges))
		for i, r := range f.Ranges {
			ranges[i] = map[string]any{"first_seq": r.First, "last_seq": r.Last, "boundary": uint64(r.Boundary), "duplicate": r.Duplicate}
		}
		object["ranges"] = ranges
	case *wire.NegativeConfirm:
		ranges := make([]any, len(f.Ranges))
		for i, r := range f.Ranges {
			ranges[i] = map[string]any{"first_seq": r.First, "last_seq": r.Last, "code": uint64(r.Code), "message": r.Message}
		}
		object["ranges"] = ranges
	case *wire.SubscribeOK:
		object["request_id"], object["subscription_id"], object["prefetch"] = f.RequestID, f.SubscriptionID, uint64(f.Prefetch)
	case *wire.Deliver:
		deliveries := make([]any, len(f.Deliveries))
		for i := range f.Deliveries {
			deliveries[i] = deliveryValue(&f.Deliveries[i])
		}
		object["subscription_id"], object["deliveries"] = f.SubscriptionID, deliveries
	case *wire.SubscriptionEnded:
		object["subscription_id"], object["code"], object["message"] = f.SubscriptionID, uint64(f.Code), f.Message
	case *wire.QueueInfoReply:
		info, err := decodeMsgpack(msgpackField(body, 8))
		if err != nil {
			return nil, err
		}
		object["request_id"], object["info"] = f.RequestID, info
	case *wire.QueueList:
		queues, err := decodeMsgpack(msgpackField(body, 9))
		if err != nil {
			return nil, err
		}
		object["request_id"], object["more"], object["queues"] = f.RequestID, f.More, queues
	case *wire.OK:
		object["request_id"], object["count"] = f.RequestID, f.Count
	case *wire.Ping:
		object["request_id"] = f.RequestID
	case *wire.Pong:
		object["request_id"] = f.RequestID
	case *wire.ErrorFrame:
		object["request_id"], object["code"], object["message"] = f.RequestID, uint64(f.Code), f.Message
	case *wire.Redirect:
		object["request_id"], object["queue"], object["node_id"], object["address"] = f.RequestID, f.Queue, f.NodeID, f.Address
	default:
		return nil, fmt.Errorf("a node sent %s (%s), which only clients or nodes' peers send", tag, tag.Name())
	}
	return object, nil
}

// msgpackField returns the bytes field that starts at offset in body (the
// frame decoded already, so it is well formed).
func msgpackField(body []byte, offset int) []byte {
	n := binary.BigEndian.Uint32(body[offset:])
	return body[offset+4 : offset+4+int(n)]
}

func deliveryValue(d *wire.Delivery) map[string]any {
	headers := make([]any, len(d.Headers))
	for i, h := range d.Headers {
		headers[i] = []any{string(h.Key), string(h.Value)}
	}
	return map[string]any{"delivery_tag": d.DeliveryTag, "incarnation": d.Incarnation, "offset": d.Offset,
		"attempt": uint64(d.Attempt), "redelivered": d.Redelivered, "publish_unix_nanos": d.PublishUnixNanos,
		"message_id": string(d.MessageID), "headers": headers, "payload": string(d.Payload)}
}
