// Publishes ten messages to a durable queue and consumes them, against
// the node `make run` starts (127.0.0.1:7420; FIBRIL_ADDR overrides it).
//
//   make run                                   # in one terminal
//   cd sdk/typescript && npm ci && npm run example

import { connect } from "../src/index.js";

const client = await connect({
  addresses: [process.env.FIBRIL_ADDR ?? "127.0.0.1:7420"],
  clientName: "example",
  onDisconnect: (address, err) => console.error(`lost ${address}: ${err.message}; reconnecting`),
});
console.log(`connected to node ${client.session?.nodeId} (session ${client.session?.sessionId})`);

const declared = await client.declare("example-orders", { mode: "durable", maxDeliveries: 5, deadLetterQueue: "example-orders.dead" });
console.log(`queue example-orders: ${declared.mode}${declared.created ? ", created" : ""}`, declared.warnings);

// Pipelined: all ten leave at once; each promise resolves with its confirm.
const confirms = await Promise.all(
  Array.from({ length: 10 }, (_, i) => client.publish("example-orders", JSON.stringify({ order: i }), { messageId: `order-${i}` })),
);
console.log(`confirmed ${confirms.length}, each at the ${confirms[0]!.boundary} boundary`);

const subscription = await client.subscribe("example-orders", { prefetch: 4 });
let seen = 0;
for await (const delivery of subscription) {
  console.log(`${delivery.messageId}: ${delivery.text()} (attempt ${delivery.attempt}${delivery.redelivered ? ", redelivered" : ""})`);
  delivery.ack();
  if (++seen === 10) break; // leaving the loop unsubscribes
}

const info = await client.queueInfo("example-orders");
console.log(`ready ${info.ready}, leased ${info.leased}, written_next ${info.writtenNext}, durable_next ${info.durableNext}`);
await client.close();
