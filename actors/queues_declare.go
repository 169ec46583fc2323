package actors

// Declares, the conversion between wire and storage queue options, the
// startup scan of the data directory, and queue-info gathering.
//
// Data directory layout:
//
//	<data>/queues/<name>/0/          partition 0 of queue <name> (storage/queue's directory)
//	<data>/queues/.deleted-<name>-<n> a queue being deleted: renamed first, so a crash in
//	                                  the middle of removing it never leaves a half queue
//	                                  that looks declared; removed again at the next start

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/fibrilmq/fibril/storage/queue"
	"github.com/fibrilmq/fibril/storage/vfs"
	"github.com/fibrilmq/fibril/wire"
)

// deletedPrefix marks a queue directory being removed.
const deletedPrefix = ".deleted-"

// infoTimeout bounds how long queue-info gathering waits for a partition.
const infoTimeout = 5 * time.Second

func (m *queuesManager) declare(ctx actor.Context, msg declareRequest) {
	refuse := func(code wire.Code, format string, args ...any) {
		ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID,
			failure: requestFailure{code: code, message: fmt.Sprintf(format, args...)}})
	}
	if err := ValidateQueueName(msg.name); err != nil {
		refuse(wire.CodeInvalidName, "%v", err)
		return
	}
	if m.cluster != nil {
		m.clusterDeclare(ctx, msg) // through the catalog (cluster_queues.go)
		return
	}
	requested, err := storageOptions(msg.name, msg.options, msg.mode)
	if err != nil {
		refuse(wire.CodeInvalidOptions, "%v", err)
		return
	}
	record, exists := m.queues[msg.name]
	if exists && record.state == queueDeleting {
		// Checked against the new declaration once the delete finished.
		record.redeclares = append(record.redeclares, msg)
		return
	}
	if !exists {
		if failure, full := m.queueLimitReached(1 + m.missingQueues(requested.DeadLetterQueue)); full {
			ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: failure})
			return
		}
		if requested.DeadLetterQueue != "" && requested.MaxDeliveries == 0 {
			refuse(wire.CodeInvalidOptions, "dead_letter_queue needs max_deliveries in the same declare "+
				"(the attempts after which a message is dead-lettered)")
			return
		}
		if err := requested.Validate(); err != nil {
			refuse(wire.CodeInvalidOptions, "%v", err)
			return
		}
		record = m.spawnQueue(ctx, msg.name, requested)
		if record.state == queueFailed {
			ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: record.failure})
			return
		}
		record.created = true
		record.waiters = append(record.waiters, msg)
		m.maybeDeclareDeadLetterQueue(ctx, requested.DeadLetterQueue)
		return
	}
	if conflict := declareConflict(record.home.effectiveOptions(), msg.options, msg.mode); conflict.failed() {
		ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: conflict})
		return
	}
	switch record.state {
	case queueOpening:
		record.waiters = append(record.waiters, msg)
	case queueReady:
		record.waiters = append(record.waiters, msg)
		m.maybeAnswerWaiters(ctx, record)
	case queueFailed:
		ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: record.failure})
	}
}

// missingQueues counts the named queues that do not exist yet ("" is none).
func (m *queuesManager) missingQueues(names ...string) int {
	missing := 0
	for _, name := range names {
		if _, ok := m.queues[name]; name != "" && !ok {
			missing++
		}
	}
	return missing
}

// queueLimitReached reports whether creating more queues would pass
// Limits.MaxQueues, with the refusal to answer; it counts the refusal.
func (m *queuesManager) queueLimitReached(more int) (requestFailure, bool) {
	limit, held := m.core.config.Limits.MaxQueues, len(m.queues)
	if held+more <= limit {
		return requestFailure{}, false
	}
	m.core.metrics.limitReached(limitQueues)
	return requestFailure{code: wire.CodeResourceLimit, message: fmt.Sprintf(
		"the node holds %d queues and its limit is %d; delete queues or raise the limit (fibril serve --max-queues)",
		held, limit)}, true
}

// maybeDeclareDeadLetterQueue makes sure a declared dead-letter queue
// exists, durable with defaults, so handoffs never wait on a declare.
func (m *queuesManager) maybeDeclareDeadLetterQueue(ctx actor.Context, name string) {
	if name == "" {
		return
	}
	if _, ok := m.queues[name]; !ok {
		m.spawnQueue(ctx, name, queue.Options{})
	}
}

// answerDeclare answers a declare of a ready queue.
func (m *queuesManager) answerDeclare(ctx actor.Context, record *queueRecord, msg declareRequest) {
	if !record.created {
		// Checked again now that the queue is open: its log may hold a mode
		// revision the declaration file does not (partition_mode.go).
		if conflict := declareConflict(record.home.effectiveOptions(), msg.options, msg.mode); conflict.failed() {
			ctx.Send(msg.replyTo, declareResult{requestID: msg.requestID, failure: conflict})
			return
		}
	}
	result := declareResult{requestID: msg.requestID, created: record.created,
		mode: wireMode(record.home.effectiveOptions().Mode)}
	record.created = false
	if record.home.effectiveOptions().Mode == queue.Buffered {
		result.warnings = []string{BufferedWarning}
	}
	ctx.Send(msg.replyTo, result)
}

// storageOptions converts a declare's options. Replication options are
// refused: this node runs alone.
func storageOptions(name string, options wire.QueueOptions, mode wire.Mode) (queue.Options, error) {
	if options.Policy != "" {
		return queue.Options{}, fmt.Errorf("replication policy %q needs a cluster; this node runs alone", options.Policy)
	}
	if options.Replicas > 1 {
		return queue.Options{}, fmt.Errorf("%d replicas need a cluster; this node runs alone", options.Replicas)
	}
	if options.DeadLetterQueue != "" {
		if err := ValidateQueueName(options.DeadLetterQueue); err != nil {
			return queue.Options{}, fmt.Errorf("dead_letter_queue: %w", err)
		}
		if options.DeadLetterQueue == name {
			return queue.Options{}, fmt.Errorf("dead_letter_queue: a queue cannot be its own dead-letter queue")
		}
	}
	converted := queue.Options{
		LeaseTimeout:    time.Duration(options.LeaseTimeoutMs) * time.Millisecond,
		MaxDeliveries:   options.MaxDeliveries,
		DeadLetterQueue: options.DeadLetterQueue,
		MessageTTL:      time.Duration(options.MessageTTLMs) * time.Millisecond,
		MaxLength:       options.MaxLength,
		MaxBytes:        options.MaxBytes,
		RedeliveryDelay: time.Duration(options.RedeliveryDelayMs) * time.Millisecond,
		DedupWindow:     time.Duration(options.DedupWindowMs) * time.Millisecond,
		DedupMaxEntries: options.DedupMaxEntries,
	}
	if options.Dedup && converted.DedupWindow == 0 {
		converted.DedupWindow = queue.DefaultDedupWindow // "dedup": true turns it on with the default window
	}
	switch mode {
	case wire.ModeDurable:
		converted.Mode = queue.Durable
	case wire.ModeBuffered:
		converted.Mode = queue.Buffered
	}
	switch options.Overflow {
	case wire.OverflowRejectNew:
		converted.Overflow = queue.RejectPublish
	case wire.OverflowDropOldest:
		converted.Overflow = queue.DropOldest
	case "":
	default:
		return queue.Options{}, fmt.Errorf("overflow %q: want %q or %q", options.Overflow,
			wire.OverflowRejectNew, wire.OverflowDropOldest)
	}
	return converted, nil
}

// wireOptions reports stored options (defaults applied) as declare options.
func wireOptions(options queue.Options) wire.QueueOptions {
	out := wire.QueueOptions{
		LeaseTimeoutMs:    uint32(options.LeaseTimeout / time.Millisecond),
		MaxDeliveries:     options.MaxDeliveries,
		DeadLetterQueue:   options.DeadLetterQueue,
		MessageTTLMs:      uint64(options.MessageTTL / time.Millisecond),
		MaxLength:         options.MaxLength,
		MaxBytes:          options.MaxBytes,
		RedeliveryDelayMs: uint32(options.RedeliveryDelay / time.Millisecond),
		DedupWindowMs:     uint32(options.DedupWindow / time.Millisecond),
		DedupMaxEntries:   options.DedupMaxEntries,
	}
	switch options.Overflow {
	case queue.RejectPublish:
		out.Overflow = wire.OverflowRejectNew
	case queue.DropOldest:
		out.Overflow = wire.OverflowDropOldest
	}
	return out
}

// declareConflict compares a re-declare with the stored declaration: every
// field the re-declare names must equal the stored one.
func declareConflict(stored queue.Options, options wire.QueueOptions, mode wire.Mode) requestFailure {
	if mode != wire.ModeUnset && mode != wireMode(stored.Mode) {
		return requestFailure{code: wire.CodeModeConflict, message: fmt.Sprintf(
			"the queue is %s; its mode is fixed at first declare and a re-declare naming %s is refused "+
				"(omit the mode to keep it)", stored.Mode, mode)}
	}
	current := wireOptions(stored)
	differs := func(field string, requested, have any) requestFailure {
		return requestFailure{code: wire.CodeInvalidOptions, message: fmt.Sprintf(
			"%s is fixed at first declare: the queue has %v, the re-declare names %v (omit it to keep it)",
			field, have, requested)}
	}
	type field struct {
		name            string
		set, equal      bool
		requested, have any
	}
	fields := []field{
		{"lease_timeout_ms", options.LeaseTimeoutMs != 0, options.LeaseTimeoutMs == current.LeaseTimeoutMs, options.LeaseTimeoutMs, current.LeaseTimeoutMs},
		{"max_deliveries", options.MaxDeliveries != 0, options.MaxDeliveries == current.MaxDeliveries, options.MaxDeliveries, current.MaxDeliveries},
		{"dead_letter_queue", options.DeadLetterQueue != "", options.DeadLetterQueue == current.DeadLetterQueue, options.DeadLetterQueue, current.DeadLetterQueue},
		{"message_ttl_ms", options.MessageTTLMs != 0, options.MessageTTLMs == current.MessageTTLMs, options.MessageTTLMs, current.MessageTTLMs},
		{"max_length", options.MaxLength != 0, options.MaxLength == current.MaxLength, options.MaxLength, current.MaxLength},
		{"max_bytes", options.MaxBytes != 0, options.MaxBytes == current.MaxBytes, options.MaxBytes, current.MaxBytes},
		{"overflow", options.Overflow != "", options.Overflow == current.Overflow, options.Overflow, current.Overflow},
		{"redelivery_delay_ms", options.RedeliveryDelayMs != 0, options.RedeliveryDelayMs == current.RedeliveryDelayMs, options.RedeliveryDelayMs, current.RedeliveryDelayMs},
		{"dedup", options.Dedup, current.DedupWindowMs != 0, options.Dedup, current.DedupWindowMs != 0},
		{"dedup_window_ms", options.DedupWindowMs != 0, options.DedupWindowMs == current.DedupWindowMs, options.DedupWindowMs, current.DedupWindowMs},
		{"dedup_max_entries", options.DedupMaxEntries != 0, options.DedupMaxEntries == current.DedupMaxEntries, options.DedupMaxEntries, current.DedupMaxEntries},
	}
	for _, f := range fields {
		if f.set && !f.equal {
			return differs(f.name, f.requested, f.have)
		}
	}
	if options.Policy != "" || options.Replicas > 1 {
		return requestFailure{code: wire.CodeInvalidOptions, message: "replication options need a cluster; this node runs alone"}
	}
	return requestFailure{}
}

// scanQueues lists the declared queues under root and removes leftovers of
// interrupted deletes. A directory without a readable declaration is
// skipped with a warning (never deleted: it may hold data).
func scanQueues(fs vfs.FS, root string, logger *slog.Logger) (map[string]queue.Options, error) {
	if err := fs.MkdirAll(root); err != nil {
		return nil, err
	}
	names, err := fs.ReadDir(root)
	if err != nil {
		return nil, err
	}
	declarations := make(map[string]queue.Options)
	for _, name := range names {
		if strings.HasPrefix(name, deletedPrefix) {
			if err := removeChild(fs, root, name); err != nil {
				logger.Warn("could not finish removing a deleted queue", "dir", name, "err", err)
			}
			continue
		}
		dir, err := wire.JoinQueuePath(root, name, "0")
		if err != nil {
			logger.Warn("skipping a directory that is not a queue", "dir", name, "err", err)
			continue
		}
		options, exists, err := queue.ReadDeclaration(fs, dir)
		if err != nil || !exists {
			logger.Warn("skipping a queue directory without a readable declaration", "queue", name, "err", err)
			continue
		}
		declarations[name] = options
	}
	return declarations, nil
}

// removeQueueFiles removes a deleted queue's directory: rename it out of
// the way (durably), then remove the tree.
func removeQueueFiles(fs vfs.FS, dataDir, name string, unique uint64) error {
	root := path.Join(dataDir, queuesDirName)
	dir, err := wire.JoinQueuePath(root, name)
	if err != nil {
		return err
	}
	tombstoneName := fmt.Sprintf("%s%s-%d", deletedPrefix, name, unique)
	if err := wire.SafePathElement(tombstoneName); err != nil {
		return err
	}
	tombstone := path.Join(root, tombstoneName)
	if err := fs.Rename(dir, tombstone); err != nil {
		if errors.Is(err, vfs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := fs.SyncDir(root); err != nil {
		return err
	}
	return removeTree(fs, tombstone)
}

// removeChild removes the entry child of dir (a name read from dir, or
// made by the node) and everything under it; child must be one path
// element (wire.SafePathElement).
func removeChild(fs vfs.FS, dir, child string) error {
	if err := wire.SafePathElement(child); err != nil {
		return err
	}
	return removeTree(fs, path.Join(dir, child))
}

// removeTree removes a file or a directory and everything under it.
func removeTree(fs vfs.FS, name string) error {
	children, err := fs.ReadDir(name)
	if err == nil {
		for _, child := range children {
			if err := removeChild(fs, name, child); err != nil {
				return err
			}
		}
	}
	if err := fs.Remove(name); err != nil && !errors.Is(err, vfs.ErrNotExist) {
		return err
	}
	return nil
}

// gatherInfos asks each queue's partition for its info, concurrently,
// waiting at most infoTimeout. A queue that cannot answer is reported with
// its failure as the fence error. It runs on a caller's goroutine, never
// in an actor's Receive.
func gatherInfos(system *actor.ActorSystem, routes []queueRoute) []wire.QueueInfo {
	futures := make([]*actor.Future, len(routes))
	for i, route := range routes {
		// A cluster replica (routed not_owner) answers with its own copy.
		if !route.failure.failed() || route.failure.code == wire.CodeNotOwner {
			futures[i] = system.Root.RequestFuture(route.pid, infoRequest{}, infoTimeout)
		}
	}
	infos := make([]wire.QueueInfo, len(routes))
	for i, route := range routes {
		infos[i] = wire.QueueInfo{Name: route.name, Fenced: true, FenceError: route.failure.message}
		if futures[i] == nil {
			continue
		}
		result, err := futures[i].Result()
		if answer, ok := result.(infoResult); ok && err == nil {
			if answer.failure.failed() {
				infos[i].FenceError = answer.failure.message // stopping: not serving, for now
				continue
			}
			infos[i] = answer.info
			continue
		}
		infos[i].FenceError = fmt.Sprintf("the queue did not answer: %v", err)
	}
	return infos
}
