package queue

// A log that latches after a storage failure cuts what was not durable
// (storage/log's becomeLatched). When that happens between the queue's
// frontier read and its read of the records to deliver, the read finds
// nothing: the fence must still name the storage failure, which is what
// the operator has to act on, not the missing record.

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestAFenceAfterALatchUnderADeliveryReadNamesTheStorageFailure(t *testing.T) {
	f := newFixture(t, Options{Mode: Buffered})
	log := f.env.log
	ticket, err := f.q.Publish([]Message{{ID: "id-a", Payload: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	log.flush() // written, not durable: a buffered queue confirms it
	progress, err := f.q.Advance()
	if err != nil || len(progress.Confirmed) != 1 || progress.Confirmed[0].Ticket != ticket {
		t.Fatalf("the buffered publish: %+v %v", progress.Confirmed, err)
	}
	if _, _, err := f.q.Lease(1, 7); err != nil {
		t.Fatal(err)
	}
	log.flush()
	log.latchOnScan = syscall.EIO
	_, err = f.q.Advance()
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("advance over a log that latched under the read: %v, want the fence", err)
	}
	if !strings.Contains(err.Error(), syscall.EIO.Error()) {
		t.Fatalf("the fence %q does not name the storage failure %q", err, syscall.EIO)
	}
}
