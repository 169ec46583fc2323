// Package replication holds the pure rules of a replicated queue
// partition: plain types in, decisions out. It imports no other package of
// the broker, runs no goroutine and reads no clock of its own, so every
// rule that decides who may vote, cut, confirm or serve can be driven
// step by step by tests and by a seeded simulator.
//
// The pieces:
//
//   - Quorum (quorum.go): the quorum frontier, the W-th highest position
//     among the owner and the followers that count, and how many seals a
//     recovery waits for (E-W+1).
//   - Link (link.go): the owner's view of one follower (unreachable,
//     probing, in sync, catching up, latched, stale), what to push it next
//     and whether its reports count toward the quorum.
//   - DecidePush and ResumePoint (replica.go): the follower's rules for a
//     push (append, cut then append, behind, refuse) and where an owner
//     resumes after a refusal.
//   - Plan (recovery.go): the history a recovery installs, chosen from the
//     sealed replicas' reports, and what every other replica keeps.
//   - HistoryEntry (history.go): one epoch's first offset, the unit of the
//     epoch histories that logs, seals and the coordination shard share.
//   - DecideRole and Successors (roles.go): what a copy may be once its
//     storage failed (a fenced copy never owns, recovers or keeps the
//     coordination leadership) and whom it hands the leadership to.
//
// The actor shells (today in actors/: follower_link.go, partition_quorum.go,
// partition_replica.go, partition_handover.go, recovery.go) own these
// values and carry out what they decide: reads, appends, cuts, frames and
// Raft proposals.
package replication
