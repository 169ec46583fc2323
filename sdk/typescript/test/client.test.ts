// The SDK against a live node (FIBRIL_CONFORMANCE_ADDR; `make test` starts
// one) and against scripted fake nodes for connection loss, restarts,
// redirects and older nodes.

import assert from "node:assert/strict";
import net from "node:net";
import { after, describe, it } from "node:test";
import {
  ClientClosedError, Codes, ConnectionLostError, ServerError, StaleDeliveryError, connect, isRetryable, type Client,
  type Delivery,
} from "../src/index.js";
import { backoffDelayMs } from "../src/link.js";
import { FakeNode } from "./fakenode.js";

const nodeAddress = process.env.FIBRIL_CONFORMANCE_ADDR;
const authAddress = process.env.FIBRIL_CONFORMANCE_AUTH_ADDR;
const live = nodeAddress === undefined ? "FIBRIL_CONFORMANCE_ADDR is not set" : false;
const run = `sdk${Math.floor(Math.random() * 1e9)}`;
const clients: Client[] = [];

async function client(options: Partial<Parameters<typeof connect>[0]> = {}): Promise<Client> {
  const c = await connect({ addresses: [nodeAddress!], clientName: "sdk-test", ...options });
  clients.push(c);
  return c;
}

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
});

async function take(iterator: AsyncIterator<Delivery>): Promise<Delivery> {
  const next = await iterator.next();
  assert.equal(next.done, false);
  return next.value as Delivery;
}

async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`${what} did not happen`);
}

/** A port nothing listens on (bound, then closed). */
async function deadAddress(): Promise<string> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `127.0.0.1:${port}`;
}

describe("against a live node", { skip: live }, () => {
  it("declares with a mode and reports warnings, effective mode and conflicts", async () => {
    const c = await client();
    const buffered = await c.declare(`${run}-b`, { mode: "buffered" });
    assert.equal(buffered.created, true);
    assert.equal(buffered.mode, "buffered");
    assert.ok(buffered.warnings.some((w) => w.includes("power loss")));
    const again = await c.declare(`${run}-b`);
    assert.equal(again.created, false);
    await assert.rejects(c.declare(`${run}-b`, { mode: "durable" }), (err: unknown) =>
      err instanceof ServerError && err.code === Codes.mode_conflict && !err.retryable);
    await assert.rejects(c.declare(`${run}-opt`, { deadLetterQueue: "elsewhere" }), (err: unknown) =>
      err instanceof ServerError && err.code === Codes.invalid_options);
  });

  it("pipelines publishes within the window and confirms each at the queue's boundary", async () => {
    const c = await client({ maxPendingPublishes: 256 });
    await c.declare(`${run}-durable`, { mode: "durable" });
    await c.declare(`${run}-pipe`, { mode: "buffered" });
    let most = 0;
    const confirms = [];
    for (let i = 0; i < 3000; i++) {
      confirms.push(c.publish(`${run}-pipe`, `m${i}`));
      most = Math.max(most, c.pendingPublishes);
    }
    const results = await Promise.all(confirms);
    assert.ok(most <= 256, `${most} publishes pending at once`);
    assert.ok(results.every((r) => r.boundary === "written" || r.boundary === "durable"));
    assert.deepEqual(await c.publish(`${run}-durable`, "d"), { boundary: "durable" });
    assert.equal((await c.queueInfo(`${run}-pipe`)).ready, 3000n);
  });

  it("publishes idempotently: a queue with a dedup window stores a repeat once and marks it", async () => {
    const c = await client({ idempotent: true });
    assert.match(c.producerId, /^[0-9a-f]{32}$/);
    await c.declare(`${run}-dedup`, { dedup: true });
    assert.deepEqual(await c.publish(`${run}-dedup`, "a", { messageId: "order-1" }), { boundary: "durable" });
    assert.deepEqual(await c.publish(`${run}-dedup`, "a", { messageId: "order-1" }), { boundary: "durable", duplicate: true });
    const plain = await client();
    assert.deepEqual(await plain.publish(`${run}-dedup`, "a", { messageId: "order-1" }), { boundary: "durable" }); // FPB1: FCF1, unmarked
    const info = await c.queueInfo(`${run}-dedup`);
    assert.equal(info.ready, 1n);
    assert.equal(info.options.dedupWindowMs, 120000);
  });

  it("refuses a publish to an unknown queue with a ServerError that says it is not retryable", async () => {
    const c = await client();
    await assert.rejects(c.publish(`${run}-nothing`, "x"), (err: unknown) =>
      err instanceof ServerError && err.code === Codes.unknown_queue && !isRetryable(err));
  });

  it("consumes with an async iterator within the prefetch, with bigint ids", async () => {
    const c = await client();
    const q = `${run}-iter`;
    await c.declare(q, { mode: "buffered" });
    await Promise.all(["a", "b", "c"].map((p, i) => c.publish(q, p, { messageId: `id-${i}`, headers: { kind: "letter" } })));
    const sub = await c.subscribe(q, { prefetch: 2 });
    assert.equal(sub.prefetch, 2);
    const it = sub[Symbol.asyncIterator]();
    const first = await take(it);
    assert.equal(first.text(), "a");
    assert.equal(first.messageId, "id-0");
    assert.equal(first.header("kind"), "letter");
    assert.equal(first.attempt, 1);
    assert.equal(first.redelivered, false);
    assert.equal(typeof first.deliveryTag, "bigint");
    assert.equal(typeof first.incarnation, "bigint");
    const second = await take(it);
    first.ack();
    second.ack();
    const third = await take(it);
    assert.equal(third.text(), "c");
    third.ack();
    assert.throws(() => third.ack(), /already settled/);
    await eventually("the queue empties", async () => (await c.queueInfo(q)).ready === 0n && (await c.queueInfo(q)).leased === 0n);
    assert.equal(await sub.unsubscribe(), 0n);
  });

  it("settles with nack, release and discard as the protocol says, and counts dead-lettering", async () => {
    const c = await client();
    const q = `${run}-settle`;
    await c.declare(q, { mode: "buffered" });
    await c.publish(q, "x");
    const sub = await c.subscribe(q, { prefetch: 1 });
    const it = sub[Symbol.asyncIterator]();
    (await take(it)).nack();
    const again = await take(it);
    assert.equal(again.attempt, 2);
    assert.equal(again.redelivered, true);
    again.release();
    const released = await take(it);
    assert.equal(released.attempt, 2);
    released.nack({ requeue: false });
    await eventually("dead_lettered counts the nack", async () => (await c.queueInfo(q)).deadLettered === 1n);
    await c.publish(q, "y");
    (await take(it)).discard();
    await eventually("the discard applies", async () => {
      const info = await c.queueInfo(q);
      return info.ready === 0n && info.leased === 0n && info.deadLettered === 1n;
    });
  });

  it("consumes with a handler, and nacks what a throwing handler left unsettled", async () => {
    const c = await client();
    const q = `${run}-handler`;
    await c.declare(q, { mode: "buffered" });
    await c.publish(q, "boom");
    const seen: number[] = [];
    const sub = await c.subscribe(q, {
      prefetch: 4,
      handler: async (d) => {
        seen.push(d.attempt);
        if (d.attempt === 1) throw new Error("first attempt fails");
        d.ack();
      },
    });
    await eventually("the second attempt is acked", async () => seen.length === 2 && (await c.queueInfo(q)).leased === 0n);
    assert.deepEqual(seen, [1, 2]);
    await sub.unsubscribe();
  });

  it("lists queues page by page, purges and deletes", async () => {
    const c = await client();
    for (const name of ["c", "a", "b"]) await c.declare(`${run}-list-${name}`);
    const page = await c.listQueues({ prefix: `${run}-list-`, limit: 2 });
    assert.deepEqual(page.queues.map((q) => q.name), [`${run}-list-a`, `${run}-list-b`]);
    assert.equal(page.more, true);
    const all = [];
    for await (const q of c.allQueues(`${run}-list-`)) all.push(q.name);
    assert.deepEqual(all, [`${run}-list-a`, `${run}-list-b`, `${run}-list-c`]);
    await c.publish(`${run}-list-a`, "1");
    await c.publish(`${run}-list-a`, "2");
    assert.equal(await c.purgeQueue(`${run}-list-a`), 2n);
    assert.equal(await c.deleteQueue(`${run}-list-b`), 0n);
    await assert.rejects(c.queueInfo(`${run}-list-b`), (err: unknown) => err instanceof ServerError && err.code === Codes.unknown_queue);
    const info = await c.queueInfo(`${run}-list-c`);
    assert.equal(info.mode, "durable");
    assert.equal(info.options.leaseTimeoutMs, 30000);
    assert.equal(info.options.overflow, "reject_new");
  });

  it("ends a subscription the node ends, with its error, and makes its deliveries stale", async () => {
    const c = await client();
    const q = `${run}-doomed`;
    await c.declare(q, { mode: "buffered" });
    await c.publish(q, "last");
    const sub = await c.subscribe(q, { prefetch: 4 });
    const it = sub[Symbol.asyncIterator]();
    const held = await take(it);
    await c.deleteQueue(q);
    await assert.rejects(sub.done, (err: unknown) => err instanceof ServerError && err.code === Codes.unknown_queue);
    await assert.rejects(it.next(), (err: unknown) => err instanceof ServerError);
    assert.throws(() => held.ack(), StaleDeliveryError);
  });

  it("drains: waits for publishes and for handed-out deliveries, then closes", async () => {
    const c = await connect({ addresses: [nodeAddress!] });
    const q = `${run}-drain`;
    await c.declare(q, { mode: "buffered" });
    const acked: string[] = [];
    await c.subscribe(q, {
      prefetch: 8,
      handler: async (d) => {
        await new Promise((r) => setTimeout(r, 5));
        acked.push(d.text());
        d.ack();
      },
    });
    const confirms = Array.from({ length: 50 }, (_, i) => c.publish(q, `m${i}`));
    await c.drain();
    const outcomes = await Promise.allSettled(confirms);
    assert.ok(outcomes.every((o) => o.status === "fulfilled"), "every publish made before the drain was confirmed");
    await assert.rejects(c.publish(q, "late"), ClientClosedError);
    const check = await client();
    const info = await check.queueInfo(q);
    assert.equal(info.leased, 0n, "nothing left leased after the drain");
    assert.equal(BigInt(acked.length) + info.ready, 50n);
  });

  it("connects through the first address that answers", async () => {
    const c = await client({ addresses: [await deadAddress(), nodeAddress!] });
    assert.equal(c.session?.address, nodeAddress);
  });

  it("sends the token in hello", { skip: authAddress === undefined ? "no auth node" : false }, async () => {
    const c = await connect({ addresses: [authAddress!], authToken: process.env.FIBRIL_CONFORMANCE_TOKEN ?? "" });
    clients.push(c);
    assert.ok((await c.ping()) >= 0);
    await assert.rejects(connect({ addresses: [authAddress!], authToken: "wrong" }), (err: unknown) =>
      err instanceof ServerError && err.code === Codes.unauthorized);
  });
});

describe("against fake nodes", () => {
  it("fails every pending request and publish at once when the connection ends", async () => {
    const node = new FakeNode(() => {}); // answers nothing
    const address = await node.listen();
    const c = await connect({ addresses: [address], backoff: { initialMs: 1000, maxMs: 1000 } });
    const pending = [c.queueInfo("q"), c.publish("q", "1"), c.publish("q", "2"), c.listQueues()];
    const settled = Promise.allSettled(pending);
    await eventually("the node saw the frames", async () => node.connections[0]!.received.length >= 3);
    node.connections[0]!.close();
    const outcomes = await settled; // all of them, on the close itself: no reconnect has said hello yet
    assert.equal(node.hellos.length, 1);
    for (const o of outcomes) {
      assert.equal(o.status, "rejected");
      assert.ok(o.reason instanceof ConnectionLostError, String(o.reason));
      assert.ok(isRetryable(o.reason));
    }
    await c.close();
    await node.close();
  });

  it("reconnects with backoff, names the previous session and reports a restart", async () => {
    let restarted = false;
    const node = new FakeNode((frame, conn) => {
      if (frame.tag === "FPI1") conn.send({ tag: "FPO1", requestId: frame.requestId });
    }, () => restarted);
    const address = await node.listen();
    const sessions: boolean[] = [];
    const c = await connect({ addresses: [address], backoff: { initialMs: 20, maxMs: 40 }, onConnect: (s) => sessions.push(s.resumed) });
    restarted = true;
    node.connections[0]!.close();
    await eventually("the client reconnects", async () => sessions.length === 2);
    assert.deepEqual(sessions, [false, true]);
    assert.equal(node.hellos.length, 2);
    assert.equal((node.hellos[1] as { previousSession: string }).previousSession, "fake-1");
    assert.equal(c.session?.resumed, true);
    assert.ok((await c.ping()) >= 0);
    await c.close();
    await node.close();
  });

  it("reconnects to the next address first after the keepalive closed a silent node's connection", async () => {
    // The silent node still answers hello (only its pings go unanswered), so
    // a reconnect to it would succeed: where the client lands shows which
    // address it tried first. A real silent node accepts TCP connections and
    // leaves hello unanswered until connectTimeoutMs.
    let quiet = false;
    const silent = new FakeNode((frame, conn) => {
      if (frame.tag === "FPI1" && !quiet) conn.send({ tag: "FPO1", requestId: frame.requestId });
    });
    const other = new FakeNode((frame, conn) => {
      if (frame.tag === "FPI1") conn.send({ tag: "FPO1", requestId: frame.requestId });
    });
    const silentAddress = await silent.listen();
    const otherAddress = await other.listen();
    const landed: string[] = [];
    const c = await connect({ addresses: [silentAddress, otherAddress], keepaliveIntervalMs: 20,
      backoff: { initialMs: 10, maxMs: 20 }, onConnect: (s) => landed.push(s.address) });
    try {
      assert.deepEqual(landed, [silentAddress]);
      quiet = true;
      await eventually("the client reconnects", async () => landed.length >= 2);
      assert.equal(landed[1], otherAddress, "reconnected to the node that went silent");
      assert.equal(silent.hellos.length, 1);
    } finally {
      await c.close();
      await silent.close();
      await other.close();
    }
  });

  it("subscribes again after a reconnect, and makes the old connection's deliveries stale", async () => {
    let subscriptionId = 100n;
    const node = new FakeNode((frame, conn) => {
      if (frame.tag !== "FSB1") return;
      const id = subscriptionId++;
      conn.send({ tag: "FSK1", requestId: frame.requestId, subscriptionId: id, prefetch: 8 });
      conn.send({ tag: "FDL1", subscriptionId: id, deliveries: [{ deliveryTag: (1n << 60n) + id, incarnation: 7n, offset: 0n,
        attempt: id === 100n ? 1 : 2, redelivered: id !== 100n, publishUnixNanos: 1n, messageId: "m", headers: [], payload: Buffer.from("x") }] });
    });
    const c = await connect({ addresses: [await node.listen()], backoff: { initialMs: 10, maxMs: 20 } });
    const sub = await c.subscribe("q", { prefetch: 8 });
    const it = sub[Symbol.asyncIterator]();
    const first = await take(it);
    assert.equal(first.deliveryTag, (1n << 60n) + 100n);
    node.connections[0]!.close();
    const second = await take(it);
    assert.equal(second.attempt, 2);
    assert.equal(second.redelivered, true);
    assert.equal(sub.id, 101n);
    assert.throws(() => first.ack(), StaleDeliveryError);
    second.ack();
    await eventually("the ack reaches the new connection", async () =>
      node.connections[1]!.received.some((f) => f.tag === "FAK1" && f.subscriptionId === 101n));
    await c.close();
    await node.close();
  });

  it("makes requests wait for the reconnect when asked to", async () => {
    const node = new FakeNode((frame, conn) => {
      if (frame.tag === "FPI1") conn.send({ tag: "FPO1", requestId: frame.requestId });
    });
    let disconnected!: () => void;
    const lost = new Promise<void>((resolve) => (disconnected = resolve));
    const c = await connect({ addresses: [await node.listen()], waitForReconnect: true, backoff: { initialMs: 50, maxMs: 50 },
      onDisconnect: () => disconnected() });
    node.connections[0]!.close();
    await lost; // the client knows the connection is gone; the reconnect waits out its backoff
    assert.ok((await c.ping()) >= 0);
    assert.equal(node.hellos.length, 2);
    await c.close();
    await node.close();
  });

  it("spaces reconnect rounds by doubling backoff with jitter", () => {
    assert.equal(backoffDelayMs(0, 50, 5000, () => 0), 25);
    assert.equal(backoffDelayMs(0, 50, 5000, () => 1), 50);
    assert.equal(backoffDelayMs(3, 50, 5000, () => 1), 400);
    assert.equal(backoffDelayMs(20, 50, 5000, () => 0), 2500);
  });

  it("accepts FDK1 from an older node", async () => {
    const node = new FakeNode((frame, conn) => {
      if (frame.tag === "FDC1") conn.send({ tag: "FDK1", requestId: frame.requestId, created: true });
    });
    const c = await connect({ addresses: [await node.listen()] });
    assert.deepEqual(await c.declare("old", { mode: "buffered" }), { created: true, mode: "buffered", policy: "", warnings: [] });
    await c.close();
    await node.close();
  });

  it("answers an unknown tag with unknown_frame and closes", async () => {
    const node = new FakeNode(() => {});
    const c = await connect({ addresses: [await node.listen()], backoff: { initialMs: 5000, maxMs: 5000 } });
    node.connections[0]!.sendRaw(Buffer.from("5a5a5a3900000000", "hex"));
    await eventually("the client answers", async () => node.connections[0]!.received.some((f) => f.tag === "FER1"));
    const error = node.connections[0]!.received.find((f) => f.tag === "FER1") as { code: number; message: string };
    assert.equal(error.code, Codes.unknown_frame);
    assert.match(error.message, /ZZZ9/);
    await c.close();
    await node.close();
  });

  it("follows redirects for requests and publishes to the owner", { skip: live }, async () => {
    const owner = await client();
    const q = `${run}-routed`;
    await owner.declare(q, { mode: "buffered" });
    const redirector = new FakeNode((frame, conn) => {
      if (frame.tag === "FIQ1" || frame.tag === "FSB1") {
        conn.send({ tag: "FRD1", requestId: frame.requestId, queue: q, nodeId: "owner", address: nodeAddress! });
      }
      if (frame.tag === "FPB1") {
        const seqs = frame.messages.map((m) => BigInt(m.seq));
        conn.send({ tag: "FNC1", ranges: seqs.map((s) => ({ first: s, last: s, code: Codes.not_owner, message: "owned elsewhere" })) });
        conn.send({ tag: "FRD1", requestId: 0n, queue: frame.queue, nodeId: "owner", address: nodeAddress! });
      }
    });
    const c = await connect({ addresses: [await redirector.listen()] });
    assert.deepEqual(await c.publish(q, "via redirect"), { boundary: "written" });
    const info = await c.queueInfo(q);
    assert.equal(info.name, q);
    const sub = await c.subscribe(q, { prefetch: 1 });
    const it = sub[Symbol.asyncIterator]();
    assert.equal((await take(it)).text(), "via redirect");
    await c.close();
    await redirector.close();
  });

  it("gives up after maxRedirects when nodes send a request round in circles", async () => {
    const node = new FakeNode((frame, conn) => {
      if (frame.tag === "FIQ1") conn.send({ tag: "FRD1", requestId: frame.requestId, queue: "loop", nodeId: "self", address: selfAddress });
    });
    const selfAddress = await node.listen();
    const c = await connect({ addresses: [selfAddress], maxRedirects: 2 });
    await assert.rejects(c.queueInfo("loop"), /redirected 3 times/);
    await c.close();
    await node.close();
  });
});
