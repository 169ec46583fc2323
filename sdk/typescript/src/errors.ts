// Errors the SDK reports. A refusal by the node is a ServerError carrying
// the protocol's stable code (docs/protocol.md section 7); act on `code`,
// never on `message`. Everything else is one of the classes below.

/** The error codes of protocol version 1, by name. */
export const Codes = {
  malformed_frame: 100,
  frame_too_large: 101,
  unknown_frame: 102,
  unsupported_version: 103,
  unauthorized: 104,
  protocol_violation: 105,
  shutting_down: 106,
  connection_limit: 107,
  internal: 200,
  unknown_queue: 201,
  invalid_name: 202,
  invalid_options: 203,
  mode_conflict: 204,
  not_owner: 205,
  fenced: 206,
  limit_reached: 207,
  unknown_subscription: 208,
  unknown_delivery_tag: 209,
  storage_failure: 210,
  unavailable: 211,
  invalid_request: 212,
  overloaded: 213,
  forbidden: 214,
  outcome_unknown: 215,
  resource_limit: 216,
  mode_change_pending: 217,
} as const;

export type CodeName = keyof typeof Codes;

const names = new Map<number, CodeName>(Object.entries(Codes).map(([name, code]) => [code, name as CodeName]));

/** Codes for which the same request, sent again later (or where a redirect points), may succeed. */
const retryableCodes = new Set<number>([
  Codes.shutting_down, Codes.connection_limit, Codes.not_owner, Codes.fenced, Codes.limit_reached, Codes.storage_failure,
  Codes.unavailable, Codes.overloaded, Codes.outcome_unknown, Codes.mode_change_pending,
]);

/** The name of a code, or `code_<n>` for one this SDK does not know. */
export function codeName(code: number): string {
  return names.get(code) ?? `code_${code}`;
}

/** A refusal by the node: an error frame, a negative confirm, or the end of a subscription. */
export class ServerError extends Error {
  /** The code's name, e.g. "limit_reached". */
  readonly codeName: string;

  constructor(readonly code: number, message: string) {
    super(`${codeName(code)} (${code}): ${message}`);
    this.name = "ServerError";
    this.codeName = codeName(code);
  }

  /** Whether the same request may succeed if sent again later (unknown codes: no). */
  get retryable(): boolean {
    return retryableCodes.has(this.code);
  }

  /** Codes 100-199 close the connection. */
  get closesConnection(): boolean {
    return this.code >= 100 && this.code < 200;
  }
}

/**
 * The connection that carried a request ended before its answer came, or
 * there is no connection right now. A publish that fails with it has an
 * unknown outcome: it may or may not have been stored.
 */
export class ConnectionLostError extends Error {
  readonly retryable = true;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ConnectionLostError";
  }
}

/**
 * The keepalive closed the connection: a ping went unanswered and nothing
 * came from the node for a whole interval (the node is paused, cut off or
 * stalled). The link's reconnect
 * tries the next address first: a silent node's kernel usually still
 * accepts connections that its process never answers.
 */
export class KeepaliveTimeoutError extends ConnectionLostError {
  constructor(message: string) {
    super(message);
    this.name = "KeepaliveTimeoutError";
  }
}

/** The client was closed. */
export class ClientClosedError extends Error {
  readonly retryable = false;
  constructor() {
    super("the client is closed");
    this.name = "ClientClosedError";
  }
}

/** A settle named a delivery whose subscription or connection has ended; the node delivers it again. */
export class StaleDeliveryError extends Error {
  constructor() {
    super("the delivery is stale: its subscription or connection ended, and the node will deliver it again");
    this.name = "StaleDeliveryError";
  }
}

/** The delivery was already acked, nacked, released or discarded. */
export class AlreadySettledError extends Error {
  constructor() {
    super("the delivery was already settled");
    this.name = "AlreadySettledError";
  }
}

/** A request was redirected more often than `maxRedirects` allows. */
export class TooManyRedirectsError extends Error {
  constructor(queue: string, hops: number) {
    super(`queue ${JSON.stringify(queue)}: redirected ${hops} times; the nodes disagree about its owner`);
    this.name = "TooManyRedirectsError";
  }
}

/** A message cannot fit one publish frame within the node's body limit. */
export class MessageTooLargeError extends Error {
  constructor(bytes: number, limit: number) {
    super(`a publish of ${bytes} bytes cannot fit the node's max_body_bytes of ${limit}`);
    this.name = "MessageTooLargeError";
  }
}

/** Whether an error says the same operation may succeed if tried again. */
export function isRetryable(err: unknown): boolean {
  if (err instanceof ServerError) return err.retryable;
  return err instanceof ConnectionLostError;
}
