// The `worker` module plugins import: write a worker-host handler in JavaScript.
//
//     import { handler, ok, retry, fail, info, publishJson, config } from "worker";
//     export const handle = handler((msg) => { info("got", msg.routingKey); return ok(); });
//
// Built into a component of worker:plugin/handler@2.0.0 by scripts/build-js.sh; tested natively
// with `worker/testing`.
export { handler } from "./handler.js";
export { Message } from "./message.js";
export { ok, retry, fail } from "./outcome.js";
export { publish, publishJson, PublishError } from "./publish.js";
export { log, trace, debug, info, warn, error, config } from "./host.js";
export { KvError } from "./kv.js";
export { SqlError } from "./sql.js";
export * as kv from "./kv.js";
export * as sql from "./sql.js";
