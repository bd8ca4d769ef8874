// demo-js: the demo plugin in JavaScript, the same behaviour as demo-rust and demo-python, which
// the host's integration tests rely on. The body is a JSON object; its keys, all optional, act in
// this order: log, print, grow_mb, trap, loop, (the granted capabilities), http, echo, publish,
// outcome (see plugins/README.md and demo-python/app.py).
//
// Capabilities, when granted (without a grant a call answers `denied`: logged at debug, skipped):
// kv counts messages per original routing key ("seen:<key>", echo `seen`); sql writes one audit
// row per message, committed only when the answer is ok (echo `audited`: the rows now). A store
// or database that is down answers retry, and so does a constraint error on the audit. `http: {url, method, body, headers}` fetches, and the
// answer ({status, body} or {error}) is logged and echoed; only then is the handler async.
import {
  handler, ok, retry, fail, info, debug, config, publish, publishJson, PublishError,
  kv, KvError, sql, SqlError,
} from "worker";

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

  let granted;
  try {
    granted = { seen: countSeen(msg), audited: audit(msg) };
  } catch (e) {
    if (e instanceof Answer) return e.outcome;
    throw e;
  }
  if (body.http) return fetchReport(body.http).then((http) => finish(msg, body, { ...granted, http }));
  return finish(msg, body, granted);
});

// The rest of a call, after the capabilities: echo, publish, outcome.
function finish(msg, body, granted) {
  try {
    if (body.echo) echo(msg, body.echo, granted);
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
}

// An outcome decided deep down (a store that is down), thrown up to the handler.
class Answer {
  constructor(outcome) {
    this.outcome = outcome;
  }
}

// The audit table, made by the plugin itself: the same DDL suits SQLite, MySQL and PostgreSQL;
// the `$1` placeholders suit SQLite and PostgreSQL (MySQL takes `?`).
export const AUDIT_TABLE = `CREATE TABLE IF NOT EXISTS demo_audit (
    routing_key VARCHAR(255) NOT NULL,
    message_id VARCHAR(255),
    attempt INTEGER NOT NULL,
    body_len INTEGER NOT NULL,
    handled_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
)`;
export const AUDIT_ROW = "INSERT INTO demo_audit (routing_key, message_id, attempt, body_len) VALUES ($1, $2, $3, $4)";
export const AUDIT_COUNT = "SELECT COUNT(*) FROM demo_audit";

// This message's number among those of its original routing key; null without a kv grant.
function countSeen(msg) {
  try {
    return kv.increment(`seen:${msg.originalRoutingKey}`);
  } catch (e) {
    if (!(e instanceof KvError)) throw e;
    if (e.kind === "denied") {
      debug("kv not granted: messages are not counted");
      return null;
    }
    if (e.kind === "unavailable") throw new Answer(retry(`kv unavailable: ${e.detail}`));
    throw e;
  }
}

// Writes this message's audit row; the rows in the table then. Null without a sql grant.
function audit(msg) {
  try {
    sql.execute(AUDIT_TABLE);
    sql.execute(AUDIT_ROW, [msg.originalRoutingKey, msg.messageId, msg.attempt, msg.body.length]);
    return Number(sql.query(AUDIT_COUNT).rows[0]?.[0] ?? 0);
  } catch (e) {
    if (!(e instanceof SqlError)) throw e;
    if (e.kind === "denied") {
      debug("sql not granted: no audit row");
      return null;
    }
    if (e.kind === "unavailable") throw new Answer(retry(`sql unavailable: ${e.detail}`));
    // A constraint: the table made by another message meanwhile (PostgreSQL); try again.
    const answer = e.kind === "constraint" ? retry : fail;
    throw new Answer(answer(`audit: ${e.kind}: ${e.detail}`));
  }
}

// Sends the request the body describes; its answer (status and text) or its error.
async function fetchReport({ url, method = "GET", body, headers }) {
  let report;
  try {
    const answer = await fetch(url, { method, body, headers });
    report = { status: answer.status, body: await answer.text() };
  } catch (e) {
    report = { error: `${e.name}: ${e.message}` };
  }
  info(`http ${method} ${url}: ${report.status ?? report.error}`);
  return report;
}

// Allocates `mb` MiB and writes to every page, so the memory is really taken (memory_limit tests).
function grow(mb) {
  const bytes = new Uint8Array(mb * 1024 * 1024);
  for (let i = 0; i < bytes.length; i += 4096) bytes[i] = 1;
  return bytes;
}

// Publishes what this call saw, as JSON, to echo.exchange with echo.routing_key.
function echo(msg, { exchange, routing_key }, { seen, audited, http }) {
  publishJson(exchange, routing_key, {
    config: config(),
    count,
    attempt: msg.attempt,
    routing_key: msg.routingKey,
    original_routing_key: msg.originalRoutingKey,
    message_id: msg.messageId,
    headers: msg.headers,
    body_len: msg.body.length,
    seen,
    audited,
    ...(http === undefined ? {} : { http }),
  });
}
