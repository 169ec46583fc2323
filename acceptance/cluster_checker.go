package acceptance

// The cluster side of the checker: Check's rules apply per queue as they
// do on a single node (each queue with its own lives, see history.go);
// this file adds what a fault schedule on a cluster is judged by beyond
// them: the time each failover took to give service back, and the table
// row of a fault class.
//
// A failover is a recorded Fault whose Failover list names the queue. Its
// times are measured by the traffic clients, from the fault's start (the
// moment the harness signalled, cut or powered off):
//
//   - to the first new confirm: the earliest confirm a publisher received
//     for a publish it handed to the SDK after the fault began;
//   - to the first fresh delivery: the earliest delivery a consumer took
//     of a message sent after the fault began.
//
// A failover with no such confirm or delivery afterwards is reported as
// not recovered (Confirmed or Delivered false); the drain at the end of a
// trial would fail too, but the timing says which fault it was.

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// FailoverTiming is one queue's return to service after one fault that
// took its serving copy.
type FailoverTiming struct {
	Queue      string
	Fault      string
	ToConfirm  time.Duration
	ToDelivery time.Duration
	Confirmed  bool // a publish sent after the fault was confirmed
	Delivered  bool // a message sent after the fault was delivered
}

func (f FailoverTiming) String() string {
	confirm, delivery := "never", "never"
	if f.Confirmed {
		confirm = formatDuration(f.ToConfirm)
	}
	if f.Delivered {
		delivery = formatDuration(f.ToDelivery)
	}
	return fmt.Sprintf("%s after %s: first new confirm %s, first fresh delivery %s", f.Queue, f.Fault, confirm, delivery)
}

// FailoverTimings measures every failover the record holds, in fault
// order, then queue name order.
func FailoverTimings(record Record) []FailoverTiming {
	sentAt := make(map[string]time.Time, len(record.Publishes))
	for _, p := range record.Publishes {
		sentAt[p.ID] = p.Sent
	}
	var out []FailoverTiming
	for _, fault := range record.Faults {
		queues := append([]string(nil), fault.Failover...)
		sort.Strings(queues)
		for _, queue := range queues {
			timing := FailoverTiming{Queue: queue, Fault: fault.Name}
			for _, p := range record.Publishes {
				if p.Queue != queue || p.Outcome != OutcomeConfirmed || p.Sent.Before(fault.Start) {
					continue
				}
				if took := p.At.Sub(fault.Start); !timing.Confirmed || took < timing.ToConfirm {
					timing.ToConfirm, timing.Confirmed = took, true
				}
			}
			for _, d := range record.Deliveries {
				sent, known := sentAt[d.ID]
				if d.Queue != queue || d.Stale || !known || sent.Before(fault.Start) {
					continue
				}
				if took := d.At.Sub(fault.Start); !timing.Delivered || took < timing.ToDelivery {
					timing.ToDelivery, timing.Delivered = took, true
				}
			}
			out = append(out, timing)
		}
	}
	return out
}

// ClusterTrial is the verdict on one trial: every queue's result and every
// failover's timing.
type ClusterTrial struct {
	Results   []QueueResult
	Failovers []FailoverTiming
	// EveryCopy names the queues whose confirms need every copy (W = E):
	// after a fault on a copy they wait for it to return, so their
	// failover timings are reported apart (set by the harness).
	EveryCopy map[string]bool
}

// CheckCluster checks every queue named in modes and measures the
// failovers.
func CheckCluster(record Record, modes map[string]wire.Mode) ClusterTrial {
	return ClusterTrial{Results: Check(record, modes), Failovers: FailoverTimings(record)}
}

// Errs lists what fails the trial: losses and broken rules (Err of each
// queue), and failovers after which service never came back.
func (c ClusterTrial) Errs() []error {
	var errs []error
	for _, result := range c.Results {
		if err := result.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, failover := range c.Failovers {
		if !failover.Confirmed || !failover.Delivered {
			errs = append(errs, fmt.Errorf("no service after a failover: %s", failover))
		}
	}
	return errs
}

// ClusterRow is one fault class's totals over its trials.
type ClusterRow struct {
	Class      string
	Trials     int
	Confirmed  int
	Lost       int
	Unexpected int
	Unflagged  int // duplicates without the redelivered flag (must be 0)
	Duplicates int
	Unknown    int
	Allowed    int // buffered confirms the promise let go (power loss of every copy)
	Gone       int // of those, how many went
	ToConfirm  []time.Duration
	ToDelivery []time.Duration
	// QuorumToConfirm are the ToConfirm samples of queues that confirm on
	// fewer copies than they have (W < E): what a failover costs when the
	// faulted copy is not needed back.
	QuorumToConfirm []time.Duration
	// Waiting, when set, says why the class did not run (its trials are
	// then 0).
	Waiting string
}

// AddTrial folds one trial into the row.
func (r *ClusterRow) AddTrial(trial ClusterTrial) {
	r.Trials++
	for _, result := range trial.Results {
		r.Confirmed += result.Confirmed
		r.Lost += len(result.Lost)
		r.Unexpected += result.Unexpected
		r.Unflagged += result.UnflaggedDuplicates
		r.Duplicates += result.Duplicates
		r.Unknown += result.Unknown
		r.Allowed += result.Allowed
		r.Gone += len(result.Gone)
	}
	for _, failover := range trial.Failovers {
		if failover.Confirmed {
			r.ToConfirm = append(r.ToConfirm, failover.ToConfirm)
			if !trial.EveryCopy[failover.Queue] {
				r.QuorumToConfirm = append(r.QuorumToConfirm, failover.ToConfirm)
			}
		}
		if failover.Delivered {
			r.ToDelivery = append(r.ToDelivery, failover.ToDelivery)
		}
	}
}

// ClusterSummary gathers the rows of the fault classes, in the order they
// were first added.
type ClusterSummary struct {
	mu   sync.Mutex
	rows []ClusterRow
}

// Add merges row into the row of its class.
func (s *ClusterSummary) Add(row ClusterRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.rows {
		if existing := &s.rows[i]; existing.Class == row.Class {
			existing.Trials += row.Trials
			existing.Confirmed += row.Confirmed
			existing.Lost += row.Lost
			existing.Unexpected += row.Unexpected
			existing.Unflagged += row.Unflagged
			existing.Duplicates += row.Duplicates
			existing.Unknown += row.Unknown
			existing.Allowed += row.Allowed
			existing.Gone += row.Gone
			existing.ToConfirm = append(existing.ToConfirm, row.ToConfirm...)
			existing.ToDelivery = append(existing.ToDelivery, row.ToDelivery...)
			existing.QuorumToConfirm = append(existing.QuorumToConfirm, row.QuorumToConfirm...)
			if existing.Trials > 0 {
				existing.Waiting = ""
			}
			return
		}
	}
	row.ToConfirm = append([]time.Duration(nil), row.ToConfirm...)
	row.ToDelivery = append([]time.Duration(nil), row.ToDelivery...)
	row.QuorumToConfirm = append([]time.Duration(nil), row.QuorumToConfirm...)
	s.rows = append(s.rows, row)
}

// Empty reports whether nothing was added.
func (s *ClusterSummary) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows) == 0
}

// Write prints the table in Markdown.
func (s *ClusterSummary) Write(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(w, "| fault class | trials | confirmed | lost | unexpected | duplicates unflagged | duplicates | unknown | "+
		"allowed loss (went) | to first new confirm p50 / p95 / max | to first fresh delivery p50 / p95 / max | "+
		"W < E queues: to first new confirm p50 / p95 / max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range s.rows {
		if r.Trials == 0 && r.Waiting != "" {
			fmt.Fprintf(w, "| %s | 0 | %s | | | | | | | | | |\n", r.Class, r.Waiting)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %d (%d) | %s | %s | %s |\n",
			r.Class, r.Trials, r.Confirmed, r.Lost, r.Unexpected, r.Unflagged, r.Duplicates, r.Unknown,
			r.Allowed, r.Gone, spread(r.ToConfirm), spread(r.ToDelivery), spread(r.QuorumToConfirm))
	}
}

// spread formats p50 / p95 / max, or "-" without samples.
func spread(samples []time.Duration) string {
	if len(samples) == 0 {
		return "-"
	}
	parts := []string{
		formatDuration(Percentile(samples, 50)),
		formatDuration(Percentile(samples, 95)),
		formatDuration(Percentile(samples, 100)),
	}
	return strings.Join(parts, " / ")
}
