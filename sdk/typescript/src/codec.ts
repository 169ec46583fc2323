// Frame codecs of protocol version 1 (docs/protocol.md sections 2, 3 and 5).
//
// Every frame is an 8-byte envelope (tag: 4 ASCII bytes; body length: u32
// big-endian) and a body laid out as the tag says. Integers are big-endian
// and fixed width; u64 and i64 values are bigint, because node-chosen ids
// pass 2^53. Decoding is strict: a body that breaks its layout (too short,
// trailing bytes, an enum or bool out of its set, invalid UTF-8, a count the
// body cannot hold, a zero where the layout says "not 0") throws a
// FrameDecodeError, which a connection answers with malformed_frame.

import { decodeMsgpack, encodeMsgpack, type MsgpackValue } from "./msgpack.js";

export const HEADER_BYTES = 8;
export const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;
export const MIN_MAX_BODY_BYTES = 4096;
export const PROTOCOL_VERSION = 1;
export const MAX_STRING_BYTES = 65535;

export type Header = [key: string, value: Uint8Array];

export interface PublishMessage {
  /** A bigint, or a number up to 2^53 (what a session's counter reaches in practice). */
  seq: bigint | number;
  /** FPB2 only: the publisher's own number for the message; 0 (or absent) for none. */
  producerSeq?: bigint | number;
  messageId: string;
  headers: Header[];
  payload: Uint8Array;
}

export interface Delivery {
  deliveryTag: bigint;
  incarnation: bigint;
  offset: bigint;
  attempt: number;
  redelivered: boolean;
  publishUnixNanos: bigint;
  messageId: string;
  headers: Header[];
  payload: Uint8Array;
}

export interface ConfirmRange { first: bigint; last: bigint; boundary: number }
/** An FCF2 range: duplicate says the messages were stored before and not stored again. */
export interface IdempotentRange { first: bigint; last: bigint; boundary: number; duplicate: boolean }
export interface RejectRange { first: bigint; last: bigint; code: number; message: string }

/** Every frame of version 1, by tag. */
export type Frame =
  | { tag: "FHL1"; versions: number[]; clientName: string; authToken: Uint8Array; previousSession: string; maxBodyBytes: number }
  | { tag: "FHO1"; version: number; nodeId: string; sessionId: string; session: number; maxBodyBytes: number; serverVersion: string }
  | { tag: "FDC1"; requestId: bigint; queue: string; options: Uint8Array; mode: number | undefined }
  | { tag: "FDK1"; requestId: bigint; created: boolean }
  | { tag: "FDK2"; requestId: bigint; created: boolean; mode: number; policy: string; warnings: string[] }
  | { tag: "FPB1"; queue: string; messages: PublishMessage[] }
  | { tag: "FCF1"; ranges: ConfirmRange[] }
  | { tag: "FPB2"; queue: string; producerId: string; messages: PublishMessage[] }
  | { tag: "FCF2"; ranges: IdempotentRange[] }
  | { tag: "FNC1"; ranges: RejectRange[] }
  | { tag: "FSB1"; requestId: bigint; queue: string; prefetch: number }
  | { tag: "FSK1"; requestId: bigint; subscriptionId: bigint; prefetch: number }
  | { tag: "FDL1"; subscriptionId: bigint; deliveries: Delivery[] }
  | { tag: "FAK1" | "FRL1" | "FDS1"; subscriptionId: bigint; deliveryTags: bigint[] }
  | { tag: "FNK1"; subscriptionId: bigint; requeue: boolean; delayMs: number; deliveryTags: bigint[] }
  | { tag: "FUS1"; requestId: bigint; subscriptionId: bigint }
  | { tag: "FSE1"; subscriptionId: bigint; code: number; message: string }
  | { tag: "FIQ1" | "FDQ1" | "FPG1"; requestId: bigint; queue: string }
  | { tag: "FIR1"; requestId: bigint; info: MsgpackValue }
  | { tag: "FLQ1"; requestId: bigint; prefix: string; after: string; limit: number }
  | { tag: "FLR1"; requestId: bigint; more: boolean; queues: MsgpackValue }
  | { tag: "FOK1"; requestId: bigint; count: bigint }
  | { tag: "FPI1" | "FPO1"; requestId: bigint }
  | { tag: "FER1"; requestId: bigint; code: number; message: string }
  | { tag: "FRD1"; requestId: bigint; queue: string; nodeId: string; address: string }
  /** Protocol version 2's redirect (this SDK speaks version 1, so a node does not send it; decoded for completeness). */
  | { tag: "FRD2"; requestId: bigint; queue: string; nodeId: string; address: string; epoch: bigint }
  | { tag: "FAK2"; requestId: bigint; subscriptionId: bigint; deliveryTags: bigint[] }
  | { tag: "FMC1"; requestId: bigint; queue: string; mode: number; waitMs: number }
  | { tag: "FMK1"; requestId: bigint; outcome: number; mode: number; applied: number; revision: bigint; message: string }
  /** Protocol version 3's resume-publishing (this SDK speaks version 1, whose sessions are never fenced; encoded and decoded for completeness). */
  | { tag: "FRS1"; queue: string };

export type Tag = Frame["tag"];

/** The tags this codec knows, and which side sends each. */
// Node-to-node frames (FQ.., FX..: docs/protocol.md section 8) are not part
// of the client protocol; a client that receives one treats it as an
// unknown frame.
export const TAGS: Record<Tag, "client" | "node" | "either"> = {
  FHL1: "client", FHO1: "node", FDC1: "client", FDK1: "node", FDK2: "node", FPB1: "client", FCF1: "node",
  FNC1: "node", FSB1: "client", FSK1: "node", FDL1: "node", FAK1: "client", FNK1: "client", FRL1: "client",
  FDS1: "client", FUS1: "client", FSE1: "node", FIQ1: "client", FIR1: "node", FLQ1: "client", FLR1: "node",
  FDQ1: "client", FPG1: "client", FOK1: "node", FPI1: "either", FPO1: "either", FER1: "either", FRD1: "node",
  FAK2: "client", FPB2: "client", FCF2: "node", FRD2: "node", FMC1: "client", FMK1: "node", FRS1: "client",
};

/** A body that breaks its layout. */
export class FrameDecodeError extends Error {
  constructor(readonly tag: string, readonly field: string, detail: string) {
    super(`malformed ${tag}: field ${field}: ${detail}`);
    this.name = "FrameDecodeError";
  }
}

/** The name of a tag for messages: its characters when printable (0x21-0x7E), hex otherwise. */
export function tagName(tag: Uint8Array | string): string {
  const bytes = typeof tag === "string" ? Buffer.from(tag, "latin1") : tag;
  for (const b of bytes) {
    if (b < 0x21 || b > 0x7e) return "0x" + Buffer.from(bytes).toString("hex");
  }
  return Buffer.from(bytes).toString("latin1");
}

const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const U64_MAX = (1n << 64n) - 1n;

/** Appends big-endian fields to a growing buffer. */
export class Encoder {
  private buf: Buffer;
  private off = 0;

  constructor(initialBytes = 256) {
    this.buf = Buffer.allocUnsafe(initialBytes);
  }

  get length(): number {
    return this.off;
  }

  private room(n: number): void {
    if (this.off + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.off + n) size *= 2;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.off);
    this.buf = grown;
  }

  u8(v: number): this {
    this.room(1);
    this.buf[this.off++] = v;
    return this;
  }
  u16(v: number): this {
    this.room(2);
    this.buf.writeUInt16BE(v, this.off);
    this.off += 2;
    return this;
  }
  u32(v: number): this {
    this.room(4);
    this.buf.writeUInt32BE(v >>> 0, this.off);
    this.off += 4;
    return this;
  }
  u64(v: bigint | number): this {
    this.room(8);
    if (typeof v === "number") {
      if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`${v} is not a u64 this encoder takes as a number`);
      this.buf.writeUInt32BE(Math.floor(v / 0x1_0000_0000), this.off);
      this.buf.writeUInt32BE(v >>> 0, this.off + 4);
      this.off += 8;
      return this;
    }
    if (v < 0n || v > U64_MAX) throw new RangeError(`${v} does not fit a u64`);
    this.buf.writeBigUInt64BE(v, this.off);
    this.off += 8;
    return this;
  }
  i64(v: bigint): this {
    this.room(8);
    this.buf.writeBigInt64BE(v, this.off);
    this.off += 8;
    return this;
  }
  bool(v: boolean): this {
    return this.u8(v ? 1 : 0);
  }
  raw(bytes: Uint8Array): this {
    this.room(bytes.length);
    this.buf.set(bytes, this.off);
    this.off += bytes.length;
    return this;
  }
  string(v: string): this {
    if (v.length === 0) return this.u16(0);
    const n = Buffer.byteLength(v, "utf8");
    if (n > MAX_STRING_BYTES) throw new RangeError(`a string of ${n} bytes is over 65,535`);
    this.u16(n);
    this.room(n);
    this.off += this.buf.write(v, this.off, n, "utf8");
    return this;
  }
  /** Four ASCII tag characters. */
  tag(v: string): this {
    this.room(4);
    this.buf.write(v, this.off, 4, "latin1");
    this.off += 4;
    return this;
  }
  bytes(v: Uint8Array): this {
    return this.u32(v.length).raw(v);
  }
  headers(headers: Header[]): this {
    if (headers.length > 0xffff) throw new RangeError("more than 65,535 headers");
    this.u16(headers.length);
    for (const [key, value] of headers) this.string(key).bytes(value);
    return this;
  }
  /** Patches a u32 at an earlier offset (a frame's body length). */
  patchU32(at: number, v: number): void {
    this.buf.writeUInt32BE(v, at);
  }
  /** The bytes written so far (a view; copy if the encoder is reused). */
  bytesView(): Buffer {
    return this.buf.subarray(0, this.off);
  }
  /** Hands over the bytes written so far and starts on a fresh buffer, so they need no copy. */
  takeBytes(): Buffer {
    const out = this.buf.subarray(0, this.off);
    this.buf = Buffer.allocUnsafe(Math.max(256, Math.min(this.buf.length, 1 << 20)));
    this.off = 0;
    return out;
  }
  reset(): void {
    this.off = 0;
  }
}

/** Reads a body strictly: every read checks the bytes that remain. */
export class Decoder {
  private off = 0;
  constructor(private readonly tag: string, private readonly body: Buffer) {}

  private need(field: string, n: number): void {
    if (this.body.length - this.off < n) throw new FrameDecodeError(this.tag, field, `cut short: needs ${n} more bytes`);
  }
  remaining(): number {
    return this.body.length - this.off;
  }
  u8(field: string): number {
    this.need(field, 1);
    return this.body[this.off++]!;
  }
  u16(field: string): number {
    this.need(field, 2);
    const v = this.body.readUInt16BE(this.off);
    this.off += 2;
    return v;
  }
  u32(field: string): number {
    this.need(field, 4);
    const v = this.body.readUInt32BE(this.off);
    this.off += 4;
    return v;
  }
  u64(field: string): bigint {
    this.need(field, 8);
    const v = this.body.readBigUInt64BE(this.off);
    this.off += 8;
    return v;
  }
  nonZeroU64(field: string): bigint {
    const v = this.u64(field);
    if (v === 0n) throw new FrameDecodeError(this.tag, field, "must not be 0");
    return v;
  }
  i64(field: string): bigint {
    this.need(field, 8);
    const v = this.body.readBigInt64BE(this.off);
    this.off += 8;
    return v;
  }
  bool(field: string): boolean {
    const b = this.u8(field);
    if (b > 1) throw new FrameDecodeError(this.tag, field, `a bool is 00 or 01, found ${b}`);
    return b === 1;
  }
  enumU8(field: string, min: number, max: number): number {
    const v = this.u8(field);
    if (v < min || v > max) throw new FrameDecodeError(this.tag, field, `${v} is outside ${min}..${max}`);
    return v;
  }
  string(field: string): string {
    const n = this.u16(field);
    this.need(field, n);
    const bytes = this.body.subarray(this.off, this.off + n);
    this.off += n;
    try {
      return strictUtf8.decode(bytes);
    } catch {
      throw new FrameDecodeError(this.tag, field, "invalid UTF-8");
    }
  }
  bytes(field: string): Buffer {
    const n = this.u32(field);
    this.need(field, n);
    const out = this.body.subarray(this.off, this.off + n);
    this.off += n;
    return out;
  }
  /** A count whose elements take at least minBytes each. */
  count(field: string, width: 16 | 32, minBytes: number, atLeastOne: boolean): number {
    const n = width === 16 ? this.u16(field) : this.u32(field);
    if (atLeastOne && n === 0) throw new FrameDecodeError(this.tag, field, "must hold at least one element");
    if (n * minBytes > this.remaining()) {
      throw new FrameDecodeError(this.tag, field, `a count of ${n} cannot fit the ${this.remaining()} bytes left`);
    }
    return n;
  }
  headers(field: string): Header[] {
    const n = this.count(field, 16, 2 + 4, false);
    const out: Header[] = [];
    for (let i = 0; i < n; i++) out.push([this.string("key"), this.bytes("value")]);
    return out;
  }
  finish(): void {
    if (this.off !== this.body.length) {
      throw new FrameDecodeError(this.tag, "end", `${this.body.length - this.off} bytes after the layout`);
    }
  }
}

function tags(list: bigint[]): (e: Encoder) => void {
  return (e) => {
    e.u32(list.length);
    for (const t of list) e.u64(t);
  };
}

function readTags(d: Decoder): bigint[] {
  const n = d.count("delivery_tags", 32, 8, true);
  const out: bigint[] = [];
  for (let i = 0; i < n; i++) out.push(d.nonZeroU64("delivery_tag"));
  return out;
}

/** Writes f's body (without the envelope). */
export function encodeBody(e: Encoder, f: Frame): void {
  switch (f.tag) {
    case "FHL1":
      e.u16(f.versions.length);
      for (const v of f.versions) e.u16(v);
      e.string(f.clientName).bytes(f.authToken).string(f.previousSession).u32(f.maxBodyBytes);
      return;
    case "FHO1":
      e.u16(f.version).string(f.nodeId).string(f.sessionId).u8(f.session).u32(f.maxBodyBytes).string(f.serverVersion);
      return;
    case "FDC1":
      e.u64(f.requestId).string(f.queue).bytes(f.options);
      if (f.mode !== undefined) e.u8(f.mode);
      return;
    case "FDK1":
      e.u64(f.requestId).bool(f.created);
      return;
    case "FDK2":
      e.u64(f.requestId).bool(f.created).u8(f.mode).string(f.policy).u16(f.warnings.length);
      for (const w of f.warnings) e.string(w);
      return;
    case "FPB1":
      e.string(f.queue).u32(f.messages.length);
      for (const m of f.messages) e.u64(m.seq).string(m.messageId).headers(m.headers).bytes(m.payload);
      return;
    case "FCF1":
      e.u32(f.ranges.length);
      for (const r of f.ranges) e.u64(r.first).u64(r.last).u8(r.boundary);
      return;
    case "FPB2":
      e.string(f.queue).string(f.producerId).u32(f.messages.length);
      for (const m of f.messages) e.u64(m.seq).u64(m.producerSeq ?? 0).string(m.messageId).headers(m.headers).bytes(m.payload);
      return;
    case "FCF2":
      e.u32(f.ranges.length);
      for (const r of f.ranges) e.u64(r.first).u64(r.last).u8(r.boundary).bool(r.duplicate);
      return;
    case "FNC1":
      e.u32(f.ranges.length);
      for (const r of f.ranges) e.u64(r.first).u64(r.last).u16(r.code).string(r.message);
      return;
    case "FSB1":
      e.u64(f.requestId).string(f.queue).u32(f.prefetch);
      return;
    case "FSK1":
      e.u64(f.requestId).u64(f.subscriptionId).u32(f.prefetch);
      return;
    case "FDL1":
      e.u64(f.subscriptionId).u32(f.deliveries.length);
      for (const d of f.deliveries) {
        e.u64(d.deliveryTag).u64(d.incarnation).u64(d.offset).u32(d.attempt).bool(d.redelivered).i64(d.publishUnixNanos);
        e.string(d.messageId).headers(d.headers).bytes(d.payload);
      }
      return;
    case "FAK1":
    case "FRL1":
    case "FDS1":
      e.u64(f.subscriptionId);
      tags(f.deliveryTags)(e);
      return;
    case "FNK1":
      e.u64(f.subscriptionId).bool(f.requeue).u32(f.delayMs);
      tags(f.deliveryTags)(e);
      return;
    case "FUS1":
      e.u64(f.requestId).u64(f.subscriptionId);
      return;
    case "FSE1":
      e.u64(f.subscriptionId).u16(f.code).string(f.message);
      return;
    case "FIQ1":
    case "FDQ1":
    case "FPG1":
      e.u64(f.requestId).string(f.queue);
      return;
    case "FIR1":
      e.u64(f.requestId).bytes(encodeMsgpack(f.info));
      return;
    case "FLQ1":
      e.u64(f.requestId).string(f.prefix).string(f.after).u32(f.limit);
      return;
    case "FLR1":
      e.u64(f.requestId).bool(f.more).bytes(encodeMsgpack(f.queues));
      return;
    case "FOK1":
      e.u64(f.requestId).u64(f.count);
      return;
    case "FPI1":
    case "FPO1":
      e.u64(f.requestId);
      return;
    case "FRS1":
      e.string(f.queue);
      return;
    case "FER1":
      e.u64(f.requestId).u16(f.code).string(f.message);
      return;
    case "FRD1":
      e.u64(f.requestId).string(f.queue).string(f.nodeId).string(f.address);
      return;
    case "FRD2":
      e.u64(f.requestId).string(f.queue).string(f.nodeId).string(f.address).u64(f.epoch);
      return;
    case "FMC1":
      e.u64(f.requestId).string(f.queue).u8(f.mode).u32(f.waitMs);
      return;
    case "FMK1":
      e.u64(f.requestId).u8(f.outcome).u8(f.mode).u8(f.applied).u64(f.revision).string(f.message);
      return;
    case "FAK2":
      e.u64(f.requestId).u64(f.subscriptionId);
      tags(f.deliveryTags)(e);
      return;
  }
}

/** Appends f, envelope and body, and returns its body length. */
export function encodeFrame(e: Encoder, f: Frame): number {
  e.tag(f.tag);
  const lengthAt = e.length;
  e.u32(0);
  const start = e.length;
  encodeBody(e, f);
  const bodyBytes = e.length - start;
  e.patchU32(lengthAt, bodyBytes);
  return bodyBytes;
}

/** The bytes of one frame. */
export function frameBytes(f: Frame): Buffer {
  const e = new Encoder();
  encodeFrame(e, f);
  return Buffer.from(e.bytesView());
}

const MIN_PUBLISH_MESSAGE = 8 + 2 + 2 + 4;
const MIN_DELIVERY = 8 + 8 + 8 + 4 + 1 + 8 + 2 + 2 + 4;
const CONFIRM_RANGE = 17;
const MIN_IDEMPOTENT_MESSAGE = 8 + 8 + 2 + 2 + 4;
const IDEMPOTENT_RANGE = 18;
const MIN_REJECT_RANGE = 20;

function sequenceRange(d: Decoder): [bigint, bigint] {
  const first = d.nonZeroU64("first_seq");
  const last = d.u64("last_seq");
  if (last < first) throw new FrameDecodeError("range", "last_seq", `${last} is below first_seq ${first}`);
  return [first, last];
}

/** Decodes a body; throws FrameDecodeError for a broken one, Error for an unknown tag. */
export function decodeBody(tag: string, body: Buffer): Frame {
  const d = new Decoder(tag, body);
  let f: Frame;
  switch (tag) {
    case "FHL1": {
      const n = d.count("versions", 16, 2, true);
      const versions: number[] = [];
      for (let i = 0; i < n; i++) versions.push(d.u16("version"));
      f = { tag, versions, clientName: d.string("client_name"), authToken: d.bytes("auth_token"),
        previousSession: d.string("previous_session"), maxBodyBytes: d.u32("max_body_bytes") };
      break;
    }
    case "FHO1":
      f = { tag, version: d.u16("version"), nodeId: d.string("node_id"), sessionId: d.string("session_id"),
        session: d.enumU8("session", 0, 1), maxBodyBytes: d.u32("max_body_bytes"), serverVersion: d.string("server_version") };
      break;
    case "FDC1": {
      const requestId = d.nonZeroU64("request_id");
      const queue = d.string("queue");
      const options = d.bytes("options");
      let mode: number | undefined;
      if (d.remaining() > 0) mode = d.enumU8("mode", 1, 2);
      f = { tag, requestId, queue, options, mode };
      break;
    }
    case "FDK1":
      f = { tag, requestId: d.nonZeroU64("request_id"), created: d.bool("created") };
      break;
    case "FDK2": {
      const requestId = d.nonZeroU64("request_id");
      const created = d.bool("created");
      const mode = d.enumU8("mode", 1, 2);
      const policy = d.string("policy");
      const n = d.count("warnings", 16, 2, false);
      const warnings: string[] = [];
      for (let i = 0; i < n; i++) warnings.push(d.string("warning"));
      f = { tag, requestId, created, mode, policy, warnings };
      break;
    }
    case "FPB1": {
      const queue = d.string("queue");
      const n = d.count("messages", 32, MIN_PUBLISH_MESSAGE, true);
      const messages: PublishMessage[] = [];
      let previous = 0n;
      for (let i = 0; i < n; i++) {
        const seq = d.nonZeroU64("seq");
        if (seq <= previous) throw new FrameDecodeError(tag, "seq", `${seq} does not increase on ${previous}`);
        previous = seq;
        messages.push({ seq, messageId: d.string("message_id"), headers: d.headers("headers"), payload: d.bytes("payload") });
      }
      f = { tag, queue, messages };
      break;
    }
    case "FPB2": {
      const queue = d.string("queue");
      const producerId = d.string("producer_id");
      const n = d.count("messages", 32, MIN_IDEMPOTENT_MESSAGE, true);
      const messages: PublishMessage[] = [];
      let previous = 0n;
      for (let i = 0; i < n; i++) {
        const seq = d.nonZeroU64("seq");
        if (seq <= previous) throw new FrameDecodeError(tag, "seq", `${seq} does not increase on ${previous}`);
        previous = seq;
        const producerSeq = d.u64("producer_seq");
        if (producerSeq !== 0n && producerId === "") throw new FrameDecodeError(tag, "producer_seq", `${producerSeq} needs a producer_id`);
        messages.push({ seq, producerSeq, messageId: d.string("message_id"), headers: d.headers("headers"), payload: d.bytes("payload") });
      }
      f = { tag, queue, producerId, messages };
      break;
    }
    case "FCF2": {
      const n = d.count("ranges", 32, IDEMPOTENT_RANGE, true);
      const ranges: IdempotentRange[] = [];
      for (let i = 0; i < n; i++) {
        const [first, last] = sequenceRange(d);
        ranges.push({ first, last, boundary: d.enumU8("boundary", 1, 2), duplicate: d.bool("duplicate") });
      }
      f = { tag, ranges };
      break;
    }
    case "FCF1": {
      const n = d.count("ranges", 32, CONFIRM_RANGE, true);
      const ranges: ConfirmRange[] = [];
      for (let i = 0; i < n; i++) {
        const [first, last] = sequenceRange(d);
        ranges.push({ first, last, boundary: d.enumU8("boundary", 1, 2) });
      }
      f = { tag, ranges };
      break;
    }
    case "FNC1": {
      const n = d.count("ranges", 32, MIN_REJECT_RANGE, true);
      const ranges: RejectRange[] = [];
      for (let i = 0; i < n; i++) {
        const [first, last] = sequenceRange(d);
        ranges.push({ first, last, code: d.u16("code"), message: d.string("message") });
      }
      f = { tag, ranges };
      break;
    }
    case "FSB1":
      f = { tag, requestId: d.nonZeroU64("request_id"), queue: d.string("queue"), prefetch: d.u32("prefetch") };
      break;
    case "FSK1":
      f = { tag, requestId: d.nonZeroU64("request_id"), subscriptionId: d.nonZeroU64("subscription_id"), prefetch: d.u32("prefetch") };
      break;
    case "FDL1": {
      const subscriptionId = d.nonZeroU64("subscription_id");
      const n = d.count("deliveries", 32, MIN_DELIVERY, true);
      const deliveries: Delivery[] = [];
      for (let i = 0; i < n; i++) {
        const deliveryTag = d.nonZeroU64("delivery_tag");
        const incarnation = d.u64("incarnation");
        const offset = d.u64("offset");
        const attempt = d.u32("attempt");
        if (attempt === 0) throw new FrameDecodeError(tag, "attempt", "must not be 0");
        deliveries.push({ deliveryTag, incarnation, offset, attempt, redelivered: d.bool("redelivered"),
          publishUnixNanos: d.i64("publish_unix_nanos"), messageId: d.string("message_id"), headers: d.headers("headers"),
          payload: d.bytes("payload") });
      }
      f = { tag, subscriptionId, deliveries };
      break;
    }
    case "FAK1":
    case "FRL1":
    case "FDS1":
      f = { tag, subscriptionId: d.nonZeroU64("subscription_id"), deliveryTags: readTags(d) };
      break;
    case "FNK1":
      f = { tag, subscriptionId: d.nonZeroU64("subscription_id"), requeue: d.bool("requeue"), delayMs: d.u32("delay_ms"),
        deliveryTags: readTags(d) };
      break;
    case "FUS1":
      f = { tag, requestId: d.nonZeroU64("request_id"), subscriptionId: d.nonZeroU64("subscription_id") };
      break;
    case "FSE1":
      f = { tag, subscriptionId: d.nonZeroU64("subscription_id"), code: d.u16("code"), message: d.string("message") };
      break;
    case "FIQ1":
    case "FDQ1":
    case "FPG1":
      f = { tag, requestId: d.nonZeroU64("request_id"), queue: d.string("queue") };
      break;
    case "FIR1":
      f = { tag, requestId: d.nonZeroU64("request_id"), info: msgpackField(d, tag, "info") };
      break;
    case "FLQ1":
      f = { tag, requestId: d.nonZeroU64("request_id"), prefix: d.string("prefix"), after: d.string("after"), limit: d.u32("limit") };
      break;
    case "FLR1":
      f = { tag, requestId: d.nonZeroU64("request_id"), more: d.bool("more"), queues: msgpackField(d, tag, "queues") };
      break;
    case "FOK1":
      f = { tag, requestId: d.nonZeroU64("request_id"), count: d.u64("count") };
      break;
    case "FPI1":
    case "FPO1":
      f = { tag, requestId: d.nonZeroU64("request_id") };
      break;
    case "FRS1":
      f = { tag, queue: d.string("queue") };
      break;
    case "FER1":
      f = { tag, requestId: d.u64("request_id"), code: d.u16("code"), message: d.string("message") };
      break;
    case "FRD1":
      f = { tag, requestId: d.u64("request_id"), queue: d.string("queue"), nodeId: d.string("node_id"), address: d.string("address") };
      break;
    case "FRD2":
      f = { tag, requestId: d.u64("request_id"), queue: d.string("queue"), nodeId: d.string("node_id"), address: d.string("address"),
        epoch: d.u64("epoch") };
      break;
    case "FMC1":
      f = { tag, requestId: d.nonZeroU64("request_id"), queue: d.string("queue"), mode: d.enumU8("mode", 1, 2), waitMs: d.u32("wait_ms") };
      break;
    case "FMK1":
      f = { tag, requestId: d.nonZeroU64("request_id"), outcome: d.enumU8("outcome", 1, 3), mode: d.enumU8("mode", 1, 2),
        applied: d.enumU8("applied", 1, 2), revision: d.u64("revision"), message: d.string("message") };
      break;
    case "FAK2":
      f = { tag, requestId: d.nonZeroU64("request_id"), subscriptionId: d.nonZeroU64("subscription_id"),
        deliveryTags: readTags(d) };
      break;
    default:
      throw new Error(`unknown frame tag "${tagName(tag)}"`);
  }
  d.finish();
  return f;
}

function msgpackField(d: Decoder, tag: string, field: string): MsgpackValue {
  const raw = d.bytes(field);
  try {
    return decodeMsgpack(raw);
  } catch (err) {
    throw new FrameDecodeError(tag, field, (err as Error).message);
  }
}

/** Whether a tag is one this codec knows. */
export function isKnownTag(tag: string): tag is Tag {
  return Object.prototype.hasOwnProperty.call(TAGS, tag);
}
