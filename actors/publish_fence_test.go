package actors

import (
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

var (
	unavailable = requestFailure{code: wire.CodeUnavailable, message: "too few copies"}
	notOwner    = requestFailure{code: wire.CodeNotOwner, message: "stepped down"}
	tooLarge    = requestFailure{code: wire.CodeInvalidRequest, message: "too large"}
)

func TestSessionFencesRaiseOnFencingCodesOnly(t *testing.T) {
	var f sessionFences
	f.refused("q", unavailable)
	if _, fenced := f.refusing("q"); fenced || f.generation("q") != 0 {
		t.Fatal("a session below version 3 fenced a queue")
	}
	f.enable()
	if got := f.generation("q"); got != 1 {
		t.Fatalf("first generation %d, want 1", got)
	}
	f.refused("q", tooLarge)
	if _, fenced := f.refusing("q"); fenced {
		t.Fatal("invalid_request fenced the queue: the client does not send that publish again")
	}
	f.refused("q", unavailable)
	f.refused("q", notOwner)
	failure, fenced := f.refusing("q")
	if !fenced || failure.code != wire.CodeUnavailable {
		t.Fatalf("refusing = %+v, %v; want the first refusal's code", failure, fenced)
	}
	if _, fenced := f.refusing("other"); fenced {
		t.Fatal("the fence of one queue refused another")
	}
}

func TestSessionFenceResumeStartsAGeneration(t *testing.T) {
	var f sessionFences
	f.enable()
	f.resume("q") // not fenced: nothing happens
	if got := f.generation("q"); got != 1 {
		t.Fatalf("a resume without a fence moved the generation to %d", got)
	}
	f.refused("q", unavailable)
	f.resume("q")
	if _, fenced := f.refusing("q"); fenced {
		t.Fatal("the fence stayed after the resume")
	}
	if got := f.generation("q"); got != 2 {
		t.Fatalf("generation after one resume %d, want 2", got)
	}
	f.refused("q", notOwner)
	if failure, fenced := f.refusing("q"); !fenced || failure.code != wire.CodeNotOwner {
		t.Fatalf("a refusal after the resume: %+v, %v; want a new fence with its code", failure, fenced)
	}
}

// The batches of a session in flight when the partition refused one share
// the refusal; the first batch of the next generation drops the fence.
func TestPartitionFenceCoversTheGenerationInFlight(t *testing.T) {
	var f partitionFences
	if f.refused("s1", 0, unavailable) {
		t.Fatal("a session that does not fence (generation 0) was fenced")
	}
	if f.refused("s1", 1, tooLarge) {
		t.Fatal("invalid_request fenced the session")
	}
	if !f.refused("s1", 1, unavailable) {
		t.Fatal("unavailable did not fence the session")
	}
	if f.refused("s1", 1, notOwner) {
		t.Fatal("a second refusal of the same generation raised the fence again")
	}
	if failure, fenced := f.refusing("s1", 1); !fenced || failure.code != wire.CodeUnavailable {
		t.Fatalf("a batch of the refused generation: %+v, %v; want refused with unavailable", failure, fenced)
	}
	if _, fenced := f.refusing("s2", 1); fenced {
		t.Fatal("one session's fence refused another's batch")
	}
	if _, fenced := f.refusing("s1", 2); fenced {
		t.Fatal("a batch of the next generation was refused")
	}
	if _, fenced := f.refusing("s1", 1); fenced {
		t.Fatal("the fence outlived a batch of the next generation")
	}
	f.refused("s1", 2, notOwner)
	f.forget("s1")
	if _, fenced := f.refusing("s1", 2); fenced {
		t.Fatal("the fence of an ended session stayed")
	}
}
