// Package vfs is the only way storage code reaches the disk.
//
// Every file the storage packages read or write goes through the small FS
// interface declared here. Two implementations exist:
//
//   - OS, the real filesystem. File.Sync is fdatasync(2); directories are
//     synced with fsync(2); segment files can be preallocated with
//     fallocate(2) through the optional Preallocator interface.
//   - Mem, an in-memory filesystem for tests. It can fail a chosen write,
//     sync or read (InjectFault) and can simulate a power loss
//     (CrashClone): the clone keeps only what a completed sync covered,
//     or a prefix of the rest, or all of it (CrashOptions.KeepUnsynced).
//
// CountSyncs wraps any FS and counts the file and directory syncs made
// through it, for a server that reports its fdatasyncs.
//
// Fault injection is part of the design rather than a test hack: code that
// only ever talks to an FS can be driven through every failure the real
// disk can produce, deterministically, in a unit test.
package vfs
