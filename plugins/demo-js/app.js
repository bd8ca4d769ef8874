// demo-js: the demo plugin in JavaScript, the same behaviour as demo-rust and demo-python, which
// the host's integration tests rely on. The body is a JSON object; its keys, all optional, act in
// this order: log, print, grow_mb, trap, loop, echo, publish, outcome (see plugins/README.md).
import { handler, ok, retry, fail, info, config, publish, publishJson, PublishError } from "worker";

// Module-global, so 1 in a fresh instance: the tests tell fresh from reused instances by it.
let count = 0;

export const handle = handler((msg) => {
  count += 1;
  let body;
  try {
    body = msg.json();
  } catch {
    body = undefined;
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    return fail("not a JSON object");
  }

  if (typeof body.log === "string") info(body.log);
  if (typeof body.print === "string") console.log(body.print);
  if (typeof body.grow_mb === "number") grow(body.grow_mb);
  if (body.trap === true) throw new Error("trap requested");
  if (body.loop === true) for (;;);

  try {
    if (body.echo) echo(msg, body.echo);
    for (const p of body.publish ?? []) {
      publish(p.exchange, p.routing_key, p.body ?? "", { delayMs: p.delay_ms ?? 0 });
    }
  } catch (e) {
    if (e instanceof PublishError) return fail(`publish refused: ${e.kind}`);
    throw e;
  }

  const reason = body.reason ?? "requested";
  switch (body.outcome ?? "ok") {
    case "retry":
      return retry(reason, { afterMs: body.after_ms });
    case "fail":
      return fail(reason);
    default:
      return ok();
  }
});

// Allocates `mb` MiB and writes to every page, so the memory is really taken (memory_limit tests).
function grow(mb) {
  const bytes = new Uint8Array(mb * 1024 * 1024);
  for (let i = 0; i < bytes.length; i += 4096) bytes[i] = 1;
  return bytes;
}

// Publishes what this call saw, as JSON, to echo.exchange with echo.routing_key.
function echo(msg, { exchange, routing_key }) {
  publishJson(exchange, routing_key, {
    config: config(),
    count,
    attempt: msg.attempt,
    routing_key: msg.routingKey,
    original_routing_key: msg.originalRoutingKey,
    message_id: msg.messageId,
    headers: msg.headers,
    body_len: msg.body.length,
  });
}
