package wire

import (
	"strings"
	"testing"
)

// fittedBodies encodes every frame FitFrame returned and checks each body
// against the limit.
func fittedBodies(t *testing.T, frames []Frame, limit uint32) {
	t.Helper()
	for i, f := range frames {
		if size := bodyBytes(f); size > int(limit) {
			t.Fatalf("frame %d (%s) has a body of %d bytes, over %d", i, f.Tag(), size, limit)
		}
	}
}

func TestFitFrameLeavesFittingFramesAlone(t *testing.T) {
	for _, f := range []Frame{
		&Confirm{Ranges: []ConfirmRange{{First: 1, Last: 2, Boundary: BoundaryDurable}}},
		&ErrorFrame{RequestID: 1, Code: CodeInternal, Message: "short"},
		&QueueInfoReply{RequestID: 1, Info: QueueInfo{Name: "q", Mode: ModeDurable}},
	} {
		if got := FitFrame(f, MinMaxBodyBytes); got != nil {
			t.Fatalf("%s fits but FitFrame returned %d frames", f.Tag(), len(got))
		}
	}
}

func TestFitFrameSplitsRangesAndKeepsEveryNumber(t *testing.T) {
	const limit = MinMaxBodyBytes
	confirm := &Confirm{}
	idempotent := &ConfirmIdempotent{}
	reject := &NegativeConfirm{}
	for seq := uint64(1); seq < 4000; seq += 2 {
		confirm.Ranges = append(confirm.Ranges, ConfirmRange{First: seq, Last: seq, Boundary: BoundaryWritten})
		idempotent.Ranges = append(idempotent.Ranges, IdempotentRange{First: seq, Last: seq, Boundary: BoundaryWritten,
			Duplicate: seq%3 == 0})
		reject.Ranges = append(reject.Ranges, RejectRange{First: seq, Last: seq, Code: CodeLimitReached,
			Message: strings.Repeat("m", 100)})
	}
	reject.Ranges[0].Message = strings.Repeat("é", 40000) // longer than any frame: clipped
	for _, f := range []Frame{confirm, idempotent, reject} {
		parts := FitFrame(f, limit)
		if len(parts) < 2 {
			t.Fatalf("%s: %d parts", f.Tag(), len(parts))
		}
		fittedBodies(t, parts, limit)
		var seqs []uint64
		for _, part := range parts {
			switch p := part.(type) {
			case *Confirm:
				for _, r := range p.Ranges {
					seqs = append(seqs, r.First)
				}
			case *NegativeConfirm:
				for _, r := range p.Ranges {
					seqs = append(seqs, r.First)
				}
			case *ConfirmIdempotent:
				for _, r := range p.Ranges {
					seqs = append(seqs, r.First)
				}
			}
		}
		if len(seqs) != 2000 || seqs[0] != 1 || seqs[1999] != 3999 {
			t.Fatalf("%s: %d numbers after the split, first %d", f.Tag(), len(seqs), seqs[0])
		}
		for _, part := range parts {
			if _, err := DecodeFrame(part.Tag(), mustEncodeBody(t, part)); err != nil {
				t.Fatalf("a part does not decode: %v", err)
			}
		}
	}
}

func TestFitFrameSplitsDeliveries(t *testing.T) {
	const limit = MinMaxBodyBytes
	deliver := &Deliver{SubscriptionID: 7}
	for i := range 10 {
		deliver.Deliveries = append(deliver.Deliveries, Delivery{DeliveryTag: uint64(i + 1), Attempt: 1,
			MessageID: []byte("id"), Payload: make([]byte, 1000)})
	}
	parts := FitFrame(deliver, limit)
	fittedBodies(t, parts, limit)
	total := 0
	for _, part := range parts {
		d := part.(*Deliver)
		if d.SubscriptionID != 7 {
			t.Fatal("a part lost its subscription id")
		}
		total += len(d.Deliveries)
	}
	if total != 10 || len(parts) != 4 {
		t.Fatalf("%d deliveries in %d parts", total, len(parts))
	}
}

func TestFitFrameShortensMessagesAndWarnings(t *testing.T) {
	const limit = MinMaxBodyBytes
	long := strings.Repeat("x", 10000)
	for _, f := range []Frame{
		&ErrorFrame{RequestID: 3, Code: CodeInternal, Message: long},
		&SubscriptionEnded{SubscriptionID: 3, Code: CodeFenced, Message: long},
		&DeclareOKMode{RequestID: 3, Mode: ModeBuffered, Warnings: []string{long, long}},
	} {
		parts := FitFrame(f, limit)
		if len(parts) != 1 || parts[0].Tag() != f.Tag() {
			t.Fatalf("%s: %d parts", f.Tag(), len(parts))
		}
		fittedBodies(t, parts, limit)
	}
}

func TestFitFrameTrimsListsAndRefusesOversizedInfo(t *testing.T) {
	const limit = MinMaxBodyBytes
	list := &QueueList{RequestID: 9}
	for i := range 100 {
		list.Queues = append(list.Queues, QueueInfo{Name: strings.Repeat("q", 150) + string(rune('a'+i%26)), Mode: ModeDurable})
	}
	parts := FitFrame(list, limit)
	fittedBodies(t, parts, limit)
	trimmed := parts[0].(*QueueList)
	if !trimmed.More || len(trimmed.Queues) == 0 || len(trimmed.Queues) >= 100 {
		t.Fatalf("trimmed list: more=%v, %d entries", trimmed.More, len(trimmed.Queues))
	}
	huge := &QueueInfoReply{RequestID: 4, Info: QueueInfo{Name: "q", Mode: ModeDurable,
		FenceError: strings.Repeat("e", 5000)}}
	parts = FitFrame(huge, limit)
	refusal, ok := parts[0].(*ErrorFrame)
	if !ok || refusal.RequestID != 4 || refusal.Code != CodeInvalidRequest ||
		!strings.Contains(refusal.Message, "4096") {
		t.Fatalf("oversized info answered with %+v", parts[0])
	}
	single := &QueueList{RequestID: 5, Queues: []QueueInfo{huge.Info}}
	if refusal, ok := FitFrame(single, limit)[0].(*ErrorFrame); !ok || refusal.RequestID != 5 {
		t.Fatal("a list whose first entry does not fit was not refused")
	}
}

func mustEncodeBody(t *testing.T, f Frame) []byte {
	t.Helper()
	out, err := Append(nil, f, ^uint32(0))
	if err != nil {
		t.Fatal(err)
	}
	return out[HeaderBytes:]
}
