package acceptance

// A History is what clients saw, and nothing else. Workloads record every
// publish they send and its outcome, every delivery they take and every
// ack the SDK accepted; a sampler records queue frontiers as queue info
// reported them; the harness records where each broker life began and how
// it ended. Check (checker.go) reads a Record, the History's copy.
//
// Times are taken from the History's clock when an event is recorded, on
// the recording goroutine, right after the client saw the event (so a
// confirm's time is never earlier than the broker sent it). Times from
// time.Now carry the monotonic clock, which keeps comparisons exact.
//
// Invariants the recorders keep: message ids are unique across the whole
// history; a queue's send order is kept per publisher (Publish.Seq counts
// within one publisher of one queue; single-node workloads have one
// unnamed publisher per queue); every delivery, ack and sample is recorded
// after the first life started.
//
// Lives: a single node has one sequence of lives shared by every queue
// (Record.Lives). In a cluster a fault ends the life of a queue only when
// it takes the queue's serving copy with it (its owner, or every copy at
// once), so each queue has its own sequence (Record.QueueLives), and the
// faults themselves are recorded (Record.Faults) with the queues whose
// owner they took, for the failover timings.
//
// A History is shared by the workload goroutines; one mutex guards it.

import (
	"fmt"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// Outcome is what a client learned about one publish.
type Outcome uint8

const (
	// OutcomePending: sent, no outcome yet.
	OutcomePending Outcome = iota
	// OutcomeConfirmed: the node confirmed it at Publish.Boundary.
	OutcomeConfirmed
	// OutcomeRefused: the node answered that it did not store it.
	OutcomeRefused
	// OutcomeUnknown: the connection ended first; stored or not.
	OutcomeUnknown
)

func (o Outcome) String() string {
	return [...]string{"pending", "confirmed", "refused", "unknown"}[o]
}

// Publish is one message a client sent.
type Publish struct {
	Queue     string
	Publisher string // the client that sent it; empty on a single node
	ID        string
	Seq       int       // position in its publisher's send order to the queue, from 0
	Sent      time.Time // when the client handed it to the SDK
	Outcome   Outcome
	At        time.Time     // when the outcome arrived
	Boundary  wire.Boundary // for OutcomeConfirmed
	Reason    string        // for OutcomeRefused and OutcomeUnknown
}

// Delivery is one delivery a consumer took from the SDK.
type Delivery struct {
	Queue       string
	Consumer    string // the client that took it; empty on a single node
	ID          string
	Incarnation uint64
	Offset      uint64
	Attempt     uint32
	Redelivered bool
	// Stale is set when the delivery's connection had already ended when
	// the consumer took it: it belongs to an earlier broker life.
	Stale bool
	At    time.Time
}

// Ack is an ack the SDK accepted (Delivery.Ack returned nil). Acks are
// fire-and-forget: the node may never have applied it. An ack travels on
// the connection its delivery came on, so it belongs to the broker life of
// that delivery, which DeliveredAt names.
type Ack struct {
	Queue       string
	ID          string
	At          time.Time
	DeliveredAt time.Time // the acked delivery's At
	Consumer    string    // the client that acked; empty on a single node
}

// ConnectionLoss is a client's established connection ending, as the
// client saw it. An ack is handed to the SDK and sent in the background:
// one whose connection ended soon after may never have reached the node.
type ConnectionLoss struct {
	Client string
	At     time.Time
}

// Sample is one queue info answer: the frontiers it reported.
type Sample struct {
	Queue    string
	Sent     time.Time // the request left after this
	Answered time.Time // the answer arrived before this
	Written  uint64
	Durable  uint64
}

// EndKind is how a broker life ended.
type EndKind uint8

const (
	// EndRunning: the life has not ended.
	EndRunning EndKind = iota
	// EndClean: Close or SIGTERM; held deliveries are released.
	EndClean
	// EndProcessKill: SIGKILL; the page cache survives.
	EndProcessKill
	// EndPowerLoss: every byte not covered by a completed sync is gone.
	EndPowerLoss
	// EndStorageFailure: a failed write or sync latched the affected
	// queues' logs, which cut back to their last good sync.
	EndStorageFailure
	// EndFailover: the queue's owner was lost (killed, paused, cut off,
	// powered off, wiped) while other copies hold what it confirmed; a new
	// owner serves from them. Unclean (leases end, attempts count), never
	// lossy.
	EndFailover
)

func (k EndKind) String() string {
	return [...]string{"running", "clean", "process-kill", "power-loss", "storage-failure", "failover"}[k]
}

// Life is one run of a broker.
type Life struct {
	Start time.Time // the broker accepted clients from here on
	End   time.Time // zero while running
	Kind  EndKind
	// ProofBefore: only samples answered before it may prove records
	// durable at the end (a storage failure moves the written frontier
	// back, so samples after the fault was armed prove nothing). Zero
	// means End.
	ProofBefore time.Time
	// Affected lists the queues the end applies to; nil means every queue.
	// For the others the life ended cleanly.
	Affected []string
}

// Fault is one fault a cluster harness injected.
type Fault struct {
	Class string   // the fault class, as the summary names it
	Name  string   // what was done, for people ("SIGKILL node2 (follower)")
	Nodes []string // the nodes it hit
	Start time.Time
	End   time.Time // healed, restarted or resumed; zero while active
	// Failover lists the queues whose serving copy it took: for those the
	// checker measures the time to service again.
	Failover []string
}

// Record is a copy of a History.
type Record struct {
	Publishes  []Publish // in send order
	Deliveries []Delivery
	Acks       []Ack
	Samples    []Sample
	Lives      []Life
	// QueueLives, when it names a queue, replaces Lives for that queue.
	QueueLives map[string][]Life
	Faults     []Fault
	// ConnectionLosses are the named clients' connection ends (cluster
	// histories).
	ConnectionLosses []ConnectionLoss
}

// History records what clients saw; see the file comment.
type History struct {
	mu       sync.Mutex
	clock    func() time.Time
	record   Record
	byID     map[string]int // index into record.Publishes
	nextSeqs map[[2]string]int
}

// NewHistory returns an empty history on the real clock.
func NewHistory() *History {
	return &History{clock: time.Now, byID: map[string]int{}, nextSeqs: map[[2]string]int{},
		record: Record{QueueLives: map[string][]Life{}}}
}

// Now is the history's clock.
func (h *History) Now() time.Time { return h.clock() }

// Sending records a publish about to be handed to the SDK. Ids must be
// unique across the history.
func (h *History) Sending(queue, id string) { h.SendingBy("", queue, id) }

// SendingBy records a publish of the named publisher.
func (h *History) SendingBy(publisher, queue, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.byID[id]; dup {
		panic(fmt.Sprintf("acceptance: message id %q sent twice", id))
	}
	key := [2]string{queue, publisher}
	h.byID[id] = len(h.record.Publishes)
	h.record.Publishes = append(h.record.Publishes, Publish{
		Queue: queue, Publisher: publisher, ID: id, Seq: h.nextSeqs[key], Sent: h.clock(),
	})
	h.nextSeqs[key]++
}

// Confirmed records a confirm at a boundary.
func (h *History) Confirmed(id string, boundary wire.Boundary) {
	h.finish(id, OutcomeConfirmed, boundary, "")
}

// Refused records a node's answer that the message was not stored.
func (h *History) Refused(id string, reason string) {
	h.finish(id, OutcomeRefused, 0, reason)
}

// Unknown records a publish whose outcome the client cannot know.
func (h *History) Unknown(id string, reason string) {
	h.finish(id, OutcomeUnknown, 0, reason)
}

func (h *History) finish(id string, outcome Outcome, boundary wire.Boundary, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	index, ok := h.byID[id]
	if !ok {
		panic(fmt.Sprintf("acceptance: outcome for unsent message %q", id))
	}
	p := &h.record.Publishes[index]
	if p.Outcome != OutcomePending {
		panic(fmt.Sprintf("acceptance: second outcome for %q (%s, then %s)", id, p.Outcome, outcome))
	}
	p.Outcome, p.At, p.Boundary, p.Reason = outcome, h.clock(), boundary, reason
}

// Delivered records a delivery the consumer took and returns the time
// recorded for it.
func (h *History) Delivered(d Delivery) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	d.At = h.clock()
	if index, ok := h.byID[d.ID]; ok {
		d.ID = h.record.Publishes[index].ID // share the sent id's bytes
	}
	h.record.Deliveries = append(h.record.Deliveries, d)
	return d.At
}

// Acked records an ack the SDK accepted for the delivery recorded at
// deliveredAt.
func (h *History) Acked(queue, id string, deliveredAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if index, ok := h.byID[id]; ok {
		id = h.record.Publishes[index].ID
	}
	h.record.Acks = append(h.record.Acks, Ack{Queue: queue, ID: id, At: h.clock(), DeliveredAt: deliveredAt})
}

// AckedBy records that consumer handed an ack of the delivery of id it
// took at deliveredAt to the SDK, which accepted it.
func (h *History) AckedBy(consumer, queue, id string, deliveredAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if index, ok := h.byID[id]; ok {
		id = h.record.Publishes[index].ID
	}
	h.record.Acks = append(h.record.Acks, Ack{Queue: queue, ID: id, At: h.clock(), DeliveredAt: deliveredAt,
		Consumer: consumer})
}

// ConnectionLost records that one of client's established connections
// ended.
func (h *History) ConnectionLost(client string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record.ConnectionLosses = append(h.record.ConnectionLosses, ConnectionLoss{Client: client, At: h.clock()})
}

// Sampled records a queue info answer requested at sent.
func (h *History) Sampled(queue string, sent time.Time, written, durable uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record.Samples = append(h.record.Samples, Sample{
		Queue: queue, Sent: sent, Answered: h.clock(), Written: written, Durable: durable,
	})
}

// LifeStarted records that a broker accepts clients from now on.
func (h *History) LifeStarted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.record.Lives); n > 0 && h.record.Lives[n-1].Kind == EndRunning {
		panic("acceptance: a life started while the previous one runs")
	}
	h.record.Lives = append(h.record.Lives, Life{Start: h.clock()})
}

// LifeEnded records the end of the running life, now. proofBefore and
// affected are as in Life.
func (h *History) LifeEnded(kind EndKind, proofBefore time.Time, affected ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.record.Lives)
	if n == 0 || h.record.Lives[n-1].Kind != EndRunning || kind == EndRunning {
		panic("acceptance: no running life to end")
	}
	life := &h.record.Lives[n-1]
	life.End, life.Kind, life.ProofBefore, life.Affected = h.clock(), kind, proofBefore, affected
}

// QueueLifeStarted records that the queue is served from now on (its
// own sequence of lives; see the file comment).
func (h *History) QueueLifeStarted(queue string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lives := h.record.QueueLives[queue]
	if n := len(lives); n > 0 && lives[n-1].Kind == EndRunning {
		panic("acceptance: a life of " + queue + " started while the previous one runs")
	}
	h.record.QueueLives[queue] = append(lives, Life{Start: h.clock()})
}

// QueueLifeEnded ends the queue's running life now.
func (h *History) QueueLifeEnded(queue string, kind EndKind, proofBefore time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lives := h.record.QueueLives[queue]
	n := len(lives)
	if n == 0 || lives[n-1].Kind != EndRunning || kind == EndRunning {
		panic("acceptance: no running life of " + queue + " to end")
	}
	lives[n-1].End, lives[n-1].Kind, lives[n-1].ProofBefore = h.clock(), kind, proofBefore
}

// FaultStarted records a fault beginning now and returns its index for
// FaultEnded.
func (h *History) FaultStarted(fault Fault) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	fault.Start, fault.End = h.clock(), time.Time{}
	h.record.Faults = append(h.record.Faults, fault)
	return len(h.record.Faults) - 1
}

// FaultEnded records that fault index was healed now.
func (h *History) FaultEnded(index int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record.Faults[index].End = h.clock()
}

// Record returns a copy of everything recorded so far.
func (h *History) Record() Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.record
	queueLives := make(map[string][]Life, len(r.QueueLives))
	for queue, lives := range r.QueueLives {
		queueLives[queue] = append([]Life(nil), lives...)
	}
	faults := make([]Fault, len(r.Faults))
	for i, fault := range r.Faults {
		fault.Nodes = append([]string(nil), fault.Nodes...)
		fault.Failover = append([]string(nil), fault.Failover...)
		faults[i] = fault
	}
	return Record{
		Publishes:  append([]Publish(nil), r.Publishes...),
		Deliveries: append([]Delivery(nil), r.Deliveries...),
		Acks:       append([]Ack(nil), r.Acks...),
		Samples:    append([]Sample(nil), r.Samples...),
		Lives:      append([]Life(nil), r.Lives...),
		QueueLives: queueLives,
		Faults:     faults,

		ConnectionLosses: append([]ConnectionLoss(nil), r.ConnectionLosses...),
	}
}
