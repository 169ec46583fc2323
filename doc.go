// Package fibril is the root of the Fibril broker's module. It holds no
// code of its own; this file says how the packages below it depend on one
// another, and layout_test.go checks it.
//
// A package depends only downward (DESIGN.md, "Layout"):
//
//	cmd → admin → actors (the actor shells) → runtime, replication, cluster, storage, access, wire
//	cluster → replication, wire, tlsconfig, cluster/rafttransport
//	client → wire, tlsconfig
//
// Rules a reader can rely on, each checked by TestPackageLayout:
//
//   - storage (storage/log, storage/queue, storage/vfs) imports no package
//     of the broker outside storage: it is usable on its own, in tests,
//     benchmarks and tools.
//   - wire imports no package of the broker: it is the protocol, and both
//     SDKs and every node speak it.
//   - replication imports no package of the broker: its rules (who may
//     vote, cut, confirm or serve) take plain values and return decisions,
//     so tests and a seeded model drive them step by step.
//   - runtime (the actor system, dispatcher, supervision, lifecycle and
//     registry every actor runs on) imports no package of the broker: it
//     knows how actors live and die, never what they do.
//   - cluster holds only the Raft-backed state and imports replication,
//     wire, tlsconfig and its Raft transport, never the actor shells,
//     storage, admin or the SDK.
//   - access imports only wire; the Go SDK (client) only wire and tlsconfig;
//     netlimit (the bounds on accepting connections) nothing of ours.
//   - No Go file is longer than 800 lines, and no package longer than about
//     6,000 without its tests (storage/log and storage/queue are the
//     largest cohesive ones).
//
// Known exceptions, listed by the test so that each one fails it once it
// no longer holds (and leaves the list): tlsconfig imports wire (for the
// plain-text refusal frame), admin acts on its node through the Go SDK
// (admin/broker_actions.go), and actors is one package of about 17,000
// lines without tests where the layout wants one package per role (issue
// "one room per job").
package fibril
