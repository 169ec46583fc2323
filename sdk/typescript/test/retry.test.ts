// retryUnknownPublishes: a publish whose outcome is unknown is sent again
// by the client, with the same producer pair and message id, only when its
// queue deduplicates; otherwise it fails to the caller as unknown.
//
// Against a live node (FIBRIL_CONFORMANCE_ADDR), through a TCP proxy that
// can swallow the node's replies (the publish is stored, its confirm never
// arrives) or the client's frames (the publish never arrives), then cuts
// the connection: the outcome is unknown to the client either way. Against
// a scripted node for outcome_unknown (215), which a single live node does
// not send on demand.

import assert from "node:assert/strict";
import net from "node:net";
import { after, describe, it } from "node:test";
import { Codes, ConnectionLostError, ServerError, connect, type Client, type ClientOptions } from "../src/index.js";
import { FakeNode } from "./fakenode.js";

const nodeAddress = process.env.FIBRIL_CONFORMANCE_ADDR;
const live = nodeAddress === undefined ? "FIBRIL_CONFORMANCE_ADDR is not set" : false;
const run = `retry${Math.floor(Math.random() * 1e9)}`;
const clients: Client[] = [];
const proxies: Proxy[] = [];

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await Promise.all(proxies.map((p) => p.close()));
});

/** Forwards connections to target; can drop either direction, and cut every connection. */
class Proxy {
  /** Bytes from the node are dropped (the client hears nothing). */
  dropReplies = false;
  /** Bytes from the client are dropped (the node hears nothing). */
  dropRequests = false;
  droppedRequestBytes = 0;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();

  constructor(private readonly target: string) {
    this.server = net.createServer((client) => this.accept(client));
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
  }

  /** Ends every open connection; new ones pass everything again. */
  cut(): void {
    this.dropReplies = false;
    this.dropRequests = false;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    const colon = this.target.lastIndexOf(":");
    const node = net.connect({ host: this.target.slice(0, colon), port: Number(this.target.slice(colon + 1)) });
    for (const s of [client, node]) {
      this.sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => {
        client.destroy();
        node.destroy();
      });
    }
    client.on("data", (chunk: Buffer) => {
      if (this.dropRequests) this.droppedRequestBytes += chunk.length;
      else node.write(chunk);
    });
    node.on("data", (chunk: Buffer) => {
      if (!this.dropReplies) client.write(chunk);
    });
  }
}

async function direct(): Promise<Client> {
  const c = await connect({ addresses: [nodeAddress!], clientName: "retry-test" });
  clients.push(c);
  return c;
}

async function throughProxy(options: Partial<ClientOptions>): Promise<{ c: Client; proxy: Proxy }> {
  const proxy = new Proxy(nodeAddress!);
  proxies.push(proxy);
  const c = await connect({ addresses: [await proxy.listen()], clientName: "retry-test", backoff: { initialMs: 10, maxMs: 50 }, ...options });
  clients.push(c);
  return { c, proxy };
}

async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`${what} did not happen`);
}

/** Publishes one message whose confirm the proxy swallows, waits until the node stored it, then cuts the connection. */
async function publishWithLostConfirm(c: Client, proxy: Proxy, admin: Client, queue: string, messageId = ""): Promise<Promise<unknown>> {
  proxy.dropReplies = true;
  const outcome = c.publish(queue, "once", { messageId }).then((confirm) => ({ confirm }), (err: unknown) => ({ err }));
  await eventually("the node stores the publish", async () => (await admin.queueInfo(queue)).ready === 1n);
  proxy.cut();
  return outcome;
}

describe("retrying unknown outcomes against a live node", { skip: live }, () => {
  it("re-sends a publish whose confirm was lost to a deduplicating queue, and gets the original's confirm as a duplicate", async () => {
    const admin = await direct();
    const q = `${run}-dedup`;
    await admin.declare(q, { mode: "durable", dedup: true });
    const { c, proxy } = await throughProxy({ idempotent: true, retryUnknownPublishes: true });
    const outcome = await publishWithLostConfirm(c, proxy, admin, q);
    assert.deepEqual(await outcome, { confirm: { boundary: "durable", duplicate: true } });
    const info = await admin.queueInfo(q);
    assert.equal(info.ready, 1n);
    assert.ok((info.raw.duplicates_refused as bigint) >= 1n, `duplicates_refused ${String(info.raw.duplicates_refused)}`);
  });

  it("re-sends a publish the node never received, keyed by its message id only, and stores it once", async () => {
    const admin = await direct();
    const q = `${run}-lost-request`;
    await admin.declare(q, { mode: "durable", dedupWindowMs: 60_000 });
    const { c, proxy } = await throughProxy({ retryUnknownPublishes: true }); // not idempotent: FPB1, the message id is the key
    proxy.dropRequests = true;
    const outcome = c.publish(q, "once", { messageId: "m-1" });
    await eventually("the proxy swallows the publish", async () => proxy.droppedRequestBytes > 0);
    proxy.cut();
    assert.deepEqual(await outcome, { boundary: "durable" });
    assert.equal((await admin.queueInfo(q)).ready, 1n);
    const sub = await admin.subscribe(q, { prefetch: 1 });
    const first = await sub[Symbol.asyncIterator]().next();
    assert.equal(first.done, false);
    if (!first.done) {
      assert.equal(first.value.messageId, "m-1");
      first.value.ack();
    }
  });

  it("fails a publish of unknown outcome to a queue without dedup, and never sends it again", async () => {
    const admin = await direct();
    const q = `${run}-plain`;
    await admin.declare(q, { mode: "durable" });
    const { c, proxy } = await throughProxy({ idempotent: true, retryUnknownPublishes: true });
    const outcome = (await publishWithLostConfirm(c, proxy, admin, q)) as Promise<{ err?: unknown }>;
    const { err } = await outcome;
    assert.ok(err instanceof ConnectionLostError, `got ${String(err)}`);
    // Through the same client, after the reconnect: a second copy would be there by now.
    await eventually("the client reconnects", async () => c.ping().then(() => true, () => false));
    assert.deepEqual(await c.publish(q, "after"), { boundary: "durable" });
    assert.equal((await admin.queueInfo(q)).ready, 2n);
  });

  it("fails a publish of unknown outcome when the caller did not ask for retries, even to a deduplicating queue", async () => {
    const admin = await direct();
    const q = `${run}-off`;
    await admin.declare(q, { mode: "durable", dedup: true });
    const { c, proxy } = await throughProxy({ idempotent: true });
    const { err } = (await (await publishWithLostConfirm(c, proxy, admin, q))) as { err?: unknown };
    assert.ok(err instanceof ConnectionLostError, `got ${String(err)}`);
    assert.equal((await admin.queueInfo(q)).ready, 1n);
  });
});

describe("retrying outcome_unknown (215) against a scripted node", () => {
  /** A node that refuses the first publish with outcome_unknown and confirms every later one; its queue has the given window. */
  function scripted(dedupWindowMs: number): { node: FakeNode; publishes: { producerId: string; producerSeq: bigint; messageId: string }[] } {
    const publishes: { producerId: string; producerSeq: bigint; messageId: string }[] = [];
    const node = new FakeNode((frame, conn) => {
      if (frame.tag === "FPB2" || frame.tag === "FPB1") {
        for (const m of frame.messages) {
          publishes.push({ producerId: frame.tag === "FPB2" ? frame.producerId : "", producerSeq: BigInt(m.producerSeq ?? 0), messageId: m.messageId });
          const seq = BigInt(m.seq);
          if (publishes.length === 1) {
            conn.send({ tag: "FNC1", ranges: [{ first: seq, last: seq, code: Codes.outcome_unknown, message: "the queue restarted" }] });
          } else if (frame.tag === "FPB2") {
            conn.send({ tag: "FCF2", ranges: [{ first: seq, last: seq, boundary: 2, duplicate: true }] });
          } else {
            conn.send({ tag: "FCF1", ranges: [{ first: seq, last: seq, boundary: 2 }] });
          }
        }
      }
      if (frame.tag === "FIQ1") {
        const options: { [key: string]: bigint } = dedupWindowMs > 0 ? { dedup_window_ms: BigInt(dedupWindowMs) } : {};
        conn.send({ tag: "FIR1", requestId: frame.requestId, info: { name: frame.queue, mode: "durable", options } });
      }
    });
    return { node, publishes };
  }

  it("sends again, with the same producer pair, a publish refused with outcome_unknown to a deduplicating queue", async () => {
    const { node, publishes } = scripted(60_000);
    const c = await connect({ addresses: [await node.listen()], idempotent: true, retryUnknownPublishes: true });
    assert.deepEqual(await c.publish("q", "x"), { boundary: "durable", duplicate: true });
    assert.equal(publishes.length, 2);
    assert.deepEqual(publishes[1], publishes[0]);
    assert.equal(publishes[0]!.producerId, c.producerId);
    await c.close();
    await node.close();
  });

  it("fails a publish refused with outcome_unknown to a queue without dedup, with the node's code", async () => {
    const { node, publishes } = scripted(0);
    const c = await connect({ addresses: [await node.listen()], idempotent: true, retryUnknownPublishes: true });
    await assert.rejects(c.publish("q", "x"), (err: unknown) => err instanceof ServerError && err.code === Codes.outcome_unknown && err.retryable);
    assert.equal(publishes.length, 1);
    await c.close();
    await node.close();
  });

  it("fails a publish that carries no dedup key without asking the queue", async () => {
    const { node, publishes } = scripted(60_000);
    const c = await connect({ addresses: [await node.listen()], retryUnknownPublishes: true }); // neither idempotent nor a message id
    await assert.rejects(c.publish("q", "x"), (err: unknown) => err instanceof ServerError && err.code === Codes.outcome_unknown);
    assert.equal(publishes.length, 1);
    assert.ok(!node.connections[0]!.received.some((f) => f.tag === "FIQ1"));
    await c.close();
    await node.close();
  });
});
