// The codec against the golden vectors of testdata/wire (docs/protocol.md
// section 10): each decodes, encodes back to the same bytes (msgpack
// bodies compared as values), and refuses every proper prefix of its body
// and one extra byte.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Encoder, FrameDecodeError, decodeBody, encodeFrame, tagName, type Frame } from "../src/codec.js";
import { MsgpackError, decodeMsgpack, encodeMsgpack } from "../src/msgpack.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const wireDir = path.resolve(here, "../../../../testdata/wire");

function vector(file: string): Buffer {
  const hex = readFileSync(path.join(wireDir, file), "utf8").split("\n").map((line) => line.replace(/#.*/, "")).join("").replace(/\s+/g, "");
  return Buffer.from(hex, "hex");
}

function encode(frame: Frame): Buffer {
  const e = new Encoder();
  encodeFrame(e, frame);
  return Buffer.from(e.bytesView());
}

// Node-to-node frames (FQ.., FX..) belong to the cluster's peer links, not
// to the client protocol this codec implements.
const vectors = readdirSync(wireDir).filter((f) => f.endsWith(".hex") && !f.startsWith("trace") &&
  !f.startsWith("FQ") && !f.startsWith("FX"));

describe("golden vectors", () => {
  it("has a vector for every frame kind", () => assert.ok(vectors.length >= 29, `${vectors.length} vectors`));
  for (const file of vectors) {
    it(file, () => {
      const bytes = vector(file);
      const tag = bytes.toString("latin1", 0, 4);
      const body = bytes.subarray(8);
      assert.equal(bytes.readUInt32BE(4), body.length, "envelope length");
      const frame = decodeBody(tag, body);
      const again = encode(frame);
      if (tag === "FIR1" || tag === "FLR1") {
        assert.deepEqual(decodeBody(tag, again.subarray(8)), frame);
      } else {
        assert.equal(again.toString("hex"), bytes.toString("hex"));
      }
      for (let n = 0; n < body.length; n++) {
        if (tag === "FDC1" && file.includes("mode") && n === body.length - 1) continue; // the mode-less declare
        assert.throws(() => decodeBody(tag, body.subarray(0, n)), FrameDecodeError, `prefix of ${n} bytes accepted`);
      }
      assert.throws(() => decodeBody(tag, Buffer.concat([body, Buffer.from([0])])), FrameDecodeError, "an extra byte accepted");
    });
  }
});

describe("decoding rules", () => {
  it("refuses a zero request id, a bool out of its set and invalid UTF-8", () => {
    assert.throws(() => decodeBody("FPI1", Buffer.alloc(8)), /must not be 0/);
    assert.throws(() => decodeBody("FDK1", Buffer.from("000000000000000102", "hex")), /bool/);
    assert.throws(() => decodeBody("FIQ1", Buffer.from("00000000000000010002c328", "hex")), /UTF-8/);
  });
  it("refuses a count the body cannot hold before allocating", () => {
    assert.throws(() => decodeBody("FAK1", Buffer.from("0000000000000001ffffffff", "hex")), /cannot fit/);
  });
  it("refuses publish numbers that do not increase within a frame", () => {
    const frame: Frame = { tag: "FPB1", queue: "q", messages: [
      { seq: 5n, messageId: "", headers: [], payload: new Uint8Array() },
      { seq: 5n, messageId: "", headers: [], payload: new Uint8Array() }] };
    assert.throws(() => decodeBody("FPB1", encode(frame).subarray(8)), /does not increase/);
  });
  it("keeps 64-bit ids exact past 2^53", () => {
    const id = (1n << 63n) + 12345n;
    const frame = decodeBody("FSK1", encode({ tag: "FSK1", requestId: id, subscriptionId: id + 1n, prefetch: 7 }).subarray(8));
    assert.deepEqual(frame, { tag: "FSK1", requestId: id, subscriptionId: id + 1n, prefetch: 7 });
  });
  it("names tags in quotes when printable and in hex otherwise", () => {
    assert.equal(tagName("ZZZ9"), "ZZZ9");
    assert.equal(tagName(Buffer.from("00ff1234", "hex")), "0x00ff1234");
    assert.equal(tagName("FP 1"), "0x46502031");
  });
});

describe("msgpack subset", () => {
  it("round-trips the values of queue info", () => {
    const value = { name: "q", ready: 12n, fenced: false, options: { lease_timeout_ms: 30000n }, replicas: [{ node: "n1" }], big: (1n << 64n) - 1n, neg: -40n };
    assert.deepEqual(decodeMsgpack(encodeMsgpack(value)), value);
  });
  it("refuses trailing bytes, extension types, 0xc1, deep nesting and lengths past the end", () => {
    for (const hex of ["80c0", "d40100", "c1", "9".padEnd(2, "1").repeat(17) + "00", "dc0005", "a5abc", "81a16b"]) {
      assert.throws(() => decodeMsgpack(Buffer.from(hex.length % 2 ? hex + "0" : hex, "hex")), MsgpackError, hex);
    }
  });
  it("reads every integer width", () => {
    for (const [hex, want] of [["cc05", 5n], ["cd0005", 5n], ["ce00000005", 5n], ["cf0000000000000005", 5n], ["d0fb", -5n], ["fb", -5n], ["d3fffffffffffffffb", -5n]] as const) {
      assert.equal(decodeMsgpack(Buffer.from(hex, "hex")), want, hex);
    }
  });
});
