package acceptance

// 11. Compound schedules (issue 27): the next fault comes while the
// cluster is still recovering from the last one. The classes of
// cluster_faults_test.go wait, after each fault, until every node agrees
// on the owners again; a compound schedule never waits for that, nor for
// every copy to be in sync. Each trial runs on a fresh cluster of three
// processes (cluster_trial_test.go starts it and places the queue) with
// one queue, in one of two modes: a `majority_durable` durable queue and a
// `replica_buffered:2` buffered queue.
//
// The load is the issue's: two publishers at 1,000 messages per second
// each (256-byte bodies, a window of 256 publishes), two competing
// consumers acking every delivery at once.
//
// The schedule, drawn from the trial's seed: a gap of 0.5-3 s, then a
// fault on the queue's owner or on a follower (even odds), taken from the
// highest epoch any node names at that moment: SIGKILL, restarted on its
// data dir after 0.5-3 s, or SIGSTOP held for 5-10 s (even odds); then the
// next gap, counted from the restart's ready line or the SIGCONT. Faults
// come until the trial's length has passed and at least three have run.
//
// The drain, with every node up: publishing stops, every publish gets its
// outcome, and the trial waits (at most 60 s) until every confirmed id
// has been delivered and acked, then until the queue is empty. A trial
// fails when any confirmed message was not delivered by then, whatever
// its copies hold on disk, and on everything the checker finds. Each
// trial reports confirmed, delivered, lost (confirmed, never delivered),
// unexpected and unflagged duplicates, and per failover the time from the
// fault to the first new confirm. A timeline of every node's view of the
// queue (cluster_timeline_test.go) runs through the trial and is dumped
// when it fails.
//
// `go test ./acceptance` runs one 12-second trial per mode; FIBRIL_SOAK=1
// runs 20 trials of 30 seconds per mode. FIBRIL_SEED replays a schedule
// (trial k draws from the seed + k); FIBRIL_CLUSTER_COMPOUND_TRIALS,
// FIBRIL_CLUSTER_COMPOUND_SECONDS and FIBRIL_CLUSTER_COMPOUND_RATE set the
// trial count per mode, the length and the rate per publisher.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// compoundMode is one queue the compound classes run on.
type compoundMode struct {
	name  string // the sub-test's name
	queue clusterQueue
	// salt is mixed into each trial's seed, so that the two modes draw
	// different schedules from one FIBRIL_SEED.
	salt uint64
}

// compoundModes are the two queues.
var compoundModes = []compoundMode{
	{name: "majority_durable", queue: clusterQueue{name: "compound-durable", mode: wire.ModeDurable, policy: "majority_durable"}},
	{name: "replica_buffered-2", queue: clusterQueue{name: "compound-buffered", mode: wire.ModeBuffered,
		policy: "replica_buffered:2"}, salt: 0x5bd1e995},
}

// random is the trial's random source for trialSeed.
func (m compoundMode) random(trialSeed uint64) *rand.Rand { return newRandom(trialSeed ^ m.salt) }

// compoundMinFaults is the fewest faults a compound trial runs, however
// short it is.
const compoundMinFaults = 3

// compoundDrainTimeout bounds the wait, once every node is up and
// publishing has stopped, for every confirmed id to be delivered.
const compoundDrainTimeout = 60 * time.Second

// envInt returns the variable's positive integer value, or fallback when
// it is unset.
func envInt(t *testing.T, variable string, fallback int) int {
	text := os.Getenv(variable)
	if text == "" {
		return fallback
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", variable, text)
	}
	return n
}

// compoundTraffic is the load on one queue.
func compoundTraffic(t *testing.T, queue clusterQueue) clusterLoadConfig {
	return clusterLoadConfig{queues: []clusterQueue{queue}, payloadBytes: 256,
		ratePerQueue: float64(envInt(t, "FIBRIL_CLUSTER_COMPOUND_RATE", 1000)), prefetch: 64,
		sampleEvery: 100 * time.Millisecond}
}

// TestClusterCompound runs the compound schedules on both modes.
func TestClusterCompound(t *testing.T) {
	if !failoverEnabled() {
		t.Skip(waitsForFailover)
	}
	hosts := upHosts(t, 3)
	seed := testSeed(t)
	count := trials(t, "FIBRIL_CLUSTER_COMPOUND_TRIALS", 1, 20)
	seconds := 12
	if soak() {
		seconds = 30
	}
	length := time.Duration(envInt(t, "FIBRIL_CLUSTER_COMPOUND_SECONDS", seconds)) * time.Second
	for _, mode := range compoundModes {
		t.Run(mode.name, func(t *testing.T) {
			row := ClusterRow{Class: "11. compound schedules: " + mode.queue.policy}
			for trial := range count {
				trialSeed := seed + uint64(trial)
				replay := fmt.Sprintf("FIBRIL_SEED=%d FIBRIL_CLUSTER_COMPOUND_TRIALS=1 FIBRIL_CLUSTER_COMPOUND_SECONDS=%d "+
					"go test -run 'TestClusterCompound/%s' ./acceptance", trialSeed, int(length.Seconds()), mode.name)
				ok := t.Run(fmt.Sprintf("trial-%d", trial), func(t *testing.T) {
					t.Logf("seed %d; replay this trial alone with %s", trialSeed, replay)
					r := startCompound(t, hosts, fmt.Sprintf("%s trial %d", row.Class, trial), mode.random(trialSeed), mode.queue)
					r.runSchedule(length)
					row.AddTrial(r.finish())
				})
				if !ok {
					t.Logf("trial %d failed; replay it alone with %s", trial, replay)
				}
			}
			clusterSummary.Add(row)
		})
	}
}

// compoundRun is one running compound trial: a process trial with one
// queue and its timeline.
type compoundRun struct {
	*trialRun
	queue    string
	start    time.Time
	timeline *timeline
	faults   int
}

// startCompound starts a fresh cluster with the queue placed, its load
// and its timeline; a failed trial dumps the timeline when it ends.
func startCompound(t *testing.T, hosts *netHosts, class string, random *rand.Rand, queue clusterQueue) *compoundRun {
	t.Helper()
	r := startTrial(t, hosts, class, random, procClusterOptions{}, compoundTraffic(t, queue))
	cr := &compoundRun{trialRun: r, queue: r.queues[0], start: time.Now()}
	cr.timeline = startTimeline(r.c, cr.queue, cr.start)
	t.Cleanup(func() {
		cr.timeline.close()
		switch {
		case t.Failed():
			reportFailedTrial(t, r.c, cr.timeline)
		case os.Getenv("FIBRIL_KEEP_TRIALS") == "1":
			writeTimeline(t, r.c, cr.timeline)
		}
	})
	t.Logf("%s: queue %s (%s) on %s, %v per publisher", class, cr.queue, queue.policy, r.roles.owners[cr.queue],
		compoundTraffic(t, queue).ratePerQueue)
	return cr
}

// since is d's time from the trial's start, for people.
func (r *compoundRun) since(at time.Time) string {
	return fmt.Sprintf("%.1f s", at.Sub(r.start).Seconds())
}

// ownerView is what the nodes say of the queue's owner at one moment.
type ownerView struct {
	owner   string
	epoch   uint64
	settled bool // every node answered and named that owner and epoch
}

// ownerNow asks every node at once for its view of the cluster and takes
// the owner of the highest epoch any node names; nodes that do not answer
// within a second are left out (it never waits for the cluster to agree).
func (r *compoundRun) ownerNow() ownerView {
	type answer struct {
		owner string
		epoch uint64
		ok    bool
	}
	answers := make(chan answer, len(r.c.nodes))
	for _, n := range r.c.nodes {
		go func() {
			view, err := n.view()
			owner, epoch := view.owner(r.queue)
			answers <- answer{owner: owner, epoch: epoch, ok: err == nil && owner != ""}
		}()
	}
	var got []answer
	timeout := time.After(time.Second)
collect:
	for range r.c.nodes {
		select {
		case a := <-answers:
			if a.ok {
				got = append(got, a)
			}
		case <-timeout:
			break collect
		}
	}
	var view ownerView
	for _, a := range got {
		if a.epoch > view.epoch {
			view.owner, view.epoch = a.owner, a.epoch
		}
	}
	view.settled = len(got) == len(r.c.nodes)
	for _, a := range got {
		view.settled = view.settled && a.owner == view.owner && a.epoch == view.epoch
	}
	if view.owner == "" { // nobody answered: the last agreement
		view.owner, view.epoch = r.roles.owners[r.queue], r.roles.epochs[r.queue]
	}
	return view
}

// runSchedule injects compound faults until length has passed and at
// least compoundMinFaults ran.
func (r *compoundRun) runSchedule(length time.Duration) {
	r.t.Helper()
	begin := time.Now()
	for r.faults < compoundMinFaults || time.Since(begin) < length {
		gap := time.Duration(500+r.random.IntN(2500)) * time.Millisecond
		toOwner := r.random.IntN(2) == 0
		kill := r.random.IntN(2) == 0
		follower := r.random.IntN(len(r.c.nodes) - 1)
		var down time.Duration
		if kill {
			down = time.Duration(500+r.random.IntN(2500)) * time.Millisecond
		} else {
			down = time.Duration(5000+r.random.IntN(5000)) * time.Millisecond
		}
		time.Sleep(gap)
		r.injectCompound(toOwner, kill, follower, down)
	}
}

// injectCompound runs one fault: a kill restarted after down, or a pause
// held for down, on the owner or on the follower-th other node.
func (r *compoundRun) injectCompound(toOwner, kill bool, follower int, down time.Duration) {
	r.t.Helper()
	view := r.ownerNow()
	owner := r.c.node(view.owner)
	victim, role := owner, fmt.Sprintf("owner at epoch %d", view.epoch)
	if !toOwner {
		victim, role = r.others(owner)[follower], "follower"
	}
	name := fmt.Sprintf("SIGSTOP %s for %v", describe(victim, role), down.Round(time.Millisecond))
	if kill {
		name = fmt.Sprintf("SIGKILL %s, restarted after %v", describe(victim, role), down.Round(time.Millisecond))
	}
	fault := Fault{Class: r.class, Name: name, Nodes: []string{victim.id}}
	if toOwner {
		fault.Failover = []string{r.queue}
	}
	confirmedBefore := r.load.confirmedSoFar()
	index := r.h.FaultStarted(fault)
	// A fault on the owner ends the queue's life; so does one while the
	// nodes disagree on the owner, which may then be the victim. The life
	// ends after the fault is recorded: the checker takes a fault that
	// began no later than a life as the one that began it.
	if toOwner || !view.settled {
		r.h.QueueLifeEnded(r.queue, EndFailover, time.Time{})
		r.h.QueueLifeStarted(r.queue)
	}
	began := time.Now()
	r.timeline.note("%s", name)
	r.faults++
	if kill {
		victim.kill()
	} else {
		victim.pause()
	}
	time.Sleep(down)
	if kill {
		if err := victim.restart(); err != nil {
			r.t.Fatalf("restarting %s: %v", victim.id, err)
		}
	} else {
		victim.resume()
	}
	r.h.FaultEnded(index)
	healed := "restarted and serving"
	if !kill {
		healed = "resumed"
	}
	r.timeline.note("%s %s", victim.id, healed)
	settled := ""
	if !view.settled {
		settled = " (the nodes did not agree on the owner when it began)"
	}
	r.t.Logf("fault %d at %s: %s%s; %s after %v; %d confirms meanwhile", r.faults, r.since(began), name, settled, healed,
		time.Since(began).Round(time.Millisecond), r.load.confirmedSoFar()-confirmedBefore)
}

// finish heals everything, drains with every node up, checks and stops
// the nodes. Unlike the classes' finish, a queue that does not drain does
// not stop the trial before the checker ran: what was lost is reported.
func (r *compoundRun) finish() ClusterTrial {
	r.t.Helper()
	if err := r.c.hosts.healAll(); err != nil {
		r.t.Fatal(err)
	}
	r.awaitEveryNodeUp()
	confirmedBefore := r.load.confirmedSoFar()
	r.calm(time.Second)
	if r.load.confirmedSoFar() == confirmedBefore {
		r.t.Errorf("%s: nothing was confirmed in the second after every node was up", r.class)
	}
	r.timeline.note("publishing stops")
	r.load.stopPublishingAndWait()
	r.timeline.note("every publish has its outcome; waiting for every confirmed id to be delivered")
	tally := r.awaitConfirmedDelivered(compoundDrainTimeout)
	r.timeline.note("drain: %s", tally)
	if len(tally.lost) == 0 {
		r.awaitEmpty(15 * time.Second)
	}
	record := r.h.Record()
	trial := checkAndReport(r.t, record, r.load)
	r.checkOwnerChanges(record)
	var unexpected, unflagged int
	for _, result := range trial.Results {
		unexpected += result.Unexpected
		unflagged += result.UnflaggedDuplicates
	}
	r.t.Logf("%s: %d faults; confirmed %d, delivered %d, lost %d (confirmed, never delivered), unexpected %d, "+
		"unflagged duplicates %d", r.class, r.faults, tally.confirmed, tally.delivered, len(tally.lost), unexpected, unflagged)
	if len(tally.lost) > 0 {
		r.writeLost(record, tally.lost)
		r.t.Errorf("%s: %d confirmed messages were not delivered within %v of the drain with every node up "+
			"(first: %v)", r.class, len(tally.lost), compoundDrainTimeout, tally.lost[:min(10, len(tally.lost))])
	}
	for _, exit := range r.c.takeSelfExits() {
		r.t.Errorf("a node exited without the harness asking (the watcher restarted it): %s", exit)
	}
	r.timeline.close()
	if !r.t.Failed() {
		// What the timeline shows judges nothing, but a replica shown in
		// sync far behind is worth seeing in a trial that passed too.
		for _, finding := range r.timeline.digest() {
			r.t.Logf("timeline (not judged): %s", finding)
		}
	}
	r.load.close()
	r.c.stopAll()
	return trial
}

// awaitEveryNodeUp makes sure every node runs and waits (at most 60 s)
// until each answers and they agree on the owners; a disagreement is
// logged, not fatal: the drain decides.
func (r *compoundRun) awaitEveryNodeUp() {
	r.t.Helper()
	for _, n := range r.c.nodes {
		n.mu.Lock()
		paused := n.paused
		n.mu.Unlock()
		if paused {
			n.resume()
		}
		if !n.running() {
			if err := n.restart(); err != nil {
				r.t.Fatalf("restarting %s for the drain: %v", n.id, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	roles, err := r.c.converge(ctx, r.queues)
	if err != nil {
		r.t.Logf("%s: with every node up: %v", r.class, err)
		r.timeline.note("every node up; no agreement: %v", err)
		return
	}
	r.roles = roles
	r.timeline.note("every node up; %s owns %s at epoch %d", roles.owners[r.queue], r.queue, roles.epochs[r.queue])
}

// drainTally is where the drain stands: confirmed ids, how many of them
// were delivered, and those never delivered.
type drainTally struct {
	confirmed, delivered, unacked int
	lost                          []string
}

func (d drainTally) String() string {
	return fmt.Sprintf("confirmed %d, delivered %d, not delivered %d, delivered but not acked %d", d.confirmed,
		d.delivered, len(d.lost), d.unacked)
}

// tally counts the drain from the history.
func (r *compoundRun) tally() drainTally {
	record := r.h.Record()
	delivered := map[string]bool{}
	for _, d := range record.Deliveries {
		if d.Queue == r.queue {
			delivered[d.ID] = true
		}
	}
	acked := map[string]bool{}
	for _, a := range record.Acks {
		if a.Queue == r.queue {
			acked[a.ID] = true
		}
	}
	var out drainTally
	for _, p := range record.Publishes {
		if p.Queue != r.queue || p.Outcome != OutcomeConfirmed {
			continue
		}
		out.confirmed++
		switch {
		case !delivered[p.ID]:
			out.lost = append(out.lost, p.ID)
		case !acked[p.ID]:
			out.delivered++
			out.unacked++
		default:
			out.delivered++
		}
	}
	return out
}

// writeLost writes every confirmed id never delivered to lost.txt in the
// trial's directory, with its send and confirm times from the trial's
// start, so they can be looked for in the copies' segment files.
func (r *compoundRun) writeLost(record Record, lost []string) {
	missing := map[string]bool{}
	for _, id := range lost {
		missing[id] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "confirmed, never delivered: id, sent and confirmed (s from the trial's start), boundary\n")
	for _, p := range record.Publishes {
		if missing[p.ID] {
			fmt.Fprintf(&b, "%s %.3f %.3f %s\n", p.ID, p.Sent.Sub(r.start).Seconds(), p.At.Sub(r.start).Seconds(), p.Boundary)
		}
	}
	path := filepath.Join(r.c.dir, "lost.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		r.t.Logf("lost ids: %v", err)
		return
	}
	r.t.Logf("the lost ids, with their send and confirm times: %s", path)
}

// awaitConfirmedDelivered waits until every confirmed id was delivered and
// acked, or timeout passes, and returns the tally.
func (r *compoundRun) awaitConfirmedDelivered(timeout time.Duration) drainTally {
	deadline := time.Now().Add(timeout)
	for {
		tally := r.tally()
		if len(tally.lost)+tally.unacked == 0 || time.Now().After(deadline) {
			return tally
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// awaitEmpty waits until the queue holds nothing ready, leased or delayed
// three reads in a row; a queue that stays busy fails the trial (what it
// holds was stored and must be delivered too).
func (r *compoundRun) awaitEmpty(timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	quiet := 0
	last := ""
	for quiet < 3 {
		if time.Now().After(deadline) {
			r.t.Errorf("%s: every confirmed id was delivered, but %s did not drain within %v: %s", r.class, r.queue,
				timeout, last)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := r.load.sampler.QueueInfo(ctx, r.queue)
		cancel()
		switch {
		case err != nil:
			quiet, last = 0, err.Error()
		case info.Ready+info.Leased+info.Delayed > 0:
			quiet, last = 0, fmt.Sprintf("ready %d leased %d delayed %d", info.Ready, info.Leased, info.Delayed)
		default:
			quiet++
		}
		time.Sleep(50 * time.Millisecond)
	}
}
