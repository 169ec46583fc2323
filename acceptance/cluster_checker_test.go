package acceptance

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// The cluster checker must flag each kind of violation a fault schedule can
// produce; each test builds a small cluster history by hand (queues with
// their own lives, named publishers and consumers, recorded faults).

func newClusterHistory(queues ...string) *History {
	h := newTestHistory()
	for _, queue := range queues {
		h.QueueLifeStarted(queue)
	}
	return h
}

func sendBy(h *History, publisher, queue, id string, mode wire.Mode) {
	h.SendingBy(publisher, queue, id)
	boundary := wire.BoundaryDurable
	if mode == wire.ModeBuffered {
		boundary = wire.BoundaryWritten
	}
	h.Confirmed(id, boundary)
}

func deliverTo(h *History, consumer, queue, id string, epoch, offset uint64, attempt uint32, redelivered bool) time.Time {
	return h.Delivered(Delivery{Queue: queue, Consumer: consumer, ID: id, Incarnation: epoch, Offset: offset,
		Attempt: attempt, Redelivered: redelivered})
}

func checkClusterOne(t *testing.T, h *History, queue string, mode wire.Mode) (QueueResult, ClusterTrial) {
	t.Helper()
	trial := CheckCluster(h.Record(), map[string]wire.Mode{queue: mode})
	if len(trial.Results) != 1 {
		t.Fatalf("results %+v", trial.Results)
	}
	return trial.Results[0], trial
}

// A fault that leaves the owner alone does not end the queue's life, so an
// acked message coming back across it is a violation; across a failover it
// is an acked comeback (the ack may not have reached the new owner).
func TestClusterCheckerLivesFollowTheOwner(t *testing.T) {
	build := func(failover bool) QueueResult {
		h := newClusterHistory("q")
		sendBy(h, "p1", "q", "m", wire.ModeDurable)
		deliverTo(h, "c1", "q", "m", 1, 0, 1, false)
		ack(h, "q", "m")
		fault := h.FaultStarted(Fault{Class: "kill", Name: "SIGKILL node2", Nodes: []string{"node2"}})
		if failover {
			h.QueueLifeEnded("q", EndFailover, time.Time{})
			h.QueueLifeStarted("q")
		}
		h.FaultEnded(fault)
		deliverTo(h, "c2", "q", "m", 1, 0, 2, true)
		ack(h, "q", "m")
		result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
		return result
	}
	wantViolation(t, build(false), "acks")
	result := build(true)
	wantClean(t, result)
	if result.AckedComebacks != 1 {
		t.Fatalf("%s", result)
	}
}

// After a failover every redelivery is marked and counted; one that is not
// is an unflagged duplicate (counted, and a marking violation).
func TestClusterCheckerUnflaggedDuplicatesAfterAFailover(t *testing.T) {
	build := func(attempt uint32, redelivered bool) QueueResult {
		h := newClusterHistory("q")
		sendBy(h, "p1", "q", "m", wire.ModeDurable)
		deliverTo(h, "c1", "q", "m", 1, 0, 1, false)
		fault := h.FaultStarted(Fault{Class: "kill", Name: "SIGKILL node1 (owner)", Failover: []string{"q"}})
		h.QueueLifeEnded("q", EndFailover, time.Time{})
		h.QueueLifeStarted("q")
		h.FaultEnded(fault)
		deliverTo(h, "c2", "q", "m", 1, 0, attempt, redelivered)
		ack(h, "q", "m")
		result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
		return result
	}
	wantClean(t, build(2, true))
	unflagged := build(2, false)
	wantViolation(t, unflagged, "marking")
	if unflagged.UnflaggedDuplicates != 1 || unflagged.Duplicates != 1 {
		t.Fatalf("%s", unflagged)
	}
	wantViolation(t, build(1, true), "attempts")
}

// Lost, unexpected and unknown are counted as such.
func TestClusterCheckerCountsLostUnexpectedAndUnknown(t *testing.T) {
	h := newClusterHistory("q")
	sendBy(h, "p1", "q", "kept", wire.ModeDurable)
	deliverTo(h, "c1", "q", "kept", 1, 0, 1, false)
	ack(h, "q", "kept")
	sendBy(h, "p2", "q", "lost", wire.ModeDurable)
	h.SendingBy("p1", "q", "unknown")
	h.Unknown("unknown", "connection lost")
	h.SendingBy("p2", "q", "refused")
	h.Refused("refused", "not stored")
	deliverTo(h, "c2", "q", "refused", 1, 1, 1, false)
	deliverTo(h, "c2", "q", "never-sent", 1, 2, 1, false)
	deliverTo(h, "c1", "q", "never-sent", 1, 2, 2, true)
	result, trial := checkClusterOne(t, h, "q", wire.ModeDurable)
	if len(result.Lost) != 1 || result.Lost[0] != "lost" || result.Unexpected != 2 || result.Unknown != 1 {
		t.Fatalf("%s lost %v", result, result.Lost)
	}
	wantViolation(t, result, "phantom")
	if len(trial.Errs()) != 1 {
		t.Fatalf("errs %v", trial.Errs())
	}
}

// Buffered confirms may go only when every copy lost power at once (a
// lossy end of the queue's life); a failover after one copy's loss lets
// nothing go, and durable queues never lose anything.
func TestClusterCheckerAllowsLossOnlyForPowerLossOfEveryCopy(t *testing.T) {
	build := func(mode wire.Mode, end EndKind) QueueResult {
		h := newClusterHistory("q")
		sendBy(h, "p1", "q", "early", mode)
		h.Sampled("q", h.Now(), 1, 0)
		h.Sampled("q", h.Now(), 1, 1) // early proven durable on some copy
		sendBy(h, "p1", "q", "late", mode)
		h.QueueLifeEnded("q", end, time.Time{})
		h.QueueLifeStarted("q")
		result, _ := checkClusterOne(t, h, "q", mode)
		return result
	}
	all := build(wire.ModeBuffered, EndPowerLoss)
	if all.Allowed != 1 || len(all.Gone) != 1 || all.Gone[0] != "late" || len(all.Lost) != 1 || all.Lost[0] != "early" {
		t.Fatalf("power loss of every copy: %s lost %v gone %v", all, all.Lost, all.Gone)
	}
	if one := build(wire.ModeBuffered, EndFailover); one.Allowed != 0 || len(one.Lost) != 2 {
		t.Fatalf("failover: %s", one)
	}
	if durable := build(wire.ModeDurable, EndPowerLoss); durable.Allowed != 0 || len(durable.Lost) != 2 {
		t.Fatalf("durable: %s", durable)
	}
}

// Competing consumers each see first deliveries in increasing offset
// order; one going backwards is an order violation.
func TestClusterCheckerOrderPerConsumer(t *testing.T) {
	build := func(offsets []uint64, consumers []string) QueueResult {
		h := newClusterHistory("q")
		for i := range offsets {
			sendBy(h, "p1", "q", string(rune('a'+i)), wire.ModeDurable)
		}
		for i, offset := range offsets {
			id := string(rune('a' + i))
			deliverTo(h, consumers[i], "q", id, 1, offset, 1, false)
			ack(h, "q", id)
		}
		result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
		return result
	}
	// a, b, c, d stored at 0..3; c1 takes a and c, c2 takes b and d, but
	// the deliveries interleave across consumers out of global order.
	wantClean(t, build([]uint64{0, 1, 2, 3}, []string{"c1", "c2", "c1", "c2"}))
	h := newClusterHistory("q")
	for _, id := range []string{"a", "b", "c"} {
		sendBy(h, "p1", "q", id, wire.ModeDurable)
	}
	deliverTo(h, "c2", "q", "b", 1, 1, 1, false)
	deliverTo(h, "c1", "q", "a", 1, 0, 1, false) // another consumer: fine
	deliverTo(h, "c1", "q", "c", 1, 2, 1, false)
	for _, id := range []string{"a", "b", "c"} {
		ack(h, "q", id)
	}
	result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
	wantClean(t, result)
	deliverTo(h, "c1", "q", "a", 1, 0, 1, false) // c1 going backwards (and unflagged)
	result, _ = checkClusterOne(t, h, "q", wire.ModeDurable)
	wantViolation(t, result, "order")
}

// Send order is per publisher, in calm windows: two publishers interleave
// freely; one publisher's messages stored out of order is a violation,
// unless a fault began while the earlier one was in flight.
func TestClusterCheckerSendOrderPerPublisherInCalmWindows(t *testing.T) {
	h := newClusterHistory("q")
	sendBy(h, "p1", "q", "p1-0", wire.ModeDurable)
	sendBy(h, "p2", "q", "p2-0", wire.ModeDurable)
	sendBy(h, "p1", "q", "p1-1", wire.ModeDurable)
	for i, id := range []string{"p2-0", "p1-0", "p1-1"} { // p2's first stored before p1's first: fine
		deliverTo(h, "c1", "q", id, 1, uint64(i), 1, false)
		ack(h, "q", id)
	}
	result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
	wantClean(t, result)

	inverted := func(faultInFlight bool) QueueResult {
		h := newClusterHistory("q")
		h.SendingBy("p1", "q", "first")
		var fault int
		if faultInFlight {
			fault = h.FaultStarted(Fault{Class: "kill", Name: "SIGKILL node1 (owner)", Failover: []string{"q"}})
		}
		h.Confirmed("first", wire.BoundaryDurable)
		sendBy(h, "p1", "q", "second", wire.ModeDurable)
		if faultInFlight {
			h.FaultEnded(fault)
		}
		deliverTo(h, "c1", "q", "second", 1, 0, 1, false)
		deliverTo(h, "c2", "q", "first", 1, 1, 1, false)
		ack(h, "q", "second")
		ack(h, "q", "first")
		result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
		return result
	}
	wantViolation(t, inverted(false), "order")
	wantClean(t, inverted(true))

	// Both sent and answered while a fault is active: not a calm window.
	h = newClusterHistory("q")
	fault := h.FaultStarted(Fault{Class: "kill", Name: "SIGKILL node1 (owner)", Failover: []string{"q"}})
	sendBy(h, "p1", "q", "first", wire.ModeDurable)
	sendBy(h, "p1", "q", "second", wire.ModeDurable)
	h.FaultEnded(fault)
	deliverTo(h, "c1", "q", "second", 1, 0, 1, false)
	deliverTo(h, "c2", "q", "first", 1, 1, 1, false)
	ack(h, "q", "second")
	ack(h, "q", "first")
	result, _ = checkClusterOne(t, h, "q", wire.ModeDurable)
	wantClean(t, result)
}

// A publisher's first publish in a calm window may have gone to a node
// that no longer owns the queue and been sent again after the redirect:
// a publish sent before its confirm arrived may overtake it. One sent
// after that confirm may not.
func TestClusterCheckerSendOrderStartsAtTheFirstConfirm(t *testing.T) {
	overtaken := func(afterConfirm bool) QueueResult {
		h := newClusterHistory("q")
		h.SendingBy("p1", "q", "redirected")
		if afterConfirm {
			h.Confirmed("redirected", wire.BoundaryDurable)
		}
		h.SendingBy("p1", "q", "direct")
		h.Confirmed("direct", wire.BoundaryDurable)
		if !afterConfirm {
			h.Confirmed("redirected", wire.BoundaryDurable)
		}
		sendBy(h, "p1", "q", "later", wire.ModeDurable)
		deliverTo(h, "c1", "q", "direct", 1, 0, 1, false)
		deliverTo(h, "c1", "q", "redirected", 1, 1, 1, false)
		deliverTo(h, "c1", "q", "later", 1, 2, 1, false)
		for _, id := range []string{"direct", "redirected", "later"} {
			ack(h, "q", id)
		}
		result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
		return result
	}
	wantClean(t, overtaken(false))
	wantViolation(t, overtaken(true), "order")
}

// Failover timings come from the traffic: the first confirm of a publish
// sent after the fault began and the first delivery of such a message;
// older publishes confirmed later and stale deliveries do not count, and a
// failover without either is an error of the trial.
func TestClusterCheckerFailoverTimings(t *testing.T) {
	h := newClusterHistory("q")
	h.SendingBy("p1", "q", "before")
	fault := h.FaultStarted(Fault{Class: "kill", Name: "SIGKILL node1 (owner)", Failover: []string{"q"}})
	start := h.Record().Faults[fault].Start
	h.QueueLifeEnded("q", EndFailover, time.Time{})
	h.QueueLifeStarted("q")
	h.Confirmed("before", wire.BoundaryDurable) // sent before the fault: not a new confirm
	h.SendingBy("p1", "q", "after")
	h.Delivered(Delivery{Queue: "q", Consumer: "c1", ID: "before", Incarnation: 1, Attempt: 1, Stale: true})
	confirmed := h.Now()
	h.Confirmed("after", wire.BoundaryDurable)
	h.FaultEnded(fault)
	delivered := deliverTo(h, "c1", "q", "after", 2, 1, 1, false)
	ack(h, "q", "after")
	deliverTo(h, "c2", "q", "before", 1, 0, 1, false)
	ack(h, "q", "before")
	_, trial := checkClusterOne(t, h, "q", wire.ModeDurable)
	if len(trial.Failovers) != 1 {
		t.Fatalf("failovers %v", trial.Failovers)
	}
	timing := trial.Failovers[0]
	// The confirm is recorded one tick after h.Now() above.
	wantConfirm, wantDelivery := confirmed.Add(time.Millisecond).Sub(start), delivered.Sub(start)
	if !timing.Confirmed || !timing.Delivered || timing.ToConfirm != wantConfirm || timing.ToDelivery != wantDelivery {
		t.Fatalf("timing %+v, want confirm %v delivery %v", timing, wantConfirm, wantDelivery)
	}
	if errs := trial.Errs(); len(errs) != 0 {
		t.Fatalf("errs %v", errs)
	}

	h = newClusterHistory("q")
	sendBy(h, "p1", "q", "m", wire.ModeDurable)
	deliverTo(h, "c1", "q", "m", 1, 0, 1, false)
	ack(h, "q", "m")
	h.FaultEnded(h.FaultStarted(Fault{Class: "kill", Name: "SIGKILL node1 (owner)", Failover: []string{"q"}}))
	_, trial = checkClusterOne(t, h, "q", wire.ModeDurable)
	if errs := trial.Errs(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "no service after a failover") {
		t.Fatalf("errs %v", errs)
	}
}

func TestClusterSummaryTable(t *testing.T) {
	var s ClusterSummary
	s.Add(ClusterRow{Class: "owner kill", Waiting: "needs replication and failover (issues 14, 15)"})
	row := ClusterRow{Class: "follower kill"}
	row.AddTrial(ClusterTrial{
		Results: []QueueResult{{Confirmed: 10, Unknown: 2, Duplicates: 3, Allowed: 1, Gone: []string{"x"}}},
		Failovers: []FailoverTiming{
			{Queue: "q", Confirmed: true, ToConfirm: 300 * time.Millisecond, Delivered: true, ToDelivery: 2 * time.Second},
			{Queue: "all", Confirmed: true, ToConfirm: 3 * time.Second, Delivered: true, ToDelivery: 3 * time.Second},
		},
		EveryCopy: map[string]bool{"all": true},
	})
	s.Add(row)
	var out bytes.Buffer
	s.Write(&out)
	for _, want := range []string{
		"| owner kill | 0 | needs replication and failover (issues 14, 15) |",
		"| follower kill | 1 | 10 | 0 | 0 | 0 | 3 | 2 | 1 (1) | 300 ms / 3.00 s / 3.00 s | 2.00 s / 3.00 s / 3.00 s | " +
			"300 ms / 300 ms / 300 ms |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in\n%s", want, out.String())
		}
	}
}

// An ack is sent in the background: when a connection of the acking
// client ends between the ack and the message's comeback, the ack may
// never have reached the node, so the comeback is counted, not a
// violation. Without such a loss it is a violation.
func TestClusterCheckerAckLostWithItsConnection(t *testing.T) {
	comeback := func(lost bool) QueueResult {
		h := newClusterHistory("q")
		sendBy(h, "p1", "q", "m", wire.ModeDurable)
		at := deliverTo(h, "c1", "q", "m", 1, 0, 1, false)
		h.AckedBy("c1", "q", "m", at)
		if lost {
			h.ConnectionLost("c1")
		}
		deliverTo(h, "c2", "q", "m", 1, 0, 2, true)
		h.AckedBy("c2", "q", "m", at)
		result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
		return result
	}
	wantViolation(t, comeback(false), "acks")
	result := comeback(true)
	wantClean(t, result)
	if result.AckedComebacks != 1 {
		t.Fatalf("acked comebacks %d, want 1", result.AckedComebacks)
	}
}

// A delivery taken while the fault that began its queue's life is active
// may come from the old owner, whose ack cannot stand: its comeback is
// counted. One taken after the fault ended binds the life.
func TestClusterCheckerAckDuringTheFaultThatBeganTheLife(t *testing.T) {
	comeback := func(duringFault bool) QueueResult {
		h := newClusterHistory("q")
		sendBy(h, "p1", "q", "m", wire.ModeDurable)
		fault := h.FaultStarted(Fault{Class: "cut", Name: "cut node1 (owner) off", Failover: []string{"q"}})
		h.QueueLifeEnded("q", EndFailover, time.Time{})
		h.QueueLifeStarted("q")
		if !duringFault {
			h.FaultEnded(fault)
		}
		at := deliverTo(h, "c1", "q", "m", 1, 0, 1, false)
		h.AckedBy("c1", "q", "m", at)
		if duringFault {
			h.FaultEnded(fault)
		}
		deliverTo(h, "c2", "q", "m", 1, 0, 2, true)
		h.AckedBy("c2", "q", "m", at)
		result, _ := checkClusterOne(t, h, "q", wire.ModeDurable)
		return result
	}
	wantViolation(t, comeback(false), "acks")
	result := comeback(true)
	wantClean(t, result)
	if result.AckedComebacks != 1 {
		t.Fatalf("acked comebacks %d, want 1", result.AckedComebacks)
	}
}
