// The Client: one home link (rotating through the given addresses), one
// link per node a redirect named, and the routes learned from redirects
// (queue -> owner address). docs/protocol.md is the contract it keeps:
//
//   - requests are pipelined and matched by id (4.2); publishes by
//     sequence number, which each connection assigns (4.3);
//   - at most maxPendingPublishes publishes are unanswered at once, across
//     the client: publish() waits for room (4.11);
//   - publishes to one queue made in the same tick leave in one frame, up
//     to maxBatchMessages and the node's max_body_bytes;
//   - a redirect (4.6) moves the request, or the refused publishes, to the
//     owner, at most maxRedirects times;
//   - when a connection ends, everything pending on it fails at once with
//     ConnectionLostError, and the link reconnects with backoff;
//   - it speaks protocol version 1, so a node does not fence a queue after a
//     refused publish (docs/protocol.md 4.3, "Order across a refusal"): a
//     publish it sends again after not_owner may be stored after later ones;
//   - with retryUnknownPublishes, a publish whose outcome that left unknown
//     (or that the node refused with outcome_unknown, 215) is sent again
//     after the reconnect instead, but only when it carries a dedup key and
//     its queue deduplicates (retryUnknown below).

import type { Frame, Header } from "./codec.js";
import { randomBytes } from "node:crypto";
import { DEFAULT_MAX_BODY_BYTES, MIN_MAX_BODY_BYTES } from "./codec.js";
import type { Connection, OutgoingMessage, PublishItem, PublishOutcome } from "./connection.js";
import {
  ClientClosedError, Codes, ConnectionLostError, MessageTooLargeError, ServerError, TooManyRedirectsError,
} from "./errors.js";
import { optionsMap, queueInfoOf, type Mode, type QueueConfig, type QueueInfo } from "./info.js";

/** What Client.changeMode reports. */
export interface ModeChange {
  /** applied: the switch happened; unchanged: the queue already ran mode; pending: recorded, not applied yet. */
  outcome: "applied" | "unchanged" | "pending";
  mode: Mode;
  /** The mode in force when the node answered. */
  applied: Mode;
  /** The revision that sets mode (0n: the declared mode). */
  revision: bigint;
  /** What a pending change waits for. */
  message: string;
}
import { Link, type Session } from "./link.js";
import { encodeMsgpack } from "./msgpack.js";
import { Fifo } from "./fifo.js";
import { Subscription, type DeliveryHandler, type SubscriptionHost } from "./subscription.js";

export interface ClientOptions {
  /** Node addresses (host:port), tried in order at connect and in rotation on every reconnect. */
  addresses: string[];
  /** Sent in hello; leave out when the node needs none. */
  authToken?: string | Uint8Array;
  clientName?: string;
  /** Most publishes unanswered at once across the client; publish() waits for room. Default 4096. */
  maxPendingPublishes?: number;
  /** Most messages in one publish frame. Default 1024. */
  maxBatchMessages?: number;
  /** Largest body this client accepts (0: 16 MiB, the default of both sides; at least 4096). */
  maxBodyBytes?: number;
  /** Bounds one connection attempt, hello included. Default 5000. */
  connectTimeoutMs?: number;
  /**
   * Keepalive interval. A ping goes out once nothing came from the node for
   * a quarter of it; the connection closes when that ping is unanswered and
   * nothing at all came for a whole interval. Default 30000; 0 turns it off.
   */
  keepaliveIntervalMs?: number;
  /** Reconnect backoff. Defaults 50 and 5000. */
  backoff?: { initialMs?: number; maxMs?: number };
  /** Most redirects one request follows. Default 4. */
  maxRedirects?: number;
  /** Requests made while reconnecting wait for the connection instead of failing at once. */
  waitForReconnect?: boolean;
  /**
   * Every publish carries this client's producer id (chosen at random when
   * the client is made, kept across reconnects: Client.producerId) and its
   * publish number (FPB2). A queue with a dedup window then stores each
   * message once however often it is sent within the window, and confirms
   * a repeat with duplicate set. Needs a node that speaks FPB2.
   */
  idempotent?: boolean;
  /**
   * A publish whose outcome is unknown (its connection ended before the
   * answer, or the node refused it with outcome_unknown, 215) is sent again
   * by the client instead of failing, but only when that is safe: it
   * carries a dedup key (idempotent, or a messageId of the caller's), its
   * queue deduplicates (the client reads dedup_window_ms from the queue's
   * info after the reconnect), and less than half that window has passed
   * since the publish was first sent. The retry carries the same producer
   * id and number and the same messageId, so a queue that had stored the
   * first copy confirms it as a duplicate. Every other publish fails as
   * without the option: with ConnectionLostError, or the ServerError.
   */
  retryUnknownPublishes?: boolean;
  onConnect?: (session: Session) => void;
  onDisconnect?: (address: string, err: Error) => void;
  /** Node errors that answer no request (request id 0), e.g. unknown_delivery_tag. */
  onError?: (err: ServerError) => void;
}

export interface PublishOptions {
  /** Consumers deduplicate on it; empty: the node assigns one. */
  messageId?: string;
  headers?: Record<string, string | Uint8Array> | Header[];
}

/** A publish's confirm names its boundary (docs/protocol.md 4.12). */
export interface Confirm {
  boundary: "written" | "durable";
  /** Idempotent clients: the queue had stored this message already and did not store it again. */
  duplicate?: boolean;
}

export interface DeclareResult {
  created: boolean;
  /** The mode in effect; undefined only from a node before FDK2-for-every-declare that was not told a mode. */
  mode: Mode | undefined;
  policy: string;
  warnings: string[];
}

export interface SubscribeOptions {
  /** Most unsettled deliveries at once; 0 or left out: the node's default (256). At most 65,535. */
  prefetch?: number;
  /** Called with each delivery, one at a time; when left out, iterate the subscription. */
  handler?: DeliveryHandler;
}

export interface ListOptions {
  prefix?: string;
  after?: string;
  /** 0 or left out: the node's default (1,000, also the maximum). */
  limit?: number;
}

const utf8 = new TextEncoder();
const PUBLISH_FRAME_OVERHEAD = 2 + 4; // queue length prefix and message count, beside the queue name
const MESSAGE_OVERHEAD = 8 + 2 + 2 + 4; // seq, id length, header count, payload length

/** Most times one publish is sent again after an unknown outcome. */
const MAX_PUBLISH_RETRIES = 16;
/** Bounds the wait for a reconnect and the queue's info before a retry is given up. */
const RETRY_INFO_TIMEOUT_MS = 30_000;

/** One publish on its way: the client's state of it, and the connection's PublishItem. */
class QueuedPublish implements PublishItem {
  hops = 0;
  /** Times sent again after an unknown outcome. */
  retries = 0;
  /** When it was first handed to a connection (performance.now()); undefined while never sent. */
  firstSentMs: number | undefined;
  constructor(readonly client: Client, readonly queue: string, readonly message: OutgoingMessage, readonly bytes: number,
    private readonly resolveConfirm: (c: Confirm) => void, private readonly rejectConfirm: (e: Error) => void) {}

  resolve(confirm: Confirm): void {
    this.client.releaseRoom();
    this.resolveConfirm(confirm);
  }

  reject(err: Error): void {
    this.client.releaseRoom();
    this.rejectConfirm(err);
  }

  settle(outcome: PublishOutcome): void {
    this.client.outcome(this, outcome);
  }

  fail(err: Error): void {
    this.client.unknownOutcome(this, err);
  }
}

/** Connects to the first address that answers hello. */
export async function connect(options: ClientOptions): Promise<Client> {
  const client = new Client(options);
  await client.start();
  return client;
}

export class Client implements SubscriptionHost {
  private readonly options: Required<Pick<ClientOptions, "maxPendingPublishes" | "maxBatchMessages" | "maxRedirects">> & ClientOptions;
  private readonly home: Link;
  private readonly links = new Map<string, Link>();
  private readonly routes = new Map<string, string>(); // queue -> owner address
  private readonly subscriptions = new Set<Subscription>();
  private readonly subscriptionLinks = new Map<Subscription, Link>();
  private readonly batches = new Map<Link, Map<string, QueuedPublish[]>>();
  private flushScheduled = false;
  private inFlight = 0;
  private readonly roomWaiters = new Fifo<() => void>();
  private readonly idleWaiters: (() => void)[] = [];
  private closed = false;
  private homeSession: Session | undefined;
  /** The producer id of an idempotent client; "" otherwise. */
  readonly producerId: string;
  private nextProducerSeq = 1n;
  /** Publishes of unknown outcome waiting for this tick's retry round. */
  private unknownPublishes: { item: QueuedPublish; cause: Error }[] = [];

  constructor(options: ClientOptions) {
    if (options.maxBodyBytes && options.maxBodyBytes < MIN_MAX_BODY_BYTES) {
      throw new RangeError(`maxBodyBytes must be 0 or at least ${MIN_MAX_BODY_BYTES}`);
    }
    this.options = {
      ...options,
      maxPendingPublishes: options.maxPendingPublishes ?? 4096,
      maxBatchMessages: options.maxBatchMessages ?? 1024,
      maxRedirects: options.maxRedirects ?? 4,
    };
    this.producerId = options.idempotent ? randomBytes(16).toString("hex") : "";
    this.home = this.newLink(options.addresses);
  }

  /** Connects the home link (connect() calls it). */
  async start(): Promise<Session> {
    this.homeSession = await this.home.start();
    return this.homeSession;
  }

  /** The home connection's session, as its last hello-ok said. */
  get session(): Session | undefined {
    return this.home.open?.session ? { ...this.home.open.session, address: this.home.open.address } : this.homeSession;
  }

  private newLink(addresses: string[]): Link {
    const token = this.options.authToken;
    const link = new Link(addresses, {
      authToken: typeof token === "string" ? utf8.encode(token) : token, clientName: this.options.clientName,
      maxBodyBytes: this.options.maxBodyBytes, connectTimeoutMs: this.options.connectTimeoutMs ?? 5000,
      keepaliveIntervalMs: this.options.keepaliveIntervalMs ?? 30_000,
      backoffInitialMs: this.options.backoff?.initialMs ?? 50, backoffMaxMs: this.options.backoff?.maxMs ?? 5000,
      onError: this.options.onError, onConnect: this.options.onConnect, onDisconnect: this.options.onDisconnect,
    });
    link.onReconnect((connection) => this.resubscribe(link, connection));
    return link;
  }

  /** The link for an address a redirect named, started on first use. */
  private async linkFor(address: string): Promise<Link> {
    if (this.home.addresses.length === 1 && this.home.addresses[0] === address) return this.home;
    let link = this.links.get(address);
    if (link === undefined) {
      link = this.newLink([address]);
      this.links.set(address, link);
      try {
        await link.start();
      } catch (err) {
        this.links.delete(address);
        this.dropRoutesTo(address);
        throw err;
      }
    }
    return link;
  }

  private dropRoutesTo(address: string): void {
    for (const [queue, routed] of this.routes) if (routed === address) this.routes.delete(queue);
  }

  private async routeFor(queue: string): Promise<Link> {
    const address = this.routes.get(queue);
    if (address === undefined) return this.home;
    try {
      return await this.linkFor(address);
    } catch {
      return this.home; // the owner is unreachable: ask the home node again
    }
  }

  private connectionOf(link: Link): Promise<Connection> {
    if (this.closed) return Promise.reject(new ClientClosedError());
    return link.current(this.options.waitForReconnect ?? false);
  }

  /** Sends a request about a queue, following redirects. */
  private async request(queue: string | undefined, build: (requestId: bigint) => Frame): Promise<{ frame: Frame }> {
    let link = queue === undefined ? this.home : await this.routeFor(queue);
    for (let hops = 0; ; hops++) {
      const connection = await this.connectionOf(link);
      const answer = await connection.request(build);
      if ("frame" in answer) return answer;
      if (hops >= this.options.maxRedirects) throw new TooManyRedirectsError(answer.redirect.queue, hops + 1);
      this.routes.set(answer.redirect.queue, answer.redirect.address);
      link = await this.linkFor(answer.redirect.address);
    }
  }

  /** Declares a queue, or checks one; see QueueConfig. */
  async declare(queue: string, config: QueueConfig = {}): Promise<DeclareResult> {
    const options = optionsMap(config);
    const mode = config.mode === "buffered" ? 2 : config.mode === "durable" ? 1 : undefined;
    const encoded = options === undefined ? new Uint8Array(0) : encodeMsgpack(options);
    const { frame } = await this.request(queue, (requestId) => ({ tag: "FDC1", requestId, queue, options: encoded, mode }));
    if (frame.tag === "FDK2") {
      return { created: frame.created, mode: frame.mode === 2 ? "buffered" : "durable", policy: frame.policy, warnings: frame.warnings };
    }
    if (frame.tag === "FDK1") return { created: frame.created, mode: config.mode, policy: "", warnings: [] };
    throw unexpected("declare", frame.tag);
  }

  /**
   * Publishes one message and resolves with its confirm once the queue's
   * boundary is reached; rejects with a ServerError (not stored) or a
   * ConnectionLostError (outcome unknown). Many publishes may be in flight:
   * call it without awaiting each one, up to maxPendingPublishes.
   */
  publish(queue: string, payload: Uint8Array | string, options: PublishOptions = {}): Promise<Confirm> {
    if (this.closed) return Promise.reject(new ClientClosedError());
    const message: OutgoingMessage = {
      messageId: options.messageId ?? "",
      headers: headersOf(options.headers),
      payload: typeof payload === "string" ? utf8.encode(payload) : payload,
    };
    let bytes = MESSAGE_OVERHEAD + Buffer.byteLength(message.messageId, "utf8") + message.payload.length;
    if (this.producerId !== "") {
      message.producerSeq = this.nextProducerSeq++; // the same number if the caller's code sends it again through a redirect
      bytes += 8;
    }
    for (const [k, v] of message.headers) bytes += 2 + Buffer.byteLength(k, "utf8") + 4 + v.length;
    const send = (): Promise<Confirm> => new Promise<Confirm>((resolve, reject) => {
      this.enqueue(queue, new QueuedPublish(this, queue, message, bytes, resolve, reject));
    });
    if (this.inFlight < this.options.maxPendingPublishes && this.roomWaiters.length === 0) {
      this.inFlight++;
      return send();
    }
    return this.reserve().then(send);
  }

  /** Waits for a place in the window; releaseRoom hands it over (inFlight counts it already). */
  private async reserve(): Promise<void> {
    await new Promise<void>((resolve) => this.roomWaiters.push(resolve));
    if (this.closed) {
      this.releaseRoom();
      throw new ClientClosedError();
    }
  }

  /** A publish was answered: its place goes to the first waiter, or back to the window. */
  releaseRoom(): void {
    const next = this.roomWaiters.shift();
    if (next !== undefined) {
      next();
      return;
    }
    this.inFlight--;
    if (this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w();
  }

  private enqueue(queue: string, item: QueuedPublish): void {
    if (!this.routes.has(queue)) {
      this.enqueueOn(this.home, queue, item);
      return;
    }
    this.routeFor(queue).then((link) => this.enqueueOn(link, queue, item), (err) => item.reject(err as Error));
  }

  private enqueueOn(link: Link, queue: string, item: QueuedPublish): void {
    let perQueue = this.batches.get(link);
    if (perQueue === undefined) this.batches.set(link, (perQueue = new Map()));
    const list = perQueue.get(queue);
    if (list === undefined) perQueue.set(queue, [item]);
    else list.push(item);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flushPublishes());
    }
  }

  private flushPublishes(): void {
    this.flushScheduled = false;
    const batches = [...this.batches];
    this.batches.clear();
    for (const [link, perQueue] of batches) {
      const connection = link.open;
      for (const [queue, items] of perQueue) {
        if (connection === undefined) {
          if (this.options.waitForReconnect && !this.closed) {
            void link.current(true).then(() => items.forEach((i) => this.enqueue(queue, i)),
              (err) => items.forEach((i) => i.reject(err)));
          } else {
            const err = this.closed ? new ClientClosedError() : new ConnectionLostError(`not connected to ${link.addresses.join(", ")}; reconnecting`);
            // One sent before (a retry) still has an unknown outcome.
            for (const i of items) if (i.firstSentMs === undefined) i.reject(err); else this.unknownOutcome(i, err);
          }
          continue;
        }
        this.sendBatches(connection, queue, items);
      }
    }
  }

  /** Splits items into frames within the node's limit and maxBatchMessages. */
  private sendBatches(connection: Connection, queue: string, items: QueuedPublish[]): void {
    const limit = connection.nodeMaxBodyBytes || DEFAULT_MAX_BODY_BYTES;
    const head = PUBLISH_FRAME_OVERHEAD + utf8.encode(queue).length + (this.producerId === "" ? 0 : 2 + this.producerId.length);
    let frame: QueuedPublish[] = [];
    let size = head;
    const send = (): void => {
      if (frame.length === 0) return;
      connection.publish(queue, frame, this.producerId);
      frame = [];
      size = head;
    };
    for (const item of items) {
      if (head + item.bytes > limit) {
        item.reject(new MessageTooLargeError(head + item.bytes, limit));
        continue;
      }
      if (frame.length >= this.options.maxBatchMessages || size + item.bytes > limit) send();
      item.firstSentMs ??= performance.now();
      frame.push(item);
      size += item.bytes;
    }
    send();
  }

  /** QueuedPublish: the node answered a publish. */
  outcome(item: QueuedPublish, outcome: PublishOutcome): void {
    const queue = item.queue;
    if (outcome.ok) {
      item.resolve(outcome.duplicate ? { boundary: outcome.boundary, duplicate: true } : { boundary: outcome.boundary });
      return;
    }
    if (outcome.redirect !== undefined) {
      // not_owner: the message was not stored; publish it again at the owner.
      if (item.hops >= this.options.maxRedirects) {
        item.reject(new TooManyRedirectsError(queue, item.hops + 1));
        return;
      }
      this.routes.set(queue, outcome.redirect.address);
      item.hops++;
      this.linkFor(outcome.redirect.address).then(() => this.enqueue(queue, item), (err) => item.reject(err));
      return;
    }
    if (outcome.error.code === Codes.outcome_unknown) {
      this.unknownOutcome(item, outcome.error);
      return;
    }
    item.reject(outcome.error);
  }

  /**
   * QueuedPublish: the publish may or may not have been stored (its
   * connection ended first, or the node said outcome_unknown). It fails
   * with cause, unless retryUnknownPublishes may send it again: then it
   * joins this tick's retry round.
   */
  unknownOutcome(item: QueuedPublish, cause: Error): void {
    const hasKey = this.producerId !== "" || item.message.messageId !== "";
    if (!this.options.retryUnknownPublishes || this.closed || !hasKey || item.retries >= MAX_PUBLISH_RETRIES) {
      item.reject(cause);
      return;
    }
    this.unknownPublishes.push({ item, cause });
    if (this.unknownPublishes.length === 1) setImmediate(() => void this.retryUnknown(this.unknownPublishes.splice(0)));
  }

  /**
   * Sends again the publishes whose queue deduplicates, within half its
   * window of their first send; fails the others with their cause. Each
   * queue's window is asked once per round, after the reconnect.
   * Invariant: every publish handed here is resolved or rejected exactly
   * once, by its new connection or here.
   */
  private async retryUnknown(round: { item: QueuedPublish; cause: Error }[]): Promise<void> {
    const windows = new Map<string, Promise<number>>();
    for (const { item, cause } of round) {
      let window = windows.get(item.queue);
      if (window === undefined) windows.set(item.queue, (window = this.dedupWindowOf(item.queue)));
      const windowMs = await window;
      if (this.closed) {
        item.reject(new ClientClosedError());
      } else if (windowMs <= 0 || performance.now() - item.firstSentMs! >= windowMs / 2) {
        item.reject(cause);
      } else {
        item.retries++;
        this.enqueue(item.queue, item); // the same message: same producer number and id, a new sequence number
      }
    }
  }

  /**
   * The queue's dedup window in ms, read from its info once the link that
   * serves it is connected again; 0 when it does not deduplicate or the
   * info cannot be had (closed client, gone queue, no reconnect within
   * RETRY_INFO_TIMEOUT_MS).
   */
  private async dedupWindowOf(queue: string): Promise<number> {
    const deadline = performance.now() + RETRY_INFO_TIMEOUT_MS;
    while (!this.closed && performance.now() < deadline) {
      const link = await this.routeFor(queue);
      const connection = await withTimeout(link.current(true), Math.min(2000, deadline - performance.now())).catch(() => undefined);
      if (connection === undefined) {
        // The owner a redirect named stays unreachable (it may have failed over): ask home.
        if (link !== this.home && this.routes.get(queue) !== undefined) this.routes.delete(queue);
        continue;
      }
      try {
        return (await this.queueInfo(queue)).options.dedupWindowMs ?? 0;
      } catch (err) {
        if (!(err instanceof ConnectionLostError)) return 0;
      }
    }
    return 0;
  }

  /** Subscribes; the subscription follows redirects and is subscribed again after each reconnect. */
  async subscribe(queue: string, options: SubscribeOptions = {}): Promise<Subscription> {
    const prefetch = options.prefetch ?? 0;
    const sub = new Subscription(queue, prefetch, this, options.handler);
    let link = await this.routeFor(queue);
    for (let hops = 0; ; hops++) {
      const connection = await this.connectionOf(link);
      const answer = await connection.request((requestId) => ({ tag: "FSB1", requestId, queue, prefetch }));
      if ("frame" in answer) {
        const frame = answer.frame;
        if (frame.tag !== "FSK1") throw unexpected("subscribe", frame.tag);
        sub.bind(connection, frame.subscriptionId, frame.prefetch);
        this.subscriptions.add(sub);
        this.subscriptionLinks.set(sub, link);
        return sub;
      }
      if (hops >= this.options.maxRedirects) throw new TooManyRedirectsError(queue, hops + 1);
      this.routes.set(queue, answer.redirect.address);
      link = await this.linkFor(answer.redirect.address);
    }
  }

  /** SubscriptionHost: sends the unsubscribe. */
  async unsubscribe(sub: Subscription): Promise<bigint> {
    const link = this.subscriptionLinks.get(sub);
    const connection = link?.open;
    if (connection === undefined) return 0n;
    try {
      const answer = await connection.request((requestId) => ({ tag: "FUS1", requestId, subscriptionId: sub.id }));
      if ("frame" in answer && answer.frame.tag === "FOK1") return answer.frame.count;
      return 0n;
    } catch (err) {
      if (err instanceof ServerError && err.code === 208) return 0n; // it crossed the node's own end of it
      throw err;
    }
  }

  /** SubscriptionHost: the subscription ended. */
  forget(sub: Subscription): void {
    this.subscriptions.delete(sub);
    this.subscriptionLinks.delete(sub);
  }

  private async resubscribe(link: Link, connection: Connection): Promise<void> {
    for (const sub of [...this.subscriptions]) {
      if (this.subscriptionLinks.get(sub) !== link || sub.closed) continue;
      try {
        const answer = await connection.request((requestId) => ({ tag: "FSB1", requestId, queue: sub.queue, prefetch: sub.requestedPrefetch }));
        if ("frame" in answer && answer.frame.tag === "FSK1") {
          sub.bind(connection, answer.frame.subscriptionId, answer.frame.prefetch);
        } else if ("redirect" in answer) {
          // The queue moved: subscribe at the owner.
          this.routes.set(sub.queue, answer.redirect.address);
          const target = await this.linkFor(answer.redirect.address);
          const there = await target.current(true);
          const moved = await there.request((requestId) => ({ tag: "FSB1", requestId, queue: sub.queue, prefetch: sub.requestedPrefetch }));
          if ("frame" in moved && moved.frame.tag === "FSK1") {
            sub.bind(there, moved.frame.subscriptionId, moved.frame.prefetch);
            this.subscriptionLinks.set(sub, target);
          }
        }
      } catch (err) {
        if (err instanceof ServerError) sub.finish(err); // refused now (deleted queue...): it ends
      }
    }
  }

  /** The queue's state. */
  async queueInfo(queue: string): Promise<QueueInfo> {
    const { frame } = await this.request(queue, (requestId) => ({ tag: "FIQ1", requestId, queue }));
    if (frame.tag !== "FIR1") throw unexpected("get-queue-info", frame.tag);
    return queueInfoOf(frame.info);
  }

  /** One page of queues in name order; ask again with after = the last name while more is true. */
  async listQueues(options: ListOptions = {}): Promise<{ queues: QueueInfo[]; more: boolean }> {
    const { frame } = await this.request(undefined, (requestId) => ({
      tag: "FLQ1", requestId, prefix: options.prefix ?? "", after: options.after ?? "", limit: options.limit ?? 0,
    }));
    if (frame.tag !== "FLR1") throw unexpected("list-queues", frame.tag);
    const list = Array.isArray(frame.queues) ? frame.queues : [];
    return { queues: list.map((q) => queueInfoOf(q)), more: frame.more };
  }

  /** Every queue whose name starts with prefix, page by page. */
  async *allQueues(prefix = ""): AsyncGenerator<QueueInfo> {
    let after = "";
    for (;;) {
      const page = await this.listQueues({ prefix, after });
      for (const q of page.queues) yield q;
      if (!page.more || page.queues.length === 0) return;
      after = page.queues[page.queues.length - 1]!.name;
    }
  }

  /** Deletes a queue and its messages; resolves with the count removed. */
  async deleteQueue(queue: string): Promise<bigint> {
    return this.countOf("delete-queue", await this.request(queue, (requestId) => ({ tag: "FDQ1", requestId, queue })));
  }

  /**
   * Switches an existing queue to mode and lets the node hold its answer up
   * to waitMs for the switch (docs/durability.md, "Changing the mode of an
   * existing queue"). outcome "pending" is not an error: the revision is
   * recorded and applies once the copies it needs are durable; calling
   * again with the same mode reports on the same revision. Asking for the
   * other mode while a change is pending rejects with a ServerError of
   * code 217 (mode_change_pending).
   */
  async changeMode(queue: string, mode: Mode, waitMs = 30_000): Promise<ModeChange> {
    const wanted = mode === "buffered" ? 2 : 1;
    const wait = Math.max(0, Math.min(Math.floor(waitMs), 0xffffffff));
    const answer = await this.request(queue, (requestId) => ({ tag: "FMC1", requestId, queue, mode: wanted, waitMs: wait }));
    const frame = answer.frame;
    if (frame.tag !== "FMK1") throw unexpected("change-mode", frame.tag);
    const name = (m: number): Mode => (m === 2 ? "buffered" : "durable");
    const outcome = frame.outcome === 1 ? "applied" : frame.outcome === 2 ? "unchanged" : "pending";
    return { outcome, mode: name(frame.mode), applied: name(frame.applied), revision: frame.revision, message: frame.message };
  }

  /** Removes a queue's ready messages; resolves with the count removed. */
  async purgeQueue(queue: string): Promise<bigint> {
    return this.countOf("purge-queue", await this.request(queue, (requestId) => ({ tag: "FPG1", requestId, queue })));
  }

  private countOf(what: string, answer: { frame: Frame }): bigint {
    if (answer.frame.tag === "FOK1") return answer.frame.count;
    throw unexpected(what, answer.frame.tag);
  }

  /** A round trip to the home node, in milliseconds. */
  async ping(): Promise<number> {
    const start = performance.now();
    await this.request(undefined, (requestId) => ({ tag: "FPI1", requestId }));
    return performance.now() - start;
  }

  /** Publishes not answered yet. */
  get pendingPublishes(): number {
    return this.inFlight;
  }

  /** Resolves once every publish made so far is answered. */
  async flush(): Promise<void> {
    if (this.inFlight === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Drains, then closes: each subscription stops handing out deliveries,
   * waits for those handed out to be settled, and unsubscribes; every
   * publish made so far is answered; then the connections close.
   */
  async drain(timeoutMs = 30_000): Promise<void> {
    await Promise.all([...this.subscriptions].map((s) => s.drain(timeoutMs).catch(() => {})));
    await Promise.race([this.flush(), new Promise((resolve) => setTimeout(resolve, timeoutMs).unref())]);
    await this.close();
  }

  /** Closes every connection; what is pending fails with ConnectionLostError or ClientClosedError. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.roomWaiters.drain()) w();
    for (const sub of [...this.subscriptions]) sub.finish(undefined);
    await Promise.all([this.home.close(), ...[...this.links.values()].map((l) => l.close())]);
  }
}

/** Resolves as promise does, or rejects after ms. */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), Math.max(0, ms));
    promise.then((v) => { clearTimeout(timer); resolve(v); }, (e) => { clearTimeout(timer); reject(e); });
  });
}

function headersOf(headers: PublishOptions["headers"]): Header[] {
  if (headers === undefined) return [];
  const entries: [string, string | Uint8Array][] = Array.isArray(headers) ? headers : Object.entries(headers);
  return entries.map(([k, v]) => [k, typeof v === "string" ? utf8.encode(v) : v]);
}

function unexpected(what: string, tag: string): Error {
  return new Error(`the node answered ${what} with ${tag}`);
}
