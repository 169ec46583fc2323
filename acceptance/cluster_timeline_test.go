package acceptance

// The timeline of a process trial: what every node said about one queue,
// every half second, for diagnosing a trial that failed. Each tick asks
// every node, side by side, for GET /api/queues/NAME (its owner and epoch,
// its own log's written and durable frontiers, and, from the owner, the
// quorum frontier committed_next and each replica's progress and state)
// and for the queue's counters in GET /metrics (deliveries, confirms,
// lease lapses), and GET /debug/actors for the summaries of the queue's
// own actors (each follower link's state, pushes and last refusal, the
// partition's role and epoch). A node that does not answer within the tick (paused,
// killed, starting) is noted as such. The harness adds its own events
// (each fault and heal) so the dump reads in order.
//
// Nothing here judges a trial: the checker does. On failure the trial
// writes the whole timeline to timeline.txt in its kept directory, prints
// a digest of what looks wrong in it (a replica shown "in sync" far behind
// the owner, a quorum frontier stuck behind the log, deliveries that froze)
// and a summary of each node's warnings and errors, and copies the node
// logs and the timeline to the test's artifact directory when the test
// binary runs with -artifacts.

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// timelineEvery is the timeline's tick.
const timelineEvery = 500 * time.Millisecond

// queueStatusView is the part of GET /api/queues/NAME the timeline keeps.
type queueStatusView struct {
	Owner         string `json:"owner"`
	Epoch         uint64 `json:"epoch"`
	WrittenNext   uint64 `json:"written_next"`
	DurableNext   uint64 `json:"durable_next"`
	CommittedNext uint64 `json:"committed_next"`
	WrittenOn     uint32 `json:"written_on"`
	DurableOn     uint32 `json:"durable_on"`
	Fenced        bool   `json:"fenced"`
	Counts        struct {
		Ready   uint64 `json:"ready"`
		Leased  uint64 `json:"leased"`
		Delayed uint64 `json:"delayed"`
	} `json:"counts"`
	Replicas []struct {
		Node        string `json:"node"`
		WrittenNext uint64 `json:"written_next"`
		DurableNext uint64 `json:"durable_next"`
		State       string `json:"state"`
	} `json:"replicas"`
}

// nodeSample is one node's answer at one tick.
type nodeSample struct {
	node    string
	err     string // the queue status could not be read
	status  queueStatusView
	metrics map[string]float64 // counter name: value, summed over its other labels
	// actors are the summaries of the queue's actors ("links/node2: ..."),
	// by path below the queue.
	actors []string
}

// timelineTick is one tick, or one harness event when note is set.
type timelineTick struct {
	at    time.Time
	note  string
	nodes []nodeSample
}

// timelineCounters are the per-queue counters each tick reads.
var timelineCounters = []string{"fibril_deliveries_total", "fibril_confirms_total", "fibril_lease_lapses_total"}

// timeline samples one queue on every node of a cluster.
type timeline struct {
	c      *procCluster
	queue  string
	start  time.Time
	client *http.Client

	mu    sync.Mutex
	ticks []timelineTick

	stop chan struct{}
	done chan struct{}
}

// startTimeline starts sampling queue on c's nodes; start is the trial's
// zero for the times it prints.
func startTimeline(c *procCluster, queue string, start time.Time) *timeline {
	tl := &timeline{c: c, queue: queue, start: start, client: &http.Client{Timeout: timelineEvery - 50*time.Millisecond},
		stop: make(chan struct{}), done: make(chan struct{})}
	go tl.run()
	return tl
}

func (tl *timeline) run() {
	defer close(tl.done)
	ticker := time.NewTicker(timelineEvery)
	defer ticker.Stop()
	for {
		tl.sampleOnce()
		select {
		case <-tl.stop:
			return
		case <-ticker.C:
		}
	}
}

// close stops the sampling; safe to call twice.
func (tl *timeline) close() {
	select {
	case <-tl.stop:
	default:
		close(tl.stop)
	}
	<-tl.done
}

// note records a harness event at now.
func (tl *timeline) note(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.ticks = append(tl.ticks, timelineTick{at: time.Now(), note: fmt.Sprintf(format, args...)})
}

// sampleOnce asks every node at once and records the tick.
func (tl *timeline) sampleOnce() {
	tick := timelineTick{at: time.Now(), nodes: make([]nodeSample, len(tl.c.nodes))}
	var wait sync.WaitGroup
	for i, n := range tl.c.nodes {
		wait.Add(1)
		go func() {
			defer wait.Done()
			tick.nodes[i] = tl.sampleNode(n)
		}()
	}
	wait.Wait()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.ticks = append(tl.ticks, tick)
}

func (tl *timeline) sampleNode(n *procNode) nodeSample {
	sample := nodeSample{node: n.id}
	ctx, cancel := context.WithTimeout(context.Background(), timelineEvery-50*time.Millisecond)
	defer cancel()
	body, err := tl.get(ctx, "http://"+n.httpAddress()+"/api/queues/"+tl.queue)
	if err == nil {
		err = json.Unmarshal(body, &sample.status)
	}
	if err != nil {
		sample.err = shortError(err)
		return sample
	}
	if body, err := tl.get(ctx, "http://"+n.httpAddress()+"/metrics"); err == nil {
		sample.metrics = queueCounters(body, tl.queue)
	}
	if body, err := tl.get(ctx, "http://"+n.httpAddress()+"/debug/actors?format=json"); err == nil {
		sample.actors = queueActorSummaries(body, tl.queue)
	}
	return sample
}

// actorTreeNode is the part of GET /debug/actors the timeline reads.
type actorTreeNode struct {
	Path     string           `json:"path"`
	Kind     string           `json:"kind"`
	Summary  string           `json:"summary"`
	Children []*actorTreeNode `json:"children"`
}

// queueActorSummaries lists "path: summary" for every actor below
// .../queues/QUEUE/ in a GET /debug/actors body, the path relative to the
// queue, in the tree's order.
func queueActorSummaries(body []byte, queue string) []string {
	var tree struct {
		Tree []*actorTreeNode `json:"tree"`
	}
	if json.Unmarshal(body, &tree) != nil {
		return nil
	}
	prefix := "queues/" + queue + "/"
	var out []string
	var walk func(nodes []*actorTreeNode)
	walk = func(nodes []*actorTreeNode) {
		for _, node := range nodes {
			if at := strings.Index(node.Path, prefix); at >= 0 && node.Kind != "group" {
				out = append(out, node.Path[at+len(prefix):]+": "+node.Summary)
			}
			walk(node.Children)
		}
	}
	walk(tree.Tree)
	return out
}

func (tl *timeline) get(ctx context.Context, url string) ([]byte, error) {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	response, err := tl.client.Do(request)
	if err != nil {
		return nil, err
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		return nil, err
	}
	if response.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", response.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// shortError keeps the end of an HTTP client error, which says what
// happened (a timeout, a refused connection).
func shortError(err error) string {
	text := err.Error()
	switch {
	case strings.Contains(text, "deadline exceeded"), strings.Contains(text, "Timeout"):
		return "no answer"
	case strings.Contains(text, "connection refused"):
		return "connection refused"
	}
	return text
}

// queueCounters sums each of timelineCounters over the lines of a
// Prometheus text exposition that name queue.
func queueCounters(body []byte, queue string) map[string]float64 {
	out := map[string]float64{}
	label := `queue="` + queue + `"`
	scanner := bufio.NewScanner(strings.NewReader(string(body)))
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.Contains(line, label) {
			continue
		}
		for _, name := range timelineCounters {
			if !strings.HasPrefix(line, name+"{") {
				continue
			}
			space := strings.LastIndexByte(line, ' ')
			value, err := strconv.ParseFloat(line[space+1:], 64)
			if err == nil {
				out[name] += value
			}
		}
	}
	return out
}

// snapshot copies the ticks in time order (a tick is stamped when it
// began and recorded when every node answered, so a note can come
// between).
func (tl *timeline) snapshot() []timelineTick {
	tl.mu.Lock()
	ticks := append([]timelineTick(nil), tl.ticks...)
	tl.mu.Unlock()
	sort.SliceStable(ticks, func(i, j int) bool { return ticks[i].at.Before(ticks[j].at) })
	return ticks
}

func (tl *timeline) offset(at time.Time) string {
	return fmt.Sprintf("+%6.1fs", at.Sub(tl.start).Seconds())
}

// write prints every tick, one line per node.
func (tl *timeline) write(w io.Writer) {
	fmt.Fprintf(w, "timeline of %s, every %v, times from the trial's start\n", tl.queue, timelineEvery)
	for _, tick := range tl.snapshot() {
		if tick.note != "" {
			fmt.Fprintf(w, "%s  == %s\n", tl.offset(tick.at), tick.note)
			continue
		}
		for i, sample := range tick.nodes {
			prefix := strings.Repeat(" ", len(tl.offset(tick.at)))
			if i == 0 {
				prefix = tl.offset(tick.at)
			}
			fmt.Fprintf(w, "%s  %s\n", prefix, sample.line())
			for _, summary := range sample.actors {
				fmt.Fprintf(w, "%s      %s\n", strings.Repeat(" ", len(prefix)), summary)
			}
		}
	}
}

// line is one node's sample for people.
func (s nodeSample) line() string {
	if s.err != "" {
		return fmt.Sprintf("%s: %s", s.node, s.err)
	}
	st := s.status
	var b strings.Builder
	fmt.Fprintf(&b, "%s: owner %s e%d written %d durable %d", s.node, st.Owner, st.Epoch, st.WrittenNext, st.DurableNext)
	if st.Owner == s.node {
		fmt.Fprintf(&b, " committed %d (written on %d, durable on %d)", st.CommittedNext, st.WrittenOn, st.DurableOn)
	}
	fmt.Fprintf(&b, " ready %d leased %d delayed %d", st.Counts.Ready, st.Counts.Leased, st.Counts.Delayed)
	if st.Fenced {
		b.WriteString(" FENCED")
	}
	for _, r := range st.Replicas {
		if r.Node == s.node || r.State == "" && r.WrittenNext == 0 && r.DurableNext == 0 {
			continue // a non-owner lists the other copies empty
		}
		state := r.State
		if state == "" {
			state = "-"
		}
		fmt.Fprintf(&b, " | %s %s w%d d%d", r.Node, state, r.WrittenNext, r.DurableNext)
	}
	if s.metrics != nil {
		fmt.Fprintf(&b, " | deliveries %.0f confirms %.0f lapses %.0f", s.metrics["fibril_deliveries_total"],
			s.metrics["fibril_confirms_total"], s.metrics["fibril_lease_lapses_total"])
	}
	return b.String()
}

// digestLag is how far, in records, a copy or the quorum frontier may
// trail the owner's log before the digest calls it behind: half a second
// of the compound trials' traffic.
const digestLag = 1000

// digest lists what looks wrong in the timeline: a replica its owner
// shows "in sync" while it trails the owner's log, a quorum frontier that
// trails the owner's log, and an owner that delivers nothing while
// messages are ready. Each finding held for at least two seconds and
// names its span in trial time.
func (tl *timeline) digest() []string {
	type span struct {
		name        string
		first, last time.Time
		detail      string
	}
	open := map[string]*span{}
	var spans []*span
	hold := func(name string, at time.Time, detail string) {
		s := open[name]
		if s != nil && at.Sub(s.last) > 2*timelineEvery {
			spans, s = append(spans, s), nil
		}
		if s == nil {
			s = &span{name: name, first: at}
			open[name] = s
		}
		s.last, s.detail = at, detail
	}
	lastDeliveries := map[string]float64{}
	for _, tick := range tl.snapshot() {
		for _, sample := range tick.nodes {
			st := sample.status
			if sample.err != "" || st.Owner != sample.node {
				continue
			}
			for _, r := range st.Replicas {
				if r.Node != sample.node && strings.HasPrefix(r.State, "in sync") && r.WrittenNext+digestLag < st.WrittenNext {
					hold(fmt.Sprintf("%s shown %q by %s (epoch %d)", r.Node, r.State, sample.node, st.Epoch), tick.at,
						fmt.Sprintf("the copy at %d, the owner's log at %d, committed %d", r.WrittenNext, st.WrittenNext,
							st.CommittedNext))
				}
			}
			if st.CommittedNext+digestLag < st.WrittenNext {
				hold(fmt.Sprintf("%s's quorum frontier behind its log (epoch %d)", sample.node, st.Epoch), tick.at,
					fmt.Sprintf("committed %d, written %d", st.CommittedNext, st.WrittenNext))
			}
			deliveries, known := sample.metrics["fibril_deliveries_total"]
			if previous, seen := lastDeliveries[sample.node]; known && seen && st.Counts.Ready > 0 && deliveries == previous {
				hold(fmt.Sprintf("%s delivered nothing while messages were ready (epoch %d)", sample.node, st.Epoch), tick.at,
					fmt.Sprintf("ready %d leased %d, deliveries %.0f, lapses %.0f", st.Counts.Ready, st.Counts.Leased,
						deliveries, sample.metrics["fibril_lease_lapses_total"]))
			}
			if known {
				lastDeliveries[sample.node] = deliveries
			}
		}
	}
	for _, s := range open {
		spans = append(spans, s)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].first.Before(spans[j].first) })
	var out []string
	for _, s := range spans {
		if s.last.Sub(s.first) < 2*time.Second {
			continue
		}
		out = append(out, fmt.Sprintf("%s from %s to %s (%.1f s); last: %s", s.name, tl.offset(s.first),
			tl.offset(s.last), s.last.Sub(s.first).Seconds(), s.detail))
	}
	return out
}

// nodeLogDigest summarizes a node log's warnings and errors: each
// distinct message with its count and its first and last lines.
func nodeLogDigest(path string, limit int) []string {
	file, err := os.Open(path)
	if err != nil {
		return []string{err.Error()}
	}
	defer file.Close()
	type seen struct {
		count       int
		first, last string
	}
	byMessage := map[string]*seen{}
	var order []string
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") || startupWarning(line) {
			continue
		}
		message := line
		if _, rest, ok := strings.Cut(line, "msg="); ok {
			message = rest
			if strings.HasPrefix(rest, `"`) {
				if end := strings.Index(rest[1:], `"`); end >= 0 {
					message = rest[1 : end+1]
				}
			} else if space := strings.IndexByte(rest, ' '); space >= 0 {
				message = rest[:space]
			}
		}
		s := byMessage[message]
		if s == nil {
			s = &seen{first: line}
			byMessage[message] = s
			order = append(order, message)
		}
		s.count++
		s.last = line
	}
	sort.SliceStable(order, func(i, j int) bool { return byMessage[order[i]].count > byMessage[order[j]].count })
	var out []string
	for _, message := range order[:min(limit, len(order))] {
		s := byMessage[message]
		out = append(out, fmt.Sprintf("%dx %q\n      first: %s\n      last:  %s", s.count, message, clipLine(s.first),
			clipLine(s.last)))
	}
	return out
}

// startupWarning reports whether line is one of the warnings every node
// of a test cluster logs at each start (plain-text listeners, allowed on
// purpose).
func startupWarning(line string) bool {
	return strings.Contains(line, "(allowed explicitly)") || strings.Contains(line, "bound to a non-loopback address")
}

func clipLine(line string) string {
	if len(line) > 400 {
		return line[:400] + "..."
	}
	return line
}

// writeTimeline writes the timeline to timeline.txt next to the trial's
// node logs and returns its path (a kept trial that passed has one too:
// FIBRIL_KEEP_TRIALS=1 keeps passing trials for reading).
func writeTimeline(t *testing.T, c *procCluster, tl *timeline) string {
	path := filepath.Join(c.dir, "timeline.txt")
	file, err := os.Create(path)
	if err != nil {
		t.Logf("timeline: %v", err)
		return path
	}
	tl.write(file)
	_ = file.Close()
	return path
}

// reportFailedTrial writes the timeline next to the trial's node logs,
// prints its digest and each node's warnings, and copies the logs and the
// timeline to the test's artifact directory when -artifacts is set.
func reportFailedTrial(t *testing.T, c *procCluster, tl *timeline) {
	path := writeTimeline(t, c, tl)
	t.Logf("the trial's timeline: %s; node logs: %s", path, filepath.Join(c.dir, "node*.log"))
	for _, finding := range tl.digest() {
		t.Logf("timeline: %s", finding)
	}
	for _, n := range c.nodes {
		t.Logf("%s's warnings and errors (most frequent first):\n    %s", n.id,
			strings.Join(nodeLogDigest(n.logPath, 8), "\n    "))
	}
	if artifacts := flag.Lookup("test.artifacts"); artifacts != nil && artifacts.Value.String() == "true" {
		dir := t.ArtifactDir()
		files := []string{path, c.config, filepath.Join(c.dir, "lost.txt")} // lost.txt when a trial wrote one
		for _, n := range c.nodes {
			files = append(files, n.logPath)
		}
		for _, source := range files {
			if data, err := os.ReadFile(source); err == nil {
				_ = os.WriteFile(filepath.Join(dir, filepath.Base(source)), data, 0o644)
			}
		}
		t.Logf("copied the timeline, the config and the node logs to %s", dir)
	}
}
