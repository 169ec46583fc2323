package acceptance

import (
	"testing"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// Process kill: SIGKILL the real server at random points while a publisher
// and an acking consumer run on a durable and a buffered queue, restart it
// on the same data directory, and at the end drain. The page cache
// survives a process kill and the reopen syncs the recovered tail, so
// nothing confirmed may be lost in either mode; held deliveries come back
// marked, with their attempt counted.
//
// FIBRIL_KILL_TRIALS overrides the number of kills (3, or 20 with
// FIBRIL_SOAK=1).
func TestProcessKillLosesNothingConfirmed(t *testing.T) {
	seed := testSeed(t)
	random := newRandom(seed)
	kills := trials(t, "FIBRIL_KILL_TRIALS", 3, 20)
	queues := map[string]wire.Mode{"kill-durable": wire.ModeDurable, "kill-buffered": wire.ModeBuffered}
	spec := newServerSpec(t)
	server, _ := spec.start(t)
	h := NewHistory()
	h.LifeStarted()
	config := loadConfig{queues: queues, payloadBytes: 128, ratePerQueue: 2000, prefetch: 32,
		sampleEvery: 20 * time.Millisecond, addresses: []string{spec.listen},
		pauseEvery: 150 * time.Millisecond, pauseFor: 100 * time.Millisecond}
	if soak() {
		config.ratePerQueue = 4000
	}
	l := startLoad(t, h, config)
	row := Row{Case: "process kill (SIGKILL), both modes", Trials: kills}
	for trial := range kills {
		runFor := time.Duration(200+random.IntN(1300)) * time.Millisecond
		time.Sleep(runFor)
		server.kill()
		l.awaitOutcomes()
		h.LifeEnded(EndProcessKill, time.Time{})
		h.LifeStarted()
		var took time.Duration
		server, took = spec.start(t)
		row.Recoveries = append(row.Recoveries, took)
		t.Logf("trial %d: killed after %v, serving again after %v", trial, runFor, took)
	}
	time.Sleep(300 * time.Millisecond) // load on the last life too
	l.drain(60 * time.Second)
	for _, result := range checkLoad(t, h, queues) {
		row.Add(result)
		if result.Duplicates == 0 {
			t.Logf("%s: no duplicates this run (no delivery was held at a kill)", result.Queue)
		}
	}
	if errs := l.unexpectedClientErrors(); len(errs) > 0 {
		t.Logf("node errors outside requests (restarts cause some): %v", errs)
	}
	summary.Add(row)
	if err := server.stop(); err != nil {
		t.Errorf("clean stop after the run: %v; log:\n%s", err, server.logTail())
	}
}
