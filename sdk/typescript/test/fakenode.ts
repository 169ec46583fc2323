// A scripted node for the SDK's tests of what a real single node cannot
// show on demand: a connection that drops with requests pending, a node
// that restarts, redirects, an older node's FDK1, a garbage frame.

import net from "node:net";
import { Encoder, decodeBody, encodeFrame, type Frame } from "../src/codec.js";

export interface FakeConnection {
  send(frame: Frame): void;
  sendRaw(bytes: Uint8Array): void;
  close(): void;
  readonly received: Frame[];
}

export type FakeHandler = (frame: Frame, conn: FakeConnection) => void;

/** Answers hello with hello-ok (session resumed when resumed() says so), hands every other frame to the handler. */
export class FakeNode {
  readonly connections: FakeConnection[] = [];
  readonly hellos: Frame[] = [];
  private readonly server: net.Server;
  private sessions = 0;

  constructor(private readonly handler: FakeHandler, private readonly resumed: () => boolean = () => false) {
    this.server = net.createServer((socket) => this.accept(socket));
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const address = this.server.address() as net.AddressInfo;
    return `127.0.0.1:${address.port}`;
  }

  async close(): Promise<void> {
    for (const c of this.connections) c.close();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(socket: net.Socket): void {
    let buffered = Buffer.alloc(0);
    const conn: FakeConnection = {
      received: [],
      send: (frame) => {
        const e = new Encoder();
        encodeFrame(e, frame);
        if (!socket.destroyed) socket.write(Buffer.from(e.bytesView()));
      },
      sendRaw: (bytes) => {
        if (!socket.destroyed) socket.write(bytes);
      },
      close: () => socket.destroy(),
    };
    this.connections.push(conn);
    socket.on("error", () => {});
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 8 && buffered.length >= 8 + buffered.readUInt32BE(4)) {
        const length = buffered.readUInt32BE(4);
        const tag = buffered.toString("latin1", 0, 4);
        const frame = decodeBody(tag, Buffer.from(buffered.subarray(8, 8 + length)));
        buffered = buffered.subarray(8 + length);
        conn.received.push(frame);
        if (frame.tag === "FHL1") {
          this.hellos.push(frame);
          this.sessions++;
          conn.send({ tag: "FHO1", version: 1, nodeId: "fake", sessionId: `fake-${this.sessions}`, session: this.resumed() ? 1 : 0,
            maxBodyBytes: 16 << 20, serverVersion: "fake" });
          continue;
        }
        this.handler(frame, conn);
      }
    });
  }
}
