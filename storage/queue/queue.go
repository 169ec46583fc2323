package queue

// Queue is the shell around the pure core: it owns a partition log, turns
// operations into asynchronous appends at the mode's level, and applies
// them when the owner calls Advance after the log reports progress.
//
// Threading: one goroutine (the partition actor) owns a Queue and calls
// every method. Nothing blocks on I/O except Open, Close, Compact and the
// reads of delivered payloads in Advance (served from the log's tail cache
// or page cache); checkpoint file I/O runs in a CheckpointTask the owner may
// run elsewhere. Log goroutines only touch the completion inbox and call
// the notify function set with SetNotify.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"time"

	"github.com/fibrilmq/fibril/storage/log"
	"github.com/fibrilmq/fibril/storage/vfs"
)

// Clock returns the current time. Queue state works in unix milliseconds.
type Clock func() time.Time

// Queue is one queue partition; see the file comment.
type Queue struct {
	dir     string
	fs      vfs.FS
	opts    Options
	log     partitionLog
	clock   Clock
	logger  *slog.Logger
	machine *machine
	inbox   completionInbox

	role role
	// replicated: a replicated owner (OpenOwner, or a promoted replica) or
	// a replica. Such an owner of a queue with MaxDeliveries marks the
	// deliveries it hands out (Sent; machine.go says how marks come in
	// force); a single-node queue writes no mark and counts every lease at
	// Open.
	replicated bool
	// epoch is written with every record this copy appends as owner; it
	// is also the first half of the identity of those records (epoch.go).
	epoch uint64
	// applyLimit caps the apply frontier: nothing at or above it applies.
	// noLimit unless the caller supplies one (a replicated queue).
	// durableLimit caps the durable frontier the same way: records of a
	// durable mode and mode records apply only below it (mode.go).
	applyLimit   uint64
	durableLimit uint64
	// retentionFloor caps compaction: noLimit unless supplied.
	retentionFloor uint64

	idPrefix       string // random per open: assigned message ids are <idPrefix>-<sequence>
	idSequence     uint64
	checkpointNext uint64 // offset covered by the newest published snapshot
	// checkpointLive is that snapshot's lowest live message. Compaction
	// uses it, not the applied state: in a buffered queue a settle applied
	// at the written frontier can be lost in a power loss, bringing its
	// message back, while the snapshot's state is durable.
	checkpointLive uint64
	carry          Progress
	recovery       Recovery
	fenced         error
	closed         bool
	// awaitingSnapshot: a replica whose log starts past offset 0 without a
	// snapshot behind its state (replica.go).
	awaitingSnapshot bool
}

// role says whether a copy appends its own records (owner) or applies
// records another copy produced (replica).
type role uint8

const (
	roleOwner role = iota + 1
	roleReplica
)

// noLimit is the apply limit and retention floor of a queue whose caller
// supplies none.
const noLimit = ^uint64(0)

// Recovery describes what Open did.
type Recovery struct {
	// Snapshot is the snapshot file recovery started from; empty for a
	// full replay.
	Snapshot string
	// SkippedSnapshots says why newer snapshots were not used.
	SkippedSnapshots []error
	// ReplayedFrom and Replayed are the first offset and the number of
	// records replayed after the snapshot.
	ReplayedFrom uint64
	Replayed     uint64
	// LogEnd is the log's end offset found at open.
	LogEnd uint64
	// ExpiredLeases is how many leases of the previous process were
	// returned (with an attempt counted) at open; 0 on a replica, whose
	// leases belong to the owner.
	ExpiredLeases int
	// ReleasedLeases is how many leases of the previous process a
	// replicated owner returned at open without an attempt counted: marks
	// are in force and none shows that their deliveries left (machine.go).
	// Always 0 on a single-node queue, which counts every lease.
	ReleasedLeases int
	// Epoch is the epoch this open appends under (0 on a replica).
	Epoch uint64
}

// startMode is how a queue comes up: single-node owner (epoch chosen at
// open), replicated owner (epoch and apply limit from the caller), or
// replica.
type startMode struct {
	role       role
	epoch      uint64 // replicated owner: the caller's coordination epoch
	replicated bool
}

// Open opens or creates a single-node queue partition in dir. opts must
// equal the options stored at first open, if any (ErrDeclarationMismatch).
// The log lives in dir/log and is opened with logOptions; every file goes
// through logOptions.FS (default vfs.OS). clock nil means time.Now. The
// queue bumps its epoch (epoch.go) and applies at its own boundary.
// options may name another way to open the log (WithLogOpener).
func Open(dir string, opts Options, logOptions log.Options, clock Clock, options ...OpenOption) (*Queue, error) {
	return open(dir, opts, logOptions, clock, startMode{role: roleOwner}, options)
}

// OpenOwner opens the owner copy of a replicated queue partition under the
// coordination epoch the cluster gave this ownership; epoch must be above
// every epoch this copy has appended or stored (ErrEpochStale), so a
// restart of the same owner needs a new epoch. Nothing appended from now
// on applies until SetApplyLimit passes it: confirms, deliveries and
// settles follow the quorum frontier the caller supplies.
func OpenOwner(dir string, opts Options, logOptions log.Options, clock Clock, epoch uint64,
	options ...OpenOption) (*Queue, error) {
	if epoch == 0 {
		return nil, fmt.Errorf("%w: epoch 0", ErrEpochStale)
	}
	return open(dir, opts, logOptions, clock, startMode{role: roleOwner, epoch: epoch, replicated: true}, options)
}

func open(dir string, opts Options, logOptions log.Options, clock Clock, start startMode,
	options []OpenOption) (*Queue, error) {
	config := openConfig{openLog: openStandalone}
	for _, option := range options {
		option(&config)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	if logOptions.FS == nil {
		logOptions.FS = vfs.OS
	}
	if logOptions.ValidType == nil {
		logOptions.ValidType = validRecordType
	}
	if err := prepareDirectory(logOptions.FS, dir, opts); err != nil {
		return nil, err
	}
	l, err := config.openLog(path.Join(dir, logDirName), logOptions)
	if err != nil {
		return nil, fmt.Errorf("queue: open log: %w", err)
	}
	inflight := logOptions.RequestQueueLength
	if inflight <= 0 {
		inflight = 1024
	}
	seam := l
	if start.role == roleReplica {
		replicated, ok := seam.(replicaLog)
		if !ok {
			_ = l.Close()
			return nil, fmt.Errorf("%w: the log cannot append encoded records", ErrNotReplica)
		}
		seam = replicated
	}
	q, err := openWithLog(dir, opts, logOptions.FS, seam, clock, logOptions.Logger, inflight, start)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return q, nil
}

// prepareDirectory creates dir, checks or stores the declaration and
// removes leftovers of interrupted file writes.
func prepareDirectory(fs vfs.FS, dir string, opts Options) error {
	if err := fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	data, exists, err := readFile(fs, path.Join(dir, declarationName))
	if err != nil {
		return fmt.Errorf("queue: read declaration: %w", err)
	}
	if exists {
		stored, err := decodeDeclaration(data)
		if err != nil {
			return err
		}
		if !sameDeclaration(stored, opts) {
			return fmt.Errorf("%w: stored %+v, given %+v", ErrDeclarationMismatch, stored, opts)
		}
	} else if err := writeFileAtomic(fs, dir, declarationName, encodeDeclaration(opts)); err != nil {
		return fmt.Errorf("queue: store declaration: %w", err)
	}
	return removeTemporaries(fs, dir)
}

// ReadDeclaration returns the options stored in a queue directory, so a
// re-declare that omits a field can keep the stored value.
func ReadDeclaration(fs vfs.FS, dir string) (Options, bool, error) {
	data, exists, err := readFile(fs, path.Join(dir, declarationName))
	if err != nil || !exists {
		return Options{}, false, err
	}
	opts, err := decodeDeclaration(data)
	return opts, err == nil, err
}

// openWithLog recovers the queue over an open log.
func openWithLog(dir string, opts Options, fs vfs.FS, l partitionLog, clock Clock, logger *slog.Logger, inflight int, start startMode) (*Queue, error) {
	if clock == nil {
		clock = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	q := &Queue{dir: dir, fs: fs, opts: opts, log: l, clock: clock, logger: logger, role: start.role,
		replicated: start.replicated || start.role == roleReplica,
		applyLimit: noLimit, durableLimit: noLimit, retentionFloor: noLimit}
	if start.replicated {
		q.applyLimit, q.durableLimit = 0, 0 // nothing is released before the caller names the quorum frontier
	}
	prefix, err := randomID()
	if err != nil {
		return nil, err
	}
	q.idPrefix = strconv.FormatUint(prefix, 16)
	if err := q.recover(inflight, start); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *Queue) recover(inflight int, start startMode) error {
	ctx := context.Background()
	if f := q.log.Frontiers(); f.Written > f.Durable {
		if err := q.log.Sync(ctx); err != nil {
			return fmt.Errorf("queue: sync recovered tail: %w", err)
		}
	}
	if start.role == roleOwner {
		if err := q.beginEpoch(start.epoch); err != nil {
			return err
		}
	}
	candidates, err := listSnapshots(q.fs, q.dir)
	if err != nil {
		return fmt.Errorf("queue: list snapshots: %w", err)
	}
	state, report, err := rebuild(q.opts, candidates, logSource{q.log})
	if err != nil {
		return fmt.Errorf("queue: replay: %w", err)
	}
	for _, skipped := range report.skipped {
		q.logger.Warn("queue: snapshot not used", "dir", q.dir, "err", skipped)
	}
	q.recovery = Recovery{
		Snapshot: report.snapshot, SkippedSnapshots: report.skipped, ReplayedFrom: report.replayedFrom,
		Replayed: report.replayedCount, LogEnd: q.log.Frontiers().Durable, Epoch: q.epoch,
	}
	if next, ok := parseSnapshotName(report.snapshot); ok {
		q.checkpointNext, q.checkpointLive = next, report.snapshotLive
	}
	q.machine = newMachine(state)
	q.machine.maxInflight = inflight
	q.machine.marksDeliveries = q.replicated && start.role == roleOwner && q.opts.MaxDeliveries > 0
	if staged := q.log.Frontiers().Staged; staged != state.Next() {
		return fmt.Errorf("%w: log ends at %d, replay at %d", ErrLogContract, staged, state.Next())
	}
	if start.role == roleReplica {
		state.handoffs = state.handoffs[:0] // a replica hands nothing off
		q.awaitingSnapshot = report.snapshot == "" && q.log.FirstOffset() > 0
		return nil
	}
	return q.expireRestartLeases(ctx)
}

// expireRestartLeases returns leases held by the previous process, with an
// attempt counted (once marks are in force, only those a sent mark shows
// were sent; the others without), and applies that before the queue
// serves (machine.restartExpiry).
func (q *Queue) expireRestartLeases(ctx context.Context) error {
	group, entries := q.machine.restartExpiry(q.replicated)
	if len(group) > 0 {
		q.recovery.ExpiredLeases, q.recovery.ReleasedLeases = restartCounts(group)
		level := log.AfterFlush
		for _, p := range group {
			level = max(level, q.levelOf(p))
		}
		result, err := q.log.Append(ctx, q.logEntries(entries), level)
		if err != nil {
			return fmt.Errorf("queue: expire leases at open: %w", err)
		}
		if result.First != group[0].first {
			return fmt.Errorf("%w: predicted %d, assigned %d", ErrLogContract, group[0].first, result.First)
		}
	}
	written, durable := q.frontiers(q.log.Frontiers())
	q.machine.advance(written, durable, q.nowMs(), &q.carry)
	if q.applyLimit == noLimit && q.machine.inflight() != 0 {
		return fmt.Errorf("%w: lease expiry at open not applied", ErrLogContract)
	}
	// A replicated owner's expiry waits for the apply limit like any append.
	return q.fill(&q.carry)
}

func randomID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id, nil
		}
	}
}

// applyFrontier is where records of the applied mode are released: that
// mode's boundary frontier, capped by its apply limit (mode.go).
func (q *Queue) applyFrontier(f log.Frontiers) uint64 {
	return q.machine.state.modeFrontier(q.frontiers(f))
}

// levelOf is the level an append waits for: under a buffered mode (the
// newest revision appended), written; under a durable one, durable when
// something waits for the append's application and written otherwise (the
// next sync covers it). A mode record always asks for durable: it applies
// only there.
func (q *Queue) levelOf(p *pendingAppend) log.Durability {
	switch {
	case p.op == opMode:
		return log.AfterFsync
	case q.machine.tailMode == Buffered || !p.syncs:
		return log.AfterFlush
	}
	return log.AfterFsync
}

func (q *Queue) logEntries(entries []entry) []log.Entry {
	out := make([]log.Entry, len(entries))
	for i, e := range entries {
		out[i] = log.Entry{Epoch: q.epoch, Type: uint8(e.kind), Body: e.body}
	}
	return out
}

func (q *Queue) nowMs() int64 { return q.clock().UnixMilli() }

// usable returns the error every operation returns once the queue is
// closed or fenced.
func (q *Queue) usable() error {
	switch {
	case q.closed:
		return ErrClosed
	case q.fenced != nil:
		return q.fenced
	}
	if err := q.inbox.failure(); err != nil {
		q.fence(err)
		return q.fenced
	}
	return nil
}

func (q *Queue) fence(cause error) {
	if q.fenced == nil {
		q.fenced = fmt.Errorf("%w: %w", ErrFenced, cause)
		q.logger.Error("queue: fenced", "dir", q.dir, "err", cause)
	}
}

// submit appends the entries of one or more pending appends (in offset
// order) with one asynchronous log append, so the log writes them in one
// group and one sync covers them all. A refusal rolls them back; any
// refusal but ErrTooLarge also fences.
func (q *Queue) submit(group []*pendingAppend, entries []entry) error {
	level := log.AfterFlush
	for _, p := range group {
		level = max(level, q.levelOf(p))
	}
	err := q.log.AppendAsync(q.logEntries(entries), level, q.inbox.done(group[0].first))
	if err == nil {
		return nil
	}
	for i := len(group) - 1; i >= 0; i-- {
		q.machine.rollback(group[i].ticket)
	}
	if errors.Is(err, log.ErrTooLarge) {
		return fmt.Errorf("queue: %w", err)
	}
	q.fence(err)
	return q.fenced
}

// run performs one operation built by the machine.
func (q *Queue) run(build func() (*pendingAppend, []entry, error)) (Ticket, int, error) {
	if err := q.owner(); err != nil {
		return 0, 0, err
	}
	p, entries, err := build()
	if err != nil || p == nil {
		return 0, 0, err
	}
	if err := q.submit([]*pendingAppend{p}, entries); err != nil {
		return 0, 0, err
	}
	return p.ticket, p.count(), nil
}

// count is the number of messages an append names (1 per record without
// offsets).
func (p *pendingAppend) count() int {
	count := 0
	for i := range p.records {
		count += max(len(p.records[i].Offsets), 1)
	}
	return count
}

// owner returns the error an operation gets on a queue that cannot append
// its own records now.
func (q *Queue) owner() error {
	if err := q.usable(); err != nil {
		return err
	}
	if q.role != roleOwner {
		return ErrReplica
	}
	return nil
}

// PendingFirst is the first offset of the append a ticket names, while it
// is pending (appended, not applied); false once it applied or for a
// ticket the queue does not know.
func (q *Queue) PendingFirst(ticket Ticket) (uint64, bool) {
	m := q.machine
	for _, p := range m.pending[m.pendHead:] {
		if p.ticket == ticket {
			return p.first, true
		}
	}
	return 0, false
}

// Epoch is the epoch this copy appends under: chosen at open on a single
// node, the caller's on a replicated owner, 0 on a replica.
func (q *Queue) Epoch() uint64 { return q.epoch }

// IsReplica reports whether the queue applies another copy's records.
func (q *Queue) IsReplica() bool { return q.role == roleReplica }

// Recovery reports what Open did.
func (q *Queue) Recovery() Recovery { return q.recovery }

// Log returns the partition's log: the *log.Log itself, or the one a seam
// given by WithLogOpener names through a Log() *log.Log method; nil when
// the seam names none (tests). The owner may read the log's status, watch
// its frontiers, read records (a replicated owner ships them to followers
// from here) and set its background sync interval, from any goroutine; a
// standalone log may also be ticked and synced there (a direct log's
// appender owner does both). It MUST NOT append to it, truncate it or
// close it: the queue is the log's only appender (on a replica, through
// AppendReplicated and TruncateAfter) and predicts the offsets the log
// assigns.
func (q *Queue) Log() *log.Log {
	switch l := q.log.(type) {
	case *log.Log:
		return l
	case interface{ Log() *log.Log }:
		return l.Log()
	}
	return nil
}

// Close closes the log (which flushes and syncs what is written, so settles
// written before it are durable). Leases end with the process: the next
// Open returns them with an attempt counted.
func (q *Queue) Close() error {
	if q.closed {
		return ErrClosed
	}
	q.closed = true
	return q.log.Close()
}
