// Two figures of the SDK against a running node, the same two that
// bench/gosdk measures with the Go SDK (docs/performance.md, "SDKs"):
//
//   throughput  confirms per second of pipelined 1 KiB publishes to a fresh
//               buffered queue: `messages` publishes made as fast as the
//               client's publish window (maxPendingPublishes, default 4096)
//               lets them, timed from the first publish to the last confirm;
//               the first `warmup` messages are published and confirmed
//               before the clock starts
//   latency     publish-to-delivery of 1 KiB messages published at `rate`
//               per second to a fresh buffered queue, one consumer on its own
//               connection (prefetch 1000, acking each), publish i intended at
//               t0 + i/rate; latency = receive time - intended time (so a late
//               sender counts against the figure), from raw samples; the
//               first second is warm-up. Producer and consumer are two clients
//               of one process, as in the Go twin.
//
// Usage: node dist/bench/bench.js [--addr 127.0.0.1:7420] [--messages 100000]
//        [--rate 1000] [--seconds 10] [--runs 3] [--json FILE]

import { writeFileSync } from "node:fs";
import { connect, type Delivery } from "../src/index.js";

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1]! : fallback;
}

const address = flag("addr", process.env.FIBRIL_ADDR ?? "127.0.0.1:7420");
const messages = Number(flag("messages", "100000"));
const warmup = Number(flag("warmup", "10000"));
const rate = Number(flag("rate", "1000"));
const seconds = Number(flag("seconds", "10"));
const runs = Number(flag("runs", "3"));
const jsonFile = flag("json", "");
const payloadBytes = 1024;
const tag = `tsbench-${process.pid}-${Date.now()}`;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

async function throughput(run: number): Promise<{ confirmsPerSecond: number; boundaries: Record<string, number> }> {
  const c = await connect({ addresses: [address], clientName: "ts-bench" });
  const queue = `${tag}-throughput-${run}`;
  await c.declare(queue, { mode: "buffered" });
  const payload = new Uint8Array(payloadBytes);
  const boundaries: Record<string, number> = {};
  const publishAll = async (n: number): Promise<void> => {
    const confirms: Promise<unknown>[] = [];
    for (let i = 0; i < n; i++) {
      confirms.push(c.publish(queue, payload).then((confirm) => {
        boundaries[confirm.boundary] = (boundaries[confirm.boundary] ?? 0) + 1;
      }));
    }
    await Promise.all(confirms);
  };
  await publishAll(warmup);
  for (const k of Object.keys(boundaries)) delete boundaries[k];
  const start = performance.now();
  await publishAll(messages);
  const elapsed = (performance.now() - start) / 1000;
  await c.deleteQueue(queue);
  await c.close();
  return { confirmsPerSecond: messages / elapsed, boundaries };
}

async function latency(run: number): Promise<{ samples: number; p50: number; p99: number; p999: number; max: number; senderLagP99: number }> {
  const producer = await connect({ addresses: [address], clientName: "ts-bench-producer" });
  const consumer = await connect({ addresses: [address], clientName: "ts-bench-consumer" });
  const queue = `${tag}-latency-${run}`;
  await producer.declare(queue, { mode: "buffered" });
  const total = Math.round(rate * (seconds + 1));
  const warmupCount = rate; // the first second
  const latencies: number[] = [];
  const lags: number[] = [];
  let received = 0;
  const all = new Promise<void>((resolve) => {
    void consumer.subscribe(queue, {
      prefetch: 1000,
      handler: (d: Delivery) => {
        const now = performance.now();
        const view = new DataView(d.payload.buffer, d.payload.byteOffset, d.payload.byteLength);
        const index = view.getUint32(0);
        const intended = view.getFloat64(4);
        if (index >= warmupCount && !d.redelivered) latencies.push(now - intended);
        d.ack();
        if (++received >= total) resolve();
      },
    });
  });
  const t0 = performance.now() + 50;
  const confirms: Promise<unknown>[] = [];
  for (let i = 0; i < total; i++) {
    // Producer and consumer share this process's event loop, so the
    // sender must yield to it: sleep until the intended time (a timer,
    // which can fire late: that lateness counts in the latency), and when
    // behind, yield every 16 publishes so reads and writes go on.
    const intended = t0 + (i * 1000) / rate;
    const wait = intended - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    else if (i % 16 === 0) await new Promise((r) => setImmediate(r));
    const payload = new Uint8Array(payloadBytes);
    const view = new DataView(payload.buffer);
    view.setUint32(0, i);
    view.setFloat64(4, intended);
    if (i >= warmupCount) lags.push(performance.now() - intended);
    confirms.push(producer.publish(queue, payload));
  }
  await Promise.all(confirms);
  await Promise.race([all, new Promise((r) => setTimeout(r, 10_000))]);
  latencies.sort((a, b) => a - b);
  lags.sort((a, b) => a - b);
  await producer.deleteQueue(queue);
  await Promise.all([producer.close(), consumer.close()]);
  return { samples: latencies.length, p50: percentile(latencies, 50), p99: percentile(latencies, 99),
    p999: percentile(latencies, 99.9), max: latencies[latencies.length - 1] ?? NaN, senderLagP99: percentile(lags, 99) };
}

const report: { throughput: unknown[]; latency: unknown[]; settings: unknown } = {
  settings: { address, messages, warmup, rate, seconds, runs, payloadBytes, node: process.version }, throughput: [], latency: [],
};
for (let run = 1; run <= runs; run++) {
  const t = await throughput(run);
  report.throughput.push(t);
  console.log(`throughput run ${run}: ${t.confirmsPerSecond.toFixed(0)} confirms/s (${messages} x 1 KiB, buffered, boundaries ${JSON.stringify(t.boundaries)})`);
}
for (let run = 1; run <= runs; run++) {
  const l = await latency(run);
  report.latency.push(l);
  console.log(`latency run ${run} at ${rate}/s: publish-to-delivery p50 ${l.p50.toFixed(3)} ms, p99 ${l.p99.toFixed(3)} ms, ` +
    `p99.9 ${l.p999.toFixed(3)} ms, max ${l.max.toFixed(3)} ms (${l.samples} samples; sender lag p99 ${l.senderLagP99.toFixed(3)} ms)`);
}
if (jsonFile) writeFileSync(jsonFile, JSON.stringify(report, null, 2));
