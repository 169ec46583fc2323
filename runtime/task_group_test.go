package runtime

import (
	"testing"
	"time"
)

// TestTaskGroupWaitCoversTasksThatJoinDuringIt: a wait that began while
// the group was idle or busy ends only once every task, including those
// that joined during the wait, has ended; it times out while one runs.
func TestTaskGroupWaitCoversTasksThatJoinDuringIt(t *testing.T) {
	var group TaskGroup
	if !group.WaitUntil(time.Now()) {
		t.Fatal("an idle group did not report idle")
	}
	group.Add(1)
	waited := make(chan bool)
	go func() { waited <- group.WaitUntil(time.Now().Add(time.Minute)) }()
	group.Add(1) // joins during the wait
	group.Done()
	select {
	case <-waited:
		t.Fatal("the wait ended while a task that joined during it still ran")
	case <-time.After(50 * time.Millisecond):
	}
	group.Done()
	if !<-waited {
		t.Fatal("the wait did not end once every task ended")
	}
	group.Add(1)
	if group.WaitUntil(time.Now().Add(10 * time.Millisecond)) {
		t.Fatal("a wait reported idle while a task ran")
	}
	group.Done()
	defer func() {
		if recover() == nil {
			t.Fatal("a Done without a task did not panic")
		}
	}()
	group.Done()
}
