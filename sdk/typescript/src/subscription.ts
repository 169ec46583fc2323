// Subscriptions and deliveries (docs/protocol.md 4.4).
//
// A Subscription holds at most its granted prefetch of deliveries the
// application has not settled: the node never sends more. It hands them out
// either as an async iterator (`for await (const d of sub)`) or to a
// handler, one at a time. Settles are gathered per subscription and sent in
// one frame per kind at the end of the current tick.
//
// States:  active  -> draining (no new deliveries handed out) -> closed
//          active  -> closed (unsubscribed, ended by the node, client closed)
// While its connection is down the subscription stays active; the client
// subscribes again on the next connection, and deliveries of the old one
// are stale (the node hands their messages out again, marked redelivered).

import type { Delivery as WireDelivery, Frame, Header } from "./codec.js";
import type { Connection } from "./connection.js";
import { AlreadySettledError, ServerError, StaleDeliveryError } from "./errors.js";

type SettleKind = "ack" | "release" | "discard" | { requeue: boolean; delayMs: number };

/** One delivered message. Settle it exactly once. */
export class Delivery {
  readonly deliveryTag: bigint;
  /** With offset, where the message sits in its queue's log; (queue, incarnation, offset) identifies it. Opaque. */
  readonly incarnation: bigint;
  readonly offset: bigint;
  /** 1 on the first delivery; counts nacks, lease expiries and restarts while leased. */
  readonly attempt: number;
  /** The message may have been delivered before: treat it as a possible duplicate. */
  readonly redelivered: boolean;
  readonly publishUnixNanos: bigint;
  readonly messageId: string;
  readonly headers: Header[];
  readonly payload: Uint8Array;
  private settled = false;
  /** Given to the application (by the iterator or the handler), as opposed to released while draining. */
  handedOut = false;

  constructor(wire: WireDelivery, private readonly subscription: Subscription, private readonly generation: number) {
    this.deliveryTag = wire.deliveryTag;
    this.incarnation = wire.incarnation;
    this.offset = wire.offset;
    this.attempt = wire.attempt;
    this.redelivered = wire.redelivered;
    this.publishUnixNanos = wire.publishUnixNanos;
    this.messageId = wire.messageId;
    this.headers = wire.headers;
    // The payload aliases the frame it came in; copy it so the frame can go.
    this.payload = Uint8Array.prototype.slice.call(wire.payload);
  }

  /** The payload as UTF-8 text. */
  text(): string {
    return Buffer.from(this.payload.buffer, this.payload.byteOffset, this.payload.byteLength).toString("utf8");
  }

  /** The first header with this key, as text. */
  header(key: string): string | undefined {
    const found = this.headers.find(([k]) => k === key);
    return found === undefined ? undefined : Buffer.from(found[1]).toString("utf8");
  }

  /** Processed: the message is removed. */
  ack(): void {
    this.settle("ack");
  }

  /** Processing failed; the attempt counts. With requeue (the default) it is ready again after delayMs (0: the queue's redelivery delay); without, it is dead-lettered. */
  nack(options: { requeue?: boolean; delayMs?: number } = {}): void {
    this.settle({ requeue: options.requeue ?? true, delayMs: options.delayMs ?? 0 });
  }

  /** Handed back unprocessed: ready again at once; the attempt does not count. */
  release(): void {
    this.settle("release");
  }

  /** Dropped, not dead-lettered. */
  discard(): void {
    this.settle("discard");
  }

  get isSettled(): boolean {
    return this.settled;
  }

  private settle(kind: SettleKind): void {
    if (this.settled) throw new AlreadySettledError();
    if (!this.subscription.holds(this.generation)) throw new StaleDeliveryError();
    this.settled = true;
    this.subscription.settle(this, kind);
  }
}

export type DeliveryHandler = (delivery: Delivery) => void | Promise<void>;

/** What the client gives a subscription so it can (re)subscribe. */
export interface SubscriptionHost {
  /** Sends the unsubscribe on the current connection; resolves with the count released. */
  unsubscribe(sub: Subscription): Promise<bigint>;
  forget(sub: Subscription): void;
}

export class Subscription implements AsyncIterable<Delivery> {
  /** The prefetch the node granted. */
  prefetch = 0;
  /** The subscription id on the current connection. */
  id = 0n;
  private connection: Connection | undefined;
  private generation = 0;
  private readonly buffer: Delivery[] = [];
  private waiting: { resolve: (r: IteratorResult<Delivery>) => void; reject: (e: Error) => void } | undefined;
  private state: "active" | "draining" | "closed" = "active";
  private endError: Error | undefined;
  private outstanding = 0; // handed out, not settled
  private settledWaiters: (() => void)[] = [];
  private readonly settles = new Map<string, bigint[]>();
  private settleScheduled = false;
  private resolveDone!: () => void;
  private rejectDone!: (err: Error) => void;
  /** Resolves when the subscription ends normally, rejects with the node's error when the node ends it. */
  readonly done: Promise<void>;

  constructor(readonly queue: string, readonly requestedPrefetch: number, private readonly host: SubscriptionHost,
    private readonly handler: DeliveryHandler | undefined) {
    this.done = new Promise((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => {});
  }

  /** Why the node ended the subscription, if it did. */
  get error(): Error | undefined {
    return this.endError;
  }

  get closed(): boolean {
    return this.state === "closed";
  }

  /** Binds the subscription to a connection's new subscription id (first subscribe or resubscribe). */
  bind(connection: Connection, id: bigint, prefetch: number): void {
    this.connection = connection;
    this.id = id;
    this.prefetch = prefetch;
    this.generation++;
    this.buffer.length = 0; // deliveries of an older connection are stale
    this.outstanding = 0;
    this.wakeSettled();
    connection.addSubscription(id, {
      deliver: (deliveries) => this.received(deliveries),
      ended: (err) => this.connectionEnded(connection, err),
    });
  }

  /** Whether deliveries of a generation may still be settled. */
  holds(generation: number): boolean {
    return generation === this.generation && this.state !== "closed" && this.connection?.isOpen === true;
  }

  private received(deliveries: WireDelivery[]): void {
    for (const wire of deliveries) {
      const delivery = new Delivery(wire, this, this.generation);
      if (this.state === "draining") {
        delivery.release(); // not handed out: back to the queue at once
        continue;
      }
      this.buffer.push(delivery);
    }
    this.pump();
  }

  private connectionEnded(connection: Connection, err: Error): void {
    if (connection !== this.connection) return;
    this.connection = undefined;
    this.buffer.length = 0;
    this.outstanding = 0;
    this.wakeSettled();
    if (err instanceof ServerError) this.finish(err); // the node ended it: not restored
    // Otherwise the connection ended; the client subscribes again.
  }

  /** Hands buffered deliveries to the waiting iterator or the handler. */
  private handling = false;
  private pump(): void {
    if (this.handler !== undefined) {
      if (this.handling) return;
      this.handling = true;
      void this.runHandler();
      return;
    }
    while (this.waiting !== undefined && this.buffer.length > 0) {
      const waiter = this.waiting;
      this.waiting = undefined;
      waiter.resolve({ value: this.handOut(this.buffer.shift()!), done: false });
    }
  }

  private async runHandler(): Promise<void> {
    try {
      while (this.buffer.length > 0 && this.state === "active") {
        const delivery = this.handOut(this.buffer.shift()!);
        try {
          await this.handler!(delivery);
        } catch {
          if (!delivery.isSettled && this.holds(this.generation)) delivery.nack({ requeue: true });
        }
      }
    } finally {
      this.handling = false;
    }
  }

  private handOut(delivery: Delivery): Delivery {
    delivery.handedOut = true;
    this.outstanding++;
    return delivery;
  }

  /** Queues a settle; gathered settles leave together at the end of the tick. */
  settle(delivery: Delivery, kind: SettleKind): void {
    const key = typeof kind === "string" ? kind : `nack:${kind.requeue ? 1 : 0}:${kind.delayMs}`;
    const tags = this.settles.get(key) ?? [];
    tags.push(delivery.deliveryTag);
    this.settles.set(key, tags);
    if (delivery.handedOut && this.outstanding > 0) this.outstanding--;
    if (!this.settleScheduled) {
      this.settleScheduled = true;
      queueMicrotask(() => this.flushSettles());
    }
    if (this.outstanding === 0) this.wakeSettled();
  }

  private flushSettles(): void {
    this.settleScheduled = false;
    const connection = this.connection;
    const id = this.id;
    for (const [key, tags] of this.settles) {
      if (connection === undefined) break;
      let frame: Frame;
      if (key === "ack") frame = { tag: "FAK1", subscriptionId: id, deliveryTags: tags };
      else if (key === "release") frame = { tag: "FRL1", subscriptionId: id, deliveryTags: tags };
      else if (key === "discard") frame = { tag: "FDS1", subscriptionId: id, deliveryTags: tags };
      else {
        const [, requeue, delay] = key.split(":");
        frame = { tag: "FNK1", subscriptionId: id, requeue: requeue === "1", delayMs: Number(delay), deliveryTags: tags };
      }
      connection.sendFrame(frame);
    }
    this.settles.clear();
  }

  private wakeSettled(): void {
    const waiters = this.settledWaiters;
    this.settledWaiters = [];
    for (const w of waiters) w();
  }

  [Symbol.asyncIterator](): AsyncIterator<Delivery> {
    if (this.handler !== undefined) throw new Error("this subscription has a handler; it cannot also be iterated");
    return {
      next: () => {
        if (this.buffer.length > 0 && this.state === "active") {
          return Promise.resolve({ value: this.handOut(this.buffer.shift()!), done: false });
        }
        if (this.state !== "active") {
          return this.endError ? Promise.reject(this.endError) : Promise.resolve({ value: undefined, done: true });
        }
        return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
      },
      return: async () => {
        await this.unsubscribe().catch(() => {});
        return { value: undefined, done: true };
      },
    };
  }

  /** Ends the subscription: what it holds unsettled goes back to the queue. Resolves with that count. */
  async unsubscribe(): Promise<bigint> {
    if (this.state === "closed") return 0n;
    this.flushSettles();
    let released = 0n;
    try {
      if (this.connection?.isOpen) released = await this.host.unsubscribe(this);
    } finally {
      this.finish(undefined);
    }
    return released;
  }

  /**
   * Stops handing out deliveries, waits until those handed out are settled
   * (at most timeoutMs), then unsubscribes. Deliveries that arrive meanwhile
   * are released at once.
   */
  async drain(timeoutMs = 30_000): Promise<void> {
    if (this.state === "closed") return;
    this.state = "draining";
    for (const d of this.buffer.splice(0)) d.release();
    if (this.outstanding > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        this.settledWaiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    await this.unsubscribe();
  }

  /** Ends the subscription locally: err set means the node ended it. */
  finish(err: Error | undefined): void {
    if (this.state === "closed") return;
    this.state = "closed";
    this.endError = err;
    if (this.connection !== undefined) this.connection.removeSubscription(this.id);
    this.connection = undefined;
    this.buffer.length = 0;
    this.host.forget(this);
    const waiter = this.waiting;
    this.waiting = undefined;
    if (err) {
      waiter?.reject(err);
      this.rejectDone(err);
    } else {
      waiter?.resolve({ value: undefined, done: true });
      this.resolveDone();
    }
    this.wakeSettled();
  }
}
