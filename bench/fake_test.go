package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// The fake keeps the Driver contract: one confirm per accepted publish, no
// delivery after stop, pending confirms fail on delete.
func TestFakeDriverContract(t *testing.T) {
	ctx := context.Background()
	fake := NewFakeDriver(FakeOptions{ConfirmDelay: time.Hour})
	if err := fake.Declare(ctx, "q", ModeBuffered); err != nil {
		t.Fatal(err)
	}
	if err := fake.Declare(ctx, "q", ModeBuffered); err != nil {
		t.Errorf("re-declare with the same mode: %v", err)
	}
	if err := fake.Declare(ctx, "q", ModeDurable); !errors.Is(err, ErrFakeModeConflict) {
		t.Errorf("re-declare with another mode: %v", err)
	}
	if err := fake.Publish(ctx, "missing", 0, nil, nil); !errors.Is(err, ErrFakeNoQueue) {
		t.Errorf("publish to a missing queue: %v", err)
	}

	var mu sync.Mutex
	var confirmErrors []error
	var delivered [][]byte
	confirmed := make(chan struct{}, 2)
	onConfirm := func(seq uint64, boundary Boundary, err error) {
		mu.Lock()
		confirmErrors = append(confirmErrors, err)
		mu.Unlock()
		confirmed <- struct{}{}
	}
	stop, err := fake.Subscribe(ctx, "q", 10, func(payload []byte, redelivered bool) {
		mu.Lock()
		delivered = append(delivered, append([]byte(nil), payload...))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("first")
	if err := fake.Publish(ctx, "q", 0, payload, onConfirm); err != nil {
		t.Fatal(err)
	}
	copy(payload, "XXXXX") // the driver must not have kept the caller's buffer
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fake.Publish(ctx, "q", 1, []byte("second"), onConfirm); err != nil {
		t.Fatal(err)
	}
	if err := fake.Delete(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	<-confirmed
	<-confirmed
	mu.Lock()
	defer mu.Unlock()
	if len(confirmErrors) != 2 || !errors.Is(confirmErrors[0], ErrFakeQueueDeleted) || !errors.Is(confirmErrors[1], ErrFakeQueueDeleted) {
		t.Errorf("confirms after delete: %v", confirmErrors)
	}
	// The first message was due at once (no delivery delay) but the
	// subscriber may have stopped first; either way it is intact, and the
	// second was never delivered.
	if len(delivered) > 1 || (len(delivered) == 1 && string(delivered[0]) != "first") {
		t.Errorf("delivered %q", delivered)
	}
}
