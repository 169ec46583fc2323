// Package runtime is the machinery every actor of a Fibril node runs on:
// the actor system's configuration, the keep-alive dispatcher, the
// supervision policy, the lifecycle rules and the registry of live actors.
// It runs no actor of its own and knows nothing of queues, sessions or
// replication: the broker's actors (package actors) are spawned through it
// and inherit its rules by being spawned that way.
//
// What it owns, file by file:
//
//   - system.go: NewActorSystem, an actor system whose library logging is
//     quieted to warnings, and the unbounded mailbox every actor uses
//     (flow control is by credits, never by blocking a sender).
//   - dispatcher.go: KeepAliveDispatcher, one per actor, which keeps one
//     goroutine and its grown stack from one wake-up to the next.
//   - supervision.go: FatalGuardian for the root actor and FailurePolicy
//     for every other level (a decider, a restart budget, what a spent
//     budget does), plus the panic-logging middleware; ErrFatal marks a
//     failure the node cannot contain.
//   - lifecycle.go: the phases (starting, running, restarting, stopping,
//     stopped), the gate that keeps a stopping actor from touching what it
//     closed, Registry.StopActor (the only way one actor stops another, so
//     the reason is recorded and no restart overtakes the stop), Signal
//     (fires once) and WaitBefore (every shutdown wait against one
//     deadline).
//   - registry.go: Registry, the table of live actors behind the debug
//     endpoint's tree, and Registry.Props, which builds every spawn's
//     Props (mailbox, dispatcher, middlewares, gate).
//   - task_group.go: TaskGroup, the count of background tasks a shutdown
//     waits for, which tasks may join while it waits.
//
// Messages: none of its own. The gate reacts to the library's lifecycle
// messages (Started, Restarting, Stopping, Stopped); a message that reaches
// a stopping actor goes to its ReceiveStopping, when it has one, and is
// dropped otherwise.
//
// It imports no package of the broker (the module's doc.go states the
// layering; layout_test.go checks it).
package runtime
