package wire

// The layout of every frame kind, written a second time as data: the
// protocol document's layout blocks are rendered from it, the golden
// vectors are annotated by walking it, and the property tests check that
// every encoded frame walks it exactly. A codec that drifts from the
// document therefore fails a test.

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

type fieldKind int

const (
	kindU8 fieldKind = iota
	kindU16
	kindU32
	kindU64
	kindI64
	kindBool
	kindString
	kindBytes
	kindHeaders
	kindMsgpack    // bytes holding one msgpack value
	kindList16     // u16 count, then count elements
	kindList32     // u32 count, then count elements
	kindOptionalU8 // one trailing byte, present or not
)

var kindNames = map[fieldKind]string{
	kindU8: "u8", kindU16: "u16", kindU32: "u32", kindU64: "u64", kindI64: "i64",
	kindBool: "bool", kindString: "string", kindBytes: "bytes", kindHeaders: "headers",
	kindMsgpack: "msgpack", kindList16: "list<u16>", kindList32: "list<u32>", kindOptionalU8: "u8?",
}

type field struct {
	name     string
	kind     fieldKind
	note     string
	elements []field // list element layout
}

func u8(name, note string) field           { return field{name: name, kind: kindU8, note: note} }
func u16(name, note string) field          { return field{name: name, kind: kindU16, note: note} }
func u32(name, note string) field          { return field{name: name, kind: kindU32, note: note} }
func u64(name, note string) field          { return field{name: name, kind: kindU64, note: note} }
func i64(name, note string) field          { return field{name: name, kind: kindI64, note: note} }
func boolean(name, note string) field      { return field{name: name, kind: kindBool, note: note} }
func str(name, note string) field          { return field{name: name, kind: kindString, note: note} }
func byteString(name, note string) field   { return field{name: name, kind: kindBytes, note: note} }
func headersField() field                  { return field{name: "headers", kind: kindHeaders} }
func msgpackField(name, note string) field { return field{name: name, kind: kindMsgpack, note: note} }
func optionalU8(name, note string) field   { return field{name: name, kind: kindOptionalU8, note: note} }
func list16(name, note string, elements ...field) field {
	return field{name: name, kind: kindList16, note: note, elements: elements}
}
func list32(name, note string, elements ...field) field {
	return field{name: name, kind: kindList32, note: note, elements: elements}
}

func requestID() field { return u64("request_id", "chosen by the client, not 0; echoed in the reply") }
func replyID() field   { return u64("request_id", "the request's id") }

var settleTags = list32("delivery_tags", "at least one", u64("delivery_tag", "from a deliver on this subscription; not 0"))

// peerIdentity is the identity part of the peer-link handshake frames.
func peerIdentity() []field {
	return []field{
		u16("version", "peer protocol version the sender speaks (1)"),
		u64("cluster_id", "the cluster's deployment id"),
		str("node_id", "the sender's node id; not empty"),
		u64("instance", "the sender's replica instance; not 0"),
		byteString("nonce", "16 random bytes, new for every link"),
		u32("max_body_bytes", "the largest body the sender accepts; 0 = 16 MiB"),
	}
}

// layouts holds every frame kind's body layout.
var layouts = map[Tag][]field{
	TagHello: {
		list16("versions", "at least one", u16("version", "a protocol version the client speaks")),
		str("client_name", "free text for logs"),
		byteString("auth_token", "empty when the node needs none"),
		str("previous_session", "session_id of an earlier hello-ok, or empty"),
		u32("max_body_bytes", "largest body the client accepts; 0 = 16 MiB"),
	},
	TagHelloOK: {
		u16("version", "chosen protocol version"),
		str("node_id", "the node serving this connection"),
		str("session_id", "opaque; name it in a later hello to resume"),
		u8("session", "0 = new, 1 = resumed after a node restart"),
		u32("max_body_bytes", "largest body the node accepts"),
		str("server_version", "for people"),
	},
	TagDeclare: {
		requestID(),
		str("queue", "queue name"),
		msgpackField("options", "msgpack map of set options; empty = none"),
		optionalU8("mode", "1 = durable, 2 = buffered; absent = not set"),
	},
	TagDeclareOK: {
		replyID(),
		boolean("created", "this declare created the queue"),
	},
	TagDeclareOKMode: {
		replyID(),
		boolean("created", "this declare created the queue"),
		u8("mode", "the queue's mode: 1 = durable, 2 = buffered"),
		str("policy", "effective replication policy; empty on one node"),
		list16("warnings", "may be empty", str("warning", "for people")),
	},
	TagPublish: {
		str("queue", "queue name"),
		list32("messages", "at least one",
			u64("seq", "not 0; increasing in the session"),
			str("message_id", "empty = the node assigns one"),
			headersField(),
			byteString("payload", "")),
	},
	TagConfirm: {
		list32("ranges", "at least one",
			u64("first_seq", "not 0"),
			u64("last_seq", ">= first_seq"),
			u8("boundary", "1 = written, 2 = durable")),
	},
	TagPublishIdempotent: {
		str("queue", "queue name"),
		str("producer_id", "the publisher's name; empty = none"),
		list32("messages", "at least one",
			u64("seq", "not 0; increasing in the session"),
			u64("producer_seq", "the publisher's number; 0 = none"),
			str("message_id", "empty = the node assigns one"),
			headersField(),
			byteString("payload", "")),
	},
	TagConfirmIdempotent: {
		list32("ranges", "at least one",
			u64("first_seq", "not 0"),
			u64("last_seq", ">= first_seq"),
			u8("boundary", "1 = written, 2 = durable"),
			boolean("duplicate", "1 = stored before; not stored again")),
	},
	TagNegativeConfirm: {
		list32("ranges", "at least one",
			u64("first_seq", "not 0"),
			u64("last_seq", ">= first_seq"),
			u16("code", "error code"),
			str("message", "for people")),
	},
	TagSubscribe: {
		requestID(),
		str("queue", "queue name"),
		u32("prefetch", "most unsettled deliveries; 0 = node default"),
	},
	TagSubscribeOK: {
		replyID(),
		u64("subscription_id", "not 0; named by delivers and settles"),
		u32("prefetch", "the prefetch in effect"),
	},
	TagDeliver: {
		u64("subscription_id", "not 0"),
		list32("deliveries", "at least one",
			u64("delivery_tag", "not 0; settles name it"),
			u64("incarnation", "the queue log's incarnation"),
			u64("offset", "the message's log offset"),
			u32("attempt", "not 0; 1 = first delivery"),
			boolean("redelivered", "may have been delivered before"),
			i64("publish_unix_nanos", "when the node accepted it"),
			str("message_id", "publisher's or node's id"),
			headersField(),
			byteString("payload", "")),
	},
	TagAck:     {u64("subscription_id", "not 0"), settleTags},
	TagRelease: {u64("subscription_id", "not 0"), settleTags},
	TagDiscard: {u64("subscription_id", "not 0"), settleTags},
	TagNack: {
		u64("subscription_id", "not 0"),
		boolean("requeue", "1 = ready again, 0 = dead-letter"),
		u32("delay_ms", "requeue delay; 0 = queue default"),
		settleTags,
	},
	TagAckSync: {
		requestID(),
		u64("subscription_id", "not 0"),
		settleTags,
	},
	TagUnsubscribe: {
		requestID(),
		u64("subscription_id", "not 0"),
	},
	TagSubscriptionEnded: {
		u64("subscription_id", "not 0; the subscription that ended"),
		u16("code", "error code: why it ended"),
		str("message", "for people"),
	},
	TagGetQueueInfo:     {requestID(), str("queue", "queue name")},
	TagResumePublishing: {str("queue", "queue name; its publish fence lifts")},
	TagQueueInfoReply: {
		replyID(),
		msgpackField("info", "msgpack map, see Queue info"),
	},
	TagListQueues: {
		requestID(),
		str("prefix", "names starting with this; empty = all"),
		str("after", "names after this one; empty = from the first"),
		u32("limit", "most entries; 0 = node default, max 1000"),
	},
	TagQueueList: {
		replyID(),
		boolean("more", "more names follow the last one listed"),
		msgpackField("queues", "msgpack array of queue info maps"),
	},
	TagDeleteQueue: {requestID(), str("queue", "queue name")},
	TagPurgeQueue:  {requestID(), str("queue", "queue name")},
	TagChangeMode: {
		requestID(),
		str("queue", "queue name"),
		u8("mode", "1 = durable, 2 = buffered"),
		u32("wait_ms", "longest the node holds the reply for the switch; 0 = answer at once"),
	},
	TagModeChanged: {
		replyID(),
		u8("outcome", "1 = applied, 2 = unchanged, 3 = pending"),
		u8("mode", "the mode asked for: 1 = durable, 2 = buffered"),
		u8("applied", "the mode in force when answering"),
		u64("revision", "the revision that sets the mode asked for; 0 = the declared mode"),
		str("message", "why it is still pending; for people"),
	},
	TagOK: {
		replyID(),
		u64("count", "deliveries released or messages removed"),
	},
	TagPing: {u64("request_id", "not 0; echoed by pong")},
	TagPong: {u64("request_id", "the ping's id")},
	TagError: {
		u64("request_id", "the failed request, or 0"),
		u16("code", "error code"),
		str("message", "for people"),
	},
	TagRedirect: {
		u64("request_id", "the redirected request, or 0"),
		str("queue", "the queue another node owns"),
		str("node_id", "the owner"),
		str("address", "host:port of its client listener"),
	},
	TagRedirectEpoch: {
		u64("request_id", "the redirected request, or 0"),
		str("queue", "the queue another node owns"),
		str("node_id", "the owner"),
		str("address", "host:port of its client listener"),
		u64("epoch", "the owner's epoch; 0 = not known"),
	},
	TagPush: {
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the owner's epoch; not 0"),
		u64("start_offset", "offset of the first record"),
		u64("previous_epoch", "epoch of the record at start_offset-1; 0 = none"),
		u64("committed_next", "the owner's quorum frontier at the queue's boundary"),
		u32("record_count", "records carried; 0 = keepalive"),
		byteString("records", "whole log records; empty iff record_count is 0"),
	},
	TagProgress: {
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the epoch of the pushes acknowledged; not 0"),
		u64("instance", "the follower's replica instance; not 0"),
		u64("durable_next", "offset after the last fsynced record"),
	},
	TagProgressWritten: {
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the epoch of the pushes acknowledged; not 0"),
		u64("instance", "the follower's replica instance; not 0"),
		u64("durable_next", "offset after the last fsynced record"),
		u64("written_next", "offset after the last written record; > durable_next"),
	},
	TagPushRefused: {
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the epoch the follower is sealed at"),
		u64("instance", "the follower's replica instance; not 0"),
		u8("reason", "1 offset, 2 epoch, 3 latched, 4 corrupt, 5 unknown, 6 behind"),
		u64("staged_next", "the follower's log end"),
		u64("durable_next", "the follower's durable end"),
		list16("history", "the log's epoch history, epochs and first offsets increasing",
			u64("epoch", "not 0"), u64("first_offset", "the epoch's first record")),
		str("message", "for people"),
	},
	TagFetch: {
		requestID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the asker's epoch; not 0"),
		u64("from_offset", "the first record wanted"),
		u32("max_records", "at most this many records; not 0"),
		u32("max_bytes", "at most this many record bytes (one record at least); not 0"),
	},
	TagPage: {
		replyID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("from_offset", "offset of the first record"),
		u64("first_offset", "the source's first retained offset"),
		u64("end_offset", "the source's log end"),
		u32("record_count", "records carried"),
		byteString("records", "whole log records; empty iff record_count is 0"),
	},
	TagPageAfter: {
		replyID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("from_offset", "offset of the first record"),
		u64("first_offset", "the source's first retained offset"),
		u64("end_offset", "the source's log end"),
		u32("record_count", "records carried"),
		byteString("records", "whole log records; empty iff record_count is 0"),
		u64("previous_epoch", "the epoch of the source's record before from_offset; 0 when there is none"),
	},
	TagSeal: {
		requestID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the epoch being recovered; not 0"),
		str("owner", "the node recovering it"),
	},
	TagSealed: {
		replyID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the epoch the replica is sealed at; not 0"),
		u64("instance", "the replica's instance; not 0"),
		u64("durable_next", "the log's end, all of it durable"),
		u64("first_offset", "the first retained offset; <= durable_next"),
		list16("history", "the log's epoch history, epochs and first offsets increasing",
			u64("epoch", "not 0"), u64("first_offset", "the epoch's first record")),
	},
	TagSealedVote: {
		replyID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the epoch the replica is sealed at; not 0"),
		u64("instance", "the replica's instance; not 0"),
		u64("durable_next", "the log's end, all of it durable"),
		u64("first_offset", "the first retained offset; <= durable_next"),
		list16("history", "the log's epoch history, epochs and first offsets increasing",
			u64("epoch", "not 0"), u64("first_offset", "the epoch's first record")),
		boolean("incomplete", "the copy opened empty and has not caught up since: its seal does not count"),
	},
	TagSnapshotRequest: {
		requestID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("epoch", "the asker's epoch; not 0"),
	},
	TagSnapshot: {
		replyID(),
		u64("partition", "the partition's coordination shard id; not 0"),
		u64("first_offset", "the source's first retained offset"),
		list16("history", "the source log's epoch history, epochs and first offsets increasing",
			u64("epoch", "not 0"), u64("first_offset", "the epoch's first record")),
		byteString("snapshot", "the source's newest published snapshot file, checksum included; not empty"),
	},
	TagPeerHello:     peerIdentity(),
	TagPeerChallenge: append(peerIdentity(), byteString("proof", "32 bytes: HMAC-SHA-256 of the handshake (acceptor label)")),
	TagPeerAuth: {
		byteString("proof", "32 bytes: HMAC-SHA-256 of the handshake (dialer label)"),
	},
	TagMemberQuery: {
		requestID(),
		str("node_id", "the node asked about (the asker)"),
	},
	TagReplaceMember: {
		requestID(),
		str("node_id", "the node whose replica is replaced (the asker)"),
		u64("replica_id", "its new Raft replica id; not 0"),
	},
	TagMember: {
		replyID(),
		boolean("initialized", "the answering node's catalog is initialised"),
		u64("replica_id", "the node's replica id in that catalog; 0 = unknown"),
	},
}

// renderLayout renders a frame kind's layout as the protocol document shows it.
func renderLayout(tag Tag) string {
	k := kindByTag[tag]
	var out strings.Builder
	fmt.Fprintf(&out, "%s %s (%s)\n", tag, k.name, k.from)
	renderFields(&out, layouts[tag], 1)
	return out.String()
}

func renderFields(out *strings.Builder, fields []field, depth int) {
	for _, f := range fields {
		name := strings.Repeat("  ", depth) + f.name
		line := fmt.Sprintf("%-24s %-10s %s", name, kindNames[f.kind], f.note)
		out.WriteString(strings.TrimRight(line, " ") + "\n")
		if f.elements != nil {
			renderFields(out, f.elements, depth+1)
		}
	}
}

// annotator walks a frame's bytes along its layout and writes an annotated
// hex dump: one line per field, the bytes in hex, then a comment.
type annotator struct {
	body  []byte
	off   int
	lines []string
	err   error
}

func (a *annotator) emit(raw []byte, depth int, comment string) {
	if len(raw) == 0 {
		a.lines = append(a.lines, fmt.Sprintf("%-40s # %s%s", "", strings.Repeat("  ", depth), comment))
		return
	}
	for start := 0; start < len(raw); start += 16 {
		end := min(start+16, len(raw))
		text := hex.EncodeToString(raw[start:end])
		if start == 0 {
			a.lines = append(a.lines, fmt.Sprintf("%-40s # %s%s", text, strings.Repeat("  ", depth), comment))
		} else {
			a.lines = append(a.lines, text)
		}
	}
}

func (a *annotator) take(n int, name string) []byte {
	if a.err != nil {
		return nil
	}
	if len(a.body)-a.off < n {
		a.err = fmt.Errorf("field %s at %d: needs %d bytes, %d remain", name, a.off, n, len(a.body)-a.off)
		return nil
	}
	raw := a.body[a.off : a.off+n]
	a.off += n
	return raw
}

func (a *annotator) walk(fields []field, depth int) {
	for _, f := range fields {
		if a.err != nil {
			return
		}
		a.walkField(f, depth)
	}
}

func (a *annotator) walkField(f field, depth int) {
	widths := map[fieldKind]int{kindU8: 1, kindBool: 1, kindU16: 2, kindU32: 4, kindU64: 8, kindI64: 8}
	switch f.kind {
	case kindU8, kindBool, kindU16, kindU32, kindU64, kindI64:
		raw := a.take(widths[f.kind], f.name)
		if a.err == nil {
			a.emit(raw, depth, fmt.Sprintf("%s: %s", f.name, scalarText(f.kind, raw)))
		}
	case kindOptionalU8:
		if a.off == len(a.body) {
			a.emit(nil, depth, f.name+": absent")
			return
		}
		raw := a.take(1, f.name)
		a.emit(raw, depth, fmt.Sprintf("%s: %d", f.name, raw[0]))
	case kindString:
		a.walkString(f.name, depth)
	case kindBytes, kindMsgpack:
		a.walkBytes(f, depth)
	case kindHeaders:
		raw := a.take(2, f.name)
		if a.err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(raw))
		a.emit(raw, depth, fmt.Sprintf("headers: %d", n))
		for i := 0; i < n && a.err == nil; i++ {
			a.walkString("key", depth+1)
			a.walkBytes(byteString("value", ""), depth+1)
		}
	case kindList16, kindList32:
		width := map[fieldKind]int{kindList16: 2, kindList32: 4}[f.kind]
		raw := a.take(width, f.name)
		if a.err != nil {
			return
		}
		n := int(beUint(raw))
		a.emit(raw, depth, fmt.Sprintf("%s: %d", f.name, n))
		for i := 0; i < n && a.err == nil; i++ {
			if len(f.elements) > 1 {
				a.emit(nil, depth+1, fmt.Sprintf("%s[%d]", f.name, i))
			}
			a.walk(f.elements, depth+1)
		}
	}
}

func (a *annotator) walkString(name string, depth int) {
	prefix := a.take(2, name)
	if a.err != nil {
		return
	}
	content := a.take(int(binary.BigEndian.Uint16(prefix)), name)
	if a.err != nil {
		return
	}
	if !utf8.Valid(content) {
		a.err = fmt.Errorf("field %s: invalid UTF-8", name)
		return
	}
	comment := fmt.Sprintf("%s: string %q", name, content)
	if len(content) <= 16 {
		// Length and content on one line, a space between them.
		text := hex.EncodeToString(prefix) + " " + hex.EncodeToString(content)
		a.lines = append(a.lines, fmt.Sprintf("%-40s # %s%s", text, strings.Repeat("  ", depth), comment))
		return
	}
	a.emit(prefix, depth, fmt.Sprintf("%s: string, %d bytes", name, len(content)))
	a.emit(content, depth+1, fmt.Sprintf("%q", content))
}

func (a *annotator) walkBytes(f field, depth int) {
	prefix := a.take(4, f.name)
	if a.err != nil {
		return
	}
	content := a.take(int(binary.BigEndian.Uint32(prefix)), f.name)
	if a.err != nil {
		return
	}
	comment := fmt.Sprintf("%s: bytes, %d", f.name, len(content))
	if f.kind == kindMsgpack && len(content) > 0 {
		comment = fmt.Sprintf("%s: msgpack, %d bytes (shown as JSON, keys sorted)", f.name, len(content))
	}
	a.emit(prefix, depth, comment)
	if len(content) == 0 {
		return
	}
	text := fmt.Sprintf("%q", content)
	if f.kind == kindMsgpack {
		text = msgpackText(content)
	}
	a.emit(content, depth+1, text)
}

func scalarText(kind fieldKind, raw []byte) string {
	switch kind {
	case kindBool:
		return fmt.Sprintf("%v", raw[0] == 1)
	case kindI64:
		return fmt.Sprintf("%d", int64(beUint(raw)))
	}
	return fmt.Sprintf("%d", beUint(raw))
}

func beUint(raw []byte) uint64 {
	var value uint64
	for _, b := range raw {
		value = value<<8 | uint64(b)
	}
	return value
}

// msgpackText renders a msgpack value as JSON with sorted keys, decoded by
// an independent msgpack implementation.
func msgpackText(content []byte) string {
	var value any
	if err := msgpack.Unmarshal(content, &value); err != nil {
		return "undecodable msgpack: " + err.Error()
	}
	text, err := json.Marshal(value)
	if err != nil {
		return fmt.Sprintf("%v", value)
	}
	return string(text)
}

// annotateFrame returns the annotated dump of a whole frame, or an error
// when the bytes do not walk the documented layout exactly.
func annotateFrame(frame []byte) ([]string, error) {
	if len(frame) < HeaderBytes {
		return nil, fmt.Errorf("frame shorter than the envelope")
	}
	tag := Tag(binary.BigEndian.Uint32(frame))
	fields, ok := layouts[tag]
	if !ok {
		return nil, fmt.Errorf("no layout for %s", tag)
	}
	a := &annotator{body: frame[HeaderBytes:]}
	a.emit(frame[:4], 0, fmt.Sprintf("tag %q (%s)", tag.String(), tag.Name()))
	a.emit(frame[4:8], 0, fmt.Sprintf("body length %d", binary.BigEndian.Uint32(frame[4:])))
	if int(binary.BigEndian.Uint32(frame[4:])) != len(a.body) {
		return nil, fmt.Errorf("body length field %d, body %d bytes", binary.BigEndian.Uint32(frame[4:]), len(a.body))
	}
	a.walk(fields, 0)
	if a.err != nil {
		return nil, a.err
	}
	if a.off != len(a.body) {
		return nil, fmt.Errorf("layout ended at %d of %d body bytes", a.off, len(a.body))
	}
	return a.lines, nil
}
