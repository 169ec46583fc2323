// The keepalive rule of a connection, as a pure class driven by the
// connection's timer (and by tests, with times of their own).
//
// The connection looks every quarter of the keepalive interval. It pings
// once nothing came from the node for a quarter interval and no ping of its
// own is unanswered; it ends the connection only when a ping is unanswered
// and nothing at all came from the node for a whole interval. A node that
// sends other frames (deliveries, confirms, a long reply the pong waits
// behind) is there, however late the pong: the node takes any frame for a
// sign of life the same way (docs/protocol.md 4.7). A node that went away
// or stopped (a pause, a cut network) sends nothing, and is found between
// one and one and a quarter intervals after its last byte. The Go SDK
// keeps the same rule (client/link.go, keepaliveWatch).
//
// Invariant: heardAtMs is the look (or the start) at which heardBytes, the
// count of bytes read from the node, last changed.

/** How often a connection is looked at: a quarter of the interval, at least 1 ms. */
export function keepaliveTickMs(intervalMs: number): number {
  return Math.max(Math.floor(intervalMs / 4), 1);
}

/** What one look decided. */
export type KeepaliveAction = "none" | "ping" | "close";

export class KeepaliveWatch {
  private heardBytes: number;
  private heardAtMs: number;
  private pingOutstanding = false;

  constructor(private readonly intervalMs: number, heardBytes: number, nowMs: number) {
    this.heardBytes = heardBytes;
    this.heardAtMs = nowMs;
  }

  /**
   * One look at the connection at nowMs, given the bytes read from the node
   * so far: close when a ping is unanswered and nothing came for a whole
   * interval; ping when none is unanswered and nothing came for a quarter
   * interval (the caller sends it); otherwise nothing.
   */
  look(nowMs: number, heardBytes: number): KeepaliveAction {
    if (heardBytes !== this.heardBytes) {
      this.heardBytes = heardBytes;
      this.heardAtMs = nowMs;
    }
    const silentMs = nowMs - this.heardAtMs;
    if (this.pingOutstanding) return silentMs >= this.intervalMs ? "close" : "none";
    if (silentMs >= keepaliveTickMs(this.intervalMs)) {
      this.pingOutstanding = true;
      return "ping";
    }
    return "none";
  }

  /** The outstanding ping was answered. */
  answered(): void {
    this.pingOutstanding = false;
  }
}
