package wire

// Golden vectors: one or more committed hex files per frame kind in
// testdata/wire at the repository root. The committed files are the
// reference; the tests check that each value encodes to its file byte for
// byte and that the file decodes back to the value.
//
// Regenerate (files, fuzz seed corpora and the document's generated
// blocks) with:  go test ./wire -run Golden -update

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden vectors, fuzz seeds and generated document blocks")

const (
	goldenDir    = "../testdata/wire"
	protocolDoc  = "../docs/protocol.md"
	fuzzSeedsDir = "testdata/fuzz"
)

type goldenCase struct {
	file        string // under testdata/wire, without .hex
	description string
	frame       Frame
}

var jsonHeader = []Header{{Key: []byte("content-type"), Value: []byte("application/json")}}

func goldenCases() []goldenCase {
	return []goldenCase{
		{"FHL1_hello", "a client that speaks version 1 resumes an earlier session",
			&Hello{Versions: []uint16{1}, ClientName: "orders-service", AuthToken: []byte("s3cret"),
				PreviousSession: "5e551on-0001", MaxBodyBytes: 1 << 20}},
		{"FHO1_hello_ok", "the node restarted since that session: resumed after restart",
			&HelloOK{Version: 1, NodeID: "node-1", SessionID: "5e551on-0002",
				Session: SessionResumedAfterRestart, MaxBodyBytes: DefaultMaxBodyBytes, ServerVersion: "fibril 0.1.0"}},
		{"FDC1_declare", "declare with options and no mode byte",
			&Declare{RequestID: 1, Queue: "orders", Options: QueueOptions{LeaseTimeoutMs: 30000,
				MaxDeliveries: 5, DeadLetterQueue: "orders.dead"}}},
		{"FDC1_declare_mode", "declare naming the buffered mode, no options",
			&Declare{RequestID: 2, Queue: "metrics", Mode: ModeBuffered}},
		{"FDK1_declare_ok", "reply to a declare without a mode byte",
			&DeclareOK{RequestID: 1, Created: true}},
		{"FDK2_declare_ok_mode", "reply to a declare with a mode byte",
			&DeclareOKMode{RequestID: 2, Created: true, Mode: ModeBuffered, Policy: "replica_buffered:2",
				Warnings: []string{"confirmed messages can be lost if every required node loses power at once"}}},
		{"FPB1_publish", "two messages, the second without id or headers",
			&Publish{Queue: []byte("orders"), Messages: []PublishMessage{
				{Seq: 1, MessageID: []byte("m-1"), Headers: jsonHeader, Payload: []byte(`{"id":1}`)},
				{Seq: 2, Payload: []byte("hi")}}}},
		{"FCF1_confirm", "1-2 durable, 4 written",
			&Confirm{Ranges: []ConfirmRange{{First: 1, Last: 2, Boundary: BoundaryDurable},
				{First: 4, Last: 4, Boundary: BoundaryWritten}}}},
		{"FPB2_publish_idempotent", "producer billing-7: message 41 retried, message 42 new with an id",
			&PublishIdempotent{Queue: []byte("orders"), ProducerID: []byte("billing-7"), Messages: []PublishMessage{
				{Seq: 5, ProducerSeq: 41, Payload: []byte("hi")},
				{Seq: 6, ProducerSeq: 42, MessageID: []byte("m-42"), Headers: jsonHeader, Payload: []byte(`{"id":42}`)}}}},
		{"FCF2_confirm_idempotent", "5 was a duplicate (stored before), 6 stored now; both durable",
			&ConfirmIdempotent{Ranges: []IdempotentRange{{First: 5, Last: 5, Boundary: BoundaryDurable, Duplicate: true},
				{First: 6, Last: 6, Boundary: BoundaryDurable}}}},
		{"FNC1_negative_confirm", "sequence 3 refused by a full queue",
			&NegativeConfirm{Ranges: []RejectRange{{First: 3, Last: 3, Code: CodeLimitReached,
				Message: "queue orders is full (max_length 1000)"}}}},
		{"FSB1_subscribe", "prefetch 100",
			&Subscribe{RequestID: 3, Queue: "orders", Prefetch: 100}},
		{"FSK1_subscribe_ok", "subscription 1",
			&SubscribeOK{RequestID: 3, SubscriptionID: 1, Prefetch: 100}},
		{"FDL1_deliver", "a first delivery and a redelivery with a node-assigned id",
			&Deliver{SubscriptionID: 1, Deliveries: []Delivery{
				{DeliveryTag: 1, Incarnation: 7, Offset: 0, Attempt: 1, PublishUnixNanos: 1700000000123456789,
					MessageID: []byte("m-1"), Headers: jsonHeader, Payload: []byte(`{"id":1}`)},
				{DeliveryTag: 2, Incarnation: 7, Offset: 1, Attempt: 2, Redelivered: true,
					PublishUnixNanos: 1700000000223456789, MessageID: []byte("n1-000002"), Payload: []byte("hi")}}}},
		{"FAK1_ack", "two tags", &Ack{Settle{SubscriptionID: 1, DeliveryTags: []uint64{1, 2}}}},
		{"FAK2_ack_sync", "one tag, answered with FOK1 once the ack applied",
			&AckSync{RequestID: 7, Settle: Settle{SubscriptionID: 1, DeliveryTags: []uint64{3}}}},
		{"FNK1_nack", "requeue after 5 s",
			&Nack{SubscriptionID: 1, Requeue: true, DelayMs: 5000, DeliveryTags: []uint64{3}}},
		{"FRL1_release", "two tags", &Release{Settle{SubscriptionID: 1, DeliveryTags: []uint64{4, 5}}}},
		{"FDS1_discard", "one tag", &Discard{Settle{SubscriptionID: 1, DeliveryTags: []uint64{6}}}},
		{"FUS1_unsubscribe", "subscription 1", &Unsubscribe{RequestID: 4, SubscriptionID: 1}},
		{"FSE1_subscription_ended", "the node ended subscription 1: its queue was deleted",
			&SubscriptionEnded{SubscriptionID: 1, Code: CodeUnknownQueue,
				Message: `queue "orders" stopped (deleted, or the node is shutting down)`}},
		{"FIQ1_get_queue_info", "queue orders", &GetQueueInfo{RequestID: 5, Queue: "orders"}},
		{"FIR1_queue_info", "a durable queue on a single node", &QueueInfoReply{RequestID: 5, Info: QueueInfo{
			Name: "orders", Mode: ModeDurable, Options: QueueOptions{LeaseTimeoutMs: 30000, MaxDeliveries: 5},
			Ready: 12, Leased: 3, Delayed: 1, DeadLettered: 0, Consumers: 2,
			WrittenNext: 1042, DurableNext: 1040, UnsyncedRecords: 2, UnsyncedBytes: 2311,
			LastSyncUnixMs: 1700000000123, SyncIntervalMs: 100, SyncPending: true}}},
		{"FLQ1_list_queues", "names starting with ord, 100 at most",
			&ListQueues{RequestID: 6, Prefix: "ord", Limit: 100}},
		{"FLR1_queue_list", "one buffered queue on a three-node cluster", &QueueList{RequestID: 6, Queues: []QueueInfo{{
			Name: "orders.fast", Mode: ModeBuffered, Policy: "replica_buffered:2", Ready: 5,
			WrittenNext: 90, DurableNext: 88, UnsyncedRecords: 2, UnsyncedBytes: 140, SyncIntervalMs: 100,
			Owner: "node-1", Epoch: 3, Replicas: []ReplicaInfo{
				{Node: "node-1", WrittenNext: 90, DurableNext: 88},
				{Node: "node-2", WrittenNext: 90, DurableNext: 80},
				{Node: "node-3", WrittenNext: 85, DurableNext: 80}}}}}},
		{"FDQ1_delete_queue", "queue orders.old", &DeleteQueue{RequestID: 7, Queue: "orders.old"}},
		{"FPG1_purge_queue", "queue orders", &PurgeQueue{RequestID: 8, Queue: "orders"}},
		{"FMC1_change_mode", "switch orders to durable, wait up to 10 s for the switch",
			&ChangeMode{RequestID: 10, Queue: "orders", Mode: ModeDurable, WaitMs: 10000}},
		{"FMK1_mode_changed", "the revision 3 switching orders to durable applied",
			&ModeChanged{RequestID: 10, Outcome: ModeApplied, Mode: ModeDurable, Applied: ModeDurable, Revision: 3}},
		{"FMK1_mode_changed_pending", "still pending: a follower's durable progress is short of the revision",
			&ModeChanged{RequestID: 10, Outcome: ModePending, Mode: ModeDurable, Applied: ModeBuffered, Revision: 3,
				Message: "waiting for 2 durable copies at offset 1042; durable on 1 (node-3 unreachable)"}},
		{"FRS1_resume_publishing", "publishes to orders are served again on this connection", &ResumePublishing{Queue: "orders"}},
		{"FOK1_ok", "purge removed 42 messages", &OK{RequestID: 8, Count: 42}},
		{"FPI1_ping", "", &Ping{RequestID: 9}},
		{"FPO1_pong", "", &Pong{RequestID: 9}},
		{"FER1_error", "a declare naming another mode",
			&ErrorFrame{RequestID: 2, Code: CodeModeConflict, Message: "queue metrics is buffered; the declare names durable"}},
		{"FER1_error_unknown_frame", "the answer to an unknown tag, built by UnknownFrameError",
			UnknownFrameError(Tag('Z'<<24 | 'Z'<<16 | 'Z'<<8 | '9'))},
		{"FRD1_redirect", "the subscribe's queue is owned by node-2",
			&Redirect{RequestID: 3, Queue: "orders", NodeID: "node-2", Address: "127.0.0.1:7421"}},
		{"FRD2_redirect_epoch", "the subscribe's queue is owned by node-2 since epoch 4",
			&RedirectEpoch{Redirect: Redirect{RequestID: 3, Queue: "orders", NodeID: "node-2", Address: "127.0.0.1:7421"}, Epoch: 4}},
		{"FQR1_push", "two records from offset 100 after a record of epoch 3 (record bytes are opaque here)",
			&Push{Partition: 1000, Epoch: 3, StartOffset: 100, PreviousEpoch: 3, CommittedNext: 98, RecordCount: 2,
				Records: []byte("\x00\x01\x02\x03")}},
		{"FQR1_push_keepalive", "a keepalive: no records, the committed frontier moves to 102",
			&Push{Partition: 1000, Epoch: 3, StartOffset: 102, PreviousEpoch: 3, CommittedNext: 102}},
		{"FQP1_progress", "durable through offset 101",
			&Progress{Partition: 1000, Epoch: 3, Instance: 0x5eed, DurableNext: 102}},
		{"FQP2_progress_written", "written through 101, durable through 99",
			&ProgressWritten{Partition: 1000, Epoch: 3, Instance: 0x5eed, DurableNext: 100, WrittenNext: 102}},
		{"FQN1_push_refused", "the follower's log diverges: it ends at 120 with epoch 2 from offset 90",
			&PushRefused{Partition: 1000, Epoch: 3, Instance: 0x5eed, Reason: RefusedOffset, StagedNext: 120,
				DurableNext: 118, History: []EpochStart{{Epoch: 1, FirstOffset: 0}, {Epoch: 2, FirstOffset: 90}},
				Message: "record 99 has epoch 2, the push expects 3"}},
		{"FQF1_fetch", "up to 4096 records or 16 MiB from offset 90",
			&Fetch{RequestID: 7, Partition: 1000, Epoch: 4, FromOffset: 90, MaxRecords: 4096, MaxBytes: 16 << 20}},
		{"FQG1_page", "one record at offset 90; the source holds 0 up to 120",
			&Page{RequestID: 7, Partition: 1000, FromOffset: 90, FirstOffset: 0, EndOffset: 120, RecordCount: 1,
				Records: []byte("\x00\x01")}},
		{"FQG2_page_after", "one record at offset 90 after a record of epoch 3; the source holds 0 up to 120",
			&PageAfter{Page: Page{RequestID: 7, Partition: 1000, FromOffset: 90, FirstOffset: 0, EndOffset: 120, RecordCount: 1,
				Records: []byte("\x00\x01")}, PreviousEpoch: 3}},
		{"FQS1_seal", "node2 recovers epoch 4",
			&Seal{RequestID: 8, Partition: 1000, Epoch: 4, Owner: "node2"}},
		{"FQT1_sealed", "sealed at 4: the log holds 0 to 120, epochs 1 from 0 and 3 from 90",
			&Sealed{RequestID: 8, Partition: 1000, Epoch: 4, Instance: 0x5eed, DurableNext: 120, FirstOffset: 0,
				History: []EpochStart{{Epoch: 1, FirstOffset: 0}, {Epoch: 3, FirstOffset: 90}}}},
		{"FQT2_sealed_vote", "sealed at 4 by a copy that opened empty: it holds 100 to 120 of epoch 3 and its seal does not count",
			&SealedVote{Sealed: Sealed{RequestID: 8, Partition: 1000, Epoch: 4, Instance: 0x5eed, DurableNext: 120, FirstOffset: 100,
				History: []EpochStart{{Epoch: 3, FirstOffset: 100}}}, Incomplete: true}},
		{"FQH1_snapshot_request", "a follower of epoch 3 below the source's retained records asks for its snapshot",
			&SnapshotRequest{RequestID: 9, Partition: 1000, Epoch: 3}},
		{"FQI1_snapshot", "the source's log starts at 100, epochs 1 from 0 and 3 from 90; the snapshot bytes are opaque here",
			&Snapshot{RequestID: 9, Partition: 1000, FirstOffset: 100,
				History: []EpochStart{{Epoch: 1, FirstOffset: 0}, {Epoch: 3, FirstOffset: 90}}, Snapshot: []byte("FQSN\x01")}},
		{"FXH1_peer_hello", "node1 dials",
			&PeerHello{Version: 1, ClusterID: 1, NodeID: "node1", Instance: 0x1111, Nonce: goldenNonce(0x11),
				MaxBodyBytes: 32 << 20}},
		{"FXC1_peer_challenge", "node2 answers with its nonce and proof",
			&PeerChallenge{PeerHello: PeerHello{Version: 1, ClusterID: 1, NodeID: "node2", Instance: 0x2222,
				Nonce: goldenNonce(0x22), MaxBodyBytes: 32 << 20}, Proof: goldenProof(PeerProofAcceptor)}},
		{"FXA1_peer_auth", "node1's proof",
			&PeerAuth{Proof: goldenProof(PeerProofDialer)}},
		{"FXQ1_member_query", "node3 starts with an empty data directory",
			&MemberQuery{RequestID: 1, NodeID: "node3"}},
		{"FXR1_replace_member", "node3 asks to rejoin as a new replica",
			&ReplaceMember{RequestID: 2, NodeID: "node3", ReplicaID: 0x3333}},
		{"FXM1_member", "the cluster exists and records node3 as 0x3333",
			&Member{RequestID: 2, Initialized: true, ReplicaID: 0x3333}},
	}
}

// goldenFileText renders a case as an annotated hex file.
func goldenFileText(c goldenCase, frame []byte) (string, error) {
	lines, err := annotateFrame(frame)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	fmt.Fprintf(&out, "# %s %s", c.frame.Tag(), c.frame.Tag().Name())
	if c.description != "" {
		fmt.Fprintf(&out, ": %s", c.description)
	}
	out.WriteString("\n# Hex bytes, then a comment per field. Layout: docs/protocol.md.\n")
	out.WriteString("# Reference file; regenerate with: go test ./wire -run Golden -update\n")
	for _, line := range lines {
		out.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return out.String(), nil
}

// parseHexFile reads the bytes of an annotated hex file: everything after
// a '#' is a comment, whitespace is ignored.
func parseHexFile(text string) ([]byte, error) {
	var digits strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if cut := strings.IndexByte(line, '#'); cut >= 0 {
			line = line[:cut]
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	return hex.DecodeString(digits.String())
}

func TestGoldenVectors(t *testing.T) {
	covered := map[Tag]bool{}
	for _, c := range goldenCases() {
		t.Run(c.file, func(t *testing.T) {
			covered[c.frame.Tag()] = true
			encoded := c.frame.Encode(nil)
			path := filepath.Join(goldenDir, c.file+".hex")
			if *update {
				text, err := goldenFileText(c, encoded)
				if err != nil {
					t.Fatalf("annotate: %v", err)
				}
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (regenerate with -update): %v", err)
			}
			want, err := parseHexFile(string(text))
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			if !bytes.Equal(encoded, want) {
				t.Fatalf("encoding differs from %s\n got %x\nwant %x", path, encoded, want)
			}
			decoded, err := DecodeFrame(Tag(beUint(want[:4])), want[HeaderBytes:])
			if err != nil {
				t.Fatalf("decode %s: %v", path, err)
			}
			if !reflect.DeepEqual(decoded, c.frame) {
				t.Fatalf("decoded value differs\n got %#v\nwant %#v", decoded, c.frame)
			}
		})
	}
	for _, tag := range Tags() {
		if !covered[tag] {
			t.Errorf("no golden vector for %s %s", tag, tag.Name())
		}
	}
}

// goldenTrace is the trace file example: a fake clock, two connections.
func goldenTrace() ([]byte, error) {
	start := time.Unix(1700000000, 0)
	readings := []time.Duration{0, 1500 * time.Microsecond, 2 * time.Millisecond}
	clock := func() time.Time {
		reading := readings[0]
		if len(readings) > 1 {
			readings = readings[1:]
		}
		return start.Add(reading)
	}
	var file bytes.Buffer
	recorder, err := NewRecorder(&file, RecorderOptions{Label: "node-1 clients", Clock: clock})
	if err != nil {
		return nil, err
	}
	ping := (&Ping{RequestID: 9}).Encode(nil)
	pong := (&Pong{RequestID: 9}).Encode(nil)
	if err := recorder.Record(1, DirectionIn, TagPing, ping[HeaderBytes:]); err != nil {
		return nil, err
	}
	if err := recorder.Record(1, DirectionOut, TagPong, pong[HeaderBytes:]); err != nil {
		return nil, err
	}
	if err := recorder.Close(); err != nil {
		return nil, err
	}
	return file.Bytes(), nil
}

// traceFileText annotates the example trace file by hand (its layout is
// small and fixed).
func traceFileText(raw []byte) string {
	var out strings.Builder
	out.WriteString("# Trace file: header, then two records (a ping received and the pong sent on connection 1).\n")
	out.WriteString("# Format: docs/protocol.md, \"Trace files\". Regenerate with: go test ./wire -run Golden -update\n")
	line := func(b []byte, comment string) {
		fmt.Fprintf(&out, "%-40s # %s\n", hex.EncodeToString(b), comment)
	}
	line(raw[0:4], `magic "FTF1"`)
	line(raw[4:8], fmt.Sprintf("header body length %d", beUint(raw[4:8])))
	line(raw[8:16], fmt.Sprintf("start_unix_nanos: %d", int64(beUint(raw[8:16]))))
	labelEnd := 18 + int(beUint(raw[16:18]))
	line(raw[16:labelEnd], fmt.Sprintf("label: string %q", raw[18:labelEnd]))
	for off := labelEnd; off < len(raw); {
		line(raw[off:off+8], fmt.Sprintf("elapsed_nanos: %d", beUint(raw[off:off+8])))
		line(raw[off+8:off+16], fmt.Sprintf("connection: %d", beUint(raw[off+8:off+16])))
		line(raw[off+16:off+17], fmt.Sprintf("direction: %s", Direction(raw[off+16])))
		bodyBytes := int(beUint(raw[off+21 : off+25]))
		line(raw[off+17:off+21], fmt.Sprintf("frame tag %q", raw[off+17:off+21]))
		line(raw[off+21:off+25], fmt.Sprintf("frame body length %d", bodyBytes))
		line(raw[off+25:off+25+bodyBytes], "frame body")
		off += 25 + bodyBytes
	}
	return out.String()
}

func TestGoldenTraceFile(t *testing.T) {
	raw, err := goldenTrace()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(goldenDir, "trace_example.hex")
	if *update {
		if err := os.WriteFile(path, []byte(traceFileText(raw)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseHexFile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want) {
		t.Fatalf("recorder output differs from %s\n got %x\nwant %x", path, raw, want)
	}
	reader, err := NewTraceReader(bytes.NewReader(want), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := reader.Header(); got.Label != "node-1 clients" || got.StartUnixNanos != 1700000000*1e9 {
		t.Fatalf("header %+v", got)
	}
	wantRecords := []TraceRecord{
		{Elapsed: 1500 * time.Microsecond, Conn: 1, Direction: DirectionIn, Tag: TagPing},
		{Elapsed: 2 * time.Millisecond, Conn: 1, Direction: DirectionOut, Tag: TagPong},
	}
	for _, wantRecord := range wantRecords {
		record, err := reader.Next()
		if err != nil {
			t.Fatal(err)
		}
		frame, err := DecodeFrame(record.Tag, record.Body)
		if err != nil {
			t.Fatal(err)
		}
		record.Body = nil
		if !reflect.DeepEqual(record, wantRecord) {
			t.Fatalf("record %+v, want %+v", record, wantRecord)
		}
		if frame.Tag() != wantRecord.Tag {
			t.Fatalf("frame %v", frame)
		}
	}
	if _, err := reader.Next(); err == nil || err.Error() != "EOF" {
		t.Fatalf("after the last record: %v, want io.EOF", err)
	}
}

// goldenNonce is a fixed nonce for the vectors: sixteen copies of b.
func goldenNonce(b byte) []byte { return bytes.Repeat([]byte{b}, PeerNonceBytes) }

// goldenProof is the proof of the vectors' handshake under the secret
// "cluster-secret", so a client of the peer protocol can check its HMAC.
func goldenProof(label string) []byte {
	dialer := &PeerHello{Version: 1, ClusterID: 1, NodeID: "node1", Instance: 0x1111, Nonce: goldenNonce(0x11), MaxBodyBytes: 32 << 20}
	acceptor := &PeerHello{Version: 1, ClusterID: 1, NodeID: "node2", Instance: 0x2222, Nonce: goldenNonce(0x22), MaxBodyBytes: 32 << 20}
	return PeerProof([]byte("cluster-secret"), label, dialer, acceptor)
}
