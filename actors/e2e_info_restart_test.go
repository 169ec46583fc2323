package actors

import (
	"fmt"
	"testing"

	"github.com/fibrilmq/fibril/wire"
)

// A queue that restarts never reports that it holds nothing: while its
// partition reopens, queue info waits for it to open, and while the old
// instance stops, info is answered unavailable. Each of the answers to
// infos sent right after an injected panic either counts every confirmed
// message or says unavailable.
func TestQueueInfoDuringARestartNeverReportsAnEmptyQueue(t *testing.T) {
	b := startBroker(t, nil)
	c := connect(t, b)
	unavailable, counted := 0, 0
	// Each queue restarts within its restart budget (partitionRestartsMax
	// a minute); eight queues make 32 restarts.
	for queueNumber := range 8 {
		name := fmt.Sprintf("steady-%d", queueNumber)
		c.mustDeclare(name, wire.ModeDurable, wire.QueueOptions{})
		seqs := c.publish(name, "one", "two", "three", "four", "five")
		for seq, out := range c.awaitOutcomes(seqs) {
			if !out.confirmed {
				t.Fatalf("publish %d: %+v", seq, out)
			}
		}
		for round := range partitionRestartsMax - 1 {
			counted, unavailable = restartUnderInfo(t, b, c, name, round, counted, unavailable)
		}
	}
	t.Logf("%d infos counted every message, %d were told the queue is restarting", counted, unavailable)
}

func restartUnderInfo(t *testing.T, b *Broker, c *testClient, name string, round, counted, unavailable int) (int, int) {
	t.Helper()
	if err := b.InjectPanic("node/queues/"+name+"/0", "restart under info"); err != nil {
		t.Fatal(err)
	}
	{
		for range 3 {
			id := c.id()
			c.send(&wire.GetQueueInfo{RequestID: id, Queue: name})
			switch frame := c.reply(id).(type) {
			case *wire.QueueInfoReply:
				if frame.Info.Ready != 5 {
					t.Fatalf("round %d: info during a restart reports %d ready, want 5 (%+v)", round, frame.Info.Ready, frame.Info)
				}
				counted++
			case *wire.ErrorFrame:
				if frame.Code != wire.CodeUnavailable {
					t.Fatalf("round %d: info during a restart answered %+v", round, frame)
				}
				unavailable++
			default:
				t.Fatalf("round %d: info answered %+v", round, frame)
			}
		}
		c.settledInfo(name)
	}
	return counted, unavailable
}
