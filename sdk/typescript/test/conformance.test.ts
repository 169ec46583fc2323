// The conformance suite's runner for this SDK (docs/conformance.md): every
// case of testdata/conformance/*.json, against the nodes named by
// FIBRIL_CONFORMANCE_ADDR, FIBRIL_CONFORMANCE_AUTH_ADDR (with
// FIBRIL_CONFORMANCE_TOKEN), FIBRIL_CONFORMANCE_SMALL_ADDR and
// FIBRIL_CONFORMANCE_TIMERS_ADDR. It speaks
// frames through this SDK's codec, so it checks the codec against the node
// as well as the node against the document. Pending cases, and cases of a
// profile with no address, are skipped with the reason.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { DEFAULT_MAX_BODY_BYTES, Encoder, decodeBody, encodeFrame, isKnownTag, type Frame } from "../src/codec.js";
import { encodeMsgpack, type MsgpackValue } from "../src/msgpack.js";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Value = null | boolean | bigint | number | string | Uint8Array | Value[] | { [key: string]: Value };

const here = path.dirname(fileURLToPath(import.meta.url));
const suiteDir = path.resolve(here, "../../../../testdata/conformance");
const addresses: Record<string, string | undefined> = {
  default: process.env.FIBRIL_CONFORMANCE_ADDR,
  auth: process.env.FIBRIL_CONFORMANCE_AUTH_ADDR,
  small: process.env.FIBRIL_CONFORMANCE_SMALL_ADDR,
  timers: process.env.FIBRIL_CONFORMANCE_TIMERS_ADDR,
};
const token = process.env.FIBRIL_CONFORMANCE_TOKEN ?? "";
/** Where `POST /restart?profile=NAME` restarts a node (go run ./conformance/nodes serves it); unset skips restart cases. */
const control = process.env.FIBRIL_CONFORMANCE_CONTROL;
const STEP_TIMEOUT_MS = 10_000;
const runId = `ts${Math.floor(Math.random() * 1e9)}`;

interface Case { name: string; rule?: string; node?: string; pending?: string; steps: Record<string, Json>[] }

const requestTags = new Set(["FAK2", "FDC1", "FSB1", "FUS1", "FIQ1", "FLQ1", "FDQ1", "FPG1", "FPI1"]);
const operatorKeys = new Set(["capture", "any", "absent", "contains", "min", "max", "length", "one_of", "not", "includes"]);

// ---- values: frames the node sends, as the suite's JSON names them ----

const text = (b: Uint8Array): string => Buffer.from(b).toString("utf8");

function msgpackValue(v: MsgpackValue): Value {
  if (v instanceof Uint8Array) return v;
  if (Array.isArray(v)) return v.map(msgpackValue);
  if (v !== null && typeof v === "object") {
    const out: { [k: string]: Value } = {};
    for (const [k, item] of Object.entries(v)) out[k] = msgpackValue(item);
    return out;
  }
  return v;
}

function frameValue(f: Frame): { [key: string]: Value } {
  switch (f.tag) {
    case "FHO1":
      return { tag: f.tag, version: BigInt(f.version), node_id: f.nodeId, session_id: f.sessionId, session: BigInt(f.session),
        max_body_bytes: BigInt(f.maxBodyBytes), server_version: f.serverVersion };
    case "FDK1":
      return { tag: f.tag, request_id: f.requestId, created: f.created };
    case "FDK2":
      return { tag: f.tag, request_id: f.requestId, created: f.created, mode: BigInt(f.mode), policy: f.policy, warnings: f.warnings };
    case "FCF1":
      return { tag: f.tag, ranges: f.ranges.map((r) => ({ first_seq: r.first, last_seq: r.last, boundary: BigInt(r.boundary) })) };
    case "FCF2":
      return { tag: f.tag, ranges: f.ranges.map((r) => ({ first_seq: r.first, last_seq: r.last, boundary: BigInt(r.boundary), duplicate: r.duplicate })) };
    case "FNC1":
      return { tag: f.tag, ranges: f.ranges.map((r) => ({ first_seq: r.first, last_seq: r.last, code: BigInt(r.code), message: r.message })) };
    case "FSK1":
      return { tag: f.tag, request_id: f.requestId, subscription_id: f.subscriptionId, prefetch: BigInt(f.prefetch) };
    case "FDL1":
      return { tag: f.tag, subscription_id: f.subscriptionId, deliveries: f.deliveries.map((d) => ({
        delivery_tag: d.deliveryTag, incarnation: d.incarnation, offset: d.offset, attempt: BigInt(d.attempt),
        redelivered: d.redelivered, publish_unix_nanos: d.publishUnixNanos, message_id: d.messageId,
        headers: d.headers.map(([k, v]) => [k, text(v)]), payload: text(d.payload) })) };
    case "FSE1":
      return { tag: f.tag, subscription_id: f.subscriptionId, code: BigInt(f.code), message: f.message };
    case "FIR1":
      return { tag: f.tag, request_id: f.requestId, info: msgpackValue(f.info) };
    case "FLR1":
      return { tag: f.tag, request_id: f.requestId, more: f.more, queues: msgpackValue(f.queues) };
    case "FOK1":
      return { tag: f.tag, request_id: f.requestId, count: f.count };
    case "FPI1":
    case "FPO1":
      return { tag: f.tag, request_id: f.requestId };
    case "FER1":
      return { tag: f.tag, request_id: f.requestId, code: BigInt(f.code), message: f.message };
    case "FRD1":
      return { tag: f.tag, request_id: f.requestId, queue: f.queue, node_id: f.nodeId, address: f.address };
    case "FRD2":
      return { tag: f.tag, request_id: f.requestId, queue: f.queue, node_id: f.nodeId, address: f.address, epoch: f.epoch };
  }
  throw new Error(`the node sent ${f.tag}, which a node does not send to a client`);
}

// ---- building client frames from the suite's JSON ----

function asBig(v: Json | Value | undefined, field: string): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  if (typeof v === "string" && /^\d+$/.test(v)) return BigInt(v);
  if (v === undefined) return 0n;
  throw new Error(`field ${field}: want an integer, found ${JSON.stringify(String(v))}`);
}

function asBytes(v: Json | Value | undefined): Uint8Array {
  if (v === undefined) return new Uint8Array(0);
  if (typeof v === "string") return Buffer.from(v, "utf8");
  if (v instanceof Uint8Array) return v;
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    if (typeof v.hex === "string") return Buffer.from(v.hex.replace(/\s+/g, ""), "hex");
    if (typeof v.repeat === "string") return Buffer.from(v.repeat.repeat(Number(asBig(v.count as Json, "count"))), "utf8");
  }
  throw new Error(`want a string, {"hex"} or {"repeat","count"}, found ${JSON.stringify(v)}`);
}

function jsonToMsgpack(v: Json): MsgpackValue {
  if (typeof v === "number") return Number.isInteger(v) ? BigInt(v) : v;
  if (Array.isArray(v)) return v.map(jsonToMsgpack);
  if (v !== null && typeof v === "object") {
    const out: { [k: string]: MsgpackValue } = {};
    for (const key of Object.keys(v).sort()) out[key] = jsonToMsgpack(v[key]!);
    return out;
  }
  return v;
}

function buildFrame(o: { [key: string]: Json | Value }): Frame {
  const big = (k: string): bigint => asBig(o[k], k);
  const str = (k: string): string => (o[k] === undefined ? "" : String(o[k]));
  const list = (k: string): (Json | Value)[] => (Array.isArray(o[k]) ? (o[k] as (Json | Value)[]) : []);
  const tags = (): bigint[] => list("delivery_tags").map((t) => asBig(t, "delivery_tag"));
  const tag = str("tag");
  switch (tag) {
    case "FHL1":
      return { tag, versions: list("versions").map((v) => Number(v)), clientName: str("client_name"), authToken: asBytes(o.auth_token),
        previousSession: str("previous_session"), maxBodyBytes: Number(big("max_body_bytes")) };
    case "FDC1": {
      let options: Uint8Array = new Uint8Array(0);
      if (o.options_hex !== undefined) options = asBytes({ hex: o.options_hex as string });
      else if (o.options !== undefined) options = encodeMsgpack(jsonToMsgpack(o.options as Json));
      return { tag, requestId: big("request_id"), queue: str("queue"), options, mode: o.mode === undefined ? undefined : Number(o.mode) };
    }
    case "FPB1":
      return { tag, queue: str("queue"), messages: list("messages").map((item) => {
        const m = item as { [k: string]: Json };
        return { seq: asBig(m.seq, "seq"), messageId: m.message_id === undefined ? "" : text(asBytes(m.message_id)),
          headers: ((m.headers ?? []) as Json[][]).map(([k, v]) => [String(k), asBytes(v)] as [string, Uint8Array]),
          payload: asBytes(m.payload) };
      }) };
    case "FPB2":
      return { tag, queue: str("queue"), producerId: str("producer_id"), messages: list("messages").map((item) => {
        const m = item as { [k: string]: Json };
        return { seq: asBig(m.seq, "seq"), producerSeq: asBig(m.producer_seq, "producer_seq"),
          messageId: m.message_id === undefined ? "" : text(asBytes(m.message_id)),
          headers: ((m.headers ?? []) as Json[][]).map(([k, v]) => [String(k), asBytes(v)] as [string, Uint8Array]),
          payload: asBytes(m.payload) };
      }) };
    case "FAK2":
      return { tag, requestId: big("request_id"), subscriptionId: big("subscription_id"), deliveryTags: tags() };
    case "FSB1":
      return { tag, requestId: big("request_id"), queue: str("queue"), prefetch: Number(big("prefetch")) };
    case "FAK1":
    case "FRL1":
    case "FDS1":
      return { tag, subscriptionId: big("subscription_id"), deliveryTags: tags() };
    case "FNK1":
      return { tag, subscriptionId: big("subscription_id"), requeue: o.requeue === true, delayMs: Number(big("delay_ms")), deliveryTags: tags() };
    case "FUS1":
      return { tag, requestId: big("request_id"), subscriptionId: big("subscription_id") };
    case "FIQ1":
    case "FDQ1":
    case "FPG1":
      return { tag, requestId: big("request_id"), queue: str("queue") };
    case "FLQ1":
      return { tag, requestId: big("request_id"), prefix: str("prefix"), after: str("after"), limit: Number(big("limit")) };
    case "FPI1":
    case "FPO1":
      return { tag, requestId: big("request_id") };
    case "FER1":
      return { tag, requestId: big("request_id"), code: Number(big("code")), message: str("message") };
  }
  throw new Error(`the suite cannot build a ${JSON.stringify(tag)} frame (use send_raw)`);
}

function rawBytes(o: { [key: string]: Json }): Buffer {
  if (typeof o.text === "string") return Buffer.from(o.text, "utf8");
  if (o.hex !== undefined) return Buffer.from(asBytes({ hex: o.hex }));
  const body = o.body_hex === undefined ? Buffer.alloc(0) : Buffer.from(asBytes({ hex: o.body_hex }));
  const head = Buffer.alloc(8);
  head.write(String(o.tag), 0, 4, "latin1");
  head.writeUInt32BE(o.length === undefined ? body.length : Number(o.length), 4);
  return Buffer.concat([head, body]);
}

// ---- matchers ----

function isOperator(o: { [key: string]: Json }): boolean {
  const keys = Object.keys(o);
  return keys.length > 0 && keys.every((k) => operatorKeys.has(k));
}

function numberOf(v: Value | Json | undefined): bigint | undefined {
  if (typeof v === "bigint") return v;
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  return undefined;
}

function show(v: unknown): string {
  const s = JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x instanceof Uint8Array ? `<${x.length} bytes>` : x));
  return s === undefined ? String(v) : s.length > 300 ? s.slice(0, 300) + "..." : s;
}

class Matcher {
  vars = new Map<string, Value>();
  private captured = new Map<string, Value>();

  match(pattern: Json, value: Value): void {
    this.captured = new Map();
    this.value(pattern, value, "");
    for (const [k, v] of this.captured) this.vars.set(k, v);
  }

  tries(pattern: Json, value: Value): boolean {
    const saved = new Map(this.captured);
    try {
      this.value(pattern, value, "");
      return true;
    } catch {
      this.captured = saved;
      return false;
    }
  }

  private lookup(name: string): Value | undefined {
    return this.captured.has(name) ? this.captured.get(name) : this.vars.get(name);
  }

  private value(p: Json, v: Value, at: string): void {
    if (typeof p === "string" && p.startsWith("$") && !p.startsWith("${")) {
      const want = this.lookup(p.slice(1));
      if (want === undefined) throw new Error(`${at}: variable ${p} was never captured`);
      if (typeof want === "bigint" ? numberOf(v) !== want : want !== v) throw new Error(`${at}: want ${show(want)}, found ${show(v)}`);
      return;
    }
    if (typeof p === "number") {
      if (numberOf(v) !== BigInt(p)) throw new Error(`${at}: want ${p}, found ${show(v)}`);
      return;
    }
    if (typeof p === "string" || typeof p === "boolean" || p === null) {
      if (v !== p) throw new Error(`${at}: want ${show(p)}, found ${show(v)}`);
      return;
    }
    if (Array.isArray(p)) {
      if (!Array.isArray(v) || v.length !== p.length) throw new Error(`${at}: want an array of ${p.length}, found ${show(v)}`);
      p.forEach((item, i) => this.value(item, v[i]!, `${at}[${i}]`));
      return;
    }
    if (isOperator(p)) {
      this.operator(p, v, at);
      return;
    }
    if (v === null || typeof v !== "object" || Array.isArray(v) || v instanceof Uint8Array) {
      throw new Error(`${at}: want a map, found ${show(v)}`);
    }
    for (const [key, sub] of Object.entries(p)) {
      const present = Object.prototype.hasOwnProperty.call(v, key);
      if (sub !== null && typeof sub === "object" && !Array.isArray(sub) && isOperator(sub) && sub.absent === true) {
        if (present) throw new Error(`${at}.${key}: want it absent, found ${show(v[key])}`);
        continue;
      }
      if (!present) throw new Error(`${at}.${key}: missing`);
      this.value(sub, v[key]!, `${at}.${key}`);
    }
  }

  private operator(p: { [key: string]: Json }, v: Value, at: string): void {
    for (const [key, arg] of Object.entries(p)) {
      switch (key) {
        case "capture":
          this.captured.set(String(arg), v);
          break;
        case "any":
        case "absent":
          break;
        case "contains":
          if (typeof v !== "string" || !v.includes(String(arg))) throw new Error(`${at}: want a string containing ${show(arg)}, found ${show(v)}`);
          break;
        case "min":
        case "max": {
          const n = numberOf(v);
          const bound = numberOf(arg);
          if (n === undefined || bound === undefined || (key === "min" ? n < bound : n > bound)) {
            throw new Error(`${at}: want ${key} ${show(arg)}, found ${show(v)}`);
          }
          break;
        }
        case "length": {
          const n = typeof v === "string" ? Buffer.byteLength(v) : Array.isArray(v) ? v.length : undefined;
          if (n === undefined) throw new Error(`${at}: want a string or array, found ${show(v)}`);
          this.value(arg, BigInt(n), `${at}.length`);
          break;
        }
        case "one_of":
          if (!(arg as Json[]).some((option) => this.tries(option, v))) throw new Error(`${at}: ${show(v)} matches none of ${show(arg)}`);
          break;
        case "includes":
          if (!Array.isArray(v) || !v.some((item) => this.tries(arg, item))) throw new Error(`${at}: ${show(v)} has no element matching ${show(arg)}`);
          break;
        case "not": {
          const saved = new Map(this.captured);
          const matched = this.tries(arg, v);
          this.captured = saved;
          if (matched) throw new Error(`${at}: ${show(v)} matches ${show(arg)}, which it must not`);
          break;
        }
      }
    }
  }
}

// ---- one connection of a case ----

type Outcome = { confirmed: true; boundary: bigint; duplicate?: boolean } | { confirmed: false; code: bigint; message: string };

class CaseConnection {
  readonly socket: net.Socket;
  nextRequestId = 1n;
  readonly published = new Set<bigint>();
  pending: { [key: string]: Value }[] = [];
  readonly outcomes = new Map<bigint, Outcome>();
  readonly deliveries = new Map<bigint, { [key: string]: Value }[]>();
  closed = false;
  endError: Error | undefined;
  private buffered: Buffer = Buffer.alloc(0);
  private wake: (() => void) | undefined;

  constructor(address: string) {
    const colon = address.lastIndexOf(":");
    this.socket = net.connect({ host: address.slice(0, colon), port: Number(address.slice(colon + 1)), noDelay: true });
    this.socket.on("data", (chunk) => this.received(chunk));
    this.socket.on("error", (err) => this.end(err));
    this.socket.on("close", () => this.end(undefined));
  }

  private received(chunk: Buffer): void {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    while (!this.closed && this.buffered.length >= 8) {
      const length = this.buffered.readUInt32BE(4);
      if (length > DEFAULT_MAX_BODY_BYTES) return this.end(new Error(`the node sent a body of ${length} bytes, over 16 MiB`));
      if (this.buffered.length < 8 + length) break;
      const tag = this.buffered.toString("latin1", 0, 4);
      const body = this.buffered.subarray(8, 8 + length);
      this.buffered = this.buffered.subarray(8 + length);
      try {
        if (!isKnownTag(tag)) throw new Error(`unknown tag ${tag}`);
        this.file(frameValue(decodeBody(tag, Buffer.from(body))));
      } catch (err) {
        return this.end(new Error(`the node sent a frame the protocol does not allow: ${(err as Error).message}`));
      }
    }
    this.wake?.();
  }

  private end(err: Error | undefined): void {
    if (this.closed) return;
    this.closed = true;
    this.endError = err;
    this.socket.destroy();
    this.wake?.();
  }

  private file(f: { [key: string]: Value }): void {
    if (f.tag === "FCF1" || f.tag === "FCF2" || f.tag === "FNC1") {
      for (const r of f.ranges as { [k: string]: Value }[]) {
        const first = r.first_seq as bigint;
        const last = r.last_seq as bigint;
        const outcome: Outcome = f.tag === "FCF1" ? { confirmed: true, boundary: r.boundary as bigint }
          : f.tag === "FCF2" ? { confirmed: true, boundary: r.boundary as bigint, duplicate: r.duplicate as boolean }
          : { confirmed: false, code: r.code as bigint, message: r.message as string };
        if (last - first < BigInt(this.published.size)) {
          for (let s = first; s <= last; s++) if (this.published.has(s)) this.outcomes.set(s, outcome);
        } else {
          for (const s of this.published) if (s >= first && s <= last) this.outcomes.set(s, outcome);
        }
      }
      return;
    }
    if (f.tag === "FDL1") {
      const id = f.subscription_id as bigint;
      const list = this.deliveries.get(id) ?? [];
      list.push(...(f.deliveries as { [k: string]: Value }[]));
      this.deliveries.set(id, list);
      return;
    }
    this.pending.push(f);
  }

  /** Waits for something to arrive, or the deadline; false when nothing more can come. */
  wait(deadline: number): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = undefined;
        resolve(false);
      }, Math.max(0, deadline - Date.now()));
      this.wake = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve(true);
      };
    });
  }

  write(bytes: Uint8Array): void {
    if (!this.closed) this.socket.write(bytes);
  }
}

// ---- running a case ----

class CaseRun {
  private readonly conns = new Map<string, CaseConnection>();
  private readonly m = new Matcher();

  constructor(private readonly address: string, private readonly runToken: string, private readonly profile: string) {}

  /** Stops the case's node cleanly and starts it again; connections stay open and see its goodbye and close. */
  private async restartNode(): Promise<void> {
    const response = await fetch(`${control}/restart?profile=${encodeURIComponent(this.profile)}`, { method: "POST" });
    if (!response.ok) throw new Error(`restart: ${response.status} ${await response.text()}`);
  }

  close(): void {
    for (const c of this.conns.values()) c.socket.destroy();
  }

  private subst(s: string): string {
    return s.replaceAll("${run}", this.runToken).replaceAll("${token}", token);
  }

  /** Substitutes ${...} and "$name" in a step's values. */
  private resolve(v: Json): Json | Value {
    if (typeof v === "string") {
      if (v.startsWith("$") && !v.startsWith("${") && this.m.vars.has(v.slice(1))) return this.m.vars.get(v.slice(1))!;
      return this.subst(v);
    }
    if (Array.isArray(v)) return v.map((x) => this.resolve(x)) as Value[];
    if (v !== null && typeof v === "object") {
      const out: { [k: string]: Json | Value } = {};
      for (const [k, x] of Object.entries(v)) out[k] = this.resolve(x);
      return out as Value;
    }
    return v;
  }

  /** Substitutes ${...} only: "$name" is the matcher's. */
  private pattern(v: Json): Json {
    if (typeof v === "string") return this.subst(v);
    if (Array.isArray(v)) return v.map((x) => this.pattern(x));
    if (v !== null && typeof v === "object") {
      const out: { [k: string]: Json } = {};
      for (const [k, x] of Object.entries(v)) out[k] = this.pattern(x);
      return out;
    }
    return v;
  }

  private conn(step: Record<string, Json>): CaseConnection {
    const name = typeof step.conn === "string" ? step.conn : "a";
    let c = this.conns.get(name);
    if (c === undefined) this.conns.set(name, (c = new CaseConnection(this.address)));
    return c;
  }

  async step(step: Record<string, Json>): Promise<void> {
    if (step.restart_node !== undefined) return this.restartNode();
    const c = this.conn(step);
    const within = typeof step.within_ms === "number" ? step.within_ms : 300;
    for (const [action, arg] of Object.entries(step)) {
      if (action === "conn" || action === "within_ms") continue;
      switch (action) {
        case "hello": {
          const fields = { tag: "FHL1", versions: [1], client_name: "conformance", ...((this.resolve(arg) as object) ?? {}) };
          this.send(c, fields as { [k: string]: Value });
          await this.expect(c, { tag: "FHO1", version: 1 });
          return;
        }
        case "send":
          this.send(c, this.resolve(arg) as { [k: string]: Value });
          return;
        case "send_raw":
          c.write(rawBytes(this.resolve(arg) as { [k: string]: Json }));
          return;
        case "publish_many":
          this.publishMany(c, this.resolve(arg) as { [k: string]: Json });
          return;
        case "expect":
          await this.expect(c, this.pattern(arg));
          return;
        case "expect_none":
          return this.expectNone(c, this.pattern(arg), within);
        case "expect_close":
          return this.expectClose(c, this.pattern(arg) as { [k: string]: Json });
        case "expect_confirms":
          return this.expectOutcomes(c, this.resolve(arg) as { [k: string]: Json }, true);
        case "expect_rejects":
          return this.expectOutcomes(c, this.resolve(arg) as { [k: string]: Json }, false);
        case "expect_deliveries":
          return this.expectDeliveries(c, arg as { [k: string]: Json });
        case "expect_no_delivery":
          return this.expectNoDelivery(c, this.resolve(arg) as { [k: string]: Json }, within);
        case "await_info":
          return this.awaitInfo(c, arg as { [k: string]: Json });
        case "sleep_ms":
          await new Promise((r) => setTimeout(r, Number(arg)));
          return;
        case "close":
          c.socket.end();
          c.socket.destroy();
          return;
        default:
          throw new Error(`unknown step ${JSON.stringify(action)}`);
      }
    }
    throw new Error("empty step");
  }

  private send(c: CaseConnection, o: { [k: string]: Value }): void {
    if (o.request_id === undefined && requestTags.has(String(o.tag))) {
      o.request_id = c.nextRequestId;
      this.m.vars.set("rid", c.nextRequestId);
      c.nextRequestId++;
    }
    const frame = buildFrame(o);
    if (frame.tag === "FPB1" || frame.tag === "FPB2") for (const msg of frame.messages) c.published.add(BigInt(msg.seq));
    const e = new Encoder();
    encodeFrame(e, frame);
    c.write(Buffer.from(e.bytesView()));
  }

  private publishMany(c: CaseConnection, o: { [k: string]: Json }): void {
    const e = new Encoder(1 << 20);
    let seq = asBig(o.first_seq, "first_seq");
    const step = o.step === undefined ? 1n : asBig(o.step, "step");
    const payload = asBytes(o.payload);
    for (let i = 0; i < Number(o.frames); i++) {
      const frame: Frame = { tag: "FPB1", queue: String(o.queue), messages: [] };
      for (let j = 0; j < Number(o.per_frame); j++) {
        frame.messages.push({ seq, messageId: "", headers: [], payload });
        c.published.add(seq);
        seq += step;
      }
      encodeFrame(e, frame);
    }
    c.write(Buffer.from(e.bytesView()));
  }

  private async expect(c: CaseConnection, pattern: Json): Promise<{ [k: string]: Value }> {
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    for (;;) {
      const reasons: string[] = [];
      for (let i = 0; i < c.pending.length; i++) {
        try {
          this.m.match(pattern, c.pending[i]!);
          return c.pending.splice(i, 1)[0]!;
        } catch (err) {
          reasons.push((err as Error).message);
        }
      }
      if (!(await c.wait(deadline))) {
        throw new Error(`no frame matched ${show(pattern)} (${c.closed ? `closed: ${c.endError?.message ?? "EOF"}` : "timed out"}); not matched: ${reasons.join("; ")}`);
      }
    }
  }

  private async expectNone(c: CaseConnection, pattern: Json, within: number): Promise<void> {
    const deadline = Date.now() + within;
    for (;;) {
      for (const f of c.pending) {
        const saved = new Map(this.m.vars);
        let matched = false;
        try {
          this.m.match(pattern, f);
          matched = true;
        } catch {
          // not this one
        }
        this.m.vars = saved;
        if (matched) throw new Error(`a frame matched ${show(pattern)}, which must not come: ${show(f)}`);
      }
      if (!(await c.wait(deadline))) return;
    }
  }

  private async expectClose(c: CaseConnection, arg: { [k: string]: Json }): Promise<void> {
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    while (!c.closed) {
      if (!(await c.wait(deadline)) && !c.closed) throw new Error("the node did not close the connection");
    }
    if (c.endError !== undefined && !/ECONNRESET|EPIPE/.test(c.endError.message)) throw c.endError;
    if (arg?.error !== undefined) {
      await this.expect(c, { tag: "FER1", ...(arg.error as { [k: string]: Json }) });
    }
  }

  private async expectOutcomes(c: CaseConnection, o: { [k: string]: Json }, confirmed: boolean): Promise<void> {
    const seqs = ((o.seqs ?? []) as Json[]).map((s) => asBig(s, "seqs"));
    if (Array.isArray(o.seq_range)) {
      const [first, last, step] = o.seq_range.map((x) => asBig(x, "seq_range"));
      for (let s = first!; s <= last!; s += step!) seqs.push(s);
    }
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    for (const seq of seqs) {
      while (!c.outcomes.has(seq)) {
        if (!(await c.wait(deadline))) throw new Error(`sequence number ${seq} unanswered`);
      }
      const outcome = c.outcomes.get(seq)!;
      if (outcome.confirmed !== confirmed) throw new Error(`sequence number ${seq}: ${show(outcome)}`);
      const pattern: { [k: string]: Json } = {};
      if (confirmed && o.boundary !== undefined) pattern.boundary = o.boundary;
      if (confirmed && o.duplicate !== undefined) pattern.duplicate = o.duplicate;
      if (!confirmed) {
        pattern.code = o.code!;
        if (o.message !== undefined) pattern.message = this.pattern(o.message);
      }
      const value: { [k: string]: Value } = !outcome.confirmed ? { code: outcome.code, message: outcome.message }
        : outcome.duplicate === undefined ? { boundary: outcome.boundary } : { boundary: outcome.boundary, duplicate: outcome.duplicate };
      try {
        this.m.match(pattern, value);
      } catch (err) {
        throw new Error(`sequence number ${seq}: ${(err as Error).message}`);
      }
    }
  }

  private async expectDeliveries(c: CaseConnection, o: { [k: string]: Json }): Promise<void> {
    const sub = asBig(this.resolve(o.subscription!) as Json, "subscription");
    const patterns = (o.match ?? []) as Json[];
    const count = o.count === undefined ? patterns.length : Number(o.count);
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    for (let i = 0; i < count; i++) {
      while ((c.deliveries.get(sub)?.length ?? 0) === 0) {
        if (!(await c.wait(deadline))) throw new Error(`delivery ${i + 1} of ${count} on subscription ${sub} did not come`);
      }
      const d = c.deliveries.get(sub)!.shift()!;
      const pattern = i < patterns.length ? patterns[i] : o.each;
      if (pattern === undefined) continue;
      try {
        this.m.match(this.pattern(pattern), d);
      } catch (err) {
        throw new Error(`delivery ${i + 1}: ${(err as Error).message}`);
      }
    }
  }

  private async expectNoDelivery(c: CaseConnection, o: { [k: string]: Json }, within: number): Promise<void> {
    const sub = asBig(o.subscription, "subscription");
    const deadline = Date.now() + within;
    for (;;) {
      const queued = c.deliveries.get(sub) ?? [];
      if (queued.length > 0) throw new Error(`subscription ${sub} got a delivery, which must not come: ${show(queued[0])}`);
      if (!(await c.wait(deadline))) return;
    }
  }

  private async awaitInfo(c: CaseConnection, o: { [k: string]: Json }): Promise<void> {
    const queue = String(this.resolve(o.queue!));
    const pattern = this.pattern(o.match!);
    const deadline = Date.now() + STEP_TIMEOUT_MS;
    let last = "";
    while (Date.now() < deadline) {
      this.send(c, { tag: "FIQ1", queue });
      const reply = await this.expect(c, { tag: "FIR1", request_id: "$rid" });
      try {
        this.m.match(pattern, reply.info!);
        return;
      } catch (err) {
        last = (err as Error).message;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`queue info never matched: ${last}`);
  }
}

// ---- the tests ----

const files = readdirSync(suiteDir).filter((f) => f.endsWith(".json")).sort();

describe("conformance", () => {
  it("finds the suite", () => assert.ok(files.length > 0, `no files in ${suiteDir}`));
  for (const file of files) {
    const suite = JSON.parse(readFileSync(path.join(suiteDir, file), "utf8")) as { cases: Case[] };
    describe(file.replace(/\.json$/, ""), () => {
      suite.cases.forEach((c, index) => {
        const address = addresses[c.node ?? "default"];
        const skip = c.pending !== undefined ? `pending: ${c.pending}`
          : address === undefined ? `no node of profile ${c.node ?? "default"} given (FIBRIL_CONFORMANCE_* not set)`
          : control === undefined && c.steps.some((s) => s.restart_node !== undefined) ? "it restarts the node, and FIBRIL_CONFORMANCE_CONTROL is not set"
          : false;
        it(c.name, { skip }, async () => {
          const run = new CaseRun(address!, `${runId}-${file.slice(0, 2)}-${index}`, c.node ?? "default");
          try {
            for (const [i, step] of c.steps.entries()) {
              try {
                await run.step(step);
              } catch (err) {
                throw new Error(`step ${i + 1} ${Object.keys(step).find((k) => k !== "conn" && k !== "within_ms")}: ${(err as Error).message} (rule ${c.rule})`);
              }
            }
          } finally {
            run.close();
          }
        });
      });
    });
  }
});
