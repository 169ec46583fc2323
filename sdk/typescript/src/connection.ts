// One connection to one node: one session (docs/protocol.md section 4).
//
// A Connection owns a socket. It sends hello and resolves `ready` with
// hello-ok; from then on it matches every answer to what asked for it:
//
//   requests     by request id: the success reply, an FER1 with that id, or an FRD1 with that id
//   publishes    by sequence number: FCF1 (FCF2 for FPB2) and FNC1 ranges cover the numbers this session published
//   deliveries   by subscription id: FDL1 and FSE1 go to the subscription's handlers
//
// When the connection ends, for any reason, every request and publish still
// pending fails at once with ConnectionLostError, and `closed` resolves with
// the reason. Frames it cannot accept (an unknown tag, a body over its
// limit, a malformed body, a frame a node does not send) are answered with
// the matching connection error, then it closes, as section 2 requires.

import net from "node:net";
import {
  DEFAULT_MAX_BODY_BYTES, Encoder, FrameDecodeError, HEADER_BYTES, PROTOCOL_VERSION, TAGS, decodeBody, encodeFrame,
  isKnownTag, tagName, type Delivery, type Frame, type Header, type PublishMessage,
} from "./codec.js";
import { Codes, ConnectionLostError, KeepaliveTimeoutError, ServerError } from "./errors.js";
import { KeepaliveWatch, keepaliveTickMs } from "./keepalive.js";

export interface HelloOk {
  version: number;
  nodeId: string;
  sessionId: string;
  /** True when the node restarted since the session named in hello: held deliveries are stale, unanswered publishes have an unknown outcome. */
  resumed: boolean;
  maxBodyBytes: number;
  serverVersion: string;
}

export interface ConnectionOptions {
  address: string;
  authToken?: Uint8Array | undefined;
  clientName?: string | undefined;
  previousSession?: string | undefined;
  /** Largest body this side accepts; told to the node. 0 or undefined: 16 MiB. */
  maxBodyBytes?: number | undefined;
  connectTimeoutMs: number;
  keepaliveIntervalMs: number;
  /** Node errors that answer no request (request id 0, a 2xx code). */
  onError?: ((err: ServerError) => void) | undefined;
}

/** What a request's answer turned out to be. */
export type Answer = { frame: Frame } | { redirect: { queue: string; nodeId: string; address: string } };

interface PendingRequest {
  resolve: (answer: Answer) => void;
  reject: (err: Error) => void;
}

/** The outcome of one published message. */
export type PublishOutcome =
  | { ok: true; boundary: "written" | "durable"; duplicate?: boolean }
  | { ok: false; error: ServerError; redirect?: { queue: string; nodeId: string; address: string } | undefined };

/** One message to publish, and where its outcome goes. */
export interface PublishItem {
  readonly message: OutgoingMessage;
  /** The node answered: confirmed or refused. */
  settle(outcome: PublishOutcome): void;
  /** The connection ended first: the outcome is unknown. */
  fail(err: Error): void;
}

interface PendingPublish {
  queue: string;
  item: PublishItem;
}

export interface SubscriptionHandlers {
  deliver(deliveries: Delivery[]): void;
  /** The node ended the subscription (a ServerError), or the connection ended (ConnectionLostError). */
  ended(err: Error): void;
}

export interface OutgoingMessage {
  messageId: string;
  /** The publisher's number for the message (idempotent clients); 0 or absent: none. */
  producerSeq?: bigint;
  headers: Header[];
  payload: Uint8Array;
}

export class Connection {
  readonly address: string;
  /** Resolves with hello-ok, rejects when the hello is refused or the connection fails first. */
  readonly ready: Promise<HelloOk>;
  /** Resolves with why the connection ended, once it has. */
  readonly closed: Promise<Error>;

  private readonly socket: net.Socket;
  private readonly options: ConnectionOptions;
  private readonly maxInboundBody: number;
  private hello: HelloOk | undefined;
  private endReason: Error | undefined;
  private resolveClosed!: (err: Error) => void;
  private resolveReady!: (hello: HelloOk) => void;
  private rejectReady!: (err: Error) => void;

  private nextRequestId = 1n;
  // Sequence numbers are numbers here (a session would need 2^53 publishes
  // to pass them); ranges from the node are bigint and compared as such.
  private nextSeq = 1;
  private readonly requests = new Map<bigint, PendingRequest>();
  private readonly publishes = new Map<number, PendingPublish>();
  /** Publishes refused with not_owner, waiting for the FRD1 (id 0) that names the owner. */
  private readonly awaitingRedirect = new Map<string, { pending: PendingPublish; error: ServerError }[]>();
  private readonly subscriptions = new Map<bigint, SubscriptionHandlers>();
  /** Frames of subscriptions whose subscribe-ok arrived and whose owner has not bound them yet. */
  private readonly heldForSubscription = new Map<bigint, { deliveries: Delivery[]; ended: Error | undefined }>();

  // Bytes read and not yet framed: chunks are gathered until a whole frame
  // (or envelope) is there, then joined once, so a large frame arriving in
  // many reads is copied once, not once per read.
  private inbound: Buffer[] = [];
  private inboundBytes = 0;
  private inboundNeeded = HEADER_BYTES;
  private readonly encoder = new Encoder(64 * 1024);
  private flushScheduled = false;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private keepalive: KeepaliveWatch | undefined;
  /** Every byte read from the node, for the keepalive's sign of life. */
  private heardBytes = 0;

  constructor(options: ConnectionOptions) {
    this.options = options;
    this.address = options.address;
    this.maxInboundBody = options.maxBodyBytes || DEFAULT_MAX_BODY_BYTES;
    this.ready = new Promise((resolve, reject) => {
      this.resolveReady = resolve;
      this.rejectReady = reject;
    });
    this.ready.catch(() => {}); // the owner awaits it; an unawaited refusal must not crash the process
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve));
    const [host, port] = splitAddress(options.address);
    this.socket = net.connect({ host, port, noDelay: true });
    const timer = setTimeout(() => this.end(new ConnectionLostError(`connect to ${this.address}: timed out after ${options.connectTimeoutMs} ms`)),
      options.connectTimeoutMs);
    this.ready.then(() => clearTimeout(timer), () => clearTimeout(timer));
    this.socket.on("connect", () => this.sendHello());
    this.socket.on("data", (chunk: Buffer) => this.received(chunk));
    this.socket.on("error", (err) => this.end(new ConnectionLostError(`connection to ${this.address}: ${err.message}`, { cause: err })));
    this.socket.on("close", () => this.end(new ConnectionLostError(`connection to ${this.address} closed`)));
  }

  /** hello-ok, once received. */
  get session(): HelloOk | undefined {
    return this.hello;
  }

  get isOpen(): boolean {
    return this.hello !== undefined && this.endReason === undefined;
  }

  /** The node's body limit (16 MiB until hello-ok says otherwise). */
  get nodeMaxBodyBytes(): number {
    return this.hello?.maxBodyBytes || DEFAULT_MAX_BODY_BYTES;
  }

  /** Publishes sent and not answered yet. */
  get pendingPublishes(): number {
    return this.publishes.size;
  }

  private sendHello(): void {
    this.write({
      tag: "FHL1", versions: [PROTOCOL_VERSION], clientName: this.options.clientName ?? "fibril-typescript",
      authToken: this.options.authToken ?? new Uint8Array(0), previousSession: this.options.previousSession ?? "",
      maxBodyBytes: this.options.maxBodyBytes ?? 0,
    });
  }

  /** Sends a request and waits for its answer. */
  request(build: (requestId: bigint) => Frame): Promise<Answer> {
    if (this.endReason) return Promise.reject(this.lost());
    const requestId = this.nextRequestId++;
    return new Promise<Answer>((resolve, reject) => {
      this.requests.set(requestId, { resolve, reject });
      this.write(build(requestId));
    });
  }

  /**
   * Publishes messages to one queue in one frame; settle is called once per
   * message with its outcome, fail if the connection ends first. The caller
   * keeps the frame within nodeMaxBodyBytes.
   */
  publish(queue: string, items: PublishItem[], producerId = ""): void {
    if (this.endReason) {
      const err = this.lost();
      for (const item of items) item.fail(err);
      return;
    }
    // With a producer id the frame is FPB2 (idempotent), answered by FCF2.
    const messages: PublishMessage[] = [];
    for (const item of items) {
      const seq = this.nextSeq++;
      this.publishes.set(seq, { queue, item });
      const m = item.message;
      messages.push({ seq, producerSeq: m.producerSeq ?? 0n, messageId: m.messageId, headers: m.headers, payload: m.payload });
    }
    this.write(producerId === "" ? { tag: "FPB1", queue, messages } : { tag: "FPB2", queue, producerId, messages });
  }

  /** Sends a frame that gets no answer (settles). */
  sendFrame(frame: Frame): boolean {
    if (this.endReason) return false;
    this.write(frame);
    return true;
  }

  /**
   * Hands a subscription's frames to handlers. Deliveries that arrived
   * between subscribe-ok and this call (they can share a TCP segment with
   * it) were held for it, and are handed over first.
   */
  addSubscription(id: bigint, handlers: SubscriptionHandlers): void {
    const held = this.heldForSubscription.get(id);
    this.heldForSubscription.delete(id);
    this.subscriptions.set(id, handlers);
    if (held === undefined) return;
    if (held.deliveries.length > 0) handlers.deliver(held.deliveries);
    if (held.ended !== undefined) {
      this.subscriptions.delete(id);
      handlers.ended(held.ended);
    }
  }

  removeSubscription(id: bigint): void {
    this.subscriptions.delete(id);
  }

  /** Closes the connection; everything pending fails with ConnectionLostError. */
  close(reason: Error = new ConnectionLostError(`connection to ${this.address} closed by the client`)): void {
    this.flush();
    this.end(reason);
  }

  private write(frame: Frame): void {
    encodeFrame(this.encoder, frame);
    if (this.encoder.length >= 256 * 1024) {
      this.flush();
      return;
    }
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.encoder.length === 0 || this.socket.destroyed) {
      this.encoder.reset();
      return;
    }
    this.socket.write(this.encoder.takeBytes());
  }

  private received(chunk: Buffer): void {
    this.heardBytes += chunk.length;
    this.inbound.push(chunk);
    this.inboundBytes += chunk.length;
    if (this.inboundBytes < this.inboundNeeded) return;
    const buf = this.inbound.length === 1 ? this.inbound[0]! : Buffer.concat(this.inbound, this.inboundBytes);
    this.inbound = [];
    let off = 0;
    this.inboundNeeded = HEADER_BYTES;
    while (this.endReason === undefined && buf.length - off >= HEADER_BYTES) {
      const bodyBytes = buf.readUInt32BE(off + 4);
      if (bodyBytes > this.maxInboundBody) {
        this.protocolError(Codes.frame_too_large, `body of ${bodyBytes} bytes exceeds the limit of ${this.maxInboundBody}`);
        return;
      }
      if (buf.length - off < HEADER_BYTES + bodyBytes) {
        this.inboundNeeded = HEADER_BYTES + bodyBytes;
        break;
      }
      const tag = buf.toString("latin1", off, off + 4);
      this.frame(tag, buf.subarray(off, off + 4), buf.subarray(off + HEADER_BYTES, off + HEADER_BYTES + bodyBytes));
      off += HEADER_BYTES + bodyBytes;
    }
    const rest = buf.length - off;
    this.inboundBytes = rest;
    if (rest > 0) this.inbound.push(buf.subarray(off));
  }

  private frame(tag: string, rawTag: Buffer, body: Buffer): void {
    if (!isKnownTag(tag)) {
      this.protocolError(Codes.unknown_frame, `unknown frame tag "${tagName(rawTag)}"`);
      return;
    }
    if (TAGS[tag] === "client") {
      this.protocolError(Codes.protocol_violation, `a node does not send ${tag} to a client`);
      return;
    }
    let frame: Frame;
    try {
      frame = decodeBody(tag, body);
    } catch (err) {
      this.protocolError(Codes.malformed_frame, err instanceof FrameDecodeError ? err.message : String(err));
      return;
    }
    if (this.hello === undefined && frame.tag !== "FHO1" && frame.tag !== "FER1") {
      this.protocolError(Codes.protocol_violation, `${frame.tag} before hello-ok`);
      return;
    }
    this.dispatch(frame);
  }

  private dispatch(frame: Frame): void {
    switch (frame.tag) {
      case "FHO1":
        if (this.hello !== undefined) {
          this.protocolError(Codes.protocol_violation, "a second hello-ok");
          return;
        }
        this.hello = {
          version: frame.version, nodeId: frame.nodeId, sessionId: frame.sessionId, resumed: frame.session === 1,
          maxBodyBytes: frame.maxBodyBytes || DEFAULT_MAX_BODY_BYTES, serverVersion: frame.serverVersion,
        };
        this.startKeepalive();
        this.resolveReady(this.hello);
        return;
      case "FCF1":
        for (const r of frame.ranges) {
          const boundary = r.boundary === 2 ? "durable" : "written";
          const outcome: PublishOutcome = { ok: true, boundary };
          this.eachPublished(r.first, r.last, (p) => p.item.settle(outcome));
        }
        return;
      case "FCF2":
        for (const r of frame.ranges) {
          const outcome: PublishOutcome = { ok: true, boundary: r.boundary === 2 ? "durable" : "written", duplicate: r.duplicate };
          this.eachPublished(r.first, r.last, (p) => p.item.settle(outcome));
        }
        return;
      case "FNC1":
        for (const r of frame.ranges) {
          const error = new ServerError(r.code, r.message);
          this.eachPublished(r.first, r.last, (p) => {
            if (r.code === Codes.not_owner) {
              // The FRD1 with request id 0 that names the owner follows.
              const waiting = this.awaitingRedirect.get(p.queue) ?? [];
              waiting.push({ pending: p, error });
              this.awaitingRedirect.set(p.queue, waiting);
              return;
            }
            p.item.settle({ ok: false, error });
          });
        }
        return;
      case "FDL1": {
        const handlers = this.subscriptions.get(frame.subscriptionId);
        if (handlers === undefined) {
          this.protocolError(Codes.protocol_violation, `deliver for subscription ${frame.subscriptionId}, which this session does not have`);
          return;
        }
        handlers.deliver(frame.deliveries);
        return;
      }
      case "FSE1": {
        const handlers = this.subscriptions.get(frame.subscriptionId);
        this.subscriptions.delete(frame.subscriptionId);
        handlers?.ended(new ServerError(frame.code, frame.message));
        return;
      }
      case "FSK1":
        // Deliveries may follow in the same read, before the subscriber
        // has bound the new id: hold them for it.
        if (!this.subscriptions.has(frame.subscriptionId)) {
          const held = { deliveries: [] as Delivery[], ended: undefined as Error | undefined };
          this.heldForSubscription.set(frame.subscriptionId, held);
          this.subscriptions.set(frame.subscriptionId, {
            deliver: (deliveries) => held.deliveries.push(...deliveries),
            ended: (err) => (held.ended = err),
          });
        }
        this.answer(frame.requestId, { frame });
        return;
      case "FPI1":
        this.write({ tag: "FPO1", requestId: frame.requestId });
        return;
      case "FPO1":
        if (frame.requestId === 0n || !this.requests.has(frame.requestId)) {
          this.keepalive?.answered(); // a keepalive ping's answer
          return;
        }
        this.answer(frame.requestId, { frame });
        return;
      case "FER1":
        this.errorFrame(frame.requestId, frame.code, frame.message);
        return;
      case "FRD1":
      case "FRD2": {
        const redirect = { queue: frame.queue, nodeId: frame.nodeId, address: frame.address };
        if (frame.requestId !== 0n) {
          this.answer(frame.requestId, { redirect });
          return;
        }
        const waiting = this.awaitingRedirect.get(frame.queue) ?? [];
        this.awaitingRedirect.delete(frame.queue);
        for (const w of waiting) w.pending.item.settle({ ok: false, error: w.error, redirect });
        return;
      }
      default:
        if ("requestId" in frame) this.answer(frame.requestId, { frame });
    }
  }

  /** Calls fn for every pending publish in [first, last] and forgets it. */
  private eachPublished(firstSeq: bigint, lastSeq: bigint, fn: (p: PendingPublish) => void): void {
    if (firstSeq >= BigInt(this.nextSeq)) return; // covers nothing this session published
    const first = Number(firstSeq);
    const last = Number(lastSeq < BigInt(this.nextSeq) ? lastSeq : BigInt(this.nextSeq - 1));
    if (last - first < this.publishes.size) {
      for (let seq = first; seq <= last; seq++) {
        const p = this.publishes.get(seq);
        if (p !== undefined) {
          this.publishes.delete(seq);
          fn(p);
        }
      }
      return;
    }
    for (const [seq, p] of this.publishes) {
      if (seq >= first && seq <= last) {
        this.publishes.delete(seq);
        fn(p);
      }
    }
  }

  private answer(requestId: bigint, answer: Answer): void {
    const pending = this.requests.get(requestId);
    if (pending === undefined) return; // an id this session never used, or answered already
    this.requests.delete(requestId);
    pending.resolve(answer);
  }

  private errorFrame(requestId: bigint, code: number, message: string): void {
    const error = new ServerError(code, message);
    if (error.closesConnection) {
      // The node closes after it; fail everything with the node's reason.
      if (this.hello === undefined) this.rejectReady(error);
      this.end(new ConnectionLostError(`the node closed the connection: ${error.message}`, { cause: error }));
      return;
    }
    const pending = this.requests.get(requestId);
    if (requestId !== 0n && pending !== undefined) {
      this.requests.delete(requestId);
      pending.reject(error);
      return;
    }
    this.options.onError?.(error);
  }

  private protocolError(code: number, message: string): void {
    if (this.endReason) return;
    this.write({ tag: "FER1", requestId: 0n, code, message });
    this.flush();
    this.end(new ConnectionLostError(`closed the connection to ${this.address}: ${message}`));
  }

  /** Looks at the connection every quarter interval (src/keepalive.ts says the rule). */
  private startKeepalive(): void {
    const intervalMs = this.options.keepaliveIntervalMs;
    if (intervalMs <= 0) return;
    const watch = new KeepaliveWatch(intervalMs, this.heardBytes, Date.now());
    this.keepalive = watch;
    this.keepaliveTimer = setInterval(() => {
      switch (watch.look(Date.now(), this.heardBytes)) {
        case "close":
          this.end(new KeepaliveTimeoutError(`connection to ${this.address}: keepalive ping unanswered and nothing heard for ${intervalMs} ms`));
          return;
        case "ping":
          // Keepalive pings use ids from the request counter too, but are not
          // registered as requests: their pong is recognised by that.
          this.write({ tag: "FPI1", requestId: this.nextRequestId++ });
          return;
      }
    }, keepaliveTickMs(intervalMs));
    this.keepaliveTimer.unref();
  }

  private lost(): Error {
    return this.endReason instanceof ConnectionLostError
      ? this.endReason
      : new ConnectionLostError(`connection to ${this.address} ended`, { cause: this.endReason });
  }

  /** Ends the connection once: fails everything pending at once. */
  private end(reason: Error): void {
    if (this.endReason !== undefined) return;
    this.endReason = reason;
    if (this.keepaliveTimer) clearInterval(this.keepaliveTimer);
    this.socket.end();
    this.socket.destroy();
    const err = this.lost();
    this.rejectReady(reason instanceof ConnectionLostError && reason.cause instanceof ServerError ? reason.cause : err);
    const requests = [...this.requests.values()];
    this.requests.clear();
    for (const r of requests) r.reject(err);
    const publishes = [...this.publishes.values()];
    this.publishes.clear();
    for (const p of publishes) p.item.fail(err);
    for (const waiting of this.awaitingRedirect.values()) for (const w of waiting) w.pending.item.fail(err);
    this.awaitingRedirect.clear();
    const subscriptions = [...this.subscriptions.values()];
    this.subscriptions.clear();
    for (const s of subscriptions) s.ended(err);
    this.resolveClosed(reason);
  }
}

export function splitAddress(address: string): [string, number] {
  const colon = address.lastIndexOf(":");
  if (colon < 0) throw new Error(`address ${JSON.stringify(address)} is not host:port`);
  let host = address.slice(0, colon);
  if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1);
  const port = Number(address.slice(colon + 1));
  if (!Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`address ${JSON.stringify(address)} has no valid port`);
  return [host, port];
}
