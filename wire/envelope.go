// Envelope format. These layouts are part of the wire format: changing one
// breaks every client, so a new layout is always a new tag.
//
//	offset 0  tag          4 bytes, ASCII; the last byte is the layout version digit
//	offset 4  body length  u32 big-endian: the number of body bytes that follow
//	offset 8  body         body-length bytes, laid out as the tag says
//
// A reader checks the body length against its own limit before it reads or
// allocates the body. Every tag this package knows is listed in kinds below,
// with the side that sends it.
package wire

import "encoding/binary"

// HeaderBytes is the size of the envelope that precedes every body.
const HeaderBytes = 8

// DefaultMaxBodyBytes is the body size limit a peer enforces unless it is
// configured otherwise (16 MiB). The limit counts body bytes only, not the
// 8-byte envelope.
const DefaultMaxBodyBytes = 16 << 20

// MinMaxBodyBytes is the smallest body limit a peer may advertise in hello
// (0 there means DefaultMaxBodyBytes). Every frame a node sends, except a
// deliver of a message larger than the limit, can be made to fit it
// (FitFrame); a node refuses a smaller limit with protocol_violation.
const MinMaxBodyBytes = 4096

// ProtocolVersion is the newest protocol version this package speaks and
// MinProtocolVersion the oldest; hello negotiates the highest both sides
// speak. Version 2 is version 1 with redirects as FRD2 (with the owner's
// epoch) instead of FRD1. Version 3 is version 2 with the publish fence: a
// refused publish fences its queue on the connection until FRS1.
const (
	ProtocolVersion    uint16 = 3
	MinProtocolVersion uint16 = 1
)

// ChooseVersion returns the highest version of offered this package
// speaks, or 0 when there is none.
func ChooseVersion(offered []uint16) uint16 {
	chosen := uint16(0)
	for _, version := range offered {
		if version >= MinProtocolVersion && version <= ProtocolVersion && version > chosen {
			chosen = version
		}
	}
	return chosen
}

// Tag names a frame layout: four ASCII bytes read as one big-endian u32,
// whose last byte is the layout's version digit ("FQP1", "FQP2").
type Tag uint32

// Tags of every frame kind. Client frames are sent by clients to a node,
// server frames by a node to its clients, node frames between nodes.
const (
	TagHello         Tag = 'F'<<24 | 'H'<<16 | 'L'<<8 | '1' // FHL1 client
	TagHelloOK       Tag = 'F'<<24 | 'H'<<16 | 'O'<<8 | '1' // FHO1 server
	TagDeclare       Tag = 'F'<<24 | 'D'<<16 | 'C'<<8 | '1' // FDC1 client
	TagDeclareOK     Tag = 'F'<<24 | 'D'<<16 | 'K'<<8 | '1' // FDK1 server
	TagDeclareOKMode Tag = 'F'<<24 | 'D'<<16 | 'K'<<8 | '2' // FDK2 server
	TagPublish       Tag = 'F'<<24 | 'P'<<16 | 'B'<<8 | '1' // FPB1 client
	TagConfirm       Tag = 'F'<<24 | 'C'<<16 | 'F'<<8 | '1' // FCF1 server
	// FPB2 and FCF2: idempotent publish and its confirm (publish_idempotent.go).
	TagPublishIdempotent Tag = 'F'<<24 | 'P'<<16 | 'B'<<8 | '2' // FPB2 client
	TagConfirmIdempotent Tag = 'F'<<24 | 'C'<<16 | 'F'<<8 | '2' // FCF2 server
	TagNegativeConfirm   Tag = 'F'<<24 | 'N'<<16 | 'C'<<8 | '1' // FNC1 server
	TagResumePublishing  Tag = 'F'<<24 | 'R'<<16 | 'S'<<8 | '1' // FRS1 client, protocol 3
	TagSubscribe         Tag = 'F'<<24 | 'S'<<16 | 'B'<<8 | '1' // FSB1 client
	TagSubscribeOK       Tag = 'F'<<24 | 'S'<<16 | 'K'<<8 | '1' // FSK1 server
	TagDeliver           Tag = 'F'<<24 | 'D'<<16 | 'L'<<8 | '1' // FDL1 server
	TagAck               Tag = 'F'<<24 | 'A'<<16 | 'K'<<8 | '1' // FAK1 client
	TagAckSync           Tag = 'F'<<24 | 'A'<<16 | 'K'<<8 | '2' // FAK2 client
	TagNack              Tag = 'F'<<24 | 'N'<<16 | 'K'<<8 | '1' // FNK1 client
	TagRelease           Tag = 'F'<<24 | 'R'<<16 | 'L'<<8 | '1' // FRL1 client
	TagDiscard           Tag = 'F'<<24 | 'D'<<16 | 'S'<<8 | '1' // FDS1 client
	TagUnsubscribe       Tag = 'F'<<24 | 'U'<<16 | 'S'<<8 | '1' // FUS1 client
	TagGetQueueInfo      Tag = 'F'<<24 | 'I'<<16 | 'Q'<<8 | '1' // FIQ1 client
	TagQueueInfoReply    Tag = 'F'<<24 | 'I'<<16 | 'R'<<8 | '1' // FIR1 server
	TagListQueues        Tag = 'F'<<24 | 'L'<<16 | 'Q'<<8 | '1' // FLQ1 client
	TagQueueList         Tag = 'F'<<24 | 'L'<<16 | 'R'<<8 | '1' // FLR1 server
	TagDeleteQueue       Tag = 'F'<<24 | 'D'<<16 | 'Q'<<8 | '1' // FDQ1 client
	TagPurgeQueue        Tag = 'F'<<24 | 'P'<<16 | 'G'<<8 | '1' // FPG1 client
	TagOK                Tag = 'F'<<24 | 'O'<<16 | 'K'<<8 | '1' // FOK1 server
	TagPing              Tag = 'F'<<24 | 'P'<<16 | 'I'<<8 | '1' // FPI1 either
	TagPong              Tag = 'F'<<24 | 'P'<<16 | 'O'<<8 | '1' // FPO1 either
	TagError             Tag = 'F'<<24 | 'E'<<16 | 'R'<<8 | '1' // FER1 either
	TagRedirect          Tag = 'F'<<24 | 'R'<<16 | 'D'<<8 | '1' // FRD1 server
	TagRedirectEpoch     Tag = 'F'<<24 | 'R'<<16 | 'D'<<8 | '2' // FRD2 server, protocol 2
	TagChangeMode        Tag = 'F'<<24 | 'M'<<16 | 'C'<<8 | '1' // FMC1 client
	TagModeChanged       Tag = 'F'<<24 | 'M'<<16 | 'K'<<8 | '1' // FMK1 server
	TagPush              Tag = 'F'<<24 | 'Q'<<16 | 'R'<<8 | '1' // FQR1 node (owner to follower)
	TagProgress          Tag = 'F'<<24 | 'Q'<<16 | 'P'<<8 | '1' // FQP1 node (follower to owner)
	TagProgressWritten   Tag = 'F'<<24 | 'Q'<<16 | 'P'<<8 | '2' // FQP2 node (follower to owner)
	TagPushRefused       Tag = 'F'<<24 | 'Q'<<16 | 'N'<<8 | '1' // FQN1 node (follower to owner)
	TagFetch             Tag = 'F'<<24 | 'Q'<<16 | 'F'<<8 | '1' // FQF1 node (asks a source for records)
	TagPage              Tag = 'F'<<24 | 'Q'<<16 | 'G'<<8 | '1' // FQG1 node (answers a fetch)
	TagPageAfter         Tag = 'F'<<24 | 'Q'<<16 | 'G'<<8 | '2' // FQG2 node (answers a fetch, with the epoch of the record before)
	TagSeal              Tag = 'F'<<24 | 'Q'<<16 | 'S'<<8 | '1' // FQS1 node (recovery to a replica)
	TagSealed            Tag = 'F'<<24 | 'Q'<<16 | 'T'<<8 | '1' // FQT1 node (answers a seal)
	TagSealedVote        Tag = 'F'<<24 | 'Q'<<16 | 'T'<<8 | '2' // FQT2 node (answers a seal, saying whether the seal counts)
	TagSnapshotRequest   Tag = 'F'<<24 | 'Q'<<16 | 'H'<<8 | '1' // FQH1 node (asks a source for its snapshot)
	TagSnapshot          Tag = 'F'<<24 | 'Q'<<16 | 'I'<<8 | '1' // FQI1 node (answers a snapshot request)
	TagPeerHello         Tag = 'F'<<24 | 'X'<<16 | 'H'<<8 | '1' // FXH1 node (opens a peer link)
	TagPeerChallenge     Tag = 'F'<<24 | 'X'<<16 | 'C'<<8 | '1' // FXC1 node (answers a peer hello)
	TagPeerAuth          Tag = 'F'<<24 | 'X'<<16 | 'A'<<8 | '1' // FXA1 node (completes the handshake)
	TagMemberQuery       Tag = 'F'<<24 | 'X'<<16 | 'Q'<<8 | '1' // FXQ1 node (what is my replica id?)
	TagReplaceMember     Tag = 'F'<<24 | 'X'<<16 | 'R'<<8 | '1' // FXR1 node (replace my replica)
	TagMember            Tag = 'F'<<24 | 'X'<<16 | 'M'<<8 | '1' // FXM1 node (answers both)
)

// TagSubscriptionEnded names FSE1, the node's notice that it ended a
// subscription on its own (a server frame).
const TagSubscriptionEnded Tag = 'F'<<24 | 'S'<<16 | 'E'<<8 | '1'

// sender says which side of a connection may send a frame kind.
type sender uint8

const (
	sentByClient sender = iota + 1
	sentByServer
	sentByEither
	sentByNode
)

func (s sender) String() string {
	switch s {
	case sentByClient:
		return "client → node"
	case sentByServer:
		return "node → client"
	case sentByEither:
		return "either side"
	case sentByNode:
		return "node → node"
	}
	return "?"
}

// kind describes one frame kind: its tag, its name in docs and errors,
// who sends it and how to make an empty value of it.
type kind struct {
	tag      Tag
	name     string
	from     sender
	newFrame func() Frame
}

// kinds lists every frame kind, in the order the protocol document uses.
var kinds = []kind{
	{TagHello, "hello", sentByClient, func() Frame { return new(Hello) }},
	{TagHelloOK, "hello-ok", sentByServer, func() Frame { return new(HelloOK) }},
	{TagDeclare, "declare", sentByClient, func() Frame { return new(Declare) }},
	{TagDeclareOK, "declare-ok", sentByServer, func() Frame { return new(DeclareOK) }},
	{TagDeclareOKMode, "declare-ok-mode", sentByServer, func() Frame { return new(DeclareOKMode) }},
	{TagPublish, "publish", sentByClient, func() Frame { return new(Publish) }},
	{TagConfirm, "confirm", sentByServer, func() Frame { return new(Confirm) }},
	{TagPublishIdempotent, "publish-idempotent", sentByClient, func() Frame { return new(PublishIdempotent) }},
	{TagConfirmIdempotent, "confirm-idempotent", sentByServer, func() Frame { return new(ConfirmIdempotent) }},
	{TagNegativeConfirm, "negative-confirm", sentByServer, func() Frame { return new(NegativeConfirm) }},
	{TagResumePublishing, "resume-publishing", sentByClient, func() Frame { return new(ResumePublishing) }},
	{TagSubscribe, "subscribe", sentByClient, func() Frame { return new(Subscribe) }},
	{TagSubscribeOK, "subscribe-ok", sentByServer, func() Frame { return new(SubscribeOK) }},
	{TagDeliver, "deliver", sentByServer, func() Frame { return new(Deliver) }},
	{TagAck, "ack", sentByClient, func() Frame { return new(Ack) }},
	{TagAckSync, "ack-sync", sentByClient, func() Frame { return new(AckSync) }},
	{TagNack, "nack", sentByClient, func() Frame { return new(Nack) }},
	{TagRelease, "release", sentByClient, func() Frame { return new(Release) }},
	{TagDiscard, "discard", sentByClient, func() Frame { return new(Discard) }},
	{TagUnsubscribe, "unsubscribe", sentByClient, func() Frame { return new(Unsubscribe) }},
	{TagSubscriptionEnded, "subscription-ended", sentByServer, func() Frame { return new(SubscriptionEnded) }},
	{TagGetQueueInfo, "get-queue-info", sentByClient, func() Frame { return new(GetQueueInfo) }},
	{TagQueueInfoReply, "queue-info", sentByServer, func() Frame { return new(QueueInfoReply) }},
	{TagListQueues, "list-queues", sentByClient, func() Frame { return new(ListQueues) }},
	{TagQueueList, "queue-list", sentByServer, func() Frame { return new(QueueList) }},
	{TagDeleteQueue, "delete-queue", sentByClient, func() Frame { return new(DeleteQueue) }},
	{TagPurgeQueue, "purge-queue", sentByClient, func() Frame { return new(PurgeQueue) }},
	{TagChangeMode, "change-mode", sentByClient, func() Frame { return new(ChangeMode) }},
	{TagModeChanged, "mode-changed", sentByServer, func() Frame { return new(ModeChanged) }},
	{TagOK, "ok", sentByServer, func() Frame { return new(OK) }},
	{TagPing, "ping", sentByEither, func() Frame { return new(Ping) }},
	{TagPong, "pong", sentByEither, func() Frame { return new(Pong) }},
	{TagError, "error", sentByEither, func() Frame { return new(ErrorFrame) }},
	{TagRedirect, "redirect", sentByServer, func() Frame { return new(Redirect) }},
	{TagRedirectEpoch, "redirect-epoch", sentByServer, func() Frame { return new(RedirectEpoch) }},
	{TagPush, "push", sentByNode, func() Frame { return new(Push) }},
	{TagProgress, "progress", sentByNode, func() Frame { return new(Progress) }},
	{TagProgressWritten, "progress-written", sentByNode, func() Frame { return new(ProgressWritten) }},
	{TagPushRefused, "push-refused", sentByNode, func() Frame { return new(PushRefused) }},
	{TagFetch, "fetch", sentByNode, func() Frame { return new(Fetch) }},
	{TagPage, "page", sentByNode, func() Frame { return new(Page) }},
	{TagPageAfter, "page-after", sentByNode, func() Frame { return new(PageAfter) }},
	{TagSeal, "seal", sentByNode, func() Frame { return new(Seal) }},
	{TagSealed, "sealed", sentByNode, func() Frame { return new(Sealed) }},
	{TagSealedVote, "sealed-vote", sentByNode, func() Frame { return new(SealedVote) }},
	{TagSnapshotRequest, "snapshot-request", sentByNode, func() Frame { return new(SnapshotRequest) }},
	{TagSnapshot, "snapshot", sentByNode, func() Frame { return new(Snapshot) }},
	{TagPeerHello, "peer-hello", sentByNode, func() Frame { return new(PeerHello) }},
	{TagPeerChallenge, "peer-challenge", sentByNode, func() Frame { return new(PeerChallenge) }},
	{TagPeerAuth, "peer-auth", sentByNode, func() Frame { return new(PeerAuth) }},
	{TagMemberQuery, "member-query", sentByNode, func() Frame { return new(MemberQuery) }},
	{TagReplaceMember, "replace-member", sentByNode, func() Frame { return new(ReplaceMember) }},
	{TagMember, "member", sentByNode, func() Frame { return new(Member) }},
}

// kindByTag indexes kinds; it is built once and only read afterwards.
var kindByTag = func() map[Tag]*kind {
	index := make(map[Tag]*kind, len(kinds))
	for i := range kinds {
		index[kinds[i].tag] = &kinds[i]
	}
	return index
}()

// Tags returns every tag this package knows, in protocol-document order.
func Tags() []Tag {
	tags := make([]Tag, len(kinds))
	for i := range kinds {
		tags[i] = kinds[i].tag
	}
	return tags
}

// Known reports whether this package has a layout for the tag.
func (t Tag) Known() bool {
	_, ok := kindByTag[t]
	return ok
}

// ClientMaySend reports whether a client may send a frame of this kind:
// a client frame, or one either side sends (ping, pong, error). Server
// frames and node-to-node frames (replication, the peer handshake) are
// not, and neither is a tag this package does not know.
func (t Tag) ClientMaySend() bool {
	k, ok := kindByTag[t]
	return ok && (k.from == sentByClient || k.from == sentByEither)
}

// Name returns the frame kind's name ("publish"), or "unknown".
func (t Tag) Name() string {
	if k, ok := kindByTag[t]; ok {
		return k.name
	}
	if t == TagTraceFile {
		return "trace-file"
	}
	return "unknown"
}

// Version returns the tag's last byte, the layout version digit ('1', '2').
func (t Tag) Version() byte { return byte(t) }

// String returns the four tag characters when they are printable ASCII,
// and the tag in hex (0x00ff1234) otherwise, so a garbage tag never puts
// control bytes into a log line or an error message.
func (t Tag) String() string {
	var chars [4]byte
	binary.BigEndian.PutUint32(chars[:], uint32(t))
	for _, c := range chars {
		if c < 0x21 || c > 0x7e {
			const hexDigits = "0123456789abcdef"
			out := []byte("0x00000000")
			for i, c := range chars {
				out[2+2*i] = hexDigits[c>>4]
				out[3+2*i] = hexDigits[c&0x0f]
			}
			return string(out)
		}
	}
	return string(chars[:])
}

// NewFrame returns a new zero frame of the tag's kind, or nil when the tag
// is unknown.
func NewFrame(tag Tag) Frame {
	if k, ok := kindByTag[tag]; ok {
		return k.newFrame()
	}
	return nil
}

// DecodeFrame decodes a body into a new frame of the tag's kind. It
// allocates a frame per call; hot paths decode into a reused value of the
// concrete type instead. An unknown tag yields a *FrameError wrapping
// ErrUnknownFrame.
func DecodeFrame(tag Tag, body []byte) (Frame, error) {
	frame := NewFrame(tag)
	if frame == nil {
		return nil, &FrameError{Tag: tag, Err: ErrUnknownFrame}
	}
	if err := frame.Decode(body); err != nil {
		return nil, err
	}
	return frame, nil
}

// Frame is implemented by a pointer to every frame kind.
//
// Encode appends the whole frame (envelope and body) to dst and returns the
// extended slice; it allocates only when dst lacks capacity. It panics when
// a field cannot be represented (a string over MaxStringBytes, a list over
// its count width); Append and Writer.WriteFrame turn that into an error.
//
// Decode replaces the value with the frame decoded from body (the bytes
// after the envelope). It never panics; a bad body yields a *FrameError,
// after which the value's contents are unspecified (Declare documents one
// exception).
// []byte fields of the decoded value alias body, string fields are copies.
// Decoding into a value that was used before reuses its slices, so hot
// frames decode without allocating once the slices have grown.
type Frame interface {
	Tag() Tag
	Encode(dst []byte) []byte
	Decode(body []byte) error
}
