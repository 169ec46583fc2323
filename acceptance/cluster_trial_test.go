package acceptance

// One trial of a fault class on a cluster of processes, from a fresh
// cluster to a verdict:
//
//  1. start the nodes (fresh data dirs), wait until they agree on a
//     catalog leader;
//  2. place the test queues (clusterQueueSpecs) on one node that is not
//     the catalog leader: each is declared, under a new name, until its
//     owner is that node (the other declares are deleted afterwards), so
//     "a node that owns none of the test's queues" (nor any queue) exists,
//     and so does a catalog leader that owns none of them;
//  3. start the traffic (cluster_load_test.go) and let it run calm;
//  4. run the class's faults one at a time (the schedule: seeded, never
//     overlapping, a calm gap before each), each resolved against the
//     roles at that moment (owner, followers, catalog leader) and recorded
//     as a Fault; after each the harness waits until every node answers
//     and agrees on the catalog and the owners again;
//  5. heal everything, let traffic run calm, drain, check, stop every node
//     cleanly (exit status 0).
//
// A fault that hits the owner of test queues (kill, pause, cut-off,
// asymmetric cut involving it, wipe) ends those queues' lives at its start
// (EndFailover) and, when another owner must take over, lists them in
// Fault.Failover for the timings. The trial fails on any loss or broken
// rule, on a failover with no service after it, on a node that exited on
// its own, and, without failover, on any owner change the sampler saw.
// With failover each queue moves on its own, so after one the test queues
// may have different owners: roles are then taken per queue (rolesNow).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

// trialRun is one running trial.
type trialRun struct {
	t        *testing.T
	random   *rand.Rand
	class    string
	c        *procCluster
	h        *History
	load     *clusterLoad
	admin    *client.Client
	queues   []string
	roles    agreement
	failover bool // failover sub-cases run
}

// trialTraffic is the traffic of process trials.
func trialTraffic() clusterLoadConfig {
	return clusterLoadConfig{payloadBytes: 128, ratePerQueue: 100, prefetch: 32, sampleEvery: 20 * time.Millisecond,
		pauseEvery: 200 * time.Millisecond, pauseFor: 150 * time.Millisecond}
}

// startTrial runs steps 1-3 of the file comment. The queues placed are
// traffic.queues when it names any, else clusterQueueSpecs.
func startTrial(t *testing.T, hosts *netHosts, class string, random *rand.Rand, options procClusterOptions,
	traffic clusterLoadConfig) *trialRun {
	t.Helper()
	c := newProcCluster(t, hosts, class, options)
	c.startAll()
	r := &trialRun{t: t, random: random, class: class, c: c, h: NewHistory(), failover: failoverEnabled()}
	r.admin = dialClient(t, clusterLoadConfig{addresses: c.addresses()}.clientOptions("admin", 0, &errorLog{}, &atomic.Int64{}))
	t.Cleanup(func() { _ = r.admin.Close() })
	roles := r.converge(nil)
	var candidates []string
	for _, n := range c.nodes {
		if n.id != roles.leader {
			candidates = append(candidates, n.id)
		}
	}
	target := candidates[random.IntN(len(candidates))]
	specs := traffic.queues
	if len(specs) == 0 {
		specs = clusterQueueSpecs
	}
	placed := r.placeQueuesOn(target, specs)
	traffic.queues, traffic.addresses = placed, c.addresses()
	for _, q := range placed {
		r.queues = append(r.queues, q.name)
	}
	r.roles = r.converge(nil)
	for _, queue := range r.queues {
		if r.roles.owners[queue] != target {
			t.Fatalf("%s is owned by %s, placed on %s", queue, r.roles.owners[queue], target)
		}
	}
	r.load = startClusterLoad(t, r.h, traffic)
	r.calm(time.Second)
	return r
}

// placeQueuesOn declares each spec until a declare lands on target and
// returns the queues that did.
func (r *trialRun) placeQueuesOn(target string, specs []clusterQueue) []clusterQueue {
	r.t.Helper()
	return placeQueuesOn(r.t, r.admin, target, specs, len(r.c.nodes))
}

// placeQueuesOn declares each spec, under the names spec-0, spec-1, ...,
// until one is owned by target. The declares that landed elsewhere only
// steered placement: they are deleted once every spec is placed (each
// would keep a coordination shard busy on every node).
func placeQueuesOn(t *testing.T, admin *client.Client, target string, specs []clusterQueue, nodes int) []clusterQueue {
	t.Helper()
	var placed []clusterQueue
	var fillers []string
	defer func() {
		for _, filler := range fillers {
			var earlier error // a retryable answer of an attempt that may have deleted it
			var err error
			for unknown := 0; ; unknown++ {
				err = retrying(func(ctx context.Context) error {
					_, err := admin.DeleteQueue(ctx, filler)
					if earlier != nil && client.CodeOf(err) == wire.CodeUnknownQueue {
						// An earlier attempt deleted it; its answer said otherwise.
						t.Logf("delete filler queue %s: deleted by an attempt answered %v", filler, earlier)
						return nil
					}
					earlier = err
					return err
				})
				if client.CodeOf(err) != wire.CodeUnknownQueue || unknown == 50 {
					break
				}
				// Its declare was confirmed, but the node that took the delete
				// may not have applied it yet (seen under load;
				// docs/durability.md, "Found by the cluster suite").
				t.Logf("delete filler queue %s right after its declare: %v; again", filler, err)
				earlier = nil
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("delete filler queue %s: %v", filler, err)
			}
		}
	}()
	for _, spec := range specs {
		for attempt := 0; ; attempt++ {
			if attempt == 3*nodes {
				t.Fatalf("%d declares of %s landed on other nodes than %s", attempt, spec.name, target)
			}
			candidate := spec
			candidate.name = fmt.Sprintf("%s-%d", spec.name, attempt)
			declareClusterQueues(t, admin, []clusterQueue{candidate})
			info, err := queueInfo(admin, candidate.name)
			if err != nil {
				t.Fatalf("info %s: %v", candidate.name, err)
			}
			if info.Owner == target {
				placed = append(placed, candidate)
				break
			}
			fillers = append(fillers, candidate.name)
		}
	}
	return placed
}

// converge waits up to 60 s until the nodes agree (and fails the test
// otherwise) and returns the roles; queues nil means the trial's queues.
func (r *trialRun) converge(queues []string) agreement {
	r.t.Helper()
	if queues == nil {
		queues = r.queues
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	roles, err := r.c.converge(ctx, queues)
	if err != nil {
		for _, n := range r.c.nodes {
			r.t.Logf("%s log tail:\n%s", n.id, n.logTail())
		}
		r.t.Fatalf("%s: %v", r.class, err)
	}
	return roles
}

// calm lets the traffic run for d without faults.
func (r *trialRun) calm(d time.Duration) { time.Sleep(d) }

// calmGap is the seeded calm gap before a fault.
func (r *trialRun) calmGap() time.Duration {
	return time.Duration(500+r.random.IntN(1000)) * time.Millisecond
}

// roleNodes are the trial's nodes by role at one moment.
type roleNodes struct {
	owner     *procNode
	leader    *procNode
	followers []*procNode // every node but the owner; the pure follower (not leader) first
}

// The test queues start on one owner; each queue fails over on its own
// (its own coordination shard runs its recovery), so after a failover they
// may be spread. The owner is then the node that owns the most of them
// (ties: the owner of the first), and a "follower" may own some too.
func (r *trialRun) rolesNow() roleNodes {
	r.roles = r.converge(nil)
	owner := r.roles.owners[r.queues[0]]
	counts := map[string]int{}
	for _, queue := range r.queues {
		counts[r.roles.owners[queue]]++
	}
	for node, count := range counts {
		if count > counts[owner] {
			owner = node
		}
	}
	if len(counts) > 1 {
		r.t.Logf("the test queues are spread over %d owners: %v", len(counts), r.roles.owners)
	}
	roles := roleNodes{owner: r.c.node(owner), leader: r.c.node(r.roles.leader)}
	for _, n := range r.c.nodes {
		if n.id != owner && n.id != r.roles.leader {
			roles.followers = append(roles.followers, n)
		}
	}
	if r.roles.leader != owner {
		roles.followers = append(roles.followers, roles.leader)
	}
	return roles
}

// ownedBy returns the test queues node owns.
func (r *trialRun) ownedBy(node *procNode) []string {
	var out []string
	for _, queue := range r.queues {
		if r.roles.owners[queue] == node.id {
			out = append(out, queue)
		}
	}
	return out
}

// faultPlan is one fault to inject.
type faultPlan struct {
	name  string      // for people, with the nodes' ids
	nodes []*procNode // the nodes it hits
	// touchesOwner: the fault involves the owner of test queues (their
	// lives end at its start); expectsFailover: another owner must take
	// over (the queues are listed for the failover timings). Whatever the
	// plan says, a fault on a node ends the lives of the test queues that
	// node owns (queues spread after a failover), and a fault that takes
	// the node out (kill, pause, cut-off, isolation, wipe: outage) lists
	// them for the timings.
	touchesOwner, expectsFailover, outage bool
	apply                                 func() error
	hold                                  time.Duration
	heal                                  func() error
}

// inject runs one fault after a calm gap, and waits for the cluster to
// agree again after healing it.
func (r *trialRun) inject(plan faultPlan) {
	r.t.Helper()
	r.calm(r.calmGap())
	var ids []string
	var owned []string
	for _, n := range plan.nodes {
		ids = append(ids, n.id)
		owned = append(owned, r.ownedBy(n)...)
	}
	fault := Fault{Class: r.class, Name: plan.name, Nodes: ids}
	if plan.expectsFailover || plan.outage {
		fault.Failover = owned
	}
	confirmedBefore := r.load.confirmedSoFar()
	index := r.h.FaultStarted(fault)
	if plan.touchesOwner || len(owned) > 0 {
		for _, queue := range owned {
			r.h.QueueLifeEnded(queue, EndFailover, time.Time{})
			r.h.QueueLifeStarted(queue)
		}
	}
	began := time.Now()
	if err := plan.apply(); err != nil {
		r.t.Fatalf("%s: %v", plan.name, err)
	}
	time.Sleep(plan.hold)
	if plan.heal != nil {
		if err := plan.heal(); err != nil {
			r.t.Fatalf("healing %s: %v", plan.name, err)
		}
	}
	healed := time.Since(began)
	r.roles = r.converge(nil)
	r.h.FaultEnded(index)
	r.t.Logf("%s: %s, healed after %v, agreed again after %v; %d confirms meanwhile", r.class, plan.name,
		healed.Round(time.Millisecond), time.Since(began).Round(time.Millisecond), r.load.confirmedSoFar()-confirmedBefore)
}

// finish runs step 5 of the file comment and returns the verdict.
func (r *trialRun) finish() ClusterTrial {
	r.t.Helper()
	if err := r.c.hosts.healAll(); err != nil {
		r.t.Fatal(err)
	}
	r.converge(nil)
	confirmedBefore := r.load.confirmedSoFar()
	r.calm(time.Second)
	r.load.drain(90 * time.Second)
	if r.load.confirmedSoFar() == confirmedBefore {
		r.t.Errorf("%s: nothing was confirmed in the calm after the last fault", r.class)
	}
	record := r.h.Record()
	trial := checkAndReport(r.t, record, r.load)
	r.checkOwnerChanges(record)
	for _, exit := range r.c.takeSelfExits() {
		r.t.Errorf("a node exited without the harness asking (the watcher restarted it): %s", exit)
	}
	r.load.close()
	r.c.stopAll()
	return trial
}

// checkOwnerChanges reports owner changes the sampler saw that no fault
// touching the owner explains; without failover any change fails.
func (r *trialRun) checkOwnerChanges(record Record) {
	changes := r.load.ownerChanges()
	for _, queue := range r.queues {
		for _, change := range changes[queue] {
			explained := slices.ContainsFunc(record.Faults, func(f Fault) bool {
				return len(f.Failover) > 0 && slices.Contains(f.Failover, queue) && !change.at.Before(f.Start)
			})
			message := fmt.Sprintf("%s: owner %s at epoch %d from %s on", queue, change.owner, change.epoch,
				change.at.Format("15:04:05.000"))
			switch {
			case explained:
				continue
			case !r.failover:
				r.t.Errorf("an owner changed with no fault on an owner: %s", message)
			default:
				r.t.Logf("an owner changed with no fault on an owner (a false reassignment): %s", message)
			}
		}
	}
}

// subcase is one way of injecting a class's fault.
type subcase struct {
	name string
	// needsFailover: the sub-case runs only with failoverEnabled; waits
	// says why, when the reason is more particular than waitsForFailover.
	needsFailover bool
	waits         string
	plan          func(r *trialRun, roles roleNodes) faultPlan
}

// waitReason is why the sub-case does not run now, or "".
func (sc subcase) waitReason() string {
	switch {
	case !sc.needsFailover || failoverEnabled():
		return ""
	case sc.waits != "":
		return sc.waits
	default:
		return waitsForFailover
	}
}

// faultClass is one of the ten classes of issue 16 on processes.
type faultClass struct {
	title            string
	shortTrials      int
	soakTrials       int
	trialsVariable   string
	options          procClusterOptions
	subcases         []subcase
	faultsPerSubcase int // faults of each sub-case per trial (default 1)
	// shortFaultsPerSubcase replaces faultsPerSubcase outside soak runs
	// (0: the same).
	shortFaultsPerSubcase int
}

// shortSubcasesPerTrial bounds the sub-cases a trial runs outside soak
// runs, drawn by the trial's seed (so successive runs cover them all and
// `make test` stays short); FIBRIL_CLUSTER_ALL_SUBCASES=1 runs every one.
const shortSubcasesPerTrial = 2

func allSubcases() bool { return soak() || os.Getenv("FIBRIL_CLUSTER_ALL_SUBCASES") == "1" }

// runFaultClass runs the class's trials, each on a fresh cluster, with
// every enabled sub-case once per trial in a seeded order, and adds the
// class's rows to the summary. Trial k draws from seed+k, so one failed
// trial replays alone.
func runFaultClass(t *testing.T, class faultClass) {
	var enabled []string
	var run []subcase
	waiting := map[string][]string{} // reason: sub-cases
	var reasons []string
	for _, sc := range class.subcases {
		if reason := sc.waitReason(); reason != "" {
			if waiting[reason] == nil {
				reasons = append(reasons, reason)
			}
			waiting[reason] = append(waiting[reason], sc.name)
			continue
		}
		enabled = append(enabled, sc.name)
		run = append(run, sc)
	}
	for _, reason := range reasons {
		clusterSummary.Add(ClusterRow{Class: class.title + ": " + strings.Join(waiting[reason], ", "), Waiting: reason})
		t.Logf("not run: %s (%s)", strings.Join(waiting[reason], ", "), reason)
	}
	if len(run) == 0 {
		t.Skipf("%s: every sub-case waits: %s", class.title, strings.Join(reasons, "; "))
	}
	hosts := upHosts(t, 3)
	seed := testSeed(t)
	row := ClusterRow{Class: class.title + ": " + strings.Join(enabled, ", ")}
	count := trials(t, class.trialsVariable, class.shortTrials, class.soakTrials)
	perSubcase := max(class.faultsPerSubcase, 1)
	if !soak() && class.shortFaultsPerSubcase > 0 {
		perSubcase = class.shortFaultsPerSubcase
	}
	for trial := range count {
		trialSeed := seed + uint64(trial)
		random := newRandom(trialSeed)
		ok := t.Run(fmt.Sprintf("trial-%d", trial), func(t *testing.T) {
			r := startTrial(t, hosts, fmt.Sprintf("%s trial %d", class.title, trial), random, class.options, trialTraffic())
			chosen := run
			if !allSubcases() && len(run) > shortSubcasesPerTrial {
				chosen = slices.Clone(run)
				random.Shuffle(len(chosen), func(i, j int) { chosen[i], chosen[j] = chosen[j], chosen[i] })
				chosen = chosen[:shortSubcasesPerTrial]
				var names []string
				for _, sc := range chosen {
					names = append(names, sc.name)
				}
				t.Logf("short run: sub-cases %s (FIBRIL_CLUSTER_ALL_SUBCASES=1 or FIBRIL_SOAK=1 runs all)",
					strings.Join(names, ", "))
			}
			var order []subcase
			for range perSubcase {
				order = append(order, chosen...)
			}
			random.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, sc := range order {
				r.inject(sc.plan(r, r.rolesNow()))
			}
			row.AddTrial(r.finish())
		})
		if !ok {
			t.Logf("trial %d failed; replay it alone with FIBRIL_SEED=%d %s=1", trial, trialSeed, class.trialsVariable)
		}
	}
	clusterSummary.Add(row)
}

// Small helpers the plans share.

func (r *trialRun) downtime() time.Duration {
	return time.Duration(200+r.random.IntN(1800)) * time.Millisecond
}

// longerThanElection is a pause of 3 to 20 election timeouts, at least
// half a second.
func (r *trialRun) longerThanElection() time.Duration {
	timeout := r.c.electionTimeout()
	return max(500*time.Millisecond, timeout*time.Duration(3+r.random.IntN(18)))
}

func (r *trialRun) cutHold() time.Duration {
	return time.Duration(1000+r.random.IntN(3000)) * time.Millisecond
}

func (r *trialRun) pick(nodes []*procNode) *procNode { return nodes[r.random.IntN(len(nodes))] }

// others returns every node but n.
func (r *trialRun) others(n *procNode) []*procNode {
	var out []*procNode
	for _, other := range r.c.nodes {
		if other != n {
			out = append(out, other)
		}
	}
	return out
}

func describe(n *procNode, role string) string { return fmt.Sprintf("%s (%s)", n.id, role) }

// killPlan: SIGKILL, down for a while, restart on the same data dir.
func (r *trialRun) killPlan(n *procNode, role string, owner bool) faultPlan {
	return faultPlan{name: "SIGKILL " + describe(n, role), nodes: []*procNode{n}, touchesOwner: owner, expectsFailover: owner,
		outage: true, apply: func() error { n.kill(); return nil }, hold: r.downtime(), heal: n.restart}
}

// modeOf returns the mode of a trial queue.
func (r *trialRun) modeOf(queue string) wire.Mode { return r.load.modes()[queue] }

// checkAndReport runs the checker on a trial's record, logs each queue's
// result and each failover, and fails the test on every error the checker
// found and on a queue with nothing confirmed (nothing was tested).
func checkAndReport(t *testing.T, record Record, load *clusterLoad) ClusterTrial {
	t.Helper()
	trial := CheckCluster(record, load.modes())
	trial.EveryCopy = load.everyCopy()
	for _, result := range trial.Results {
		t.Logf("%s", result)
		if result.Confirmed == 0 {
			t.Errorf("queue %s: nothing was confirmed, so nothing was tested", result.Queue)
		}
	}
	for _, failover := range trial.Failovers {
		t.Logf("failover: %s", failover)
	}
	for _, err := range trial.Errs() {
		t.Error(err)
	}
	return trial
}
