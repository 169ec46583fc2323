package wire

// Round-trip property tests over seeded random frames of every kind.
// The seed is printed on failure; set FIBRIL_SEED to replay one.

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// testSeed returns FIBRIL_SEED or a time-based seed, and logs it if the
// test fails.
func testSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if text := os.Getenv("FIBRIL_SEED"); text != "" {
		parsed, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			t.Fatalf("FIBRIL_SEED: %v", err)
		}
		seed = parsed
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d; replay with FIBRIL_SEED=%d", seed, seed)
		}
	})
	return seed
}

// generator makes random valid frames.
type generator struct{ rng *rand.Rand }

var textPieces = []string{"a", "b", "z", "0", "-", ".", "_", "é", "ß", "漢", "🙂", " "}

func (g *generator) text(maxPieces int) string {
	n := g.rng.Intn(maxPieces + 1)
	var out []byte
	for i := 0; i < n; i++ {
		out = append(out, textPieces[g.rng.Intn(len(textPieces))]...)
	}
	return string(out)
}

func (g *generator) nonEmptyText(maxPieces int) string {
	for {
		if text := g.text(maxPieces); text != "" {
			return text
		}
	}
}

// blob returns random bytes, nil when empty (what a decoder returns).
func (g *generator) blob(maxBytes int) []byte {
	n := g.rng.Intn(maxBytes + 1)
	if g.rng.Intn(50) == 0 {
		n = 4096 + g.rng.Intn(4096)
	}
	if n == 0 {
		return nil
	}
	out := make([]byte, n)
	g.rng.Read(out)
	return out
}

// textBytes returns random UTF-8 as bytes, nil when empty.
func (g *generator) textBytes(maxPieces int) []byte {
	if text := g.text(maxPieces); text != "" {
		return []byte(text)
	}
	return nil
}

func (g *generator) id() uint64 {
	if g.rng.Intn(4) == 0 {
		return 1 + uint64(g.rng.Intn(10))
	}
	return 1 + g.rng.Uint64()%(1<<63)
}

func (g *generator) u64() uint64 {
	if g.rng.Intn(3) == 0 {
		return uint64(g.rng.Intn(3))
	}
	return g.rng.Uint64()
}

func (g *generator) count(maxCount int) int { return g.rng.Intn(maxCount + 1) }

func (g *generator) headers() []Header {
	n := g.count(3)
	if n == 0 {
		return nil
	}
	headers := make([]Header, n)
	for i := range headers {
		headers[i] = Header{Key: g.textBytes(6), Value: g.blob(12)}
	}
	return headers
}

func (g *generator) tags() []uint64 {
	tags := make([]uint64, 1+g.count(20))
	for i := range tags {
		tags[i] = g.id()
	}
	return tags
}

func (g *generator) mode() Mode { return Mode(1 + g.rng.Intn(2)) }

func (g *generator) options() QueueOptions {
	if g.rng.Intn(3) == 0 {
		return QueueOptions{}
	}
	pick := func(v uint64) uint64 {
		if g.rng.Intn(2) == 0 {
			return 0
		}
		return v
	}
	overflow := []Overflow{"", OverflowRejectNew, OverflowDropOldest}[g.rng.Intn(3)]
	return QueueOptions{
		LeaseTimeoutMs: uint32(pick(uint64(g.rng.Uint32()))), MaxDeliveries: uint32(pick(uint64(g.rng.Intn(100)))),
		DeadLetterQueue: g.text(4), MessageTTLMs: pick(g.rng.Uint64()), MaxLength: pick(g.u64()),
		MaxBytes: pick(g.u64()), Overflow: overflow, RedeliveryDelayMs: uint32(pick(uint64(g.rng.Uint32()))),
		Policy: g.text(3), Replicas: uint32(pick(uint64(g.rng.Intn(6)))),
		Dedup: g.rng.Intn(2) == 0, DedupWindowMs: uint32(pick(uint64(g.rng.Uint32()))),
		DedupMaxEntries: uint32(pick(uint64(g.rng.Uint32()))),
	}
}

func (g *generator) queueInfo() QueueInfo {
	info := QueueInfo{
		Name: g.nonEmptyText(6), Mode: g.mode(), Policy: g.text(3), Options: g.options(),
		Ready: g.u64(), Leased: g.u64(), Delayed: g.u64(), DeadLettered: g.u64(), Consumers: g.rng.Uint32(),
		WrittenNext: g.u64(), DurableNext: g.u64(), UnsyncedRecords: g.u64(), UnsyncedBytes: g.u64(),
		LastSyncUnixMs: int64(g.u64()), SyncIntervalMs: g.rng.Uint32(), SyncPending: g.rng.Intn(2) == 0,
		LastSyncError: g.text(3), Fenced: g.rng.Intn(2) == 0, FenceError: g.text(3),
		Owner: g.text(2), Epoch: g.u64(),
	}
	for i := g.count(3); i > 0; i-- {
		replica := ReplicaInfo{Node: g.text(3), WrittenNext: g.u64(), DurableNext: g.u64()}
		if g.rng.Intn(2) == 0 {
			replica.AppliedMode, replica.ModeRevision = g.mode(), g.u64()
		}
		info.Replicas = append(info.Replicas, replica)
	}
	if g.rng.Intn(2) == 0 {
		info.DesiredMode = 3 - info.Mode // the other mode; the same one is not written
		info.ModeRevision = g.u64()
		info.ModeChange = &ModeChangeInfo{Revision: g.u64(), Mode: info.DesiredMode, Offset: g.u64(),
			State: g.text(3), Reason: g.text(5), SinceUnixMs: int64(g.u64())}
	}
	if g.rng.Intn(2) == 0 {
		info.Dedup = &DedupStats{Entries: g.u64(), EvictedEarly: g.u64(), OldestUnixMs: int64(g.u64()), Refused: g.u64()}
	}
	return info
}

func (g *generator) sequenceRange() (uint64, uint64) {
	first := g.id()
	last := first + uint64(g.rng.Intn(5))
	if last < first {
		last = first
	}
	return first, last
}

// frame returns a random valid frame of the tag's kind.
func (g *generator) frame(tag Tag) Frame {
	switch tag {
	case TagHello:
		versions := make([]uint16, 1+g.count(3))
		for i := range versions {
			versions[i] = uint16(g.rng.Intn(65536))
		}
		return &Hello{Versions: versions, ClientName: g.text(5), AuthToken: g.blob(20),
			PreviousSession: g.text(4), MaxBodyBytes: g.rng.Uint32()}
	case TagHelloOK:
		return &HelloOK{Version: uint16(g.rng.Intn(65536)), NodeID: g.text(3), SessionID: g.text(4),
			Session: SessionState(g.rng.Intn(2)), MaxBodyBytes: g.rng.Uint32(), ServerVersion: g.text(4)}
	case TagDeclare:
		mode := Mode(g.rng.Intn(3))
		return &Declare{RequestID: g.id(), Queue: g.text(5), Options: g.options(), Mode: mode}
	case TagDeclareOK:
		return &DeclareOK{RequestID: g.id(), Created: g.rng.Intn(2) == 0}
	case TagDeclareOKMode:
		var warnings []string
		for i := g.count(2); i > 0; i-- {
			warnings = append(warnings, g.text(8))
		}
		return &DeclareOKMode{RequestID: g.id(), Created: g.rng.Intn(2) == 0, Mode: g.mode(),
			Policy: g.text(3), Warnings: warnings}
	case TagPublish:
		return g.publish()
	case TagPublishIdempotent:
		return g.publishIdempotent()
	case TagConfirmIdempotent:
		ranges := make([]IdempotentRange, 1+g.count(5))
		for i := range ranges {
			ranges[i].First, ranges[i].Last = g.sequenceRange()
			ranges[i].Boundary = Boundary(1 + g.rng.Intn(2))
			ranges[i].Duplicate = g.rng.Intn(2) == 0
		}
		return &ConfirmIdempotent{Ranges: ranges}
	case TagConfirm:
		ranges := make([]ConfirmRange, 1+g.count(5))
		for i := range ranges {
			ranges[i].First, ranges[i].Last = g.sequenceRange()
			ranges[i].Boundary = Boundary(1 + g.rng.Intn(2))
		}
		return &Confirm{Ranges: ranges}
	case TagNegativeConfirm:
		ranges := make([]RejectRange, 1+g.count(3))
		for i := range ranges {
			ranges[i].First, ranges[i].Last = g.sequenceRange()
			ranges[i].Code, ranges[i].Message = Code(g.rng.Intn(65536)), g.text(6)
		}
		return &NegativeConfirm{Ranges: ranges}
	case TagSubscribe:
		return &Subscribe{RequestID: g.id(), Queue: g.text(5), Prefetch: g.rng.Uint32()}
	case TagSubscribeOK:
		return &SubscribeOK{RequestID: g.id(), SubscriptionID: g.id(), Prefetch: g.rng.Uint32()}
	case TagDeliver:
		return g.deliver()
	case TagAck:
		return &Ack{Settle{SubscriptionID: g.id(), DeliveryTags: g.tags()}}
	case TagAckSync:
		return &AckSync{RequestID: g.id(), Settle: Settle{SubscriptionID: g.id(), DeliveryTags: g.tags()}}
	case TagRelease:
		return &Release{Settle{SubscriptionID: g.id(), DeliveryTags: g.tags()}}
	case TagDiscard:
		return &Discard{Settle{SubscriptionID: g.id(), DeliveryTags: g.tags()}}
	case TagNack:
		return &Nack{SubscriptionID: g.id(), Requeue: g.rng.Intn(2) == 0, DelayMs: g.rng.Uint32(), DeliveryTags: g.tags()}
	case TagUnsubscribe:
		return &Unsubscribe{RequestID: g.id(), SubscriptionID: g.id()}
	case TagSubscriptionEnded:
		return &SubscriptionEnded{SubscriptionID: g.id(), Code: Code(g.rng.Intn(65536)), Message: g.text(10)}
	case TagResumePublishing:
		return &ResumePublishing{Queue: g.text(5)}
	case TagGetQueueInfo:
		return &GetQueueInfo{RequestID: g.id(), Queue: g.text(5)}
	case TagQueueInfoReply:
		return &QueueInfoReply{RequestID: g.id(), Info: g.queueInfo()}
	case TagListQueues:
		return &ListQueues{RequestID: g.id(), Prefix: g.text(3), After: g.text(3), Limit: g.rng.Uint32()}
	case TagQueueList:
		list := &QueueList{RequestID: g.id(), More: g.rng.Intn(2) == 0}
		for i := g.count(3); i > 0; i-- {
			list.Queues = append(list.Queues, g.queueInfo())
		}
		return list
	case TagDeleteQueue:
		return &DeleteQueue{RequestID: g.id(), Queue: g.text(5)}
	case TagPurgeQueue:
		return &PurgeQueue{RequestID: g.id(), Queue: g.text(5)}
	case TagChangeMode:
		return &ChangeMode{RequestID: g.id(), Queue: g.text(5), Mode: g.mode(), WaitMs: g.rng.Uint32()}
	case TagModeChanged:
		return &ModeChanged{RequestID: g.id(), Outcome: ModeOutcome(1 + g.rng.Intn(3)), Mode: g.mode(),
			Applied: g.mode(), Revision: g.u64(), Message: g.text(6)}
	case TagOK:
		return &OK{RequestID: g.id(), Count: g.u64()}
	case TagPing:
		return &Ping{RequestID: g.id()}
	case TagPong:
		return &Pong{RequestID: g.id()}
	case TagError:
		return &ErrorFrame{RequestID: g.u64(), Code: Code(g.rng.Intn(65536)), Message: g.text(10)}
	case TagRedirect:
		return &Redirect{RequestID: g.u64(), Queue: g.text(4), NodeID: g.text(2), Address: g.text(4)}
	case TagRedirectEpoch:
		return &RedirectEpoch{Redirect: Redirect{RequestID: g.u64(), Queue: g.text(4), NodeID: g.text(2), Address: g.text(4)},
			Epoch: g.u64()}
	case TagPush:
		records := g.blob(64)
		count := uint32(0)
		if records != nil {
			count = 1 + g.rng.Uint32()%1000
		}
		return &Push{Partition: g.id(), Epoch: g.id(), StartOffset: g.u64(), PreviousEpoch: g.u64(),
			CommittedNext: g.u64(), RecordCount: count, Records: records}
	case TagProgress:
		return &Progress{Partition: g.id(), Epoch: g.id(), Instance: g.id(), DurableNext: g.u64()}
	case TagProgressWritten:
		durable := g.u64() % (1 << 62)
		return &ProgressWritten{Partition: g.id(), Epoch: g.id(), Instance: g.id(), DurableNext: durable,
			WrittenNext: durable + 1 + uint64(g.rng.Intn(1000))}
	case TagPushRefused:
		return &PushRefused{Partition: g.id(), Epoch: g.u64(), Instance: g.id(),
			Reason: RefusalReason(1 + g.rng.Intn(int(RefusedBehind))), StagedNext: g.u64(), DurableNext: g.u64(),
			History: g.history(), Message: g.text(6)}
	case TagFetch:
		return &Fetch{RequestID: g.id(), Partition: g.id(), Epoch: g.id(), FromOffset: g.u64(),
			MaxRecords: 1 + g.rng.Uint32()%4096, MaxBytes: 1 + g.rng.Uint32()}
	case TagPage:
		records := g.blob(64)
		count := uint32(0)
		if records != nil {
			count = 1 + g.rng.Uint32()%4096
		}
		return &Page{RequestID: g.id(), Partition: g.id(), FromOffset: g.u64(), FirstOffset: g.u64(),
			EndOffset: g.u64(), RecordCount: count, Records: records}
	case TagPageAfter:
		page := g.frame(TagPage).(*Page)
		return &PageAfter{Page: *page, PreviousEpoch: g.u64()}
	case TagSealedVote:
		sealed := g.frame(TagSealed).(*Sealed)
		return &SealedVote{Sealed: *sealed, Incomplete: g.rng.Intn(2) == 0}
	case TagSnapshotRequest:
		return &SnapshotRequest{RequestID: g.id(), Partition: g.id(), Epoch: g.id()}
	case TagSnapshot:
		snapshot := g.blob(64)
		if snapshot == nil {
			snapshot = []byte{0}
		}
		return &Snapshot{RequestID: g.id(), Partition: g.id(), FirstOffset: g.u64(), History: g.history(), Snapshot: snapshot}
	case TagSeal:
		return &Seal{RequestID: g.id(), Partition: g.id(), Epoch: g.id(), Owner: g.text(2)}
	case TagSealed:
		durable := g.u64()
		return &Sealed{RequestID: g.id(), Partition: g.id(), Epoch: g.id(), Instance: g.id(), DurableNext: durable,
			FirstOffset: durable / uint64(1+g.rng.Intn(4)), History: g.history()}
	case TagPeerHello:
		hello := g.peerHello()
		return &hello
	case TagPeerChallenge:
		return &PeerChallenge{PeerHello: g.peerHello(), Proof: g.fixedBytes(PeerProofBytes)}
	case TagPeerAuth:
		return &PeerAuth{Proof: g.fixedBytes(PeerProofBytes)}
	case TagMemberQuery:
		return &MemberQuery{RequestID: g.id(), NodeID: g.text(2)}
	case TagReplaceMember:
		return &ReplaceMember{RequestID: g.id(), NodeID: g.text(2), ReplicaID: g.id()}
	case TagMember:
		return &Member{RequestID: g.id(), Initialized: g.rng.Intn(2) == 0, ReplicaID: g.u64()}
	}
	panic("no generator for " + tag.String())
}

func (g *generator) publish() *Publish {
	messages := make([]PublishMessage, 1+g.count(4))
	seq := uint64(g.rng.Intn(1000))
	for i := range messages {
		seq += 1 + uint64(g.rng.Intn(3))
		messages[i] = PublishMessage{Seq: seq, MessageID: g.textBytes(4), Headers: g.headers(), Payload: g.blob(64)}
	}
	return &Publish{Queue: g.textBytes(5), Messages: messages}
}

func (g *generator) publishIdempotent() *PublishIdempotent {
	frame := &PublishIdempotent{Queue: g.textBytes(5), ProducerID: g.textBytes(6)}
	seq := uint64(g.rng.Intn(1000))
	for range 1 + g.count(4) {
		seq += 1 + uint64(g.rng.Intn(3))
		var producerSeq uint64
		if len(frame.ProducerID) > 0 && g.rng.Intn(4) > 0 {
			producerSeq = g.u64()
		}
		frame.Messages = append(frame.Messages, PublishMessage{Seq: seq, ProducerSeq: producerSeq,
			MessageID: g.textBytes(4), Headers: g.headers(), Payload: g.blob(64)})
	}
	return frame
}

func (g *generator) deliver() *Deliver {
	deliveries := make([]Delivery, 1+g.count(4))
	for i := range deliveries {
		deliveries[i] = Delivery{DeliveryTag: g.id(), Incarnation: g.u64(), Offset: g.u64(),
			Attempt: 1 + uint32(g.rng.Intn(10)), Redelivered: g.rng.Intn(2) == 0,
			PublishUnixNanos: int64(g.u64()), MessageID: g.textBytes(4), Headers: g.headers(), Payload: g.blob(64)}
	}
	return &Deliver{SubscriptionID: g.id(), Deliveries: deliveries}
}

func TestRoundTripRandomFrames(t *testing.T) {
	g := &generator{rng: rand.New(rand.NewSource(testSeed(t)))}
	const rounds = 300
	for _, tag := range Tags() {
		reused := NewFrame(tag)
		for round := 0; round < rounds && !t.Failed(); round++ {
			checkRoundTrip(t, g, tag, reused)
		}
	}
}

func checkRoundTrip(t *testing.T, g *generator, tag Tag, reused Frame) {
	t.Helper()
	frame := g.frame(tag)
	prefix := []byte("prefix")
	encoded := frame.Encode(append([]byte(nil), prefix...))
	if !bytes.HasPrefix(encoded, prefix) {
		t.Fatalf("%s: Encode did not append to dst", tag)
	}
	encoded = encoded[len(prefix):]
	if Tag(beUint(encoded[:4])) != tag || int(beUint(encoded[4:8])) != len(encoded)-HeaderBytes {
		t.Fatalf("%s: envelope %x does not match %d body bytes", tag, encoded[:8], len(encoded)-HeaderBytes)
	}
	if _, err := annotateFrame(encoded); err != nil {
		t.Fatalf("%s: encoding does not walk the documented layout: %v\n%#v", tag, err, frame)
	}
	body := encoded[HeaderBytes:]
	fresh := NewFrame(tag)
	if err := fresh.Decode(body); err != nil {
		t.Fatalf("%s: decode: %v\n%#v", tag, err, frame)
	}
	if !reflect.DeepEqual(fresh, frame) {
		t.Fatalf("%s: round trip differs\n got %#v\nwant %#v", tag, fresh, frame)
	}
	if err := reused.Decode(body); err != nil || !bytes.Equal(reused.Encode(nil), encoded) {
		t.Fatalf("%s: decoding into a reused value: %v", tag, err)
	}
	checkRejectsDamage(t, g, tag, frame, body)
	if _, err := Append(nil, frame, uint32(len(body))); err != nil {
		t.Fatalf("%s: Append at the exact limit: %v", tag, err)
	}
	if len(body) > 0 {
		if out, err := Append([]byte("x"), frame, uint32(len(body)-1)); !errors.Is(err, ErrFrameTooLarge) || string(out) != "x" {
			t.Fatalf("%s: Append over the limit: %v, %q", tag, err, out)
		}
	}
}

// checkRejectsDamage checks that proper prefixes and a trailing byte are
// refused. The one legal prefix: a declare without its mode byte.
func checkRejectsDamage(t *testing.T, g *generator, tag Tag, frame Frame, body []byte) {
	t.Helper()
	cuts := make([]int, 0, 64)
	if len(body) <= 128 {
		for cut := 0; cut < len(body); cut++ {
			cuts = append(cuts, cut)
		}
	} else {
		for i := 0; i < 64; i++ {
			cuts = append(cuts, g.rng.Intn(len(body)))
		}
	}
	for _, cut := range cuts {
		if declare, ok := frame.(*Declare); ok && declare.Mode != ModeUnset && cut == len(body)-1 {
			continue
		}
		err := NewFrame(tag).Decode(body[:cut])
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: prefix of %d of %d bytes: %v", tag, cut, len(body), err)
		}
	}
	extended := append(append([]byte(nil), body...), 0)
	if err := NewFrame(tag).Decode(extended); !errors.Is(err, ErrMalformed) {
		t.Fatalf("%s: a trailing zero byte: %v", tag, err)
	}
}

// A deliver body is DeliverHeadBytes plus each delivery's EncodedBytes, so
// a node can size deliver frames to a client's limit without encoding them.
func TestDeliverBodySizeIsTheSumOfItsParts(t *testing.T) {
	g := &generator{rng: rand.New(rand.NewSource(testSeed(t)))}
	for round := 0; round < 300; round++ {
		frame := g.deliver()
		want := DeliverHeadBytes
		for i := range frame.Deliveries {
			want += frame.Deliveries[i].EncodedBytes()
		}
		if body := len(frame.Encode(nil)) - HeaderBytes; body != want {
			t.Fatalf("round %d: body of %d bytes, parts add up to %d: %#v", round, body, want, frame)
		}
	}
}

// history returns a well-formed epoch history: epochs and first offsets
// both increasing.
func (g *generator) history() []EpochStart {
	n := g.count(4)
	if n == 0 {
		return nil
	}
	history := make([]EpochStart, n)
	epoch, offset := uint64(0), uint64(0)
	for i := range history {
		epoch += 1 + uint64(g.rng.Intn(3))
		offset += uint64(g.rng.Intn(1000))
		history[i] = EpochStart{Epoch: epoch, FirstOffset: offset}
	}
	return history
}

func (g *generator) fixedBytes(n int) []byte {
	out := make([]byte, n)
	g.rng.Read(out)
	return out
}

func (g *generator) peerHello() PeerHello {
	return PeerHello{Version: uint16(g.rng.Intn(3)), ClusterID: g.u64(), NodeID: g.nonEmptyText(2), Instance: g.id(),
		Nonce: g.fixedBytes(PeerNonceBytes), MaxBodyBytes: g.rng.Uint32()}
}
