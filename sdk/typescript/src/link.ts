// A Link keeps one connection up to one node, given by one or more
// addresses (the client's home link rotates through them; a redirect
// target has one). When the connection ends it reconnects with backoff:
// the n-th failed round of attempts in a row waits a random time in
// [d/2, d], d = initialMs * 2^n capped at maxMs (docs/protocol.md 4.11).
// Each hello names the session id of the last hello-ok, so the node can
// say whether it restarted (4.8). After each reconnect the link subscribes
// its subscriptions again.
//
// States: connecting -> open -> (connection ended) -> waiting -> connecting ... -> closed

import { Connection, type HelloOk } from "./connection.js";
import { ConnectionLostError, ClientClosedError, KeepaliveTimeoutError, type ServerError } from "./errors.js";

export interface LinkOptions {
  authToken?: Uint8Array | undefined;
  clientName?: string | undefined;
  maxBodyBytes?: number | undefined;
  connectTimeoutMs: number;
  keepaliveIntervalMs: number;
  backoffInitialMs: number;
  backoffMaxMs: number;
  onError?: ((err: ServerError) => void) | undefined;
  onConnect?: ((session: Session) => void) | undefined;
  onDisconnect?: ((address: string, err: Error) => void) | undefined;
}

/** The session a hello-ok opened, with the address it was opened on. */
export interface Session extends HelloOk {
  address: string;
}

/** Backoff delay before round `failures` (0 for the first retry). */
export function backoffDelayMs(failures: number, initialMs: number, maxMs: number, random = Math.random): number {
  let ceiling = initialMs;
  for (let i = 0; i < failures && ceiling < maxMs; i++) ceiling *= 2;
  ceiling = Math.min(ceiling, maxMs);
  const half = ceiling / 2;
  return half + random() * (ceiling - half);
}

export class Link {
  private connection: Connection | undefined;
  private closedByClient = false;
  private nextAddress = 0;
  private previousSession = "";
  private waiters: { resolve: (c: Connection) => void; reject: (e: Error) => void }[] = [];
  private readonly reconnectHooks = new Set<(c: Connection) => void | Promise<void>>();
  private running: Promise<void> | undefined;
  private wakeFromBackoff: (() => void) | undefined;

  constructor(readonly addresses: string[], private readonly options: LinkOptions) {
    if (addresses.length === 0) throw new Error("no address to connect to");
  }

  /** Connects once through the addresses in order; rejects with the last failure when none answers. */
  async start(): Promise<Session> {
    let last: Error = new ConnectionLostError("no address answered");
    for (let i = 0; i < this.addresses.length; i++) {
      try {
        const connection = await this.dial(this.addresses[this.nextAddress]!);
        this.becomeOpen(connection);
        this.running = this.supervise(connection);
        return this.sessionOf(connection);
      } catch (err) {
        last = err as Error;
        this.nextAddress = (this.nextAddress + 1) % this.addresses.length;
      }
    }
    throw last;
  }

  /** The open connection, or a ConnectionLostError right away (wait: until the next one opens). */
  current(wait = false): Promise<Connection> {
    if (this.closedByClient) return Promise.reject(new ClientClosedError());
    if (this.connection?.isOpen) return Promise.resolve(this.connection);
    if (!wait) return Promise.reject(new ConnectionLostError(`not connected to ${this.addresses.join(", ")}; reconnecting`));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** The open connection if there is one. */
  get open(): Connection | undefined {
    return this.connection?.isOpen ? this.connection : undefined;
  }

  /** Runs after every reconnect (not the first connect), before waiters get the connection. */
  onReconnect(hook: (c: Connection) => void | Promise<void>): () => void {
    this.reconnectHooks.add(hook);
    return () => this.reconnectHooks.delete(hook);
  }

  async close(): Promise<void> {
    this.closedByClient = true;
    this.wakeFromBackoff?.();
    this.connection?.close(new ClientClosedError());
    for (const w of this.waiters.splice(0)) w.reject(new ClientClosedError());
    await this.running;
  }

  private dial(address: string): Promise<Connection> {
    const connection = new Connection({
      address, authToken: this.options.authToken, clientName: this.options.clientName,
      previousSession: this.previousSession, maxBodyBytes: this.options.maxBodyBytes,
      connectTimeoutMs: this.options.connectTimeoutMs, keepaliveIntervalMs: this.options.keepaliveIntervalMs,
      onError: this.options.onError,
    });
    return connection.ready.then(() => connection, (err) => {
      connection.close();
      throw err;
    });
  }

  private sessionOf(connection: Connection): Session {
    return { ...connection.session!, address: connection.address };
  }

  private becomeOpen(connection: Connection): void {
    this.connection = connection;
    this.previousSession = connection.session!.sessionId;
    this.options.onConnect?.(this.sessionOf(connection));
  }

  /** Waits for the connection to end, then reconnects, until closed. */
  private async supervise(connection: Connection): Promise<void> {
    for (;;) {
      const reason = await connection.closed;
      if (this.closedByClient) return;
      this.options.onDisconnect?.(connection.address, reason);
      if (reason instanceof KeepaliveTimeoutError) {
        // The node went silent: the round starts at the next address, not
        // at a node that would leave hello unanswered until connectTimeoutMs.
        this.nextAddress = (this.addresses.indexOf(connection.address) + 1) % this.addresses.length;
      }
      let failures = 0;
      for (;;) {
        const address = this.addresses[this.nextAddress]!;
        try {
          connection = await this.dial(address);
          break;
        } catch (err) {
          if (this.closedByClient) return;
          this.options.onDisconnect?.(address, err as Error);
          this.nextAddress = (this.nextAddress + 1) % this.addresses.length;
          if (this.nextAddress === 0 || this.addresses.length === 1) {
            await this.sleep(backoffDelayMs(failures++, this.options.backoffInitialMs, this.options.backoffMaxMs));
          }
          if (this.closedByClient) return;
        }
      }
      if (this.closedByClient) {
        connection.close(new ClientClosedError());
        return;
      }
      this.becomeOpen(connection);
      for (const hook of this.reconnectHooks) {
        try {
          await hook(connection);
        } catch {
          // A hook's failure (a resubscribe refused) is the hook's to report.
        }
      }
      for (const w of this.waiters.splice(0)) w.resolve(connection);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wakeFromBackoff = undefined;
        resolve();
      }, ms);
      this.wakeFromBackoff = () => {
        clearTimeout(timer);
        this.wakeFromBackoff = undefined;
        resolve();
      };
    });
  }
}
