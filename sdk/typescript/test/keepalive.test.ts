// The keepalive rule, look by look with times of the test's own
// (src/keepalive.ts): a ping after a quarter interval of silence, a close
// only once that ping is unanswered and nothing came for a whole interval,
// and any byte from the node counts as a sign of life.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { KeepaliveWatch, keepaliveTickMs } from "../src/keepalive.js";

describe("keepalive watch", () => {
  it("looks every quarter interval, at least every millisecond", () => {
    assert.equal(keepaliveTickMs(1000), 250);
    assert.equal(keepaliveTickMs(2), 1);
  });

  it("pings after a quarter of silence and closes after a whole interval of silence", () => {
    const watch = new KeepaliveWatch(1000, 0, 0);
    assert.equal(watch.look(100, 0), "none");
    assert.equal(watch.look(250, 0), "ping");
    assert.equal(watch.look(500, 0), "none", "one ping at a time");
    assert.equal(watch.look(750, 0), "none");
    assert.equal(watch.look(999, 0), "none");
    assert.equal(watch.look(1000, 0), "close");
  });

  it("keeps a node that sends other frames while its pong is late", () => {
    const watch = new KeepaliveWatch(1000, 0, 0);
    assert.equal(watch.look(250, 0), "ping");
    assert.equal(watch.look(900, 10), "none", "a delivery came");
    assert.equal(watch.look(1500, 10), "none", "600 ms since the delivery");
    assert.equal(watch.look(1900, 10), "close", "a whole interval since the last byte");
  });

  it("pings again only once the last ping was answered", () => {
    const watch = new KeepaliveWatch(1000, 0, 0);
    assert.equal(watch.look(250, 0), "ping");
    watch.answered();
    assert.equal(watch.look(260, 8), "none", "the pong's bytes reset the silence");
    assert.equal(watch.look(510, 8), "ping");
  });

  it("finds a node that fell silent between one and one and a quarter intervals after its last byte", () => {
    const intervalMs = 1000;
    const tickMs = keepaliveTickMs(intervalMs);
    for (const lastByteMs of [0, 1, 124, 249, 600]) {
      const watch = new KeepaliveWatch(intervalMs, 0, 0);
      let closedAt = -1;
      for (let now = tickMs; now <= 5000 && closedAt < 0; now += tickMs) {
        const heard = lastByteMs > 0 && now >= lastByteMs ? 1 : 0; // one byte, at lastByteMs; no pong ever
        if (watch.look(now, heard) === "close") closedAt = now;
      }
      assert.ok(closedAt >= lastByteMs + intervalMs && closedAt <= lastByteMs + intervalMs + tickMs,
        `last byte at ${lastByteMs} ms, closed at ${closedAt} ms`);
    }
  });
});
