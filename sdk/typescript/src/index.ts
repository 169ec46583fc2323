// Fibril's TypeScript SDK. docs/protocol.md is the contract it implements;
// see README.md beside this package for a tour.
export { connect, Client } from "./client.js";
export type { ClientOptions, Confirm, DeclareResult, ListOptions, ModeChange, PublishOptions, SubscribeOptions } from "./client.js";
export { Subscription, Delivery } from "./subscription.js";
export type { DeliveryHandler } from "./subscription.js";
export type { Session } from "./link.js";
export type { Mode, ModeChangeInfo, Overflow, QueueConfig, QueueInfo, QueueOptions, ReplicaInfo } from "./info.js";
export {
  AlreadySettledError, ClientClosedError, Codes, ConnectionLostError, KeepaliveTimeoutError, MessageTooLargeError, ServerError,
  StaleDeliveryError, TooManyRedirectsError, codeName, isRetryable,
} from "./errors.js";
export type { CodeName } from "./errors.js";
export * as wire from "./codec.js";
export { decodeMsgpack, encodeMsgpack } from "./msgpack.js";
export type { MsgpackValue } from "./msgpack.js";
