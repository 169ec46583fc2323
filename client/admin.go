package client

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/fibrilmq/fibril/wire"
)

// Mode is a queue's durability mode: the boundary its confirms and
// deliveries stand on.
type Mode = wire.Mode

// Modes.
const (
	// ModeDurable: confirms and deliveries wait until the required copies
	// have fsynced the message. The default.
	ModeDurable = wire.ModeDurable
	// ModeBuffered: they wait until the copies have written it to the OS;
	// a power loss on every required copy before the next background sync
	// loses it.
	ModeBuffered = wire.ModeBuffered
)

// Overflow says what a publish to a full queue does.
type Overflow = wire.Overflow

// Overflow behaviours.
const (
	OverflowRejectNew  = wire.OverflowRejectNew  // refuse it with limit_reached (the default)
	OverflowDropOldest = wire.OverflowDropOldest // accept it and drop the oldest ready message
)

// QueueInfo describes a queue; every position says which boundary it
// means (written or durable).
type QueueInfo = wire.QueueInfo

// ReplicaInfo is one copy of a queue, as its owner last heard of it.
type ReplicaInfo = wire.ReplicaInfo

// QueueConfig is a queue's declaration. Zero fields are not set: a new
// queue takes the node's default, an existing one keeps its value.
//
// The mode of a new queue, by deployment kind:
//
//	                      single node            cluster
//	Mode set              that mode              that mode (policy: a majority of replicas at its boundary)
//	Mode zero             durable (sent as such) durable (sent as such)
//	KeepMode, new queue   durable                the cluster's default_policy; unset: buffered
//	                                             (replica_buffered with a majority)
//	KeepMode, existing    its mode, unchanged    its mode, unchanged
//
// Whatever was sent, DeclareResult.Mode and Policy are the node's answer,
// never a guess (docs/cluster.md, "Declaring").
type QueueConfig struct {
	// Mode is fixed when the queue is created. The zero value means
	// durable, and is sent as such: re-declaring a buffered queue without
	// Buffered (or KeepMode) is refused with mode_conflict.
	Mode Mode
	// KeepMode sends no mode at all: an existing queue keeps its mode, and
	// a new one gets the deployment's default (durable on a single node;
	// in a cluster the default policy, buffered unless configured). The
	// result names the mode the queue really has.
	KeepMode bool

	LeaseTimeout    time.Duration // how long a delivery may stay unsettled before it is delivered again
	MaxDeliveries   uint32        // attempts after which a message is dead-lettered; 0 = unlimited
	DeadLetterQueue string        // where dead-lettered messages go; empty = dropped
	MessageTTL      time.Duration // ready messages older than this are dropped (not dead-lettered)
	MaxLength       uint64        // most messages held
	MaxBytes        uint64        // most payload bytes held
	Overflow        Overflow      // what a publish to a full queue does
	RedeliveryDelay time.Duration // delay before a nacked or expired message is ready again
	Policy          string        // replication policy, e.g. "replica_durable:2"
	Replicas        uint32        // copies including the owner

	// Dedup turns deduplication on with the node's default window (2
	// minutes) when DedupWindow is not set; DedupWindow turns it on with
	// that window. A queue that deduplicates does not store a second copy
	// of a message whose producer pair (Options.Idempotent) or message id
	// it stored within the window, and confirms the copy as a duplicate
	// (docs/protocol.md 4.3).
	Dedup       bool
	DedupWindow time.Duration
	// DedupMaxEntries bounds the keys the queue remembers (the node's
	// default: 100,000); past it the oldest leave early, and the window is
	// then shorter than DedupWindow.
	DedupMaxEntries uint32
}

// DeclareResult is the node's answer to a declare.
type DeclareResult struct {
	Created  bool     // this declare created the queue
	Mode     Mode     // the queue's effective mode, as the node reports it
	Policy   string   // the effective replication policy; empty on a single node
	Warnings []string // for people; a buffered queue always has one about power loss
}

// Declare creates a queue, or checks and updates an existing one, and
// reports its effective mode, policy and any warnings, as the node states
// them.
func (c *Client) Declare(ctx context.Context, queue string, config QueueConfig) (DeclareResult, error) {
	if err := checkName("queue name", queue); err != nil {
		return DeclareResult{}, err
	}
	options, err := config.options()
	if err != nil {
		return DeclareResult{}, err
	}
	mode := config.Mode
	switch {
	case config.KeepMode:
		mode = wire.ModeUnset
	case mode == wire.ModeUnset:
		mode = ModeDurable
	case mode != ModeDurable && mode != ModeBuffered:
		return DeclareResult{}, errorf(ErrInvalidConfig, "unknown mode %d", uint8(mode))
	}
	answer, err := c.roundTrip(ctx, call{queue: queue, build: func(id uint64) wire.Frame {
		return &wire.Declare{RequestID: id, Queue: queue, Options: options, Mode: mode}
	}})
	if err != nil {
		return DeclareResult{}, err
	}
	switch frame := answer.frame.(type) {
	case *wire.DeclareOKMode:
		return DeclareResult{Created: frame.Created, Mode: frame.Mode, Policy: frame.Policy,
			Warnings: append([]string(nil), frame.Warnings...)}, nil
	case *wire.DeclareOK:
		// An older node answers a mode-less declare with FDK1, which names
		// no mode: read the mode the queue really has from its info.
		info, err := c.QueueInfo(ctx, queue)
		if err != nil {
			return DeclareResult{}, fmt.Errorf("reading the mode of %q after its declare: %w", queue, err)
		}
		return DeclareResult{Created: frame.Created, Mode: info.Mode, Policy: info.Policy}, nil
	}
	return DeclareResult{}, unexpectedReply("declare", answer.frame)
}

// options converts the config to the protocol's declare options.
func (config QueueConfig) options() (wire.QueueOptions, error) {
	lease, err := durationMs(config.LeaseTimeout, math.MaxUint32)
	if err != nil {
		return wire.QueueOptions{}, fmt.Errorf("lease timeout: %w", err)
	}
	ttl, err := durationMs(config.MessageTTL, math.MaxUint64)
	if err != nil {
		return wire.QueueOptions{}, fmt.Errorf("message ttl: %w", err)
	}
	delay, err := durationMs(config.RedeliveryDelay, math.MaxUint32)
	if err != nil {
		return wire.QueueOptions{}, fmt.Errorf("redelivery delay: %w", err)
	}
	window, err := durationMs(config.DedupWindow, math.MaxUint32)
	if err != nil {
		return wire.QueueOptions{}, fmt.Errorf("dedup window: %w", err)
	}
	if config.DeadLetterQueue != "" {
		if err := checkName("dead-letter queue name", config.DeadLetterQueue); err != nil {
			return wire.QueueOptions{}, err
		}
	}
	return wire.QueueOptions{
		LeaseTimeoutMs: uint32(lease), MaxDeliveries: config.MaxDeliveries, DeadLetterQueue: config.DeadLetterQueue,
		MessageTTLMs: ttl, MaxLength: config.MaxLength, MaxBytes: config.MaxBytes, Overflow: config.Overflow,
		RedeliveryDelayMs: uint32(delay), Policy: config.Policy, Replicas: config.Replicas,
		Dedup: config.Dedup && window == 0, DedupWindowMs: uint32(window), DedupMaxEntries: config.DedupMaxEntries,
	}, nil
}

// durationMs converts a duration to whole milliseconds, rounding a
// fraction up so a small positive duration never becomes "not set".
func durationMs(d time.Duration, limit uint64) (uint64, error) {
	if d < 0 {
		return 0, errorf(ErrInvalidConfig, "negative duration %s", d)
	}
	ms := uint64((d + time.Millisecond - 1) / time.Millisecond)
	if ms > limit {
		return 0, errorf(ErrInvalidConfig, "duration %s is over the protocol's limit of %d ms", d, limit)
	}
	return ms, nil
}

// QueueInfo returns a queue's info, from its owner.
func (c *Client) QueueInfo(ctx context.Context, queue string) (QueueInfo, error) {
	if err := checkName("queue name", queue); err != nil {
		return QueueInfo{}, err
	}
	answer, err := c.roundTrip(ctx, call{queue: queue, build: func(id uint64) wire.Frame {
		return &wire.GetQueueInfo{RequestID: id, Queue: queue}
	}})
	if err != nil {
		return QueueInfo{}, err
	}
	if frame, ok := answer.frame.(*wire.QueueInfoReply); ok {
		return frame.Info, nil
	}
	return QueueInfo{}, unexpectedReply("get-queue-info", answer.frame)
}

// ListQueues returns every queue whose name starts with prefix (empty:
// all), in name order, asking page after page.
func (c *Client) ListQueues(ctx context.Context, prefix string) ([]QueueInfo, error) {
	var queues []QueueInfo
	after := ""
	for {
		answer, err := c.roundTrip(ctx, call{link: c.home, build: func(id uint64) wire.Frame {
			return &wire.ListQueues{RequestID: id, Prefix: prefix, After: after}
		}})
		if err != nil {
			return nil, err
		}
		page, ok := answer.frame.(*wire.QueueList)
		if !ok {
			return nil, unexpectedReply("list-queues", answer.frame)
		}
		queues = append(queues, page.Queues...)
		if !page.More || len(page.Queues) == 0 || page.Queues[len(page.Queues)-1].Name <= after {
			return queues, nil
		}
		after = page.Queues[len(page.Queues)-1].Name
	}
}

// DeleteQueue deletes a queue and its messages, returning how many
// messages were removed.
func (c *Client) DeleteQueue(ctx context.Context, queue string) (uint64, error) {
	return c.countRequest(ctx, "delete-queue", queue, func(id uint64) wire.Frame {
		return &wire.DeleteQueue{RequestID: id, Queue: queue}
	})
}

// PurgeQueue removes a queue's ready messages (leased ones stay with their
// consumers), returning how many were removed.
func (c *Client) PurgeQueue(ctx context.Context, queue string) (uint64, error) {
	return c.countRequest(ctx, "purge-queue", queue, func(id uint64) wire.Frame {
		return &wire.PurgeQueue{RequestID: id, Queue: queue}
	})
}

func (c *Client) countRequest(ctx context.Context, name, queue string, build func(uint64) wire.Frame) (uint64, error) {
	if err := checkName("queue name", queue); err != nil {
		return 0, err
	}
	answer, err := c.roundTrip(ctx, call{queue: queue, build: build})
	if err != nil {
		return 0, err
	}
	if frame, ok := answer.frame.(*wire.OK); ok {
		return frame.Count, nil
	}
	return 0, unexpectedReply(name, answer.frame)
}

// Ping asks the home node for a pong and returns the round-trip time.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	answer, err := c.roundTrip(ctx, call{link: c.home, build: func(id uint64) wire.Frame {
		return &wire.Ping{RequestID: id}
	}})
	if err != nil {
		return 0, err
	}
	if _, ok := answer.frame.(*wire.Pong); !ok {
		return 0, unexpectedReply("ping", answer.frame)
	}
	return time.Since(start), nil
}

func unexpectedReply(request string, frame wire.Frame) error {
	if frame == nil {
		return fmt.Errorf("client: %s got no reply frame", request)
	}
	return fmt.Errorf("client: %s was answered with %s (%s)", request, frame.Tag(), frame.Tag().Name())
}

// errorf wraps a sentinel with a formatted detail.
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
