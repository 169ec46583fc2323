package queue

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	records := []Record{
		{Kind: KindLease, Holder: 7, DeadlineMs: 1_700_000_030_000, Offsets: []uint64{3, 4, 9, 1 << 40}},
		{Kind: KindAck, Offsets: []uint64{0}},
		{Kind: KindNack, DueMs: 1_700_000_000_500, Offsets: []uint64{5, 6}},
		{Kind: KindNack, Offsets: []uint64{5}},
		{Kind: KindRelease, Offsets: []uint64{1, 2, 3}},
		{Kind: KindDiscard, Reason: ReasonConsumer, Offsets: []uint64{8}},
		{Kind: KindDiscard, Reason: ReasonTTL, Offsets: []uint64{8, 100}},
		{Kind: KindDeadLetter, Target: []byte("orders.dead"), Offsets: []uint64{11}},
		{Kind: KindExpire, Reason: ReasonDeadline, Offsets: []uint64{12}},
		{Kind: KindExpire, Reason: ReasonRestart, Offsets: []uint64{12, 13}},
		{Kind: KindCheckpoint, CheckpointID: 0xdeadbeefcafe},
		{Kind: KindPurge, UpTo: 12345},
		{Kind: KindReject, Offsets: []uint64{14, 15}},
		{Kind: KindSent, Offsets: []uint64{3, 4, 9}},
	}
	for _, want := range records {
		body := encodeRecord(nil, &want)
		var got Record
		if err := decodeRecord(uint8(want.Kind), body, &got, true); err != nil {
			t.Fatalf("%v: %v", want.Kind, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("%v: got %+v, want %+v", want.Kind, got, want)
		}
		for cut := 0; cut < len(body); cut++ {
			if err := decodeRecord(uint8(want.Kind), body[:cut], &got, true); err == nil {
				t.Fatalf("%v: truncated body of %d bytes decoded", want.Kind, cut)
			}
		}
		if err := decodeRecord(uint8(want.Kind), append(body, 0), &got, true); err == nil {
			t.Fatalf("%v: trailing byte accepted", want.Kind)
		}
	}
}

func normalize(r Record) Record {
	if len(r.Offsets) == 0 {
		r.Offsets = nil
	}
	if len(r.Target) == 0 {
		r.Target = nil
	}
	return r
}

func TestPublishRoundTripStoresPayloadOnce(t *testing.T) {
	headers := []Header{{"trace", "abc"}, {"empty", ""}}
	payload := []byte("hello, queue")
	body := appendPublishBody(nil, []byte("id-1"), 1_700_000_000_123, headers, payload, publishDedup{})
	var rec Record
	if err := decodeRecord(uint8(KindPublish), body, &rec, true); err != nil {
		t.Fatal(err)
	}
	if string(rec.MessageID) != "id-1" || rec.PublishMs != 1_700_000_000_123 ||
		!reflect.DeepEqual(rec.Headers, headers) || string(rec.Payload) != string(payload) ||
		rec.PayloadBytes != uint32(len(payload)) {
		t.Fatalf("decoded %+v", rec)
	}
	overhead := len(body) - len(payload)
	if overhead > 1+6+1+4+1+2*(1+5)+2*(1+3) {
		t.Fatalf("publish overhead %d bytes is not compact", overhead)
	}
	if err := decodeRecord(uint8(KindPublish), body, &rec, false); err != nil || rec.Headers != nil {
		t.Fatalf("metadata decode: %v %+v", err, rec.Headers)
	}
	body[0] = 0x80
	if err := decodeRecord(uint8(KindPublish), body, &rec, true); !errors.Is(err, ErrRecordCorrupt) {
		t.Fatalf("unknown flag: %v", err)
	}
}

func TestRecordRejectsUnknownTypeAndReason(t *testing.T) {
	var rec Record
	if err := decodeRecord(200, []byte{1}, &rec, true); !errors.Is(err, ErrUnknownRecord) {
		t.Fatalf("unknown type: %v", err)
	}
	if err := decodeRecord(uint8(kindLast)+1, []byte{1, 0}, &rec, true); !errors.Is(err, ErrUnknownRecord) {
		t.Fatalf("the kind after the newest: %v", err)
	}
	if !validRecordType(uint8(KindSent)) || validRecordType(uint8(kindLast)+1) || KindSent.String() != "sent" {
		t.Fatal("the log's type check does not take exactly the sent mark as the newest kind")
	}
	body := encodeRecord(nil, &Record{Kind: KindDiscard, Reason: ReasonConsumer, Offsets: []uint64{1}})
	body[0] = byte(ReasonRestart)
	if err := decodeRecord(uint8(KindDiscard), body, &rec, true); !errors.Is(err, ErrRecordCorrupt) {
		t.Fatalf("discard with a restart reason: %v", err)
	}
}

func TestRecordDecodeNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var rec Record
	for range 20000 {
		body := make([]byte, rng.IntN(24))
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		_ = decodeRecord(uint8(rng.IntN(int(kindLast)+2)), body, &rec, true)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(uint8(KindAck), encodeRecord(nil, &Record{Kind: KindAck, Offsets: []uint64{1, 5}}))
	f.Add(uint8(KindPublish), appendPublishBody(nil, []byte("x"), 5, []Header{{"a", "b"}}, []byte("p"), publishDedup{}))
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		var rec Record
		if decodeRecord(kind, body, &rec, true) != nil || rec.Kind == KindPublish {
			return
		}
		again := encodeRecord(nil, &rec)
		var round Record
		if err := decodeRecord(kind, again, &round, true); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
	})
}
