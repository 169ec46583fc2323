package wire

// Hand-made bad bodies, each naming the error and field a decoder must
// report, and the rules of codes and tags.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// body builds a body from hex pieces and raw strings: a piece that starts
// with "h:" is hex, anything else is copied as is.
func body(pieces ...string) []byte {
	var out []byte
	for _, piece := range pieces {
		if rest, ok := strings.CutPrefix(piece, "h:"); ok {
			decoded, err := hex.DecodeString(strings.ReplaceAll(rest, " ", ""))
			if err != nil {
				panic(err)
			}
			out = append(out, decoded...)
			continue
		}
		out = append(out, piece...)
	}
	return out
}

func TestDecodeRejectsBadBodies(t *testing.T) {
	cases := []struct {
		name  string
		tag   Tag
		body  []byte
		want  error
		field string
	}{
		{"empty ping", TagPing, nil, ErrTruncated, "request_id"},
		{"zero request id", TagPing, body("h:0000000000000000"), ErrMalformed, "request_id"},
		{"trailing byte", TagPing, body("h:0000000000000001 00"), ErrMalformed, ""},
		{"bool is 2", TagDeclareOK, body("h:0000000000000001 02"), ErrMalformed, "created"},
		{"string cut short", TagGetQueueInfo, body("h:0000000000000001 0005", "ord"), ErrTruncated, "queue"},
		{"invalid UTF-8", TagGetQueueInfo, body("h:0000000000000001 0002 c328"), ErrMalformed, "queue"},
		{"publish with no messages", TagPublish, body("h:0001", "q", "h:00000000"), ErrMalformed, "messages"},
		{"publish count beyond body", TagPublish, body("h:0001", "q", "h:ffffffff"), ErrTruncated, "messages"},
		{"publish seq zero", TagPublish, body("h:0001", "q", "h:00000001 0000000000000000 0000 0000 00000000"),
			ErrMalformed, "seq"},
		{"publish seq not increasing", TagPublish, body("h:0001", "q", "h:00000002",
			"h:0000000000000005 0000 0000 00000000", "h:0000000000000005 0000 0000 00000000"), ErrMalformed, "seq"},
		{"payload length beyond body", TagPublish, body("h:0001", "q", "h:00000001 0000000000000001 0000 0000 7fffffff"),
			ErrTruncated, "payload"},
		{"header count beyond body", TagPublish, body("h:0001", "q", "h:00000001 0000000000000001 0000 ffff 00000000"),
			ErrTruncated, "headers"},
		{"idempotent producer_seq without producer", TagPublishIdempotent, body("h:0001", "q", "h:0000 00000001",
			"h:0000000000000001 0000000000000007 0000 0000 00000000"), ErrMalformed, "producer_seq"},
		{"idempotent seq not increasing", TagPublishIdempotent, body("h:0001", "q", "h:0001", "p", "h:00000002",
			"h:0000000000000005 0000000000000001 0000 0000 00000000", "h:0000000000000005 0000000000000002 0000 0000 00000000"),
			ErrMalformed, "seq"},
		{"idempotent confirm duplicate is 2", TagConfirmIdempotent, body("h:00000001 0000000000000001 0000000000000001 02 02"),
			ErrMalformed, "duplicate"},
		{"confirm last below first", TagConfirm, body("h:00000001 0000000000000005 0000000000000004 02"),
			ErrMalformed, "last_seq"},
		{"confirm unknown boundary", TagConfirm, body("h:00000001 0000000000000001 0000000000000001 03"),
			ErrMalformed, "boundary"},
		{"deliver attempt zero", TagDeliver, body("h:0000000000000001 00000001 0000000000000001",
			"h:0000000000000000 0000000000000000 00000000 00 0000000000000000 0000 0000 00000000"), ErrMalformed, "attempt"},
		{"ack without tags", TagAck, body("h:0000000000000001 00000000"), ErrMalformed, "delivery_tags"},
		{"ack zero tag", TagAck, body("h:0000000000000001 00000001 0000000000000000"), ErrMalformed, "delivery_tag"},
		{"ack-sync zero request id", TagAckSync, body("h:0000000000000000 0000000000000001 00000001 0000000000000001"),
			ErrMalformed, "request_id"},
		{"ack-sync without tags", TagAckSync, body("h:0000000000000001 0000000000000001 00000000"), ErrMalformed, "delivery_tags"},
		{"hello without versions", TagHello, body("h:0000 0000 00000000 0000 00000000"), ErrMalformed, "versions"},
		{"hello-ok unknown session state", TagHelloOK, body("h:0001 0000 0000 07 00000000 0000"), ErrMalformed, "session"},
		{"declare mode 3", TagDeclare, body("h:0000000000000001 0001", "q", "h:00000000 03"), ErrMalformed, "mode"},
		{"declare mode 0", TagDeclare, body("h:0000000000000001 0001", "q", "h:00000000 00"), ErrMalformed, "mode"},
		{"declare two trailing bytes", TagDeclare, body("h:0000000000000001 0001", "q", "h:00000000 01 01"), ErrMalformed, ""},
		{"declare-ok-mode unset mode", TagDeclareOKMode, body("h:0000000000000001 01 00 0000 0000"), ErrMalformed, "mode"},
		{"progress-written not ahead", TagProgressWritten, body(
			"h:00000000000003e8 0000000000000001 0000000000000007 0000000000000064 0000000000000064"),
			ErrMalformed, "written_next"},
		{"progress zero instance", TagProgress, body(
			"h:00000000000003e8 0000000000000001 0000000000000000 0000000000000064"), ErrMalformed, "instance"},
		{"push zero partition", TagPush, body("h:0000000000000000 0000000000000001 0000000000000000",
			"h:0000000000000000 0000000000000000 00000000 00000000"), ErrMalformed, "partition"},
		{"push count without records", TagPush, body("h:00000000000003e8 0000000000000001 0000000000000000",
			"h:0000000000000000 0000000000000000 00000002 00000000"), ErrMalformed, "records"},
		{"push records without count", TagPush, body("h:00000000000003e8 0000000000000001 0000000000000000",
			"h:0000000000000000 0000000000000000 00000000 00000001 ff"), ErrMalformed, "records"},
		{"push-refused unknown reason", TagPushRefused, body("h:00000000000003e8 0000000000000001 0000000000000007 09",
			"h:0000000000000000 0000000000000000 0000 0000"), ErrMalformed, "reason"},
		{"push-refused history out of order", TagPushRefused, body("h:00000000000003e8 0000000000000001 0000000000000007 01",
			"h:0000000000000000 0000000000000000 0002 0000000000000002 0000000000000000 0000000000000001 0000000000000005 0000"),
			ErrMalformed, "history"},
		{"fetch zero records", TagFetch, body("h:0000000000000001 00000000000003e8 0000000000000001 0000000000000000",
			"h:00000000 00000001"), ErrMalformed, "max_records"},
		{"sealed first past end", TagSealed, body("h:0000000000000001 00000000000003e8 0000000000000002 0000000000000007",
			"h:0000000000000005 0000000000000006 0000"), ErrMalformed, "first_offset"},
		{"peer-hello short nonce", TagPeerHello, body("h:0001 0000000000000001 0001", "n", "h:0000000000000001 00000001 aa",
			"h:00000000"), ErrMalformed, "nonce"},
		{"peer-auth short proof", TagPeerAuth, body("h:00000002 aaaa"), ErrMalformed, "proof"},
		{"queue info not msgpack", TagQueueInfoReply, body("h:0000000000000001 00000001 c1"), ErrMalformed, "info"},
		{"queue info without name", TagQueueInfoReply, body("h:0000000000000001 00000001 80"), ErrMalformed, "info"},
		{"queue list entry without name", TagQueueList, body("h:0000000000000001 00 00000002 91 80"), ErrMalformed, "queues"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := NewFrame(c.tag).Decode(c.body)
			var frameErr *FrameError
			if !errors.Is(err, c.want) || !errors.As(err, &frameErr) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if frameErr.Field != c.field || frameErr.Tag != c.tag {
				t.Fatalf("error names field %q of %s, want %q of %s (%v)", frameErr.Field, frameErr.Tag, c.field, c.tag, err)
			}
		})
	}
}

// declareBody builds a declare body with a raw options value.
func declareBody(options []byte, mode ...byte) []byte {
	out := body("h:00000000000000070006", "orders")
	out = appendBytes(out, "options", options)
	return append(out, mode...)
}

func TestDeclareOptionsAreCheckedStrictly(t *testing.T) {
	mustMarshal := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bad := map[string][]byte{
		"unknown key":          mustMarshal(map[string]any{"lease_timeout": 5}),
		"wrong type":           mustMarshal(map[string]any{"lease_timeout_ms": "30s"}),
		"negative":             mustMarshal(map[string]any{"max_deliveries": -1}),
		"over u32":             mustMarshal(map[string]any{"lease_timeout_ms": uint64(1) << 32}),
		"unknown overflow":     mustMarshal(map[string]any{"overflow": "drop_newest"}),
		"not a map":            mustMarshal([]int{1, 2}),
		"repeated key":         body("h:82 a8", "replicas", "h:03 a8", "replicas", "h:05"),
		"trailing after map":   body("h:80 80"),
		"extension type":       body("h:81 a6", "policy", "h:d4 01 02"),
		"deeply nested":        append(append(body("h:81 a6", "policy"), bytes.Repeat([]byte{0x91}, 40)...), 0x80),
		"array beyond body":    body("h:81 a6", "policy", "h:dd ffffffff"),
		"string beyond body":   body("h:81 a6", "policy", "h:db 7fffffff"),
		"map key not a string": body("h:81 01 02"),
	}
	for name, options := range bad {
		t.Run(name, func(t *testing.T) {
			var declare Declare
			err := declare.Decode(declareBody(options, 2))
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("error %v, want ErrInvalidOptions", err)
			}
			if declare.RequestID != 7 || declare.Queue != "orders" || declare.Mode != ModeBuffered {
				t.Fatalf("request fields not decoded alongside the options error: %+v", declare)
			}
			if CodeFor(err) != CodeInvalidOptions {
				t.Fatalf("CodeFor = %s", CodeFor(err))
			}
		})
	}
	// Another msgpack implementation's encoding (wider integer formats,
	// different key order) is read the same as ours.
	var declare Declare
	other := mustMarshal(map[string]any{"replicas": uint64(3), "max_bytes": int64(1 << 40),
		"overflow": "drop_oldest", "lease_timeout_ms": int32(30000)})
	if err := declare.Decode(declareBody(other)); err != nil {
		t.Fatal(err)
	}
	want := QueueOptions{Replicas: 3, MaxBytes: 1 << 40, Overflow: OverflowDropOldest, LeaseTimeoutMs: 30000}
	if declare.Options != want || declare.Mode != ModeUnset {
		t.Fatalf("options %+v mode %v", declare.Options, declare.Mode)
	}
}

func TestQueueInfoReadsAsStandardMsgpack(t *testing.T) {
	info := QueueInfo{Name: "orders", Mode: ModeBuffered, Options: QueueOptions{MaxLength: 1000},
		Ready: 3, WrittenNext: 1 << 40, DurableNext: 7, LastSyncUnixMs: -5, SyncPending: true,
		Owner: "node-1", Epoch: 2, Replicas: []ReplicaInfo{{Node: "node-2", WrittenNext: 9, DurableNext: 8}}}
	encoded := info.appendMsgpack(nil)
	var generic map[string]any
	if err := msgpack.Unmarshal(encoded, &generic); err != nil {
		t.Fatal(err)
	}
	checks := map[string]any{"name": "orders", "mode": "buffered", "ready": int8(3),
		"written_next": uint64(1 << 40), "last_sync_unix_ms": int8(-5), "sync_pending": true, "owner": "node-1"}
	for key, want := range checks {
		if generic[key] != want {
			t.Errorf("key %s = %#v (%T), want %#v", key, generic[key], generic[key], want)
		}
	}
	if _, present := generic["policy"]; present {
		t.Errorf("empty optional key policy was written")
	}
	options, _ := generic["options"].(map[string]any)
	if options["max_length"] != uint16(1000) {
		t.Errorf("options %#v", generic["options"])
	}
	// A newer node's extra keys are skipped by readers.
	generic["future_key"] = []any{1, "x", map[string]any{"y": nil}}
	newer, err := msgpack.Marshal(generic)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := parseQueueInfo(newer)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Name != "orders" || parsed.WrittenNext != 1<<40 || len(parsed.Replicas) != 1 || parsed.LastSyncUnixMs != -5 {
		t.Fatalf("parsed %+v", parsed)
	}
}

func TestCodes(t *testing.T) {
	for _, code := range Codes() {
		if code.String() == "" || strings.HasPrefix(code.String(), "code_") || code.Meaning() == "" {
			t.Errorf("code %d lacks a name or meaning", code)
		}
		if code.ClosesConnection() != (code >= 100 && code < 200) {
			t.Errorf("code %s: closes %v", code, code.ClosesConnection())
		}
	}
	if Code(299).String() != "code_299" || Code(299).Retryable() || Code(150).ClosesConnection() != true {
		t.Errorf("unknown codes are not classified by range")
	}
	if !CodeNotOwner.Retryable() || CodeUnknownQueue.Retryable() || CodeModeConflict.ClosesConnection() {
		t.Errorf("retryable/closes table is wrong")
	}
	mapping := map[error]Code{
		&FrameError{Err: ErrTruncated}:      CodeMalformedFrame,
		&FrameError{Err: ErrMalformed}:      CodeMalformedFrame,
		&FrameError{Err: ErrFrameTooLarge}:  CodeFrameTooLarge,
		&FrameError{Err: ErrUnknownFrame}:   CodeUnknownFrame,
		&FrameError{Err: ErrInvalidOptions}: CodeInvalidOptions,
		errors.New("disk on fire"):          CodeInternal,
	}
	for err, want := range mapping {
		if got := CodeFor(err); got != want {
			t.Errorf("CodeFor(%v) = %s, want %s", err, got, want)
		}
	}
}

func TestUnknownTags(t *testing.T) {
	unknown := Tag('X'<<24 | 'Y'<<16 | 'Z'<<8 | '1')
	if unknown.Known() || NewFrame(unknown) != nil {
		t.Fatal("XYZ1 is known")
	}
	if _, err := DecodeFrame(unknown, nil); !errors.Is(err, ErrUnknownFrame) {
		t.Fatalf("DecodeFrame: %v", err)
	}
	answer := UnknownFrameError(unknown)
	if answer.Code != CodeUnknownFrame || answer.RequestID != 0 || !strings.Contains(answer.Message, `"XYZ1"`) {
		t.Fatalf("answer %+v", answer)
	}
	garbage := Tag(0x0001ff46)
	if garbage.String() != "0x0001ff46" || !strings.Contains(UnknownFrameError(garbage).Message, "0x0001ff46") {
		t.Fatalf("non-printable tag shown as %q", garbage.String())
	}
	for _, tag := range Tags() {
		if NewFrame(tag).Tag() != tag || tag.Version() < '1' || tag.Version() > '9' {
			t.Errorf("tag %s: frame reports %s", tag, NewFrame(tag).Tag())
		}
	}
}

func TestEncodeRefusesFieldsTooLong(t *testing.T) {
	long := strings.Repeat("x", MaxStringBytes+1)
	out, err := Append([]byte("keep"), &GetQueueInfo{RequestID: 1, Queue: long}, 0)
	var frameErr *FrameError
	if !errors.Is(err, ErrFieldTooLong) || !errors.As(err, &frameErr) || frameErr.Field != "queue" || string(out) != "keep" {
		t.Fatalf("Append: %v, %q", err, out)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Encode of a too-long field did not panic")
		}
	}()
	(&GetQueueInfo{RequestID: 1, Queue: long}).Encode(nil)
}

func TestEncodeRefusesListsOverTheirCaps(t *testing.T) {
	info := QueueInfo{Name: "q", Mode: ModeDurable, Replicas: make([]ReplicaInfo, MaxReplicas+1)}
	if _, err := Append(nil, &QueueInfoReply{RequestID: 1, Info: info}, 0); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("too many replicas: %v", err)
	}
	list := &QueueList{RequestID: 1, Queues: make([]QueueInfo, MaxQueueListEntries+1)}
	if _, err := Append(nil, list, 0); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("too many queues: %v", err)
	}
	info.Replicas = info.Replicas[:MaxReplicas]
	encoded, err := Append(nil, &QueueInfoReply{RequestID: 1, Info: info}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reply QueueInfoReply
	if err := reply.Decode(encoded[HeaderBytes:]); err != nil || len(reply.Info.Replicas) != MaxReplicas {
		t.Fatalf("at the cap: %v, %d replicas", err, len(reply.Info.Replicas))
	}
}

func TestErrorFrameFor(t *testing.T) {
	err := NewFrame(TagPing).Decode(nil)
	answer := ErrorFrameFor(0, err)
	if answer.Code != CodeMalformedFrame || !strings.Contains(answer.Message, "FPI1") {
		t.Fatalf("answer %+v", answer)
	}
	huge := ErrorFrameFor(3, errors.New(strings.Repeat("é", MaxStringBytes)))
	if len(huge.Message) > MaxStringBytes || !strings.HasSuffix(huge.Message, "é") {
		t.Fatalf("message not clipped at a character boundary: %d bytes", len(huge.Message))
	}
	if _, err := Append(nil, huge, 0); err != nil {
		t.Fatal(err)
	}
}
