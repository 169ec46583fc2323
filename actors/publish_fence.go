package actors

// The publish fence: one connection's order across a refusal in the middle
// of its pipeline (docs/protocol.md 4.3, "Order across a refusal";
// protocol version 3).
//
// A client pipelines publishes to a queue: P1, P2, P3 leave before the
// answer to P1 arrives. When the node refuses P1 for a reason that passes
// (too few copies count, the owner steps down, the log is behind) and the
// reason is gone by the time P2 arrives, P2 is stored, and the client,
// which sends P1 again, gets it stored after P2. So once a publish of a
// connection to a queue is refused with a fencing code, the node refuses
// every later publish of that connection to that queue with the same code,
// until the client sends FRS1 resume-publishing for the queue; the client
// then sends again, in their order, what was refused.
//
// Two places refuse, because a session hands publishes to a partition
// before it hears how the earlier ones fared:
//
//   - the session (sessionFences): after it refuses a publish itself, or
//     hears of a partition's refusal, it refuses every later publish to the
//     queue until the resume, wherever the queue is routed by then;
//   - the partition (partitionFences): after it refuses a batch of a
//     session, it refuses that session's later batches sent before the
//     session heard of it.
//
// Each batch carries the session's generation for its queue: the number of
// resumes the session took for it, plus one (0: the session does not
// fence, its protocol version is below 3). A resume starts a new
// generation; the partition refuses a batch whose generation is not above
// the one it refused at, so the batches in flight when it refused, and
// only those, share the refusal.
//
// Invariants: a session's generation for a queue never decreases; a
// partition keeps at most one fence per session, at the highest
// generation it refused; a batch of a generation above a partition's fence
// drops that fence (the session heard of the refusal and took a resume).

import "github.com/fibrilmq/fibril/wire"

// fencesPublishes reports whether a refusal with code fences the queue on
// the connection: a refusal of a publish that was not stored and that a
// client may send again (the retryable codes but outcome_unknown, which
// may have been stored and whose order is lost already).
func fencesPublishes(code wire.Code) bool {
	switch code {
	case wire.CodeNotOwner, wire.CodeFenced, wire.CodeLimitReached, wire.CodeStorageFailure,
		wire.CodeUnavailable, wire.CodeOverloaded:
		return true
	}
	return false
}

// fenceRefusal is the failure a publish refused under a fence gets: the
// code of the refusal that raised the fence, so a client treats it the
// same way, and a message that says why.
func fenceRefusal(raised requestFailure) requestFailure {
	return requestFailure{code: raised.code, message: "an earlier publish to this queue on this connection was refused, " +
		"so this one was not stored either; send resume-publishing (FRS1), then publish again in order (" +
		raised.message + ")"}
}

// queueFence is one queue's fence state on a session.
type queueFence struct {
	generation uint64         // the generation batches carry now, from 1
	raised     bool           // refusing until the next resume
	failure    requestFailure // what raised it
}

// sessionFences is a session's fence state, by queue name. The zero value
// fences nothing (a session below protocol version 3).
type sessionFences struct {
	enabled bool
	byQueue map[string]queueFence
}

// enable makes the session fence (its hello chose protocol version 3 or
// later).
func (f *sessionFences) enable() { f.enabled = true }

// generation is the generation a batch to queue carries now; 0 when the
// session does not fence.
func (f *sessionFences) generation(queue string) uint64 {
	if !f.enabled {
		return 0
	}
	if fence, ok := f.byQueue[queue]; ok {
		return fence.generation
	}
	return 1
}

// refused notes a refusal of a publish to queue; it raises the fence when
// the code fences.
func (f *sessionFences) refused(queue string, failure requestFailure) {
	if !f.enabled || !fencesPublishes(failure.code) {
		return
	}
	fence, ok := f.byQueue[queue]
	if !ok {
		fence.generation = 1
	}
	if fence.raised {
		return // the first refusal names the fence
	}
	fence.raised, fence.failure = true, failure
	if f.byQueue == nil {
		f.byQueue = make(map[string]queueFence)
	}
	f.byQueue[queue] = fence
}

// refusing returns the failure a new publish to queue gets while its fence
// is raised.
func (f *sessionFences) refusing(queue string) (requestFailure, bool) {
	fence, ok := f.byQueue[queue]
	if !ok || !fence.raised {
		return requestFailure{}, false
	}
	return fenceRefusal(fence.failure), true
}

// resume takes the client's resume for queue: the fence lifts and a new
// generation starts. A resume of a queue that is not fenced does nothing.
func (f *sessionFences) resume(queue string) {
	fence, ok := f.byQueue[queue]
	if !ok || !fence.raised {
		return
	}
	fence.raised, fence.failure = false, requestFailure{}
	fence.generation++
	f.byQueue[queue] = fence
}

// partitionFence is a partition's fence on one session.
type partitionFence struct {
	generation uint64 // batches of this generation or below are refused
	failure    requestFailure
}

// partitionFences is a partition's fences, by session (its PID's id).
type partitionFences struct {
	bySession map[string]partitionFence
}

// refused notes that the partition refused a batch of session at
// generation; it fences the session when the code fences and the session
// does (generation above 0). It reports whether it raised a new fence.
func (f *partitionFences) refused(session string, generation uint64, failure requestFailure) bool {
	if generation == 0 || !fencesPublishes(failure.code) {
		return false
	}
	if fence, ok := f.bySession[session]; ok && fence.generation >= generation {
		return false // the refusal that raised it names it
	}
	if f.bySession == nil {
		f.bySession = make(map[string]partitionFence)
	}
	f.bySession[session] = partitionFence{generation: generation, failure: failure}
	return true
}

// refusing returns the failure a batch of session at generation gets
// under a fence; a batch of a later generation drops the fence.
func (f *partitionFences) refusing(session string, generation uint64) (requestFailure, bool) {
	fence, ok := f.bySession[session]
	if !ok || generation == 0 {
		return requestFailure{}, false
	}
	if generation > fence.generation {
		delete(f.bySession, session)
		return requestFailure{}, false
	}
	return fenceRefusal(fence.failure), true
}

// forget drops the fence of a session that ended.
func (f *partitionFences) forget(session string) { delete(f.bySession, session) }
