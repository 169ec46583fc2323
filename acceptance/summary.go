package acceptance

// The summary table `make soak` prints: one row per case, summed over its
// trials. Recovery time is how long the new broker took from its start
// (the process exec, or actors.Start in process) until it accepted
// clients: recovery of every queue on disk included, the harness's own
// steps (waiting for the old process to exit, taking the crash image)
// excluded.

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Row is one case's totals.
type Row struct {
	Case       string
	Trials     int
	Confirmed  int
	Lost       int
	Allowed    int // confirmed messages the promise let go
	Gone       int // of those, how many went
	Duplicates int
	Recoveries []time.Duration
}

// Add folds one queue's result into the row.
func (r *Row) Add(result QueueResult) {
	r.Confirmed += result.Confirmed
	r.Lost += len(result.Lost)
	r.Allowed += result.Allowed
	r.Gone += len(result.Gone)
	r.Duplicates += result.Duplicates
}

// Summary gathers rows from concurrent tests.
type Summary struct {
	mu   sync.Mutex
	rows []Row
}

// Add appends (or merges into) the row named row.Case.
func (s *Summary) Add(row Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.rows {
		if s.rows[i].Case == row.Case {
			existing := &s.rows[i]
			existing.Trials += row.Trials
			existing.Confirmed += row.Confirmed
			existing.Lost += row.Lost
			existing.Allowed += row.Allowed
			existing.Gone += row.Gone
			existing.Duplicates += row.Duplicates
			existing.Recoveries = append(existing.Recoveries, row.Recoveries...)
			return
		}
	}
	row.Recoveries = append([]time.Duration(nil), row.Recoveries...)
	s.rows = append(s.rows, row)
}

// Empty reports whether nothing was added.
func (s *Summary) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows) == 0
}

// Write prints the table in Markdown.
func (s *Summary) Write(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(w, "| case | trials | confirmed | lost | allowed to go | went | duplicates | recovery p50 | recovery p99 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range s.rows {
		p50, p99 := "-", "-"
		if len(r.Recoveries) > 0 {
			p50 = formatDuration(Percentile(r.Recoveries, 50))
			p99 = formatDuration(Percentile(r.Recoveries, 99))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %s | %s |\n",
			r.Case, r.Trials, r.Confirmed, r.Lost, r.Allowed, r.Gone, r.Duplicates, p50, p99)
	}
}

// Percentile returns the p-th percentile (nearest rank) of samples.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func formatDuration(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}
