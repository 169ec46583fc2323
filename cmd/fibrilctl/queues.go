package main

// The queue commands: declare, info, queues, delete, purge. Info and
// queues print either aligned text or, with --json, the queue info map of
// the protocol (docs/protocol.md, section 6.2) with the same key names.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fibrilmq/fibril/client"
)

func runDeclare(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	var config client.QueueConfig
	flags := newFlags(ctx, "declare", &shared)
	buffered := flags.Bool("buffered", false, "confirm once written to the OS instead of fsynced (the mode is fixed at the first declare)")
	durable := flags.Bool("durable", false, "confirm once fsynced (the default)")
	flags.BoolVar(&config.KeepMode, "keep-mode", false,
		"name no mode: an existing queue keeps its own, a new one gets the node's default (durable alone; the cluster's default policy)")
	flags.DurationVar(&config.LeaseTimeout, "lease", 0, "redeliver a delivery not settled within this")
	flags.Func("max-deliveries", "attempts before a message is dead-lettered", func(value string) error {
		n, err := parseUint(value, 32)
		config.MaxDeliveries = uint32(n)
		return err
	})
	flags.StringVar(&config.DeadLetterQueue, "dead-letter", "", "queue that receives dead-lettered messages")
	flags.DurationVar(&config.MessageTTL, "ttl", 0, "drop ready messages older than this (they are not dead-lettered)")
	flags.Func("max-length", "most messages the queue holds", func(value string) error {
		n, err := parseUint(value, 64)
		config.MaxLength = n
		return err
	})
	flags.Func("max-bytes", "most payload bytes the queue holds", func(value string) error {
		n, err := parseUint(value, 64)
		config.MaxBytes = n
		return err
	})
	flags.Func("overflow", "what a publish to a full queue does: reject_new (refused with limit_reached) or drop_oldest", func(value string) error {
		switch client.Overflow(value) {
		case client.OverflowRejectNew, client.OverflowDropOldest:
			config.Overflow = client.Overflow(value)
			return nil
		}
		return fmt.Errorf("want %s or %s", client.OverflowRejectNew, client.OverflowDropOldest)
	})
	flags.DurationVar(&config.RedeliveryDelay, "redelivery-delay", 0, "delay before a nacked or expired message is ready again")
	flags.BoolVar(&config.Dedup, "dedup", false,
		"deduplicate publishes: a message whose producer pair or message id the queue stored within the window is not stored again (window 2m unless --dedup-window)")
	flags.DurationVar(&config.DedupWindow, "dedup-window", 0, "deduplicate publishes within this window (turns --dedup on)")
	flags.Func("dedup-max-entries", "most keys the dedup table keeps (default 100000); past it the oldest leave early and the window is shorter",
		func(value string) error {
			n, err := parseUint(value, 32)
			config.DedupMaxEntries = uint32(n)
			return err
		})
	flags.StringVar(&config.Policy, "policy", "", "replication policy in a cluster, e.g. replica_durable:2, majority_durable, replica_buffered:2")
	flags.Func("replicas", "copies of the queue in a cluster, the owner included", func(value string) error {
		n, err := parseUint(value, 32)
		config.Replicas = uint32(n)
		return err
	})
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	switch {
	case boolCount(*buffered, *durable, config.KeepMode) > 1:
		return usagef("--buffered, --durable and --keep-mode exclude each other")
	case *buffered:
		config.Mode = client.ModeBuffered
	case config.Policy != "" && !*durable:
		config.KeepMode = true // the policy names the mode
	}
	c, err := shared.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	result, err := c.Declare(ctx, values[0], config)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%s mode=%s created=%t", values[0], result.Mode, result.Created)
	if result.Policy != "" {
		line += " policy=" + result.Policy
	}
	fmt.Fprintln(stdout, line)
	for _, warning := range result.Warnings {
		fmt.Fprintln(stdout, "warning: "+warning)
	}
	return nil
}

func parseUint(value string, bits int) (uint64, error) {
	n, err := strconv.ParseUint(value, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("want a whole number below 2^%d", bits)
	}
	return n, nil
}

func runInfo(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "info", &shared)
	asJSON := flags.Bool("json", false, "print JSON")
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	c, err := shared.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.QueueInfo(ctx, values[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, toJSON(info))
	}
	printInfo(stdout, info)
	return nil
}

func runQueues(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "queues", &shared)
	asJSON := flags.Bool("json", false, "print JSON")
	prefix := flags.String("prefix", "", "only queues whose names start with this")
	if _, err := parseArgs(flags, args, stdout); err != nil {
		return err
	}
	c, err := shared.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	queues, err := c.ListQueues(ctx, *prefix)
	if err != nil {
		return err
	}
	queues = withOwnersCounts(ctx, c, queues)
	if *asJSON {
		list := make([]queueJSON, 0, len(queues))
		for _, info := range queues {
			list = append(list, toJSON(info))
		}
		return writeJSON(stdout, list)
	}
	clustered := false
	for _, q := range queues {
		clustered = clustered || q.Owner != ""
	}
	table := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	header := "NAME\tMODE\tREADY\tLEASED\tDELAYED\tDEAD_LETTERED\tCONSUMERS\tUNSYNCED\tFENCED"
	if clustered {
		header += "\tOWNER\tPOLICY"
	}
	fmt.Fprintln(table, header)
	for _, q := range queues {
		line := fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%t", q.Name, q.Mode, q.Ready, q.Leased, q.Delayed,
			q.DeadLettered, q.Consumers, q.UnsyncedRecords, q.Fenced)
		if clustered {
			owner := q.Owner
			if owner == "" {
				owner = "(electing)"
			}
			line += "\t" + owner + "\t" + q.Policy
		}
		fmt.Fprintln(table, line)
	}
	return table.Flush()
}

// withOwnersCounts fills in, in a cluster, the counts of queues the
// answering node lists from its catalog without owning them: their info
// comes from their owners (the SDK follows the redirect). A queue whose
// owner cannot answer keeps the catalog's entry.
func withOwnersCounts(ctx context.Context, c *client.Client, queues []client.QueueInfo) []client.QueueInfo {
	session, _ := c.Session()
	for i, q := range queues {
		if q.Owner == "" || q.Owner == session.NodeID {
			continue
		}
		if info, err := c.QueueInfo(ctx, q.Name); err == nil {
			queues[i] = info
		}
	}
	return queues
}

func runDelete(ctx context.Context, args []string, stdout io.Writer) error {
	return countCommand(ctx, "delete", args, stdout, (*client.Client).DeleteQueue, "deleted %s: %d messages removed\n")
}

func runPurge(ctx context.Context, args []string, stdout io.Writer) error {
	return countCommand(ctx, "purge", args, stdout, (*client.Client).PurgeQueue, "purged %s: %d messages removed\n")
}

func countCommand(ctx context.Context, name string, args []string, stdout io.Writer,
	request func(*client.Client, context.Context, string) (uint64, error), format string) error {
	var shared connection
	flags := newFlags(ctx, name, &shared)
	values, err := parseArgs(flags, args, stdout, "NAME")
	if err != nil {
		return err
	}
	c, err := shared.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	removed, err := request(c, ctx, values[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, format, values[0], removed)
	return nil
}

// queueJSON is the protocol's queue info map as JSON.
type queueJSON struct {
	Name            string        `json:"name"`
	Mode            string        `json:"mode"`
	Policy          string        `json:"policy,omitempty"`
	Options         optionsJSON   `json:"options"`
	Ready           uint64        `json:"ready"`
	Leased          uint64        `json:"leased"`
	Delayed         uint64        `json:"delayed"`
	DeadLettered    uint64        `json:"dead_lettered"`
	Consumers       uint32        `json:"consumers"`
	WrittenNext     uint64        `json:"written_next"`
	DurableNext     uint64        `json:"durable_next"`
	UnsyncedRecords uint64        `json:"unsynced_records"`
	UnsyncedBytes   uint64        `json:"unsynced_bytes"`
	LastSyncUnixMs  int64         `json:"last_sync_unix_ms"`
	SyncIntervalMs  uint32        `json:"sync_interval_ms"`
	SyncPending     bool          `json:"sync_pending"`
	LastSyncError   string        `json:"last_sync_error,omitempty"`
	Fenced          bool          `json:"fenced"`
	FenceError      string        `json:"fence_error,omitempty"`
	Owner           string        `json:"owner,omitempty"`
	Epoch           uint64        `json:"epoch,omitempty"`
	Replicas        []replicaJSON `json:"replicas,omitempty"`
	Dedup           *dedupJSON    `json:"dedup,omitempty"`
	DesiredMode     string        `json:"desired_mode"`
	ModeRevision    uint64        `json:"mode_revision"`
	ModeChange      *modeJSON     `json:"mode_change,omitempty"`
}

type modeJSON struct {
	Revision    uint64 `json:"revision"`
	Mode        string `json:"mode"`
	Offset      uint64 `json:"offset"`
	State       string `json:"state"`
	Reason      string `json:"reason"`
	SinceUnixMs int64  `json:"since_unix_ms"`
}

type dedupJSON struct {
	Entries           uint64 `json:"entries"`
	EvictedEarly      uint64 `json:"evicted_early"`
	OldestUnixMs      int64  `json:"oldest_unix_ms,omitempty"`
	DuplicatesRefused uint64 `json:"duplicates_refused"`
}

type optionsJSON struct {
	LeaseTimeoutMs    uint32 `json:"lease_timeout_ms,omitempty"`
	MaxDeliveries     uint32 `json:"max_deliveries,omitempty"`
	DeadLetterQueue   string `json:"dead_letter_queue,omitempty"`
	MessageTTLMs      uint64 `json:"message_ttl_ms,omitempty"`
	MaxLength         uint64 `json:"max_length,omitempty"`
	MaxBytes          uint64 `json:"max_bytes,omitempty"`
	Overflow          string `json:"overflow,omitempty"`
	RedeliveryDelayMs uint32 `json:"redelivery_delay_ms,omitempty"`
	Policy            string `json:"policy,omitempty"`
	Replicas          uint32 `json:"replicas,omitempty"`
	DedupWindowMs     uint32 `json:"dedup_window_ms,omitempty"`
	DedupMaxEntries   uint32 `json:"dedup_max_entries,omitempty"`
}

type replicaJSON struct {
	Node         string `json:"node"`
	WrittenNext  uint64 `json:"written_next"`
	DurableNext  uint64 `json:"durable_next"`
	AppliedMode  string `json:"applied_mode,omitempty"`
	ModeRevision uint64 `json:"mode_revision,omitempty"`
}

func toJSON(q client.QueueInfo) queueJSON {
	o := q.Options
	out := queueJSON{
		Name: q.Name, Mode: q.Mode.String(), Policy: q.Policy,
		Options: optionsJSON{LeaseTimeoutMs: o.LeaseTimeoutMs, MaxDeliveries: o.MaxDeliveries,
			DeadLetterQueue: o.DeadLetterQueue, MessageTTLMs: o.MessageTTLMs, MaxLength: o.MaxLength,
			MaxBytes: o.MaxBytes, Overflow: string(o.Overflow), RedeliveryDelayMs: o.RedeliveryDelayMs,
			Policy: o.Policy, Replicas: o.Replicas, DedupWindowMs: o.DedupWindowMs, DedupMaxEntries: o.DedupMaxEntries},
		Ready: q.Ready, Leased: q.Leased, Delayed: q.Delayed, DeadLettered: q.DeadLettered, Consumers: q.Consumers,
		WrittenNext: q.WrittenNext, DurableNext: q.DurableNext, UnsyncedRecords: q.UnsyncedRecords,
		UnsyncedBytes: q.UnsyncedBytes, LastSyncUnixMs: q.LastSyncUnixMs, SyncIntervalMs: q.SyncIntervalMs,
		SyncPending: q.SyncPending, LastSyncError: q.LastSyncError, Fenced: q.Fenced, FenceError: q.FenceError,
		Owner: q.Owner, Epoch: q.Epoch, DesiredMode: q.Desired().String(), ModeRevision: q.ModeRevision,
	}
	for _, r := range q.Replicas {
		out.Replicas = append(out.Replicas, replicaJSON{Node: r.Node, WrittenNext: r.WrittenNext, DurableNext: r.DurableNext,
			AppliedMode: r.AppliedMode.String(), ModeRevision: r.ModeRevision})
	}
	if m := q.ModeChange; m != nil {
		out.ModeChange = &modeJSON{Revision: m.Revision, Mode: m.Mode.String(), Offset: m.Offset, State: m.State,
			Reason: m.Reason, SinceUnixMs: m.SinceUnixMs}
	}
	if d := q.Dedup; d != nil {
		out.Dedup = &dedupJSON{Entries: d.Entries, EvictedEarly: d.EvictedEarly, OldestUnixMs: d.OldestUnixMs,
			DuplicatesRefused: d.Refused}
	}
	return out
}

func writeJSON(w io.Writer, value any) error {
	encoder := json.NewEncoder(w)
	encoder.SetIndent("", "  ")
	return encoder.Encode(value)
}

// printInfo prints one queue as aligned "key: value" lines; positions
// name their boundary.
func printInfo(w io.Writer, q client.QueueInfo) {
	table := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(key string, value any) { fmt.Fprintf(table, "%s:\t%v\n", key, value) }
	row("name", q.Name)
	row("mode", fmt.Sprintf("%s (revision %d)", q.Mode, q.ModeRevision))
	if m := q.ModeChange; m != nil {
		row("mode_change", fmt.Sprintf("%s: revision %d to %s at offset %d: %s", m.State, m.Revision, m.Mode, m.Offset, m.Reason))
	}
	if q.Policy != "" {
		row("policy", q.Policy)
	}
	row("options", describeOptions(toJSON(q).Options))
	row("ready", q.Ready)
	row("leased", q.Leased)
	row("delayed", q.Delayed)
	row("dead_lettered", q.DeadLettered)
	row("consumers", q.Consumers)
	row("written_next", fmt.Sprintf("%d (written boundary: reached the OS)", q.WrittenNext))
	row("durable_next", fmt.Sprintf("%d (durable boundary: fsynced)", q.DurableNext))
	row("unsynced", fmt.Sprintf("%d records, %d bytes", q.UnsyncedRecords, q.UnsyncedBytes))
	lastSync := "never"
	if q.LastSyncUnixMs != 0 {
		lastSync = time.UnixMilli(q.LastSyncUnixMs).UTC().Format(time.RFC3339Nano)
	}
	row("last_sync", lastSync)
	if q.SyncIntervalMs == 0 {
		row("sync_interval", "off (the OS alone decides when data reaches the disk)")
	} else {
		row("sync_interval", time.Duration(q.SyncIntervalMs)*time.Millisecond)
	}
	row("sync_pending", q.SyncPending)
	if q.LastSyncError != "" {
		row("last_sync_error", q.LastSyncError)
	}
	row("fenced", q.Fenced)
	if q.FenceError != "" {
		row("fence_error", q.FenceError)
	}
	if q.Owner != "" {
		row("owner", fmt.Sprintf("%s (epoch %d)", q.Owner, q.Epoch))
	}
	for _, r := range q.Replicas {
		applied := ""
		if r.AppliedMode != client.Mode(0) {
			applied = fmt.Sprintf(", applied %s (revision %d)", r.AppliedMode, r.ModeRevision)
		}
		row("replica "+r.Node, fmt.Sprintf("written_next %d, durable_next %d%s", r.WrittenNext, r.DurableNext, applied))
	}
	if d := q.Dedup; d != nil {
		reach := "empty"
		if d.OldestUnixMs != 0 {
			reach = "oldest " + time.UnixMilli(d.OldestUnixMs).UTC().Format(time.RFC3339Nano)
		}
		row("dedup", fmt.Sprintf("%d entries (%s), %d evicted early, %d duplicates refused since the queue opened",
			d.Entries, reach, d.EvictedEarly, d.Refused))
	}
	table.Flush()
}

// describeOptions lists the set options as key=value, in protocol order.
func describeOptions(o optionsJSON) string {
	var parts []string
	add := func(key string, value any, set bool) {
		if set {
			parts = append(parts, fmt.Sprintf("%s=%v", key, value))
		}
	}
	add("lease_timeout_ms", o.LeaseTimeoutMs, o.LeaseTimeoutMs != 0)
	add("max_deliveries", o.MaxDeliveries, o.MaxDeliveries != 0)
	add("dead_letter_queue", o.DeadLetterQueue, o.DeadLetterQueue != "")
	add("message_ttl_ms", o.MessageTTLMs, o.MessageTTLMs != 0)
	add("max_length", o.MaxLength, o.MaxLength != 0)
	add("max_bytes", o.MaxBytes, o.MaxBytes != 0)
	add("overflow", o.Overflow, o.Overflow != "")
	add("redelivery_delay_ms", o.RedeliveryDelayMs, o.RedeliveryDelayMs != 0)
	add("policy", o.Policy, o.Policy != "")
	add("replicas", o.Replicas, o.Replicas != 0)
	add("dedup_window_ms", o.DedupWindowMs, o.DedupWindowMs != 0)
	add("dedup_max_entries", o.DedupMaxEntries, o.DedupMaxEntries != 0)
	if len(parts) == 0 {
		return "none set"
	}
	return strings.Join(parts, " ")
}
