// Declare options and queue info (docs/protocol.md 6.1 and 6.2), between
// their msgpack maps and typed objects. Counters and positions are bigint:
// they are u64 on the wire.

import type { MsgpackValue } from "./msgpack.js";

export type Mode = "durable" | "buffered";
export type Overflow = "reject_new" | "drop_oldest";

/** What a declare sets. Every option is fixed at first declare; a key left out (or 0, or "") keeps the value in effect. */
export interface QueueConfig {
  /** Fixed at first declare; durable when a new queue names none. */
  mode?: Mode;
  leaseTimeoutMs?: number;
  maxDeliveries?: number;
  /** Needs maxDeliveries in the same declare. */
  deadLetterQueue?: string;
  messageTtlMs?: number | bigint;
  maxLength?: number | bigint;
  maxBytes?: number | bigint;
  overflow?: Overflow;
  redeliveryDelayMs?: number;
  policy?: string;
  replicas?: number;
  /** Deduplicate publishes with the node's default window (2 min) when dedupWindowMs is not set. */
  dedup?: boolean;
  /** Deduplicate publishes within this window (docs/protocol.md 4.3). */
  dedupWindowMs?: number;
  dedupMaxEntries?: number;
}

const optionKeys: [keyof QueueConfig, string][] = [
  ["leaseTimeoutMs", "lease_timeout_ms"], ["maxDeliveries", "max_deliveries"], ["deadLetterQueue", "dead_letter_queue"],
  ["messageTtlMs", "message_ttl_ms"], ["maxLength", "max_length"], ["maxBytes", "max_bytes"], ["overflow", "overflow"],
  ["redeliveryDelayMs", "redelivery_delay_ms"], ["policy", "policy"], ["replicas", "replicas"], ["dedup", "dedup"],
  ["dedupWindowMs", "dedup_window_ms"], ["dedupMaxEntries", "dedup_max_entries"],
];

/** The options map of a declare: the set keys only, in the document's order; undefined when none is set. */
export function optionsMap(config: QueueConfig): { [key: string]: MsgpackValue } | undefined {
  const out: { [key: string]: MsgpackValue } = {};
  let any = false;
  for (const [field, key] of optionKeys) {
    const value = config[field];
    if (value === undefined || value === 0 || value === 0n || value === "" || value === false) continue;
    if (typeof value === "number") {
      if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${String(field)} must be a non-negative integer`);
      out[key] = BigInt(value);
    } else {
      out[key] = value as MsgpackValue;
    }
    any = true;
  }
  return any ? out : undefined;
}

/** The options in effect, as queue info reports them. */
export interface QueueOptions {
  leaseTimeoutMs?: number;
  maxDeliveries?: number;
  deadLetterQueue?: string;
  messageTtlMs?: bigint;
  maxLength?: bigint;
  maxBytes?: bigint;
  overflow?: Overflow;
  redeliveryDelayMs?: number;
  policy?: string;
  replicas?: number;
  dedupWindowMs?: number;
  dedupMaxEntries?: number;
}

export interface ReplicaInfo {
  node: string;
  writtenNext: bigint;
  durableNext: bigint;
  /** The mode revision this copy applied, as the owner derives it (undefined when it cannot tell). */
  appliedMode?: Mode;
  modeRevision: bigint;
}

/** A mode change that has not applied (docs/protocol.md 6.2, mode_change). */
export interface ModeChangeInfo {
  revision: bigint;
  mode: Mode;
  offset: bigint;
  state: string;
  reason: string;
  sinceUnixMs: bigint;
}

/** One queue's state. Each position and count names its boundary. */
export interface QueueInfo {
  name: string;
  mode: Mode;
  policy: string;
  options: QueueOptions;
  ready: bigint;
  leased: bigint;
  delayed: bigint;
  /** Moved to the dead-letter queue or dropped for want of one (nack without requeue, max_deliveries). */
  deadLettered: bigint;
  consumers: number;
  /** Log offset after the last record handed to the OS (written boundary). */
  writtenNext: bigint;
  /** Log offset after the last fsynced record (durable boundary). */
  durableNext: bigint;
  unsyncedRecords: bigint;
  unsyncedBytes: bigint;
  lastSyncUnixMs: bigint;
  syncIntervalMs: number;
  syncPending: boolean;
  lastSyncError: string;
  fenced: boolean;
  fenceError: string;
  owner: string;
  epoch: bigint;
  replicas: ReplicaInfo[];
  /** The mode the newest recorded revision names: mode unless a change is pending. */
  desiredMode: Mode;
  /** The revision that set mode (0n: as declared). */
  modeRevision: bigint;
  /** The pending or failed mode change, undefined when none. */
  modeChange?: ModeChangeInfo;
  /** The map as the node sent it, unknown keys included. */
  raw: { [key: string]: MsgpackValue };
}

function big(v: MsgpackValue | undefined): bigint {
  return typeof v === "bigint" ? v : 0n;
}
function num(v: MsgpackValue | undefined): number {
  return typeof v === "bigint" ? Number(v) : 0;
}
function text(v: MsgpackValue | undefined): string {
  return typeof v === "string" ? v : "";
}
function map(v: MsgpackValue | undefined): { [key: string]: MsgpackValue } {
  return v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Uint8Array) ? v : {};
}

function optionsOf(raw: { [key: string]: MsgpackValue }): QueueOptions {
  const out: QueueOptions = {};
  if (raw.lease_timeout_ms !== undefined) out.leaseTimeoutMs = num(raw.lease_timeout_ms);
  if (raw.max_deliveries !== undefined) out.maxDeliveries = num(raw.max_deliveries);
  if (raw.dead_letter_queue !== undefined) out.deadLetterQueue = text(raw.dead_letter_queue);
  if (raw.message_ttl_ms !== undefined) out.messageTtlMs = big(raw.message_ttl_ms);
  if (raw.max_length !== undefined) out.maxLength = big(raw.max_length);
  if (raw.max_bytes !== undefined) out.maxBytes = big(raw.max_bytes);
  if (raw.overflow !== undefined) out.overflow = text(raw.overflow) as Overflow;
  if (raw.redelivery_delay_ms !== undefined) out.redeliveryDelayMs = num(raw.redelivery_delay_ms);
  if (raw.policy !== undefined) out.policy = text(raw.policy);
  if (raw.replicas !== undefined) out.replicas = num(raw.replicas);
  if (raw.dedup_window_ms !== undefined) out.dedupWindowMs = num(raw.dedup_window_ms);
  if (raw.dedup_max_entries !== undefined) out.dedupMaxEntries = num(raw.dedup_max_entries);
  return out;
}

/** Reads a queue info map; readers skip keys they do not know. */
export function queueInfoOf(value: MsgpackValue): QueueInfo {
  const raw = map(value);
  if (text(raw.name) === "") throw new Error("queue info has no name");
  const replicas = Array.isArray(raw.replicas) ? raw.replicas : [];
  const modeOf = (v: MsgpackValue | undefined): Mode => (text(v) === "buffered" ? "buffered" : "durable");
  const change = raw.mode_change === undefined ? undefined : map(raw.mode_change);
  return {
    name: text(raw.name), mode: text(raw.mode) === "buffered" ? "buffered" : "durable", policy: text(raw.policy),
    options: optionsOf(map(raw.options)), ready: big(raw.ready), leased: big(raw.leased), delayed: big(raw.delayed),
    deadLettered: big(raw.dead_lettered), consumers: num(raw.consumers), writtenNext: big(raw.written_next),
    durableNext: big(raw.durable_next), unsyncedRecords: big(raw.unsynced_records), unsyncedBytes: big(raw.unsynced_bytes),
    lastSyncUnixMs: big(raw.last_sync_unix_ms), syncIntervalMs: num(raw.sync_interval_ms), syncPending: raw.sync_pending === true,
    lastSyncError: text(raw.last_sync_error), fenced: raw.fenced === true, fenceError: text(raw.fence_error),
    owner: text(raw.owner), epoch: big(raw.epoch),
    replicas: replicas.map((r) => {
      const m = map(r);
      return { node: text(m.node), writtenNext: big(m.written_next), durableNext: big(m.durable_next),
        appliedMode: m.applied_mode === undefined ? undefined : modeOf(m.applied_mode), modeRevision: big(m.mode_revision) };
    }),
    desiredMode: modeOf(raw.desired_mode ?? raw.mode), modeRevision: big(raw.mode_revision),
    modeChange: change === undefined ? undefined : { revision: big(change.revision), mode: modeOf(change.mode),
      offset: big(change.offset), state: text(change.state), reason: text(change.reason), sinceUnixMs: big(change.since_unix_ms) },
    raw,
  };
}
