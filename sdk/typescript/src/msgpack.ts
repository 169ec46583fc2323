// The msgpack subset of docs/protocol.md section 6: nil, bool, integers,
// floats, str, bin, array and map; no extension types, no 0xc1; at most 16
// levels below the top value; every length within the bytes that remain;
// exactly one value in the field. Integers decode as bigint (queue-info
// counters are u64), floats as number, str as string, bin as Uint8Array,
// maps as plain objects (keys must be str).

export type MsgpackValue =
  | null
  | boolean
  | bigint
  | number
  | string
  | Uint8Array
  | MsgpackValue[]
  | { [key: string]: MsgpackValue };

const MAX_DEPTH = 16;
const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

export class MsgpackError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MsgpackError";
  }
}

/** Decodes exactly one value that fills bytes. */
export function decodeMsgpack(bytes: Uint8Array): MsgpackValue {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let off = 0;
  const need = (n: number): void => {
    if (n < 0 || bytes.length - off < n) throw new MsgpackError(`msgpack value cut short at offset ${off}`);
  };
  const length = (width: number): number => {
    need(width);
    const v = width === 1 ? view.getUint8(off) : width === 2 ? view.getUint16(off) : view.getUint32(off);
    off += width;
    return v;
  };
  const str = (n: number): string => {
    need(n);
    const s = bytes.subarray(off, off + n);
    off += n;
    try {
      return strictUtf8.decode(s);
    } catch {
      throw new MsgpackError("msgpack string is not valid UTF-8");
    }
  };
  const value = (depth: number): MsgpackValue => {
    if (depth > MAX_DEPTH) throw new MsgpackError(`msgpack nesting deeper than ${MAX_DEPTH}`);
    need(1);
    const code = bytes[off++]!;
    if (code <= 0x7f) return BigInt(code);
    if (code >= 0xe0) return BigInt(code - 0x100);
    if (code <= 0x8f) return map(code & 0x0f, depth);
    if (code <= 0x9f) return array(code & 0x0f, depth);
    if (code <= 0xbf) return str(code & 0x1f);
    switch (code) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: case 0xc5: case 0xc6: {
        const n = length(code === 0xc4 ? 1 : code === 0xc5 ? 2 : 4);
        need(n);
        const out = bytes.slice(off, off + n);
        off += n;
        return out;
      }
      case 0xca: need(4); off += 4; return view.getFloat32(off - 4);
      case 0xcb: need(8); off += 8; return view.getFloat64(off - 8);
      case 0xcc: need(1); off += 1; return BigInt(view.getUint8(off - 1));
      case 0xcd: need(2); off += 2; return BigInt(view.getUint16(off - 2));
      case 0xce: need(4); off += 4; return BigInt(view.getUint32(off - 4));
      case 0xcf: need(8); off += 8; return view.getBigUint64(off - 8);
      case 0xd0: need(1); off += 1; return BigInt(view.getInt8(off - 1));
      case 0xd1: need(2); off += 2; return BigInt(view.getInt16(off - 2));
      case 0xd2: need(4); off += 4; return BigInt(view.getInt32(off - 4));
      case 0xd3: need(8); off += 8; return view.getBigInt64(off - 8);
      case 0xd9: return str(length(1));
      case 0xda: return str(length(2));
      case 0xdb: return str(length(4));
      case 0xdc: return array(length(2), depth);
      case 0xdd: return array(length(4), depth);
      case 0xde: return map(length(2), depth);
      case 0xdf: return map(length(4), depth);
    }
    throw new MsgpackError(`msgpack type byte 0x${code.toString(16).padStart(2, "0")} is not allowed`);
  };
  const array = (n: number, depth: number): MsgpackValue[] => {
    need(n); // every entry takes at least one byte
    const out: MsgpackValue[] = [];
    for (let i = 0; i < n; i++) out.push(value(depth + 1));
    return out;
  };
  const map = (n: number, depth: number): { [key: string]: MsgpackValue } => {
    need(2 * n);
    const out: { [key: string]: MsgpackValue } = {};
    for (let i = 0; i < n; i++) {
      const key = value(depth + 1);
      if (typeof key !== "string") throw new MsgpackError("a msgpack map key is not a str");
      out[key] = value(depth + 1);
    }
    return out;
  };
  const result = value(0);
  if (off !== bytes.length) throw new MsgpackError(`${bytes.length - off} bytes after the msgpack value`);
  return result;
}

/** Encodes a value; integers (bigint, or integral number) in their shortest form. */
export function encodeMsgpack(value: MsgpackValue | undefined): Uint8Array {
  const out: number[] = [];
  const pushBE = (v: bigint, bytes: number): void => {
    for (let i = bytes - 1; i >= 0; i--) out.push(Number((v >> BigInt(8 * i)) & 0xffn));
  };
  const header = (n: number, fix: number, c16: number, c32: number, fixMax = 15): void => {
    if (n <= fixMax) out.push(fix | n);
    else if (n <= 0xffff) { out.push(c16); pushBE(BigInt(n), 2); }
    else { out.push(c32); pushBE(BigInt(n), 4); }
  };
  const write = (v: MsgpackValue | undefined): void => {
    if (v === null || v === undefined) { out.push(0xc0); return; }
    if (typeof v === "boolean") { out.push(v ? 0xc3 : 0xc2); return; }
    if (typeof v === "number" && !Number.isInteger(v)) {
      const b = new DataView(new ArrayBuffer(8));
      b.setFloat64(0, v);
      out.push(0xcb, ...new Uint8Array(b.buffer));
      return;
    }
    if (typeof v === "number" || typeof v === "bigint") {
      const n = BigInt(v);
      if (n >= 0n) {
        if (n <= 0x7fn) out.push(Number(n));
        else if (n <= 0xffn) { out.push(0xcc); pushBE(n, 1); }
        else if (n <= 0xffffn) { out.push(0xcd); pushBE(n, 2); }
        else if (n <= 0xffffffffn) { out.push(0xce); pushBE(n, 4); }
        else { out.push(0xcf); pushBE(n, 8); }
      } else if (n >= -32n) out.push(Number(n + 0x100n));
      else if (n >= -128n) { out.push(0xd0); pushBE(n & 0xffn, 1); }
      else if (n >= -32768n) { out.push(0xd1); pushBE(n & 0xffffn, 2); }
      else if (n >= -2147483648n) { out.push(0xd2); pushBE(n & 0xffffffffn, 4); }
      else { out.push(0xd3); pushBE(n & 0xffffffffffffffffn, 8); }
      return;
    }
    if (typeof v === "string") {
      const bytes = utf8.encode(v);
      if (bytes.length <= 31) out.push(0xa0 | bytes.length);
      else if (bytes.length <= 0xff) out.push(0xd9, bytes.length);
      else if (bytes.length <= 0xffff) { out.push(0xda); pushBE(BigInt(bytes.length), 2); }
      else { out.push(0xdb); pushBE(BigInt(bytes.length), 4); }
      for (const b of bytes) out.push(b);
      return;
    }
    if (v instanceof Uint8Array) {
      if (v.length <= 0xff) out.push(0xc4, v.length);
      else if (v.length <= 0xffff) { out.push(0xc5); pushBE(BigInt(v.length), 2); }
      else { out.push(0xc6); pushBE(BigInt(v.length), 4); }
      for (const b of v) out.push(b);
      return;
    }
    if (Array.isArray(v)) {
      header(v.length, 0x90, 0xdc, 0xdd);
      for (const item of v) write(item);
      return;
    }
    const entries = Object.entries(v).filter(([, item]) => item !== undefined);
    header(entries.length, 0x80, 0xde, 0xdf);
    for (const [key, item] of entries) {
      write(key);
      write(item);
    }
  };
  write(value);
  return Uint8Array.from(out);
}
