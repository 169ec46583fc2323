// Package log is the segmented, append-only record log that every queue
// partition stores its records in.
//
// A log is a directory of segments. Each segment is a <base>.log file of
// records (see record.go for the format) and a sparse <base>.idx index
// (index.go), where <base> is the segment's first offset, zero-padded to
// 20 digits. Offsets are dense. Next to the segments live three small files:
// epochs (the epoch history cache), incarnation (a counter bumped at every
// open and every suffix cut) and, only after a storage failure,
// latched-cut.pending (the offset the next open must cut back to).
//
// Three frontiers describe progress, each exclusive ("next" offsets):
//
//	staged_next  >= written_next >= durable_next
//
// staged means accepted into the writer's buffer, written means handed to
// the OS with write(2), durable means covered by a completed fdatasync. An
// append names the level it waits for (AfterWrite, AfterFlush, AfterFsync).
//
// Usage:
//
//	l, err := log.Open(dir, log.DefaultOptions())
//	res, err := l.Append(ctx, []log.Entry{{Epoch: 1, Type: 1, Body: b}}, log.AfterFsync)
//	next, err := l.ScanDurable(res.First, 1<<20, func(r log.Record) error { ...; return nil })
//	err = l.Close()
//
// Opened with Open, the log owns its goroutines: one writer that owns the
// active segment and groups appends into one write, one syncer that runs
// every fdatasync of the segment files, one at a time, and reports each to
// the rules that move the durable frontier (frontier.go), and (unless
// Options.ExternalTicks) one ticker that drives background sync. Opened
// with OpenDirect, one caller goroutine drives the same writer code
// through an Appender (direct.go): Stage, Flush, and SyncFinished when the
// log's sync goroutine reports a finished sync through Options.SyncDone;
// SyncDue tells the caller when to arm a background-sync timer, and an idle
// log needs none.
//
//	l, a, err := log.OpenDirect(dir, opts) // opts.SyncDone posts a message
//	a.Stage(entries, log.AfterFsync, done)  // for each append in a drain
//	a.Flush()                               // once per drain
//	a.SyncFinished()                        // on each SyncDone message
//
// Every log of a node draws on one Budget (budget.go): the tail-cache
// memory, a cache of descriptors for sealed segments, and sync counters.
// Replication stands on ScanEncoded, AppendEncoded, Rebase, Seal and
// TruncateAfter (encoded.go, seal.go, truncate.go). Every disk access goes
// through a vfs.FS, so tests run the same code over vfs.Mem with injected
// faults and simulated power loss.
//
// A failed write or sync latches the log: durable_next freezes (no sync
// that completes afterwards moves it), the log records a cut that the next
// Open carries out before anything reads the tail (or, when the disk
// refuses that too, reports ErrCutNotRecorded), refuses appends, fails
// every waiter and drops written_next to durable_next. Recovery trusts
// only what the log can prove durable (recovery.go): damage past that is a
// torn tail, damage inside it refuses the open.
package log
