package wire

// One fuzz target per decoder, plus the stream readers. Seed corpora live in
// wire/testdata/fuzz/<target>/ (generated from the golden vectors by
// `go test ./wire -run Golden -update`) and run as ordinary tests.
//
// Properties checked for every input:
//   - Decode never panics; a failure is a *FrameError wrapping a sentinel;
//   - a decoded frame encodes to bytes that walk the documented layout and
//     decode to the same frame; for fixed binary layouts those bytes are
//     the input itself (one encoding per value);
//   - decoding into a value that held another frame gives the same result
//     as decoding into a fresh one (slice reuse leaks nothing).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// msgpackBodied lists the kinds whose bodies embed msgpack, which has more
// than one encoding per value, so re-encoding may differ from the input.
var msgpackBodied = map[Tag]bool{TagDeclare: true, TagQueueInfoReply: true, TagQueueList: true}

var sentinels = []error{ErrTruncated, ErrMalformed, ErrFrameTooLarge, ErrUnknownFrame, ErrInvalidOptions}

func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var frameErr *FrameError
	if !errors.As(err, &frameErr) {
		t.Fatalf("error %v (%T) is not a *FrameError", err, err)
	}
	for _, sentinel := range sentinels {
		if errors.Is(err, sentinel) {
			return
		}
	}
	t.Fatalf("error %v wraps no sentinel", err)
}

// checkDecode runs the decoder properties on one body.
func checkDecode(t *testing.T, tag Tag, body []byte) {
	t.Helper()
	frame := NewFrame(tag)
	err := frame.Decode(body)
	reused := NewFrame(tag)
	for _, c := range goldenCases() {
		if c.frame.Tag() == tag {
			encoded := c.frame.Encode(nil)
			if err := reused.Decode(encoded[HeaderBytes:]); err != nil {
				t.Fatalf("golden body does not decode: %v", err)
			}
		}
	}
	reusedErr := reused.Decode(body)
	if (err == nil) != (reusedErr == nil) {
		t.Fatalf("fresh decode error %v, reused decode error %v", err, reusedErr)
	}
	if err != nil {
		checkDecodeError(t, err)
		return
	}
	encoded := frame.Encode(nil)
	if !msgpackBodied[tag] && !bytes.Equal(encoded[HeaderBytes:], body) {
		t.Fatalf("re-encoding differs from the input\n got %x\nwant %x", encoded[HeaderBytes:], body)
	}
	if _, err := annotateFrame(encoded); err != nil {
		t.Fatalf("encoding does not walk the documented layout: %v", err)
	}
	again := NewFrame(tag)
	if err := again.Decode(encoded[HeaderBytes:]); err != nil {
		t.Fatalf("re-encoded frame does not decode: %v", err)
	}
	if !bytes.Equal(again.Encode(nil), encoded) {
		t.Fatalf("decode(encode(frame)) encodes differently")
	}
	if !bytes.Equal(reused.Encode(nil), encoded) {
		t.Fatalf("decoding into a reused value differs from a fresh decode")
	}
}

func fuzzDecoder(f *testing.F, tag Tag) {
	f.Fuzz(func(t *testing.T, body []byte) { checkDecode(t, tag, body) })
}

func FuzzDecodeHello(f *testing.F)             { fuzzDecoder(f, TagHello) }
func FuzzDecodeHelloOK(f *testing.F)           { fuzzDecoder(f, TagHelloOK) }
func FuzzDecodeDeclare(f *testing.F)           { fuzzDecoder(f, TagDeclare) }
func FuzzDecodeDeclareOK(f *testing.F)         { fuzzDecoder(f, TagDeclareOK) }
func FuzzDecodeDeclareOKMode(f *testing.F)     { fuzzDecoder(f, TagDeclareOKMode) }
func FuzzDecodePublish(f *testing.F)           { fuzzDecoder(f, TagPublish) }
func FuzzDecodeConfirm(f *testing.F)           { fuzzDecoder(f, TagConfirm) }
func FuzzDecodePublishIdempotent(f *testing.F) { fuzzDecoder(f, TagPublishIdempotent) }
func FuzzDecodeConfirmIdempotent(f *testing.F) { fuzzDecoder(f, TagConfirmIdempotent) }
func FuzzDecodeNegativeConfirm(f *testing.F)   { fuzzDecoder(f, TagNegativeConfirm) }
func FuzzDecodeResumePublishing(f *testing.F)  { fuzzDecoder(f, TagResumePublishing) }
func FuzzDecodeSubscribe(f *testing.F)         { fuzzDecoder(f, TagSubscribe) }
func FuzzDecodeSubscribeOK(f *testing.F)       { fuzzDecoder(f, TagSubscribeOK) }
func FuzzDecodeDeliver(f *testing.F)           { fuzzDecoder(f, TagDeliver) }
func FuzzDecodeAck(f *testing.F)               { fuzzDecoder(f, TagAck) }
func FuzzDecodeAckSync(f *testing.F)           { fuzzDecoder(f, TagAckSync) }
func FuzzDecodeNack(f *testing.F)              { fuzzDecoder(f, TagNack) }
func FuzzDecodeRelease(f *testing.F)           { fuzzDecoder(f, TagRelease) }
func FuzzDecodeDiscard(f *testing.F)           { fuzzDecoder(f, TagDiscard) }
func FuzzDecodeUnsubscribe(f *testing.F)       { fuzzDecoder(f, TagUnsubscribe) }
func FuzzDecodeGetQueueInfo(f *testing.F)      { fuzzDecoder(f, TagGetQueueInfo) }
func FuzzDecodeQueueInfoReply(f *testing.F)    { fuzzDecoder(f, TagQueueInfoReply) }
func FuzzDecodeListQueues(f *testing.F)        { fuzzDecoder(f, TagListQueues) }
func FuzzDecodeQueueList(f *testing.F)         { fuzzDecoder(f, TagQueueList) }
func FuzzDecodeDeleteQueue(f *testing.F)       { fuzzDecoder(f, TagDeleteQueue) }
func FuzzDecodePurgeQueue(f *testing.F)        { fuzzDecoder(f, TagPurgeQueue) }
func FuzzDecodeChangeMode(f *testing.F)        { fuzzDecoder(f, TagChangeMode) }
func FuzzDecodeModeChanged(f *testing.F)       { fuzzDecoder(f, TagModeChanged) }
func FuzzDecodeOK(f *testing.F)                { fuzzDecoder(f, TagOK) }
func FuzzDecodePing(f *testing.F)              { fuzzDecoder(f, TagPing) }
func FuzzDecodePong(f *testing.F)              { fuzzDecoder(f, TagPong) }
func FuzzDecodeErrorFrame(f *testing.F)        { fuzzDecoder(f, TagError) }
func FuzzDecodeRedirect(f *testing.F)          { fuzzDecoder(f, TagRedirect) }
func FuzzDecodeRedirectEpoch(f *testing.F)     { fuzzDecoder(f, TagRedirectEpoch) }
func FuzzDecodePush(f *testing.F)              { fuzzDecoder(f, TagPush) }
func FuzzDecodeProgress(f *testing.F)          { fuzzDecoder(f, TagProgress) }
func FuzzDecodeProgressWritten(f *testing.F)   { fuzzDecoder(f, TagProgressWritten) }
func FuzzDecodePushRefused(f *testing.F)       { fuzzDecoder(f, TagPushRefused) }
func FuzzDecodeFetch(f *testing.F)             { fuzzDecoder(f, TagFetch) }
func FuzzDecodePage(f *testing.F)              { fuzzDecoder(f, TagPage) }
func FuzzDecodeSeal(f *testing.F)              { fuzzDecoder(f, TagSeal) }
func FuzzDecodeSealed(f *testing.F)            { fuzzDecoder(f, TagSealed) }
func FuzzDecodeSealedVote(f *testing.F)        { fuzzDecoder(f, TagSealedVote) }
func FuzzDecodePageAfter(f *testing.F)         { fuzzDecoder(f, TagPageAfter) }
func FuzzDecodeSnapshotRequest(f *testing.F)   { fuzzDecoder(f, TagSnapshotRequest) }
func FuzzDecodeSnapshot(f *testing.F)          { fuzzDecoder(f, TagSnapshot) }
func FuzzDecodePeerHello(f *testing.F)         { fuzzDecoder(f, TagPeerHello) }
func FuzzDecodePeerChallenge(f *testing.F)     { fuzzDecoder(f, TagPeerChallenge) }
func FuzzDecodePeerAuth(f *testing.F)          { fuzzDecoder(f, TagPeerAuth) }
func FuzzDecodeMemberQuery(f *testing.F)       { fuzzDecoder(f, TagMemberQuery) }
func FuzzDecodeReplaceMember(f *testing.F)     { fuzzDecoder(f, TagReplaceMember) }
func FuzzDecodeMember(f *testing.F)            { fuzzDecoder(f, TagMember) }

func FuzzDecodeSubscriptionEnded(f *testing.F) { fuzzDecoder(f, TagSubscriptionEnded) }

// FuzzReader feeds a byte stream to a Reader with a small limit and
// decodes every frame it yields.
func FuzzReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, stream []byte) {
		reader := NewReader(bytes.NewReader(stream), 256)
		for frames := 0; ; frames++ {
			tag, body, err := reader.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				checkDecodeError(t, err)
				if _, again, sticky := reader.Next(); sticky != err || again != nil {
					t.Fatalf("error not final: %v then %v", err, sticky)
				}
				return
			}
			if len(body) > 256 {
				t.Fatalf("body of %d bytes passed a 256-byte limit", len(body))
			}
			if frame := NewFrame(tag); frame != nil {
				if err := frame.Decode(body); err != nil {
					checkDecodeError(t, err)
				}
			}
		}
	})
}

// FuzzTraceReader feeds arbitrary bytes to a TraceReader.
func FuzzTraceReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, file []byte) {
		reader, err := NewTraceReader(bytes.NewReader(file), 256)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		var last TraceRecord
		for {
			record, err := reader.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				checkDecodeError(t, err)
				return
			}
			if record.Elapsed < last.Elapsed || len(record.Body) > 256 {
				t.Fatalf("record %+v after %+v", record, last)
			}
			last = record
		}
	})
}

// fuzzTargetName is the fuzz target of a decoder: FuzzDecode + type name.
func fuzzTargetName(tag Tag) string {
	return "FuzzDecode" + reflect.TypeOf(NewFrame(tag)).Elem().Name()
}

// expectedFuzzSeeds returns the seed corpus files by relative path.
func expectedFuzzSeeds() map[string][]byte {
	seedFile := func(b []byte) []byte {
		return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
	}
	seeds := map[string][]byte{}
	var stream []byte
	for _, c := range goldenCases() {
		frame := c.frame.Encode(nil)
		stream = append(stream, frame...)
		target := fuzzTargetName(c.frame.Tag())
		body := frame[HeaderBytes:]
		seeds[filepath.Join(target, "golden-"+c.file)] = seedFile(body)
		seeds[filepath.Join(target, "cut-"+c.file)] = seedFile(body[:len(body)/2])
		seeds[filepath.Join(target, "empty")] = seedFile(nil)
	}
	seeds[filepath.Join("FuzzReader", "golden-stream")] = seedFile(stream)
	seeds[filepath.Join("FuzzReader", "cut-stream")] = seedFile(stream[:len(stream)/3])
	trace, err := goldenTrace()
	if err != nil {
		panic(err)
	}
	seeds[filepath.Join("FuzzTraceReader", "golden-trace")] = seedFile(trace)
	seeds[filepath.Join("FuzzTraceReader", "cut-trace")] = seedFile(trace[:len(trace)-3])
	return seeds
}

func TestGoldenFuzzSeeds(t *testing.T) {
	for path, content := range expectedFuzzSeeds() {
		full := filepath.Join(fuzzSeedsDir, path)
		if *update {
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(full)
		if err != nil {
			t.Errorf("seed %s missing (regenerate with -update): %v", path, err)
			continue
		}
		if !bytes.Equal(got, content) {
			t.Errorf("seed %s is stale (regenerate with -update)", path)
		}
	}
}
