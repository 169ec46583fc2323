package actors

// What an owner says about its quorum frontier, so that a partition whose
// confirms and deliveries cannot move is never reported healthy
// (docs/cluster.md, "Health of a replicated queue").
//
// Commit wait. The owner notes its position at the queue's boundary (at
// most every commitSampleInterval, at most commitSamplesMax notes) as it
// recomputes the quorum frontier, and drops the notes the frontier has
// passed. The oldest note left is the oldest record still waiting for W
// copies; its age is the commit wait (queue info commit_wait_ms, the
// metric fibril_queue_commit_wait_seconds). A healthy partition's wait is
// a replication round trip plus a follower's fsync; one whose followers
// stopped making progress shows it growing, and /healthz names the
// partition once it passes commitStuckAfter.
//
// Copies at the frontier. WrittenOn and DurableOn (fibril_queue_copies)
// count the owner and every follower at or past the quorum frontier whose
// link keeps up: a follower stalled or unreachable is not
// counted, even when its last report happens to equal a frontier that has
// stopped moving.

import (
	"time"

	"github.com/fibrilmq/fibril/wire"
)

const (
	commitSampleInterval = 100 * time.Millisecond
	commitSamplesMax     = 128
	// commitStuckAfter is the commit wait past which health names the
	// partition: its confirms and deliveries are stuck.
	commitStuckAfter = 5 * time.Second
)

// commitNote is the owner's position at the queue's boundary at a time.
type commitNote struct {
	at       time.Time
	position uint64
}

// commitWait is the owner's bounded list of notes, oldest first.
//
// Invariant: positions strictly increase along notes, and every note's
// position is above the quorum frontier it was last trimmed against.
type commitWait struct {
	notes []commitNote
}

// note records the owner's position at now (when it moved past the last
// note, at most every commitSampleInterval, while there is room) and drops
// the notes the quorum frontier has reached.
func (w *commitWait) note(now time.Time, position, committed uint64) {
	drop := 0
	for drop < len(w.notes) && w.notes[drop].position <= committed {
		drop++
	}
	w.notes = append(w.notes[:0], w.notes[drop:]...)
	if position <= committed || len(w.notes) >= commitSamplesMax {
		return
	}
	if n := len(w.notes); n > 0 && (w.notes[n-1].position >= position || now.Sub(w.notes[n-1].at) < commitSampleInterval) {
		return
	}
	w.notes = append(w.notes, commitNote{at: now, position: position})
}

// wait is how long the oldest record not yet below committed has waited.
func (w *commitWait) wait(now time.Time, committed uint64) time.Duration {
	for _, note := range w.notes {
		if note.position > committed {
			return now.Sub(note.at)
		}
	}
	return 0
}

// reset forgets every note (the partition stopped owning).
func (w *commitWait) reset() { w.notes = w.notes[:0] }

// countCopiesAtTheFrontier sets info's WrittenOn and DurableOn: the owner,
// and each follower at or past the frontier whose link admits.
func (p *partition) countCopiesAtTheFrontier(info *wire.QueueInfo) {
	now := time.Now()
	for _, replica := range info.Replicas {
		if report := p.repl.linkReports[replica.Node]; replica.Node != p.home.replication.self &&
			(!report.admits || report.stalled || !report.freshAt(now)) {
			continue
		}
		if max(replica.WrittenNext, replica.DurableNext) >= info.CommittedNext {
			info.WrittenOn++
		}
		if replica.DurableNext >= info.CommittedNext {
			info.DurableOn++
		}
	}
}
