package queue

import (
	"testing"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// namedLog is a seam over *log.Log that is not one: it counts the appends
// that reach it and names its log through Log(), as a caller's seam does.
type namedLog struct {
	*standaloneLog
	appends int
}

type standaloneLog = log.Log

func (n *namedLog) AppendAsync(entries []log.Entry, level log.Durability, done func(log.Result)) error {
	n.appends++
	return n.standaloneLog.AppendAsync(entries, level, done)
}

func (n *namedLog) Log() *log.Log { return n.standaloneLog }

// WithLogOpener opens the queue's log with the caller's opener, for every
// start mode, in the queue's log directory and with the queue's options;
// the queue appends through what it returns and hands out the log it
// names; a failing opener fails the open with its error.
func TestOpenWithLogOpener(t *testing.T) {
	mem := vfs.NewMem()
	logOptions := log.DefaultOptions()
	logOptions.FS = mem
	var opened *namedLog
	var openedDir string
	opener := WithLogOpener(func(dir string, opts log.Options) (Log, error) {
		if opts.FS != mem || opts.ValidType == nil {
			t.Fatalf("the opener got options %+v", opts)
		}
		l, err := log.Open(dir, opts)
		if err != nil {
			return nil, err
		}
		opened, openedDir = &namedLog{standaloneLog: l}, dir
		return opened, nil
	})
	q, err := Open("/q", Options{Mode: Buffered}, logOptions, nil, opener)
	if err != nil {
		t.Fatal(err)
	}
	if openedDir != "/q/log" {
		t.Fatalf("the opener was asked for %q", openedDir)
	}
	if q.Log() != opened.standaloneLog {
		t.Fatal("the queue does not hand out the log its seam names")
	}
	if _, err := q.Publish([]Message{{ID: "a", Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	if opened.appends != 1 {
		t.Fatalf("%d appends reached the seam", opened.appends)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	replica, err := OpenReplica("/r", Options{Mode: Buffered}, logOptions, nil, opener)
	if err != nil {
		t.Fatal(err)
	}
	if openedDir != "/r/log" || !replica.IsReplica() {
		t.Fatalf("replica opened %q, replica %v", openedDir, replica.IsReplica())
	}
	_ = replica.Close()

	failing := WithLogOpener(func(string, log.Options) (Log, error) { return nil, log.ErrClosed })
	if _, err := Open("/f", Options{Mode: Buffered}, logOptions, nil, failing); err == nil {
		t.Fatal("an open whose log opener failed succeeded")
	}
}
